"""Roofs measured on a busy machine: never cached, announced, warned about at the top of the gap report, and never
the cause of an accounting error (exit 1). Bimodal native timings are flagged with the threads used.

The busy machine is simulated: the load-average reader and the microbenchmarks are replaced by fakes whose
figures are chosen here, so no test loads the machine or depends on its speed or load.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
from pathlib import Path
from typing import Any

import onnx
import onnx.parser
import pytest
from clihelp import run_cli

import graphcost.hardware.measure as meas
from graphcost.hardware import catalog
from graphcost.hardware.spec import HardwareSpec
from graphcost.measure import Timing, gap_report, run_ort
from graphcost.measure.native import NativeRun
from graphcost.measure.stats import BIMODAL_GAP, modes, timing
from graphcost.report import gap_text

CONV_RELU = """<ir_version: 8, opset_import: ["" : 17]>
g (float[1,8,16,16] x, float[8,8,3,3] w) => (y) {
    c = Conv <pads = [1, 1, 1, 1]> (x, w)
    y = Relu(c)
}"""


# ---------------------------------------------------------------------------------------------------------------
# A simulated machine: every microbenchmark runs at the rates of ``state``, with the load and spread it names


class Machine:
    """Fakes for ``measure``'s microbenchmarks: bandwidth ``rate`` B/s for every working set, compute ``peak``
    FLOP/s for every GEMM and Conv, repeats ``spread``× apart, and the 1-minute load average ``load``. ``tries``
    lists, per call of ``measure``, (load, rate, peak, spread); the last repeats."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, tries: list[tuple[float, float, float, float]],
                 cache: Path) -> None:
        self.tries = tries
        self.calls = 0
        self.current = tries[0]
        monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
        real = meas.measure

        def counted(**kw: Any) -> meas.Measured:
            self.current = self.tries[min(self.calls, len(self.tries) - 1)]
            self.calls += 1
            return real(**kw)

        monkeypatch.setattr(meas, "measure", counted)
        monkeypatch.setattr(meas, "_load1", lambda: self.current[0])
        monkeypatch.setattr(meas, "_best", self._best)
        monkeypatch.setattr(meas, "_numpy_stream", lambda pool, threads, kernel, size: (size, self._bytes(size)))
        monkeypatch.setattr(meas, "_ort_stream", lambda threads, kernel, size: (size, 1, self._bytes(size)))
        monkeypatch.setattr(meas, "_conv_ort", lambda batch, threads: (10**9 * batch, self._flops(10**9 * batch)))
        monkeypatch.setattr(meas, "_gemm_runners", lambda dtype, n, threads, usable, blas, pool: [
            ("fake", lambda: (2 * n**3, self._flops(2 * n**3)))])

    def _bytes(self, size: int) -> Any:
        return lambda passes: size * passes / self.current[1]

    def _flops(self, flops: int) -> Any:
        return lambda calls: flops * calls / self.current[2]

    def _best(self, timed: Any, min_timing_s: float, repeats: int,
              spreads: list[float] | None = None) -> tuple[int, float]:
        if spreads is not None:
            spreads.append(self.current[3])
        return 1, timed(1)


def _threads() -> int:
    return meas.detect().cpu.usable_cpus


def test_quiet_roofs_are_cached_with_their_key_and_used_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    quiet = (0.0, 20e9, 100e9, 1.0)  # load 0, 20 GB/s, 100 GFLOP/s, repeats all alike
    machine = Machine(monkeypatch, [quiet], tmp_path)
    said: list[str] = []
    spec, path, fresh = meas.measured_roofs(progress=said.append, quick=True)
    assert fresh and machine.calls == 1 and path.is_file() and meas.busy_roofs(spec) is None
    assert spec.memory_bandwidth == pytest.approx(20e9)  # every working set streams at the fake 20 GB/s
    assert spec.peak_flops["float32"] == pytest.approx(100e9)  # every GEMM and Conv runs at the fake 100 GFLOP/s
    assert said[0].startswith("measuring this machine's roofs (no cached roofs yet")
    assert [m[:5] for m in said if m.startswith("[")] == ["[1/3]", "[2/3]", "[3/3]"]  # one message per stage
    header = json.loads(path.read_text(encoding="utf-8").split("\n", 1)[0].removeprefix("# graphcost roofs cache "))
    assert header["key"] == meas.cache_key()
    again, _, fresh_again = meas.measured_roofs(quick=True)
    assert not fresh_again and machine.calls == 1 and again.peak_flops == spec.peak_flops


