"""JAX → ONNX through jax2onnx's ``to_onnx``, from a function or a flax.nnx module.

Inputs are given to jax2onnx as ``jax.ShapeDtypeStruct`` s whose dynamic dims are symbolic dims of one shared
``jax.export`` scope, named as the caller named them: the file says ``batch``/``seq``, and a dim two inputs share
is one symbol. Dims jax2onnx cannot keep symbolic (a model that branches on a size) fail at export, as ExportError.

jax2onnx keeps a flax BatchNormalization as a BatchNormalization node (it does not fold it), and NHWC
convolutions come out as Transpose → Conv (NCHW) → Transpose. The default opset here is 18, the one all three
exporters share (jax2onnx's own default is 23).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from graphcost.models.zoo import require

from ._verify import ExportError, ExportResult, check_inputs, export_verified, name_dims, quiet

__all__ = ["export_jax"]


def _require() -> None:
    require("jax", "jax")
    require("jax", "jax2onnx")


def _quiet() -> contextlib.AbstractContextManager[None]:
    """jax2onnx and onnx_ir log progress and notes ("value type ... not known"); a verified export needs neither."""
    return quiet(("jax2onnx", "onnx_ir"), logging.ERROR)


def _flatten(value: Any) -> list[np.ndarray]:
    import jax

    return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(value)]


def _specs(inputs: dict[str, np.ndarray], dyn: dict[str, dict[int, str]]) -> list[Any]:
    import jax

    names = sorted({d for axes in dyn.values() for d in axes.values()})
    scope = jax.export.SymbolicScope()
    symbols = dict(zip(names, jax.export.symbolic_shape(",".join(names), scope=scope), strict=True)) if names else {}
    specs = []
    for name, arr in inputs.items():
        axes = dyn.get(name, {})
        shape = tuple(symbols[axes[a]] if a in axes else d for a, d in enumerate(arr.shape))
        specs.append(jax.ShapeDtypeStruct(shape, arr.dtype))
    return specs


def export_jax(fn: Any, example_inputs: Mapping[str, np.ndarray], path: str | os.PathLike[str], *,
               dynamic: Mapping[str, Mapping[int, str]] | None = None, opset: int = 18, verify: bool = True,
               rtol: float = 1e-4, atol: float = 1e-5) -> ExportResult:
    """Export a JAX function or flax.nnx module, called as ``fn(*inputs)`` in ``example_inputs`` order, to ``path``.

    ``dynamic`` names dims per input; None exports fixed shapes. The module is exported as it is (an nnx module in
    training mode exports its training behaviour). Raises ExportError (nothing written) if jax2onnx fails or
    onnxruntime disagrees with JAX; FrameworkMissing without JAX or jax2onnx.
    """
    _require()
    if not callable(fn):
        raise ExportError(f"expected a JAX function or a flax.nnx module, got {type(fn).__name__}")
    inputs, dyn = check_inputs(example_inputs, dynamic)
    import jax

    if not getattr(jax.config, "jax_enable_x64", False):
        for name, arr in inputs.items():
            if arr.dtype in (np.float64, np.int64, np.uint64):
                narrow = {"f": "float32", "i": "int32", "u": "uint32"}[arr.dtype.kind]
                raise ExportError(f"input {name} is {arr.dtype}: JAX without x64 computes it as {narrow}; "
                                  f"give {narrow} inputs")
    names = list(inputs)

    def reference(feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        import jax.numpy as jnp

        return _flatten(fn(*(jnp.asarray(feeds[n]) for n in names)))

    def produce(tmp: Path) -> None:
        import onnx
        from jax2onnx import to_onnx

        with _quiet():
            model_proto = to_onnx(fn, inputs=_specs(inputs, dyn), opset=opset, input_names=names,
                                  model_name=Path(path).stem or "jax_model")
        name_dims(model_proto, inputs, dyn)
        onnx.save(model_proto, str(tmp))

    return export_verified(path, framework="jax", exporter="jax2onnx", opset=opset, produce=produce,
                           reference=reference, inputs=inputs, dynamic=dyn, verify=verify, rtol=rtol, atol=atol)
