"""The gap report: set bounds in closed form, the diagnosis bands, the budget rule, and a real ORT run."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import onnx
import onnx.parser
import pytest

from graphcost.gap import BANDS, Bounder, Budget, diagnose, faster_than_bound
from graphcost.hardware.spec import HardwareSpec
from graphcost.load import load
from graphcost.measure import OrtRun, Timing, gap_report, run_ort
from graphcost.passes.costs import count_costs
from graphcost.passes.shapes import infer_shapes

FP32 = 4
ROOT = Path(__file__).resolve().parents[1]
HW = HardwareSpec("t", {"float32": 1e12}, 10e9)  # 1 TFLOP/s, 10 GB/s, no on-chip levels


def _bounder(text: str, hw: HardwareSpec = HW, residency: str = "cold") -> Bounder:
    graph = infer_shapes(load(onnx.parser.parse_model(text))).graph
    return Bounder(graph, count_costs(graph).nodes, hw, {}, residency=residency)


CONV_RELU = """<ir_version: 8, opset_import: ["" : 17]>
g (float[1,8,16,16] x, float[8,8,3,3] w) => (y) {
    c = Conv <pads = [1, 1, 1, 1]> (x, w)
    y = Relu(c)
}"""


def test_a_set_moves_its_external_tensors_once() -> None:
    b = _bounder(CONV_RELU)
    act = 1 * 8 * 16 * 16 * FP32  # x, c and y are all 1×8×16×16 floats
    weights = 8 * 8 * 3 * 3 * FP32
    macs = 8 * 16 * 16 * 8 * 3 * 3  # output elements × (input channels × kernel)
    fused = b.of([n.name for n in b.graph.nodes()])
    assert fused.flops == 2 * macs + act // FP32  # conv MACs × 2 + one max per element for the Relu
    assert fused.bytes == act + weights + act  # read x and w, write y; c stays inside the set
    conv = b.of([next(iter(b.graph.nodes())).name])
    assert conv.bytes == act + weights + act  # alone, the conv writes c for the Relu to read
    assert fused.memory_s == pytest.approx((2 * act + weights) / 10e9)
    assert fused.compute_s == pytest.approx((2 * macs + act // FP32) / 1e12)
    assert fused.bound_s == max(fused.memory_s, fused.compute_s)  # type: ignore[type-var]


def test_warm_residency_uses_the_level_that_holds_the_set() -> None:
    # L2-like level of 1 MiB at 100 GB/s: the whole conv+relu set (~21 KB) fits
    hw = HardwareSpec("c", {"float32": 1e12}, 10e9, cache_levels=((1 << 20, 100e9),))
    warm = _bounder(CONV_RELU, hw, "warm")
    cold = _bounder(CONV_RELU, hw, "cold")
    names = [n.name for n in warm.graph.nodes()]
    act = 8 * 16 * 16 * FP32
    weights = 8 * 8 * 3 * 3 * FP32
    moved = 2 * act + weights
    w, c = warm.of(names), cold.of(names)
    assert w.dram_bytes == 0 and w.memory_s == pytest.approx(moved / 100e9)
    assert c.dram_bytes == moved  # cold: x, w and the graph output y all cross DRAM
    assert c.memory_s == pytest.approx(max(moved / 10e9, moved / 100e9))


VIEWS = """<ir_version: 8, opset_import: ["" : 17]>
g (float[4,256] x) => (z) <int64[1] flat = {1024}> {
    a = Relu(x)
    v = Reshape(a, flat)
    z = Sigmoid(v)
}"""


def test_views_move_nothing_and_pass_their_data_through() -> None:
    b = _bounder(VIEWS)
    relu, view, sig = (n.name for n in b.graph.nodes())
    t = 1024 * FP32  # every tensor here holds 1,024 floats
    assert b.of([view]).bytes == 0  # a Reshape alone moves nothing, as its per-node rule says
    assert b.of([relu, view]).bytes == 2 * t  # read x; a leaves the set through the view, so it is written
    assert b.of([view, sig]).bytes == 2 * t  # the Sigmoid reads a (through the view) and writes z
    assert b.of([relu, view, sig]).bytes == 2 * t  # x in, z out; a and its view never leave the set


def test_conversion_moves_its_tensor_in_and_out() -> None:
    b = _bounder(CONV_RELU)
    assert b.of_conversion("x").bytes == 2 * 8 * 16 * 16 * FP32


@pytest.mark.parametrize(("ratio", "code"), [(1.1, "at-roof"), (1.2, "at-roof"), (3.0, "bytes-not-counted"),
                                             (10.0, "inefficient"), (20.0, "overhead"), (500.0, "overhead")])
def test_bands(ratio: float, code: str) -> None:
    bound = 1e-3  # 1 ms: timer resolution is negligible here
    assert diagnose(ratio * bound, bound, 1e-6).code == code


def test_faster_than_the_bound_beyond_noise_is_an_accounting_error() -> None:
    bound = 100e-6
    # noise = resolution 1 µs + 5 % of the bound (5 µs): 94 µs is within it, 93 µs is not
    assert not faster_than_bound(94.5e-6, bound, 1e-6)
    assert faster_than_bound(93e-6, bound, 1e-6)
    d = diagnose(50e-6, bound, 1e-6)
    assert d.code == "accounting" and "FASTER THAN THE BOUND" in d.verdict
    assert diagnose(1e-3, None, 1e-6).code == "unknown"
    assert diagnose(1e-6, 0.0, 1e-6).code == "overhead"  # a view: the bound charges nothing
    assert [b.upto for b in BANDS] == sorted(b.upto for b in BANDS)


def test_budget_the_seed_chapters_problem_4() -> None:
    # 9.5 ms mean on the bench; p99 = 1.35 × mean; sustained clock 72 % of the bench clock; 12 ms slice
    p99 = 9.5e-3 * 1.35
    b = Budget(12e-3, 0.72, p99, floor_s=5e-3)
    assert b.p99_sustained_s == pytest.approx(p99 / 0.72)  # 17.8 ms
    assert not b.fits and not b.veto
    assert b.speedup_needed == pytest.approx(p99 / 0.72 / 12e-3)  # 1.48×
    assert "needs 1.48×" in b.verdict
    assert Budget(12e-3, 0.72, p99, floor_s=13e-3).veto  # the floor alone exceeds the slice
    assert "VETO" in Budget(12e-3, 0.72, p99, floor_s=13e-3).verdict
    assert Budget(20e-3, 0.72, p99, floor_s=5e-3).fits


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "graphcost", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=600)


def test_gap_cli_on_a_shipped_model(tmp_path: Path) -> None:
    out = tmp_path / "gap.json"
    r = _cli("gap", "models/tiny_cnn.onnx", "--hardware", "edge-soc", "--warmup", "2", "--repeats", "5",
             "--format", "json", "-o", str(out), "--budget-ms", "1000", "--sustained-clock", "0.72")
    assert r.returncode in (0, 1), r.stderr
    d = json.loads(out.read_text())
    assert d["schema"] == "graphcost.gap/1"
    assert d["kernels"] and d["groups"] and d["models"][0]["runner"] == "onnxruntime/cpu"
    covered = {n for k in d["kernels"] for n in k["nodes"]}
    assert "/fc/Gemm" in covered  # a source node reached through ORT's kernels
    assert set(d["node_times"]) == covered | {n for n, t in d["node_times"].items() if t.get("folded")}
    assert d["node_times"]["/fc/Gemm"]["observed_s"] > 0
    assert d["budget"]["sustained_clock"] == 0.72 and d["budget"]["fits"] in (True, False)
    assert (r.returncode == 1) == bool(d["accounting_errors"])


def test_bench_binds_unbound_dims_to_1_with_a_warning() -> None:
    r = _cli("bench", "models/tiny_transformer.onnx", "--warmup", "1", "--repeats", "3")
    assert r.returncode == 0, r.stderr
    assert "unbound dims batch=1, seq=1" in r.stderr
    assert "onnxruntime/cpu" in r.stdout and "input_ids=1x1" in r.stdout
    j = _cli("bench", "models/tiny_transformer.onnx", "--dim", "batch=3", "--dim", "seq=5", "--warmup", "1",
             "--repeats", "3", "--format", "json")
    d = json.loads(j.stdout)
    assert d["schema"] == "graphcost.bench/1" and d["input_shapes"]["input_ids"] == [3, 5]
    assert d["latency"]["count"] == 3 and d["kernels"] and d["memory"]["source"]


def test_measured_roofs_are_cached_per_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from graphcost.hardware.measure import cache_path, measured_roofs

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first, path, fresh = measured_roofs(quick=True)
    assert fresh and path == cache_path() and path.is_relative_to(tmp_path) and first.kind == "measured"
    again, _, fresh_again = measured_roofs()
    assert not fresh_again and again.peak_flops == first.peak_flops and again.cache_levels == first.cache_levels


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    for args in (("gap", str(tmp_path / "missing.onnx")), ("bench", "ref:nope/cnn"),
                 ("gap", "models/tiny_cnn.onnx", "--sustained-clock", "1.5"),
                 ("compare", "--model", "resnet"), ("compare", "--frameworks", "mxnet"),
                 ("bench", "models/tiny_cnn.onnx", "--dim", "batch=3"),  # tiny_cnn's shapes are static
                 ("bench", "models/tiny_cnn.onnx", "--compile"), ("gap", "models/tiny_cnn.onnx", "--bogus")):
        r = _cli(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("graphcost: "), (args, r.stderr)
    assert "(see graphcost gap --help)" in _cli("gap", "x.onnx", "--bogus").stderr  # the subcommand's help


def _reference_models() -> list[tuple[str, dict[str, int]]]:
    shipped = [("models/tiny_cnn.onnx", {"batch": 2}), ("models/tiny_transformer.onnx", {"batch": 2, "seq": 16})]
    for p in sorted((ROOT / "models" / "zoo").glob("*.onnx")):
        dims = {"batch": 2, "seq": 16} if "transformer" in p.name else {"batch": 2}
        shipped.append((str(p.relative_to(ROOT)), dims))
    return shipped


def _timed(run: OrtRun, kernel_s: Mapping[str, float], *, default_s: float, latency_s: float) -> OrtRun:
    """``run`` with synthetic times: kernel ``k`` takes ``kernel_s[k]`` (else ``default_s``) in every profiled run and
    each session run takes ``latency_s``. The kernels, their mapping to source nodes and the binding stay real."""
    kernels = tuple(dataclasses.replace(k, timing=Timing((kernel_s.get(k.name, default_s),) * k.timing.count))
                    for k in run.kernels)
    return dataclasses.replace(run, kernels=kernels, latency=Timing((latency_s,) * run.latency.count))


SLOW = HardwareSpec("slow", {"float32": 1e9}, 100e6)  # 1 GFLOP/s, 100 MB/s: bounds of ~300 µs, far above 1 µs


def test_a_synthetic_time_faster_than_the_bound_is_an_accounting_error(tmp_path: Path) -> None:
    # The report's error path, fed synthetic times on a real run's kernels: no measured time decides the outcome.
    path = tmp_path / "conv_relu.onnx"
    onnx.save(onnx.parser.parse_model(CONV_RELU), str(path))
    run = run_ort(path, warmup=1, repeats=3)

    def report(kernel_s: Mapping[str, float], latency_s: float = 1.0) -> gap_report.GapReport:
        return gap_report.build(str(path), _timed(run, kernel_s, default_s=1.0, latency_s=latency_s), hardware=SLOW)

    slow = report({})  # every kernel and every run takes 1 s
    assert slow.kernels and slow.errors == ()
    assert {r.diagnosis.code for r in (*slow.models, *slow.kernels, *slow.groups)} == {"overhead"}  # 1 s ≫ 300 µs
    kernel = slow.kernels[0]
    bound = kernel.bound.bound_s
    n = len(kernel.kernels)  # the unit's time is the sum of its kernels', each timed to the whole µs
    assert bound is not None and bound > 20e-6 * n  # so that 0.9 × bound is beyond the noise band below
    # noise = 1 µs per profiled kernel + 5 % of the bound: faster than the bound only below 0.95 × bound − n µs
    for factor, flagged in ((0.5, True), (0.9, True), (0.97, False), (1.0, False), (2.0, False)):
        r = report({k: factor * bound / n for k in kernel.kernels})
        assert (kernel.label in {e.label for e in r.errors if e.level == "kernel"}) == flagged, factor
        assert [e for e in r.errors if e.level == "model"] == []  # the session runs still take 1 s
        assert (f"kernel {kernel.label}" in r.to_dict()["accounting_errors"]) == flagged
    model_bound = slow.models[0].bound.bound_s
    assert model_bound is not None
    fast_model = report({}, latency_s=0.5 * model_bound)  # the whole model at half its bound
    assert [e.level for e in fast_model.errors] == ["model"]
    assert fast_model.to_dict()["accounting_errors"] == ["model whole model"]


@pytest.mark.heavy
def test_reference_kernels_faster_than_their_bound_are_flagged() -> None:
    # Was test_no_reference_kernel_beats_measured_roofs: it timed the kernels against freshly measured roofs and
    # failed on a loaded machine (roofs measured while it was busy are too low). That measurement is a benchmark
    # now (bench/bench_no_kernel_beats_roofs.py: roofs and kernels interleaved, best of each, a stated noise band).
    # Here every reference model's real ORT kernels and mapping get synthetic times: exactly at each kernel's bound
    # nothing is flagged; at half of it, exactly the kernels whose bound exceeds the noise band are.
    seen = 0
    for path, dims in _reference_models():
        graph = load(str(ROOT / path)).graph()
        names = {str(d) for t in graph.input_names for d in (getattr(graph.tensor(t), "shape", None) or ())
                 if not isinstance(d, int)}
        binding = {k: v for k, v in dims.items() if k in names} | {d: 2 for d in names - set(dims)}
        run = run_ort(ROOT / path, binding=binding, warmup=1, repeats=2)

        def report(kernel_s: Mapping[str, float], run: OrtRun = run, path: str = path) -> gap_report.GapReport:
            return gap_report.build(str(ROOT / path), _timed(run, kernel_s, default_s=1.0, latency_s=1.0),
                                    hardware=HW)

        slow = report({})  # 1 s per kernel and per run: slower than any bound of these small models
        assert slow.kernels and slow.errors == (), path
        bounded = [r for r in slow.kernels if r.bound.bound_s is not None]
        share = {k: r.bound.bound_s / len(r.kernels) for r in bounded for k in r.kernels}  # type: ignore[operator]
        at_roof = report(share)
        assert [r.label for r in at_roof.kernels if r.faster_than_bound] == [], path
        half = report({k: s / 2 for k, s in share.items()})
        # at half the bound b, a row is flagged when b/2 + 1 µs per kernel + 0.05 b < b, i.e. 0.45 b > n µs
        expected = {r.label for r in bounded if 0.45 * r.bound.bound_s > 1e-6 * len(r.kernels)}  # type: ignore[operator]
        assert expected, path  # each model has kernels well above the timer's resolution
        assert {r.label for r in half.kernels if r.faster_than_bound} == expected, path
        assert [r for r in half.models if r.faster_than_bound] == [], path
        seen += 1
    assert seen >= 2
