"""Static what-ifs on ``analyze``: the roofline chapter's Problems 1 and 2 and its worked numbers, in closed form."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import onnx.parser
import pytest
from clihelp import run_cli as run
from onnx import TensorProto, numpy_helper

import graphcost
from graphcost.hardware.spec import HardwareSpec
from graphcost.whatif import Options, what_if

NPU = HardwareSpec("npu", {"int8": 4e12}, 25e9)  # Problem 1: a mobile NPU, 4 TOPS int8, 25 GB/s
EDGE = HardwareSpec("edge", {"float32": 2e12}, 50e9)  # the chapter's reference SoC: 2 TFLOP/s fp32, 50 GB/s
EDGE16 = HardwareSpec("edge16", {"float16": 4e12}, 50e9)  # Problem 2's device: 50 GB/s




def save(m: onnx.ModelProto, tmp_path: Path, name: str) -> str:
    path = tmp_path / name
    onnx.save(m, str(path))
    return str(path)


# ------------------------------------------------------------------------------------------------ Problem 1
def fc_int8() -> onnx.ModelProto:
    """Batch-1 fully connected layer 2048 → 2048, int8 weights and activations, constant zero points 0."""
    inits = [numpy_helper.from_array(np.ones((2048, 2048), np.int8), "w"),
             numpy_helper.from_array(np.array(0.05, np.float32), "a_scale"),
             numpy_helper.from_array(np.array(0, np.int8), "a_zp"),
             numpy_helper.from_array(np.array(0.01, np.float32), "w_scale"),
             numpy_helper.from_array(np.array(0, np.int8), "w_zp"),
             numpy_helper.from_array(np.array(0.1, np.float32), "y_scale"),
             numpy_helper.from_array(np.array(0, np.int8), "y_zp")]
    node = oh.make_node("QLinearMatMul", ["a", "a_scale", "a_zp", "w", "w_scale", "w_zp", "y_scale", "y_zp"], ["y"],
                        name="fc")
    g = oh.make_graph([node], "fc", [oh.make_tensor_value_info("a", TensorProto.INT8, [1, 2048])],
                      [oh.make_tensor_value_info("y", TensorProto.INT8, [1, 2048])], inits)
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])


def test_problem_1_mobile_npu_fc_layer() -> None:
    w = what_if(graphcost.analyze(fc_int8(), hardware=NPU), Options(budget_ms=1.0))
    assert w.ridge_point == 4e12 / 25e9 == 160  # ridge = peak ops/s ÷ bytes/s
    flops = (2 * 2048 * 2048  # one MAC per weight, 2 ops per MAC (constant zero points 0 cost nothing)
             + 2 * 2048)  # requantize each output: × combined scale (1) + y zero point (1)
    scalars = 3 * 4 + 3 * 1  # three float32 scales and three int8 zero points, read once
    moved = 2048 + 2048 * 2048 + 2048 + scalars  # int8 input + int8 weights + int8 output
    assert w.floor.flops == flops
    assert w.floor.bytes == moved
    assert w.nodes[0].intensity == pytest.approx(flops / moved)
    assert round(w.nodes[0].intensity or 0.0, 1) == 2.0  # ≈ 2 FLOP/B: 80× below the ridge
    assert w.floor.bound == "memory"
    assert w.floor.floor_s == pytest.approx(moved / 25e9)  # the bytes at 25 GB/s
    assert round(w.floor.floor_s * 1e6, 1) == 167.9  # µs
    fraction = (flops / (moved / 25e9)) / 4e12  # achieved ops/s at the bound ÷ peak
    assert round((2 * 2048 * 2048 / (moved / 25e9)) / 4e12 * 100, 2) == 1.25  # the chapter's MACs alone
    assert w.floor.peak_fraction == pytest.approx(fraction)
    assert w.nodes[0].peak_fraction == pytest.approx(fraction)
    assert round(fraction * 100, 2) == 1.25  # % of peak


def test_problem_1_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = save(fc_int8(), tmp_path, "fc.onnx")
    code, out, err = run(capsys, "analyze", path, "--peak-flops", "int8=4e12", "--memory-bandwidth", "25e9",
                         "--budget-ms", "1")
    assert code == 0, err
    assert "ridge 160.0 FLOP/B" in out and "floor: 167.9 µs" in out and "1.25% overall" in out
    assert "fits" in out


# ------------------------------------------------------------------------------------------------ Problem 2
def residual_tail() -> onnx.ModelProto:
    """Conv → BatchNormalization → Relu → Add(skip), fp16, on 1×64×112×112 (the chapter's residual block tail)."""
    x = oh.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 64, 112, 112])
    skip = oh.make_tensor_value_info("skip", TensorProto.FLOAT16, [1, 64, 112, 112])
    y = oh.make_tensor_value_info("y", TensorProto.FLOAT16, [1, 64, 112, 112])
    inits = [numpy_helper.from_array(np.full((64, 64, 3, 3), 0.01, np.float16), "w")]
    inits += [numpy_helper.from_array(np.ones(64, np.float16), n) for n in ("gamma", "beta", "mean", "var")]
    nodes = [oh.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             oh.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["bn"], name="bn"),
             oh.make_node("Relu", ["bn"], ["r"], name="relu"),
             oh.make_node("Add", ["r", "skip"], ["y"], name="add")]
    return oh.make_model(oh.make_graph(nodes, "tail", [x, skip], [y], inits), opset_imports=[oh.make_opsetid("", 17)])


