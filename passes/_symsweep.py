"""graphcost's own symbolic sweep: the shapes onnx's C++ inference leaves open in symbolic dims.

onnx's inference stops where a shape needs arithmetic on symbolic dims or a shape *value* that is not all
numbers. On HF decoders exported with ``batch``/``seq`` that is every layer:

    q_proj [batch, seq, 64] ─ Reshape(Concat(Shape[0], Shape[1], -1, 16)) → open  (the -1 is 64*batch*seq/...)
    q ─ Slice(ends = Shape(q)[-1] // 2) → open                                      (rotate_half)
    Range(0, Shape(ids)[1]) → open                                                  (position ids)

and onnx-shape-inference was handed the whole model for it (LLaMA-32: 1,284 open values, about a second).
One walk in graph order fixes these: values of shape tensors (:mod:`graphcost.passes._symvalues`) and one
small rule per op for the output dims, in the input dims' names. Every dim it states is exact under the
ONNX semantics for non-negative dims; a dim it cannot state is None and the tensor is not seeded, so the
engines still decide it. The caller seeds what this returns as value_info and lets onnx carry it on.

Broadcasting two dims (Add, Where, Expand...): a number other than 1 wins, 1 gives way, equal dims stay; a plain
dim ``s`` against an expression that is 1 at ``s = 1`` is ``s`` (``seq`` against ``Min(512, seq)``: equal, or
both 1, in any valid model); other pairs of different expressions are not decided (either could be 1).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from fractions import Fraction
from typing import Any

import onnx

from graphcost._dims import as_expr, parse_dim, prod, text_names, to_text
from graphcost._minmax import dim_max, dim_min
from graphcost._sym import sympy
from graphcost.passes._shape_eval import registrar
from graphcost.passes._symvalues import (
    MOST,
    VALUE_RULES,
    Elem,
    Shape,
    Value,
    at_least,
    axis_of,
    constant_value,
    given,
    ints,
    nonnegative,
    shape_value,
    slice_args,
    tidy_expr,
)

RULE_ERRORS = (ArithmeticError, TypeError, ValueError, KeyError, IndexError, RuntimeError, AttributeError)
"""What a rule raises on a malformed node (an axis past the rank, a dim of the wrong kind): that node's dims are
then not stated here, and the engines say what they can."""

ShapeRule = Callable[[onnx.NodeProto, list["Shape | None"], list["Value | None"], Mapping[str, Any], int],
                     list["Shape | None"]]
SHAPE_RULES: dict[str, ShapeRule] = {}


shape_rule = registrar(SHAPE_RULES)


def sweep(graph: onnx.GraphProto, types: Mapping[str, onnx.TypeProto], known: frozenset[str], opset: int,
          skip: Collection[str] = ()) -> dict[str, onnx.TypeProto]:
    """Complete types for the top-level values that ``types`` leaves open and this sweep can state.

    ``known``: the graph inputs' dim names (a dim in other names is open); ``skip``: value-dependent
    tensors, never decided here. ``graph`` and ``types`` are not changed."""
    walk = _Walk(graph, types, known)
    out: dict[str, onnx.TypeProto] = {}
    for node in graph.node:
        if node.domain not in ("", "ai.onnx"):
            continue
        outs = list(node.output)
        if any(o in skip for o in outs):
            continue
        op = node.op_type
        ins = list(node.input)
        if op in _FILLS and outs and outs[0]:
            walk.fill(node, op, ins, outs[0])
        open_outs = [o for o in outs if o and walk.is_open(o)]
        has_value = any(i in walk.values or i in walk.consts for i in ins)
        if not open_outs and not (has_value or op in ("Constant", "Shape", "Size")):
            continue
        attrs = _attrs(node) if node.attribute else {}
        walk.values_of(node, op, ins, outs, attrs, opset)
        if not open_outs:
            continue
        if op == "NonZero":  # decided by its input's entries, which a value or a fill may say
            shapes = [walk.nonzero(ins[0]) if ins and ins[0] else None]
        elif (fn := SHAPE_RULES.get(op)) is None:
            continue
        else:
            try:
                shapes = fn(node, [walk.shape(i) if i else None for i in ins], [walk.value(i) for i in ins],
                            attrs, opset)
            except RULE_ERRORS:
                continue  # a malformed node: the engines say what they can
        for name, shape in zip(outs, shapes, strict=False):
            if name not in open_outs or shape is None:
                continue
            if any(d is not None and not _plausible(d) for d in shape):
                continue
            walk.shapes[name] = shape
            if all(d is not None for d in shape) and (t := walk.seed(name, node, op, ins, attrs, shape)) is not None:
                out[name] = t
    return out


def _attrs(node: onnx.NodeProto) -> dict[str, Any]:
    """A node's attributes by name; a tensor stays a TensorProto (:func:`constant_value` reads it, never an
    external payload) and graph attributes are left out."""
    out: dict[str, Any] = {}
    for a in node.attribute:
        kind = a.type
        if kind == onnx.AttributeProto.INT:
            out[a.name] = a.i
        elif kind == onnx.AttributeProto.INTS:
            out[a.name] = list(a.ints)
        elif kind == onnx.AttributeProto.TENSOR:
            out[a.name] = a.t
        elif kind == onnx.AttributeProto.FLOAT:
            out[a.name] = a.f
        elif kind == onnx.AttributeProto.STRING:
            out[a.name] = a.s
    return out


_FILLS = frozenset({"ConstantOfShape", "Reshape", "Expand", "Unsqueeze", "Squeeze", "Flatten", "Identity",
                    "Transpose"})
"""Ops whose output is one number repeated when (ConstantOfShape) or because (the views) the input is."""


class _Walk:
    """The sweep's state: each value's dims (from ``types``, or stated by the sweep) and shape values."""

    def __init__(self, graph: onnx.GraphProto, types: Mapping[str, onnx.TypeProto], known: frozenset[str]) -> None:
        self.types, self.known = types, known
        self.shapes: dict[str, Shape | None] = {}
        self.values: dict[str, Value] = {}
        self.consts: dict[str, onnx.TensorProto] = {}
        """Constants not read yet: an initializer or a Constant's tensor is decoded when a rule first asks (LLaMA-32
        holds 3,306, most of them never a shape value)."""
        self.fills: dict[str, Elem] = {}
        """Tensors whose every entry is one number, by that number: a ConstantOfShape of any size, and views of
        one. Their values are not held (a computed size can be large or symbolic), but NonZero's count is
        known from them: the legacy exporter writes ``torch.arange``-like index ranges as
        ``NonZero(ConstantOfShape(n))`` (Longformer's sliding windows)."""
        self._by_type: dict[bytes, Shape | None] = {}
        self.elems: dict[str, int] = {}
        self._parsed: dict[str, Elem] = {}
        self._texts: dict[Any, str] = {}
        """A dim the model wrote, by its expression: a stated dim equal to it is written as the model wrote it
        (``DynamicDimension.0``, not graphcost's name for it), as the engines' dims are."""
        inputs = {vi.name for vi in graph.input}  # an initializer that is also an input can be fed: no value
        for t in graph.initializer:
            self.shapes[t.name] = tuple(int(d) for d in t.dims)
            self.elems[t.name] = t.data_type
            if t.name not in inputs:
                self.consts[t.name] = t

    def value(self, name: str) -> Value | None:
        v = self.values.get(name)
        if v is None and name in self.consts:
            v = constant_value(self.consts.pop(name))
            if v is not None:
                self.values[name] = v
        return v

    def dim(self, d: onnx.TensorShapeProto.Dimension) -> Elem:
        if d.HasField("dim_value"):
            return int(d.dim_value)
        text = d.dim_param if d.HasField("dim_param") else ""
        if not text:
            return None
        if text not in self._parsed:
            e = self._parsed[text] = parse_dim(text) if text_names(text) <= self.known else None
            if e is not None and not isinstance(e, int):
                self._texts.setdefault(e, text)
        return self._parsed[text]

    def shape(self, name: str) -> Shape | None:
        if name in self.shapes:
            return self.shapes[name]
        t = self.types.get(name)
        s: Shape | None = None
        if t is not None and t.HasField("tensor_type"):
            self.elems[name] = t.tensor_type.elem_type
            key = t.SerializeToString()  # real models repeat a few hundred types: each is read once
            if key in self._by_type:
                s = self._by_type[key]
            else:
                if t.tensor_type.HasField("shape"):
                    s = tuple(self.dim(d) for d in t.tensor_type.shape.dim)
                self._by_type[key] = s
        self.shapes[name] = s
        return s

    def is_open(self, name: str) -> bool:
        s = self.shape(name)
        return s is None or any(d is None for d in s)

    def fill(self, node: onnx.NodeProto, op: str, ins: list[str], out: str) -> None:
        """Record ``out`` in :attr:`fills` when its every entry is one number."""
        if op != "ConstantOfShape":
            if ins and ins[0] in self.fills:
                self.fills[out] = self.fills[ins[0]]
            return
        value: Elem = 0  # ONNX's default fill: a float zero
        for a in node.attribute:
            if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
                got = constant_value(a.t)
                if got is None or len(got.items) != 1:
                    return
                value = got.items[0]
        self.fills[out] = value

    def nonzero(self, name: str) -> Shape | None:
        """NonZero's output shape ``(rank, count)`` for input ``name``: known when the input's shape is and its
        entries are (a small value, every entry a number) or it is one number repeated (:attr:`fills`)."""
        x = self.shape(name)
        if not x or any(d is None for d in x):
            return None  # unknown, open, or a scalar (whose NonZero numpy itself no longer defines)
        v = self.value(name)
        if v is not None:
            if not all(isinstance(e, (int, Fraction)) for e in v.items):
                return None
            return (len(x), sum(1 for e in v.items if e != 0))
        if name not in self.fills or not isinstance(fill := self.fills[name], (int, Fraction)):
            return None
        return (len(x), prod(x) if fill != 0 else 0)  # type: ignore[arg-type]

    def values_of(self, node: onnx.NodeProto, op: str, ins: list[str], outs: list[str], attrs: Mapping[str, Any],
                  opset: int) -> None:
        if not outs or not outs[0]:
            return
        v: Value | None = None
        if op == "Constant":
            t = attrs.get("value")
            if isinstance(t, onnx.TensorProto):
                self.consts[outs[0]] = t
                return
            elif "value_int" in attrs:
                v = Value((int(attrs["value_int"]),), ())
            elif "value_ints" in attrs and len(attrs["value_ints"]) <= MOST:
                v = Value(tuple(int(x) for x in attrs["value_ints"]), (len(attrs["value_ints"]),))
        elif op == "Shape":
            s = self.shape(ins[0]) if ins else None
            v = None if s is None else shape_value(s, attrs)
        elif op == "Size":
            s = self.shape(ins[0]) if ins else None
            v = None if s is None or any(d is None for d in s) else Value((prod(s),), ())  # type: ignore[arg-type]
        elif (fn := VALUE_RULES.get(op)) is not None:
            try:
                v = fn(node, [self.value(i) for i in ins], attrs, opset)
            except RULE_ERRORS:
                v = None
        if v is not None:
            self.values[outs[0]] = v

    def seed(self, name: str, node: onnx.NodeProto, op: str, ins: list[str], attrs: Mapping[str, Any],
             shape: Shape) -> onnx.TypeProto | None:
        elem = self.elems.get(name) or _elem_of(op, attrs, [self.elems.get(i, 0) if i else 0 for i in ins])
        if not elem:
            return None
        t = onnx.TypeProto()
        t.tensor_type.elem_type = elem
        t.tensor_type.shape.SetInParent()
        for d in shape:
            dim = t.tensor_type.shape.dim.add()
            if isinstance(d, int):
                dim.dim_value = d
            else:
                dim.dim_param = self._texts.get(d) or to_text(d)
        self.elems[name] = elem
        return t


def _plausible(d: Any) -> bool:
    """A dim the sweep may state: a non-negative int, or an integer expression (never a fraction)."""
    if isinstance(d, int):
        return d >= 0
    if isinstance(d, Fraction):
        return False  # an integral one is an int already (``_symvalues._simplify``)
    return bool(d.is_integer) and not d.is_negative


_BOOL_OUT = frozenset({"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor", "Not",
                       "IsNaN", "IsInf"})


def _elem_of(op: str, attrs: Mapping[str, Any], ins: Sequence[int]) -> int:
    if op in _BOOL_OUT:
        return onnx.TensorProto.BOOL
    if op in ("Shape", "Size", "NonZero"):
        return onnx.TensorProto.INT64
    if op == "Cast":
        return int(attrs.get("to", 0))
    if op == "ConstantOfShape":
        t = attrs.get("value")
        return t.data_type if isinstance(t, onnx.TensorProto) else onnx.TensorProto.FLOAT
    if op == "Where":
        return ins[1] if len(ins) > 1 else 0
    return ins[0] if ins else 0


# -- broadcasting -----------------------------------------------------------------------------------------------
def broadcast_dim(a: Elem, b: Elem) -> Elem:
    if a == 1:
        return b
    if b == 1:
        return a
    if a is None or b is None:  # an open dim against a number other than 1: the number, else not known
        known = b if a is None else a
        return known if isinstance(known, int) else None
    if isinstance(a, int) and isinstance(b, int):
        return a if a == b else None  # a model that would fail: not stated
    if isinstance(a, int):
        return a  # a number other than 1 against an expression: the number (or the model is invalid)
    if isinstance(b, int):
        return b
    if sympy.expand(a - b) == 0 or _clamped(b, a):
        return a
    if _clamped(a, b):  # Max(0, n - 1) against n - 1: the same dim wherever n - 1 is one (a dim is never negative)
        return b
    # a plain dim s against an expression that is 1 at s = 1 (seq against Min(512, seq)): in a valid model the
    # two are equal or one is 1, and if s is 1 so is the other, so s is the result in every case
    if a.is_Symbol and b.subs(a, 1) == 1:
        return a
    if b.is_Symbol and a.subs(b, 1) == 1:
        return b
    return None


def _clamped(e: Any, d: Any) -> bool:
    """Whether ``e`` is ``Max(0, d)``: equal to ``d`` wherever ``d`` is a dim (a Slice's clamp on ``n - 1``)."""
    return bool(e.func is sympy.Max and len(e.args) == 2 and 0 in e.args and d in e.args)


def broadcast(shapes: Sequence[Shape | None]) -> Shape | None:
    if any(s is None for s in shapes) or not shapes:
        return None
    rank = max(len(s) for s in shapes if s is not None)
    out: list[Elem] = []
    for axis in range(rank):
        d: Elem = 1
        for s in shapes:
            assert s is not None
            k = axis - (rank - len(s))
            d = broadcast_dim(d, s[k] if k >= 0 else 1)
            if d is None:
                break
        out.append(d)
    return tuple(out)


_ELEMENTWISE = ("Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean", "Equal", "Less",
                "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor", "Where", "PRelu", "BitShift",
                "BitwiseAnd", "BitwiseOr", "BitwiseXor")


@shape_rule(*_ELEMENTWISE)
def _elementwise(node: onnx.NodeProto, s: list[Shape | None], v: list[Value | None], a: Mapping[str, Any],
                 opset: int) -> list[Shape | None]:
    return [broadcast([x for x, name in zip(s, node.input, strict=False) if name])]


_SAME = ("Neg", "Cast", "CastLike", "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Reciprocal", "Sin", "Cos",
         "IsNaN", "IsInf", "Not", "Erf", "Softmax", "LogSoftmax", "Identity", "Abs", "Floor", "Ceil", "Round",
         "Sign", "Gelu", "LeakyRelu", "Elu", "Selu", "HardSigmoid", "HardSwish", "Softplus", "Softsign", "Mish",
         "Trilu", "CumSum", "Clip", "Dropout", "LayerNormalization", "Hardmax", "Celu", "ThresholdedRelu",
         "BitwiseNot", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh",
         "BatchNormalization", "InstanceNormalization", "GroupNormalization", "LRN", "MeanVarianceNormalization",
         "RMSNormalization", "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "Shrink",
         # the data's shape: Swin's shifted-window mask is written by ScatterND, and without it the sweep left the
         # mask's Range/Slice/Expand chain of every block to a second round (Swin-T legacy: 480 of its seeds)
         "ScatterND", "ScatterElements", "Scatter")


@shape_rule(*_SAME)
def _same(node: onnx.NodeProto, s: list[Shape | None], v: list[Value | None], a: Mapping[str, Any],
          opset: int) -> list[Shape | None]:
    return [s[0] if s else None]  # the first output only (Dropout's mask, LayerNorm's statistics: not here)


@shape_rule("Transpose")
def _transpose(node: onnx.NodeProto, s: list[Shape | None], v: list[Value | None], a: Mapping[str, Any],
               opset: int) -> list[Shape | None]:
    x = s[0]
    if x is None:
        return [None]
    perm = list(a.get("perm", range(len(x) - 1, -1, -1)))
    return [tuple(x[p] for p in perm)] if sorted(perm) == list(range(len(x))) else [None]


def _axes(s: list[Shape | None], v: list[Value | None], a: Mapping[str, Any], opset: int,
          since: int) -> list[int] | None:
    """Axes from the attribute before opset ``since``, from input 1 (all numbers) from it on."""
    if opset < since:
        return list(a["axes"]) if "axes" in a else None
    return ints(v[1] if len(v) > 1 else None)


@shape_rule("Unsqueeze")
def _unsqueeze(node: onnx.NodeProto, s: list[Shape | None], v: list[Value | None], a: Mapping[str, Any],
               opset: int) -> list[Shape | None]:
    x, axes = s[0], _axes(s, v, a, opset, 13)
    if x is None or axes is None:
        return [None]
    rank = len(x) + len(axes)
    where = sorted(ax + rank if ax < 0 else ax for ax in axes)
    if len(set(where)) != len(where) or any(not 0 <= ax < rank for ax in where):
        return [None]
    dims = iter(x)
    return [tuple(1 if k in where else next(dims) for k in range(rank))]


@shape_rule("Squeeze")
def _squeeze(node: onnx.NodeProto, s: list[Shape | None], v: list[Value | None], a: Mapping[str, Any],
             opset: int) -> list[Shape | None]:
    x = s[0]
    has_axes = "axes" in a if opset < 13 else given(node, 1)
    axes = _axes(s, v, a, opset, 13) if has_axes else None
    if x is None or (has_axes and axes is None):
        return [None]
    if axes is None:  # every 1-dim goes: only decidable when every dim is known
        return [tuple(d for d in x if d != 1)] if all(isinstance(d, int) for d in x) else [None]
    drop = {ax + len(x) if ax < 0 else ax for ax in axes}
    return [tuple(d for k, d in enumerate(x) if k not in drop)]


@shape_rule("Concat")
def _concat(node: onnx.NodeProto, s: list[Shape | None], v: list[Value | None], a: Mapping[str, Any],
            opset: int) -> list[Shape | None]:
    parts = [x for x, name in zip(s, node.input, strict=False) if name]
    if not parts or any(x is None for x in parts) or len({len(x) for x in parts if x is not None}) != 1:
        return [None]
    rank = len(parts[0] or ())
    axis = int(a.get("axis", 0))
    axis = axis + rank if axis < 0 else axis
    out: list[Elem] = []
    for k in range(rank):
        col = [x[k] for x in parts if x is not None]
        if k == axis:
            out.append(None if any(d is None for d in col) else sum(col[1:], col[0]))  # type: ignore[arg-type]
        else:
            out.append(next((d for d in col if d is not None), None))
    return [tuple(_tidy(d) for d in out)]


@shape_rule("Gather")
def _gather(node: onnx.NodeProto, s: list[Shape | None], v: list[Value | None], a: Mapping[str, Any],
            opset: int) -> list[Shape | None]:
    x, idx = s[0], s[1] if len(s) > 1 else None
    if x is None or idx is None:
        return [None]
    axis = int(a.get("axis", 0))
    axis = axis + len(x) if axis < 0 else axis
    return [x[:axis] + idx + x[axis + 1:]]


@shape_rule("MatMul")
def _matmul(node: onnx.NodeProto, s: list[Shape | None], v: list[Value | None], a: Mapping[str, Any],
            opset: int) -> list[Shape | None]:
    x, y = s[0], s[1] if len(s) > 1 else None
    if x is None or y is None or not x or not y:
        return [None]
    xs, ys = (x if len(x) > 1 else (1, *x)), (y if len(y) > 1 else (*y, 1))
    batch = broadcast([xs[:-2], ys[:-2]])
    if batch is None:
        return [None]
    out = (*batch, xs[-2], ys[-1])
    if len(x) == 1:
        out = out[:-2] + out[-1:]
    if len(y) == 1:
        out = out[:-1]
    return [out]


@shape_rule("Reshape")
def _reshape(node: onnx.NodeProto, s: list[Shape | None], v: list[Value | None], a: Mapping[str, Any],
             opset: int) -> list[Shape | None]:
    x, target = s[0], v[1] if len(v) > 1 else None
    if target is None or len(target.shape) != 1:
        return [None]
    allow_zero = int(a.get("allowzero", 0))
    out: list[Elem] = []
    hole = None
    for k, t in enumerate(target.items):
        if t == 0 and not allow_zero:
            out.append(x[k] if x is not None and k < len(x) else None)
        elif t == -1:
            if hole is not None:
                return [None]
            hole = k
            out.append(None)
        else:
            out.append(t)
    if hole is not None and x is not None and all(d is not None for d in x):
        rest = [d for k, d in enumerate(out) if k != hole]
        if all(d is not None for d in rest):
            out[hole] = _quotient(prod(x), prod(rest))  # type: ignore[arg-type]
    return [tuple(out)]


def _quotient(n: Any, d: Any) -> Elem:
    """``n / d`` when it divides exactly (the -1 of a Reshape), else None."""
    if isinstance(n, int) and isinstance(d, int):
        return n // d if d and n % d == 0 else None
    q = as_expr(n) / d  # as_expr: a number or an expression, never text
    if sympy.fraction(q)[1] != 1:  # sympy's own division cancels equal factors; cancel() only when it did not
        q = sympy.cancel(q)  # (50 calls took 0.57 s of dynamic-size Swin-T's sweep, cProfile; most divide so)
    _, den = sympy.fraction(q)
    return _tidy(q) if den == 1 else None


def _tidy(d: Elem) -> Elem:
    if d is None or isinstance(d, int):
        return d
    if isinstance(d, Fraction):
        return int(d) if d.denominator == 1 else d
    d = tidy_expr(d)
    if d is None:
        return None
    return int(d) if d.is_Integer else d


@shape_rule("Expand")
def _expand(node: onnx.NodeProto, s: list[Shape | None], v: list[Value | None], a: Mapping[str, Any],
            opset: int) -> list[Shape | None]:
    target = v[1] if len(v) > 1 else None
    if target is None or len(target.shape) != 1:
        return [None]
    return [broadcast([s[0], tuple(target.items)])]


@shape_rule("ConstantOfShape")
def _constant_of_shape(node: onnx.NodeProto, s: list[Shape | None], v: list[Value | None], a: Mapping[str, Any],
                       opset: int) -> list[Shape | None]:
    dims = v[0] if v else None
    return [None if dims is None or len(dims.shape) != 1 else tuple(dims.items)]


@shape_rule("Tile")
def _tile(node: onnx.NodeProto, s: list[Shape | None], v: list[Value | None], a: Mapping[str, Any],
          opset: int) -> list[Shape | None]:
    x, reps = s[0], v[1] if len(v) > 1 else None
    if x is None or reps is None or len(reps.items) != len(x):
        return [None]
    return [tuple(None if d is None or r is None else _tidy(d * r) for d, r in zip(x, reps.items, strict=True))]


@shape_rule("Flatten")
def _flatten(node: onnx.NodeProto, s: list[Shape | None], v: list[Value | None], a: Mapping[str, Any],
             opset: int) -> list[Shape | None]:
    x = s[0]
    if x is None:
        return [None]
    axis = int(a.get("axis", 1))
    axis = axis + len(x) if axis < 0 else axis
    head, tail = x[:axis], x[axis:]
    return [tuple(None if any(d is None for d in part) else prod(part) for part in (head, tail))]  # type: ignore[arg-type]


@shape_rule("Range")
def _range(node: onnx.NodeProto, s: list[Shape | None], v: list[Value | None], a: Mapping[str, Any],
           opset: int) -> list[Shape | None]:
    args = v[:3]
    if len(args) < 3 or any(x is None or len(x.items) != 1 or x.items[0] is None for x in args):
        return [None]
    start, limit, delta = (x.items[0] for x in args if x is not None)
    if not isinstance(delta, int) or delta <= 0:
        return [None]  # a counting-down or symbolic step: left to the engines
    span = _tidy(limit - start)  # type: ignore[operator]
    if isinstance(span, int):
        return [(max(0, -(-span // delta)),)]
    count = span if delta == 1 else _tidy(sympy.ceiling(span / delta))
    return [(count if nonnegative(count) else _tidy(dim_max(0, count)),)]  # a limit below start: no entries


@shape_rule("Slice")
def _slice(node: onnx.NodeProto, s: list[Shape | None], v: list[Value | None], a: Mapping[str, Any],
           opset: int) -> list[Shape | None]:
    x = s[0]
    args = slice_args(node, v, a, opset)
    if x is None or args is None:
        return [None]
    starts, ends, axes, steps = args
    out = list(x)
    for st, en, ax, step in zip(starts, ends, axes, steps, strict=True):
        at = axis_of(ax, len(x)) if isinstance(ax, int) else None
        if at is None or not isinstance(step, int) or step == 0:
            return [None]
        out[at] = _slice_len(x[at], st, en, step)
    return [tuple(out)]


_BIG = 2**31 - 1
"""An end at or past this is "to the end" (exporters write INT64_MAX or INT32_MAX)."""


def _slice_len(d: Elem, start: Elem, end: Elem, step: int) -> Elem:
    """Entries a Slice keeps of a dim ``d``, clamped as ONNX says (a negative entry counts from the end, then
    each is held to ``[0, d]``); with a symbolic entry the clamp is written as ``Min``/``Max`` and sympy drops
    the ones it can prove idle (``Min(d, floor(d/2))`` is ``floor(d/2)``). A positive step k keeps
    ``ceiling((end - start)/k)`` of them (Swin's PatchMerging takes ``x[:, 0::2]`` of a dim padded to even:
    ``ceiling(2*ceiling(h/2)/2)`` is ``ceiling(h/2)``); a negative step over an expression is left open."""
    if d is None or start is None or end is None:
        return None
    if isinstance(d, int) and isinstance(start, int) and isinstance(end, int):
        return len(range(*slice(start, end, step).indices(d)))
    if step < 0:
        return None
    lo, hi = _clamp(d, start), _clamp(d, end)
    if lo is None or hi is None:
        return None
    span = hi - lo
    kept = span if step == 1 else sympy.ceiling(span / step)
    if lo == 0 or _tidy(hi - d) == 0:  # each clamp is in [0, d]: from 0, or to d, the length is never negative
        return _tidy(kept)
    return _tidy(dim_max(0, kept))


def _clamp(d: Any, e: Any) -> Elem:
    """A Slice start or end ``e`` on a dim ``d``, as a position in ``[0, d]``."""
    if isinstance(e, int) and e >= _BIG:
        return d
    if isinstance(e, int) and e < 0:
        return _tidy(dim_max(0, d + e))
    if e == 0:
        return 0  # the start of any dim (sympy cannot tell Min(d, 0) is 0 for d = 2*ceiling(h/2))
    if not isinstance(e, int) and not nonnegative(e):
        return None  # a symbolic entry that may count from the end: which it does is a run-time matter
    if not isinstance(d, int) and at_least(d, e):
        return e  # Swin's crop of a window-padded dim back to the dim
    return _tidy(dim_min(d, e))


@shape_rule("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
            "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin")
def _reduce(node: onnx.NodeProto, s: list[Shape | None], v: list[Value | None], a: Mapping[str, Any],
            opset: int) -> list[Shape | None]:
    x = s[0]
    if x is None:
        return [None]
    keep = int(a.get("keepdims", 1))
    if node.op_type in ("ArgMax", "ArgMin"):
        axes: list[int] | None = [int(a.get("axis", 0))]
    else:
        since = 13 if node.op_type == "ReduceSum" else 18
        has_input = given(node, 1)
        axes = _axes(s, v, a, opset, since) if (opset < since or has_input) else None
        if axes is None and ((opset < since and "axes" in a) or has_input):
            return [None]
        if axes is None or not axes:
            if int(a.get("noop_with_empty_axes", 0)):
                return [x]
            axes = list(range(len(x)))
    assert axes is not None
    drop = {ax + len(x) if ax < 0 else ax for ax in axes}
    return [tuple(1 if k in drop else d for k, d in enumerate(x)) if keep else
            tuple(d for k, d in enumerate(x) if k not in drop)]


def _window_attrs(a: Mapping[str, Any], spatial: int) -> tuple[list[int], list[int], list[int], str]:
    """A sliding window's strides, dilations, pads (begins then ends) and auto_pad, with the ONNX defaults."""
    auto = a.get("auto_pad", b"NOTSET")
    return (list(a.get("strides", [1] * spatial)), list(a.get("dilations", [1] * spatial)),
            list(a.get("pads", [0] * (2 * spatial))), auto.decode() if isinstance(auto, bytes) else str(auto))


@shape_rule("Conv", "ConvInteger", "MaxPool", "AveragePool", "LpPool")
def _window(node: onnx.NodeProto, s: list[Shape | None], v: list[Value | None], a: Mapping[str, Any],
            opset: int) -> list[Shape | None]:
    """``[N, C, *spatial]`` through a sliding window: each spatial dim becomes
    ``floor((d + pads - dilation·(k - 1) - 1) / stride) + 1`` (``ceil(d / stride)`` under SAME padding).

    A pool's ``ceil_mode`` takes ``ceil`` for ``floor``, and then ONNX drops a last window that would start in
    the end padding (as onnxruntime does; onnx's own inference does not). For a number that is checked. For an
    expression the ceiling is exact when no window can start there, which holds at every size when
    ``stride + end pad ≤ dilation·(k - 1) + 1`` (the last start, ``ceil(span/stride)·stride``, is at most
    ``span + stride - 1``); otherwise it is left open."""
    x = s[0]
    conv = node.op_type in ("Conv", "ConvInteger")
    w = s[1] if conv and len(s) > 1 else None
    if x is None or len(x) < 3 or (conv and (w is None or len(w) != len(x))):
        return [None]
    spatial = len(x) - 2
    kernel = list(a["kernel_shape"]) if "kernel_shape" in a else (list(w[2:]) if w is not None else None)
    if kernel is None or len(kernel) != spatial or not all(isinstance(k, int) for k in kernel):
        return [None]
    strides, dilations, pads, auto = _window_attrs(a, spatial)
    ceil = bool(a.get("ceil_mode", 0)) and not conv
    out: list[Elem] = [x[0], w[0] if w is not None else x[1]]
    for k in range(spatial):
        d = x[k + 2]
        if d is None:
            out.append(None)
            continue
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            if isinstance(d, int):  # ints in Python: a static model never imports sympy (``_sym``)
                out.append(-(-d // strides[k]))
            else:
                out.append(_tidy(sympy.ceiling(sympy.Rational(1, strides[k]) * d)))
            continue
        begin, end = (0, 0) if auto == "VALID" else (pads[k], pads[k + spatial])
        reach = dilations[k] * (kernel[k] - 1) + 1  # the window's extent
        span = d - reach + begin + end
        if isinstance(span, int):
            n = (-(-span // strides[k]) if ceil else span // strides[k]) + 1
            if ceil and (n - 1) * strides[k] >= d + begin:  # the last window would start in the end padding
                n -= 1
            out.append(n)
            continue
        if ceil:
            out.append(_tidy(sympy.ceiling(sympy.Rational(1, strides[k]) * span) + 1)
                       if strides[k] + end <= reach else None)
            continue
        out.append(_tidy(sympy.floor(sympy.Rational(1, strides[k]) * span) + 1))
    return [tuple(out)]


@shape_rule("Resize", "Upsample")
def _resize(node: onnx.NodeProto, s: list[Shape | None], v: list[Value | None], a: Mapping[str, Any],
            opset: int) -> list[Shape | None]:
    """Target sizes as given, or ``floor(d · scale)`` (the ONNX rule, exact for rational scales). A resize
    with ``axes``, an aspect-ratio policy or ``tf_crop_and_resize`` is left to the engines."""
    x = s[0]
    if x is None or "axes" in a or a.get("keep_aspect_ratio_policy", b"stretch") not in (b"stretch", "stretch") or \
            a.get("coordinate_transformation_mode", b"") in (b"tf_crop_and_resize", "tf_crop_and_resize"):
        return [None]
    if node.op_type == "Upsample" or opset < 11:
        scales, sizes = (v[1] if len(v) > 1 else None), None
    else:
        scales, sizes = (v[2] if len(v) > 2 else None), (v[3] if len(v) > 3 else None)
    if sizes is not None and sizes.items:
        return [tuple(sizes.items)] if len(sizes.items) == len(x) else [None]
    if scales is None or len(scales.items) != len(x):
        return [None]
    return [tuple(None if d is None or f is None else
                  math.floor(d * f) if isinstance(d, int) and isinstance(f, (int, Fraction)) else
                  _tidy(sympy.floor(d * f)) for d, f in zip(x, scales.items, strict=True))]


@shape_rule("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")
def _global_pool(node: onnx.NodeProto, s: list[Shape | None], v: list[Value | None], a: Mapping[str, Any],
                 opset: int) -> list[Shape | None]:
    x = s[0]
    return [None if x is None or len(x) < 3 else (x[0], x[1], *([1] * (len(x) - 2)))]


@shape_rule("ConvTranspose")
def _conv_transpose(node: onnx.NodeProto, s: list[Shape | None], v: list[Value | None], a: Mapping[str, Any],
                    opset: int) -> list[Shape | None]:
    """``stride·(d - 1) + output_padding + dilation·(k - 1) + 1 - pads`` per spatial dim (``d·stride`` under
    SAME padding); an explicit ``output_shape`` is left to the engines."""
    x, w = s[0], s[1] if len(s) > 1 else None
    if x is None or w is None or len(x) < 3 or len(w) != len(x) or "output_shape" in a or w[1] is None:
        return [None]
    spatial = len(x) - 2
    kernel = list(a["kernel_shape"]) if "kernel_shape" in a else list(w[2:])
    if len(kernel) != spatial or not all(isinstance(k, int) for k in kernel):
        return [None]
    strides, dilations, pads, auto = _window_attrs(a, spatial)
    extra = list(a.get("output_padding", [0] * spatial))
    out: list[Elem] = [x[0], _tidy(w[1] * int(a.get("group", 1)))]
    for k in range(spatial):
        d = x[k + 2]
        if d is None:
            out.append(None)
        elif auto in ("SAME_UPPER", "SAME_LOWER"):
            out.append(_tidy(d * strides[k]))
        else:
            trimmed = 0 if auto == "VALID" else pads[k] + pads[k + spatial]
            out.append(_tidy(strides[k] * (d - 1) + extra[k] + dilations[k] * (kernel[k] - 1) + 1 - trimmed))
    return [tuple(out)]


@shape_rule("Pad")
def _pad(node: onnx.NodeProto, s: list[Shape | None], v: list[Value | None], a: Mapping[str, Any],
         opset: int) -> list[Shape | None]:
    """Each dim plus its begin and end pads (negative pads crop), on the axes given (opset 18) or all."""
    x = s[0]
    if x is None:
        return [None]
    if opset < 11:
        pads: list[Elem] | None = list(a.get("pads", a.get("paddings", [])))
    else:
        got = v[1] if len(v) > 1 else None
        pads = list(got.items) if got is not None else None
    axes = ints(v[3] if len(v) > 3 else None) if opset >= 18 and given(node, 3) else list(range(len(x)))
    if pads is None or axes is None or len(pads) != 2 * len(axes):
        return [None]
    out = list(x)
    for k, ax in enumerate(axes):
        at = axis_of(ax, len(x))
        begin, end = pads[k], pads[k + len(axes)]
        if at is None or begin is None or end is None or out[at] is None:
            return [None]
        out[at] = _tidy(out[at] + begin + end)  # type: ignore[operator]
    return [tuple(out)]
