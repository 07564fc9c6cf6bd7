"""Reduction rules: per-input accumulation, per-output finishing, Softmax family, TopK, losses."""

from __future__ import annotations

import pytest
import sympy
from ophelp import cost_of

from graphcost._dims import ceil_log2, symbol
from graphcost.ops import Work
from graphcost.ops.reduce import SOFTMAX_FLOPS_PER_ELEMENT


def _m(graph: str, opset: int = 18) -> str:
    return f'<ir_version: 10, opset_import: ["" : {opset}]>\n{graph}'


def work(text: str) -> Work:
    w = cost_of(text)
    assert isinstance(w, Work), w
    return w


def _reduce(op: str) -> Work:
    return work(_m(f"g (float[3,4,5] X) => (Y) <int64[1] ax = {{1}}> {{ Y = {op} <keepdims: int = 0> (X, ax) }}"))


@pytest.mark.parametrize(("op", "per_input", "per_output"), [
    ("ReduceSum", 1, 0),  # add
    ("ReduceMean", 1, 1),  # add; divide
    ("ReduceMax", 1, 0),  # compare
    ("ReduceMin", 1, 0),  # compare
    ("ReduceProd", 1, 0),  # multiply
    ("ReduceL1", 2, 0),  # |x| + add
    ("ReduceL2", 2, 1),  # x² + add; sqrt
    ("ReduceSumSquare", 2, 0),  # x² + add
    ("ReduceLogSum", 1, 1),  # add; log
    ("ReduceLogSumExp", 4, 2),  # max, subtract, exp, add; log, add back the max
])
def test_reduce_family(op: str, per_input: int, per_output: int) -> None:
    inputs, outputs = 3 * 4 * 5, 3 * 5  # axis 1 reduced
    assert _reduce(op).flops == per_input * inputs + per_output * outputs


def test_reduce_noop_with_empty_axes() -> None:
    all_axes = work(_m("g (float[3,4,5] X) => (Y) { Y = ReduceSum (X) }"))
    noop = work(_m("g (float[3,4,5] X) => (Y) { Y = ReduceSum <noop_with_empty_axes: int = 1> (X) }"))
    assert all_axes.flops == 60  # schema default noop_with_empty_axes = 0: reduce everything
    assert noop.flops == 0  # identity


def test_reduce_symbolic() -> None:
    w = work(_m("g (float[B,S,D] X) => (Y) <int64[1] ax = {2}> { Y = ReduceMean (X, ax) }"))
    b, s, d = symbol("B"), symbol("S"), symbol("D")
    assert sympy.expand(w.flops - (b * s * d + b * s)) == 0  # an add per input, a divide per output


def test_arg_max() -> None:
    assert work(_m("g (float[3,4] X) => (Y) { Y = ArgMax (X) }")).flops == 12  # a compare per element


def test_softmax_symbolic() -> None:
    w = work(_m("g (float[B,S,V] X) => (Y) { Y = Softmax (X) }"))
    assert SOFTMAX_FLOPS_PER_ELEMENT == 1 + 1 + 1 + 1 + 1  # max, subtract, exp, sum, divide
    assert sympy.expand(w.flops - 5 * symbol("B") * symbol("S") * symbol("V")) == 0


def test_log_softmax_adds_a_log_per_row() -> None:
    w13 = work(_m("g (float[2,10] X) => (Y) { Y = LogSoftmax (X) }"))
    assert w13.flops == 5 * 20 + 2  # 5 per element; one log per row of 10
    w11 = work(_m("g (float[2,3,4] X) => (Y) { Y = LogSoftmax (X) }", opset=11))
    assert w11.flops == 5 * 24 + 2  # opset 11 coerces to 2-D at axis 1 (its default): 2 rows of 12


def test_hardmax_and_cumulative() -> None:
    assert work(_m("g (float[2,10] X) => (Y) { Y = Hardmax (X) }")).flops == 20  # argmax compares
    assert work(_m("g (float[5] X, int32 a) => (Y) { Y = CumSum (X, a) }")).flops == 5  # one add each
    assert work(_m("g (float[5] X, int32 a) => (Y) { Y = CumProd (X, a) }", opset=26)).flops == 5


def test_top_k() -> None:
    k4 = work(_m("g (float[3,16] X) => (V, I) <int64[1] k = {4}> { V, I = TopK (X, k) }"))
    heap = 3 * 16 * 2  # every element: ⌈log2 4⌉ = 2 heap compares
    sort = 3 * 4 * 2  # sorted=1 (schema default): k·⌈log2 k⌉ per row
    assert k4.flops == heap + sort
    k1 = work(_m("g (float[3,16] X) => (V, I) <int64[1] k = {1}> { V, I = TopK (X, k) }"))
    assert k1.flops == 3 * 16 * 1 + 3 * 1 * 1  # at least one compare per element


def test_ceil_log2() -> None:
    assert [ceil_log2(v) for v in (1, 2, 3, 4, 5, 1024, 1025)] == [0, 1, 2, 2, 3, 10, 11]
    n = symbol("n")
    assert sympy.sympify(ceil_log2(n)).subs(n, 1000) == 10  # symbolic: ⌈log2 n⌉ stays a formula


def test_nll_loss() -> None:
    mean = work(_m("g (float[4,5] X, int64[4] t) => (L) { L = NegativeLogLikelihoodLoss (X, t) }"))
    assert mean.flops == 4 + 4 + 1  # negate each sample, sum, one divide (schema reduction = mean)
    weighted = work(_m("g (float[4,5] X, int64[4] t, float[5] w) => (L) "
                       "{ L = NegativeLogLikelihoodLoss (X, t, w) }"))
    assert weighted.flops == 4 + 4 + 4 + 1 + 4  # negate, ·weight, sum, divide, sum of weights
    none = work(_m("g (float[4,5] X, int64[4] t) => (L) "
                   "{ L = NegativeLogLikelihoodLoss <reduction: string = \"none\"> (X, t) }"))
    assert none.flops == 4


def test_softmax_cross_entropy_loss() -> None:
    w = work(_m("g (float[4,5] X, int64[4] t) => (L) { L = SoftmaxCrossEntropyLoss (X, t) }"))
    log_softmax = 5 * 20 + 4  # 5 per score, a log per sample
    nll = 4 + 4 + 1  # negate, sum, divide
    assert w.flops == log_softmax + nll
