"""sympy, imported on first use.

Importing sympy costs about half a second, more than analyzing a typical static model. Dims are
plain ints on the fast path and only become sympy expressions when a model has symbolic dims, so
every module takes sympy from here: ``from graphcost._sym import sympy``. The first attribute access
imports the real module; nothing imports it for a fully static model.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any


class _LazyModule:
    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attr: str) -> Any:
        module = self._module
        if module is None:
            module = importlib.import_module(self._name)
            self._module = module
        return getattr(module, attr)


sympy: Any = _LazyModule("sympy")


def memo_str(limit: int = 1 << 16) -> Callable[[Any], str]:
    """A function that writes a sympy object exactly as ``str`` does, remembering the text of every subexpression.

    sympy's printer writes a whole expression tree on every ``str``, so text built up step by step (a dim
    after each of 60 strided convs: ``floor(floor(...)/2)``) costs time quadratic in its depth. The
    printer's output for a subexpression does not depend on where it stands (the caller adds parentheses),
    so each distinct subexpression is written once. Floats are left out: their digits depend on the
    nesting level. YOLOv8n (dynamic batch, height and width): one onnx-shape-inference run, which writes
    791 such dims, took 0.77 s, 0.13 s with this (in one process after the imports, same machine, one run
    after the other; a profile put 1.85 s of a 2.3 s run in sympy's printer). The memo is emptied when it
    holds ``limit`` texts, so a long-lived process does not grow without bound."""
    from sympy.printing.str import StrPrinter

    basic, number = sympy.Basic, sympy.Float
    memo: dict[Any, str] = {}

    class _MemoPrinter(StrPrinter):  # type: ignore[misc]
        def _print(self, expr: Any, **kwargs: Any) -> str:
            if kwargs or not isinstance(expr, basic) or isinstance(expr, number):
                return str(super()._print(expr, **kwargs))
            text = memo.get(expr)
            if text is None:
                if len(memo) >= limit:
                    memo.clear()
                text = memo[expr] = str(super()._print(expr))
            return text

    printer = _MemoPrinter({"order": None})  # what ``str`` of a sympy object uses
    return printer.doprint  # type: ignore[no-any-return]


@contextlib.contextmanager
def memoized_str() -> Iterator[None]:
    """``str`` of every sympy object goes through one :func:`memo_str` for the duration of the block.

    For third-party code that writes sympy expressions as text (onnx_ir's ``SymbolicDim`` writes every new
    dim with ``str``); the block's memo is dropped after it."""
    from sympy.core import _print_helpers

    write = memo_str()
    cls = _print_helpers.Printable
    original = cls.__dict__["__str__"]

    def __str__(self: Any) -> str:
        return write(self)

    cls.__str__ = __str__
    try:
        yield
    finally:
        cls.__str__ = original


def loaded() -> bool:
    """Whether sympy has been imported (tests use it to pin the static fast path)."""
    import sys

    return "sympy" in sys.modules
