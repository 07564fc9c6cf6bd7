"""The counting the roofline chapter's problems show to be wrong (issue 11): zero points, Gather rows, the KV
cache counted twice, MatMulNBits parameters.

Every expected number is derived here in closed form, one comment per term. The bound is the ideal: a
constant weight's zero-point correction is a load-time transform, a Gather reads the rows it picks, a KV cache
is appended in place; where the graph as written moves more, that figure is checked beside the ideal.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import pytest
import sympy
from onnx import TensorProto, helper, numpy_helper

import graphcost
from graphcost._dims import symbol
from graphcost.analysis import Analysis
from graphcost.graph import Graph
from graphcost.hardware.spec import HardwareSpec
from graphcost.passes.costs import CostResult, NodeCost, count_costs, kv_cache_traffic

FP16, FP32, INT8, UINT8, INT64, INT32 = (TensorProto.FLOAT16, TensorProto.FLOAT, TensorProto.INT8,
                                         TensorProto.UINT8, TensorProto.INT64, TensorProto.INT32)
OPSETS = (("", 21), ("com.microsoft", 1))
ZP, REQUANT, TO_FLOAT = 1, 2, 1  # quantized.py: a subtract per element; requantize 2, scale to float 1


def _vi(name: str, dtype: int, shape: Sequence[Any] | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, None if shape is None else list(shape))


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
           inits: Sequence[tuple[str, Any]] = (), value_info: Sequence[onnx.ValueInfoProto] = (),
           opsets: Sequence[tuple[str, int]] = OPSETS) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, [numpy_helper.from_array(a, n) for n, a in inits],
                          value_info=list(value_info))
    return helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets], ir_version=9)


def _symbolic_costs(proto: onnx.ModelProto) -> tuple[Graph, CostResult]:
    """Costs over the symbolic graph (dims kept as names), as ``totals.formulas`` counts them."""
    a = Analysis.of(proto)
    g = a.shapes.symbolic_graph if a.shapes.symbolic_graph is not None else a.graph
    return g, count_costs(g)


def _node(costs: CostResult, op_type: str) -> NodeCost:
    return next(c for c in costs.top_level() if c.op_type == op_type)


def _same(a: object, b: object) -> bool:
    return sympy.expand(sympy.sympify(a) - sympy.sympify(b)) == 0


# ----------------------------------------------------------------- zero points

def test_problem_1_int8_fc_with_constant_zero_zero_points() -> None:
    """The chapter's Problem 1: 4 TOPS int8, 25 GB/s; batch-1 2048→2048 int8 QLinearMatMul, zero points 0."""
    k = n = 2048
    w = np.random.default_rng(0).integers(-128, 128, (k, n)).astype(np.int8)
    inits = [("w", w), ("a_scale", np.array(0.1, np.float32)), ("a_zp", np.array(0, np.int8)),
             ("w_scale", np.array(0.1, np.float32)), ("w_zp", np.array(0, np.int8)),
             ("y_scale", np.array(0.1, np.float32)), ("y_zp", np.array(0, np.int8))]
    proto = _model([helper.make_node("QLinearMatMul", ["a", "a_scale", "a_zp", "w", "w_scale", "w_zp", "y_scale",
                                                       "y_zp"], ["y"])],
                   [_vi("a", INT8, [1, k])], [_vi("y", INT8, [1, n])], inits)
    hw = HardwareSpec("mobile-npu", {"int8": 4e12}, 25e9)
    r = graphcost.analyze(proto, hardware=hw, fusion=False, memory=False, batchnorm=False)
    assert hw.peak_for("int8")[0] / hw.memory_bandwidth == pytest.approx(160)  # ridge: 4e12 / 25e9 OP/B
    flops = (
        2 * 1 * k * n  # one MAC (2 ops) per weight: batch 1
        + REQUANT * n  # requantize each output; both zero points are a constant 0: nothing to subtract
    )
    moved = (
        k * n  # the int8 weight, read once
        + k + n  # the int8 activation in, the int8 output out
        + 3 * 4 + 3 * 1  # three fp32 scales and three int8 zero points
    )
    assert r.totals.flops == flops == 8_392_704
    assert r.totals.bytes == moved == 4_198_415
    assert r.totals.intensity is not None and round(r.totals.intensity, 1) == 2.0  # was 3.0: a subtract per weight
    assert r.totals.bound == "memory"
    assert r.totals.memory_time_s == pytest.approx(moved / 25e9)
    assert round(r.totals.memory_time_s * 1e6, 1) == 167.9  # µs
    share = flops / r.totals.roofline_time_s / 4e12  # achieved ops/s over the int8 peak
    assert round(100 * share, 2) == 1.25  # was 1.87%
    old = flops + k * n + k  # the former count: a subtract per weight element and per activation element
    assert round(100 * old / r.totals.roofline_time_s / 4e12, 2) == 1.87


