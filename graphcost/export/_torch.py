"""PyTorch → ONNX: the dynamo exporter (default) or the legacy TorchScript one, verified in onnxruntime.

Dynamic dims: dynamo gets ``dynamic_shapes`` built from ``torch.export.Dim(name)`` (one Dim object per name, so
two inputs sharing ``batch`` are known equal), legacy gets ``dynamic_axes``; both write the names into the file.

BatchNorm: both exporters fold BN into the preceding Conv by default. ``keep_batchnorm=True`` keeps the
BatchNormalization nodes: legacy with ``do_constant_folding=False``; dynamo with ``optimize=False`` followed by
onnxscript's ``fold_constants`` and ``remove_unused_nodes`` (``onnxscript.optimizer.optimize`` would fold BN too).

The user's module is exported in eval mode; its training flags are restored afterwards, whatever happens.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from graphcost.models.zoo import require

from ._verify import ExportError, ExportResult, check_inputs, export_verified, quiet

__all__ = ["export_torch"]

LEGACY_MAX_OPSET = 23  # torch 2.13's TorchScript exporter: 24 raises "Unsupported onnx_opset_version"
DYNAMO_MIN_OPSET = 18  # lower opsets are down-converted, which fails for common ops


def _require(dynamo: bool) -> None:
    require("torch")
    if dynamo:
        require("torch", "onnxscript")


@contextlib.contextmanager
def _eval_mode(module: Any) -> Iterator[None]:
    flags = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        yield
    finally:
        for m, training in flags:
            m.training = training


def _quiet() -> contextlib.AbstractContextManager[None]:
    """The exporters print progress and warn about deprecations and tracing; a verified export needs neither."""
    return quiet(_NOISY_LOGGERS, logging.CRITICAL + 1)


_NOISY_LOGGERS = (
    "torch.onnx._internal.exporter._registration",  # "torchvision is not installed. Skipping ..."
    "torch._subclasses.fake_tensor",  # a failed export logs the traceback the ExportError already sums up
    "torch.export._trace",
    "torch._dynamo",
)


def _flatten(value: Any) -> list[np.ndarray]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value.detach().cpu().numpy()]
    if isinstance(value, Mapping):
        return [a for k in value for a in _flatten(value[k])]
    if isinstance(value, (list, tuple)):
        return [a for v in value for a in _flatten(v)]
    raise ExportError(f"the module returned a {type(value).__name__}; expected tensors (or tuples/dicts of them)")


def export_torch(module: Any, example_inputs: Mapping[str, np.ndarray], path: str | os.PathLike[str], *,
                 dynamic: Mapping[str, Mapping[int, str]] | None = None, dynamo: bool = True, opset: int = 18,
                 keep_batchnorm: bool = False, verify: bool = True, rtol: float = 1e-4,
                 atol: float = 1e-5) -> ExportResult:
    """Export an ``nn.Module`` called as ``module(*inputs)`` (in ``example_inputs`` order) to ``path``.

    ``dynamic`` names dims per input, e.g. ``{"x": {0: "batch"}}``; None exports every dim fixed. Raises
    ExportError (nothing written) if the export fails or onnxruntime disagrees with torch; FrameworkMissing if
    torch (or onnxscript, for dynamo) is not installed.
    """
    _require(dynamo)
    import torch

    if not isinstance(module, torch.nn.Module):
        raise ExportError(f"expected a torch.nn.Module, got {type(module).__name__}")
    if dynamo and opset < DYNAMO_MIN_OPSET:
        raise ExportError(f"opset {opset}: the dynamo exporter needs opset ≥ {DYNAMO_MIN_OPSET} (or use legacy)")
    if not dynamo and opset > LEGACY_MAX_OPSET:
        raise ExportError(f"opset {opset}: the legacy exporter stops at {LEGACY_MAX_OPSET}")
    inputs, dyn = check_inputs(example_inputs, dynamic)
    names = list(inputs)

    def tensors(feeds: Mapping[str, np.ndarray]) -> tuple[Any, ...]:
        return tuple(torch.from_numpy(np.array(feeds[n], copy=True)) for n in names)

    def reference(feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        with torch.no_grad():
            return _flatten(module(*tensors(feeds)))

    def produce(tmp: Path) -> None:
        args = tensors(inputs)
        with _quiet(), torch.no_grad():
            if dynamo:
                dims = {d: torch.export.Dim(d) for axes in dyn.values() for d in axes.values()}
                shapes = tuple({a: dims[d] for a, d in dyn[n].items()} if n in dyn else None for n in names)
                program = torch.onnx.export(module, args, dynamo=True, opset_version=opset, input_names=names,
                                            dynamic_shapes=shapes if dyn else None, optimize=not keep_batchnorm,
                                            verbose=False)
                if program is None:
                    raise ExportError("torch.onnx.export returned no program")
                if keep_batchnorm:
                    import onnxscript.optimizer

                    onnxscript.optimizer.fold_constants(program.model)
                    onnxscript.optimizer.remove_unused_nodes(program.model)
                program.save(str(tmp), external_data=False)
            else:
                torch.onnx.export(module, args, str(tmp), dynamo=False, opset_version=opset, input_names=names,
                                  dynamic_axes={n: dict(axes) for n, axes in dyn.items()} or None,
                                  do_constant_folding=not keep_batchnorm)

    with _eval_mode(module):
        return export_verified(path, framework="torch", exporter="torch.dynamo" if dynamo else "torch.legacy",
                               opset=opset, produce=produce, reference=reference, inputs=inputs, dynamic=dyn,
                               verify=verify, rtol=rtol, atol=atol)
