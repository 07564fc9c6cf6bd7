"""Output shapes for ops that neither onnx nor onnx-shape-inference can type.

onnx has no schemas for the ``com.microsoft`` ops onnxruntime's optimizers write (FusedMatMul, FusedConv,
the NCHWc layout ops, the QLinear* ops of its quantizer), and the symbolic engine handles only some
of them. Without an output shape, every node downstream loses its shape too. These rules give the output
shape from the input shapes and attributes; the shapes pass seeds them and runs inference again.

A shape here is ``(elem_type, dims)``: ``dims`` is None when the rank is unknown, else a list of ints,
dim names (str) or None (an unknown dim). NCHWc tensors are shaped as their NCHW equivalent: the channel
padding to the block size is not modelled (ReorderOutput's ``channels`` gives the real count).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import onnx

DimT = int | str | None
TShape = tuple[int, list[DimT] | None]
ShapeFn = Callable[[onnx.NodeProto, Sequence[TShape | None]], list[TShape | None]]

MS = "com.microsoft"
NCHWC = "com.microsoft.nchwc"
FLOAT = onnx.TensorProto.FLOAT

_RULES: dict[tuple[str, str], ShapeFn] = {}


def shape_rule(op_types: Sequence[str], domain: str) -> Callable[[ShapeFn], ShapeFn]:
    def deco(fn: ShapeFn) -> ShapeFn:
        for op in op_types:
            _RULES[(domain, op)] = fn
        return fn

    return deco


def lookup(domain: str, op_type: str) -> ShapeFn | None:
    return _RULES.get((domain or "ai.onnx", op_type))


def _attr(node: onnx.NodeProto, name: str, default: object = None) -> object:
    for a in node.attribute:
        if a.name == name:
            value = onnx.helper.get_attribute_value(a)
            return value.decode() if isinstance(value, bytes) else value
    return default


def _broadcast(a: list[DimT], b: list[DimT]) -> list[DimT]:
    out: list[DimT] = []
    for i in range(max(len(a), len(b))):
        x = a[len(a) - 1 - i] if i < len(a) else 1
        y = b[len(b) - 1 - i] if i < len(b) else 1
        if x == 1:
            out.append(y)
        elif y == 1 or x == y:
            out.append(x)
        elif isinstance(x, int) and isinstance(y, int):
            raise ValueError(f"cannot broadcast {a} and {b}")
        else:
            out.append(x if isinstance(x, str) else y)  # a named dim that must equal the other
    return out[::-1]


def _matmul(a: list[DimT], b: list[DimT]) -> list[DimT]:
    """numpy matmul shape: 1-D operands are promoted and the promoted axis dropped."""
    a2 = [1, *a] if len(a) == 1 else a
    b2 = [*b, 1] if len(b) == 1 else b
    batch = _broadcast(a2[:-2], b2[:-2])
    out = [*batch, a2[-2], b2[-1]]
    if len(a) == 1:
        out.pop(-2)
    if len(b) == 1:
        out.pop(-1)
    return out


def _spatial(size: DimT, k: int, stride: int, pad: int, dilation: int, ceil: bool = False) -> DimT:
    if not isinstance(size, int):
        return None
    span = dilation * (k - 1) + 1
    num = size + pad - span
    return (-(-num // stride) if ceil else num // stride) + 1


def _window_out(node: onnx.NodeProto, x: list[DimT], kernel: list[int], cout: DimT) -> list[DimT]:
    """Output of a conv or pool window over NCHW input ``x`` (pads, strides, dilations, auto_pad)."""
    r = len(kernel)
    strides = list(_attr(node, "strides", [1] * r))  # type: ignore[call-overload]
    dil = list(_attr(node, "dilations", [1] * r))  # type: ignore[call-overload]
    pads = list(_attr(node, "pads", [0] * (2 * r)))  # type: ignore[call-overload]
    auto = str(_attr(node, "auto_pad", "NOTSET"))
    ceil = bool(_attr(node, "ceil_mode", 0))
    out: list[DimT] = [x[0], cout]
    for i in range(r):
        size = x[2 + i]
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            out.append(None if not isinstance(size, int) else -(-size // strides[i]))
        elif auto == "VALID":
            out.append(_spatial(size, kernel[i], strides[i], 0, dil[i], ceil))
        else:
            out.append(_spatial(size, kernel[i], strides[i], pads[i] + pads[i + r], dil[i], ceil))
    return out


def _dims(s: TShape | None) -> list[DimT] | None:
    return None if s is None else s[1]


@shape_rule(("Gelu", "FastGelu", "BiasGelu", "QuickGelu", "BiasAdd", "BiasSoftmax", "RotaryEmbedding",
             "SkipLayerNormalization", "SkipSimplifiedLayerNormalization", "LayerNormalization",
             "SimplifiedLayerNormalization", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearSoftmax",
             "QuantizeLinear", "DequantizeLinear"), MS)
@shape_rule(("SimplifiedLayerNormalization",), "ai.onnx")
@shape_rule(("ReorderInput",), NCHWC)
def _same_as_first(node: onnx.NodeProto, ins: Sequence[TShape | None]) -> list[TShape | None]:
    first = ins[0] if ins else None
    if first is None:
        return [None]
    elem = first[0]
    if node.op_type == "DequantizeLinear" and len(ins) > 1 and ins[1] is not None:
        elem = ins[1][0]  # the scale's type
    return [(elem, first[1])]


@shape_rule(("FusedMatMul",), MS)
def _fused_matmul(node: onnx.NodeProto, ins: Sequence[TShape | None]) -> list[TShape | None]:
    a, b = _dims(ins[0]), _dims(ins[1]) if len(ins) > 1 else None
    if a is None or b is None or _attr(node, "transBatchA", 0) or _attr(node, "transBatchB", 0):
        return [None]
    if _attr(node, "transA", 0) and len(a) >= 2:
        a = [*a[:-2], a[-1], a[-2]]
    if _attr(node, "transB", 0) and len(b) >= 2:
        b = [*b[:-2], b[-1], b[-2]]
    return [(ins[0][0], _matmul(a, b))]  # type: ignore[index]


@shape_rule(("MatMulIntegerToFloat", "DynamicQuantizeMatMul"), MS)
def _matmul_to_float(node: onnx.NodeProto, ins: Sequence[TShape | None]) -> list[TShape | None]:
    a, b = _dims(ins[0]), _dims(ins[1]) if len(ins) > 1 else None
    if a is None or b is None:
        return [None]
    return [(FLOAT, _matmul(a, b))]


@shape_rule(("MatMulNBits",), MS)
def _matmul_nbits(node: onnx.NodeProto, ins: Sequence[TShape | None]) -> list[TShape | None]:
    a = _dims(ins[0])
    n = _attr(node, "N")
    if a is None or not isinstance(n, int):
        return [None]
    return [(ins[0][0], [*a[:-1], n])]  # type: ignore[index]


@shape_rule(("FusedGemm", "QGemm"), MS)
def _gemm(node: onnx.NodeProto, ins: Sequence[TShape | None]) -> list[TShape | None]:
    b_slot = 3 if node.op_type == "QGemm" else 1
    a, b = _dims(ins[0]), _dims(ins[b_slot]) if len(ins) > b_slot else None
    if a is None or b is None or len(a) != 2 or len(b) != 2:
        return [None]
    m = a[1] if _attr(node, "transA", 0) else a[0]
    n = b[0] if _attr(node, "transB", 0) else b[1]
    elem = ins[0][0]  # type: ignore[index]
    if node.op_type == "QGemm":
        has_y_scale = len(node.input) > 7 and bool(node.input[7])
        y_zp = ins[8] if len(ins) > 8 else None
        elem = (y_zp[0] if y_zp is not None else elem) if has_y_scale else FLOAT
    return [(elem, [m, n])]


@shape_rule(("FusedConv", "NhwcConv"), MS)
@shape_rule(("Conv",), NCHWC)
def _conv(node: onnx.NodeProto, ins: Sequence[TShape | None]) -> list[TShape | None]:
    x, w = _dims(ins[0]), _dims(ins[1]) if len(ins) > 1 else None
    if x is None or w is None or len(x) < 3 or not all(isinstance(k, int) for k in w[2:]):
        return [None]
    kernel = [int(k) for k in w[2:]]  # type: ignore[arg-type]
    if node.op_type == "NhwcConv":
        nchw = [x[0], x[-1], *x[1:-1]]
        out = _window_out(node, nchw, kernel, w[0])
        return [(ins[0][0], [out[0], *out[2:], out[1]])]  # type: ignore[index]
    return [(ins[0][0], _window_out(node, x, kernel, w[0]))]  # type: ignore[index]


@shape_rule(("MaxPool", "AveragePool"), NCHWC)
@shape_rule(("QLinearAveragePool",), MS)
def _pool(node: onnx.NodeProto, ins: Sequence[TShape | None]) -> list[TShape | None]:
    x = _dims(ins[0])
    kernel = _attr(node, "kernel_shape")
    if x is None or not isinstance(kernel, list):
        return [None]
    if _attr(node, "channels_last", 0):
        nchw = [x[0], x[-1], *x[1:-1]]
        out = _window_out(node, nchw, kernel, nchw[1])
        return [(ins[0][0], [out[0], *out[2:], out[1]])]  # type: ignore[index]
    return [(ins[0][0], _window_out(node, x, kernel, x[1]))]  # type: ignore[index]


@shape_rule(("GlobalAveragePool", "GlobalMaxPool"), NCHWC)
@shape_rule(("QLinearGlobalAveragePool",), MS)
def _global_pool(node: onnx.NodeProto, ins: Sequence[TShape | None]) -> list[TShape | None]:
    x = _dims(ins[0])
    if x is None or len(x) < 3:
        return [None]
    if _attr(node, "channels_last", 0):
        return [(ins[0][0], [x[0], *([1] * (len(x) - 2)), x[-1]])]  # type: ignore[index]
    return [(ins[0][0], [x[0], x[1], *([1] * (len(x) - 2))])]  # type: ignore[index]


@shape_rule(("ReorderOutput",), NCHWC)
def _reorder_output(node: onnx.NodeProto, ins: Sequence[TShape | None]) -> list[TShape | None]:
    x = _dims(ins[0])
    channels = _attr(node, "channels")
    if x is None or len(x) < 3:
        return [None]
    c: DimT = channels if isinstance(channels, int) else x[1]
    if _attr(node, "channels_last", 0):
        return [(ins[0][0], [x[0], *x[2:], c])]  # type: ignore[index]
    return [(ins[0][0], [x[0], c, *x[2:]])]  # type: ignore[index]


@shape_rule(("Upsample",), NCHWC)
def _upsample(node: onnx.NodeProto, ins: Sequence[TShape | None]) -> list[TShape | None]:
    x = _dims(ins[0])
    scales = _attr(node, "scales")
    if x is None or not isinstance(scales, list) or len(scales) != len(x):
        return [None]
    return [(ins[0][0], [d * int(s) if isinstance(d, int) else None for d, s in zip(x, scales, strict=True)])]  # type: ignore[index]


@shape_rule(("QLinearAdd", "QLinearMul"), MS)
def _qlinear_binary(node: onnx.NodeProto, ins: Sequence[TShape | None]) -> list[TShape | None]:
    a, b = _dims(ins[0]), _dims(ins[3]) if len(ins) > 3 else None
    if a is None or b is None:
        return [None]
    return [(ins[0][0], _broadcast(a, b))]  # type: ignore[index]


@shape_rule(("QLinearConcat",), MS)
def _qlinear_concat(node: onnx.NodeProto, ins: Sequence[TShape | None]) -> list[TShape | None]:
    tensors = [ins[i] for i in range(2, len(ins), 3)]
    if not tensors or any(t is None or t[1] is None for t in tensors):
        return [None]
    first = tensors[0][1]  # type: ignore[index]
    axis = int(_attr(node, "axis", 0))  # type: ignore[call-overload]
    axis = axis + len(first) if axis < 0 else axis  # type: ignore[arg-type]
    total: DimT = 0
    for t in tensors:
        d = t[1][axis]  # type: ignore[index]
        total = total + d if isinstance(total, int) and isinstance(d, int) else None
    out = list(first)  # type: ignore[arg-type]
    out[axis] = total
    return [(tensors[0][0], out)]  # type: ignore[index]


@shape_rule(("QLinearReduceMean",), MS)
def _qlinear_reduce_mean(node: onnx.NodeProto, ins: Sequence[TShape | None]) -> list[TShape | None]:
    x = _dims(ins[0])
    axes = _attr(node, "axes")
    if x is None or not isinstance(axes, list):
        return [None]
    keep = bool(_attr(node, "keepdims", 1))
    rank = len(x)
    norm = {a + rank if a < 0 else a for a in axes}
    out = [(1 if i in norm else d) for i, d in enumerate(x) if keep or i not in norm]
    return [(ins[0][0], out)]  # type: ignore[index]


# ----------------------------------------------------------------- onnxruntime's quantizer and NHWC transformer


@shape_rule(("DynamicQuantizeLSTM",), MS)
def _dynamic_quantize_lstm(node: onnx.NodeProto, ins: Sequence[TShape | None]) -> list[TShape | None]:
    """LSTM's outputs (no ``layout``: X is [seq, batch, input]); R is stored [dirs, hidden, 4·hidden]."""
    x, r = _dims(ins[0]), _dims(ins[2]) if len(ins) > 2 else None
    if x is None or len(x) != 3:
        return [None, None, None]
    hidden = _attr(node, "hidden_size")
    hid: DimT = hidden if isinstance(hidden, int) else (r[1] if r is not None and len(r) == 3 else None)
    dirs = 2 if _attr(node, "direction", "forward") == "bidirectional" else 1
    elem = ins[0][0]  # type: ignore[index]
    state: TShape = (elem, [dirs, x[1], hid])
    return [(elem, [x[0], dirs, x[1], hid]), state, state]  # Y [seq, dirs, batch, hidden], Y_h, Y_c


