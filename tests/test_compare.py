"""graphcost compare: the dense-layer workload in closed form, missing frameworks, the seed's shape on real exports.

The measured half of the seed's shape (batch-1 %peak below half of batch 256's on this machine) is a claim about
speed: bench/bench_seed_shape.py, not a test (docs/benchmarks.md).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from graphcost.gap import WALL_RESOLUTION_S, SetBound, diagnose
from graphcost.hardware.spec import HardwareSpec
from graphcost.measure import Timing
from graphcost.measure.compare import CompareRow, Comparison, compare, render

FP32 = 4
HW = HardwareSpec("cpu", {"float32": 140e9}, 10e9, cache_levels=((32 << 20, 60e9),))


def _dense_bound(batch: int, hw: HardwareSpec = HW) -> SetBound:
    import onnx.parser

    from graphcost.gap import Bounder
    from graphcost.load import load
    from graphcost.passes.costs import count_costs
    from graphcost.passes.shapes import infer_shapes

    m = onnx.parser.parse_model(f"""<ir_version: 8, opset_import: ["" : 17]>
        g (float[{batch},1024] x, float[1024,1024] w, float[1024] b) => (y) {{ y = Gemm(x, w, b) }}""")
    graph = infer_shapes(load(m)).graph
    bounder = Bounder(graph, count_costs(graph).nodes, hw, {}, residency="warm")
    return bounder.of([n.name for n in graph.nodes()])


@pytest.mark.parametrize("batch", [1, 16, 64, 256])
def test_dense_layer_counts(batch: int) -> None:
    b = _dense_bound(batch)
    flops = 2 * batch * 1024 * 1024 + batch * 1024  # MACs × 2, plus one bias add per output
    moved = FP32 * (batch * 1024 + 1024 * 1024 + 1024 + batch * 1024)  # x, W, b read once; y written once
    assert b.flops == flops and b.bytes == moved
    assert b.intensity == pytest.approx(flops / moved)
    # warm: the 4 MiB of weights fit the 32 MiB level, so bytes move at its 60 GB/s
    assert b.memory_s == pytest.approx(moved / 60e9)
    assert b.compute_s == pytest.approx(flops / 140e9)


def test_batch_1_can_reach_only_a_sliver_of_peak() -> None:
    one, big = _dense_bound(1), _dense_bound(256)
    assert one.bound == "memory"  # 0.5 FLOP/B, far below the ridge (140e9 / 60e9 ≈ 2.3 FLOP/B)
    # the most of peak compute batch 1 can ever reach: intensity × bandwidth ÷ peak
    assert one.compute_s / one.bound_s == pytest.approx(one.intensity * 60e9 / 140e9)  # type: ignore[operator]
    assert big.bound == "compute"  # 85 FLOP/B is above this CPU's ridge: it may reach 100 % of peak
    hot = HardwareSpec("high-ridge", {"float32": 10e12}, 50e9)  # ridge 200 FLOP/B: above both intensities
    assert _dense_bound(1, hot).bound == "memory" and _dense_bound(256, hot).bound == "memory"


def test_a_missing_framework_is_skipped_with_a_note(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import graphcost.measure

    monkeypatch.setattr(graphcost.measure, "installed_frameworks",
                        lambda: {"torch": None, "jax": None, "tf": None})
    c = compare("dense", hardware=HW, batches=(1, 16), workdir=tmp_path)
    assert c.rows == ()
    assert c.skipped == ("torch: not installed (pip install 'graphcost[torch]')",
                         "jax: not installed (pip install 'graphcost[jax]')",
                         "tf: not installed (pip install 'graphcost[tf]')",
                         "onnxruntime: no framework installed to build and export the model from")  # said once
    assert "skipped jax: not installed" in render(c)


def test_render_marks_the_roof_and_accounting_errors() -> None:
    b = _dense_bound(1)
    assert b.bound_s is not None
    slow = CompareRow("torch", "1×1024→1024", 1, b, 2 * b.bound_s, 0.0, 2 * b.bound_s,
                      diagnose(2 * b.bound_s, b.bound_s, 1e-6))
    fast = CompareRow("onnxruntime", "1×1024→1024", 1, b, 0.5 * b.bound_s, 0.0, 0.5 * b.bound_s,
                      diagnose(0.5 * b.bound_s, b.bound_s, 1e-6))
    text = render(Comparison("dense", HW, (slow, fast), (), "torch"))
    assert "50.0%" in text  # torch at half its roof
    assert "│" in text  # the roof marker on the bar of a memory-bound row
    assert "‼ faster than the bound" in text and text.count("‼") == 2  # the row and the footnote


@pytest.mark.heavy
def test_dense_layer_shape_of_the_seed_results(tmp_path: Path) -> None:
    # The seed's shape in what does not depend on the machine: on the real exports of every installed framework and
    # onnxruntime, batch 1 is memory-bound and its roof caps it at intensity × bandwidth ÷ peak, batch 256 is
    # compute-bound (its roof allows 100 % of peak), and each row's %peak is its compute time ÷ its own median.
    # Whether the *measured* batch-1 %peak is below half of batch 256's is a claim about speed that a loaded machine
    # can break: bench/bench_seed_shape.py measures it against this machine's roofs (docs/benchmarks.md).
    from graphcost.measure import installed_frameworks

    c = compare("dense", hardware=HW, batches=(1, 256), warmup=1, repeats=3, workdir=tmp_path)
    runners = {r.runner for r in c.rows}
    expected = {fw for fw, v in installed_frameworks().items() if v is not None} | {"onnxruntime"}
    assert runners == expected, c.skipped
    for runner in runners:
        one = next(r for r in c.rows if r.runner == runner and r.batch == 1)
        big = next(r for r in c.rows if r.runner == runner and r.batch == 256)
        for r in (one, big):
            b = r.batch
            assert r.bound.flops == 2 * b * 1024 * 1024 + b * 1024  # MACs × 2, plus one bias add per output
            assert r.bound.bytes == FP32 * (b * 1024 + 1024 * 1024 + 1024 + b * 1024)  # x, W, b in; y out
            assert r.bound.compute_s is not None and r.median_s > 0
            assert r.peak_fraction == pytest.approx(r.bound.compute_s / r.median_s)
            assert r.diagnosis == diagnose(r.median_s, r.bound.bound_s, WALL_RESOLUTION_S)  # of its own median
        assert one.bound.bound == "memory" and big.bound.bound == "compute"
        assert one.bound.intensity is not None
        assert one.roof_fraction == pytest.approx(one.bound.intensity * 60e9 / 140e9)  # 0.5 FLOP/B at 60 GB/s: 21 %
        assert big.roof_fraction == 1.0 and one.roof_fraction is not None
        assert one.roof_fraction < big.roof_fraction / 2  # the seed's shape, as the most each batch can reach


@pytest.mark.heavy
def test_compare_flags_a_synthetic_time_faster_than_the_bound(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # The real torch export and its bounds, with every runner timed at a synthetic 1 ms: the diagnosis, %peak and
    # the ‼ marks follow from that time alone, so no measurement decides the outcome.
    pytest.importorskip("torch")
    import graphcost.measure
    import graphcost.measure.compare

    one_ms = SimpleNamespace(latency=Timing((1e-3,) * 3), threads=None, intra_op_threads=None)  # NativeTiming/OrtRun
    monkeypatch.setattr(graphcost.measure.compare, "_time_native", lambda *_a, **_k: one_ms)
    monkeypatch.setattr(graphcost.measure, "run_ort", lambda *_a, **_k: one_ms)
    c = compare("dense", hardware=HW, batches=(1, 256), frameworks=("torch", "onnxruntime"), workdir=tmp_path)
    # batch 1: bound = 4,206,592 B ÷ 60 GB/s = 70.1 µs (warm: the set fits the 32 MiB level); 1 ms is 14× it
    # batch 256: bound = 537,133,056 FLOP ÷ 140 GFLOP/s = 3.84 ms; 1 ms is faster than that: an accounting error
    assert {(r.runner, r.batch): r.diagnosis.code for r in c.rows} == {
        ("torch", 1): "inefficient", ("onnxruntime", 1): "inefficient",
        ("torch", 256): "accounting", ("onnxruntime", 256): "accounting"}
    for r in c.rows:
        assert r.median_s == 1e-3 and r.peak_fraction == pytest.approx(r.bound.compute_s / 1e-3)  # type: ignore[operator]
    text = render(c)
    assert text.count("‼ faster than the bound") == 2 and "‼ a row measured faster than its bound" in text
