"""Reference models (PyTorch; the zoo also in TensorFlow/Keras and flax.nnx), the scripts that export them, and the
small shipped .onnx files the README demo and the tests use. Installed as ``graphcost.models``."""
