"""A small numpy evaluator for the ops that compute shapes: one function per op, checked against the ONNX spec.

Why not ``onnx.reference``: its ops allocate whatever the node asks for (a ``ConstantOfShape`` of a
billion elements), and graphcost must never run a node over a large tensor. Here every rule states the
size of its output *before* making it (:func:`_guard`), so a caller's cap bounds the work by construction.
The rules are tested against ``onnx.reference.ReferenceEvaluator`` on random small inputs.

A rule takes the node's input arrays (None for an omitted optional input), its attributes (decoded, by
name) and the opset of its domain, and returns the output arrays. It raises :class:`NotEvaluable` with a
reason when the node cannot be evaluated here (an integer division by zero, an index out of range, an
output over the cap): an expected outcome, never a crash.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import onnx

MAX_ELEMENTS = 65536
"""Largest tensor (inputs and outputs) a rule reads or makes: shape values are a handful of integers."""

Array = np.ndarray
Attrs = Mapping[str, Any]
Rule = Callable[[list[Array | None], Attrs, int], list[Array]]


class NotEvaluable(Exception):
    """The node cannot be evaluated here; ``str(e)`` is the reason."""


RULES: dict[str, Rule] = {}

F = TypeVar("F", bound=Callable[..., Any])


def registrar(table: dict[str, F]) -> Callable[..., Callable[[F], F]]:
    """A decorator factory that files a rule under each op type it names in ``table`` (the op-rule tables
    of this module, ``_symvalues`` and ``_symsweep`` are all made this way: explicit and greppable)."""
    def for_ops(*op_types: str) -> Callable[[F], F]:
        def register(fn: F) -> F:
            for op in op_types:
                table[op] = fn
            return fn
        return register
    return for_ops


rule = registrar(RULES)


def evaluate(op_type: str, inputs: list[Array | None], attrs: Attrs, opset: int) -> list[Array]:
    """Outputs of one default-domain node, or :class:`NotEvaluable`."""
    fn = RULES.get(op_type)
    if fn is None:
        raise NotEvaluable(f"no evaluator for {op_type}")
    for a in inputs:
        if a is not None and a.size > MAX_ELEMENTS:
            raise NotEvaluable(f"input of {a.size} elements is over the cap of {MAX_ELEMENTS}")
    try:
        with np.errstate(all="ignore"):
            outs = fn(inputs, attrs, opset)
    except NotEvaluable:
        raise
    except (ValueError, IndexError, TypeError, OverflowError, KeyError) as e:
        raise NotEvaluable(f"{op_type}: {e}") from None
    return [np.asarray(o) for o in outs]


def decode_attrs(node: onnx.NodeProto) -> dict[str, Any]:
    """Attributes of a node by name, decoded (tensors as numpy arrays); graph attributes are left out."""
    out: dict[str, Any] = {}
    for a in node.attribute:
        if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
            continue
        if a.type == onnx.AttributeProto.TENSOR:
            out[a.name] = onnx.numpy_helper.to_array(a.t)
        else:
            out[a.name] = onnx.helper.get_attribute_value(a)
    return out


def _guard(shape: Sequence[int]) -> tuple[int, ...]:
    """The output shape, refused when it is negative or over the cap (checked before anything is allocated)."""
    dims = tuple(int(d) for d in shape)
    n = 1
    for d in dims:
        if d < 0:
            raise NotEvaluable(f"negative dim in output shape {dims}")
        n *= d
    if n > MAX_ELEMENTS:
        raise NotEvaluable(f"output of {n} elements is over the cap of {MAX_ELEMENTS}")
    return dims


def _ints(a: Array | None) -> list[int]:
    return [] if a is None else [int(v) for v in np.asarray(a).reshape(-1)]


def _axis(axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise NotEvaluable(f"axis {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def _need(inputs: list[Array | None], i: int) -> Array:
    if i >= len(inputs) or inputs[i] is None:
        raise NotEvaluable(f"input {i} missing")
    a = inputs[i]
    assert a is not None
    return a


def _axes_of(inputs: list[Array | None], attrs: Attrs, opset: int, since: int) -> list[int] | None:
    """Axes from the attribute (opset < ``since``) or from input 1 (opset >= ``since``); None when absent."""
    if opset < since:
        return list(attrs["axes"]) if "axes" in attrs else None
    return _ints(inputs[1]) if len(inputs) > 1 and inputs[1] is not None else None


# -- movement and plumbing ---------------------------------------------------------------------------------------
@rule("Identity")
def _identity(i: list[Array | None], a: Attrs, v: int) -> list[Array]:
    return [_need(i, 0)]


@rule("Gather")
def _gather(i: list[Array | None], a: Attrs, v: int) -> list[Array]:
    data, idx = _need(i, 0), _need(i, 1).astype(np.int64)
    axis = _axis(int(a.get("axis", 0)), data.ndim)
    n = data.shape[axis]
    if np.any((idx < -n) | (idx >= n)):
        raise NotEvaluable("Gather index out of range")
    _guard(data.shape[:axis] + idx.shape + data.shape[axis + 1:])
    return [np.take(data, np.where(idx < 0, idx + n, idx), axis=axis)]


@rule("GatherElements")
def _gather_elements(i: list[Array | None], a: Attrs, v: int) -> list[Array]:
    data, idx = _need(i, 0), _need(i, 1).astype(np.int64)
    axis = _axis(int(a.get("axis", 0)), data.ndim)
    n = data.shape[axis]
    if np.any((idx < -n) | (idx >= n)):
        raise NotEvaluable("GatherElements index out of range")
    return [np.take_along_axis(data, np.where(idx < 0, idx + n, idx), axis=axis)]


@rule("Slice")
def _slice(i: list[Array | None], a: Attrs, v: int) -> list[Array]:
    data = _need(i, 0)
    if v < 10:
        starts, ends = list(a.get("starts", [])), list(a.get("ends", []))
        axes = list(a["axes"]) if "axes" in a else list(range(len(starts)))
        steps = [1] * len(starts)
    else:
        starts, ends = _ints(_need(i, 1)), _ints(_need(i, 2))
        axes = _ints(i[3]) if len(i) > 3 and i[3] is not None else list(range(len(starts)))
        steps = _ints(i[4]) if len(i) > 4 and i[4] is not None else [1] * len(starts)
    index: list[slice] = [slice(None)] * data.ndim
    for s, e, ax, st in zip(starts, ends, axes, steps, strict=True):
        ax = _axis(ax, data.ndim)
        dim = data.shape[ax]
        if st == 0:
            raise NotEvaluable("Slice step 0")
        s = s + dim if s < 0 else s
        e = e + dim if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), dim), min(max(e, 0), dim)
            index[ax] = slice(s, e, st)
        else:  # ONNX clamps a backward end to -1, "before index 0", which a Python slice spells None
            s, e = min(max(s, 0), dim - 1), min(max(e, -1), dim - 1)
            index[ax] = slice(s, None if e < 0 else e, st)
    return [data[tuple(index)]]


@rule("Concat")
def _concat(i: list[Array | None], a: Attrs, v: int) -> list[Array]:
    parts = [x for x in i if x is not None]
    if not parts:
        raise NotEvaluable("Concat of nothing")
    axis = _axis(int(a["axis"]), parts[0].ndim)
    _guard((sum(p.size for p in parts),))
    return [np.concatenate(parts, axis=axis)]


@rule("Unsqueeze")
def _unsqueeze(i: list[Array | None], a: Attrs, v: int) -> list[Array]:
    data = _need(i, 0)
    axes = _axes_of(i, a, v, 13)
    if not axes:
        raise NotEvaluable("Unsqueeze without axes")
    rank = data.ndim + len(axes)
    norm = sorted(_axis(x, rank) for x in axes)
    if len(set(norm)) != len(norm):
        raise NotEvaluable("Unsqueeze with repeated axes")
    out = data
    for ax in norm:
        out = np.expand_dims(out, ax)
    return [out]


@rule("Squeeze")
def _squeeze(i: list[Array | None], a: Attrs, v: int) -> list[Array]:
    data = _need(i, 0)
    axes = _axes_of(i, a, v, 13)
    if axes is None:
        return [data.reshape([d for d in data.shape if d != 1])]
    norm = tuple(sorted({_axis(x, data.ndim) for x in axes}))
    if any(data.shape[x] != 1 for x in norm):
        raise NotEvaluable("Squeeze of a dim that is not 1")
    return [np.squeeze(data, axis=norm)]


@rule("Reshape")
def _reshape(i: list[Array | None], a: Attrs, v: int) -> list[Array]:
    data = _need(i, 0)
    shape = list(a["shape"]) if v < 5 else _ints(_need(i, 1))
    allowzero = int(a.get("allowzero", 0))
    out: list[int] = []
    for k, d in enumerate(shape):
        if d == 0 and not allowzero:
            if k >= data.ndim:
                raise NotEvaluable("Reshape copies a dim the input does not have")
            out.append(data.shape[k])
        else:
            out.append(d)
    return [data.reshape(out)]


@rule("Flatten")
def _flatten(i: list[Array | None], a: Attrs, v: int) -> list[Array]:
    data = _need(i, 0)
    axis = int(a.get("axis", 1))
    axis = axis + data.ndim if axis < 0 else axis
    if not 0 <= axis <= data.ndim:
        raise NotEvaluable(f"Flatten axis {axis} out of range")
    outer = int(np.prod(data.shape[:axis], dtype=np.int64))
    return [data.reshape(outer, -1) if data.size else data.reshape(outer, int(np.prod(data.shape[axis:])))]


@rule("Transpose")
def _transpose(i: list[Array | None], a: Attrs, v: int) -> list[Array]:
    data = _need(i, 0)
    perm = list(a["perm"]) if "perm" in a else None
    return [np.transpose(data, perm)]


@rule("Expand")
def _expand(i: list[Array | None], a: Attrs, v: int) -> list[Array]:
    data, shape = _need(i, 0), _ints(_need(i, 1))
    out = _guard(np.broadcast_shapes(data.shape, tuple(shape)))  # Expand broadcasts both ways
    return [np.broadcast_to(data, out).copy()]


@rule("Tile")
def _tile(i: list[Array | None], a: Attrs, v: int) -> list[Array]:
    data, reps = _need(i, 0), _ints(_need(i, 1))
    if len(reps) != data.ndim:
        raise NotEvaluable("Tile repeats do not match the rank")
    _guard([d * r for d, r in zip(data.shape, reps, strict=True)])
    return [np.tile(data, reps)]


@rule("Split")
def _split(i: list[Array | None], a: Attrs, v: int) -> list[Array]:
    data = _need(i, 0)
    axis = _axis(int(a.get("axis", 0)), data.ndim)
    n = data.shape[axis]
    split = list(a["split"]) if v < 13 and "split" in a else (
        _ints(i[1]) if v >= 13 and len(i) > 1 and i[1] is not None else None)
    outputs = int(a.get("_outputs", 1))
    if split is None:
        parts = int(a.get("num_outputs", outputs))
        size = -(-n // parts)  # ceil: opset 18 lets the last chunk be smaller
        if v < 18 and n % parts:
            raise NotEvaluable("Split into unequal parts without sizes")
        split = [min(size, n - k * size) for k in range(parts)]
    if sum(split) != n or any(s < 0 for s in split):
        raise NotEvaluable("Split sizes do not add up to the dim")
    bounds = np.cumsum(split)[:-1]
    return list(np.split(data, bounds, axis=axis))


# -- values from shapes ------------------------------------------------------------------------------------------
def shape_values(shape: Sequence[int], attrs: Attrs) -> Array:
    """Shape's output for a tensor of ``shape``, honouring ``start``/``end`` (opset 15)."""
    rank = len(shape)
    start = int(attrs.get("start", 0))
    end = int(attrs.get("end", rank))
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return np.array([int(d) for d in shape[start:end]], dtype=np.int64)


