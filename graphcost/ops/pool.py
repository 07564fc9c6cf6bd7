"""Pooling: windowed and global pools, RoI pools, MaxUnpool and Col2Im.

Convention: a pool does one compare (max) or one add (average, Lp) per element of each window, so a
pool's FLOPs are ``output elements × kernel window``. Counting one op per window element (not
``window − 1``) treats the accumulator as starting from the identity (0 or −inf), which is how
kernels run. Padding and dilation do not change the count: the window has ``∏kernel_shape`` taps.
AveragePool's ``count_include_pad`` changes only the divisor, never the number of adds, so it is not
read here. Global pools reduce every input element once. A windowed pool whose kernel_shape, strides,
dilations or pads the spec forbids (a stride of 0, a negative pad) has an unknown cost naming the attribute
(``_window.py``), never the number its declared output shape would give.

RoI pools sample the input with bilinear interpolation (RoiAlign) or take maxima over RoI bins
(MaxRoiPool). Interpolation is a weighted sum, so its taps are counted as MACs (``FLOPS_PER_MAC``
each), as Resize does.
"""

from __future__ import annotations

import math

import numpy as np

from graphcost._dims import Dim, prod
from graphcost.ops._registry import FLOPS_PER_MAC, Kind, NodeView, Unknown, Work, register_free, rule
from graphcost.ops._window import invalid_window

BILINEAR_TAPS = 4
"""A 2-D bilinear sample reads 4 neighbours and weights each: 4 MACs."""


def window_size(n: NodeView) -> Dim:
    """Elements of one pooling window: ∏kernel_shape (dilation spreads the taps, it adds none)."""
    kernel = n.attr("kernel_shape")
    if not kernel:
        raise ValueError(f"{n.op_type} without kernel_shape")
    return prod(int(k) for k in kernel)


@rule("MaxPool", kind=Kind.REDUCTION)
def max_pool(n: NodeView) -> Work | Unknown:
    """One compare per window element per output; the optional Indices output is bookkeeping, no arithmetic."""
    invalid = invalid_window(n)
    if invalid is not None:
        return invalid
    return Work(flops=n.out_numel(0) * window_size(n))  # compares: output elements × window


@rule("AveragePool", kind=Kind.REDUCTION)
def average_pool(n: NodeView) -> Work | Unknown:
    invalid = invalid_window(n)
    if invalid is not None:
        return invalid
    out = n.out_numel(0)
    adds = out * window_size(n)  # one add per window element per output
    divides = out  # one divide per output (by the window size or the count of unpadded taps)
    return Work(flops=adds + divides)


@rule("LpPool", kind=Kind.REDUCTION)
def lp_pool(n: NodeView) -> Work | Unknown:
    """(Σ|x|^p)^(1/p): |x|^p and an add per window element, one root per output."""
    invalid = invalid_window(n)
    if invalid is not None:
        return invalid
    out = n.out_numel(0)
    per_tap = 2 * out * window_size(n)  # |x|^p (one power, counted 1 like Pow) + one add, per window element
    roots = out  # ^(1/p) once per output
    return Work(flops=per_tap + roots)


@rule("GlobalMaxPool", kind=Kind.REDUCTION)
def global_max_pool(n: NodeView) -> Work:
    return Work(flops=n.in_numel(0))  # one compare per input element


@rule("GlobalAveragePool", kind=Kind.REDUCTION)
def global_average_pool(n: NodeView) -> Work:
    adds = n.in_numel(0)  # one add per input element
    divides = n.out_numel(0)  # one divide per output (N·C)
    return Work(flops=adds + divides)


@rule("GlobalLpPool", kind=Kind.REDUCTION)
def global_lp_pool(n: NodeView) -> Work:
    per_element = 2 * n.in_numel(0)  # |x|^p + one add, per input element
    roots = n.out_numel(0)  # ^(1/p) once per output
    return Work(flops=per_element + roots)


