"""Data movement: views, metadata, copies, gathers/scatters, and the resamplers.

Three kinds, and the difference matters for bytes (the costs pass charges them by kind):

* views (Kind.VIEW) alias their input: zero FLOPs and zero bytes (Reshape, Squeeze, Identity...).
* metadata (Kind.FREE) reads no tensor data: Shape and Size look only at the shape (``free_inputs``).
* copies (Kind.MOVEMENT) read and write data but compute nothing: zero FLOPs, their bytes charged.

Gathers read rows, not tables, and a Slice reads its window, not its input. The compulsory traffic of
Gather, GatherElements, GatherND, Slice and Compress is the data elements actually taken (the output's bytes,
capped by the whole table when gather indices repeat), every other input (indices, starts/ends, the
condition) and the output::

    read    = bytes(other inputs) + min(bytes(output), bytes(data))
    written = bytes(output)

so a batch-1 embedding lookup in GPT-2 reads one 768-float row, not the 154 MB table, and the Slice taking one
token of MViT's 25,089-token sequence reads that token (:func:`taken` and :func:`kept`, registered as the ops'
``window``: the same bytes count in a fused group's crossing). Random rows may
cost whole cache lines on a real device; the bound is the ideal and does not charge that.

A Concat that appends to a KV cache (one input is a ``past``/``cache`` graph input and the output, maybe
through views, is a ``present``/``cache`` graph output) is charged as an in-place append: it reads and
writes only the new slices. The graph as written copies the whole cache into ``present``; that uniform
charge is kept beside it (``bytes_as_written``). Whoever reads ``present`` reads the cache, once.

A few movement ops do arithmetic and count it: scatter with a reduction (1 per update element), Range
(1 add per output element), NonZero (1 compare per input element), Unique (sorting compares), and
the resamplers. Resampling by interpolation is a weighted sum of neighbour taps, so each tap is one
MAC (``FLOPS_PER_MAC`` FLOPs)::

    nearest   0 taps                                (an index computation and a copy)
    linear    2 taps per resized axis  → 2^r MACs per output element (bilinear: 4, trilinear: 8)
    cubic     4 taps per resized axis  → 4^r MACs per output element (bicubic: 16)

where r counts the axes actually resized (scale ≠ 1). With ``antialias`` and a downscale s < 1 the
filter support widens to ⌈taps / s⌉ per axis. The per-axis weights and source indices depend only on
the output coordinate along one axis; they are computed once per coordinate, shared by every other
index, and not counted.
"""

from __future__ import annotations

import math
import re
from typing import Any

from graphcost._dims import Dim, ceil_log2, numel
from graphcost._minmax import dim_min
from graphcost._sym import sympy
from graphcost.graph import DEFAULT_DOMAIN, Graph, Node, TensorKind
from graphcost.ops._registry import FLOPS_PER_MAC, Kind, NodeView, ShapeUnknown, Work, lookup, register_free, rule

# Views: the output aliases the input (Dropout in inference is Identity; see dropout below).
register_free(("Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "BitCast",
               "Optional", "OptionalGetElement"), kind=Kind.VIEW)

# Metadata: the output is computed from shapes (or nothing), the input data is never read.
register_free(("Shape", "Size", "OptionalHasElement"), kind=Kind.FREE, free_inputs=(0,))
register_free(("Constant",), kind=Kind.FREE)

# Copies: every output element is some input element (or a fill value); no arithmetic.
register_free(("Transpose", "Split", "Pad", "Tile",
               "Expand", "DepthToSpace", "SpaceToDepth", "OneHot", "ConstantOfShape", "Trilu",
               "ReverseSequence", "CenterCropPad", "Scatter", "TensorScatter"), kind=Kind.MOVEMENT)
# EyeLike writes an identity matrix of its input's shape: it reads only the input's metadata.
register_free(("EyeLike",), kind=Kind.MOVEMENT, free_inputs=(0,))


def capped(gathered: Dim, table: Dim) -> Dim:
    """min(gathered, table): the bytes of the rows read, never more than the whole table.

    Symbolic byte counts are nearly always monomials ``c·d1·d2…`` in distinct dims (``4*unk__394*unk__395``);
    for two of those the answer is decided here, without sympy's ``Min``, which tries to prove an order from
    the assumptions (FCOS with ORT-minted dims, the 150 Gathers' calls replayed: 1.37 s before, 0.015 s
    after, the same objects). Over dims that are non-negative integers, ``c1·M1 ≤ c2·M2`` holds everywhere
    only when ``M1 = M2`` and ``c1 ≤ c2`` (set a dim of the other monomial to 0 otherwise), so equal monomials
    give the smaller, and different ones give the unevaluated ``Min``, the object ``sympy.Min`` itself builds
    (same args, same order). Anything else goes to ``_minmax.dim_min``, which is ``sympy.Min``'s object too.
    """
    if isinstance(gathered, int) and isinstance(table, int):
        return min(gathered, table)
    a, b = _monomial(gathered), _monomial(table)
    if a is None or b is None:
        return dim_min(gathered, table)
    if a[1] == b[1]:
        return gathered if a[0] <= b[0] else table
    return sympy.Min(gathered, table, evaluate=False)


