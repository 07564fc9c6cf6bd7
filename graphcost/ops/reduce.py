"""Reductions: Reduce*, ArgMax/ArgMin, the Softmax family, CumSum/CumProd, TopK and the losses.

A reduction does its per-element work once per *input* element (one add, compare or multiply into
the accumulator, counted even for the first element, as kernels start from the identity) plus scalar
work once per *output* element (the mean's divide, the L2's root). Which axes are reduced does not
change the count, so the per-input terms hold even when the axes are not constants.

Softmax is counted in its numerically stable form, the one every runtime uses::

    max-reduce 1 + subtract max 1 + exp 1 + sum 1 + divide 1 = SOFTMAX_FLOPS_PER_ELEMENT = 5

ReduceLogSumExp is counted stable the same way (max 1 + subtract 1 + exp 1 + sum 1 per input element,
log 1 + add back the max 1 per output).
"""

from __future__ import annotations

from graphcost._dims import Dim, ceil_log2, numel, prod
from graphcost._minmax import dim_max
from graphcost.ops._registry import Kind, NodeView, Work, rule

REDUCE_FLOPS_PER_INPUT = {
    "ReduceSum": 1,  # add
    "ReduceMean": 1,  # add
    "ReduceMax": 1,  # compare
    "ReduceMin": 1,  # compare
    "ReduceProd": 1,  # multiply
    "ReduceL1": 2,  # |x| + add
    "ReduceL2": 2,  # x² + add
    "ReduceSumSquare": 2,  # x² + add
    "ReduceLogSum": 1,  # add
    "ReduceLogSumExp": 4,  # max-reduce + subtract max + exp + add
}
REDUCE_FLOPS_PER_OUTPUT = {
    "ReduceMean": 1,  # divide by the reduced count
    "ReduceL2": 1,  # sqrt
    "ReduceLogSum": 1,  # log
    "ReduceLogSumExp": 2,  # log + add back the max
}

SOFTMAX_FLOPS_PER_ELEMENT = 5
"""max-reduce 1 + subtract max 1 + exp 1 + sum 1 + divide 1."""
LOGSOFTMAX_FLOPS_PER_ELEMENT = 5
"""max-reduce 1 + subtract max 1 + exp 1 + sum 1 + subtract log-sum 1; plus one log per row."""
HARDMAX_FLOPS_PER_ELEMENT = 1
"""argmax compare 1; writing the one-hot row is a store, not arithmetic."""


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _reduces_nothing(n: NodeView) -> bool:
    """Empty axes with noop_with_empty_axes=1 make the reduce an identity (its schema default is 0)."""
    if not int(n.attr("noop_with_empty_axes", 0)):
        return False
    if n.has_input(1):
        axes = n.const_value(1)
        return axes is not None and axes.size == 0  # non-constant axes are taken to be non-empty
    return not n.attr("axes", [])


@rule(tuple(REDUCE_FLOPS_PER_INPUT), kind=Kind.REDUCTION)
def reduce(n: NodeView) -> Work:
    if _reduces_nothing(n):
        return Work(flops=0, note="empty axes with noop_with_empty_axes=1: identity")
    flops = REDUCE_FLOPS_PER_INPUT[n.op_type] * n.in_numel(0)  # accumulate every input element
    per_output = REDUCE_FLOPS_PER_OUTPUT.get(n.op_type, 0)
    if per_output:
        flops += per_output * n.out_numel(0)  # finishing step once per reduced value
    return Work(flops=flops)


@rule(("ArgMax", "ArgMin"), kind=Kind.REDUCTION)
def arg_reduce(n: NodeView) -> Work:
    return Work(flops=n.in_numel(0))  # one compare per input element


def _softmax_rows(n: NodeView) -> Dim:
    """Number of normalized rows: opset < 13 coerces to 2-D at ``axis`` (default 1), 13+ uses one axis."""
    x = n.in_shape(0)
    if n.opset < 13:
        return prod(x[:_axis(int(n.attr("axis", 1)), len(x))])
    axis = _axis(int(n.attr("axis", -1)), len(x))
    return prod(d for i, d in enumerate(x) if i != axis)


@rule("Softmax", kind=Kind.REDUCTION)
def softmax(n: NodeView) -> Work:
    return Work(flops=SOFTMAX_FLOPS_PER_ELEMENT * n.in_numel(0))


@rule("LogSoftmax", kind=Kind.REDUCTION)
def log_softmax(n: NodeView) -> Work:
    per_element = LOGSOFTMAX_FLOPS_PER_ELEMENT * n.in_numel(0)
    logs = _softmax_rows(n)  # log of the sum, once per row
    return Work(flops=per_element + logs)


@rule("Hardmax", kind=Kind.REDUCTION)
def hardmax(n: NodeView) -> Work:
    return Work(flops=HARDMAX_FLOPS_PER_ELEMENT * n.in_numel(0))


@rule(("CumSum", "CumProd"), kind=Kind.REDUCTION)
def cumulative(n: NodeView) -> Work:
    return Work(flops=n.in_numel(0))  # one add (CumSum) or multiply (CumProd) per element


@rule("TopK", kind=Kind.REDUCTION)
def top_k(n: NodeView) -> Work:
    """Heap selection: each element is compared into a size-k heap, ⌈log2 k⌉ compares (at least 1).

    With ``sorted=1`` (the default) the k survivors of each row are then sorted: k·⌈log2 k⌉ more.
    """
    x = n.in_shape(0)
    axis = _axis(int(n.attr("axis", -1)), len(x))
    k = n.out_shape(0)[axis]
    depth = dim_max(1, ceil_log2(k)) if not isinstance(k, int) else max(1, ceil_log2(k))
    flops = numel(x) * depth  # heap insertions: every element
    if int(n.attr("sorted", 1)):
        rows = prod(d for i, d in enumerate(x) if i != axis)
        flops += rows * k * depth  # sort the k selected per row
    return Work(flops=flops)


# --- losses: a gather from the (log-)probabilities, then the reduction -----------------------------


def _nll_flops(n: NodeView, samples: Dim) -> Dim:
    """NLL over ``samples`` target positions: −input[target] (1), · weight (1), ignore_index test (1),
    then sum (1 per sample) and, for mean, the divide (1, and the weight sum: 1 per sample)."""
    weighted = n.has_input(2)
    flops: Dim = samples  # negate the gathered log-probability
    if weighted:
        flops += samples  # · weight[target]
    if n.node.attribute("ignore_index") is not None:
        flops += samples  # compare target with ignore_index
    reduction = n.attr("reduction", "mean")
    if reduction in ("sum", "mean"):
        flops += samples  # add into the loss sum
    if reduction == "mean":
        flops += 1 + (samples if weighted else 0)  # one divide; the weighted mean sums the weights too
    return flops


@rule("NegativeLogLikelihoodLoss", kind=Kind.REDUCTION)
def negative_log_likelihood_loss(n: NodeView) -> Work:
    return Work(flops=_nll_flops(n, n.in_numel(1)))  # target is [N, d1, ...]: one sample per element


@rule("SoftmaxCrossEntropyLoss", kind=Kind.REDUCTION)
def softmax_cross_entropy_loss(n: NodeView) -> Work:
    """LogSoftmax over the class axis (5 per score + 1 log per sample), then NLL."""
    samples = n.in_numel(1)  # labels [N, d1, ...]
    log_softmax_flops = LOGSOFTMAX_FLOPS_PER_ELEMENT * n.in_numel(0) + samples  # per score, + a log per sample
    return Work(flops=log_softmax_flops + _nll_flops(n, samples))
