"""Batchnorm folding legality: tiny graphs built with onnx.helper and numpy weights.

Every graph that should fold is also folded with ``fold_model``, which checks the result against the original in
onnxruntime (graph optimizations off), so each legal case is a numeric round trip, not just a yes/no.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto, numpy_helper

from graphcost.fold import fold_model
from graphcost.load import load
from graphcost.passes.batchnorm import FOLLOWING, PRECEDING, BatchNormResult, find_foldable
from graphcost.passes.shapes import infer_shapes

F32 = TensorProto.FLOAT


def vi(name: str, shape: list[int] | None, elem: int = F32) -> onnx.ValueInfoProto:
    return oh.make_tensor_value_info(name, elem, shape)


def init(name: str, value: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def bn_params(prefix: str, c: int, rng: np.random.Generator, dtype: type = np.float32) -> list[onnx.TensorProto]:
    """γ, β, μ, σ² with a non-zero shift t = β − μ·γ/√(σ²+ε), so no fold is a no-op."""
    return [init(f"{prefix}.scale", rng.uniform(0.5, 1.5, c).astype(dtype)),
            init(f"{prefix}.bias", rng.normal(0, 0.5, c).astype(dtype)),
            init(f"{prefix}.mean", rng.normal(0, 0.5, c).astype(dtype)),
            init(f"{prefix}.var", rng.uniform(0.5, 1.5, c).astype(dtype))]


def bn(prefix: str, x: str, y: str, **attrs: Any) -> onnx.NodeProto:
    ins = [x, f"{prefix}.scale", f"{prefix}.bias", f"{prefix}.mean", f"{prefix}.var"]
    return oh.make_node("BatchNormalization", ins, [y], name=prefix, **attrs)


def model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
          inits: list[onnx.TensorProto], opset: int = 17) -> onnx.ModelProto:
    return oh.make_model(oh.make_graph(nodes, "g", inputs, outputs, inits),
                         opset_imports=[oh.make_opsetid("", opset)], ir_version=8)


def analyze(m: onnx.ModelProto) -> BatchNormResult:
    return find_foldable(infer_shapes(load(m)).graph)


def round_trip(m: onnx.ModelProto, tmp_path: Path, **kw: float) -> onnx.ModelProto:
    """Fold through the file API (which verifies in onnxruntime) and return the folded model."""
    src, dst = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(m, src)
    result = fold_model(src, dst, **kw)  # type: ignore[arg-type]
    assert result.max_rel_diff <= 1e-3  # fold_model already checked every element against rtol/atol
    out = onnx.load(dst)
    assert not [n for n in out.graph.node if n.op_type == "BatchNormalization"]
    return out


def conv_bn(rng: np.random.Generator, *, bias: bool = False, dtype: type = np.float32, elem: int = F32,
            extra: list[onnx.NodeProto] | None = None, outputs: list[str] | None = None) -> onnx.ModelProto:
    inits = [init("w", rng.normal(0, 0.3, (4, 3, 3, 3)).astype(dtype)), *bn_params("bn", 4, rng, dtype)]
    conv_in = ["x", "w"]
    if bias:
        inits.append(init("b", rng.normal(0, 0.3, 4).astype(dtype)))
        conv_in.append("b")
    nodes = [oh.make_node("Conv", conv_in, ["c"], name="conv", pads=[1, 1, 1, 1]), bn("bn", "c", "y"), *(extra or [])]
    outs = [vi(o, None, elem) for o in (outputs or ["y"])]
    return model(nodes, [vi("x", [1, 3, 8, 8], elem)], outs, inits)


def the_reason(result: BatchNormResult, name: str = "bn") -> str:
    reasons = [r.reason for r in result.refused if r.batchnorm == name]
    assert len(reasons) == 1 and not [f for f in result.foldable if f.batchnorm == name], result
    return reasons[0]


# ------------------------------------------------------------------------------------------------ folds
def test_conv_bn_folds_with_costs_in_closed_form(tmp_path: Path) -> None:
    m = conv_bn(np.random.default_rng(0))
    result = analyze(m)
    assert result.refused == ()
    (f,) = result.foldable
    assert (f.batchnorm, f.into, f.direction, f.into_op) == ("bn", "conv", PRECEDING, "Conv")
    elements = 1 * 4 * 8 * 8  # BN input [1, 4, 8, 8]
    assert f.bytes_removed == elements * 4 + 4 * 4 * 4 + elements * 4  # x read + γ, β, μ, σ² [4] read + y written
    assert f.flops_removed == 2 * elements + 5 * 4  # one multiply-add per element + the per-channel fold
    assert f.bytes_added == 4 * 4  # the Conv had no bias: 4 float32 channels read
    assert f.flops_added == elements  # one bias add per output element
    assert result.flops_saved == 2 * elements + 5 * 4 - elements
    d = result.to_dict()
    assert d["foldable"][0]["batchnorm"] == "bn" and d["foldable"][0]["into"] == "conv" and d["refused"] == []
    out = round_trip(m, tmp_path)
    assert [n.op_type for n in out.graph.node] == ["Conv"] and out.graph.node[0].output[0] == "y"
    assert {t.name for t in out.graph.initializer} == {"w", "conv_bias"}  # BN parameters cleaned up


def test_conv_with_bias_keeps_one_bias(tmp_path: Path) -> None:
    m = conv_bn(np.random.default_rng(1), bias=True)
    (f,) = analyze(m).foldable
    assert f.bytes_added == 0 and f.flops_added == 0
    out = round_trip(m, tmp_path)
    assert list(out.graph.node[0].input) == ["x", "w", "b"]


@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("with_c", [True, False])
def test_gemm_trans_b(trans_b: int, with_c: bool, tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    k, n = 6, 5
    w = rng.normal(0, 0.5, (n, k) if trans_b else (k, n)).astype(np.float32)
    inits = [init("w", w), *bn_params("bn", n, rng)]
    ins = ["x", "w"]
    if with_c:
        inits.append(init("c", rng.normal(0, 0.5, n).astype(np.float32)))
        ins.append("c")
    nodes = [oh.make_node("Gemm", ins, ["g"], name="gemm", transB=trans_b, alpha=0.7, beta=1.3), bn("bn", "g", "y")]
    m = model(nodes, [vi("x", [3, k])], [vi("y", None)], inits)
    (f,) = analyze(m).foldable
    assert (f.into, f.direction) == ("gemm", PRECEDING)
    round_trip(m, tmp_path)


def test_matmul_constant_weight_becomes_gemm(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    inits = [init("w", rng.normal(0, 0.5, (6, 5)).astype(np.float32)), *bn_params("bn", 5, rng)]
    m = model([oh.make_node("MatMul", ["x", "w"], ["mm"], name="mm"), bn("bn", "mm", "y")],
              [vi("x", [3, 6])], [vi("y", None)], inits)
    (f,) = analyze(m).foldable
    assert (f.into, f.into_op) == ("mm", "MatMul")
    assert f.flops_added == 3 * 5 and f.bytes_added == 5 * 4  # Gemm's bias: one add per [3, 5] output, 5 floats
    out = round_trip(m, tmp_path)
    assert [n.op_type for n in out.graph.node] == ["Gemm"]


def test_matmul_rank3_is_a_channel_axis_mismatch() -> None:
    rng = np.random.default_rng(4)
    inits = [init("w", rng.normal(0, 0.5, (6, 5)).astype(np.float32)), *bn_params("bn", 7, rng)]
    m = model([oh.make_node("MatMul", ["x", "w"], ["mm"], name="mm"), bn("bn", "mm", "y")],
              [vi("x", [2, 7, 6])], [vi("y", None)], inits)
    assert "channel-axis mismatch" in the_reason(analyze(m))


def test_conv_transpose_group_2(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    # W [C_in=4, M/g=3, 3, 3] with group 2 → 6 output channels
    inits = [init("w", rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32)), *bn_params("bn", 6, rng)]
    m = model([oh.make_node("ConvTranspose", ["x", "w"], ["ct"], name="ct", group=2, strides=[2, 2]),
               bn("bn", "ct", "y")], [vi("x", [1, 4, 5, 5])], [vi("y", None)], inits)
    (f,) = analyze(m).foldable
    assert (f.into, f.into_op) == ("ct", "ConvTranspose")
    round_trip(m, tmp_path)


@pytest.mark.parametrize("group", [1, 2])
def test_bn_before_unpadded_conv_folds_forward(group: int, tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    inits = [*bn_params("bn", 4, rng), init("w", rng.normal(0, 0.3, (6, 4 // group, 3, 3)).astype(np.float32))]
    m = model([oh.make_node("Relu", ["x"], ["r"], name="relu"), bn("bn", "r", "b"),
               oh.make_node("Conv", ["b", "w"], ["y"], name="conv", group=group, strides=[2, 1])],
              [vi("x", [1, 4, 9, 9])], [vi("y", None)], inits)
    (f,) = analyze(m).foldable
    assert (f.into, f.direction) == ("conv", FOLLOWING)
    out = round_trip(m, tmp_path)
    assert [n.op_type for n in out.graph.node] == ["Relu", "Conv"]


def test_bn_before_padded_conv_is_refused_unless_shift_is_zero(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    params = bn_params("bn", 4, rng)
    w = init("w", rng.normal(0, 0.3, (6, 4, 3, 3)).astype(np.float32))
    nodes = [oh.make_node("Relu", ["x"], ["r"], name="relu"), bn("bn", "r", "b"),
             oh.make_node("Conv", ["b", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])]
    m = model(nodes, [vi("x", [1, 4, 9, 9])], [vi("y", None)], [*params, w])
    reason = the_reason(analyze(m))
    assert "producer relu is Relu, not a foldable op" in reason and "has padding" in reason
    # β = μ = 0 (a fresh BN's statistics) makes the shift zero: padded taps then read 0 either way, so it folds
    params[1], params[2] = init("bn.bias", np.zeros(4, np.float32)), init("bn.mean", np.zeros(4, np.float32))
    m = model(nodes, [vi("x", [1, 4, 9, 9])], [vi("y", None)], [*params, w])
    (f,) = analyze(m).foldable
    assert f.direction == FOLLOWING and f.bytes_added == 0  # no shift, no new bias
    round_trip(m, tmp_path)


def test_conv_between_two_bns_takes_both(tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    inits = [*bn_params("bn0", 4, rng), init("w", rng.normal(0, 0.3, (5, 4, 1, 1)).astype(np.float32)),
             *bn_params("bn1", 5, rng)]
    m = model([oh.make_node("Relu", ["x"], ["r"]), bn("bn0", "r", "a"),
               oh.make_node("Conv", ["a", "w"], ["c"], name="conv"), bn("bn1", "c", "y")],
              [vi("x", [2, 4, 6, 6])], [vi("y", None)], inits)
    result = analyze(m)
    assert [(f.batchnorm, f.direction) for f in result.foldable] == [("bn0", FOLLOWING), ("bn1", PRECEDING)]
    assert [f.bytes_added for f in result.foldable] == [5 * 4, 0]  # the new bias is counted once
    round_trip(m, tmp_path)


def test_fp16_weights_fold_in_float64_and_stay_fp16(tmp_path: Path) -> None:
    m = conv_bn(np.random.default_rng(9), dtype=np.float16, elem=TensorProto.FLOAT16, bias=True)
    (f,) = analyze(m).foldable
    assert f.dtype == "float16" and f.bytes_removed == 2 * (256 * 2) + 4 * 4 * 2  # x, y [1,4,8,8] and 4 params, 2 B
    out = round_trip(m, tmp_path, rtol=1e-2, atol=1e-2)  # fp16 arithmetic itself differs at ~1e-3
    assert {t.data_type for t in out.graph.initializer} == {TensorProto.FLOAT16}


# ------------------------------------------------------------------------------------------------ refusals
def test_producer_with_two_consumers_is_refused() -> None:
    m = conv_bn(np.random.default_rng(10), extra=[oh.make_node("Relu", ["c"], ["r"], name="relu")],
                outputs=["y", "r"])
    reason = the_reason(analyze(m))
    assert "producer conv has other consumers" in reason and "relu" in reason
    assert "'y' is a graph output" in reason  # and the following direction is closed too


def test_shared_weight_is_refused() -> None:
    rng = np.random.default_rng(11)
    inits = [init("w", rng.normal(0, 0.3, (4, 4, 1, 1)).astype(np.float32)), *bn_params("bn", 4, rng)]
    m = model([oh.make_node("Conv", ["x", "w"], ["c"], name="conv"), bn("bn", "c", "y"),
               oh.make_node("Conv", ["y", "w"], ["z"], name="conv2")],
              [vi("x", [1, 4, 4, 4])], [vi("z", None)], inits)
    reason = the_reason(analyze(m))
    assert "shared initializer: weight 'w' of conv also feeds conv2" in reason


def test_non_constant_mean_is_refused() -> None:
    m = conv_bn(np.random.default_rng(12))
    m.graph.input.append(vi("bn.mean", [4]))  # IR<4 style: the initializer can be fed at run time
    assert "non-constant statistics: mean 'bn.mean'" in the_reason(analyze(m))
    m = conv_bn(np.random.default_rng(12))
    m.graph.node.insert(0, oh.make_node("Abs", ["m_in"], ["m_abs"]))
    m.graph.input.append(vi("m_in", [4]))
    m.graph.node[2].input[3] = "m_abs"
    assert "non-constant statistics: mean 'm_abs' is computed at run time" in the_reason(analyze(m))


def test_training_mode_is_refused() -> None:
    m = conv_bn(np.random.default_rng(13))
    m.graph.node[1].attribute.append(oh.make_attribute("training_mode", 1))
    assert "training mode (training_mode=1)" in the_reason(analyze(m))
    m = conv_bn(np.random.default_rng(13))
    m.opset_import[0].version = 12  # before opset 14, statistics outputs mean training
    m.graph.node[1].output.extend(["rm", "rv"])
    assert "training outputs are used" in the_reason(analyze(m))


def test_other_refusals_name_their_reason() -> None:
    rng = np.random.default_rng(14)
    # producer is not a foldable op, consumer is a graph output
    m = model([oh.make_node("Relu", ["x"], ["r"], name="relu"), bn("bn", "r", "y")],
              [vi("x", [1, 4, 4, 4])], [vi("y", None)], bn_params("bn", 4, rng))
    assert "producer relu is Relu, not a foldable op" in the_reason(analyze(m))
    # the Conv weight is computed at run time
    m = model([oh.make_node("Conv", ["x", "wx"], ["c"], name="conv"), bn("bn", "c", "y")],
              [vi("x", [1, 4, 4, 4]), vi("wx", [4, 4, 1, 1])], [vi("y", None)], bn_params("bn", 4, rng))
    assert "Conv weight 'wx' is computed at run time" in the_reason(analyze(m))
    # a following Gemm with transA=1 contracts BN's batch axis, not its channels
    inits = [*bn_params("bn", 4, rng), init("w", rng.normal(0, 1, (6, 3)).astype(np.float32))]
    m = model([oh.make_node("Relu", ["x"], ["r"], name="relu"), bn("bn", "r", "b"),
               oh.make_node("Gemm", ["b", "w"], ["y"], name="gemm", transA=1)],
              [vi("x", [6, 4])], [vi("y", None)], inits)
    assert "transA=1" in the_reason(analyze(m))


def test_batchnorm_inside_a_subgraph_is_reported() -> None:
    rng = np.random.default_rng(15)
    body = oh.make_graph([oh.make_node("Conv", ["x", "w"], ["c"]), bn("bn", "c", "y")], "then", [], [vi("y", None)])
    other = oh.make_graph([oh.make_node("Identity", ["x"], ["z"])], "else", [], [vi("z", None)])
    inits = [init("w", rng.normal(0, 1, (4, 4, 1, 1)).astype(np.float32)), *bn_params("bn", 4, rng)]
    m = model([oh.make_node("If", ["cond"], ["out"], name="if", then_branch=body, else_branch=other)],
              [vi("cond", [], TensorProto.BOOL), vi("x", [1, 4, 2, 2])], [vi("out", None)], inits)
    result = analyze(m)
    assert result.foldable == ()
    assert "inside a subgraph of if" in result.refused[0].reason


def test_statistics_in_constant_nodes_fold_and_are_cleaned_up(tmp_path: Path) -> None:
    m = conv_bn(np.random.default_rng(16))
    params = [t for t in m.graph.initializer if t.name.startswith("bn.")]
    consts = [oh.make_node("Constant", [], [t.name], value=t) for t in params]  # exporters without initializers
    keep = [t for t in m.graph.initializer if not t.name.startswith("bn.")]
    del m.graph.initializer[:]
    m.graph.initializer.extend(keep)
    for i, node in enumerate(consts):
        m.graph.node.insert(i, node)
    assert len(analyze(m).foldable) == 1
    out = round_trip(m, tmp_path)
    assert [n.op_type for n in out.graph.node] == ["Conv"]  # the four Constant nodes went with the BN