@shape_rule(("QEmbedLayerNormalization",), MS)
def _qembed_layer_norm(node: onnx.NodeProto, ins: Sequence[TShape | None]) -> list[TShape | None]:
    """layernorm_out [batch, seq, hidden] in the scales' float type; mask_index [batch] int32."""
    ids, word = _dims(ins[0]), _dims(ins[2]) if len(ins) > 2 else None
    scale = ins[8] if len(ins) > 8 else None
    if ids is None or len(ids) != 2 or word is None or len(word) != 2:
        return [None, None]
    elem = scale[0] if scale is not None else FLOAT
    return [(elem, [ids[0], ids[1], word[1]]), (onnx.TensorProto.INT32, [ids[0]])]


@shape_rule(("QAttention",), MS)
def _qattention(node: onnx.NodeProto, ins: Sequence[TShape | None]) -> list[TShape | None]:
    """output [batch, seq, hidden] (hidden: a third of the weight's columns), float like input_scale;
    present [2, batch, heads, past + seq, head_size] when past is given."""
    x, w = _dims(ins[0]), _dims(ins[1]) if len(ins) > 1 else None
    if x is None or len(x) != 3 or w is None or len(w) != 2:
        return [None, None]
    scale = ins[3] if len(ins) > 3 else None
    elem = scale[0] if scale is not None else FLOAT
    hidden: DimT = w[1] // 3 if isinstance(w[1], int) and w[1] % 3 == 0 else None
    past = _dims(ins[8]) if len(ins) > 8 else None
    present: TShape | None = None
    if past is not None and len(past) == 5:
        total: DimT = past[3] + x[1] if isinstance(past[3], int) and isinstance(x[1], int) else None
        present = (elem, [2, x[0], past[2], total, past[4]])
    return [(elem, [x[0], x[1], hidden]), present]