def test_cached_roofs_expire_and_follow_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    machine = Machine(monkeypatch, [(0.0, 20e9, 100e9, 1.0)], tmp_path)
    meas.measured_roofs(quick=True)
    real_time = meas.time.time
    later = real_time() + meas.CACHE_MAX_AGE_S + 60  # a minute past the expiry
    monkeypatch.setattr(meas.time, "time", lambda: later)
    _, _, fresh = meas.measured_roofs(quick=True)
    assert fresh and machine.calls == 2  # expired: measured again (and cached with the new time)
    key = meas.cache_key()
    monkeypatch.setattr(meas, "cache_key", lambda: key | {"onnxruntime": "0.0.0-other"})
    _, _, fresh = meas.measured_roofs(quick=True)
    assert fresh and machine.calls == 3  # another onnxruntime: the cache is stale
    _, _, fresh = meas.measured_roofs(quick=True, refresh=True)
    assert fresh and machine.calls == 4  # --refresh measures whatever the cache holds


def test_busy_roofs_are_retried_then_returned_best_of_all_and_never_cached(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    t = _threads()
    busy_load = 2.0 * t  # twice the threads: above the busy line of 0.5 × threads
    tries = [(busy_load, 5e9, 30e9, 2.0), (busy_load, 8e9, 20e9, 2.0), (busy_load, 6e9, 40e9, 2.0)]
    machine = Machine(monkeypatch, tries, tmp_path)
    said: list[str] = []
    spec, path, fresh = meas.measured_roofs(progress=said.append, quick=True)
    assert fresh and machine.calls == meas.MAX_TRIES == 3 and not path.exists()  # three tries, nothing cached
    assert spec.memory_bandwidth == pytest.approx(8e9)  # the best try's bandwidth (try 2)
    assert spec.peak_flops["float32"] == pytest.approx(40e9)  # the best try's compute (try 3)
    warning = meas.busy_roofs(spec)
    assert warning is not None and "3 tries, best figures kept" in warning and "--refresh" in warning
    assert sum("measuring again (try" in m for m in said) == 2
    assert said[-1] == "warning: no quiet measurement in 3 tries: using the best figures, not caching them"
    _, _, fresh_again = meas.measured_roofs(quick=True)
    assert fresh_again and machine.calls == 6  # the next run measures again rather than trusting low roofs


def test_a_busy_try_then_a_quiet_one_is_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t = _threads()
    machine = Machine(monkeypatch, [(2.0 * t, 5e9, 30e9, 2.0), (2.0 * t, 20e9, 100e9, 1.0)], tmp_path)
    spec, path, fresh = meas.measured_roofs(quick=True)
    # try 2's load average still holds try 1's threads, so only its spread (1.0, quiet) judges it
    assert fresh and machine.calls == 2 and path.is_file() and meas.busy_roofs(spec) is None
    assert spec.memory_bandwidth == pytest.approx(20e9)  # the quiet try's figures alone, not mixed with busy ones


def test_an_old_busy_cache_is_not_trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A cache written before this check (no header), holding roofs measured busy: measured again.
    machine = Machine(monkeypatch, [(0.0, 20e9, 100e9, 1.0)], tmp_path)
    path = meas.cache_path()
    path.parent.mkdir(parents=True)
    old = HardwareSpec("measured-x", {"float32": 1e9}, 1e9, kind="measured",
                       sources=(meas.busy_warning(2, 1.5) or "",))
    path.write_text(catalog.to_toml(old), encoding="utf-8")
    spec, _, fresh = meas.measured_roofs(quick=True)
    assert fresh and machine.calls == 1 and spec.peak_flops["float32"] == pytest.approx(100e9)


def test_judge_quiet_reads_load_before_during_and_spread() -> None:
    t = 2
    assert meas.judge_quiet(t, 0.9, None, 0.0, 1.0) is None  # 0.9 ≤ 0.5 × 2 threads, repeats alike
    assert "1-minute load average 1.50" in (meas.judge_quiet(t, 1.5, None, 0.0, None) or "")
    assert meas.judge_quiet(t, 1.5, None, 0.0, None, ours_in_before=True) is None  # a retry: our own load
    assert "repeats 1.50×" in (meas.judge_quiet(t, 0.0, None, 0.0, 1.5) or "")  # 1.5 > SPREAD_LIMIT 1.3
    # 60 s with 4 runnable tasks from a load of 0: after = 4 × (1 − e^−1); others = 4 − our 2 threads = 2 > 1
    after = 4 * (1 - math.exp(-1))
    assert meas.others_running(t, 0.0, after, 60.0) == pytest.approx(2.0)
    assert "about 2.0 other runnable tasks" in (meas.judge_quiet(t, 0.0, after, 60.0, 1.0) or "")
    # only our 2 threads runnable: after = 2 × (1 − e^−1); others = 0: quiet
    assert meas.judge_quiet(t, 0.0, 2 * (1 - math.exp(-1)), 60.0, 1.0) is None
    assert meas.judge_quiet(t, 0.0, 100.0, meas.MIN_WINDOW_S / 2, 1.0) is None  # too short a window to judge


def test_progress_is_one_line_per_stage_off_a_terminal_and_rewritten_on_one() -> None:
    pipe = io.StringIO()
    p = meas.StderrProgress(pipe)
    for m in ("measuring this machine's roofs (no cached roofs yet)", "[1/3] bandwidth", "bandwidth 16 KiB: 1 GB/s",
              "[2/3] compute", "warning: the machine is busy (x)"):
        p(m)
    p.close()
    assert pipe.getvalue().splitlines() == [
        "graphcost: measuring this machine's roofs (no cached roofs yet)", "graphcost: [1/3] bandwidth",
        "graphcost: [2/3] compute", "graphcost: warning: the machine is busy (x)"]  # the step line is left out

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty = Tty()
    p = meas.StderrProgress(tty)
    p("[1/3] bandwidth")
    p("bandwidth 16 KiB: 1 GB/s")
    p("warning: busy")
    p("[2/3] compute")
    p.close()
    assert tty.getvalue() == ("\r\x1b[2Kgraphcost: [1/3] bandwidth\r\x1b[2Kgraphcost: bandwidth 16 KiB: 1 GB/s"
                              "\r\x1b[2Kgraphcost: warning: busy\n\r\x1b[2Kgraphcost: [2/3] compute\n")


# ---------------------------------------------------------------------------------------------------------------
# The gap report against busy roofs


SLOW = HardwareSpec("slow", {"float32": 1e9}, 100e6)  # 1 GFLOP/s, 100 MB/s: bounds of ~300 µs, far above 1 µs


def _timed(run: Any, kernel_s: float, latency: Timing) -> Any:
    kernels = tuple(dataclasses.replace(k, timing=Timing((kernel_s,) * k.timing.count)) for k in run.kernels)
    return dataclasses.replace(run, kernels=kernels, latency=latency)


@pytest.fixture(scope="module")
def conv_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Any]:
    path = tmp_path_factory.mktemp("conv") / "conv_relu.onnx"
    onnx.save(onnx.parser.parse_model(CONV_RELU), str(path))
    return str(path), run_ort(path, warmup=1, repeats=3)