def _monomial(value: Dim) -> tuple[Any, frozenset[Any]] | None:
    """(c, {d1, d2…}) when ``value`` is ``c·d1·d2…``: c > 0 a rational, distinct dims that are non-negative
    integers; None otherwise."""
    if isinstance(value, int) or not isinstance(value, sympy.Expr):
        return None
    coeff, rest = value.as_coeff_Mul()
    if not (coeff.is_Rational and coeff.is_positive):
        return None
    factors = rest.args if rest.is_Mul else (rest,)
    for f in factors:
        if not (f.is_Symbol and f.is_integer and f.is_nonnegative):
            return None
    return coeff, frozenset(factors)


def taken(n: NodeView) -> dict[int, Dim]:
    """The window of a gather: the elements its output takes of input 0, once each, ``min(bytes(output),
    bytes(data))`` (with repeated indices it reads no more than the whole table); every other input whole."""
    return {0: capped(n.out_bytes(0), n.in_bytes(0))}


def kept(n: NodeView) -> dict[int, Dim]:
    """The window of a Slice or a Compress: the elements of input 0 it keeps, ``bytes(output)`` (each kept once,
    so never more than the input: no cap to work out, which for symbolic dims is a sympy ``Min``); every other
    input whole."""
    return {0: n.out_bytes(0)}


# Gathers read rows, not tables: the indices, the data elements gathered, and the output written.
register_free(("Gather", "GatherElements", "GatherND"), kind=Kind.MOVEMENT, window=taken)
# A Slice reads its window and a Compress the elements it keeps (the condition is read whole), not the whole input.
register_free(("Slice", "Compress"), kind=Kind.MOVEMENT, window=kept)


_PAST = re.compile(r"past|cache", re.IGNORECASE)
_PRESENT = re.compile(r"present|cache", re.IGNORECASE)


def _single_input_concat(node: Node) -> bool:
    """A Concat of one input is an identity (the legacy torch exporter writes one on each past key)."""
    return node.op_type == "Concat" and node.domain == DEFAULT_DOMAIN and sum(1 for i in node.inputs if i) == 1


def _through_views_back(g: Graph, name: str) -> str:
    """The tensor that ``name`` aliases through view ops (Reshape, Identity..., a one-input Concat)."""
    for _ in range(16):  # views chain a few deep at most; the bound keeps a malformed graph finite
        p = g.producer(name)
        entry = None if p is None else lookup(p.domain, p.op_type)
        if p is None or entry is None or not p.inputs or not p.inputs[0]:
            return name
        if entry.kind is not Kind.VIEW and not _single_input_concat(p):
            return name
        name = p.inputs[0]
    return name


def _is_past(g: Graph, name: str) -> bool:
    """``name`` is (through views) a graph input named like a KV cache: of this graph, or of an enclosing one (a
    merged decoder's cache is the model's input, read inside the If branch that takes it)."""
    src = _through_views_back(g, name) if name else ""
    t = g.tensor(src) if src else None
    if t is None or t.kind is not TensorKind.INPUT or not _PAST.search(src):
        return False
    scope: Graph | None = g
    while scope is not None and src not in scope.input_names:
        scope = scope.parent
    return scope is not None


def views_of(g: Graph, name: str) -> list[str]:
    """``name`` and every tensor that aliases it through view ops, breadth first (bounded)."""
    out, frontier = [name], [name]
    while frontier and len(out) < 64:
        nxt: list[str] = []
        for t in frontier:
            for c in g.consumers(t):
                entry = lookup(c.domain, c.op_type)
                if entry is not None and entry.kind is Kind.VIEW and c.inputs and c.inputs[0] == t:
                    nxt.extend(o for o in c.outputs[:1] if o and o not in out)
        out.extend(nxt)
        frontier = nxt
    return out


