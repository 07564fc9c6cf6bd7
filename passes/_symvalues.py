"""Shape *values* in symbolic dims: what a shape-computing subgraph holds when the graph's dims are names.

Exporters compute Reshape, Expand, Slice and Range arguments from shapes: ``Shape(x) → Gather → Unsqueeze →
Concat → Reshape`` (HF attention heads), ``Shape(q)[-1] // 2`` (rotate_half), ``Range(0, seq)`` (position ids).
onnx's C++ inference carries such values only while every entry is a number, so with ``batch`` and ``seq``
symbolic these outputs stay open. Here a value is a short tuple of dims (ints or sympy expressions in the
input dims), and one small pure function per op says what the node computes from its inputs' values.

Only what is certain is stated: an entry that cannot be expressed is ``None``, a rule that does not apply
returns ``None``, and no rule reads a tensor over :data:`MOST` entries, so the work per node is bounded.
Integer ``Div`` is floor division, exact for the non-negative dims a shape holds; float values (a Cast to
float for a Ceil) stay exact rationals until they are cast back. A value never comes from a graph input's
data: only constants, ``Shape``/``Size`` and ops over those (the caller skips value-dependent tensors).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import onnx

from graphcost._dims import Dim, expands_within, simplify_dim
from graphcost._minmax import dim_max, dim_min
from graphcost._sym import sympy
from graphcost.passes._shape_eval import registrar

MOST = 64
"""Largest value tracked: shape values are a handful of entries; anything longer is data."""

Elem = Dim | Fraction | None
"""One entry of a value: an int, an exact fraction (a float value), an expression in the input dims, or None
(not known here)."""
Shape = tuple[Elem, ...]
"""A tensor's dims as the sweep knows them (None: that dim is open)."""


@dataclass(frozen=True)
class Value:
    """A small tensor's entries, flattened; ``shape`` is its own shape (``()`` for a scalar)."""

    items: tuple[Elem, ...]
    shape: tuple[int, ...]
    floating: bool = False
    """Float tensor: ``Div`` is true division and a Cast to an integer type truncates."""


ValueRule = Callable[[onnx.NodeProto, list["Value | None"], Mapping[str, Any], int], "Value | None"]
VALUE_RULES: dict[str, ValueRule] = {}


value_rule = registrar(VALUE_RULES)


_FLOATS = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16,
                     onnx.TensorProto.BFLOAT16})
_INTS = frozenset({onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.INT16, onnx.TensorProto.INT8,
                   onnx.TensorProto.UINT8, onnx.TensorProto.UINT16, onnx.TensorProto.UINT32,
                   onnx.TensorProto.UINT64, onnx.TensorProto.BOOL})


_RAW: dict[int, str] = {onnx.TensorProto.INT64: "<i8", onnx.TensorProto.INT32: "<i4", onnx.TensorProto.FLOAT: "<f4",
        onnx.TensorProto.DOUBLE: "<f8", onnx.TensorProto.FLOAT16: "<f2", onnx.TensorProto.INT8: "i1",
        onnx.TensorProto.UINT8: "u1", onnx.TensorProto.BOOL: "u1", onnx.TensorProto.INT16: "<i2",
        onnx.TensorProto.UINT16: "<u2", onnx.TensorProto.UINT32: "<u4", onnx.TensorProto.UINT64: "<u8"}
"""Little-endian layouts of ``raw_data`` (the ONNX spec fixes them), for reading a small constant directly."""


def constant_value(t: onnx.TensorProto) -> Value | None:
    """A constant's entries, when it is small, numeric and held in the file itself (an external payload is
    never read here: its path is the loader's business). Float entries are exact fractions (Python's, so a
    static model never imports sympy)."""
    if t.data_location == onnx.TensorProto.EXTERNAL or t.data_type not in _FLOATS | _INTS:
        return None
    n = _count([int(d) for d in t.dims])
    if n > MOST:
        return None
    raw = t.raw_data
    layout = _RAW.get(t.data_type)
    if raw and layout is not None:
        if len(raw) != n * np.dtype(layout).itemsize:
            return None  # a malformed payload: not a value
        data = np.frombuffer(raw, dtype=layout).tolist()
    else:
        data = onnx.numpy_helper.to_array(t).reshape(-1).tolist()
    floating = t.data_type in _FLOATS
    items: list[Elem] = []
    for x in data:
        if floating:
            if not math.isfinite(x):
                return None
            items.append(int(x) if float(x).is_integer() else Fraction(x))
        else:
            items.append(int(x))
    return Value(tuple(items), tuple(int(d) for d in t.dims), floating)


