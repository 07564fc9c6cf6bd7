"""Data movement: views, metadata, copies, gathers/scatters, and the resamplers.

Three kinds, and the difference matters for bytes (the costs pass charges them by kind):

* views (Kind.VIEW) alias their input: zero FLOPs and zero bytes (Reshape, Squeeze, Identity...).
* metadata (Kind.FREE) reads no tensor data: Shape and Size look only at the shape (``free_inputs``).
* copies (Kind.MOVEMENT) read and write data but compute nothing: zero FLOPs, their bytes charged.

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

from graphcost._dims import ceil_log2, numel
from graphcost.ops._registry import FLOPS_PER_MAC, Kind, NodeView, Work, register_free, rule

# Views: the output aliases the input (Dropout in inference is Identity; see dropout below).
register_free(("Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "BitCast",
               "Optional", "OptionalGetElement"), kind=Kind.VIEW)

# Metadata: the output is computed from shapes (or nothing), the input data is never read.
register_free(("Shape", "Size", "OptionalHasElement"), kind=Kind.FREE, free_inputs=(0,))
register_free(("Constant",), kind=Kind.FREE)

# Copies: every output element is some input element (or a fill value); no arithmetic.
register_free(("Transpose", "Concat", "Split", "Slice", "Gather", "GatherElements", "GatherND", "Pad", "Tile",
               "Expand", "DepthToSpace", "SpaceToDepth", "Compress", "OneHot", "ConstantOfShape", "Trilu",
               "ReverseSequence", "CenterCropPad", "Scatter", "TensorScatter"), kind=Kind.MOVEMENT)
# EyeLike writes an identity matrix of its input's shape: it reads only the input's metadata.
register_free(("EyeLike",), kind=Kind.MOVEMENT, free_inputs=(0,))

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
    antialias = n.op_type == "Resize" and int(n.attr("antialias", 0))
    taps = 1
    for s in _resize_scales(n):
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