def cache_slot(n: NodeView) -> int | None:
    """The input slot of a Concat that appends to a KV cache, or None.

    The slot's tensor is (through views) a graph input named like a cache (``past``/``cache``), and the
    Concat's output is (through views) a graph output named like one (``present``/``cache``).
    """
    g = n.graph
    if not n.node.outputs or not any(o in g.output_names and _PRESENT.search(o)
                                     for o in views_of(g, n.node.outputs[0])):
        return None
    for slot, name in enumerate(n.node.inputs):
        if _is_past(g, name):
            return slot
    return None


@rule("Concat", kind=Kind.MOVEMENT)
def concat(n: NodeView) -> Work:
    """A copy; a KV-cache append (see the module docstring) moves only the new slices, in place.

    A one-input Concat of a past cache is an identity on the way to the append: no bytes in the ideal.
    """
    if _single_input_concat(n.node) and _is_past(n.graph, next(i for i in n.node.inputs if i)):
        return Work(flops=0, bytes_read=0, bytes_written=0, as_written=True,
                    note="identity copy of a KV cache: an alias in place (the graph as written copies it)")
    slot = cache_slot(n)
    if slot is None:
        return Work(flops=0)
    past = n.node.inputs[slot]
    others = {name: i for i, name in enumerate(n.node.inputs) if name and name != past}
    try:
        read = sum((n.in_bytes(i) for i in others.values()), start=0)  # the new slices, each once
        appended = _exact(n.out_bytes(0) - n.in_bytes(slot))  # present − past: the new slices, written
    except ShapeUnknown:
        return Work(flops=0)
    return Work(flops=0, bytes_read=read, bytes_written=appended, as_written=True,
                note=f"KV-cache append to {past}: in place (the graph as written copies the whole cache)")


def _exact(value: Dim) -> Dim:
    """A difference of byte counts, expanded so that equal terms cancel (P·c + c − P·c = c)."""
    return value if isinstance(value, int) else sympy.expand(value)


DROPOUT_TRAINING_FLOPS_PER_ELEMENT = 3
"""Training-mode Dropout: random draw 1 + compare with ratio 1 + · 1/(1 − ratio) 1 (the mask is a select)."""

LINEAR_TAPS_PER_AXIS = 2
CUBIC_TAPS_PER_AXIS = 4
_TAPS = {"linear": LINEAR_TAPS_PER_AXIS, "bilinear": LINEAR_TAPS_PER_AXIS,
         "cubic": CUBIC_TAPS_PER_AXIS, "bicubic": CUBIC_TAPS_PER_AXIS, "nearest": 0}
GRID_COORD_FLOPS = 2
"""Unnormalizing one grid coordinate from [−1, 1] to pixels: one multiply and one add."""


@rule("Dropout", kind=Kind.VIEW)
def dropout(n: NodeView) -> Work:
    """Identity in inference (the mask output is optional, and all ones when asked for).

    Training mode exists from opset 12 as the optional ``training_mode`` input; it is counted only when
    that input is a constant true. A non-constant ``training_mode`` is counted as inference, with a note.
    The kind is VIEW for the inference case, so a training-mode Dropout's bytes are not charged.
    """
    if n.opset < 12 or not n.has_input(2):
        return Work(flops=0)
    mode = n.const_value(2)
    if mode is None:
        return Work(flops=0, note="training_mode is not a constant: counted as inference (identity)")
    if not bool(mode.reshape(-1)[0]):
        return Work(flops=0)
    return Work(flops=DROPOUT_TRAINING_FLOPS_PER_ELEMENT * n.in_numel(0), note="training mode")


@rule(("ScatterElements", "ScatterND"), kind=Kind.MOVEMENT)
def scatter(n: NodeView) -> Work:
    """A copy, plus one add/mul/max/min per update element when ``reduction`` is set (opset 16+)."""
    if n.attr("reduction", "none") == "none":
        return Work(flops=0)
    return Work(flops=n.in_numel(2))  # one combine per element of ``updates``


@rule("Range", kind=Kind.MOVEMENT)
def range_(n: NodeView) -> Work:
    return Work(flops=n.out_numel(0))  # one add (previous + delta) per output element


@rule("NonZero", kind=Kind.MOVEMENT)
def non_zero(n: NodeView) -> Work:
    return Work(flops=n.in_numel(0))  # one compare with zero per input element