def _number(e: Any) -> bool:
    return isinstance(e, (int, Fraction))


def shape_value(shape: Shape, attrs: Mapping[str, Any]) -> Value:
    """``Shape(x)`` with its ``start``/``end`` attributes (opset 15)."""
    rank = len(shape)
    start, end = int(attrs.get("start", 0)), int(attrs.get("end", rank))
    start, end = (max(0, min(rank, s + rank if s < 0 else s)) for s in (start, end))
    items = shape[start:end] if end > start else ()
    return Value(tuple(items), (len(items),))


# -- helpers -------------------------------------------------------------------------------------------------
def ints(v: Value | None) -> list[int] | None:
    """Entries that are all plain ints (axes, steps), else None."""
    if v is None or not all(isinstance(e, int) for e in v.items):
        return None
    return [int(e) for e in v.items]  # type: ignore[arg-type]


def axis_of(axis: int, rank: int) -> int | None:
    """``axis`` counted from 0 in a tensor of ``rank`` dims, or None when it is out of range."""
    if not -rank <= axis < max(rank, 1):
        return None
    return axis + rank if axis < 0 else axis


EXPAND_MOST = 256
"""Most terms an expression the sweep writes may expand to; a shape is a product of a few dims."""
POWER_MOST = 8
"""Highest power of a dim the sweep writes (a model that squares a shape value 60 times asks for 2**60)."""


def bounded(e: Any) -> bool:
    """Whether a sympy expression is small enough to expand and evaluate: the sweep's work stays bounded on any
    file (a chain of Muls of ``batch + seq`` by itself would otherwise expand to millions of terms)."""
    if not expands_within(e, EXPAND_MOST):
        return False
    return all(not p.exp.is_Number or abs(p.exp) <= POWER_MOST for p in e.atoms(sympy.Pow))


@functools.lru_cache(maxsize=1 << 14, typed=True)
def tidy_expr(e: Any) -> Any:
    """``round_ups(expand(e))`` for an expression small enough to expand (:func:`bounded`), else None: the form
    every dim and value of the sweep is kept in.

    Remembered, because a model repeats its shape arithmetic block by block: dynamic-size Swin-T asks it 1,046
    times of 87 expressions, and ``bounded``'s walk (``atoms``), the expansion and sympy's assumption queries in
    ``round_ups`` were the sweep's largest share. The sweep's wall time, two runs each, one after the other:
    dynamic-size Swin-T 0.52 → 0.46 s, Swin-V2-S 0.77 → 0.68 s. ``typed``: keys that are equal but not of
    one type stay apart."""
    if not bounded(e):
        return None
    return round_ups(sympy.expand(e))


def round_ups(e: Any) -> Any:
    """``e`` with each ``x + Mod(c·x, k)`` written ``k·ceiling(x/k)``: x rounded up to a multiple of k, where
    ``c ≡ -1 (mod k)`` (sympy writes ``Mod(-x, 7)`` as ``Mod(6*x, 7)``, and ``Mod(-x, 2)`` as ``Mod(x, 2)``) and
    x is integer. Swin pads each spatial dim to a multiple of its window (``pad = (7 - W % 7) % 7``) and
    PatchMerging to an even size (``W % 2``); the halving Slice and the window Reshape that follow divide
    exactly only in this form (a stage-3 dim of dynamic-size Swin-T otherwise nests past what the engines
    decide, and 212 dims were minted)."""
    if not isinstance(e, sympy.Add) or not e.has(sympy.Mod):
        return e
    terms = list(e.args)
    changed = False
    for t in e.args:
        coeff, rest = t.as_coeff_Mul()
        if not isinstance(rest, sympy.Mod) or t not in terms:
            continue
        arg, k = rest.args
        if not (k.is_Integer and k > 0):
            continue
        c, x = arg.as_coeff_Mul()
        if not (c.is_Integer and (int(c) + 1) % int(k) == 0 and x.is_integer):
            continue
        partner = coeff * x  # the x the Mod rounds up, with the same coefficient
        if partner in terms:
            terms.remove(partner)
            terms.remove(t)
            terms.append(coeff * k * sympy.ceiling(x / k))
            changed = True
    return sympy.Add(*terms) if changed else e


