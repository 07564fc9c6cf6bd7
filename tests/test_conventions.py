"""Other tools' conventions (graphcost/conventions.py) and the parameter split (graphcost/params.py), in closed
form on tiny graphs; ``explain`` rows add up to both totals. The real tools: tests/test_conventions_peers.py."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnx.parser
import pytest
from onnx import numpy_helper

import graphcost
from graphcost.cli import main
from graphcost.conventions import CONVENTIONS, as_convention

CNN = """<ir_version: 8, opset_import: ["" : 17]>
g (float[1,3,8,8] x) => (float[1,2] y) {
    c = Conv <pads = [1,1,1,1], kernel_shape = [3,3]> (x, w, b)
    n = BatchNormalization (c, s, bb, mean, var)
    r = Relu (n)
    p = MaxPool <kernel_shape = [2,2], strides = [2,2]> (r)
    g = GlobalAveragePool (p)
    f = Flatten (g)
    y = Gemm <transB = 1> (f, fw, fb)
}"""
SHAPES = {"w": (4, 3, 3, 3), "b": (4,), "s": (4,), "bb": (4,), "mean": (4,), "var": (4,), "fw": (2, 4), "fb": (2,)}


def _with_weights(text: str, shapes: dict[str, tuple[int, ...]], same: dict[str, str] | None = None) -> onnx.ModelProto:
    m = onnx.parser.parse_model(text)
    rng = np.random.default_rng(0)
    values: dict[str, np.ndarray] = {}
    for name, shape in shapes.items():
        src = (same or {}).get(name)
        values[name] = values[src].copy() if src else rng.uniform(0.5, 1.5, shape).astype(np.float32)
        m.graph.initializer.append(numpy_helper.from_array(values[name], name))
    return m


@pytest.fixture(scope="module")
def cnn() -> graphcost.Report:
    return graphcost.analyze(_with_weights(CNN, SHAPES), fusion=False, memory=False, batchnorm=False)


CONV_MACS = 1 * 4 * 8 * 8 * 3 * 3 * 3  # N·Cout·∏out·Cin·∏kernel = 6,912
CONV_OUT = 1 * 4 * 8 * 8  # conv / BN / Relu elements = 256
POOL_OUT = 1 * 4 * 4 * 4  # MaxPool output = GlobalAveragePool input = 64
GAP_OUT = 4  # GlobalAveragePool output
GEMM_MACS = 1 * 4 * 2  # M·K·N = 8
GEMM_OUT = 2  # Gemm output (its bias adds)


def test_torch_counts_products_at_two_per_mac(cnn: graphcost.Report) -> None:
    r = as_convention(cnn, "torch")
    assert r.unit == "FLOP"
    assert r.total == 2 * (CONV_MACS + GEMM_MACS) == 13_840  # convolution + addmm, 2 per MAC, no bias


def test_torchvision_is_product_macs(cnn: graphcost.Report) -> None:
    assert as_convention(cnn, "torchvision").total == CONV_MACS + GEMM_MACS == 6_920  # conv + linear MACs


def test_fvcore(cnn: graphcost.Report) -> None:
    assert as_convention(cnn, "fvcore").total == (
        CONV_MACS  # conv: 1 per MAC, bias ignored
        + 2 * CONV_OUT  # batch_norm (eval, affine): 2 per input element
        + POOL_OUT  # adaptive_avg_pool2d: 1 per input element
        + GEMM_MACS  # addmm: MACs, bias ignored
    ) == 7_496  # relu and max_pool2d are not counted


def test_ptflops(cnn: graphcost.Report) -> None:
    assert as_convention(cnn, "ptflops").total == (
        CONV_MACS + CONV_OUT  # conv hook: MACs + 1 per output element for the bias
        + 2 * CONV_OUT  # bn hook, affine: 2 per input element
        + CONV_OUT  # relu hook: 1 per output element
        + CONV_OUT  # pool hook (MaxPool): 1 per input element
        + POOL_OUT  # pool hook (AdaptiveAvgPool): 1 per input element
        + GEMM_MACS + GEMM_OUT  # linear hook: MACs + bias
    ) == 8_266


def test_thop(cnn: graphcost.Report) -> None:
    assert as_convention(cnn, "thop").total == (
        CONV_MACS  # count_convNd: no bias
        + 2 * 2 * CONV_OUT  # count_normalization: 2 per element, ×2 affine
        + POOL_OUT + GAP_OUT  # count_adap_avgpool: (window + 1) per output = in + out elements
        + GEMM_MACS  # count_linear: in_features per output element
    ) == 8_012  # ReLU and MaxPool are zero_ops


def test_onnx_tool(cnn: graphcost.Report) -> None:
    assert as_convention(cnn, "onnx-tool").total == (
        CONV_MACS + CONV_OUT  # Conv: MACs + bias per output element
        + 31 * CONV_OUT  # BatchNormalization at x86 instruction weights
        + CONV_OUT  # Relu: 1 per element
        + POOL_OUT * 2 * 2  # MaxPool: output elements × the 2×2 window (PoolBase.profile)
        + POOL_OUT + 4 * GAP_OUT  # GlobalAveragePool: ADD per input element, DIV (4) per output
        + GEMM_MACS + GEMM_OUT  # Gemm: MACs + bias
    ) == 15_706  # Flatten has no profile


def test_onnxsim(cnn: graphcost.Report) -> None:
    assert as_convention(cnn, "onnxsim").total == CONV_MACS + GEMM_MACS  # Conv/Gemm MACs only


@pytest.mark.parametrize("name", list(CONVENTIONS))
def test_rows_add_up_to_both_totals(cnn: graphcost.Report, name: str) -> None:
    r = as_convention(cnn, name)
    rows = r.rows()
    assert sum(x.graphcost_flops for x in rows) == cnn.totals.flops == r.graphcost_flops
    assert sum(x.tool for x in rows) == r.total
    assert sum(x.count for x in rows) == cnn.model.node_count  # every top-level node in one row


def test_unknown_convention_is_a_value_error(cnn: graphcost.Report) -> None:
    with pytest.raises(ValueError, match="unknown convention 'flopz'"):
        as_convention(cnn, "flopz")


def test_parameter_split(cnn: graphcost.Report) -> None:
    s = cnn.model.parameter_split
    assert s.stored_count == cnn.model.parameter_count == 108 + 4 + 4 * 4 + 8 + 2  # w, b, BN ×4, fw, fb
    assert s.learnable_count == 108 + 4 + 2 * 4 + 8 + 2 == 130  # BN scale and bias are trained
    assert s.buffer_count == 2 * 4 == 8 and s.buffers_by_kind == {"batchnorm_stats": 8}  # running mean, var
    assert s.learnable_bytes + s.buffer_bytes == cnn.model.parameter_bytes == 138 * 4  # float32
    d = cnn.to_dict()["model"]["parameter_split"]
    assert d["learnable"] == {"count": 130, "bytes": 520} and d["buffers"]["count"] == 8


def test_duplicates_and_shared() -> None:
    text = """<ir_version: 8, opset_import: ["" : 17]>
        g (float[1,4] x) => (float[1,4] y) { a = MatMul(x, w1) b = MatMul(a, w2) c = MatMul(b, w1) y = Add(c, b) }"""
    m = _with_weights(text, {"w1": (4, 4), "w2": (4, 4)}, same={"w2": "w1"})  # w2: w1's bytes, stored again
    s = graphcost.analyze(m, fusion=False, memory=False).model.parameter_split
    assert s.stored_count == 2 * 16  # two 4×4 tensors in the file
    assert s.duplicate_count == 16 and s.duplicate_bytes == 64  # the second copy: same dtype, shape and bytes
    assert s.shared_count == 16  # w1 is read by two MatMuls: stored once, tied


def test_scalar_constants_are_not_learnable() -> None:
    text = """<ir_version: 8, opset_import: ["" : 17]>
        g (float[1,4] x) => (float[1,4] y) { a = MatMul(x, w) y = Div(a, k) }"""
    s = graphcost.analyze(_with_weights(text, {"w": (4, 4), "k": ()}), fusion=False, memory=False).model.parameter_split
    assert (s.learnable_count, s.buffer_count) == (16, 1)  # w is a weight; the scalar divisor a constant
    assert s.buffers_by_kind == {"scalar_constant": 1}


def test_cli_as_and_explain(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "cnn.onnx"
    onnx.save(_with_weights(CNN, SHAPES), path)
    assert main(["analyze", str(path), "--as", "fvcore"]) == 0
    assert capsys.readouterr().out.startswith("fvcore: 7,496 MACs")
    assert main(["analyze", str(path), "--as", "fvcore", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["total"] == 7_496 and sum(r["tool"] for r in doc["by_op_type"]) == 7_496
    assert main(["explain", str(path), "--against", "thop"]) == 0
    out = capsys.readouterr().out
    assert "BatchNormalization" in out and out.splitlines()[-1].split()[-1] == "8,012"
    assert main(["explain", str(path), "--against", "nope"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--against 'nope'" in err
    assert main(["analyze", str(path), "--as", "nope"]) == 2
    assert "unknown convention 'nope'" in capsys.readouterr().err


def _named(m: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    """Give the graph's nodes the legacy exporter's scoped names (module path / op type)."""
    for node, name in zip(m.graph.node, names, strict=True):
        node.name = name
    return m


CNN_MODULE_NAMES = ["/block/conv/Conv", "/block/bn/BatchNormalization", "/block/relu/Relu", "/maxpool/MaxPool",
                    "/GlobalAveragePool", "/Flatten", "/fc/Gemm"]  # nn.ReLU, nn.MaxPool2d; F.adaptive_avg_pool2d


def test_ptflops_counts_a_module_call_twice() -> None:
    """ptflops' module hook and the patched functional the module's forward calls both count (nn.ReLU →
    F.relu, nn.MaxPool2d → F.max_pool2d); the scoped node names say which node came from a module."""
    m = _named(_with_weights(CNN, SHAPES), CNN_MODULE_NAMES)
    r = graphcost.analyze(m, fusion=False, memory=False, batchnorm=False)
    c = as_convention(r, "ptflops")
    assert c.total == (
        CONV_MACS + CONV_OUT  # conv hook: MACs + bias per output element
        + 2 * CONV_OUT  # bn hook, affine
        + 2 * CONV_OUT  # nn.ReLU: relu hook + patched F.relu, 1 per output element each
        + 2 * CONV_OUT  # nn.MaxPool2d: pool hook + patched F.max_pool2d, 1 per input element each
        + POOL_OUT  # F.adaptive_avg_pool2d in the root forward: the patched functional only
        + GEMM_MACS + GEMM_OUT  # linear hook
    ) == 8_778
    assert c.notes == ()  # every by-call node has a scope: nothing assumed
    assert as_convention(r, "thop").total == (
        CONV_MACS  # count_convNd
        + 2 * 2 * CONV_OUT  # count_normalization
        + GEMM_MACS  # count_linear; F.adaptive_avg_pool2d is no module: thop does not see it
    ) == 7_944


def test_ptflops_functional_relu_counts_once() -> None:
    names = [*CNN_MODULE_NAMES]
    names[2] = "/block/Relu"  # F.relu in the block's forward: the scope /block has child scopes
    r = graphcost.analyze(_named(_with_weights(CNN, SHAPES), names), fusion=False, memory=False, batchnorm=False)
    assert as_convention(r, "ptflops").total == 8_778 - CONV_OUT  # the relu hook does not fire: F.relu only


def test_ptflops_without_scopes_says_what_it_assumed(cnn: graphcost.Report) -> None:
    c = as_convention(cnn, "ptflops")
    assert len(c.notes) == 1 and "GlobalAveragePool, MaxPool, Relu" in c.notes[0]
    assert "counted as a functional call" in c.notes[0]
    assert "a module" in as_convention(cnn, "thop").notes[0]  # thop: a module, or it would count nothing


def test_ptflops_linear_bias_add_and_per_sample_total() -> None:
    """An nn.Linear on a [seq, batch, in] input exports as MatMul + Add: ptflops counts the bias; its total is
    divided by ``len(input)``, the leading dim (here the sequence: ptflops' batch counter)."""
    text = """<ir_version: 8, opset_import: ["" : 17]>
        g (float[3,2,4] x) => (float[3,2,5] y) { a = MatMul(x, w) y = Add(a, b) }"""
    r = graphcost.analyze(_with_weights(text, {"w": (4, 5), "b": (5,)}), fusion=False, memory=False)
    c = as_convention(r, "ptflops")
    node_sum = (3 * 2 * 4 * 5  # MatMul: rows · K · N MACs
                + 3 * 2 * 5)  # the bias Add: 1 per output element
    assert c.per_sample == 3 and c.total == node_sum // 3 == 50
    rows = {x.op_type: x.tool for x in c.rows()}
    assert rows == {"MatMul": 120, "Add": 30, "(per sample)": 50 - 150}  # the division is a row of its own
    assert sum(rows.values()) == c.total


def test_legacy_deduplicated_initializers_count_once_per_copy() -> None:
    """The legacy exporter in eval mode merges initializers with equal values: every BatchNorm's all-ones gamma
    and running variance become one tensor, read through ``Identity`` copies. Each copy has its own role."""
    text = """<ir_version: 8, opset_import: ["" : 17]>
        g (float[1,2,4,4] x) => (float[1,2,4,4] y) {
            m1 = Identity(zeros) v1 = Identity(ones)
            n = BatchNormalization(x, ones, zeros, m1, v1)
            g2 = Identity(ones) b2 = Identity(zeros) m2 = Identity(zeros) v2 = Identity(ones)
            y = BatchNormalization(n, g2, b2, m2, v2)
        }"""
    m = onnx.parser.parse_model(text)
    m.graph.initializer.extend([numpy_helper.from_array(np.ones(2, np.float32), "ones"),
                                numpy_helper.from_array(np.zeros(2, np.float32), "zeros")])
    s = graphcost.analyze(m, fusion=False, memory=False, batchnorm=False).model.parameter_split
    assert s.stored_count == 2 + 2  # ones, zeros: stored once each
    assert s.learnable_count == 2 * (2 + 2)  # two BNs' gamma and beta, 2 channels each
    assert s.buffer_count == 2 * (2 + 2) and s.buffers_by_kind == {"batchnorm_stats": 8}  # their mean and var
    assert s.merged_count == 8 + 8 - 4  # 8 roles of 2 elements, stored as 4
    assert s.learnable_count + s.buffer_count == s.stored_count + s.merged_count


def test_quantized_weight_behind_cast_is_learnable() -> None:
    """torchvision's quantized export: int8 weight → Cast → DequantizeLinear; per-channel scale and zero point."""
    text = """<ir_version: 8, opset_import: ["" : 17]>
        g (float[1,4] x) => (float[1,3] y) {
            wc = Cast<to = 3>(wq)
            w = DequantizeLinear<axis = 0>(wc, sc, zp)
            y = Gemm<transB = 1>(x, w, b)
        }"""
    m = onnx.parser.parse_model(text)
    m.graph.initializer.extend([numpy_helper.from_array(np.ones((3, 4), np.int8), "wq"),
                                numpy_helper.from_array(np.full(3, 0.1, np.float32), "sc"),
                                numpy_helper.from_array(np.zeros(3, np.int8), "zp"),
                                numpy_helper.from_array(np.ones(3, np.float32), "b")])
    s = graphcost.analyze(m, fusion=False, memory=False).model.parameter_split
    assert s.learnable_count == 3 * 4 + 3  # the int8 weight in logical elements + the float bias
    assert s.buffer_count == 3 + 3 and s.buffers_by_kind == {"quantization": 6}  # scale, zero point
    assert s.quantized_packed_bytes == 3 * 4  # one byte per int8


def test_explain_prints_what_the_count_depends_on(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "cnn.onnx"
    onnx.save(_with_weights(CNN, SHAPES), path)  # no scoped node names: module or functional is unknown
    assert main(["explain", str(path), "--against", "ptflops"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("note: ptflops's count for GlobalAveragePool, MaxPool, Relu depends on")
    assert lines[-1].split()[-1] == "8,266"  # the rows still end in the total
    assert main(["analyze", str(path), "--as", "ptflops"]) == 0
    assert "note: ptflops's count" in capsys.readouterr().out


def test_dynamo_zero_bias_of_a_bias_free_conv_is_a_buffer() -> None:
    """The dynamo exporter gives ``nn.Conv2d(bias=False)`` an all-zero bias named ``val_<n>``; a real bias keeps
    its state-dict name. Only the made-up one is left out of the learnable count."""
    text = """<ir_version: 8, opset_import: ["" : 18]>
        g (float[1,3,4,4] x) => (float[1,2,4,4] y) {
            a = Conv<kernel_shape = [1,1]>(x, w1, val_5)
            y = Conv<kernel_shape = [1,1]>(a, w2, conv2_bias)
        }"""
    m = onnx.parser.parse_model(text)
    m.graph.initializer.extend([numpy_helper.from_array(np.ones((2, 3, 1, 1), np.float32), "w1"),
                                numpy_helper.from_array(np.zeros(2, np.float32), "val_5"),
                                numpy_helper.from_array(np.ones((2, 2, 1, 1), np.float32), "w2"),
                                numpy_helper.from_array(np.zeros(2, np.float32), "conv2_bias")])
    s = graphcost.analyze(m, fusion=False, memory=False).model.parameter_split
    assert s.learnable_count == 2 * 3 + 2 * 2 + 2  # w1, w2 and the real (zero-initialized) conv2_bias
    assert s.buffers_by_kind == {"exporter_zero_bias": 2}  # val_5


def test_a_constant_of_shape_of_a_constant_shape_is_a_buffer() -> None:
    """A forward pass's ``x.new_zeros((pad_H, pad_W))`` (Swin's shifted-window mask) reaches a dynamo export as a
    ConstantOfShape of a constant shape: the graph has its value at load (a parameter for the bound), but it is
    one repeated value no training step updates."""
    text = """<ir_version: 8, opset_import: ["" : 18]>
        g (float[1,4] x) => (float[1,4] y) {
            shape = Constant<value = int64[2] {3, 4}>()
            mask = ConstantOfShape<value = float[1] {0.0}>(shape)
            a = MatMul(x, w)
            s = ReduceSum<keepdims = 1>(mask)
            y = Add(a, s)
        }"""
    m = onnx.parser.parse_model(text)
    m.graph.initializer.extend([numpy_helper.from_array(np.ones((4, 4), np.float32), "w")])
    s = graphcost.analyze(m, fusion=False, memory=False).model.parameter_split
    assert s.learnable_count == 4 * 4  # w only
    assert s.buffers_by_kind["generated_constant"] == 3 * 4  # the 3x4 mask of zeros


def test_a_table_fed_to_a_linear_is_a_buffer() -> None:
    """Swin V2's ``relative_coords_table`` (a float registered buffer) is the data operand of its ``cpb_mlp``
    Linear: stored, read through the legacy exporter's Identity copy, but no weight."""
    text = """<ir_version: 8, opset_import: ["" : 17]>
        g (float[1,2] x) => (float[1,4] y) { t2 = Identity(table) h = MatMul(t2, w) a = MatMul(x, w2) y = Add(a, h) }"""
    m = onnx.parser.parse_model(text)
    m.graph.initializer.extend([numpy_helper.from_array(np.ones((1, 3), np.float32), "table"),
                                numpy_helper.from_array(np.ones((3, 4), np.float32), "w"),
                                numpy_helper.from_array(np.ones((2, 4), np.float32), "w2")])
    s = graphcost.analyze(m, fusion=False, memory=False).model.parameter_split
    assert s.learnable_count == 3 * 4 + 2 * 4  # the two Linear weights
    assert s.buffers_by_kind == {"constant_table": 3}  # the 1×3 table
