"""graphcost's additions to onnx-shape-inference's shape-*data* propagation (what ORT's engine did and it did not).

onnx-shape-inference carries the values of small integer tensors (``Shape`` → ``Slice`` → ``Concat``) as
lists of ints and symbolic dims, and reads them back as Reshape/Expand targets. Exporters build targets
with four ops it does not carry values through, so the target's dims became fresh ``_dN`` symbols and the
MAC formulas of T5, ViT and wav2vec2 exports came out in minted names (``docs/shapes.md``)::

    torch's expand(batch, -1, -1)         Concat(batch, -1, -1) ─ Equal(-1) ─ Where(·, ones, ·) ─ Expand
    the same, traced with a shape input   Shape ─ ConstantOfShape(1) ─ Mul(-1) ───────┘
    T5 relative-position buckets          Shape ─ ConstantOfShape ─ Min ─ Where ─ Gather
    dynamo's seq // 10                    Shape ─ Squeeze ─ Div(10) ─ Add(-1) ─ Concat ─ Reshape

The rules below add, on top of the engine's own rule (which runs first and keeps every shape it sets):

- ``Div`` of integers: a symbolic dim divided by a positive int is ``floor(d / k)`` (dims are
  non-negative, so ONNX's truncation is floor);
- ``Equal``: two ints compare; a symbolic dim never equals a negative int (a dim is never negative) and
  equals a dim written the same way; anything else stays unknown;
- ``Where`` with a known condition takes, element by element, the branch the condition names;
- ``ConstantOfShape`` takes its shape from its input's values, and a 1-D integer result of at most
  :data:`MAX_VALUES` elements carries its values.

"Symbolic dim" in the first two means one written in the model's own dim names: the engine's fresh ``_dN``
symbols may stand for any value (it mints them where a Where cannot decide), so they decide nothing.

They only ever *add* values: an element they cannot decide leaves the engine's result as it was. They are
installed around one engine call (:func:`installed`), never left in the engine's registry.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from typing import Any

_GENERATED = re.compile(r"(?<![A-Za-z0-9_])_d[0-9]+(?![A-Za-z0-9_])")
"""onnx-shape-inference's name for a symbol it minted."""

MAX_VALUES = 64
"""Longest ConstantOfShape result whose values are carried (shape tensors hold a handful of elements)."""

Value = Any  # int | onnx_ir.SymbolicDim
Rule = Callable[[Any, Any], None]  # (ShapeInferenceContext, onnx_ir.Node) -> None


def _values(ctx: Any, value: Any) -> list[Value] | None:
    return None if value is None else ctx.get_symbolic_value(value)


def _pairs(a: list[Value], b: list[Value]) -> list[tuple[Value, Value]] | None:
    """Elements of two 1-D value lists paired the way numpy broadcasts them, or None when it cannot."""
    if len(a) == len(b):
        return list(zip(a, b, strict=True))
    if len(a) == 1:
        return [(a[0], y) for y in b]
    if len(b) == 1:
        return [(x, b[0]) for x in a]
    return None


def _is_int(x: Value) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_dim(x: Value) -> bool:
    """A symbolic dim written in the model's own dim names only.

    The engine's fresh ``_dN`` symbols are left out: it also mints them for values it cannot decide
    (a Where between -1 and a dim), and such a value may be negative."""
    import onnx_ir as ir

    return isinstance(x, ir.SymbolicDim) and x.value is not None and not _GENERATED.search(x.value)


def _integer(value: Any) -> bool:
    import onnx_ir as ir

    return value is not None and value.dtype in (ir.DataType.INT64, ir.DataType.INT32)


