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
        + POOL_OUT  # MaxPool: 1 per output element
        + GEMM_MACS + GEMM_OUT  # Gemm: MACs + bias
    ) == 15_434  # GlobalAveragePool and Flatten have no profile here


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