@shape_rule(("QLinearWhere",), MS)
def _qlinear_where(node: onnx.NodeProto, ins: Sequence[TShape | None]) -> list[TShape | None]:
    """Inputs: condition, X, x_scale, x_zero_point, Y, y_scale, y_zero_point, z_scale, z_zero_point."""
    c, x, y = _dims(ins[0]), _dims(ins[1]) if len(ins) > 1 else None, _dims(ins[4]) if len(ins) > 4 else None
    if c is None or x is None or y is None:
        return [None]
    return [(ins[1][0], _broadcast(_broadcast(c, x), y))]  # type: ignore[index]


def _to_nhwc(nchw: list[DimT]) -> list[DimT]:
    return [nchw[0], *nchw[2:], nchw[1]]


@shape_rule(("QLinearConv",), MS)
def _ms_qlinear_conv(node: onnx.NodeProto, ins: Sequence[TShape | None]) -> list[TShape | None]:
    """The com.microsoft QLinearConv: ai.onnx's, with ``channels_last`` (NHWC x and y; W stays [M, C/g, k...])."""
    x, w = _dims(ins[0]), _dims(ins[3]) if len(ins) > 3 else None
    if x is None or w is None or len(x) < 3 or not all(isinstance(k, int) for k in w[2:]):
        return [None]
    kernel = [int(k) for k in w[2:]]  # type: ignore[arg-type]
    y_zp = ins[7] if len(ins) > 7 else None
    elem = y_zp[0] if y_zp is not None else ins[0][0]  # type: ignore[index]
    if _attr(node, "channels_last", 0):
        return [(elem, _to_nhwc(_window_out(node, [x[0], x[-1], *x[1:-1]], kernel, w[0])))]
    return [(elem, _window_out(node, x, kernel, w[0]))]


