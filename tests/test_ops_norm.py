"""Normalization rules: per-element passes plus per-group scalar work, in closed form."""

from __future__ import annotations

import sympy
from ophelp import cost_of

from graphcost._dims import symbol
from graphcost.ops import Work
from graphcost.ops.norm import (
    BATCHNORM_FLOPS_PER_ELEMENT,
    BATCHNORM_FOLD_FLOPS_PER_CHANNEL,
    LAYERNORM_FLOPS_PER_ELEMENT,
    STANDARDIZE_FLOPS_PER_ELEMENT,
    STANDARDIZE_FLOPS_PER_GROUP,
)


def _m(graph: str, opset: int = 18) -> str:
    return f'<ir_version: 10, opset_import: ["" : {opset}]>\n{graph}'


def work(text: str) -> Work:
    w = cost_of(text)
    assert isinstance(w, Work), w
    return w


def test_constants_are_their_documented_sums() -> None:
    assert STANDARDIZE_FLOPS_PER_ELEMENT == 1 + 1 + 1 + 1 + 1  # mean-sum, centre, square, var-sum, divide
    assert STANDARDIZE_FLOPS_PER_GROUP == 1 + 1 + 1 + 1  # mean divide, var divide, + eps, sqrt
    assert LAYERNORM_FLOPS_PER_ELEMENT == 5 + 1  # standardize + · scale (bias counted apart)
    assert BATCHNORM_FLOPS_PER_ELEMENT == 2  # folded: one multiply + one add
    assert BATCHNORM_FOLD_FLOPS_PER_CHANNEL == 5  # + eps, sqrt, scale/std, mean·a, bias − mean·a


def test_batch_norm_inference_is_folded() -> None:
    w = work(_m("g (float[2,3,4,4] X, float[3] s, float[3] b, float[3] m, float[3] v) => (Y) "
                "{ Y = BatchNormalization (X, s, b, m, v) }"))
    elements, channels = 2 * 3 * 4 * 4, 3
    assert w.flops == 2 * elements + 5 * channels  # x·a + b per element; fold a, b per channel


def test_batch_norm_training_mode_adds_statistics() -> None:
    w = work(_m("g (float[2,3,4,4] X, float[3] s, float[3] b, float[3] m, float[3] v) => (Y, rm, rv) "
                "{ Y, rm, rv = BatchNormalization <training_mode: int = 1> (X, s, b, m, v) }", opset=15))
    elements, channels = 96, 3
    inference = 2 * elements + 5 * channels
    stats = 4 * elements  # mean-sum, centre, square, var-sum over the batch
    per_channel = 2 + 6  # two divides, running mean and variance updates (3 each)
    assert w.flops == inference + stats + per_channel * channels


def test_layer_norm_with_and_without_bias() -> None:
    sig = "float[2,5,8] X, float[8] s, float[8] b"
    with_bias = work(_m(f"g ({sig}) => (Y) {{ Y = LayerNormalization (X, s, b) }}"))
    no_bias = work(_m(f"g ({sig}) => (Y) {{ Y = LayerNormalization (X, s) }}"))
    elements, rows = 2 * 5 * 8, 2 * 5  # schema default axis = -1: one row per (2, 5) index
    assert no_bias.flops == 6 * elements + 4 * rows  # standardize 5 + scale 1; per-row scalars 4
    assert with_bias.flops == 6 * elements + elements + 4 * rows  # + one bias add per element


def test_layer_norm_symbolic() -> None:
    w = work(_m("g (float[B,S,768] X, float[768] s, float[768] b) => (Y) { Y = LayerNormalization (X, s, b) }"))
    b, s = symbol("B"), symbol("S")
    assert sympy.expand(w.flops - (7 * b * s * 768 + 4 * b * s)) == 0  # 7 per element, 4 per row


def test_instance_norm() -> None:
    w = work(_m("g (float[2,3,4,4] X, float[3] s, float[3] b) => (Y) { Y = InstanceNormalization (X, s, b) }"))
    elements, planes = 96, 2 * 3
    assert w.flops == (5 + 2) * elements + 4 * planes  # standardize + affine; scalars per (n, c)


def test_group_norm() -> None:
    w = work(_m("g (float[2,6,4,4] X, float[6] s, float[6] b) => (Y) "
                "{ Y = GroupNormalization <num_groups: int = 3> (X, s, b) }", opset=21))
    elements, groups = 2 * 6 * 16, 2 * 3
    assert w.flops == (5 + 2) * elements + 4 * groups


def test_mean_variance_normalization_default_axes() -> None:
    w = work(_m("g (float[2,3,4,4] X) => (Y) { Y = MeanVarianceNormalization (X) }"))
    groups = 3  # schema default axes [0, 2, 3]: one group per channel
    assert w.flops == 5 * 96 + 4 * groups


def test_rms_norm() -> None:
    w = work(_m("g (float[2,5,8] X, float[8] s) => (Y) { Y = RMSNormalization (X, s) }", opset=23))
    elements, rows = 80, 10
    assert w.flops == 4 * elements + 3 * rows  # square, sum, divide, scale; mean divide, + eps, sqrt


def test_rms_norm_symbolic() -> None:
    w = work(_m("g (float[B,S,D] X, float[D] s) => (Y) { Y = RMSNormalization (X, s) }", opset=23))
    b, s, d = symbol("B"), symbol("S"), symbol("D")
    assert sympy.expand(w.flops - (4 * b * s * d + 3 * b * s)) == 0


def test_lp_normalization_default_p_is_2() -> None:
    l2 = work(_m("g (float[3,4] X) => (Y) { Y = LpNormalization (X) }"))
    l1 = work(_m("g (float[3,4] X) => (Y) { Y = LpNormalization <p: int = 1> (X) }"))
    assert l2.flops == 3 * 12 + 3  # square, add, divide per element; a sqrt per row (schema p = 2)
    assert l1.flops == 3 * 12  # |x|, add, divide; no root


def test_lrn() -> None:
    w = work(_m("g (float[1,4,5,5] X) => (Y) { Y = LRN <size: int = 3> (X) }"))
    assert w.flops == (3 + 5) * 100  # window sum of 3 + square, ·alpha/size, +bias, ^beta, divide
