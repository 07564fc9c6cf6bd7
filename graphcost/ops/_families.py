"""The explicit list of op-family modules; each registers its rules on import."""

import importlib

FAMILIES = (
    "linalg",  # MatMul, Gemm, Einsum
    "conv",  # Conv, ConvTranspose
    "elementwise",  # arithmetic, activations, comparisons, casts
    "pool",  # MaxPool, AveragePool, global pools, RoiAlign...
    "norm",  # BatchNormalization, LayerNormalization, InstanceNormalization, GroupNormalization...
    "reduce",  # Reduce*, ArgMax/ArgMin, Softmax family, CumSum, TopK...
    "movement",  # Reshape/Transpose/Concat/Slice/Gather...: views and copies, zero FLOPs on purpose
    "attention",  # Attention (opset 23+), FlexAttention, RotaryEmbedding, LinearAttention, SwiGLU
    "misc",  # the rest of ai.onnx: random, sequences, signal, NMS, string ops, optimizers...
    "ml",  # ai.onnx.ml: linear models, SVMs, trees, scalers, encoders
    "rnn",  # LSTM, GRU, RNN
    "quantized",  # QLinearConv, QLinearMatMul, MatMulInteger, ConvInteger, (De)QuantizeLinear...
    "microsoft",  # com.microsoft ops that onnxruntime emits
    "control",  # If, Loop, Scan: costed through their bodies by the costs pass
)

for _name in FAMILIES:
    importlib.import_module(f"graphcost.ops.{_name}")
