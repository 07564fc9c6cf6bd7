"""Dimensions that are either plain ints or sympy expressions.

Shapes in real exports carry named dims (``batch``, ``seq``) and derived ones (``batch*seq``,
``floor(H/2)``). Cost rules do arithmetic on them directly, so one rule yields both the number and
the formula. Plain ints stay plain ints (the fast path: a static 100k-node graph never touches
sympy); sympy is used only where a dim is symbolic.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Union

from graphcost import _dimexpr, _sym
from graphcost._dimeval import Exact, NotExact, as_expr, exact, free_names
from graphcost._sym import sympy

if TYPE_CHECKING:
    import sympy as _sympy

    Dim = Union[int, _sympy.Expr]
else:
    Dim = Union[int, Any]
"""One dimension or one count: an ``int`` when known, a sympy expression in named dims otherwise."""

Shape = tuple[Dim, ...]

_NAME_OK = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_INT_OK = re.compile(r"-?[0-9]+\Z")


@functools.lru_cache(maxsize=65536)
def symbol(name: str) -> Any:
    """The symbol for a named dim. Dims are non-negative integers, which lets sympy simplify."""
    return sympy.Symbol(name, integer=True, nonnegative=True)


def _safe_name(raw: str) -> str:
    """The opaque symbol's name for text outside the grammar: deterministic, an identifier, bounded."""
    cleaned = re.sub(r"[^A-Za-z0-9_]", "_", raw[:_dimexpr.MAX_TEXT])
    if len(raw) > _dimexpr.MAX_TEXT:  # keep distinct long texts distinct without keeping them whole
        cleaned = cleaned[:64] + "_" + hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    if not cleaned or cleaned[0].isdigit():
        cleaned = "d_" + cleaned
    return cleaned


@functools.lru_cache(maxsize=65536)
def parse_dim(text: str) -> Dim:
    """Parse a dim_param such as ``batch``, ``batch*seq`` or ``floor(H/2 - 1/2) + 1``.

    A plain identifier becomes a symbol; an arithmetic expression over identifiers (as ORT's symbolic
    shape inference writes them) becomes that expression; anything else is one opaque symbol whose
    name is a sanitised copy of the text, so it is never lost or read as a number. The text comes from
    the model file, so it is never evaluated: :mod:`graphcost._dimexpr` parses a small grammar with
    limits on length, nesting, exponents and expanded size, which bounds the work any dim can cause.
    """
    if len(text) > _dimexpr.MAX_TEXT:  # never scanned further, so any length costs the same
        return symbol(_safe_name(text))
    text = text.strip()
    if len(text) <= 20 and _INT_OK.match(text) and abs(int(text)) <= _dimexpr.MAX_LITERAL:
        return int(text)
    if _NAME_OK.match(text):
        return symbol(text)
    try:
        expr = _dimexpr.parse(text, symbol)
    except _dimexpr.Rejected:
        return symbol(_safe_name(text))
    return simplify_dim(expr)


def parse_formula(text: str) -> Dim:
    """Parse a formula graphcost wrote (``report.totals.formulas``) back into its expression, by the dim
    grammar under the formula bounds (:data:`graphcost._dimexpr.FORMULA`: a whole model's count is far longer
    than a dim). ValueError when the text is not one: unlike a dim from a model file, a formula read as one
    opaque symbol would be a wrong number, not an unknown."""
    try:
        return simplify_dim(_dimexpr.parse(text.strip(), symbol, _dimexpr.FORMULA))
    except _dimexpr.Rejected as e:
        raise ValueError(f"not a formula graphcost can read: {e}") from None


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
    n = 1
    for d in shape:
        if type(d) is not int:
            return _symbolic_numel(shape) if type(shape) is tuple else prod(shape)
        n *= d
    return n


@functools.lru_cache(maxsize=65536)
def _symbolic_numel(shape: Shape) -> Dim:
    """:func:`numel` of a shape with a symbolic dim, cached: rules, the costs pass, fusion and liveness ask
    for the same tensors' sizes, and each ask multiplied sympy expressions anew (with ``tensor_bytes``'s
    cache: FCOS's 2,496 shaped tensors asked 3 times, 0.136 s CPU before, 0.048 s after)."""
    return prod(shape)