# One case per zero-point situation, for each integer product. A is [4, 16] uint8 (an activation), W is a
# constant int8 weight ([16, 8] for products, [8, 4, 3, 3] for convolutions on a [1, 4, 6, 6] input).
M, K, N = 4, 16, 8
A_NUMEL_MM, W_NUMEL_MM = M * K, K * N
CONV_OUT = 1 * 8 * 4 * 4  # N·Cout·H·W of a 3×3 valid conv on 6×6
A_NUMEL_CONV, W_NUMEL_CONV = 1 * 4 * 6 * 6, 8 * 4 * 3 * 3
PRODUCTS = {
    # op: (domain, MACs, output elements, per-output FLOPs after the product, operand numels (A, W))
    "QLinearMatMul": ("", M * N * K, M * N, REQUANT, (A_NUMEL_MM, W_NUMEL_MM)),
    "MatMulInteger": ("", M * N * K, M * N, 0, (A_NUMEL_MM, W_NUMEL_MM)),
    "MatMulIntegerToFloat": ("com.microsoft", M * N * K, M * N, TO_FLOAT, (A_NUMEL_MM, W_NUMEL_MM)),
    "QLinearConv": ("", CONV_OUT * 4 * 3 * 3, CONV_OUT, REQUANT, (A_NUMEL_CONV, W_NUMEL_CONV)),
    "com.microsoft.QLinearConv": ("com.microsoft", CONV_OUT * 4 * 3 * 3, CONV_OUT, REQUANT,
                                  (A_NUMEL_CONV, W_NUMEL_CONV)),
    "ConvInteger": ("", CONV_OUT * 4 * 3 * 3, CONV_OUT, 0, (A_NUMEL_CONV, W_NUMEL_CONV)),
}


def _product_model(op: str, case: str) -> onnx.ModelProto:
    """``case``: "zero" (constant-0 zero points), "constant" (constant non-zero zero points), "input" (zero
    points that are graph inputs, so not constants)."""
    domain = PRODUCTS[op][0]
    op_type = op.split(".")[-1]
    conv = "Conv" in op_type
    a_shape, w_shape = ([1, 4, 6, 6], [8, 4, 3, 3]) if conv else ([M, K], [K, N])
    y_shape = [1, 8, 4, 4] if conv else [M, N]
    a_zp, w_zp = {"zero": (0, 0), "constant": (3, 5), "input": (None, None)}[case]
    inits: list[tuple[str, np.ndarray]] = [("w", np.ones(w_shape, np.int8)), ("s", np.array(0.5, np.float32))]
    inputs = [_vi("a", UINT8, a_shape)]
    if case == "input":
        inputs += [_vi("a_zp", UINT8, []), _vi("w_zp", INT8, [])]
    else:
        inits += [("a_zp", np.array(a_zp, np.uint8)), ("w_zp", np.array(w_zp, np.int8))]
    out_type = {"MatMulInteger": INT32, "ConvInteger": INT32, "MatMulIntegerToFloat": FP32}.get(op_type, UINT8)
    if op_type in ("QLinearMatMul", "QLinearConv"):
        inits.append(("y_zp", np.array(0, np.uint8)))
        names = ["a", "s", "a_zp", "w", "s", "w_zp", "s", "y_zp"]
    elif op_type == "MatMulIntegerToFloat":
        names = ["a", "w", "s", "s", "a_zp", "w_zp"]
    else:
        names = ["a", "w", "a_zp", "w_zp"]
    node = helper.make_node(op_type, names, ["y"], domain=domain)
    return _model([node], inputs, [_vi("y", out_type, y_shape)], inits)


