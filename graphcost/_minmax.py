"""Min and Max of symbolic dims, built without sympy's search for an order where no order can exist.

``sympy.Min(a, b)`` tries to prove ``a <= b`` or ``b <= a`` from the assumptions (``a >= b`` as a relation,
then again on ``factor_terms(a - b)``); on a detection head's formulas that search is most of the call and
a call takes tens of milliseconds (Faster R-CNN mobilenet-v3, NonMaxSuppression's bound
``Min(S*(S - 1)/2, 9223372036854775807*S - 9223372036854775807)``: 29-40 ms per call in a warm process,
1-2 ms here; same machine, 3 runs each, one after the other).

The shortcut: dims are non-negative integers, so evaluate the arguments exactly at a few such bindings. If
for every pair of arguments one binding gives ``a < b`` and another ``a > b``, no order holds everywhere, a
sound prover proves none, and what sympy returns is the unevaluated call on the same arguments, which sympy
builds in one canonical order (``ordered``) whether it evaluated or not; that object is built here directly.
When witnesses are not found (an order may hold, or an argument is undefined somewhere, as
``ceiling(log(S)/log(2))`` at 0), or an argument is itself a Min or Max (sympy would flatten or collapse it),
the call goes to sympy. So every result is the object sympy itself returns (tests/test_minmax.py compares
them by ``srepr``).

Not done for ``expand``, which rebuilds every Min/Max whose arguments it changes: rebuilding them this way
first measured no faster on the same formulas, and the equality of the result would rest on an argument
about the order of expand's passes rather than on this one.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from graphcost import _dimeval
from graphcost._sym import sympy

_BIG = 2**20
_MAX_BINDINGS = 16
"""Bindings tried before giving up (each evaluates every argument once, one memo per binding)."""


def dim_min(*args: Any) -> Any:
    """``sympy.Min(*args)``, the same object, without the order search where witnesses show none exists."""
    return _lattice(sympy.Min, args)


def dim_max(*args: Any) -> Any:
    """``sympy.Max(*args)``, the same object, without the order search where witnesses show none exists."""
    return _lattice(sympy.Max, args)


_BUILT: dict[tuple[Any, ...], Any] = {}
_BUILT_MOST = 1 << 14
"""Calls remembered (cleared when full): a shape computation asks the same ones in every block, and each may
still be sympy's order search (dynamic-size Swin-T's sweep: 550 clamps of a few dozen distinct pairs; 2.05-2.14 s
wall without this, 1.76-1.83 s with it, three runs each, one after the other)."""


def _lattice(cls: Any, args: Sequence[Any]) -> Any:
    exprs = [_dimeval.as_expr(a) for a in args]
    key = (cls, *exprs)
    got = _BUILT.get(key)
    if got is None:
        if len(_BUILT) >= _BUILT_MOST:
            _BUILT.clear()
        if len(exprs) >= 2 and _incomparable(exprs):
            got = cls(*exprs, evaluate=False)
        else:
            got = cls(*exprs)
        _BUILT[key] = got
    return got


def _incomparable(exprs: list[Any]) -> bool:
    """Whether every pair of ``exprs`` is seen both ways round (``a < b`` at one binding, ``a > b`` at
    another) at non-negative integer bindings of their dims."""
    minmax = (sympy.Min, sympy.Max)
    if any(e.func in minmax for e in exprs) or len(set(exprs)) != len(exprs):
        return False
    names = sorted(set().union(*(_dimeval.free_names(e) for e in exprs)))
    if not names:
        return False
    n = len(exprs)
    unseen = {(i, j, sign) for i in range(n) for j in range(i + 1, n) for sign in (-1, 1)}
    for binding in _bindings(names):
        memo: dict[Any, _dimeval.Exact] = {}
        try:
            values = [_dimeval.exact(e, binding, memo) for e in exprs]
        except (_dimeval.NotExact, ZeroDivisionError, OverflowError, ValueError):
            continue  # undefined or outside the exact walk at this binding: no witness here
        for i in range(n):
            for j in range(i + 1, n):
                if values[i] != values[j]:
                    unseen.discard((i, j, -1 if values[i] < values[j] else 1))
        if not unseen:
            return True
    return False


def _bindings(names: list[str]) -> Iterator[dict[str, int]]:
    """Up to ``_MAX_BINDINGS`` bindings: every dim 0, 1 or big, then one dim big (the rest 1) or 0 (the rest
    big), dim by dim."""
    count = 0
    for v in (0, 1, _BIG):
        yield dict.fromkeys(names, v)
        count += 1
    for name in names:
        for hot, rest in ((_BIG, 1), (0, _BIG)):
            if count >= _MAX_BINDINGS:
                return
            binding = dict.fromkeys(names, rest)
            binding[name] = hot
            yield binding
            count += 1