@shape_rule(("NhwcMaxPool",), MS)
def _nhwc_max_pool(node: onnx.NodeProto, ins: Sequence[TShape | None]) -> list[TShape | None]:
    """MaxPool on an NHWC int8/uint8 tensor (onnxruntime's NHWC transformer writes it around QLinearConv)."""
    x = _dims(ins[0])
    kernel = _attr(node, "kernel_shape")
    if x is None or len(x) < 3 or not isinstance(kernel, list):
        return [None]
    return [(ins[0][0], _to_nhwc(_window_out(node, [x[0], x[-1], *x[1:-1]], kernel, x[-1])))]  # type: ignore[index]


@shape_rule(("GatherBlockQuantized",), MS)
def _gather_block_quantized(node: onnx.NodeProto, ins: Sequence[TShape | None]) -> list[TShape | None]:
    """Gather of packed rows: data's shape with ``gather_axis`` replaced by the indices' shape; uint8 data
    packs 8 / bits values per byte along ``quantize_axis`` (the last axis), which unpacks to that many."""
    data, idx = _dims(ins[0]), _dims(ins[1]) if len(ins) > 1 else None
    scales = ins[2] if len(ins) > 2 else None
    if data is None or idx is None or scales is None:
        return [None]
    rank = len(data)
    gather = int(_attr(node, "gather_axis", 0))  # type: ignore[call-overload]
    quant = int(_attr(node, "quantize_axis", 1))  # type: ignore[call-overload]
    gather, quant = gather % rank, quant % rank
    dims = list(data)
    bits = int(_attr(node, "bits", 4))  # type: ignore[call-overload]
    if ins[0][0] == onnx.TensorProto.UINT8 and bits in (2, 4):  # type: ignore[index]
        packed = dims[quant]
        dims[quant] = packed * (8 // bits) if isinstance(packed, int) else None  # 8 / bits values per byte
    return [(scales[0], [*dims[:gather], *idx, *dims[gather + 1:]])]


@shape_rule(("MatMulBnb4",), MS)
def _matmul_bnb4(node: onnx.NodeProto, ins: Sequence[TShape | None]) -> list[TShape | None]:
    a = _dims(ins[0])
    n = _attr(node, "N")
    if a is None or not isinstance(n, int):
        return [None]
    return [(ins[0][0], [*a[:-1], n])]  # type: ignore[index]