def _div(ctx: Any, node: Any) -> None:
    out = node.outputs[0] if node.outputs else None
    if out is None or not _integer(out) or ctx.get_symbolic_value(out) is not None or len(node.inputs) < 2:
        return
    a, b = _values(ctx, node.inputs[0]), _values(ctx, node.inputs[1])
    pairs = _pairs(a, b) if a is not None and b is not None else None
    if pairs is None or not any(_is_dim(x) for x, _ in pairs):
        return  # all-int quotients are the engine's own rule
    result: list[Value] = []
    for x, k in pairs:
        if not _is_int(k) or k <= 0 or not ((_is_int(x) and x >= 0) or _is_dim(x)):
            return
        result.append(x // k)  # floor: a dim (and a non-negative int) divided by a positive int
    ctx.set_symbolic_value(out, result)


def _equal_element(x: Value, y: Value) -> int | None:
    if _is_int(x) and _is_int(y):
        return int(x == y)
    if (_is_dim(x) and _is_int(y)) or (_is_int(x) and _is_dim(y)):
        k = x if _is_int(x) else y
        return 0 if k < 0 else None  # a dim is never negative
    if _is_dim(x) and _is_dim(y):
        return 1 if x == y else None  # the same expression text; different texts may still be equal: undecided
    return None


def _equal(ctx: Any, node: Any) -> None:
    out = node.outputs[0] if node.outputs else None
    if out is None or ctx.get_symbolic_value(out) is not None or len(node.inputs) < 2:
        return
    a, b = _values(ctx, node.inputs[0]), _values(ctx, node.inputs[1])
    pairs = _pairs(a, b) if a is not None and b is not None else None
    if pairs is None:
        return
    result = [_equal_element(x, y) for x, y in pairs]
    if all(r is not None for r in result):
        ctx.set_symbolic_value(out, result)


def _where(ctx: Any, node: Any) -> None:
    out = node.outputs[0] if node.outputs else None
    if out is None or len(node.inputs) < 3:
        return
    cond, x, y = (_values(ctx, v) for v in node.inputs[:3])
    if cond is None or x is None or y is None or not all(_is_int(c) for c in cond):
        return
    n = max(len(cond), len(x), len(y))
    if any(len(v) not in (1, n) for v in (cond, x, y)):
        return
    pick = [(x if len(x) > 1 else x * n)[i] if (cond if len(cond) > 1 else cond * n)[i]
            else (y if len(y) > 1 else y * n)[i] for i in range(n)]
    ctx.set_symbolic_value(out, pick)  # replaces the engine's fresh dims where the branches differ


def _constant_of_shape(ctx: Any, node: Any) -> None:
    import onnx_ir as ir

    out = node.outputs[0] if node.outputs else None
    if out is None or not node.inputs:
        return
    dims = _values(ctx, node.inputs[0])
    if dims is None or not all(_is_int(d) or isinstance(d, ir.SymbolicDim) for d in dims):
        return
    if out.shape is None or any(not isinstance(d, int) for d in out.shape):
        ctx.set_shape_and_dtype(out, ir.Shape(dims), out.dtype)
    if len(dims) != 1 or not _is_int(dims[0]) or dims[0] > MAX_VALUES or not _integer(out):
        return
    attr = node.attributes.get("value")
    fill = int(attr.as_tensor().numpy().reshape(-1)[0]) if attr is not None else 0
    ctx.set_symbolic_value(out, [fill] * dims[0])


_EXTRA: tuple[tuple[str, Rule], ...] = (
    ("Div", _div), ("Equal", _equal), ("Where", _where), ("ConstantOfShape", _constant_of_shape))


def _extended(original: Rule, extra: Rule) -> Rule:
    def rule(ctx: Any, node: Any) -> None:
        original(ctx, node)
        with contextlib.suppress(Exception):  # an addition that cannot decide leaves the engine's answer
            extra(ctx, node)
    return rule


@contextlib.contextmanager
def installed() -> Iterator[None]:
    """The rules above wrap the engine's own rules for the duration of the block, then the registry is as it was.

    Works on the engine's registry tables (``onnx-shape-inference`` 0.4, pinned in ``constraints/ci.txt``);
    where they are not there the engine runs as shipped."""
    from onnx_shape_inference import _registry

    registry = _registry.registry
    collect = getattr(registry, "collect", None)
    if callable(collect):  # the engine fills its registry on first use: before that there is nothing to wrap
        collect()
    table = getattr(registry, "_registrations", None)
    cache = getattr(registry, "_cache", None)
    latest = getattr(registry, "_max_version", None)
    if not isinstance(table, dict) or not isinstance(cache, dict) or not isinstance(latest, dict):
        yield
        return
    saved: dict[tuple[str, str], list[tuple[int, Rule]]] = {}
    for op, extra in _EXTRA:
        key = ("", op)
        entries = table.get(key)
        if not entries:
            continue
        saved[key] = list(entries)
        table[key] = [(since, _extended(fn, extra)) for since, fn in entries]
        cache.pop(key, None)
        latest.pop(key, None)
    try:
        yield
    finally:
        for key, entries in saved.items():
            table[key] = entries
            cache.pop(key, None)
            latest.pop(key, None)
