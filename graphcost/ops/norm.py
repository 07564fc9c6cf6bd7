"""Normalizations: BatchNorm, LayerNorm, InstanceNorm, GroupNorm, RMSNorm, LpNorm, MVN and LRN.

Every statistics-based norm has two parts, counted separately:

* per element: the passes over the data (sums for the statistics, the centring and the scaling);
* per group: the scalar work done once per normalized group (a row of LayerNorm, an (n, c) plane of
  InstanceNorm, an (n, g) block of GroupNorm): the divides by the group size, the epsilon add, the
  square root.

Standardizing ``(x − mean) / sqrt(var + eps)`` over a group, counted the way the ONNX function bodies
write it (two-pass variance, a per-element divide by the standard deviation)::

    mean      Σx                 1 add       per element
    centre    x − mean           1 subtract  per element
    square    (x − mean)²        1 multiply  per element
    variance  Σ(x − mean)²       1 add       per element
    scale     (x − mean) / std   1 divide    per element     → STANDARDIZE_FLOPS_PER_ELEMENT = 5
    per group: Σx / n, Σ(·)² / n, + eps, sqrt                  → STANDARDIZE_FLOPS_PER_GROUP = 4

An affine ``· scale + bias`` adds 1 multiply and 1 add per element.
"""

from __future__ import annotations

from graphcost._dims import Dim, numel, prod
from graphcost.ops._registry import Kind, NodeView, Work, rule

STANDARDIZE_FLOPS_PER_ELEMENT = 5
"""mean-sum 1 + subtract mean 1 + square 1 + variance-sum 1 + divide by std 1 (see the module docstring)."""
STANDARDIZE_FLOPS_PER_GROUP = 4
"""mean divide 1 + variance divide 1 + epsilon add 1 + sqrt 1, once per normalized group."""
AFFINE_FLOPS_PER_ELEMENT = 2
"""· scale 1 + bias 1."""

LAYERNORM_FLOPS_PER_ELEMENT = STANDARDIZE_FLOPS_PER_ELEMENT + 1
"""6 = mean-sum 1 + subtract mean 1 + square 1 + variance-sum 1 + divide by std 1 + · scale 1;
the optional bias B adds 1 more (7 in all with a bias)."""

BATCHNORM_FLOPS_PER_ELEMENT = 2
"""Inference BatchNorm, folded: y = x·a + b with a = scale/sqrt(var + eps), b = bias − mean·a.

Every runtime (onnxruntime, cuDNN inference, TensorRT) folds the four per-channel constants into one
multiply and one add per element, so 2, not the 4 of the unfolded formula (subtract, divide,
multiply, add). The folding itself is per channel: BATCHNORM_FOLD_FLOPS_PER_CHANNEL."""
BATCHNORM_FOLD_FLOPS_PER_CHANNEL = 5
"""var + eps 1, sqrt 1, scale / std 1, mean · a 1, bias − (mean · a) 1."""
BATCHNORM_TRAINING_STATS_FLOPS_PER_ELEMENT = 4
"""Batch statistics in training mode: mean-sum 1 + subtract mean 1 + square 1 + variance-sum 1."""
BATCHNORM_TRAINING_FLOPS_PER_CHANNEL = 2 + 6
"""Training mode, per channel, on top of the fold: mean divide 1 + variance divide 1, and the running
statistics ``running = running·momentum + batch·(1 − momentum)``: 3 each for mean and variance."""

RMSNORM_FLOPS_PER_ELEMENT = 4
"""square 1 + sum 1 + divide by rms 1 + · scale 1."""
RMSNORM_FLOPS_PER_GROUP = 3
"""mean divide 1 + epsilon add 1 + sqrt 1."""


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _batchnorm_training(n: NodeView) -> bool:
    """Opset 14+ says so with ``training_mode``; before, training mode is the one with statistics outputs."""
    if n.opset >= 14:
        return bool(n.attr("training_mode", 0))
    return sum(1 for o in n.node.outputs if o) > 1