@rule("Unique", kind=Kind.MOVEMENT)
def unique(n: NodeView) -> Work:
    """Sort the m items (⌈log2 m⌉ compares each), then compare neighbours (1 each).

    Items are elements (no ``axis``) or slices along ``axis``; comparing two slices touches every element
    of the slice, so both cases cost ``numel · (⌈log2 m⌉ + 1)``. Unsorted output (``sorted=0``) is a
    hash pass: 1 compare per element.
    """
    x = n.in_shape(0)
    axis = n.attr("axis")
    items = numel(x) if axis is None else x[int(axis) % len(x)]  # elements, or slices along axis
    sort = ceil_log2(items) if int(n.attr("sorted", 1)) else 0
    return Work(flops=numel(x) * (sort + 1))


def _resize_scales(n: NodeView) -> list[float | None]:
    """Scale per axis (out/in), None where it cannot be told; read from constants, else from shapes."""
    x, y = n.in_shape(0), n.out_shape(0)
    rank = len(x)
    scales = sizes = None
    if n.op_type == "Upsample" and n.opset < 9:
        scales = n.attr("scales")
    elif n.op_type == "Upsample" or n.opset < 11:
        scales = n.const_value(1)
    else:
        scales = n.const_value(2) if n.has_input(2) else None
        sizes = n.const_value(3) if n.has_input(3) else None
    axes = [int(a) % rank for a in (n.attr("axes") or range(rank))] if n.op_type == "Resize" else list(range(rank))
    out: list[float | None] = [1.0] * rank
    for i in range(rank):
        if i not in axes:
            continue  # axes not listed in ``axes`` keep their size
        j = axes.index(i)
        if scales is not None and len(scales) == len(axes):
            out[i] = float(scales[j])
        elif sizes is not None and len(sizes) == len(axes) and isinstance(x[i], int) and x[i]:
            out[i] = float(sizes[j]) / x[i]
        elif isinstance(x[i], int) and isinstance(y[i], int) and x[i]:
            out[i] = y[i] / x[i]
        elif x[i] == y[i]:
            out[i] = 1.0
        else:
            out[i] = None  # symbolic and not provably equal: taken as resized
    return out


@rule(("Resize", "Upsample"), kind=Kind.MOVEMENT)
def resize(n: NodeView) -> Work:
    mode = str(n.attr("mode", "nearest"))
    base = _TAPS.get(mode)
    if base is None:
        raise ValueError(f"unknown {n.op_type} mode {mode!r}")
    if base == 0:
        return Work(flops=0, note="nearest: an index computation and a copy")
    scales = _resize_scales(n)
    if all(s == 1.0 for s in scales):  # every axis keeps its size: each output is its input element, copied
        return Work(flops=0, note=f"{mode}: every scale 1, a copy")
    antialias = n.op_type == "Resize" and int(n.attr("antialias", 0))
    taps = 1
    for s in scales:
        if s == 1.0:
            continue  # axis kept: no interpolation along it
        widen = antialias and s is not None and 0 < s < 1
        taps *= math.ceil(base / s) if widen and s is not None else base  # taps along this axis
    macs = n.out_numel(0) * taps  # every output element is a weighted sum of its taps
    return Work(flops=FLOPS_PER_MAC * macs, macs=macs, note=f"{mode}: {taps} taps per output element")


@rule("GridSample", kind=Kind.MOVEMENT)
def grid_sample(n: NodeView) -> Work:
    """Per output element: 2^r (linear) or 4^r (cubic) weighted taps, r = spatial rank; nearest has none.

    Each grid coordinate is unnormalized once (a multiply and an add) and shared by all channels.
    Border and reflection padding remap out-of-range coordinates; that clamping is not counted.
    """
    grid = n.in_shape(1)  # [N, out_spatial..., r]
    r = len(grid) - 2
    mode = str(n.attr("mode", "linear"))
    base = _TAPS.get(mode)
    if base is None:
        raise ValueError(f"unknown GridSample mode {mode!r}")
    macs = n.out_numel(0) * base**r  # weighted taps per output element (0 for nearest)
    coords = GRID_COORD_FLOPS * numel(grid)  # unnormalize every grid coordinate
    return Work(flops=FLOPS_PER_MAC * macs + coords, macs=macs)


@rule("AffineGrid", kind=Kind.MOVEMENT)
def affine_grid(n: NodeView) -> Work:
    """Each output coordinate is theta's row · (x, y[, z], 1): r MACs and one add of the translation.

    The base grid of normalized positions depends only on ``size`` and is not counted.
    """
    r = n.in_shape(0)[1]  # theta is [N, r, r+1]
    out = n.out_numel(0)  # N · ∏size_spatial · r coordinates
    macs = out * r  # rotation/scale part: r MACs per coordinate
    return Work(flops=FLOPS_PER_MAC * macs + out, macs=macs)  # + translation add per coordinate
