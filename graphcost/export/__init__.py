"""Export models from PyTorch, TensorFlow and JAX to ONNX, verified in onnxruntime before anything is written.

::

    from graphcost.export import export_torch, export_native
    from graphcost.models.zoo import build_native

    r = export_torch(module, {"x": x}, "m.onnx", dynamic={"x": {0: "batch"}})   # dynamo exporter, opset 18
    r = export_native(build_native("jax", "cnn"), "cnn.onnx")                  # jax2onnx
    r.max_abs_diff, r.checked_shapes, r.summary()

Every export runs in onnxruntime against the framework's own output at the example shapes and, when dims are
dynamic, at a second shape; a mismatch raises ExportError and leaves no file. The frameworks are imported only
when an exporter is called (``import graphcost.export`` imports none of them). See docs/export.md.
"""

from __future__ import annotations

import os
from typing import Any

from ._jax import export_jax
from ._tf import export_tf
from ._torch import export_torch
from ._verify import ExportError, ExportResult, verify_onnx

__all__ = ["ExportError", "ExportResult", "export_jax", "export_native", "export_tf", "export_torch", "verify_onnx"]


def export_native(model: Any, path: str | os.PathLike[str], **kw: Any) -> ExportResult:
    """Export a ``graphcost.models.zoo.NativeModel`` with its framework's default exporter.

    Its example inputs and dynamic dims are used unless ``kw`` overrides ``dynamic`` (``{}`` exports fixed shapes);
    other keywords go to ``export_torch`` / ``export_tf`` / ``export_jax``.
    """
    kw.setdefault("dynamic", model.dynamic)
    if model.framework == "torch":
        return export_torch(model.module, model.inputs, path, **kw)
    if model.framework == "tf":
        return export_tf(model.module, model.inputs, path, **kw)
    if model.framework == "jax":
        return export_jax(model.module, model.inputs, path, **kw)
    raise ExportError(f"unknown framework {model.framework!r}")
