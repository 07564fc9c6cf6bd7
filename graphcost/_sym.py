"""sympy, imported on first use.

Importing sympy costs about half a second, more than analyzing a typical static model. Dims are
plain ints on the fast path and only become sympy expressions when a model has symbolic dims, so
every module takes sympy from here: ``from graphcost._sym import sympy``. The first attribute access
imports the real module; nothing imports it for a fully static model.
"""

from __future__ import annotations

import importlib
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


def loaded() -> bool:
    """Whether sympy has been imported (tests use it to pin the static fast path)."""
    import sys

    return "sympy" in sys.modules
