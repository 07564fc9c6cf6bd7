"""Dimensions that are either plain ints or sympy expressions.

Shapes in real exports carry named dims (``batch``, ``seq``) and derived ones (``batch*seq``,
``floor(H/2)``). Cost rules do arithmetic on them directly, so one rule yields both the number and
the formula. Plain ints stay plain ints (the fast path: a static 100k-node graph never touches
sympy); sympy is used only where a dim is symbolic.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Union

from graphcost._sym import sympy

if TYPE_CHECKING:
    import sympy as _sympy

    Dim = Union[int, _sympy.Expr]
else:
    Dim = Union[int, Any]
"""One dimension or one count: an ``int`` when known, a sympy expression in named dims otherwise."""

Shape = tuple[Dim, ...]

_NAME_OK = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@functools.lru_cache(maxsize=65536)
def symbol(name: str) -> Any:
    """The symbol for a named dim. Dims are non-negative integers, which lets sympy simplify."""
    return sympy.Symbol(name, integer=True, nonnegative=True)


def _safe_name(raw: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_]", "_", raw)
    if not cleaned or cleaned[0].isdigit():
        cleaned = "d_" + cleaned
    return cleaned


@functools.lru_cache(maxsize=65536)
def parse_dim(text: str) -> Dim:
    """Parse a dim_param such as ``batch``, ``batch*seq`` or ``floor(H/2 - 1/2) + 1``.

    A plain identifier becomes a symbol; an arithmetic expression over identifiers (as ORT's symbolic
    shape inference writes them) becomes that expression; anything else is one opaque symbol whose
    name is a sanitised copy of the text, so it is never lost or read as a number.
    """
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    if _NAME_OK.match(text):
        return symbol(text)
    names = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text)) - {"floor", "ceiling", "Min", "Max", "Mod", "ceil"}
    local = {n: symbol(n) for n in names}
    local.update({"floor": sympy.floor, "ceiling": sympy.ceiling, "ceil": sympy.ceiling,
                  "Min": sympy.Min, "Max": sympy.Max, "Mod": sympy.Mod})
    try:
        expr = sympy.sympify(text, locals=local)
    except (sympy.SympifyError, SyntaxError, TypeError, ValueError):
        return symbol(_safe_name(text))
    return simplify_dim(expr)


def simplify_dim(value: object) -> Dim:
    """Collapse a sympy number to an int; leave symbolic expressions symbolic."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if hasattr(value, "__index__") and not isinstance(value, sympy.Basic):
        return int(value)  # type: ignore[call-overload]  # numpy integers
    if isinstance(value, sympy.Expr):
        if value.is_Integer:
            return int(value)
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise TypeError(f"not a dim: {value!r}")


def is_static(value: Dim) -> bool:
    return isinstance(value, int)


def prod(values: Iterable[Dim]) -> Dim:
    """Product of dims; stays an int when every factor is one."""
    out: Dim = 1
    for v in values:
        out = out * v
    return out if isinstance(out, int) else simplify_dim(out)


def numel(shape: Shape) -> Dim:
    """Number of elements of a tensor of this shape (1 for a scalar)."""
    return prod(shape)


def ceil_log2(d: Dim) -> Dim:
    """⌈log2 d⌉ for a count (0 for d ≤ 1): an int for an int, a sympy expression for a symbolic dim."""
    if isinstance(d, int):
        return (d - 1).bit_length() if d > 1 else 0
    return sympy.ceiling(sympy.log(d, 2))


def free_names(value: Dim) -> frozenset[str]:
    if isinstance(value, int):
        return frozenset()
    return frozenset(str(s) for s in value.free_symbols)


def evaluate(value: Dim, binding: Mapping[str, int]) -> int | float:
    """Numeric value of a dim or count under a binding of dim names to ints.

    Raises KeyError naming a dim left unbound.
    """
    if isinstance(value, (int, float)):
        return value
    if not isinstance(value, sympy.Basic):
        return float(value) if not float(value).is_integer() else int(value)
    subs = {}
    for s in value.free_symbols:
        name = str(s)
        if name not in binding:
            raise KeyError(name)
        subs[s] = binding[name]
    result = sympy.sympify(value.xreplace(subs))
    if result.is_Integer:
        return int(result)
    return float(result)


def to_text(value: Dim) -> str:
    """A formula as text, written the way Python would (``24*batch*seq**2 + ...``)."""
    if isinstance(value, int):
        return str(value)
    return _expr_text(value)


@functools.lru_cache(maxsize=65536)
def _expr_text(value: Any) -> str:
    return str(sympy.expand(value))