@rule("RoiAlign", kind=Kind.REDUCTION)
def roi_align(n: NodeView) -> Work | Unknown:
    """Each output bin averages (or maxes) ``grid_h × grid_w`` bilinear samples.

    avg: a sample is 4 weighted taps accumulated into the bin sum (4 MACs); one divide per output.
    max: a sample is 4 weighted taps (4 multiplies) and 4 compares (the max of the 4 and the running max),
    as the reference implementation does. The interpolation weights are computed once per RoI and
    shared by every channel; they are not counted.
    With ``sampling_ratio`` 0 the grid is ``ceil(roi_size / output_size)``: it depends on the RoI
    boxes, which are data, so it is known only when the boxes are constants.
    """
    out = n.out_numel(0)  # num_rois · C · output_height · output_width
    samples = _roi_align_samples(n, out)
    if isinstance(samples, Unknown):
        return samples
    if n.attr("mode", "avg") == "max":
        return Work(flops=samples * (BILINEAR_TAPS + BILINEAR_TAPS))  # 4 multiplies + 4 compares per sample
    macs = samples * BILINEAR_TAPS  # 4 weighted taps per sample, accumulated into the bin sum
    return Work(flops=FLOPS_PER_MAC * macs + out, macs=macs)  # + one divide per output


def _roi_align_samples(n: NodeView, out: Dim) -> Dim | Unknown:
    """Bilinear samples over all outputs: out × grid_h × grid_w."""
    ratio = int(n.attr("sampling_ratio", 0))
    if ratio > 0:
        return out * ratio * ratio  # a fixed ratio × ratio grid per bin
    rois = n.const_value(1)
    if rois is None:
        return Unknown("RoiAlign with sampling_ratio=0 samples ceil(roi_size/output_size) points per bin; "
                       "the RoI boxes are data, so the count is not known statically")
    y = n.out_shape(0)  # [num_rois, C, oh, ow]
    oh, ow = int(n.attr("output_height", 1)), int(n.attr("output_width", 1))
    scale = float(n.attr("spatial_scale", 1.0))
    half_pixel = n.attr("coordinate_transformation_mode", "half_pixel") == "half_pixel"
    boxes = np.asarray(rois, dtype=np.float64).reshape(-1, 4) * scale  # [x1, y1, x2, y2]
    total = 0
    for x1, y1, x2, y2 in boxes:
        w, h = x2 - x1, y2 - y1
        if not half_pixel:  # the spec forces malformed RoIs to 1×1 outside half_pixel mode
            w, h = max(w, 1.0), max(h, 1.0)
        total += max(math.ceil(h / oh), 0) * max(math.ceil(w / ow), 0)  # grid_h · grid_w of this RoI
    return y[1] * oh * ow * total  # every channel and bin of each RoI samples its grid


@rule("MaxRoiPool", kind=Kind.REDUCTION)
def max_roi_pool(n: NodeView) -> Work | Unknown:
    """One compare per feature-map cell of every bin: the bins tile each RoI (with rounding overlap).

    The count is the RoIs' areas on the feature map, which are data; known only for constant RoIs.
    """
    rois = n.const_value(1)
    x = n.in_shape(0)  # [N, C, H, W]
    height, width = x[2], x[3]
    if rois is None or not isinstance(height, int) or not isinstance(width, int):
        return Unknown("MaxRoiPool compares every cell of each RoI bin; the RoI boxes are data "
                       "(or the feature map is symbolic), so the count is not known statically")
    ph, pw = (int(v) for v in n.attr("pooled_shape"))
    scale = float(n.attr("spatial_scale", 1.0))
    cells = 0
    for _, x1, y1, x2, y2 in np.asarray(rois, dtype=np.float64).reshape(-1, 5):
        sw, sh, ew, eh = (round(v * scale) for v in (x1, y1, x2, y2))
        cells += (_bins_span(sh, max(eh - sh + 1, 1), ph, height)
                  * _bins_span(sw, max(ew - sw + 1, 1), pw, width))
    return Work(flops=x[1] * cells)  # one compare per covered cell per channel


def _bins_span(start: int, size: int, bins: int, limit: int) -> int:
    """Cells covered by ``bins`` bins along one axis (the Caffe/ORT rounding, clipped to the map)."""
    step = size / bins
    total = 0
    for b in range(bins):
        lo = min(max(math.floor(b * step) + start, 0), limit)
        hi = min(max(math.ceil((b + 1) * step) + start, 0), limit)
        total += hi - lo
    return total


@rule("Col2Im", kind=Kind.REDUCTION)
def col2im(n: NodeView) -> Work:
    """Overlapping blocks are summed back into the image: one add per input (column) element."""
    return Work(flops=n.in_numel(0))  # N · C·∏block · L adds


# MaxUnpool scatters values to the positions its Indices input names: a copy, no arithmetic.
register_free(("MaxUnpool",), kind=Kind.MOVEMENT)