def at_least(a: Any, b: Any) -> bool:
    """Whether ``a >= b`` surely, for expressions in dims (non-negative integers): equal, their difference
    :func:`nonnegative`, or ``a`` is ``b`` rounded up to a multiple (``k*ceiling(b/k)``, :func:`round_ups`: the
    padded Swin dim against the dim it crops back to, ``x[:, :H]``, which sympy's ``Min`` leaves undecided)."""
    if a == b:
        return True
    if isinstance(a, sympy.Mul) and len(a.args) == 2:
        k, up = a.args
        if k.is_Integer and k > 0 and isinstance(up, sympy.ceiling) and sympy.expand(up.args[0] * k - b) == 0:
            return True
    diff = sympy.expand(a - b)
    return bool(isinstance(diff, int) and diff >= 0) or (isinstance(diff, sympy.Expr) and nonnegative(diff))


def _simplify(e: Any) -> Elem:
    if e is None:
        return None
    if isinstance(e, bool):
        return int(e)
    if isinstance(e, int):
        return e
    if isinstance(e, Fraction):  # a float value such as 3/2: kept exact
        return int(e) if e.denominator == 1 else e
    e = tidy_expr(e)
    if e is None:
        return None
    if e.is_Integer:
        return int(e)
    if e.is_Rational:
        return Fraction(int(e.p), int(e.q))
    return simplify_dim(e) if e.is_integer else e


def broadcast_items(a: Value, b: Value) -> tuple[list[tuple[Elem, Elem]], tuple[int, ...]] | None:
    """Pairs of entries of two values under numpy broadcasting, and the result's shape."""
    ra, rb = len(a.shape), len(b.shape)
    rank = max(ra, rb)
    sa = (1,) * (rank - ra) + a.shape
    sb = (1,) * (rank - rb) + b.shape
    out: list[int] = []
    for x, y in zip(sa, sb, strict=True):
        if x != y and 1 not in (x, y):
            return None
        out.append(max(x, y))
    n = _count(out)
    if n > MOST:
        return None

    def index(padded: tuple[int, ...], flat: int) -> int:
        """Position in an operand (of ``padded`` shape, broadcast to ``out``) of the result's ``flat``-th entry."""
        k, stride = 0, 1
        for d, size in zip(reversed(padded), reversed(out), strict=True):
            if d != 1:
                k += (flat % size) * stride
            flat //= size
            stride *= d
        return k

    return [(a.items[index(sa, i)], b.items[index(sb, i)]) for i in range(n)], tuple(out)


def _binary(fn: Callable[[Any, Any, bool], Elem]) -> ValueRule:
    def rule(node: onnx.NodeProto, ins: list[Value | None], attrs: Mapping[str, Any], opset: int) -> Value | None:
        if len(ins) < 2 or ins[0] is None or ins[1] is None:
            return None
        pairs = broadcast_items(ins[0], ins[1])
        if pairs is None:
            return None
        floating = ins[0].floating or ins[1].floating
        items = tuple(None if x is None or y is None else _simplify(fn(x, y, floating)) for x, y in pairs[0])
        return Value(items, pairs[1], floating)
    return rule


def _div(x: Any, y: Any, floating: bool) -> Elem:
    if isinstance(y, int) and y == 0:
        return None
    if floating:
        return Fraction(x) / Fraction(y) if _number(x) and _number(y) else x / y
    if isinstance(x, int) and isinstance(y, int):
        return abs(x) // abs(y) * (1 if (x >= 0) == (y >= 0) else -1)  # truncation, as ONNX integer Div
    return sympy.floor(x / y)  # shape entries are non-negative: truncation is floor


def _mod(x: Any, y: Any, floating: bool) -> Elem:
    """Integer Mod (``fmod=0``: the sign of the divisor, as Python's ``%``), by a positive number."""
    if floating or not isinstance(y, int) or y <= 0:
        return None
    return x % y if isinstance(x, int) else sympy.Mod(x, y)  # Swin's pad = (7 - W % 7) % 7