@rule("Shape")
def _shape(i: list[Array | None], a: Attrs, v: int) -> list[Array]:
    return [shape_values(_need(i, 0).shape, a)]


@rule("Size")
def _size(i: list[Array | None], a: Attrs, v: int) -> list[Array]:
    return [np.array(_need(i, 0).size, dtype=np.int64)]


@rule("ConstantOfShape")
def _constant_of_shape(i: list[Array | None], a: Attrs, v: int) -> list[Array]:
    shape = _guard(_ints(_need(i, 0)))
    value = a.get("value")
    fill = np.asarray(value).reshape(-1) if value is not None else np.zeros(1, dtype=np.float32)
    return [np.full(shape, fill[0], dtype=fill.dtype)]


@rule("Range")
def _range(i: list[Array | None], a: Attrs, v: int) -> list[Array]:
    start, limit, delta = (_need(i, k).reshape(()) for k in range(3))
    if delta == 0:
        raise NotEvaluable("Range with delta 0")
    count = max(int(np.ceil((float(limit) - float(start)) / float(delta))), 0)
    _guard((count,))
    return [(start + np.arange(count, dtype=start.dtype) * delta).astype(start.dtype)]


@rule("NonZero")
def _nonzero(i: list[Array | None], a: Attrs, v: int) -> list[Array]:
    data = _need(i, 0)
    _guard((data.ndim, int(np.count_nonzero(data))))
    return [np.array(np.nonzero(data), dtype=np.int64).reshape(data.ndim, -1)]


