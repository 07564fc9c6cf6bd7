"""``graphcost fusion --against ort``: ORT's optimized graph mapped back to source nodes, compared group by group.

Tiny graphs (ORT runs in milliseconds) check the mapping and the closed-form bytes; the ``heavy`` tests export
ResNet-50 and GPT-2 small and check that the numbers add up: total ORT − total ideal = Σ per-group difference.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto, numpy_helper

from graphcost.cli import main
from graphcost.hardware.spec import HardwareSpec
from graphcost.load import load
from graphcost.measure.fusion_ort import compare, map_back, optimize
from graphcost.passes.costs import count_costs, tensor_bytes
from graphcost.passes.fusion import FusionResult, fuse
from graphcost.passes.shapes import infer_shapes

ROOT = Path(__file__).resolve().parents[1]
TINY_CNN = ROOT / "models" / "tiny_cnn.onnx"
EDGE = HardwareSpec("edge", {"float32": 2e12, "float16": 4e12}, 50e9)
FP32 = 4


def _conv_model(path: Path) -> Path:
    """x → conv1 → relu1 → conv2 → add(c2, r1) → relu2 (fusion.md E2), weights as real initializers."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("w1", (16, 16, 3, 3)), ("b1", (16,)), ("w2", (16, 16, 3, 3)), ("b2", (16,)))]
    nodes = [oh.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             oh.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             oh.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             oh.make_node("Add", ["c2", "r1"], ["a"], name="add"),
             oh.make_node("Relu", ["a"], ["y"], name="relu2")]
    g = oh.make_graph(nodes, "e2", [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8, 8])],
                      [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 8, 8])], inits)
    onnx.save(oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)]), path)
    return path


def _analyze(path: Path) -> FusionResult:
    graph = infer_shapes(load(path)).graph
    return fuse(graph, count_costs(graph))


def test_e2_at_extended_fuses_conv_relu_but_not_conv_add_relu(tmp_path: Path) -> None:
    path = _conv_model(tmp_path / "e2.onnx")
    before = sorted(os.listdir(tmp_path))
    r = _analyze(path)
    assert [g.nodes for g in r.groups] == [("conv1", "relu1"), ("conv2", "add", "relu2")]
    mapping = map_back(r.graph, optimize(path, "extended"), "extended")
    assert sorted(os.listdir(tmp_path)) == before  # the optimized model never lands next to the input
    assert mapping.unit_of["conv1"] == mapping.unit_of["relu1"]  # FusedConv keeps conv1's name
    assert len({mapping.unit_of[n] for n in ("conv2", "add", "relu2")}) == 3  # Conv+Add+Relu is CUDA-only
    c = compare(r, mapping, EDGE, {})
    g0, g1 = c.groups
    assert (g0.status, g1.status) == ("same", "less")
    assert [k.label for k in g0.kernels] == ["ms.FusedConv(Relu)"]
    assert [k.op_type for k in g1.kernels] == ["Conv", "Add", "Relu"]
    act = 16 * 8 * 8 * FP32  # one activation, 4 KiB
    assert g0.bytes_left == 0
    assert g1.bytes_left == (act + act  # conv2's output written and read back by the Add
                             + act  # the Add reads r1 a second time (conv2 already read it)
                             + act + act)  # the Add's output written and read back by Relu
    assert g1.time_left_s == pytest.approx(5 * act / 50e9)
    t = c.totals
    assert t.bytes_left == t.bytes_ort - t.bytes_ideal == sum(g.bytes_left for g in c.groups) == 5 * act
    assert t.groups_less == 1 and t.groups_more == 0


def test_basic_level_keeps_every_kernel_apart(tmp_path: Path) -> None:
    path = _conv_model(tmp_path / "e2.onnx")
    r = _analyze(path)
    c = compare(r, map_back(r.graph, optimize(path, "basic"), "basic"), EDGE, {})
    assert [g.status for g in c.groups] == ["less", "less"]  # no activation fusion below EXTENDED
    assert c.totals.bytes_ort == sum(g.bytes_unfused for g in c.groups)  # ORT at BASIC: every node its own kernel


def _ort_total(r: FusionResult, mapping) -> int:  # type: ignore[no-untyped-def]
    """ORT's bytes straight from its units (not through the per-group attribution)."""
    ran = set(mapping.unit_of)
    total = 0
    for u in mapping.units:
        if u.conversion_of is not None:
            total += 2 * tensor_bytes(r.graph.tensor(u.conversion_of))  # type: ignore[operator]  # read + write
        elif u.covers:
            total += r.crossing(u.covers, runs=ran.__contains__).bytes  # type: ignore[operator]
    return total