def _compare(op: str) -> Callable[[Any, Any, bool], Elem]:
    def fn(x: Any, y: Any, floating: bool) -> Elem:
        diff = _simplify(x - y)
        if isinstance(diff, (int, Fraction)):
            return int({"Equal": diff == 0, "Less": diff < 0, "LessOrEqual": diff <= 0, "Greater": diff > 0,
                        "GreaterOrEqual": diff >= 0}[op])
        if diff is None:
            return None
        if op == "Equal" and diff.is_number and diff != 0:
            return 0
        # a dim is non-negative: "d == -1" (HF's reshape fix-up) is known false, "d >= 0" true
        if isinstance(y, int) and y < 0 and not _number(x) and nonnegative(x):
            return int(op in ("Greater", "GreaterOrEqual"))
        return None
    return fn


value_rule("Add")(_binary(lambda x, y, f: x + y))
value_rule("Sub")(_binary(lambda x, y, f: x - y))
value_rule("Mul")(_binary(lambda x, y, f: x * y))
value_rule("Div")(_binary(_div))
value_rule("Mod")(_binary(_mod))
value_rule("Max")(_binary(lambda x, y, f: max(x, y) if _number(x) and _number(y) else dim_max(x, y)))
value_rule("Min")(_binary(lambda x, y, f: min(x, y) if _number(x) and _number(y) else dim_min(x, y)))
for _op in ("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"):
    value_rule(_op)(_binary(_compare(_op)))
value_rule("And")(_binary(lambda x, y, f: int(bool(x) and bool(y)) if isinstance(x, int) and isinstance(y, int)
                          else (0 if 0 in (x, y) else None)))
value_rule("Or")(_binary(lambda x, y, f: int(bool(x) or bool(y)) if isinstance(x, int) and isinstance(y, int)
                         else (1 if 1 in (x, y) else None)))


def _unary(fn: Callable[[Any, bool], Elem]) -> ValueRule:
    def rule(node: onnx.NodeProto, ins: list[Value | None], attrs: Mapping[str, Any], opset: int) -> Value | None:
        v = ins[0] if ins else None
        if v is None:
            return None
        return Value(tuple(None if e is None else _simplify(fn(e, v.floating)) for e in v.items), v.shape,
                     v.floating)
    return rule


value_rule("Neg")(_unary(lambda e, f: -e))
value_rule("Abs")(_unary(lambda e, f: abs(e) if _number(e) else (e if nonnegative(e) else None)))
value_rule("Floor")(_unary(lambda e, f: math.floor(e) if _number(e) else sympy.floor(e)))
value_rule("Ceil")(_unary(lambda e, f: math.ceil(e) if _number(e) else sympy.ceiling(e)))
value_rule("Not")(_unary(lambda e, f: int(not e) if isinstance(e, int) else None))
value_rule("Identity")(_unary(lambda e, f: e))


@value_rule("Cast")
def _cast(node: onnx.NodeProto, ins: list[Value | None], attrs: Mapping[str, Any], opset: int) -> Value | None:
    v = ins[0] if ins else None
    to = int(attrs.get("to", 0))
    if v is None or to not in _FLOATS | _INTS:
        return None
    if to in _FLOATS:
        return Value(v.items, v.shape, True)
    if to == onnx.TensorProto.BOOL:
        return Value(tuple(None if e is None else (int(e != 0) if _number(e) else None) for e in v.items),
                     v.shape)
    if v.floating:  # to an integer type: truncation toward zero, floor for the non-negative values shapes hold
        return Value(tuple(_truncated(e) for e in v.items), v.shape)
    return Value(v.items, v.shape)


def _truncated(e: Elem) -> Elem:
    """A float entry cast to an integer type: toward zero (``int`` of a Fraction), itself for an expression
    that is a whole number (MobileViT's ``ceil(h / 2) * 2``), floor for one known non-negative (the values
    shapes hold), else not known."""
    if e is None or isinstance(e, (int, Fraction)):
        return None if e is None else int(e)
    if e.is_integer:
        return e
    return _simplify(sympy.floor(e)) if nonnegative(e) else None