def ceil_log2(d: Dim) -> Dim:
    """⌈log2 d⌉ for a count (0 for d ≤ 1): an int for an int, a sympy expression for a symbolic dim."""
    if isinstance(d, int):
        return (d - 1).bit_length() if d > 1 else 0
    arg = sympy.log(d, 2)
    if d.is_Symbol:
        # for a plain dim, ceiling's own evaluation ends in ceiling(arg) itself after a dozen assumption queries
        # (about 3.4 ms a call; SSD300 legacy asks it of 180 TopK counts, each in a dim of its own: 0.57 s of
        # a 4.4 s analyze, py-spy); unevaluated it is the same object, as a test checks
        return sympy.ceiling(arg, evaluate=False)
    return sympy.ceiling(arg)


def text_names(text: str) -> frozenset[str]:
    """The dim names a dim *text* depends on: ``free_names(parse_dim(text))``, without importing sympy for a
    plain identifier (every identifier reads as itself in the dim grammar). On a static export the shapes pass
    asks this of every engine-written dim, and a plain name is nearly all of them: Swin-T legacy, 868 texts, all
    identifiers; the sympy import (about 0.7 s of a 2 s analyze) is then never paid."""
    if len(text) <= _PLAIN_NAME_MAX and _PLAIN_NAME.fullmatch(text):
        return frozenset((text,))
    return free_names(parse_dim(text))


_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PLAIN_NAME_MAX = 256  # far inside the grammar's length cap, past which a text becomes an opaque name


def evaluate(value: Dim, binding: Mapping[str, int]) -> int | float:
    """Numeric value of a dim or count under a binding of dim names to ints.

    Raises KeyError naming a dim left unbound.
    """
    if isinstance(value, (int, float)):
        return value
    if not isinstance(value, sympy.Basic):
        return float(value) if not float(value).is_integer() else int(value)
    if free_names(value) <= binding.keys():
        try:
            got: Exact | None = exact(value, binding, _exact_memo(binding))
        except (NotExact, ZeroDivisionError, OverflowError):
            got = None
        if isinstance(got, int) or (got is not None and got.denominator == 1):
            return int(got)
    subs = {}
    for s in value.free_symbols:
        name = str(s)
        if name not in binding:
            raise KeyError(name)
        subs[s] = as_expr(binding[name])
    result = as_expr(value.xreplace(subs))
    if result.is_Integer:
        return int(result)
    return float(result)


def _exact_memo(binding: Mapping[str, int]) -> dict[Any, Exact]:
    """The values :func:`graphcost._dimeval.exact` found under this binding before (reports ask many formulas that share
    subexpressions under one binding). A few bindings are kept, each up to 65,536 values.

    A binding holds every dim an export left unnamed (SSD300 legacy: 371, all bound to 1) and the reports ask
    thousands of values under the same one, so the binding last asked about is recognised by identity and
    content (a copy of it and its value types, compared in C) before a key is built: building the key on every
    call took 0.3-0.7 s of SSD300's 6 s analyze (4,790 calls; py-spy)."""
    types = tuple(map(type, binding.values()))  # 3.0 == 3, but is no int
    last = _LAST_MEMO
    if last and last[0] is binding and last[2] == types and last[1] == binding and len(last[3]) <= 1 << 16:
        return last[3]  # type: ignore[no-any-return]
    key = (frozenset(binding.items()), frozenset(zip(binding, types, strict=True)))
    memo = _EXACT_MEMOS.get(key)
    if memo is None or len(memo) > 1 << 16:
        if len(_EXACT_MEMOS) >= 8:
            _EXACT_MEMOS.clear()
        memo = _EXACT_MEMOS[key] = {}
    _LAST_MEMO[:] = [binding, dict(binding), types, memo]
    return memo


_EXACT_MEMOS: dict[Any, dict[Any, Exact]] = {}
_LAST_MEMO: list[Any] = []  # [binding, a copy of it, its value types, its memo]: the binding last asked about


def to_text(value: Dim) -> str:
    """A formula as text, written the way Python would (``24*batch*seq**2 + ...``)."""
    if isinstance(value, int):
        return str(value)
    return _expr_text(value)


TEXT_EXPAND_TERMS = 4096
"""Formulas whose expansion could exceed this many terms are printed as they stand, unexpanded."""


@functools.lru_cache(maxsize=65536)
def _expr_text(value: Any) -> str:
    if not expands_within(value, TEXT_EXPAND_TERMS):
        return _write(value)  # still the exact formula, only factored: expanding it could take unbounded time
    return _write(expand(value))