def test_rows_faster_than_busy_roofs_are_no_accounting_error(conv_run: tuple[str, Any]) -> None:
    path, run = conv_run
    busy = dataclasses.replace(SLOW, kind="measured", sources=(meas.busy_warning(2, 1.5) or "",))
    # every kernel and the session run take 1 µs: far below the ~300 µs bounds, beyond the 1 µs timer noise
    fast = _timed(run, 1e-6, Timing((1e-6,) * run.latency.count))
    honest = gap_report.build(path, fast, hardware=dataclasses.replace(SLOW, kind="measured"))
    assert honest.errors and honest.roofs_busy is None  # quiet roofs: a real accounting error
    r = gap_report.build(path, fast, hardware=busy)
    assert r.errors == () and r.to_dict()["accounting_errors"] == []  # the gap command exits 0 on these
    assert {x.label for x in r.under_busy_roofs} == {x.label for x in honest.errors}
    assert {x.diagnosis.code for x in r.under_busy_roofs} == {"busy-roofs"}
    assert r.roofs_busy == meas.busy_roofs(busy) and r.to_dict()["roofs_busy"] == r.roofs_busy
    assert r.to_dict()["faster_than_busy_roofs"] == [f"{x.level} {x.label}" for x in r.under_busy_roofs]
    text = gap_text.render(r)
    lines = text.splitlines()
    assert lines[1].startswith("  WARNING: the machine was busy while measuring roofs")  # right under the title
    assert "load is the likely cause, not the accounting" in lines[2]
    assert "ACCOUNTING ERROR" not in text and "note: warning" not in text  # not an error, not a note at the end
    assert "ACCOUNTING ERROR" in gap_text.render(honest)


