"""Closed-form checks of the counting conventions, end to end through graphcost.analyze."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnx.parser
import pytest
import sympy
from onnx import TensorProto, numpy_helper

import graphcost
from graphcost.hardware.spec import HardwareSpec

EDGE = HardwareSpec("edge-test", {"float32": 2e12}, 50e9)  # the reference edge SoC: 2 TFLOP/s, 50 GB/s
FP32 = 4  # bytes per float32 element


def model(text: str) -> onnx.ModelProto:
    return onnx.parser.parse_model(text)


def test_matmul_fp32() -> None:
    r = graphcost.analyze(model("""<ir_version: 8, opset_import: ["" : 17]>
        g (float[32,768] a, float[768,1000] b) => (float[32,1000] y) { y = MatMul(a, b) }"""), hardware=EDGE)
    n = r.nodes[0]
    assert n.macs == 32 * 768 * 1000  # M·K·N multiply-accumulates
    assert n.flops == 49_152_000 == 2 * 32 * 768 * 1000  # 2 FLOPs per MAC
    assert n.bytes_read == (32 * 768 + 768 * 1000) * FP32  # A and B once
    assert n.bytes_written == 32 * 1000 * FP32  # Y once


def test_conv3x3_compute_bound_on_edge() -> None:
    r = graphcost.analyze(model("""<ir_version: 8, opset_import: ["" : 17]>
        g (float[1,256,56,56] x, float[256,256,3,3] w) => (y) { y = Conv<pads=[1,1,1,1]>(x, w) }"""), hardware=EDGE)
    n = r.nodes[0]
    out = 1 * 256 * 56 * 56  # N·Cout·H·W output elements
    assert n.macs == out * 256 * 3 * 3  # each: Cin·kh·kw MACs
    assert n.flops == 3_699_376_128
    x_bytes = 1 * 256 * 56 * 56 * FP32  # input read once
    w_bytes = 256 * 256 * 3 * 3 * FP32  # weights read once
    y_bytes = out * FP32  # output written once
    assert n.bytes_read + n.bytes_written == x_bytes + w_bytes + y_bytes == 8_781_824
    assert n.bound == "compute"
    assert n.roofline_time_s == pytest.approx(3_699_376_128 / 2e12)  # ≈ 1.85 ms
    assert n.roofline_time_s == pytest.approx(1.85e-3, rel=1e-3)


def test_depthwise_conv_memory_bound_on_edge() -> None:
    r = graphcost.analyze(model("""<ir_version: 8, opset_import: ["" : 17]>
        g (float[1,256,56,56] x, float[256,1,3,3] w) => (y) { y = Conv<pads=[1,1,1,1], group=256>(x, w) }"""),
        hardware=EDGE)
    n = r.nodes[0]
    assert n.flops == 2 * (256 * 56 * 56) * 9 == 14_450_688  # one 3×3 window per output element
    assert n.bytes == 2 * 256 * 56 * 56 * FP32 + 256 * 9 * FP32 == 6_431_744  # x, y and a 256×1×3×3 filter
    assert n.bound == "memory"
    assert n.roofline_time_s == pytest.approx(6_431_744 / 50e9)  # ≈ 129 µs
    assert n.roofline_time_s == pytest.approx(129e-6, rel=3e-3)


def test_conv_bias_and_gemm_bias_are_flops_not_macs() -> None:
    r = graphcost.analyze(model("""<ir_version: 8, opset_import: ["" : 17]>
        g (float[2,3,8,8] x, float[4,3,3,3] w, float[4] b, float[5,6] a, float[6,7] bb, float[7] c) => (y, z) {
          y = Conv(x, w, b)
          z = Gemm(a, bb, c) }"""), hardware=EDGE)
    conv, gemm = r.nodes
    out = 2 * 4 * 6 * 6  # N·Cout·Hout·Wout (valid padding)
    assert conv.macs == out * 3 * 3 * 3
    assert conv.flops == 2 * conv.macs + out  # + one bias add per output
    assert gemm.macs == 5 * 6 * 7
    assert gemm.flops == 2 * 5 * 6 * 7 + 5 * 7  # + M·N for C


def test_batched_matmul_broadcast() -> None:
    r = graphcost.analyze(model("""<ir_version: 8, opset_import: ["" : 17]>
        g (float[8,1,16,32] a, float[3,32,4] b) => (y) { y = MatMul(a, b) }"""), hardware=EDGE)
    assert r.nodes[0].macs == 8 * 3 * 16 * 32 * 4  # broadcast batch 8×3, M=16, K=32, N=4


def test_elementwise_one_flop_per_output_element_with_broadcast() -> None:
    r = graphcost.analyze(model("""<ir_version: 8, opset_import: ["" : 17]>
        g (float[4,1,6] a, float[5,6] b) => (y) { y = Add(a, b) }"""), hardware=EDGE)
    n = r.nodes[0]
    assert n.flops == 4 * 5 * 6 and n.macs == 0  # one add per output element, no MACs
    assert n.bytes_read == (4 * 6 + 5 * 6) * FP32 and n.bytes_written == 4 * 5 * 6 * FP32


def test_same_tensor_twice_is_read_once() -> None:
    r = graphcost.analyze(model("""<ir_version: 8, opset_import: ["" : 17]>
        g (float[10,10] a) => (y) { y = Mul(a, a) }"""), hardware=EDGE)
    assert r.nodes[0].bytes_read == 100 * FP32  # a distinct input is charged once


def test_fp16_bytes_and_dtype_peak() -> None:
    hw = HardwareSpec("two-dtypes", {"float32": 1e12, "float16": 4e12}, 100e9)
    r = graphcost.analyze(model("""<ir_version: 8, opset_import: ["" : 17]>
        g (float16[64,64] a, float16[64,64] b) => (y) { y = MatMul(a, b) }"""), hardware=hw)
    n = r.nodes[0]
    assert n.bytes == 3 * 64 * 64 * 2  # two inputs and one output of 2-byte elements
    assert n.compute_time_s == pytest.approx(2 * 64**3 / 4e12)  # float16 peak, not float32


def test_symbolic_dims_give_formula_and_bound_numbers() -> None:
    m = model("""<ir_version: 8, opset_import: ["" : 17]>
        g (float[batch,seq,64] x, float[64,256] w) => (y) { h = MatMul(x, w)
            y = Relu(h) }""")
    r = graphcost.analyze(m, hardware=EDGE)
    batch, seq = sympy.symbols("batch seq", integer=True, nonnegative=True)
    flops = sympy.sympify(r.totals.formulas["flops"], locals={"batch": batch, "seq": seq})
    expected = 2 * batch * seq * 64 * 256 + batch * seq * 256  # MatMul 2·M·K·N + Relu one per element
    assert sympy.expand(flops - expected) == 0
    assert r.defaulted_dims == ("batch", "seq")
    assert any("unbound dims" in w.message for w in r.warnings)
    bound = graphcost.analyze(m, hardware=EDGE, dims={"batch": 2, "seq": 128})
    assert bound.totals.flops == expected.subs({batch: 2, seq: 128})
    assert bound.defaulted_dims == ()


def test_input_shape_fixes_unnamed_dims() -> None:
    m = model("""<ir_version: 8, opset_import: ["" : 17]>
        g (float[?,3,?,?] x, float[8,3,3,3] w) => (y) { y = Conv(x, w) }""")
    r = graphcost.analyze(m, hardware=EDGE, input_shapes={"x": [1, 3, 10, 10]})
    assert r.nodes[0].macs == 8 * 8 * 8 * 3 * 3 * 3  # 1×8×8×8 outputs, 27 MACs each
    assert r.defaulted_dims == ()


def test_unknown_op_is_never_zero() -> None:
    m = model("""<ir_version: 8, opset_import: ["" : 17, "com.example" : 1]>
        g (float[4,4] x) => (y) { h = Relu(x)
          y = com.example.Mystery(h) }""")
    r = graphcost.analyze(m, hardware=EDGE)
    mystery = r.node("Mystery_1")
    assert mystery.flops is None and mystery.unknown_reason
    assert r.totals.unknown_nodes == 1
    assert any("com.example::Mystery" in w.message for w in r.warnings)
    assert r.coverage.nodes == 2 and r.coverage.nodes_with_rule == 1
    assert r.coverage.unknown_ops == {"com.example::Mystery": 1}


def test_plugin_rule_for_custom_op() -> None:
    from graphcost.ops import Kind, Work, rule, unregister

    @rule("Mystery2", domain="com.example", kind=Kind.ELEMENTWISE)
    def _mystery(n):  # type: ignore[no-untyped-def]
        return Work(flops=3 * n.in_numel(0))  # three ops per input element, by this user's count

    try:
        m = model("""<ir_version: 8, opset_import: ["" : 17, "com.example" : 1]>
            g (float[4,4] x) => (y) { y = com.example.Mystery2(x) }""")
        r = graphcost.analyze(m, hardware=EDGE)
        assert r.nodes[0].flops == 48 and r.totals.unknown_nodes == 0
    finally:
        unregister("Mystery2", "com.example")


def _if_model() -> onnx.ModelProto:
    then_g = oh.make_graph([oh.make_node("MatMul", ["x", "w"], ["t_out"], name="mm")], "then", [],
                           [oh.make_tensor_value_info("t_out", TensorProto.FLOAT, [4, 8])])
    else_g = oh.make_graph([oh.make_node("Relu", ["x"], ["e_out"], name="relu")], "else", [],
                           [oh.make_tensor_value_info("e_out", TensorProto.FLOAT, [4, 8])])
    g = oh.make_graph(
        [oh.make_node("If", ["c"], ["y"], name="if0", then_branch=then_g, else_branch=else_g)], "g",
        [oh.make_tensor_value_info("c", TensorProto.BOOL, []),
         oh.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
        [numpy_helper.from_array(np.ones((8, 8), np.float32), "w")])
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])


def test_if_costs_both_branches_and_takes_the_larger() -> None:
    r = graphcost.analyze(_if_model(), hardware=EDGE)
    names = [n.name for n in r.nodes]
    assert "if0/then_branch/mm" in names and "if0/else_branch/relu" in names
    if_node = r.node("if0")
    assert if_node.flops == 2 * 4 * 8 * 8  # the MatMul branch (512) beats the Relu branch (32)
    assert "more expensive" in if_node.note
    assert r.totals.flops == 512  # body nodes are not counted twice


def _loop_model(trip: int | None) -> onnx.ModelProto:
    body = oh.make_graph(
        [oh.make_node("Identity", ["cond_in"], ["cond_out"]),
         oh.make_node("Add", ["v_in", "x"], ["v_out"], name="add")],
        "body",
        [oh.make_tensor_value_info("i", TensorProto.INT64, []),
         oh.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         oh.make_tensor_value_info("v_in", TensorProto.FLOAT, [4, 8])],
        [oh.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         oh.make_tensor_value_info("v_out", TensorProto.FLOAT, [4, 8])])
    inits = [] if trip is None else [numpy_helper.from_array(np.array(trip, np.int64), "M")]
    inputs = [oh.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])]
    if trip is None:
        inputs.append(oh.make_tensor_value_info("M", TensorProto.INT64, []))
    g = oh.make_graph([oh.make_node("Loop", ["M", "", "x"], ["y"], name="loop0", body=body)], "g", inputs,
                      [oh.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])], inits)
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])


def test_loop_multiplies_body_by_constant_trip_count() -> None:
    r = graphcost.analyze(_loop_model(5), hardware=EDGE)
    assert r.node("loop0").flops == 5 * 32  # body: one Add over 4×8, five times
    assert r.node("loop0/body/add").multiplier == 5
    assert r.totals.flops == 160


def test_loop_with_unknown_trip_count_keeps_a_symbol() -> None:
    r = graphcost.analyze(_loop_model(None), hardware=EDGE)
    assert r.totals.formulas["flops"] == "32*trips_loop0"
    assert "trips_loop0" in r.defaulted_dims
    bound = graphcost.analyze(_loop_model(None), hardware=EDGE, dims={"trips_loop0": 7})
    assert bound.totals.flops == 7 * 32


def test_local_function_is_costed_through_its_body() -> None:
    m = model("""<ir_version: 8, opset_import: ["" : 17, "local" : 1]>
        g (float[4,8] x, float[8,8] w) => (y) { y = local.Lin(x, w) }
        <domain: "local", opset_import: ["" : 17]>
        Lin (a, b) => (c) { t = MatMul(a, b)
            c = Relu(t) }""")
    r = graphcost.analyze(m, hardware=EDGE)
    assert r.totals.flops == 2 * 4 * 8 * 8 + 4 * 8  # MatMul + Relu from the function body
    assert r.totals.unknown_nodes == 0


def test_declared_output_shape_contradiction_warns_and_trusts_inference() -> None:
    m = model("""<ir_version: 8, opset_import: ["" : 17]>
        g (float[4,8] x, float[8,16] w) => (float[4,99] y) { y = MatMul(x, w) }""")
    r = graphcost.analyze(m, hardware=EDGE)
    assert r.model.outputs[0].shape == (4, 16)
    assert any("declared" in w.message for w in r.warnings)
    assert r.nodes[0].macs == 4 * 8 * 16


def test_derating_and_energy_floor() -> None:
    m = model("""<ir_version: 8, opset_import: ["" : 17]>
        g (float[1000] x) => (y) { y = Relu(x) }""")
    r = graphcost.analyze(m, hardware=EDGE, derate=True)
    moved = 2 * 1000 * FP32  # read x, write y
    assert r.totals.memory_time_s == pytest.approx(moved / (50e9 * 0.7))  # textbook 0.7 of peak bandwidth
    assert r.totals.energy_floor_j == pytest.approx(moved * 160e-12)  # 160 pJ per DRAM byte


def test_onchip_capacity_moves_activations_at_onchip_bandwidth() -> None:
    hw = HardwareSpec("cache", {"float32": 1e15}, 100e9, onchip_bytes=1 << 20, onchip_bandwidth=1e12)
    m = model("""<ir_version: 8, opset_import: ["" : 17]>
        g (float[1000] x) => (y) { h = Relu(x)
            y = Relu(h) }""")
    r = graphcost.analyze(m, hardware=hw)
    first = r.nodes[0]
    t = 1000 * FP32
    assert first.dram_bytes == t  # x comes from DRAM; h (an activation that fits) stays on chip
    # the two limits overlap: max(DRAM bytes / DRAM bandwidth, all bytes / on-chip bandwidth)
    assert first.memory_time_s == pytest.approx(max(t / 100e9, 2 * t / 1e12))
    off = graphcost.analyze(m, hardware=hw, capacity=False)
    assert off.nodes[0].memory_time_s == pytest.approx(2 * t / 100e9)


def test_cache_levels_and_warm_residency() -> None:
    # L1 4 KB at 1 TB/s, L2 64 KB at 500 GB/s, DRAM 100 GB/s
    hw = HardwareSpec("levels", {"float32": 1e15}, 100e9, cache_levels=((4000, 1e12), (64000, 5e11)))
    m = model("""<ir_version: 8, opset_import: ["" : 17]>
        g (float[1000] x) => (y) { h = Relu(x)
            y = Relu(h) }""")
    t = 1000 * FP32  # 4,000 B per tensor; each Relu moves 2t = 8,000 B
    cold = graphcost.analyze(m, hardware=hw)
    assert cold.residency == "cold"
    first = cold.nodes[0]
    assert first.dram_bytes == t  # x from DRAM, h stays on chip
    assert first.memory_time_s == pytest.approx(max(
        t / 100e9,  # DRAM: x
        2 * t / 1e12,  # L1: every byte passes it
        (2 * t - 4000) / 5e11))  # L2: what the 4 KB L1 cannot hold
    warm = graphcost.analyze(m, hardware=hw, residency="warm")
    assert warm.residency == "warm"  # weights 0 B + smallest activation peak fit in 64 KB
    assert warm.nodes[0].dram_bytes == 0
    assert warm.nodes[0].memory_time_s == pytest.approx(max(2 * t / 1e12, (2 * t - 4000) / 5e11))
    big = model("""<ir_version: 8, opset_import: ["" : 17]>
        g (float[100000] x) => (y) { y = Relu(x) }""")
    r = graphcost.analyze(big, hardware=hw, residency="warm")  # 800 KB does not fit 64 KB: cold, all DRAM
    assert r.residency == "cold"
    assert any("residency warm" in w.message for w in r.warnings)
    assert r.nodes[0].dram_bytes == 2 * 100000 * FP32
    assert r.nodes[0].memory_time_s == pytest.approx(2 * 100000 * FP32 / 100e9)


def test_report_is_frozen_and_json_has_the_contract_keys() -> None:
    import dataclasses
    import json

    r = graphcost.analyze(_if_model(), hardware=EDGE)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.totals = None  # type: ignore[misc]
    d = json.loads(r.to_json())
    assert d["schema"] == "graphcost.report/1"
    assert {"path", "ir_version", "opsets", "producer", "node_count", "parameter_count", "parameter_bytes",
            "inputs", "outputs"} <= set(d["model"])
    assert {"name", "peak_flops", "memory_bandwidth", "ridge_point"} <= set(d["hardware"])
    assert {"flops", "bytes_read", "bytes_written", "bytes", "intensity", "compute_time_s", "memory_time_s",
            "roofline_time_s", "bound", "energy_floor_j", "unknown_nodes"} <= set(d["totals"])
    assert {"name", "op_type", "domain", "flops", "macs", "bytes_read", "bytes_written", "intensity",
            "compute_time_s", "memory_time_s", "roofline_time_s", "bound", "fusion_group", "inputs",
            "outputs"} <= set(d["nodes"][0])
    assert d["hardware"]["ridge_point"]["float32"] == pytest.approx(40.0)
    assert isinstance(d["warnings"], list)
    assert {"policy", "groups", "boundaries", "totals"} <= set(d["fusion"])
    assert {"parameter_bytes", "peak_activation_bytes", "peak_node", "live_at_peak", "min_peak_bytes",
            "conservative_peak_bytes"} <= set(d["memory"])
    assert {"foldable", "refused", "bytes_saved"} <= set(d["batchnorm"])
    assert all(n["fusion_group"] for n in d["nodes"])  # every node, body nodes included, has its group