def expand(value: Any) -> Any:
    """``sympy.expand(value)``, without sympy's work on the terms of a sum that are expanded already.

    A report total is a sum of one count per node, and most of them are already monomials
    (``20*unk__NonZero_100_output_0_1``, ``n*Max(1, ceiling(log(k)/log(2)))``); ``sympy.expand`` still runs
    its nine passes (one per hint, then until nothing changes) over each. The terms :func:`_expanded` vouches
    for are kept as they are, the others expanded one by one, and the sum rebuilt as sympy's deep expansion
    rebuilds it (``Add`` of the expanded terms), so the result is the same expression. SSD300 (371
    data-dependent dims, about 1,000 terms a total): the report's five formulas 0.62–0.69 → 0.34–0.35 s, each run in
    a process of its own (what is left is the printer sorting the terms)."""
    if not value.is_Add:
        return value if _expanded(value) else sympy.expand(value)
    terms = value.args
    out = [t if _expanded(t) else sympy.expand(t) for t in terms]
    if all(a is b for a, b in zip(out, terms, strict=True)):
        return value
    return sympy.Add(*out)


@functools.lru_cache(maxsize=65536)
def _expanded(expr: Any) -> bool:
    """Whether ``sympy.expand(expr)`` is ``expr`` itself, for the forms counts take; False when not sure.

    Sure are: symbols and rationals; a product of such factors, none a sum; an integer power of a factor that
    is neither a sum nor a product (else the multinomial and power-base hints apply); ``floor``, ``ceiling``,
    ``Max``, ``Min`` and ``Mod`` of expanded arguments (none of them has an expand hint of its own); and
    ``log`` of a symbol or of 2 (the log hint rewrites the log of a product, a power, a fraction or a
    perfect-power integer)."""
    if expr.is_Atom:
        return bool(expr.is_Symbol or expr.is_Rational)
    args = expr.args
    if expr.is_Mul:
        return all(not a.is_Add and _expanded(a) for a in args)
    if expr.is_Pow:
        base, exp = args
        return bool(exp.is_Integer) and not base.is_Add and not base.is_Mul and _expanded(base)
    if expr.is_Add:  # inside a function
        return all(_expanded(a) for a in args)
    func = expr.func
    if func is sympy.log:
        return len(args) == 1 and (args[0].is_Symbol or args[0] == 2)
    if func in _plain_funcs():
        return all(_expanded(a) for a in args)
    return False


@functools.cache
def _plain_funcs() -> frozenset[Any]:
    """The functions :func:`_expanded` looks inside (built on first use: sympy is imported lazily)."""
    return frozenset({sympy.floor, sympy.ceiling, sympy.Max, sympy.Min, sympy.Mod})


def _write(value: Any) -> str:
    """``str(value)``, with the text of each subexpression remembered across formulas (``_sym.memo_str``)."""
    global _WRITE
    if _WRITE is None:
        _WRITE = _sym.memo_str()
    return _WRITE(value)


_WRITE: Any = None


def expands_within(value: Dim, limit: int) -> bool:
    """Whether ``sympy.expand(value)`` is sure to stay within ``limit`` terms at every level.

    Every dim is bounded by the parser, but a count multiplies many dims, and the expansion of a
    product of sums grows as the product of their lengths. Callers that expand (reports, symbolic
    equality) ask this first; it takes time linear in the size of the expression graph.
    """
    if isinstance(value, int):
        return True
    try:
        _terms(value, limit, {})
    except _TooBig:
        return False
    return True


class _TooBig(Exception):
    pass


def _terms(expr: Any, limit: int, seen: dict[Any, int]) -> int:
    """An upper bound on the terms of ``expand(expr)``; raises _TooBig past ``limit``."""
    if not expr.args:
        return 1
    if expr in seen:
        return seen[expr]
    n = 1
    if expr.is_Add:
        n = sum(_terms(a, limit, seen) for a in expr.args)
    elif expr.is_Mul:
        for a in expr.args:
            n *= _terms(a, limit, seen)
            if n > limit:
                raise _TooBig
    elif expr.is_Pow:
        base = _terms(expr.base, limit, seen)
        _terms(expr.exp, limit, seen)
        e = abs(int(expr.exp)) if expr.exp.is_Integer else 1  # expand also multiplies out denominators
        if base > 1 and e > limit.bit_length():  # base**e ≥ 2**e > limit
            raise _TooBig
        n = base ** e
    else:  # a function (floor, Max, Mod): one term, whose arguments are expanded too
        for a in expr.args:
            _terms(a, limit, seen)
    if n > limit:
        raise _TooBig
    seen[expr] = n
    return n