def _roofs_file(tmp_path: Path, name: str, busy: bool) -> str:
    # 1 kFLOP/s and 1 kB/s: the tiny Conv's bound is minutes, so any run on any machine is faster than it
    spec = HardwareSpec(name, {"float32": 1e3}, 1e3, kind="measured",
                        sources=(meas.busy_warning(2, 1.5) or "",) if busy else ("measured by a test",))
    out = tmp_path / f"{name}.toml"
    out.write_text(catalog.to_toml(spec), encoding="utf-8")
    return str(out)


def test_gap_cli_exits_0_against_busy_roofs_and_1_against_quiet_ones(conv_run: tuple[str, Any], tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = conv_run
    code, out, err = run_cli(capsys, "gap", path, "--hardware", _roofs_file(tmp_path, "quiet", False),
                             "--warmup", "1", "--repeats", "3")
    assert code == 1 and "ACCOUNTING ERROR" in out, err  # below the bound against roofs said to be quiet
    code, out, err = run_cli(capsys, "gap", path, "--hardware", _roofs_file(tmp_path, "busy", True),
                             "--warmup", "1", "--repeats", "3")
    assert code == 0, err
    assert out.splitlines()[1].startswith("  WARNING: the machine was busy") and "ACCOUNTING ERROR" not in out
    code, out, _ = run_cli(capsys, "gap", path, "--hardware", _roofs_file(tmp_path, "busy", True),
                           "--warmup", "1", "--repeats", "3", "--format", "json")
    doc = json.loads(out)
    assert code == 0 and doc["accounting_errors"] == [] and doc["faster_than_busy_roofs"] and doc["roofs_busy"]


def test_gap_with_measured_roofs_on_a_busy_machine(conv_run: tuple[str, Any], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # The acceptance: `gap` with the roofs measured now, on a machine another CPU-bound process keeps busy
    # (simulated: load 2 × threads, repeats 2× apart, roofs of 1 kB/s and 1 kFLOP/s so that every row is
    # faster than its bound): the roofs are announced, not cached, warned about first, and the exit is 0.
    path, _ = conv_run
    t = _threads()
    machine = Machine(monkeypatch, [(2.0 * t, 1e3, 1e3, 2.0)], tmp_path)
    code, out, err = run_cli(capsys, "gap", path, "--hardware", "measured", "--warmup", "1", "--repeats", "3")
    assert code == 0, err
    assert machine.calls == meas.MAX_TRIES and not meas.cache_path().exists()
    assert "graphcost: measuring this machine's roofs (no cached roofs yet" in err and "[1/3] bandwidth" in err
    assert "not caching them" in err
    assert out.splitlines()[1].startswith("  WARNING: the machine was busy") and "ACCOUNTING ERROR" not in out
    # the same machine quiet: the roofs are cached, and the same low roofs now make an accounting error
    machine.tries = [(0.0, 1e3, 1e3, 1.0)]
    code, out, _ = run_cli(capsys, "gap", path, "--hardware", "measured", "--warmup", "1", "--repeats", "3")
    assert code == 1 and "ACCOUNTING ERROR" in out and meas.cache_path().is_file()


def test_hardware_measure_refresh_replaces_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    machine = Machine(monkeypatch, [(0.0, 20e9, 100e9, 1.0)], tmp_path)
    meas.measured_roofs(quick=True)
    machine.tries = [(0.0, 30e9, 100e9, 1.0)]
    code, out, err = run_cli(capsys, "hardware", "measure", "--quick", "--refresh")
    assert code == 0, err
    assert machine.calls == 2 and "roofs cached in" in err
    cached, _, fresh = meas.measured_roofs()
    assert not fresh and cached.memory_bandwidth == pytest.approx(30e9)  # the refreshed figures
    machine.tries = [(2.0 * _threads(), 30e9, 100e9, 2.0)]
    code, out, err = run_cli(capsys, "hardware", "measure", "--quick", "--refresh")
    assert code == 0 and out.startswith("warning: the machine was busy") and not meas.cache_path().exists()
    code, _, err = run_cli(capsys, "hardware", "measure", "--refresh", "--threads", "1")
    assert code == 2 and err.count("\n") == 1 and "--refresh" in err


# ---------------------------------------------------------------------------------------------------------------
# Bimodal timings


def test_modes_finds_two_modes_a_tail_and_a_wide_spread() -> None:
    # torch eager on 2 busy cores: 9 runs at 0.6 ms, 11 at 24 ms — a 40× step, ≥ 2 runs on each side
    two = modes(timing([0.6e-3] * 9 + [24e-3] * 11))
    assert two is not None and two.kind == "bimodal" and (two.low_count, two.high_count) == (9, 11)
    assert (two.low_s, two.high_s) == (0.6e-3, 24e-3)  # each mode's median
    assert modes(timing([1e-3] * 19 + [10e-3])) is None  # one slow run of 20: a tail (a mode needs ⌈0.1 × 20⌉ = 2)
    assert modes(timing([1e-3, 1.1e-3, 1.05e-3, 0.98e-3, 1.2e-3, 1.02e-3])) is None  # one mode
    step = BIMODAL_GAP * 0.99  # just under the step that makes two modes
    assert modes(timing([1e-3] * 5 + [step * 1e-3] * 5)) is None  # p90 / p10 = 2.97 < 4: not unstable either
    # each step 1.5× < 3; p10 = 1.45 ms, p90 = 1.5⁸ + 0.1 (1.5⁹ − 1.5⁸) ≈ 26.9 ms: 18.6× ≥ 4
    wide = modes(timing([1e-3 * 1.5**i for i in range(10)]))
    assert wide is not None and wide.kind == "unstable" and wide.low_count == 10
    assert modes(timing([1e-3] * 3 + [30e-3] * 2)) is None  # under 6 samples: not judged


def test_bimodal_native_timing_is_flagged_with_its_threads(conv_run: tuple[str, Any]) -> None:
    path, run = conv_run
    native = NativeRun("torch", "eager", "cpu", "0", timing([0.6e-3] * 9 + [24e-3] * 11), {}, (), threads=2)
    r = gap_report.build(path, _timed(run, 1.0, Timing((1.0,) * run.latency.count)), hardware=SLOW,
                         natives=[native])
    assert len(r.timing_warnings) == 1  # the ORT session runs all took 1 s: one mode
    w = r.timing_warnings[0]
    assert w.startswith("torch/eager/cpu latency is bimodal: 9 runs near 600.0 µs, 11 near 24.000 ms")
    assert "(2 threads)" in w
    assert r.to_dict()["timing_warnings"] == [w]
    text = gap_text.render(r).splitlines()
    assert text[1] == "  warning: " + w  # at the top, under the title


def test_compare_against_busy_roofs_warns_first_and_reports_no_accounting_error() -> None:
    from graphcost.gap import SetBound
    from graphcost.measure.compare import Comparison, _row, busy_verdicts, render

    busy = HardwareSpec("measured-x", {"float32": 1e9}, 1e9, kind="measured",
                        sources=(meas.busy_warning(2, 1.5) or "",))
    bound = SetBound(2e6, 1e6, 1e6, 2e-3, 1e-3, "float32")  # 2 MFLOP at 1 GFLOP/s: 2 ms; 1 MB at 1 GB/s: 1 ms
    fast = _row("torch", "1×1024→1024", 1, bound, timing([1e-3] * 10), threads=2)  # 1 ms: half the bound
    assert fast.diagnosis.code == "accounting"
    rows, warning = busy_verdicts([fast], busy)
    assert warning == meas.busy_roofs(busy) and [r.diagnosis.code for r in rows] == ["busy-roofs"]
    assert busy_verdicts([fast], dataclasses.replace(busy, sources=()))[0] == [fast]  # quiet roofs: unchanged
    text = render(Comparison("dense", busy, tuple(rows), (), "torch", warning)).splitlines()
    assert text[1].startswith("WARNING: the machine was busy") and "not the accounting" in text[2]
    assert not any("the accounting or the roofs are wrong" in line for line in text)
    two = _row("torch", "1×1024→1024", 1, bound, timing([0.6e-3] * 9 + [24e-3] * 11), threads=2)
    assert two.modes is not None and two.modes.startswith("bimodal: 9 runs near 600.0 µs")
    shown = render(Comparison("dense", busy, (two,), (), "torch", None))
    assert "warning: torch 1×1024→1024 latency is bimodal" in shown and "(2 threads)" in shown
