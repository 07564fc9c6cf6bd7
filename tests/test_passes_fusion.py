"""Fusion groups: the IDEAL policy's groups, boundary reasons, byte accounting and custom policies.

Expected numbers are closed forms written out term by term; graphs are ONNX text syntax.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnx.helper as oh
import onnx.parser
import pytest
import sympy
from onnx import TensorProto, numpy_helper

from graphcost._dims import evaluate
from graphcost.hardware.spec import HardwareSpec
from graphcost.load import load
from graphcost.passes._fusion_legality import check
from graphcost.passes.costs import count_costs
from graphcost.passes.fusion import (
    IDEAL,
    NONE,
    Candidate,
    Code,
    FusionResult,
    Policy,
    Role,
    fuse,
    fusion_section,
    max_nodes,
    same_compute_dtype,
)
from graphcost.passes.shapes import infer_shapes

EDGE = HardwareSpec("edge", {"float32": 2e12, "float16": 4e12}, 50e9)  # 2/4 TFLOP/s, 50 GB/s
HEAD = '<ir_version: 8, opset_import: ["" : 17]>\n'
FP32 = 4  # bytes per float32 element
FP16 = 2


def fused(text: str | onnx.ModelProto, policy: Policy | str | None = None, **dims: int) -> FusionResult:
    model = onnx.parser.parse_model(text) if isinstance(text, str) else text
    graph = infer_shapes(load(model), dims=dims or None).graph
    return fuse(graph, count_costs(graph), policy)


def groups(r: FusionResult) -> list[tuple[str, ...]]:
    return [g.nodes for g in r.groups]


def boundary(r: FusionResult, producer: str, consumer: str):  # type: ignore[no-untyped-def]
    (b,) = [b for b in r.boundaries if b.producer == producer and b.consumer == consumer]
    return b


# --------------------------------------------------------------------------- the acceptance case
CONV_TAIL = HEAD + """
tail (float16[1,64,112,112] x, float16[1,64,112,112] skip, float16[64,64,3,3] w, float16[64] s, float16[64] b,
      float16[64] mean, float16[64] var) => (float16[1,64,112,112] y) {
  c = Conv <pads = [1,1,1,1]> (x, w)
  n = BatchNormalization (c, s, b, mean, var)
  r = Relu (n)
  y = Add (r, skip)
}"""


def test_conv_bn_relu_add_tail_is_one_group_and_saves_six_activation_transfers() -> None:
    r = fused(CONV_TAIL)
    (g,) = r.groups
    assert g.nodes == ("Conv_0", "BatchNormalization_1", "Relu_2", "Add_3") and g.anchor == "Conv_0"
    act = 1 * 64 * 112 * 112 * FP16  # one float16 activation: 1,605,632 B
    assert act == 1_605_632
    weights = 64 * 64 * 3 * 3 * FP16  # the conv filter, 73,728 B
    bn_params = 4 * 64 * FP16  # scale, bias, mean, var
    assert g.bytes_unfused == (
        act + weights + act  # conv: reads x and w, writes c
        + act + bn_params + act  # BN: reads c and its parameters, writes n
        + act + act  # Relu: reads n, writes r
        + act + act + act)  # Add: reads r and skip, writes y
    assert g.bytes_fused == (
        act + weights + bn_params  # x, w and the BN parameters, read once
        + act  # skip
        + act)  # y, the only tensor leaving the group
    # conv output write, BN read and write, Relu read and write, the Add's read of the conv path:
    assert g.bytes_unfused - g.bytes_fused == 6 * 1_605_632 == 9_633_792
    assert g.inputs == ("x", "w", "s", "b", "mean", "var", "skip") and g.outputs == ("y",)
    assert r.boundaries == ()

    sec = fusion_section(r, EDGE, {})
    assert sec.totals.bytes_saved == 9_633_792
    assert sec.totals.bytes_saved / EDGE.memory_bandwidth == pytest.approx(192.68e-6, rel=1e-4)  # ≈ 193 µs
    e = 64 * 112 * 112  # elements per activation
    conv_flops = 2 * e * 64 * 3 * 3  # 2 FLOPs per MAC, Cin·kh·kw MACs per output, no bias
    flops = conv_flops + (2 * e + 5 * 64) + e + e  # + BN (multiply-add per element, fold per channel), Relu, Add
    (row,) = sec.groups
    assert row.flops == flops
    assert row.time_fused_s == pytest.approx(max(flops / 4e12, g.bytes_fused / 50e9))  # float16 peak
    assert row.time_fused_s == pytest.approx(conv_flops / 4e12 + 4 * e / 4e12)  # compute-bound: ≈ 232 µs
    unfused = (max(conv_flops / 4e12, (3 * act + weights) / 50e9)  # each node its own kernel
               + max((2 * e + 320) / 4e12, (2 * act + bn_params) / 50e9)
               + 2 * act / 50e9 + 3 * act / 50e9)
    assert row.time_unfused_s == pytest.approx(unfused)
    assert sec.totals.time_saved_s == pytest.approx(unfused - row.time_fused_s)


# --------------------------------------------------------------------------- reduction blocks
LAYERNORM = HEAD + """
ln (float[2,4,64] x, float[64] gamma, float[64] beta) => (float[2,4,64] y) <float e = {1e-5}, float two = {2.0}> {
  m = ReduceMean <axes = [-1]> (x)
  d = Sub (x, m)
  p = Pow (d, two)
  v = ReduceMean <axes = [-1]> (p)
  ve = Add (v, e)
  sd = Sqrt (ve)
  nm = Div (d, sd)
  sc = Mul (nm, gamma)
  y = Add (sc, beta)
}"""

SOFTMAX = '<ir_version: 8, opset_import: ["" : 18]>\n' + """
sm (float[2,4,64] x) => (float[2,4,64] y) <int64[1] ax = {-1}> {
  mx = ReduceMax (x, ax)
  s = Sub (x, mx)
  e = Exp (s)
  se = ReduceSum (e, ax)
  y = Div (e, se)
}"""


def test_decomposed_layernorm_is_one_group() -> None:
    r = fused(LAYERNORM)
    assert len(r.groups) == 1 and len(r.groups[0].nodes) == 9 and r.boundaries == ()
    x = 2 * 4 * 64 * FP32  # x and y: 2,048 B each
    assert r.groups[0].bytes_fused == x + 64 * FP32 + 64 * FP32 + FP32 + FP32 + x  # x, gamma, beta, e, two, y


def test_decomposed_softmax_is_one_group() -> None:
    r = fused(SOFTMAX)
    assert groups(r) == [("ReduceMax_0", "Sub_1", "Exp_2", "ReduceSum_3", "Div_4")]
    assert r.groups[0].bytes_fused == 2048 + 8 + 2048 == 4104  # x, the int64 axes, y
    assert r.groups[0].bytes_unfused == 16528  # five kernels, each reading and writing its tensors


def test_reductions_over_different_rows_do_not_share_a_group() -> None:
    r = fused(HEAD + """
    g (float[8,16] x) => (float[16] y) {
      a = ReduceSum <axes = [1], keepdims = 1> (x)
      b = Mul (x, a)
      y = ReduceSum <axes = [0], keepdims = 0> (b)
    }""")
    assert groups(r) == [("ReduceSum_0", "Mul_1"), ("ReduceSum_2",)]
    assert boundary(r, "Mul_1", "ReduceSum_2").code == Code.REDUCTION_MISMATCH


# --------------------------------------------------------------------------- boundaries and reasons
def test_tensor_with_consumers_in_two_groups_is_a_multi_consumer_boundary() -> None:
    r = fused(HEAD + """
    g (float[4,8] x, float[8,8] w) => (float[4,8] e, float[4,8] m) {
      r = Relu (x)
      e = Exp (r)
      m = MatMul (r, w)
    }""")
    assert groups(r) == [("Relu_0",), ("Exp_1",), ("MatMul_2",)]
    b = boundary(r, "Relu_0", "Exp_1")
    assert b.code == Code.MULTI_CONSUMER and b.tensor == "r"
    assert "Exp_1" in b.reason and "MatMul_2" in b.reason  # names the consumers
    assert boundary(r, "Relu_0", "MatMul_2").code == Code.PROLOGUE


def test_transpose_between_elementwise_ops_is_a_layout_boundary() -> None:
    r = fused(HEAD + """
    g (float[4,8] x) => (float[8,4] y) {
      a = Relu (x)
      t = Transpose <perm = [1,0]> (a)
      y = Sigmoid (t)
    }""")
    assert groups(r) == [("Relu_0",), ("Transpose_1",), ("Sigmoid_2",)]
    for p, c in (("Relu_0", "Transpose_1"), ("Transpose_1", "Sigmoid_2")):
        assert boundary(r, p, c).code == Code.LAYOUT_CHANGE
        assert "layout change" in r.why_not_fused(p, c)  # type: ignore[operator]


def test_cast_feeding_a_compute_anchor_is_a_dtype_cast_boundary() -> None:
    r = fused(HEAD + """
    g (float[4,8] x, float16[8,8] w) => (float16[4,8] y) {
      h = Cast <to = 10> (x)
      y = MatMul (h, w)
    }""")
    assert groups(r) == [("Cast_0",), ("MatMul_1",)]
    b = boundary(r, "Cast_0", "MatMul_1")
    assert b.code == Code.DTYPE_CAST and "float32→float16" in b.reason


def test_cast_in_an_elementwise_chain_fuses_unless_the_policy_runs_casts_alone() -> None:
    chain = HEAD + """
    g (float[4,8] x) => (float16[4,8] y) {
      a = Relu (x)
      h = Cast <to = 10> (a)
      y = Sigmoid (h)
    }"""
    assert groups(fused(chain)) == [("Relu_0", "Cast_1", "Sigmoid_2")]
    r = fused(chain, IDEAL.without("casts"))
    assert groups(r) == [("Relu_0",), ("Cast_1",), ("Sigmoid_2",)]
    assert boundary(r, "Relu_0", "Cast_1").code == Code.DTYPE_CAST


def test_graph_output_inside_a_chain_is_a_boundary() -> None:
    r = fused(HEAD + """
    g (float[4,8] x) => (float[4,8] m, float[4,8] y) {
      m = Relu (x)
      y = Exp (m)
    }""")
    assert groups(r) == [("Relu_0",), ("Exp_1",)]
    b = boundary(r, "Relu_0", "Exp_1")
    assert b.code == Code.GRAPH_OUTPUT and "m is a graph output" in b.reason


def test_merge_that_would_create_a_cycle_is_refused() -> None:
    # A → B → D and A → C → D: joining A and D would leave the Transpose B outside, both after and before.
    r = fused(HEAD + """
    g (float[4,4] x) => (float[4,4] y) <int64[2] shp = {4,4}> {
      a = Relu (x)
      b = Transpose <perm = [1,0]> (a)
      c = Reshape (a, shp)
      y = Add (b, c)
    }""")
    assert groups(r) == [("Relu_0",), ("Transpose_1",), ("Reshape_2", "Add_3")]
    b = boundary(r, "Relu_0", "Reshape_2")
    assert b.code == Code.WOULD_CREATE_CYCLE and "Transpose_1" in b.reason
    assert r.why_not_fused("Relu_0", "Add_3") == b.reason  # looked up through the Reshape view


def test_second_anchor_prologue_and_reduction_after_anchor() -> None:
    r = fused(HEAD + """
    g (float[4,8] x, float[8,8] w1, float[8,8] w2) => (float[4,1] y) {
      a = MatMul (x, w1)
      b = Relu (a)
      c = MatMul (b, w2)
      y = ReduceMean <axes = [1]> (c)
    }""")
    assert groups(r) == [("MatMul_0", "Relu_1"), ("MatMul_2",), ("ReduceMean_3",)]
    assert boundary(r, "Relu_1", "MatMul_2").code == Code.SECOND_ANCHOR
    assert boundary(r, "MatMul_2", "ReduceMean_3").code == Code.REDUCTION_IN_EPILOGUE


def test_epilogue_that_broadcasts_the_anchor_output_is_an_iteration_space_boundary() -> None:
    # Squeeze-excitation: a 1×1 conv on pooled channels, then a gate multiplied into the full feature map.
    r = fused(HEAD + """
    g (float[1,8,1,1] p, float[8,8,1,1] w, float[1,8,16,16] x) => (float[1,8,16,16] y) {
      s = Conv (p, w)
      gate = Sigmoid (s)
      y = Mul (x, gate)
    }""")
    assert groups(r) == [("Conv_0", "Sigmoid_1"), ("Mul_2",)]
    assert boundary(r, "Sigmoid_1", "Mul_2").code == Code.ITERATION_SPACE


def test_non_fusable_op_names_its_kind() -> None:
    r = fused(HEAD + """
    g (float[4,8] x) => (float[4,1] v, int64[4,1] i) <int64[1] k = {1}> {
      a = Relu (x)
      v, i = TopK <axis = 1> (a, k)
    }""")
    b = boundary(r, "Relu_0", "TopK_1")
    assert b.code == Code.NON_FUSABLE and "sort/select" in b.reason


def test_why_not_fused_answers_for_any_pair() -> None:
    r = fused(HEAD + """
    g (float[4,8] x) => (float[8,4] y) {
      a = Relu (x)
      b = Exp (a)
      t = Transpose <perm = [1,0]> (b)
      y = Sigmoid (t)
    }""")
    assert r.why_not_fused("Relu_0", "Exp_1") is None  # same group
    assert "layout change" in r.why_not_fused("Exp_1", "Transpose_2")  # type: ignore[operator]
    assert "not adjacent" in r.why_not_fused("Relu_0", "Sigmoid_3")  # type: ignore[operator]
    assert "Exp_1 feeds Transpose_2" in r.why_not_fused("Transpose_2", "Exp_1")  # type: ignore[operator]
    with pytest.raises(KeyError, match="no node named"):
        r.group_of("nope")


# --------------------------------------------------------------------------- policies
def test_custom_policies_change_the_groups() -> None:
    assert len(fused(SOFTMAX).groups) == 1
    no_red = fused(SOFTMAX, IDEAL.without("reduction_blocks"))
    assert groups(no_red) == [("ReduceMax_0",), ("Sub_1", "Exp_2"), ("ReduceSum_3",), ("Div_4",)]
    assert {b.code for b in no_red.boundaries} >= {Code.POLICY}
    assert no_red.policy == "ideal-without-reduction_blocks"

    def no_reductions(c: Candidate) -> str | None:  # a user predicate, outside the package
        if any(c.info(n).role is Role.REDUCTION for n in c.nodes) and len(c.kernels) > 1:
            return "reductions run alone"
        return None

    mine = fused(SOFTMAX, Policy(name="no-reductions", can_fuse=[no_reductions]))
    assert groups(mine) == groups(no_red)
    assert any("policy no-reductions: reductions run alone" in b.reason for b in mine.boundaries)

    capped = fused(LAYERNORM, IDEAL.with_(max_nodes(3)))
    assert all(len(g.nodes) <= 3 for g in capped.groups)
    assert any(b.code == Code.SIZE_LIMIT for b in capped.boundaries)
    with pytest.raises(ValueError, match="no capability or predicate"):
        IDEAL.without("nonsense")


def test_same_compute_dtype_predicate_splits_at_the_dtype_change() -> None:
    text = HEAD + """
    g (float[4,8] x) => (float16[4,8] y) {
      a = Relu (x)
      h = Cast <to = 10> (a)
      y = Sigmoid (h)
    }"""
    r = fused(text, IDEAL.with_(same_compute_dtype))
    assert groups(r) == [("Relu_0", "Cast_1"), ("Sigmoid_2",)]
    assert boundary(r, "Cast_1", "Sigmoid_2").code == Code.DIFFERENT_DTYPE


def test_policy_none_is_one_group_per_node_and_never_saves_a_read() -> None:
    r = fused(CONV_TAIL, NONE)
    assert len(r.groups) == 4 and r.policy == "none"
    sec = fusion_section(r, EDGE, {})
    assert sec.totals.bytes_saved == 0  # every tensor is written and read back
    assert fused(CONV_TAIL, "none").groups == r.groups
    with pytest.raises(ValueError, match="unknown fusion policy"):
        fused(CONV_TAIL, "greedy")


# --------------------------------------------------------------------------- accounting details
def test_views_are_transparent_and_initializers_count_as_inputs() -> None:
    r = fused(HEAD + """
    g (float[2,8] x, float[8,16] w) => (float[4,8] y) <float[16] bias = {1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1},
                                                       int64[2] shp = {4,8}> {
      m = MatMul (x, w)
      a = Add (m, bias)
      v = Reshape (a, shp)
      y = Relu (v)
    }""")
    (g,) = r.groups
    assert g.nodes == ("MatMul_0", "Add_1", "Reshape_2", "Relu_3")
    assert g.bytes_fused == (2 * 8 + 8 * 16 + 16 + 4 * 8) * FP32  # x, w, the bias initializer, y
    assert "bias" in g.inputs and "shp" not in g.inputs  # Reshape's shape is not data a kernel reads


def test_symbolic_dims_stay_symbolic_until_bound() -> None:
    r = fused(HEAD + """
    g (float[batch,64] x) => (float[batch,64] y) {
      a = Relu (x)
      y = Exp (a)
    }""")
    (g,) = r.groups
    batch = sympy.Symbol("batch", integer=True, nonnegative=True)
    assert sympy.expand(g.bytes_fused - 2 * 64 * FP32 * batch) == 0  # x and y: 256·batch B each
    assert evaluate(g.bytes_unfused, {"batch": 8}) == 4 * 8 * 64 * FP32  # x, a twice, y
    sec = fusion_section(r, EDGE, {"batch": 8})
    assert sec.groups[0].bytes_fused == 2 * 8 * 64 * FP32
    with pytest.raises(ValueError, match="batch"):
        fusion_section(r, EDGE, {})


def test_section_numbers_add_up_and_serialize() -> None:
    r = fused(HEAD + """
    g (float[4,8] x, float[8,8] w) => (float[8,4] y) {
      m = MatMul (x, w)
      a = Relu (m)
      t = Transpose <perm = [1,0]> (a)
      y = Sigmoid (t)
    }""")
    sec = fusion_section(r, EDGE, {})
    t = sec.totals
    assert t.bytes_unfused - t.bytes_fused == sum(g.bytes_saved for g in sec.groups) == t.bytes_saved
    assert t.time_unfused_s == pytest.approx(sum(g.time_unfused_s for g in sec.groups))
    assert sec.group_of("Relu_1") is sec.groups[0] and sec.why_not_fused("MatMul_0", "Relu_1") is None
    d = sec.to_dict()
    assert set(d) == {"policy", "groups", "boundaries", "totals"}
    assert set(d["groups"][0]) == {"id", "nodes", "anchor", "flops", "bytes_unfused", "bytes_fused",
                                   "time_unfused_s", "time_fused_s", "inputs", "outputs"}
    assert set(d["boundaries"][0]) >= {"producer", "consumer", "tensor", "reason"}
    assert {"bytes_unfused", "bytes_fused", "bytes_saved", "time_unfused_s", "time_fused_s"} <= set(d["totals"])
    assert [g["id"] for g in d["groups"]] == ["g0", "g1", "g2"]


def _if_model() -> onnx.ModelProto:
    then_g = oh.make_graph([oh.make_node("Relu", ["a"], ["t"], name="relu_t")], "then", [],
                           [oh.make_tensor_value_info("t", TensorProto.FLOAT, [4, 8])])
    else_g = oh.make_graph([oh.make_node("Neg", ["a"], ["e"], name="neg_e")], "else", [],
                           [oh.make_tensor_value_info("e", TensorProto.FLOAT, [4, 8])])
    g = oh.make_graph(
        [oh.make_node("Exp", ["x"], ["a"], name="exp"),
         oh.make_node("If", ["c"], ["b"], name="if0", then_branch=then_g, else_branch=else_g),
         oh.make_node("Sigmoid", ["b"], ["y"], name="sig")], "g",
        [oh.make_tensor_value_info("c", TensorProto.BOOL, []),
         oh.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
        [numpy_helper.from_array(np.ones((1,), np.float32), "unused")])
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])


def test_control_flow_node_is_one_opaque_group_and_its_body_is_not_grouped() -> None:
    r = fused(_if_model())
    assert groups(r) == [("exp",), ("if0",), ("sig",)]
    g = r.group_of("if0")
    assert g.opaque and g.bytes_fused == g.bytes_unfused  # its body's kernels, as costed
    assert r.group_of("if0/then_branch/relu_t") is g
    assert boundary(r, "if0", "sig").code == Code.CONTROL_FLOW
    assert "inside the body of if0" in r.why_not_fused("if0/then_branch/relu_t", "sig")  # type: ignore[operator]


def test_dropout_that_writes_its_mask_is_not_a_view() -> None:
    r = fused('<ir_version: 8, opset_import: ["" : 13]>\n' + """
    g (float[4,8] x) => (float[4,8] y, bool[4,8] mask) {
      a = Relu (x)
      d, mask = Dropout (a)
      y = Exp (d)
    }""")
    assert groups(r) == [("Relu_0",), ("Dropout_1",), ("Exp_2",)]
    b = boundary(r, "Relu_0", "Dropout_1")
    assert b.code == Code.NON_FUSABLE and "second output" in b.reason


def test_public_surface() -> None:
    import graphcost.passes.fusion as f

    assert {"fuse", "fusion_section", "FusionResult", "FusionGroup", "FusionSection", "Boundary", "Policy",
            "IDEAL", "NONE", "Code", "Candidate", "Role", "same_compute_dtype", "max_nodes"} <= set(f.__all__)
    assert all(hasattr(f, name) for name in f.__all__)


def test_fan_out_fuses_whole_when_every_consumer_can_join() -> None:
    # fusion.md E3: both epilogues join the conv (one kernel writes y and z; c never reaches memory).
    r = fused(HEAD + """
    g (float[1,16,8,8] x, float[16,16,3,3] w) => (float[1,16,8,8] y, float[1,16,8,8] z) {
      c = Conv <pads = [1,1,1,1]> (x, w)
      y = Relu (c)
      z = Sigmoid (c)
    }""")
    (g,) = r.groups
    act = 16 * 8 * 8 * FP32
    assert g.outputs == ("y", "z") and g.bytes_fused == act + 16 * 16 * 9 * FP32 + act + act  # x, w, y, z
    # and a diamond of elementwise ops fuses whole
    d = fused(HEAD + """
    g (float[4,8] x) => (float[4,8] y) {
      a = Relu (x)
      b = Exp (a)
      c = Neg (a)
      y = Add (b, c)
    }""")
    assert groups(d) == [("Relu_0", "Exp_1", "Neg_2", "Add_3")]


def test_dequantize_linear_joins_its_anchor_as_the_qdq_form_of_a_quantized_kernel() -> None:
    qdq = HEAD + """
    g (float[4,8] x) => (float[4,16] y) <int8[8,16] wq = {""" + ",".join(["1"] * 128) + """},
                                          float ws = {0.5}, int8 zp = {0}> {
      w = DequantizeLinear (wq, ws, zp)
      m = MatMul (x, w)
      y = Relu (m)
    }"""
    r = fused(qdq)
    (g,) = r.groups
    assert g.nodes == ("DequantizeLinear_0", "MatMul_1", "Relu_2")
    assert g.bytes_fused == 4 * 8 * FP32 + 8 * 16 * 1 + FP32 + 1 + 4 * 16 * FP32  # x, int8 weights, scale, zp, y
    r = fused(qdq, IDEAL.without("dequant_prologue"))
    assert groups(r) == [("DequantizeLinear_0",), ("MatMul_1", "Relu_2")]
    assert boundary(r, "DequantizeLinear_0", "MatMul_1").code == Code.PROLOGUE


# --------------------------------------------------------------------------- invariants on random graphs, scale
def _random_model(seed: int, n_ops: int = 45) -> onnx.ModelProto:
    """A random DAG of anchors, elementwise ops, reductions, views, movement, casts, QDQ and free ops, with
    fan-out, diamonds, long skips and graph outputs in the middle (shapes [2,8,16] and [2,8,1])."""
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    pool: list[tuple[str, str]] = [("x", "a"), ("x2", "a")]  # (tensor, "a" [2,8,16] | "r" [2,8,1] | "h" float16)

    def init(arr: np.ndarray) -> str:
        name = f"w{len(inits)}"
        inits.append(numpy_helper.from_array(arr, name))
        return name

    def add(op: str, ins: list[str], kind: str, **attrs: object) -> None:
        out = f"t{len(nodes)}"
        nodes.append(oh.make_node(op, ins, [out], name=f"{op}_{len(nodes)}", **attrs))
        pool.append((out, kind))

    def pick(kind: str) -> str:
        got = [t for t, k in pool if k == kind]
        return str(got[-1 - int(rng.integers(min(3, len(got))))] if rng.random() < 0.7 else got[rng.integers(len(got))])

    for _ in range(n_ops):
        op = rng.integers(12)
        r_kind = "r" if any(k == "r" for _, k in pool) else "a"
        if op <= 2:
            add(str(rng.choice(["Relu", "Sigmoid", "Neg"])), [pick(str(rng.choice(["a", r_kind])))], "a")
            pool[-1] = (pool[-1][0], "a" if nodes[-1].input[0] in [t for t, k in pool if k == "a"] else "r")
        elif op <= 4:
            other = pick(str(rng.choice(["a", r_kind]))) if rng.random() < 0.6 else init(rng.random(16, np.float32))
            add(str(rng.choice(["Add", "Mul"])), [pick("a"), other], "a")
        elif op == 5:
            add("MatMul", [pick("a"), init(rng.random((16, 16), np.float32))], "a")
        elif op == 6:
            add(str(rng.choice(["ReduceMean", "ReduceMax"])), [pick("a"), init(np.array([-1], np.int64))], "r")
        elif op == 7:
            add(str(rng.choice(["Softmax", "Identity"])), [pick("a")], "a")
        elif op == 8:
            src = pick("a")
            add("Reshape", [src, init(np.array([2, 128], np.int64))], "f")
            add("Reshape", [pool[-1][0], init(np.array([2, 8, 16], np.int64))], "a")
        elif op == 9:
            add("Transpose", [pick("a")], "f", perm=[0, 2, 1])
            add("Transpose", [pool[-1][0]], "a", perm=[0, 2, 1])
        elif op == 10:
            add("Cast", [pick("a")], "h", to=TensorProto.FLOAT16)
            add("Cast", [pool[-1][0]], "a", to=TensorProto.FLOAT)
        else:
            q = f"q{len(nodes)}"
            nodes.append(oh.make_node("QuantizeLinear", [pick("a"), init(np.array(0.1, np.float32))], [q],
                                      name=f"Q_{len(nodes)}"))
            add("DequantizeLinear", [q, init(np.array(0.1, np.float32))], "a")
            shp = f"s{len(nodes)}"
            nodes.append(oh.make_node("Shape", [pick("a")], [shp], name=f"Shape_{len(nodes)}"))
            add("Reshape", [pool[-1][0], shp], "a")
    produced = [t for t, k in pool[2:] if k in ("a", "r")]
    outputs = sorted({produced[-1], *(t for t in produced if rng.random() < 0.1)})
    graph = oh.make_graph(nodes, f"rand{seed}", [oh.make_tensor_value_info(x, TensorProto.FLOAT, [2, 8, 16])
                                                  for x in ("x", "x2")],
                          [oh.make_tensor_value_info(t, TensorProto.UNDEFINED, None) for t in outputs], inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("seed", range(8))
def test_random_graphs_group_legally(seed: int) -> None:
    r = fused(_random_model(seed))
    graph = r.graph
    names = [n.name for n in graph.nodes()]
    assert sorted(m for g in r.groups for m in g.nodes) == sorted(names)  # a partition
    assert all(g.nodes == tuple(sorted(g.nodes, key=names.index)) for g in r.groups)
    # every group passes the rules as a whole (the merges that made it were checked on the whole union)
    for g in r.groups:
        members = tuple(n for n in g.nodes if r.infos[n].role is not Role.FREE)
        if len(members) > 1:
            assert check(Candidate(members[0], members[-1], "", members, r.infos, graph), IDEAL) is None, g
    # boundaries join different groups; the groups form a DAG (no kernel waits for its own output)
    assert all(r.index[b.producer] != r.index[b.consumer] for b in r.boundaries)
    edges: dict[int, set[int]] = {}
    for n in graph.nodes():
        for t in n.inputs:
            p = graph.producer(t) if t else None
            if p is not None and r.index[p.name] != r.index[n.name]:
                edges.setdefault(r.index[p.name], set()).add(r.index[n.name])
    state: dict[int, int] = {}

    def acyclic(g: int) -> bool:
        if state.get(g) == 1:
            return False
        if state.get(g) == 2:
            return True
        state[g] = 1
        ok = all(acyclic(s) for s in edges.get(g, ()))
        state[g] = 2
        return ok

    assert all(acyclic(g) for g in range(len(r.groups)))
    assert fused(_random_model(seed)).groups == r.groups  # and the same groups every time


def test_rows_are_ordinary_frozen_dataclasses() -> None:
    r = fused(HEAD + """
    g (float[4,4] x) => (float[4,4] y) <int64[2] shp = {4,4}> {
      a = Relu (x)
      b = Transpose <perm = [1,0]> (a)
      c = Reshape (a, shp)
      y = Add (b, c)
    }""")
    sec = fusion_section(r, EDGE, {})
    rows = [*r.groups, *r.boundaries, *sec.groups, *r.infos.values()]
    assert r.boundaries and all(type(x).__name__ in ("FusionGroup", "Boundary", "GroupNumbers", "NodeInfo")
                                for x in rows)
    for row in rows:
        clone = type(row)(**{f.name: getattr(row, f.name) for f in dataclasses.fields(row)})
        assert clone == row and repr(clone) == repr(row) and hash(clone) == hash(row)
        with pytest.raises(dataclasses.FrozenInstanceError):
            row.nodes = ()  # type: ignore[misc, union-attr]


def _chain(n: int, fan_in: bool) -> onnx.ModelProto:
    if fan_in:  # x → n Relus, summed by a chain of Adds: every Relu joins the one group, from far away
        nodes = [oh.make_node("Relu", ["x"], [f"r{i}"], name=f"r{i}") for i in range(n)]
        nodes += [oh.make_node("Add", ["r0" if i == 1 else f"a{i - 1}", f"r{i}"], [f"a{i}"], name=f"a{i}")
                  for i in range(1, n)]
    else:
        nodes = [oh.make_node("Relu" if i % 2 else "Exp", ["x" if i == 0 else f"t{i - 1}"], [f"t{i}"], name=f"n{i}")
                 for i in range(n)]
    graph = oh.make_graph(nodes, "chain", [oh.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                          [oh.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, [4, 16])])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("fan_in", [False, True])
def test_long_chains_and_wide_fan_in_fuse_into_one_group(fan_in: bool) -> None:
    # 3,000-op groups (the old quadratic bookkeeping took tens of seconds here; speed is measured in bench/)
    graph = infer_shapes(load(_chain(3000, fan_in))).graph
    costs = count_costs(graph)
    r = fuse(graph, costs)
    assert len(r.groups) == 1 and r.boundaries == ()