def test_problem_2_fusion_saves_six_traversals() -> None:
    w = what_if(graphcost.analyze(residual_tail(), hardware=EDGE16), Options(repeat=16))
    (g,) = w.fusion
    assert set(g.nodes) == {"conv", "bn", "relu", "add"}
    t = 1 * 64 * 112 * 112 * 2  # one fp16 traversal of the tensor
    assert t == 1_605_632
    # unfused: conv writes (1), BN reads + writes (2), ReLU reads + writes (2), Add reads both and writes (3) = 8;
    # fused: the skip read and the result write = 2. The conv's input, weights and BN parameters are read in both.
    assert g.bytes_saved == (8 - 2) * t == 9_633_792
    assert g.traversal_bytes == t and g.traversals_saved == 6
    assert g.memory_time_saved_s == pytest.approx(6 * t / 50e9)  # bytes saved at 50 GB/s
    assert round(g.memory_time_saved_s * 1e6) == 193  # µs per block
    assert round(g.memory_time_saved_s * 16 * 1e3, 2) == 3.08  # ms for 16 blocks
    assert g.to_dict()["memory_time_saved_total_s"] == pytest.approx(16 * 6 * t / 50e9)


def test_problem_2_prints_the_sixteen_block_number(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = save(residual_tail(), tmp_path, "tail.onnx")
    code, out, err = run(capsys, "analyze", path, "--peak-flops", "float16=4e12", "--memory-bandwidth", "50e9",
                         "--repeat", "16")
    assert code == 0, err
    assert "saves 9,633,792 B = 6.00 × 1,605,632 B" in out
    assert "192.7 µs per block" in out  # 9,633,792 B ÷ 50 GB/s
    assert "× 16 blocks: 154,140,672 B, 3.083 ms" in out  # 16 × 9,633,792 B; 16 × 192.7 µs


# ------------------------------------------------------------------------------------ energy and power floor
def relu_40mb() -> onnx.ModelProto:
    return onnx.parser.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
        g (float[5000,1000] x) => (float[5000,1000] y) { y = Relu(x) }""")


def test_energy_floor_40_mb_and_power_at_30_fps() -> None:
    w = what_if(graphcost.analyze(relu_40mb(), hardware=EDGE), Options(fps=30, power_envelope_w=0.1))
    moved = 5000 * 1000 * 4 * 2  # float32 read once + written once = 40 MB per inference
    assert w.floor.dram_bytes == moved == 40_000_000
    assert w.power is not None
    assert w.power.energy_j == pytest.approx(40e6 * 160e-12)  # bytes × 160 pJ/B
    assert round(w.power.energy_j * 1e3, 1) == 6.4  # mJ
    assert w.power.power_w == pytest.approx(40e6 * 160e-12 * 30)  # J per inference × 30 inferences/s
    assert round(w.power.power_w or 0.0, 2) == 0.19  # W
    assert w.power.within is False  # 0.192 W > a 0.1 W envelope
    assert w.slice_s == pytest.approx(1 / 30)  # --fps alone: the whole frame is the slice


def test_spec_sustained_power_is_the_default_envelope() -> None:
    hw = HardwareSpec("sealed", {"float32": 2e12}, 50e9, sustained_power_w=3.0)
    w = what_if(graphcost.analyze(relu_40mb(), hardware=hw), Options(fps=30))
    assert w.power is not None and w.power.envelope_w == 3.0 and w.power.within is True  # 0.192 W ≤ 3 W
    assert w.power.envelope_source == "sealed sustained_power_w"


# ------------------------------------------------------------------------------------------------ budget
def test_budget_veto_fits_and_misses() -> None:
    r = graphcost.analyze(relu_40mb(), hardware=EDGE)
    floor = 40e6 / 50e9  # 0.8 ms, memory bound: the clock does not move it
    veto = what_if(r, Options(budget_ms=0.5)).budget
    assert veto is not None and veto.veto and "VETO" in veto.verdict  # 0.8 ms floor > 0.5 ms slice
    ok = what_if(r, Options(budget_ms=2.0, p99_factor=1.35, sustained_clock=0.72)).budget
    assert ok is not None and ok.p99_sustained_s == pytest.approx(floor * 1.35 / 0.72)  # 1.5 ms ≤ 2 ms
    assert ok.fits
    miss = what_if(r, Options(budget_ms=1.0, p99_factor=1.35, sustained_clock=0.72)).budget
    assert miss is not None and not miss.fits and not miss.veto
    assert miss.speedup_needed == pytest.approx(floor * 1.35 / 0.72 / 1e-3)  # 1.5×


def test_sustained_clock_stretches_compute_only() -> None:
    r = graphcost.analyze(onnx.parser.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
        g (float[1,256,56,56] x, float[256,256,3,3] w) => (y) { y = Conv<pads=[1,1,1,1]>(x, w) }"""),
        hardware=EDGE)
    w = what_if(r, Options(budget_ms=2.0, sustained_clock=0.72))
    flops = 2 * (256 * 56 * 56) * 256 * 9  # 2 × output elements × Cin·kh·kw
    assert w.floor.floor_s == pytest.approx(flops / 2e12)  # compute bound: 1.85 ms
    assert w.floor.floor_sustained_s == pytest.approx(flops / 2e12 / 0.72)  # 2.57 ms at 72 % clock
    assert w.budget is not None and w.budget.veto  # 2.57 ms > 2 ms: no kernel work fits it


