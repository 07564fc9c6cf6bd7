"""What a dim expression depends on and what it is worth at a binding, in exact arithmetic.

The bottom of the dim layer: :mod:`graphcost._minmax` needs these to decide an order between Min/Max
arguments, :mod:`graphcost._dimexpr` builds its Min/Max through ``_minmax``, and :mod:`graphcost._dims`
(parsing, text, evaluation) sits on both, so these live below all three rather than in ``_dims``.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Mapping
from fractions import Fraction
from typing import Any, Union

from graphcost._sym import sympy


def as_expr(value: object) -> Any:
    """A count or dim as a sympy object, for code that needs sympy methods on it.

    Accepts ints (numpy ints too), reals and sympy objects. Text is refused with TypeError: turning a
    string into an expression is :func:`graphcost._dims.parse_dim`'s job alone, because ``sympify`` would evaluate it.
    """
    if isinstance(value, (str, bytes)):
        raise TypeError(f"as_expr takes a number or a sympy object, not text: {value[:40]!r}")
    if isinstance(value, sympy.Basic):
        return value
    if isinstance(value, numbers.Integral) or (hasattr(value, "__index__") and not isinstance(value, float)):
        return sympy.Integer(int(value))  # type: ignore[call-overload]  # numpy integers
    if isinstance(value, numbers.Rational):
        return sympy.Rational(int(value.numerator), int(value.denominator))
    if isinstance(value, numbers.Real):
        return sympy.Float(float(value))
    raise TypeError(f"not a dim or count: {type(value).__name__}")


_NO_NAMES: frozenset[str] = frozenset()


def free_names(value: Any) -> frozenset[str]:
    """The dim names a dim or count depends on (empty for an int)."""
    if isinstance(value, int):
        return _NO_NAMES
    return _free_names(value)


@functools.lru_cache(maxsize=65536)
def _free_names(value: Any) -> frozenset[str]:
    """Cached: sympy recomputes ``free_symbols`` by a walk of the whole expression on every call, and the
    same dim is asked about once per tensor that has it (FCOS with ORT-minted dims: 1,506 symbolic dims
    over its tensors, 490 distinct; 3 passes over them, 4,518 calls: 25 ms CPU uncached, 3 ms cached)."""
    return frozenset(str(s) for s in value.free_symbols)


class NotExact(Exception):
    """The expression has a node kind :func:`exact` does not read, or is not a number at this binding."""


@functools.cache
def _exact_ops() -> dict[Any, Any]:
    """sympy's functions that dims use → the same function on exact numbers (one-argument ones first)."""
    return {sympy.floor: math.floor, sympy.ceiling: math.ceil, sympy.Max: max, sympy.Min: min}


Exact = Union[int, Fraction]


def exact(expr: Any, binding: Mapping[str, int], seen: dict[Any, Exact]) -> Exact:
    """``expr`` under ``binding`` in exact arithmetic (ints, Fractions where a division leaves one), for
    :func:`graphcost._dims.evaluate`'s common case.

    sympy's way (``xreplace`` the symbols, let every node simplify itself again) rebuilds the whole tree
    with its assumption machinery: YOLOv8n with dynamic height and width asks 2,501 values in one analyze,
    0.48 s that way; this walk visits each distinct subexpression once per binding (0.05-0.07 s, same
    machine, one run after the other). It knows the node kinds dims are made of (numbers, names, ``+ * **``, floor,
    ceiling, Max, Min, Mod, and ``ceil_log2``'s ``ceiling(log(u)/log(2))``, which is ``(u - 1).bit_length()``
    for an integer u ≥ 1) and raises NotExact on any other, and the caller takes only a whole number
    from it (anything else goes the sympy way), so every value it gives is the one sympy gives."""
    known = seen.get(expr)
    if known is not None:
        return known
    out: Exact
    if expr.is_Integer:
        out = int(expr)
    elif expr.is_Rational:
        out = Fraction(int(expr.p), int(expr.q))
    elif expr.is_Symbol:
        v = binding[expr.name]
        if not isinstance(v, numbers.Integral):
            raise NotExact
        out = int(v)
    elif expr.is_Add:
        out = 0
        for a in expr.args:
            out += exact(a, binding, seen)
    elif expr.is_Mul:
        out = 1
        for a in expr.args:
            out *= exact(a, binding, seen)
    elif expr.is_Pow:
        if not expr.exp.is_Integer or abs(int(expr.exp)) > 64:
            raise NotExact
        out = Fraction(exact(expr.base, binding, seen)) ** int(expr.exp)
    elif expr.func is sympy.Mod and len(expr.args) == 2:
        out = exact(expr.args[0], binding, seen) % exact(expr.args[1], binding, seen)
    elif expr.func is sympy.ceiling and len(expr.args) == 1 and _log2_of(expr.args[0]) is not None:
        u = exact(_log2_of(expr.args[0]), binding, seen)  # ceil_log2's form: ceiling(log(u)/log(2))
        if (not isinstance(u, int) and u.denominator != 1) or u < 1:
            raise NotExact  # log of 0 is not a number; a fraction's log2 is not read here
        out = (int(u) - 1).bit_length()  # ⌈log2 u⌉ exactly, for an integer u ≥ 1
    else:
        op = _exact_ops().get(expr.func)
        if op is None or not expr.args or (op in (math.floor, math.ceil) and len(expr.args) != 1):
            raise NotExact
        out = op(*(exact(a, binding, seen) for a in expr.args))
    seen[expr] = out
    return out


def _log2_of(expr: Any) -> Any:
    """u when ``expr`` is ``log(u)/log(2)`` (how sympy writes ``log(u, 2)``), else None."""
    if not expr.is_Mul or len(expr.args) != 2:
        return None
    a, b = expr.args
    for log_u, inv in ((a, b), (b, a)):
        if (log_u.func is sympy.log and len(log_u.args) == 1 and inv.is_Pow and inv.exp == -1
                and inv.base.func is sympy.log and inv.base.args == (sympy.Integer(2),)):
            return log_u.args[0]
    return None