@rule("Cast")
def _cast(i: list[Array | None], a: Attrs, v: int) -> list[Array]:
    to = int(a["to"])
    if to in (onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED) or to > onnx.TensorProto.BFLOAT16:
        raise NotEvaluable(f"Cast to type {to} is not evaluated")
    return [_need(i, 0).astype(onnx.helper.tensor_dtype_to_np_dtype(to))]


# -- arithmetic --------------------------------------------------------------------------------------------------
def _same(a: Array, out: Any) -> Array:
    return np.asarray(out).astype(a.dtype, copy=False)


def _binary(fn: Callable[[Array, Array], Any]) -> Rule:
    def apply(i: list[Array | None], a: Attrs, v: int) -> list[Array]:
        x, y = _need(i, 0), _need(i, 1)
        _guard(np.broadcast_shapes(x.shape, y.shape))
        return [_same(x, fn(x, y))]
    return apply


rule("Add")(_binary(np.add))
rule("Sub")(_binary(np.subtract))
rule("Mul")(_binary(np.multiply))


def _int_kind(x: Array) -> bool:
    return x.dtype.kind in "iub"


@rule("Div")
def _div(i: list[Array | None], a: Attrs, v: int) -> list[Array]:
    x, y = _need(i, 0), _need(i, 1)
    _guard(np.broadcast_shapes(x.shape, y.shape))
    if _int_kind(x):
        if np.any(y == 0):
            raise NotEvaluable("integer division by zero")
        q = np.abs(x) // np.abs(y)  # ONNX integer Div truncates toward zero
        return [_same(x, np.where((x < 0) != (y < 0), -q, q))]
    return [_same(x, x / y)]