@pytest.mark.parametrize("op", list(PRODUCTS))
@pytest.mark.parametrize("case", ["zero", "constant", "input"])
def test_zero_points_cost_only_what_runs(op: str, case: str) -> None:
    _, macs, out, per_output, (a_numel, w_numel) = PRODUCTS[op]
    if PRODUCTS[op][0] == "":  # onnx checks the default-domain models (it has no com.microsoft schemas)
        onnx.checker.check_model(_product_model(op, case), full_check=True)
    _, costs = _symbolic_costs(_product_model(op, case))
    c = _node(costs, op.split(".")[-1])
    zero_points = {
        "zero": 0,  # constant 0 zero points: nothing to subtract
        "constant": ZP * a_numel,  # the activation's non-zero zero point per element; W − w_zp at load time
        "input": ZP * a_numel + ZP * w_numel,  # zero points not constant: both subtracts run every time
    }[case]
    assert c.macs == macs
    assert c.flops == 2 * macs + zero_points + per_output * out  # product, zero points, requantize / scale
    if case == "constant":
        assert f"{ZP * w_numel} subtracts done at load time" in c.note  # what the graph as written does
    else:
        assert "load time" not in c.note


# ----------------------------------------------------------------- Gather reads rows

def test_gpt2_embedding_gather_reads_one_row_per_token() -> None:
    """GPT-2's token embedding (50257×768 fp32, 154 MB) at batch 1, one token: one row, not the table."""
    proto = _model([helper.make_node("Gather", ["wte", "ids"], ["h"])],
                   [_vi("wte", FP32, [50257, 768]), _vi("ids", INT64, [1, 1])], [_vi("h", FP32, [1, 1, 768])])
    _, costs = _symbolic_costs(proto)
    c = _node(costs, "Gather")
    row = 768 * 4  # one fp32 row of the table
    assert c.bytes_read == 8 + row  # the int64 index, then the row it picks
    assert c.bytes_written == row
    assert c.bytes_read < 50257 * 768 * 4  # the old charge: the whole table, 154,389,504 B
    assert c.flops == 0
    assert c.bytes_as_written is None  # the graph as written reads the row too


def test_gather_symbolic_tokens_capped_by_the_table() -> None:
    """batch·seq indices into a [16, 8] fp32 table: their rows, or the whole table when they repeat."""
    proto = _model([helper.make_node("Gather", ["t", "ids"], ["h"])],
                   [_vi("t", FP32, [16, 8]), _vi("ids", INT64, ["batch", "seq"])],
                   [_vi("h", FP32, ["batch", "seq", 8])])
    _, costs = _symbolic_costs(proto)
    c = _node(costs, "Gather")
    b, s = symbol("batch"), symbol("seq")
    gathered = b * s * 8 * 4  # one 8-float row per index
    assert _same(c.bytes_read, 8 * b * s + sympy.Min(gathered, 16 * 8 * 4))  # indices + min(rows, table)
    assert _same(c.bytes_written, gathered)
    r = graphcost.analyze(proto, dims={"batch": 64, "seq": 64}, fusion=False, memory=False, batchnorm=False)
    assert r.nodes[0].bytes_read == 8 * 4096 + 16 * 8 * 4  # 4096 indices, then at most the whole 512-B table


def test_gather_elements_and_gather_nd_read_what_they_pick() -> None:
    ge = _model([helper.make_node("GatherElements", ["t", "i"], ["y"], axis=1)],
                [_vi("t", FP32, [100, 50]), _vi("i", INT64, [100, 2])], [_vi("y", FP32, [100, 2])])
    c = _node(_symbolic_costs(ge)[1], "GatherElements")
    assert c.bytes_read == 100 * 2 * 8 + 100 * 2 * 4  # int64 indices + one fp32 element per index
    assert c.bytes_written == 100 * 2 * 4
    gnd = _model([helper.make_node("GatherND", ["t", "i"], ["y"])],
                 [_vi("t", FP16, [1000, 64]), _vi("i", INT64, [3, 1])], [_vi("y", FP16, [3, 64])])
    c = _node(_symbolic_costs(gnd)[1], "GatherND")
    assert c.bytes_read == 3 * 8 + 3 * 64 * 2  # three int64 index tuples + three fp16 rows of 64
    assert c.bytes_written == 3 * 64 * 2


