"""graphcost: static cost analysis of ONNX models.

How fast could this model possibly run, where do the bytes go, and what could not be costed::

    import graphcost
    report = graphcost.analyze("model.onnx", hardware="h100-sxm", dims={"batch": 8})
    report.totals.flops, report.totals.roofline_time_s, report.by_op_type()

    report = graphcost.analyze(torch_module, (x,))              # exported (verified) to ~/.cache/graphcost
    gap = graphcost.gap(torch_module, (x,), hardware=spec)      # timed natively and in onnxruntime
"""

import types as _types
from typing import Any as _Any

from graphcost import gap as _gap_module
from graphcost.api import analyze
from graphcost.api import gap as _gap
from graphcost.hardware.spec import HardwareSpec
from graphcost.load import LoadError, Model, load
from graphcost.ops import Kind, NodeView, Unknown, Work, rule
from graphcost.report.model import Report


class _CallableModule(_types.ModuleType):
    """``graphcost.gap`` is both the module of the gap report's pieces (``graphcost.gap.Budget``, ``GapRow``,
    ``diagnose``) and the one-call entry ``graphcost.gap(model, example_inputs, hardware=...)``
    (``graphcost.api.gap``, the typed spelling): one object, so neither import order hides the other."""

    def __call__(self, *args: _Any, **kw: _Any) -> _Any:
        return _gap(*args, **kw)


_gap_module.__class__ = _CallableModule
gap = _gap_module

__version__ = "0.1.0"

__all__ = [
    "HardwareSpec",
    "Kind",
    "LoadError",
    "Model",
    "NodeView",
    "Report",
    "Unknown",
    "Work",
    "__version__",
    "analyze",
    "gap",
    "load",
    "rule",
]