# ------------------------------------------------------------------------------------------------ precision
def matmul_batch() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.zeros((1024, 1024), np.float32), "w")
    g = oh.make_graph([oh.make_node("MatMul", ["a", "w"], ["y"], name="mm")], "mm",
                      [oh.make_tensor_value_info("a", TensorProto.FLOAT, ["batch", 1024])],
                      [oh.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 1024])], [w])
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])


def test_precision_what_if_recosts_weights_and_picks_the_peak() -> None:
    hw = HardwareSpec("npu2", {"float32": 2e12, "int8": 8e12}, 50e9)
    r = graphcost.analyze(matmul_batch(), hardware=hw)  # batch defaults to 1
    weights_only = what_if(r, Options(weights="int8"))
    p = weights_only.precision
    assert p is not None and p.weight_tensors == 1
    fp32_bytes = (1024 + 1024 * 1024 + 1024) * 4  # a, w, y in float32
    assert p.bytes_before == fp32_bytes
    assert p.bytes_after == (1024 + 1024) * 4 + 1024 * 1024 * 1  # the weight in int8, activations unchanged
    assert weights_only.nodes[0].peak_dtype == "float32"  # weight-only: compute stays in the activations' dtype
    both = what_if(r, Options(weights="int8", activations="int8"))
    assert both.precision is not None and both.precision.bytes_after == 1024 + 1024 * 1024 + 1024  # all int8
    assert both.nodes[0].peak_dtype == "int8"
    assert both.nodes[0].compute_time_s == pytest.approx(2 * 1024 * 1024 / 8e12)  # int8 peak
    assert both.precision.speedup == pytest.approx(fp32_bytes / (1024 + 1024 * 1024 + 1024))  # memory bound: 4×
    int4 = what_if(r, Options(weights="int4"))
    assert int4.precision is not None and int4.precision.bytes_after == (1024 + 1024) * 4 + 1024 * 1024 // 2