def test_gather_block_quantized_reads_the_picked_rows_of_data_and_scales() -> None:
    """A 4-bit table of 64 rows × 32 values (uint8 [64, 16]), fp16 scales per block of 32 ([64, 1]), 3 ids."""
    node = helper.make_node("GatherBlockQuantized", ["data", "ids", "scales"], ["y"], domain="com.microsoft",
                            block_size=32, bits=4, gather_axis=0, quantize_axis=1)
    proto = _model([node], [_vi("data", UINT8, [64, 16]), _vi("ids", INT64, [1, 3]), _vi("scales", FP16, [64, 1])],
                   [_vi("y", FP16, [1, 3, 32])])
    c = _node(_symbolic_costs(proto)[1], "GatherBlockQuantized")
    assert c.bytes_read == (
        3 * 8  # three int64 ids
        + 3 * 16  # three packed rows: 32 4-bit values in 16 bytes each
        + 3 * 1 * 2  # their fp16 block scales
    )
    assert c.bytes_written == 3 * 32 * 2  # the dequantized fp16 rows
    assert c.flops == 2 * 3 * 32  # dequantize each gathered element (DEQUANTIZE_FLOPS_PER_ELEMENT = 2)


# ----------------------------------------------------------------- KV cache

PAST = "past_sequence_length"


def _gqa_decoder(layers: int, kv_heads: int, head: int, heads: int) -> onnx.ModelProto:
    """GroupQueryAttention per layer over past_key_values.* → present.*, fp16 (its q, k, v shared inputs)."""
    inputs = [_vi("q", FP16, ["batch", 1, heads * head]), _vi("k", FP16, ["batch", 1, kv_heads * head]),
              _vi("v", FP16, ["batch", 1, kv_heads * head]), _vi("seqlens_k", INT32, ["batch"]),
              _vi("total_sequence_length", INT32, [])]
    outputs, nodes = [], []
    cache = ["batch", kv_heads, PAST, head]
    present = ["batch", kv_heads, f"{PAST} + 1", head]
    for i in range(layers):
        inputs += [_vi(f"past_key_values.{i}.key", FP16, cache), _vi(f"past_key_values.{i}.value", FP16, cache)]
        outputs += [_vi(f"o{i}", FP16, ["batch", 1, heads * head]), _vi(f"present.{i}.key", FP16, present),
                    _vi(f"present.{i}.value", FP16, present)]
        nodes.append(helper.make_node(
            "GroupQueryAttention", ["q", "k", "v", f"past_key_values.{i}.key", f"past_key_values.{i}.value",
                                    "seqlens_k", "total_sequence_length"],
            [f"o{i}", f"present.{i}.key", f"present.{i}.value"], domain="com.microsoft",
            num_heads=heads, kv_num_heads=kv_heads))
    return _model(nodes, inputs, outputs)


def _per_token(value: object) -> object:
    """Bytes per past token of one sequence: the coefficient of the past length at batch 1 (linear in both)."""
    return sympy.diff(sympy.sympify(value), symbol(PAST)).subs(symbol("batch"), 1)


def test_chapter_3b_gqa_kv_cache_is_counted_once() -> None:
    """Problem 3's decoder: 26 layers, 8 KV heads × 96, fp16 cache (32 query heads of 96: d = 3072)."""
    layers, kv_heads, head = 26, 8, 96
    g, costs = _symbolic_costs(_gqa_decoder(layers, kv_heads, head, heads=32))
    per_token = 2 * layers * kv_heads * head * 2  # K and V × layers × KV heads × head dim × 2 B (fp16)
    assert per_token == 79_872
    kv = kv_cache_traffic(g, costs)
    assert kv is not None and len(kv.nodes) == layers
    assert _per_token(kv.ideal) == per_token  # read past once; write only the new token
    assert _per_token(kv.as_written) == 2 * per_token == 159_744  # + the whole present copy, as the graph writes
    total = sum((c.bytes_read + c.bytes_written for c in costs.top_level()), start=sympy.Integer(0))
    assert _per_token(total) == per_token  # the whole model's bytes per token: nothing else grows with past
    c = _node(costs, "GroupQueryAttention")
    new_kv = 2 * symbol("batch") * kv_heads * 1 * head * 2  # K and V of the one new token, fp16
    out = symbol("batch") * 32 * head * 2  # the attention output, fp16
    assert _same(c.bytes_written, out + new_kv)