def _without_clamps(terms: list[Any]) -> list[Any]:
    """The terms of a sum less each ``-Min(..., a, ...)`` together with a term ``a``: ``a - Min(a, b) ≥ 0``
    (Longformer's ``floor(seq/2) - Min(1, floor(seq/2))``); and less each ``-Max(0, a - c)`` with ``a`` and a
    number ``c ≥ 0``: ``a - Max(0, a - c) = Min(a, c) ≥ 0`` for ``a ≥ 0`` (the last c entries a Slice keeps of a
    dim: Swin's shifted-window mask, ``x[-3:]``)."""
    for k, t in enumerate(terms):
        if not (t.is_Mul and len(t.args) == 2 and t.args[0] == -1):
            continue
        clamp = t.args[1]
        for j, u in enumerate(terms):
            if j == k:
                continue
            if clamp.func is sympy.Min and u in clamp.args:
                return _without_clamps([x for i, x in enumerate(terms) if i not in (j, k)])
            if clamp.func is sympy.Max and len(clamp.args) == 2 and 0 in clamp.args and nonnegative(u):
                rest = sympy.expand(clamp.args[1] if clamp.args[0] == 0 else clamp.args[0]) - u
                if rest.is_number and rest <= 0:
                    return _without_clamps([x for i, x in enumerate(terms) if i not in (j, k)])
    return terms


def nonnegative(e: Any) -> bool:
    """Whether an expression in dims (non-negative integers) is surely ≥ 0: sympy's answer, or a sum or product
    of such parts, or a ``ceiling``, ``floor``, ``Max`` or ``Min`` of them (sympy knows no sign of a ``ceiling``:
    ``ceiling(h/2).is_nonnegative`` is None)."""
    if e.is_nonnegative:
        return True
    if e.is_Add:
        return all(nonnegative(a) for a in _without_clamps(list(e.args)))
    if e.is_Mul or e.func in (sympy.ceiling, sympy.floor, sympy.Min):
        return all(nonnegative(a) for a in e.args)
    if e.func is sympy.Max:
        return any(nonnegative(a) for a in e.args)
    return False


@value_rule("Gather")
def _gather(node: onnx.NodeProto, ins: list[Value | None], attrs: Mapping[str, Any], opset: int) -> Value | None:
    data, idx = [*ins, None, None][:2]
    index = ints(idx)
    if data is None or idx is None or index is None or len(data.shape) != 1 or int(attrs.get("axis", 0)) not in (0, -1):
        return None
    n = data.shape[0]
    picked: list[Elem] = []
    for i in index:
        if not -n <= i < n:
            return None
        picked.append(data.items[i + n if i < 0 else i])
    return Value(tuple(picked), idx.shape)


def _array(v: Value) -> np.ndarray:
    """A value's entries as a numpy object array of its shape (entries stay ints, fractions or expressions)."""
    a = np.empty(len(v.items), dtype=object)
    a[:] = list(v.items)
    return a.reshape(v.shape)


def _of_array(a: np.ndarray, floating: bool) -> Value:
    return Value(tuple(a.reshape(-1).tolist()), tuple(int(d) for d in a.shape), floating)


def given(node: onnx.NodeProto, k: int) -> bool:
    """Whether the node names its ``k``-th input (an optional input may be left out or written as "")."""
    return len(node.input) > k and bool(node.input[k])


SliceArgs = tuple[list[Elem], list[Elem], list[Elem], list[Elem]]
"""A Slice's (starts, ends, axes, steps), entry by entry (an entry may be an expression or not known)."""


