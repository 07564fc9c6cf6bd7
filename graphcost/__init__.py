"""graphcost: static cost analysis of ONNX models.

How fast could this model possibly run, where do the bytes go, and what could not be costed::

    import graphcost
    report = graphcost.analyze("model.onnx", hardware="h100-sxm", dims={"batch": 8})
    report.totals.flops, report.totals.roofline_time_s, report.by_op_type()

    report = graphcost.analyze(torch_module, (x,))              # exported (verified) to ~/.cache/graphcost
    gap = graphcost.gap(torch_module, (x,), hardware=spec)      # timed natively and in onnxruntime

The public names load on first use (a module ``__getattr__``, PEP 562): ``import graphcost`` (and so every
``graphcost`` command, which imports ``graphcost.cli`` under this package) costs no pipeline import. Reading any
name of ``__all__`` imports them all, as the eager package did.
"""

from __future__ import annotations

import sys as _sys
import types as _types
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

if _TYPE_CHECKING:  # what the names are, for readers and type checkers; loaded by __getattr__ at run time
    from graphcost import gap as gap
    from graphcost.api import analyze as analyze
    from graphcost.hardware.spec import HardwareSpec as HardwareSpec
    from graphcost.load import LoadError as LoadError
    from graphcost.load import Model as Model
    from graphcost.load import load as load
    from graphcost.ops import Kind as Kind
    from graphcost.ops import NodeView as NodeView
    from graphcost.ops import Unknown as Unknown
    from graphcost.ops import Work as Work
    from graphcost.ops import rule as rule
    from graphcost.report.model import Report as Report

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


class _CallableModule(_types.ModuleType):
    """``graphcost.gap`` is both the module of the gap report's pieces (``graphcost.gap.Budget``, ``GapRow``,
    ``diagnose``) and the one-call entry ``graphcost.gap(model, example_inputs, hardware=...)``
    (``graphcost.api.gap``, the typed spelling): one object, so neither import order hides the other."""

    def __call__(self, *args: _Any, **kw: _Any) -> _Any:
        from graphcost.api import gap as run_gap  # lazy: graphcost.api is the pipeline, loaded on first use

        return run_gap(*args, **kw)


class _Package(_types.ModuleType):
    """This package: ``import graphcost.gap`` (from anywhere, in any order) sets the attribute ``gap`` through
    ``setattr``, and that is where the module becomes callable.

    ``graphcost.load`` is the public function, as the eager package bound it, although a submodule of the same
    name exists: the import system sets the attribute to the module when anything imports ``graphcost.load``
    first (the CLI does), and then ``__getattr__`` is never asked. That binding is replaced by the module's
    ``load`` here; the module itself stays in ``sys.modules`` for ``from graphcost.load import ...``."""

    def __setattr__(self, name: str, value: _Any) -> None:
        if name == "gap" and type(value) is _types.ModuleType:
            value.__class__ = _CallableModule
        elif name == "load" and isinstance(value, _types.ModuleType) and value.__name__ == f"{__name__}.load":
            value = value.load
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> _Any:
    """The public API on first use.

    Measured (``python -X importtime -c 'import graphcost; graphcost.analyze'``): the pipeline these names pull
    in (onnx, numpy, the passes, the op rules) is most of a command's start-up, so the package defers it until a
    name is read; a ``graphcost`` command that needs none of it (``--help``, ``hardware list``, ``budget``) never
    pays it.
    """
    if name not in __all__:
        raise AttributeError(f"module 'graphcost' has no attribute {name!r}")
    # lazy: the public API is the pipeline (see the docstring); every name is loaded here at once
    import graphcost.gap  # noqa: F401 - a submodule import; ``from graphcost import gap`` would recurse here
    from graphcost.api import analyze
    from graphcost.hardware.spec import HardwareSpec
    from graphcost.load import LoadError, Model, load
    from graphcost.ops import Kind, NodeView, Unknown, Work, rule
    from graphcost.report.model import Report

    loaded = {"HardwareSpec": HardwareSpec, "Kind": Kind, "LoadError": LoadError, "Model": Model,
              "NodeView": NodeView, "Report": Report, "Unknown": Unknown, "Work": Work, "analyze": analyze,
              "gap": _sys.modules["graphcost.gap"], "load": load, "rule": rule}
    globals().update(loaded)
    return loaded[name]


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