def _concat_decoder(layers: int, kv_heads: int, head: int) -> onnx.ModelProto:
    """A 1–2 layer decoder as optimum writes it: k_new, v_new = x·W reshaped to [B, H, 1, D];
    present = Concat(past, new) on the sequence axis; scores = q · presentᵀ, softmax, · present_v."""
    d = kv_heads * head
    rng = np.random.default_rng(0)
    inputs = [_vi("x", FP16, ["batch", 1, d])]
    outputs, nodes = [_vi("y", FP16, ["batch", kv_heads, 1, head])], []
    inits: list[tuple[str, np.ndarray]] = [("split_shape", np.array([0, 1, kv_heads, head], np.int64))]
    cache = ["batch", kv_heads, PAST, head]
    present = ["batch", kv_heads, f"{PAST} + 1", head]
    h = "x"
    for i in range(layers):
        for w in ("q", "k", "v"):
            inits.append((f"w{w}{i}", rng.standard_normal((d, d)).astype(np.float16)))
            nodes += [helper.make_node("MatMul", [h, f"w{w}{i}"], [f"{w}{i}_flat"]),
                      helper.make_node("Reshape", [f"{w}{i}_flat", "split_shape"], [f"{w}{i}_bshd"]),
                      helper.make_node("Transpose", [f"{w}{i}_bshd"], [f"{w}{i}"], perm=[0, 2, 1, 3])]
        inputs += [_vi(f"past_key_values.{i}.key", FP16, cache), _vi(f"past_key_values.{i}.value", FP16, cache)]
        outputs += [_vi(f"present.{i}.key", FP16, present), _vi(f"present.{i}.value", FP16, present)]
        nodes += [
            helper.make_node("Concat", [f"past_key_values.{i}.key", f"k{i}"], [f"present.{i}.key"], axis=2),
            helper.make_node("Concat", [f"past_key_values.{i}.value", f"v{i}"], [f"present.{i}.value"], axis=2),
            helper.make_node("Transpose", [f"present.{i}.key"], [f"kt{i}"], perm=[0, 1, 3, 2]),
            helper.make_node("MatMul", [f"q{i}", f"kt{i}"], [f"scores{i}"]),
            helper.make_node("Softmax", [f"scores{i}"], [f"p{i}"], axis=-1),
            helper.make_node("MatMul", [f"p{i}", f"present.{i}.value"], [f"ctx{i}"]),
        ]
        if i + 1 < layers:
            inits.append((f"merge{i}", np.array([0, 1, d], np.int64)))
            nodes += [helper.make_node("Transpose", [f"ctx{i}"], [f"ctx{i}_t"], perm=[0, 2, 1, 3]),
                      helper.make_node("Reshape", [f"ctx{i}_t", f"merge{i}"], [f"h{i}"])]
            h = f"h{i}"
    nodes.append(helper.make_node("Identity", [f"ctx{layers - 1}"], ["y"]))
    return _model(nodes, inputs, outputs, inits)


@pytest.mark.parametrize("layers", [1, 2])
def test_concat_kv_cache_appends_in_place(layers: int) -> None:
    kv_heads, head = 2, 8
    proto = _concat_decoder(layers, kv_heads, head)
    onnx.checker.check_model(proto, full_check=True)
    g, costs = _symbolic_costs(proto)
    per_token = 2 * layers * kv_heads * head * 2  # K and V × layers × KV heads × head dim × 2 B (fp16)
    kv = kv_cache_traffic(g, costs)
    assert kv is not None and len(kv.nodes) == 2 * layers  # one Concat per K and per V cache
    assert _per_token(kv.ideal) == per_token  # appended in place; the attention reads present once
    assert _per_token(kv.as_written) == 3 * per_token  # Concat reads past and writes present, then the read
    concat = _node(costs, "Concat")
    new = symbol("batch") * kv_heads * 1 * head * 2  # the new token's K, fp16
    assert _same(concat.bytes_read, new) and _same(concat.bytes_written, new)
    assert concat.bytes_as_written is not None
    assert _same(concat.bytes_as_written, new + 2 * symbol("batch") * kv_heads * symbol(PAST) * head * 2 + new)