@rule("Mod")
def _mod(i: list[Array | None], a: Attrs, v: int) -> list[Array]:
    x, y = _need(i, 0), _need(i, 1)
    _guard(np.broadcast_shapes(x.shape, y.shape))
    fmod = int(a.get("fmod", 0))
    if _int_kind(x) and np.any(y == 0):
        raise NotEvaluable("integer modulo by zero")
    if fmod:  # C fmod: the sign of the dividend
        return [_same(x, np.fmod(x, y))]
    if not _int_kind(x):
        raise NotEvaluable("Mod of floats needs fmod=1")
    return [_same(x, np.mod(x, y))]  # the sign of the divisor, as Python's %


@rule("Pow")
def _pow(i: list[Array | None], a: Attrs, v: int) -> list[Array]:
    x, y = _need(i, 0), _need(i, 1)
    _guard(np.broadcast_shapes(x.shape, y.shape))
    if _int_kind(x) and np.any(y < 0):
        raise NotEvaluable("integer Pow with a negative exponent")
    return [_same(x, np.power(x, y.astype(x.dtype) if _int_kind(x) else y))]


def _unary(fn: Callable[[Array], Any], floats_only: bool = False) -> Rule:
    def apply(i: list[Array | None], a: Attrs, v: int) -> list[Array]:
        x = _need(i, 0)
        if floats_only and x.dtype.kind != "f":
            raise NotEvaluable("defined on floats only")
        return [_same(x, fn(x))]
    return apply


