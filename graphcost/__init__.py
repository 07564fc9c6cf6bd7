"""graphcost: static cost analysis of ONNX models.

How fast could this model possibly run, where do the bytes go, and what could not be costed::

    import graphcost
    report = graphcost.analyze("model.onnx", hardware="h100-sxm", dims={"batch": 8})
    report.totals.flops, report.totals.roofline_time_s, report.by_op_type()
"""

from graphcost.api import analyze
from graphcost.hardware.spec import HardwareSpec
from graphcost.load import LoadError, Model, load
from graphcost.ops import Kind, NodeView, Unknown, Work, rule
from graphcost.report.model import Report

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
    "load",
    "rule",
]