def slice_args(node: onnx.NodeProto, ins: list[Value | None], attrs: Mapping[str, Any], opset: int) -> SliceArgs | None:
    """The Slice's arguments, from its attributes (opset < 10) or its inputs; None when an input it names has
    no value or the four lists differ in length. Axes default to the first ones, steps to 1."""
    if opset < 10:
        starts: list[Elem] = list(attrs.get("starts", []))
        ends: list[Elem] = list(attrs.get("ends", []))
        axes: list[Elem] = list(attrs.get("axes", range(len(starts))))
        steps: list[Elem] = [1] * len(starts)
    else:
        got = [ins[k] if len(ins) > k else None for k in range(1, 5)]
        if got[0] is None or got[1] is None or (given(node, 3) and got[2] is None) or \
                (given(node, 4) and got[3] is None):
            return None
        starts, ends = list(got[0].items), list(got[1].items)
        axes = list(got[2].items) if got[2] is not None else list(range(len(starts)))
        steps = list(got[3].items) if got[3] is not None else [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        return None
    return starts, ends, axes, steps


@value_rule("Slice")
def _slice(node: onnx.NodeProto, ins: list[Value | None], attrs: Mapping[str, Any], opset: int) -> Value | None:
    """Any rank and step (the legacy exporter flips ``F.pad``'s pairs with a step of -1), with the indices
    ONNX's clamping picks (``range(*slice.indices)``: a backward end past the front stops before index 0)."""
    data = ins[0] if ins else None
    args = slice_args(node, ins, attrs, opset)
    if data is None or args is None or not all(isinstance(e, int) for part in args for e in part):
        return None
    a = _array(data)
    for st, en, ax, step in zip(*args, strict=True):
        k = axis_of(ax, a.ndim)  # type: ignore[arg-type]
        if k is None or step == 0:
            return None
        a = np.take(a, list(range(*slice(st, en, step).indices(a.shape[k]))), axis=k)  # type: ignore[arg-type]
    return _of_array(a, data.floating)


@value_rule("Transpose")
def _transpose(node: onnx.NodeProto, ins: list[Value | None], attrs: Mapping[str, Any], opset: int) -> Value | None:
    v = ins[0] if ins else None
    if v is None:
        return None
    perm = list(attrs.get("perm", range(len(v.shape) - 1, -1, -1)))
    if sorted(perm) != list(range(len(v.shape))):
        return None
    return _of_array(_array(v).transpose(perm), v.floating)


@value_rule("Concat")
def _concat(node: onnx.NodeProto, ins: list[Value | None], attrs: Mapping[str, Any], opset: int) -> Value | None:
    if not ins or any(v is None or len(v.shape) != 1 for v in ins):
        return None
    items = tuple(e for v in ins if v is not None for e in v.items)
    if len(items) > MOST:
        return None
    return Value(items, (len(items),), any(v is not None and v.floating for v in ins))


@value_rule("Unsqueeze", "Squeeze", "Reshape", "Flatten")
def _regroup(node: onnx.NodeProto, ins: list[Value | None], attrs: Mapping[str, Any], opset: int) -> Value | None:
    """Same entries, another shape (a value's own shape is all numbers, so each op's rule is plain)."""
    v = ins[0] if ins else None
    if v is None:
        return None
    shape = _regrouped(node.op_type, v, ins, attrs, opset)
    if shape is None or _count(shape) != len(v.items):
        return None
    return Value(v.items, shape, v.floating)


def _regrouped(op: str, v: Value, ins: list[Value | None], attrs: Mapping[str, Any],
               opset: int) -> tuple[int, ...] | None:
    second = ins[1] if len(ins) > 1 else None
    if op == "Reshape":
        target = ints(second)
        if target is None or target.count(-1) > 1:
            return None
        dims = [v.shape[k] if d == 0 and not attrs.get("allowzero", 0) and k < len(v.shape) else d
                for k, d in enumerate(target)]
        if -1 in dims:
            rest = _count([d for d in dims if d != -1]) or 1
            dims[dims.index(-1)] = len(v.items) // rest
        return tuple(dims)
    if op == "Flatten":
        axis = int(attrs.get("axis", 1))
        axis = axis + len(v.shape) if axis < 0 else axis
        return (_count(v.shape[:axis]), _count(v.shape[axis:]))
    axes = list(attrs["axes"]) if opset < 13 and "axes" in attrs else ints(second)
    if op == "Unsqueeze":
        if axes is None:
            return None
        rank = len(v.shape) + len(axes)
        where = {a + rank if a < 0 else a for a in axes}
        if len(where) != len(axes) or not all(0 <= a < rank for a in where):
            return None
        dims_it = iter(v.shape)
        return tuple(1 if k in where else next(dims_it) for k in range(rank))
    if axes is None:  # Squeeze with no axes: every 1 goes
        return tuple(d for d in v.shape if d != 1)
    drop = {a + len(v.shape) if a < 0 else a for a in axes}
    return tuple(d for k, d in enumerate(v.shape) if k not in drop)


@value_rule("Range")
def _range(node: onnx.NodeProto, ins: list[Value | None], attrs: Mapping[str, Any], opset: int) -> Value | None:
    args = [ints(v) for v in [*ins, None, None, None][:3]]
    if any(a is None or len(a) != 1 for a in args):
        return None
    start, limit, delta = (a[0] for a in args if a is not None)
    if delta == 0:
        return None
    items = tuple(range(start, limit, delta))
    return Value(items, (len(items),)) if len(items) <= MOST else None


@value_rule("ConstantOfShape")
def _constant_of_shape(node: onnx.NodeProto, ins: list[Value | None], attrs: Mapping[str, Any],
                       opset: int) -> Value | None:
    dims = ints(ins[0] if ins else None)
    t = attrs.get("value")
    fill = constant_value(t) if isinstance(t, onnx.TensorProto) else Value((0,), (1,), True)
    if dims is None or fill is None or len(fill.items) != 1 or any(d < 0 for d in dims):
        return None
    n = _count(dims)
    return Value(fill.items * n, tuple(dims), fill.floating) if n <= MOST else None


@value_rule("Expand")
def _expand(node: onnx.NodeProto, ins: list[Value | None], attrs: Mapping[str, Any], opset: int) -> Value | None:
    v, dims = [*ins, None, None][0], ints(ins[1] if len(ins) > 1 else None)
    if v is None or dims is None:
        return None
    target = Value((0,) * _count(dims), tuple(dims))
    pairs = broadcast_items(v, target)
    return None if pairs is None else Value(tuple(x for x, _ in pairs[0]), pairs[1], v.floating)


@value_rule("Where")
def _where(node: onnx.NodeProto, ins: list[Value | None], attrs: Mapping[str, Any], opset: int) -> Value | None:
    if len(ins) < 3 or any(v is None for v in ins[:3]):
        return None
    cond, x, y = ins[0], ins[1], ins[2]
    assert cond is not None and x is not None and y is not None
    first = broadcast_items(cond, x)
    if first is None:
        return None
    joined = Value(tuple(c if c is None else (xv if c else 0) for c, xv in first[0]), first[1], x.floating)
    flags = Value(tuple(c for c, _ in first[0]), first[1])
    second, third = broadcast_items(joined, y), broadcast_items(flags, y)
    if second is None or third is None:
        return None
    items = tuple(None if c is None else (xv if c else yv) for (xv, yv), (c, _) in zip(second[0], third[0],
                                                                                         strict=True))
    return Value(items, second[1], x.floating or y.floating)


_FOLDS: dict[str, Callable[[Any, Any], Any]] = {
    "ReduceProd": lambda a, b: a * b,
    "ReduceSum": lambda a, b: a + b,
    "ReduceMax": lambda a, b: max(a, b) if _number(a) and _number(b) else dim_max(a, b),
    "ReduceMin": lambda a, b: min(a, b) if _number(a) and _number(b) else dim_min(a, b),
}


@value_rule(*_FOLDS)
def _reduce(node: onnx.NodeProto, ins: list[Value | None], attrs: Mapping[str, Any], opset: int) -> Value | None:
    """A whole-vector reduction of a shape (numel, a rank sum); axes, as attribute or input, must be that one."""
    v = ins[0] if ins else None
    if v is None or len(v.shape) > 1 or any(e is None for e in v.items):
        return None
    named = given(node, 1)
    axes = ints(ins[1] if len(ins) > 1 else None) if named else attrs.get("axes")
    if (named and axes is None) or (axes is not None and list(axes) not in ([0], [-1])):
        return None  # axes not known, or not the vector's one axis
    out: Any = None
    for e in v.items:
        out = e if out is None else _FOLDS[node.op_type](out, e)
    if out is None:
        return None
    keep = int(attrs.get("keepdims", 1))
    return Value((_simplify(out),), (1,) * len(v.shape) if keep else (), v.floating)


def _count(dims: Sequence[int]) -> int:
    """Entries of a tensor of these dims, capped at ``MOST + 1`` (a larger one is never a value)."""
    n = 1
    for d in dims:
        n *= d
    return n if n <= MOST else MOST + 1