rule("Neg")(_unary(np.negative))
rule("Abs")(_unary(np.abs))
rule("Sign")(_unary(np.sign))
rule("Floor")(_unary(np.floor, floats_only=True))
rule("Ceil")(_unary(np.ceil, floats_only=True))
rule("Sqrt")(_unary(np.sqrt, floats_only=True))
rule("Reciprocal")(_unary(np.reciprocal, floats_only=True))
rule("Round")(_unary(np.round, floats_only=True))  # half to even, as ONNX says
rule("Relu")(_unary(lambda x: np.maximum(x, 0)))


def _variadic(fn: Callable[[Array, Array], Any]) -> Rule:
    def apply(i: list[Array | None], a: Attrs, v: int) -> list[Array]:
        xs = [x for x in i if x is not None]
        if not xs:
            raise NotEvaluable("no inputs")
        _guard(np.broadcast_shapes(*(x.shape for x in xs)))
        out = xs[0]
        for x in xs[1:]:
            out = _same(xs[0], fn(out, x))
        return [out]
    return apply


rule("Min")(_variadic(np.minimum))
rule("Max")(_variadic(np.maximum))
rule("Sum")(_variadic(np.add))


@rule("Clip")
def _clip(i: list[Array | None], a: Attrs, v: int) -> list[Array]:
    x = _need(i, 0)
    lo = a.get("min") if v < 11 else (i[1] if len(i) > 1 else None)
    hi = a.get("max") if v < 11 else (i[2] if len(i) > 2 else None)
    out = x
    if lo is not None:
        out = np.maximum(out, np.asarray(lo).astype(x.dtype))
    if hi is not None:
        out = np.minimum(out, np.asarray(hi).astype(x.dtype))
    return [_same(x, out)]


# -- logic -------------------------------------------------------------------------------------------------------
def _compare(fn: Callable[[Array, Array], Any]) -> Rule:
    def apply(i: list[Array | None], a: Attrs, v: int) -> list[Array]:
        x, y = _need(i, 0), _need(i, 1)
        _guard(np.broadcast_shapes(x.shape, y.shape))
        return [np.asarray(fn(x, y), dtype=bool)]
    return apply


rule("Equal")(_compare(np.equal))
rule("Less")(_compare(np.less))
rule("Greater")(_compare(np.greater))
rule("LessOrEqual")(_compare(np.less_equal))
rule("GreaterOrEqual")(_compare(np.greater_equal))
rule("And")(_compare(np.logical_and))
rule("Or")(_compare(np.logical_or))
rule("Xor")(_compare(np.logical_xor))


@rule("Not")
def _not(i: list[Array | None], a: Attrs, v: int) -> list[Array]:
    return [np.logical_not(_need(i, 0))]


@rule("Where")
def _where(i: list[Array | None], a: Attrs, v: int) -> list[Array]:
    c, x, y = _need(i, 0), _need(i, 1), _need(i, 2)
    _guard(np.broadcast_shapes(c.shape, x.shape, y.shape))
    return [_same(x, np.where(c.astype(bool), x, y))]


# -- reductions --------------------------------------------------------------------------------------------------
_REDUCE: dict[str, tuple[Callable[..., Any], int]] = {  # op → (numpy reduction, opset where axes became an input)
    "ReduceProd": (np.prod, 18), "ReduceSum": (np.sum, 13), "ReduceMax": (np.max, 18), "ReduceMin": (np.min, 18),
    "ReduceMean": (np.mean, 18),
}


def _reduce(op: str) -> Rule:
    fn, since = _REDUCE[op]

    def apply(i: list[Array | None], a: Attrs, v: int) -> list[Array]:
        x = _need(i, 0)
        axes = _axes_of(i, a, v, since)
        keep = bool(int(a.get("keepdims", 1)))
        if not axes:
            if int(a.get("noop_with_empty_axes", 0)):
                return [x]
            axes = list(range(x.ndim))
        norm = tuple(sorted({_axis(ax, x.ndim) for ax in axes}))
        if op in ("ReduceMax", "ReduceMin") and any(x.shape[ax] == 0 for ax in norm):
            raise NotEvaluable(f"{op} over an empty axis")
        return [_same(x, fn(x, axis=norm, keepdims=keep))]
    return apply


for _op in _REDUCE:
    rule(_op)(_reduce(_op))