@rule("BatchNormalization", kind=Kind.NORMALIZATION)
def batch_normalization(n: NodeView) -> Work:
    elements = n.in_numel(0)
    channels = n.in_shape(1)[0]  # scale is [C]
    flops = BATCHNORM_FLOPS_PER_ELEMENT * elements + BATCHNORM_FOLD_FLOPS_PER_CHANNEL * channels
    if not _batchnorm_training(n):
        return Work(flops=flops, note="inference: folded to one multiply-add per element")
    flops += BATCHNORM_TRAINING_STATS_FLOPS_PER_ELEMENT * elements  # batch mean and variance passes
    flops += BATCHNORM_TRAINING_FLOPS_PER_CHANNEL * channels  # statistics divides + running updates
    return Work(flops=flops, note="training mode: batch statistics and running-statistics update")


@rule("LayerNormalization", kind=Kind.NORMALIZATION)
def layer_normalization(n: NodeView) -> Work:
    x = n.in_shape(0)
    axis = _axis(int(n.attr("axis", -1)), len(x))
    rows = prod(x[:axis])  # one normalized group per leading index
    elements = numel(x)
    bias = elements if n.has_input(2) else 0  # + B, one add per element
    return Work(flops=LAYERNORM_FLOPS_PER_ELEMENT * elements + bias + STANDARDIZE_FLOPS_PER_GROUP * rows)


@rule("InstanceNormalization", kind=Kind.NORMALIZATION)
def instance_normalization(n: NodeView) -> Work:
    x = n.in_shape(0)  # [N, C, spatial...]
    groups = x[0] * x[1]  # one group per (n, c) plane
    elements = numel(x)
    per_element = (STANDARDIZE_FLOPS_PER_ELEMENT + AFFINE_FLOPS_PER_ELEMENT) * elements  # 5 + scale + bias
    return Work(flops=per_element + STANDARDIZE_FLOPS_PER_GROUP * groups)


@rule("GroupNormalization", kind=Kind.NORMALIZATION)
def group_normalization(n: NodeView) -> Work:
    x = n.in_shape(0)  # [N, C, spatial...]
    groups = x[0] * int(n.attr("num_groups"))  # one group per (n, g)
    elements = numel(x)
    per_element = (STANDARDIZE_FLOPS_PER_ELEMENT + AFFINE_FLOPS_PER_ELEMENT) * elements  # 5 + scale + bias
    return Work(flops=per_element + STANDARDIZE_FLOPS_PER_GROUP * groups)


@rule("MeanVarianceNormalization", kind=Kind.NORMALIZATION)
def mean_variance_normalization(n: NodeView) -> Work:
    """(x − E[x]) / sqrt(E[x²] − E[x]²): square 1 + two sums 2 + subtract 1 + divide 1 per element (5)."""
    x = n.in_shape(0)
    axes = {_axis(int(a), len(x)) for a in n.attr("axes", [0, 2, 3])}
    groups = prod(d for i, d in enumerate(x) if i not in axes)  # one group per index of the kept axes
    return Work(flops=STANDARDIZE_FLOPS_PER_ELEMENT * numel(x) + STANDARDIZE_FLOPS_PER_GROUP * groups)


@rule("RMSNormalization", kind=Kind.NORMALIZATION)
def rms_normalization(n: NodeView) -> Work:
    x = n.in_shape(0)
    axis = _axis(int(n.attr("axis", -1)), len(x))
    rows = prod(x[:axis])  # one normalized group per leading index
    return Work(flops=RMSNORM_FLOPS_PER_ELEMENT * numel(x) + RMSNORM_FLOPS_PER_GROUP * rows)


@rule("LpNormalization", kind=Kind.NORMALIZATION)
def lp_normalization(n: NodeView) -> Work:
    """x / ‖x‖p along ``axis``: |x| or x² 1 + sum 1 + divide 1 per element; a sqrt per row for p=2."""
    x = n.in_shape(0)
    axis = _axis(int(n.attr("axis", -1)), len(x))
    elements = numel(x)
    rows: Dim = prod(d for i, d in enumerate(x) if i != axis)  # one norm per index of the other axes
    roots = rows if int(n.attr("p", 2)) == 2 else 0  # sqrt of the sum of squares (p=1 needs none)
    return Work(flops=3 * elements + roots)


@rule("LRN", kind=Kind.NORMALIZATION)
def lrn(n: NodeView) -> Work:
    """y = x / (bias + alpha/size · Σ_window x²)^beta, the window spanning ``size`` channels.

    Per element: square 1 (each x² once), window sum ``size`` adds (the spec's direct sum), · alpha/size 1,
    + bias 1, ^beta 1, divide 1 → size + 5.
    """
    size = int(n.attr("size"))
    return Work(flops=(size + 5) * n.in_numel(0))
