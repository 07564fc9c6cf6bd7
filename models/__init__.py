"""Reference models (PyTorch; the zoo also in TensorFlow/Keras and flax.nnx), the scripts that export them, and the
small shipped .onnx files the README demo and the tests use. Installed as ``graphcost.models``."""

if __name__ != "graphcost.models":  # one name, so one copy of each module (and of its classes and seeded weights)
    raise ImportError(f"import the reference models as graphcost.models, not {__name__!r} (e.g. python -m "
                      "graphcost.models.build_zoo); the repo-root name is a second copy of the same files")