def test_precision_leaves_a_graph_input_weight_alone() -> None:
    r = graphcost.analyze(onnx.parser.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
        g (float[4,64] a, float[64,64] b) => (float[4,64] y) { y = MatMul(a, b) }"""), hardware=EDGE)
    w = what_if(r, Options(weights="int8"))
    assert w.precision is not None and w.precision.weight_tensors == 0  # b is a graph input, not a weight
    assert w.precision.bytes_after == w.precision.bytes_before
    assert any("no MatMul/Gemm/Conv weight" in n for n in w.notes)


# ------------------------------------------------------------------------------------------------ sweep
def test_sweep_finds_where_the_model_crosses_the_ridge() -> None:
    r = graphcost.analyze(matmul_batch(), hardware=EDGE)
    values = (1, 2, 4, 8, 16, 32, 64, 128, 256)
    s = what_if(r, Options(sweep=("batch", values))).sweep
    assert s is not None and s.ridge_point == 40  # 2e12 ÷ 50e9
    for row, b in zip(s.rows, values, strict=True):
        flops = 2 * b * 1024 * 1024  # 2 × batch × K × N
        moved = 4 * (b * 1024 + 1024 * 1024 + b * 1024)  # fp32 a, w, y once
        assert row.flops == flops and row.bytes == moved
        assert row.bound == ("compute" if flops / 2e12 >= moved / 50e9 else "memory")
    assert s.rows[0].intensity == pytest.approx(0.5, rel=2e-3)  # ≈ 2m/s at m = 1, s = 4 B
    # intensity = ridge: 2·b·2^20 = 40 · 4 · (2·1024·b + 2^20) → b = 160·2^20 / (2^21 − 160·2048)
    exact = 160 * 2**20 / (2**21 - 160 * 2048)
    assert s.exact_crossing == pytest.approx(exact)  # ≈ 94.8 rows
    assert s.crossing == 128  # the first swept value above it


def test_sweep_html_has_the_bound_vs_batch_chart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = save(matmul_batch(), tmp_path, "mm.onnx")
    out_html = tmp_path / "r.html"
    code, _, err = run(capsys, "analyze", path, "--peak-flops", "2e12", "--memory-bandwidth", "50e9",
                       "--sweep", "batch=1,2,4,8,16,32,64,128,256", "--format", "html", "-o", str(out_html))
    assert code == 0, err
    page = out_html.read_text(encoding="utf-8")
    assert '<h2 id="whatif">' in page and "<svg" in page.split('id="whatif"')[1] and "ridge at batch" in page


def test_whatif_json_section(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = save(matmul_batch(), tmp_path, "mm.onnx")
    code, out, err = run(capsys, "analyze", path, "--peak-flops", "2e12", "--memory-bandwidth", "50e9",
                         "--format", "json", "--budget-ms", "1", "--fps", "30", "--sweep", "batch=1,128")
    assert code == 0, err
    d = json.loads(out)["whatif"]
    assert {"options", "ridge_point", "floor", "nodes", "slice_s", "budget", "power", "precision", "sweep",
            "fusion", "notes"} <= set(d)
    assert d["slice_s"] == pytest.approx(1e-3) and d["budget"]["fits"] is True
    assert [r["value"] for r in d["sweep"]["rows"]] == [1, 128]


def test_no_whatif_flags_no_section(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = save(matmul_batch(), tmp_path, "mm.onnx")
    code, out, err = run(capsys, "analyze", path, "--format", "json")
    assert code == 0, err
    assert "whatif" not in json.loads(out)


@pytest.mark.parametrize("flags, says", [
    (("--sweep", "seq=1,2"), "do not depend on a dim named 'seq'"),
    (("--sweep", "batch"), "expected DIM=V1,V2"),
    (("--sweep", "batch=1,x"), "not a whole number"),
    (("--sweep", "batch=1,2", "--weights", "int8"), "without --weights"),
    (("--weights", "int3"), "expected one of"),
    (("--sustained-clock", "1.5"), "must be in (0, 1]"),
    (("--p99-factor", "0.5"), "must be ≥ 1"),
    (("--budget-ms", "-1"), "must be > 0"),
    (("--fps", "nan"), "must be > 0"),
    (("--repeat", "0"), "whole number ≥ 1"),
    (("--repeat", "2", "--no-fusion"), "needs the fusion pass"),
])
def test_bad_whatif_flags_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          flags: tuple[str, ...], says: str) -> None:
    path = save(matmul_batch(), tmp_path, "mm.onnx")
    before = Path(path).read_bytes()
    code, out, err = run(capsys, "analyze", path, *flags)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and says in err and "Traceback" not in err
    assert Path(path).read_bytes() == before  # the input is never changed


# ------------------------------------------------------------------------------------------------ the docs
def test_budgets_doc_shows_real_output(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ``$ graphcost …`` block in docs/budgets.md is the command's output today (its model script run here)."""
    import re
    import shlex

    doc = (Path(__file__).resolve().parents[1] / "docs" / "budgets.md").read_text(encoding="utf-8")
    script = re.search(r"```python\n(.*?)```", doc, re.S)
    assert script is not None
    monkeypatch.chdir(tmp_path)
    exec(compile(script.group(1), "budgets.md", "exec"), {})  # writes the example models into tmp_path
    blocks = re.findall(r"```\n(\$ graphcost .*?)\n```", doc, re.S)
    assert len(blocks) == 8
    for block in blocks:
        command, *shown = block.splitlines()
        argv, _, pipe = command[len("$ graphcost "):].partition(" | ")
        code, out, err = run(capsys, *shlex.split(argv))
        assert code == 0, err
        lines = out.rstrip("\n").splitlines()
        if pipe:  # sed -n '/^What-ifs/,$p': from the what-if section on
            lines = lines[next(i for i, x in enumerate(lines) if x.startswith("What-ifs")):]
        assert lines == shown, command