def test_shipped_cnn_at_all_levels_adds_up() -> None:
    r = _analyze(TINY_CNN)
    for level in ("basic", "extended", "all"):
        mapping = map_back(r.graph, optimize(TINY_CNN, level), level)
        c = compare(r, mapping, EDGE, {})
        t = c.totals
        assert t.bytes_ort == _ort_total(r, mapping)  # the attribution loses nothing
        assert t.bytes_ort - t.bytes_ideal == t.bytes_left == sum(g.bytes_left or 0 for g in c.groups)
        assert t.bytes_unfused - t.bytes_ideal == sum(g.bytes_unfused - g.bytes_ideal for g in c.groups)
        assert not mapping.overlaps


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        code = main(list(args))
    except SystemExit as e:
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_text_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "fusion", str(TINY_CNN))
    assert code == 0 and "Boundaries by reason" in out and "Totals" in out
    code, out, _ = run(capsys, "fusion", str(TINY_CNN), "--against", "ort:extended", "--format", "json")
    assert code == 0
    doc = json.loads(out)
    assert set(doc["fusion"]) == {"policy", "groups", "boundaries", "totals"}
    a = doc["against"]
    assert a["engine"] == "onnxruntime" and a["level"] == "extended"
    assert a["totals"]["bytes_left"] == sum(g["bytes_left"] for g in a["groups"])
    code, out, _ = run(capsys, "fusion", str(TINY_CNN), "--against", "ort", "--hardware", "edge-soc",
                        "--memory-bandwidth", "100e9")
    assert code == 0 and "level all" in out and "100.00 GB/s" in out


@pytest.mark.parametrize("args, message", [
    (("--against", "tvm"), "only 'ort'"),
    (("--against", "ort:max"), "level must be one of"),
    (("--dim", "nope=3"), "no dim of that name"),
    (("--policy", "greedy"), "unknown fusion policy"),
])
def test_cli_bad_input_is_one_line_exit_2(capsys: pytest.CaptureFixture[str], args: tuple[str, ...],
                                          message: str) -> None:
    code, out, err = run(capsys, "fusion", str(TINY_CNN), *args)
    assert code == 2 and out == "" and message in err and err.count("\n") == 1


# --------------------------------------------------------------------------- heavy: real exports
def _export(name: str, path: Path) -> Path:
    pytest.importorskip("torch")
    from graphcost.models.export import export_reference

    return export_reference(name, path)


def _check_sums(doc: dict) -> dict:  # type: ignore[type-arg]
    a, f = doc["against"], doc["fusion"]
    t = a["totals"]
    assert t["bytes_ort"] - t["bytes_ideal"] == t["bytes_left"] == sum(g["bytes_left"] for g in a["groups"])
    assert t["bytes_ideal"] == f["totals"]["bytes_fused"] and t["bytes_unfused"] == f["totals"]["bytes_unfused"]
    assert f["totals"]["bytes_unfused"] - f["totals"]["bytes_fused"] == sum(
        g["bytes_unfused"] - g["bytes_fused"] for g in f["groups"])
    assert t["time_left_s"] == pytest.approx(t["bytes_left"] / 50e9)
    return a


@pytest.mark.heavy
def test_resnet50_against_ort(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _export("resnet50", tmp_path / "resnet50.onnx")
    code, out, _ = run(capsys, "fusion", str(path), "--against", "ort:extended", "--format", "json",
                       "--hardware", "edge-soc")
    assert code == 0
    a = _check_sums(json.loads(out))
    less = [g for g in a["groups"] if g["status"] == "less"]
    # At EXTENDED, ORT's CPU FusedConv takes Relu but not Add+Relu: each bottleneck's conv3 → Add → Relu is
    # three kernels where the ideal runs one.
    assert len(less) == 16
    assert all([k["op_type"] for k in g["kernels"]] == ["Conv", "Add", "Relu"] for g in less)
    assert a["totals"]["bytes_left"] > 0
    assert all(g["status"] in ("same", "less") for g in a["groups"])
    code, out, _ = run(capsys, "fusion", str(path), "--against", "ort", "--format", "json")
    assert code == 0
    _check_sums(json.loads(out))  # level all: NCHWc kernels (machine-dependent), the sums still hold


@pytest.mark.heavy
def test_gpt2_against_ort(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _export("gpt2_small", tmp_path / "gpt2.onnx")
    code, out, _ = run(capsys, "fusion", str(path), "--against", "ort", "--format", "json")
    assert code == 0
    a = _check_sums(json.loads(out))
    by_status: dict[str, list[dict]] = {}  # type: ignore[type-arg]
    for g in a["groups"]:
        by_status.setdefault(g["status"], []).append(g)
    kernels = [tuple(k["op_type"] for k in g["kernels"]) for g in by_status["less"]]
    # The MLP: Gemm then FastGelu (ORT fused the GELU, not into the Gemm); attention scores: FusedMatMul then Where.
    assert sum(1 for k in kernels if "FastGelu" in k and "Gemm" in k) == 12
    assert sum(1 for k in kernels if "FusedMatMul" in k and "Where" in k) == 12
    assert [g["nodes"][-1] for g in by_status["folded"]] == ["/transformer/wpe/Gather"]  # its indices are constant
    assert a["totals"]["bytes_left"] > 0