def test_report_totals_carry_bytes_as_written_for_a_decoder() -> None:
    proto = _gqa_decoder(2, 8, 96, heads=32)
    r = graphcost.analyze(proto, dims={"batch": 1, PAST: 100}, fusion=False, memory=False, batchnorm=False)
    cache_per_token = 2 * 2 * 8 * 96 * 2  # K, V × 2 layers × 8 KV heads × 96 × fp16
    assert r.totals.bytes_as_written is not None
    extra = 2 * 2 * 8 * 100 * 96 * 2  # as written: present copies the 100 past tokens of each K and V cache
    assert r.totals.bytes_as_written - r.totals.bytes == extra == 100 * cache_per_token
    d = r.to_dict()
    assert d["totals"]["bytes_as_written"] == r.totals.bytes_as_written
    assert "bytes_as_written" in d["totals"]["formulas"]
    assert all("bytes_as_written" in n for n in d["nodes"] if n["op_type"] == "GroupQueryAttention")


def test_no_cache_no_as_written() -> None:
    """A Concat of graph input to graph output not named as a cache is a plain copy, charged as written."""
    proto = _model([helper.make_node("Concat", ["a", "b"], ["y"], axis=0)],
                   [_vi("a", FP32, [4, 8]), _vi("b", FP32, [4, 8])], [_vi("y", FP32, [8, 8])])
    g, costs = _symbolic_costs(proto)
    c = _node(costs, "Concat")
    assert c.bytes_read == 2 * 4 * 8 * 4 and c.bytes_written == 8 * 8 * 4  # both inputs, the whole output
    assert c.bytes_as_written is None and kv_cache_traffic(g, costs) is None
    r = graphcost.analyze(proto, fusion=False, memory=False, batchnorm=False)
    assert r.totals.bytes_as_written is None and "bytes_as_written" not in r.to_dict()["totals"]


# ----------------------------------------------------------------- MatMulNBits parameters

@pytest.mark.parametrize("zero_points", [False, True])
def test_matmul_nbits_logical_parameters(zero_points: bool) -> None:
    k = n = 4096
    block, bits = 32, 4
    blocks = k // block  # 128 blocks along K per column
    packed = np.zeros((n, blocks, block * bits // 8), np.uint8)  # [N, K/block, 16]: two 4-bit weights a byte
    scales = np.ones(n * blocks, np.float16)
    inits = [("b", packed), ("scales", scales)]
    names = ["a", "b", "scales"]
    if zero_points:
        inits.append(("zp", np.zeros(n * ((blocks * bits + 7) // 8), np.uint8)))  # 4-bit, packed per column
        names.append("zp")
    node = helper.make_node("MatMulNBits", names, ["y"], domain="com.microsoft", K=k, N=n, bits=bits,
                            block_size=block)
    proto = _model([node], [_vi("a", FP16, [1, k])], [_vi("y", FP16, [1, n])], inits)
    r = graphcost.analyze(proto, fusion=False, memory=False, batchnorm=False)
    assert r.model.logical_parameter_count == k * n == 16_777_216  # K·N weights, whatever their packing
    zp_bytes = n * blocks * bits // 8 if zero_points else 0  # 4-bit zero point per block
    assert r.model.parameter_bytes == (
        k * n // 2  # packed: two 4-bit weights per byte
        + blocks * n * 2  # K/32·N fp16 scales
        + zp_bytes
    )
    assert r.model.parameter_count == k * n // 2 + blocks * n + zp_bytes  # stored elements (as before)
    assert r.to_dict()["model"]["logical_parameter_count"] == k * n


def test_logical_parameters_equal_stored_for_a_float_model() -> None:
    w = np.ones((16, 8), np.float32)
    proto = _model([helper.make_node("MatMul", ["a", "w"], ["y"])], [_vi("a", FP32, [1, 16])],
                   [_vi("y", FP32, [1, 8])], [("w", w)])
    r = graphcost.analyze(proto, fusion=False, memory=False, batchnorm=False)
    assert r.model.logical_parameter_count == r.model.parameter_count == 16 * 8
