"""Runs in onnxruntime end, say one line when they fail, and leave nothing behind (security issue 9, items 10, 11).

- **One line.** A model onnxruntime refuses makes ``bench``, ``fold``, ``gap`` and ``fusion --against ort`` write
  exactly graphcost's line on stderr: ORT's own coloured log line (a failed kernel is logged at ERROR before the
  run raises) no longer precedes it.
- **Bounded.** A Loop whose trip count is 2**63−1 (what torch exports for ``while``) analyzes fine, but running it
  would not end: ``graphcost.measure._bounded.check_bounded`` refuses it, and Loops, Scans and nests of them whose
  count is too large or cannot be known, before onnxruntime runs anything.
- **No temporaries.** ``fold`` writes ``.graphcost-fold-*`` beside ``-o``; SIGTERM and Ctrl-C mid-check remove it.

The CLI runs are subprocesses (ORT's logger writes to file descriptor 2 directly, below pytest's capture), each
with a 60 s timeout that is only a safety net against a hang: the assertions are about the outcome, never time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnx.parser
import pytest

from graphcost.measure._bounded import MAX_ITERATIONS, RunRefused, check_bounded, terminate_as_exit

ROOT = Path(__file__).resolve().parents[1]
SAFETY_S = 60  # a hang guard only; nothing asserts on time
HARDWARE = ["--hardware", "h100"]  # gap bounds from the catalog: no roofs measured on the test machine
INT64_MAX = 2**63 - 1


def save(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    onnx.save(onnx.parser.parse_model(text), path)
    return path


def graphcost(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "GRAPHCOST_DEBUG"}
    return subprocess.run([sys.executable, "-m", "graphcost", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=SAFETY_S)


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "\x1b" not in stderr, stderr  # no ANSI colour: ORT's logger wrote nothing
    assert "Traceback" not in stderr
    return lines[0]


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".graphcost-fold-"))


# --------------------------------------------------------------------------- item 10: one line
RESHAPE_FAILS = """<ir_version: 8, opset_import: ["" : 17]>
agraph (float[2,3] x) => (float[7,5] y) {
  s = Constant<value = int64[2] {7, 5}>()
  y = Reshape(x, s)
}"""
"""Loads in onnxruntime; its Reshape kernel fails at run time (6 values into 35), which ORT logs before raising."""

UNKNOWN_OP = """<ir_version: 8, opset_import: ["" : 17, "com.nowhere": 1]>
agraph (float[2,3] x) => (float[2,3] y) {
  t = Relu(x)
  y = com.nowhere.Frobnicate(t)
}"""
"""onnxruntime refuses to load it (no such op), so even optimizing it fails."""


@pytest.mark.parametrize("command", ["bench", "fold", "gap"])
def test_refused_run_writes_one_line(tmp_path: Path, command: str) -> None:
    model = save(tmp_path, "m.onnx", RESHAPE_FAILS)
    flags: dict[str, list[str | Path]] = {"bench": ["--warmup", "0", "--repeats", "1"],
                                          "fold": ["-o", tmp_path / "out.onnx"],
                                          "gap": ["--warmup", "0", "--repeats", "1", *HARDWARE]}
    extra = flags[command]
    r = graphcost(command, model, *extra, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    line = one_line(r.stderr)
    assert line.startswith("graphcost: ") and "Reshape" in line
    assert not (tmp_path / "out.onnx").exists()
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("command", ["bench", "fold", "gap", "fusion"])
def test_refused_load_writes_one_line(tmp_path: Path, command: str) -> None:
    model = save(tmp_path, "m.onnx", UNKNOWN_OP)
    flags: dict[str, list[str | Path]] = {"bench": [], "fold": ["-o", tmp_path / "out.onnx"], "gap": [*HARDWARE],
             "fusion": ["--against", "ort"]}
    extra = flags[command]
    r = graphcost(command, model, *extra, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "Frobnicate" in one_line(r.stderr)
    assert leftovers(tmp_path) == []


# --------------------------------------------------------------------------- item 11: bounded runs
def loop_model(trip: str, cond: str = "c", *, inputs: str = "float[2,3] x", consts: str = "") -> str:
    """``y = Loop(trip, cond, x)`` whose body applies Relu; the body's condition passes through unchanged."""
    return f"""<ir_version: 8, opset_import: ["" : 17]>
agraph ({inputs}) => (float[2,3] y) {{
  n = Constant<value = int64 {{{INT64_MAX}}}>()
  small = Constant<value = int64 {{3}}>()
  c = Constant<value = bool {{1}}>()
  off = Constant<value = bool {{0}}>()
  {consts}
  y = Loop({trip}, {cond}, x) <body = body (int64 i, bool cin, float[2,3] v) => (bool cout, float[2,3] w) {{
      cout = Identity(cin)
      w = Relu(v)
  }}>
}}"""


HUGE_LOOP = loop_model("n")


@pytest.mark.parametrize("command", ["bench", "fold", "gap"])
def test_loop_with_huge_trip_count_is_refused_before_running(tmp_path: Path, command: str) -> None:
    model = save(tmp_path, "loop.onnx", HUGE_LOOP)
    out = tmp_path / "out.onnx"
    flags: dict[str, list[str | Path]] = {"bench": [], "fold": ["-o", out], "gap": [*HARDWARE]}
    extra = flags[command]
    r = graphcost(command, model, *extra, cwd=tmp_path)  # the old code ran it in onnxruntime and never returned
    assert r.returncode == 2, r.stderr
    line = one_line(r.stderr)
    assert "Loop" in line and str(INT64_MAX) in line and str(MAX_ITERATIONS) in line
    assert not out.exists()
    assert leftovers(tmp_path) == []


def test_fusion_against_ort_only_optimizes_a_huge_loop(tmp_path: Path) -> None:
    """ORT's optimizer never executes a Loop, so comparing fusions needs no bound (and gets none)."""
    model = save(tmp_path, "loop.onnx", HUGE_LOOP)
    r = graphcost("fusion", model, "--against", "ort", cwd=tmp_path)
    assert r.returncode == 0, r.stderr


def proto(text: str) -> onnx.ModelProto:
    return onnx.parser.parse_model(text)


X = {"x": np.zeros((2, 3), np.float32)}


def test_small_constant_trip_count_runs() -> None:
    check_bounded(proto(loop_model("small")), X)


def test_small_loop_is_measured(tmp_path: Path) -> None:
    from graphcost.measure import run_ort

    model = save(tmp_path, "loop.onnx", loop_model("small"))
    run = run_ort(model, warmup=0, repeats=1, profile=False)
    assert run.latency.count == 1


def test_huge_constant_trip_count_names_node_and_count() -> None:
    with pytest.raises(RunRefused, match=rf"Loop \(output 'y'\) runs {INT64_MAX} iterations.*condition may end it") \
            as e:
        check_bounded(proto(HUGE_LOOP), X)
    assert e.value.iterations == INT64_MAX


def test_constant_false_condition_never_runs_the_body() -> None:
    check_bounded(proto(loop_model("n", "off")), X)  # 2**63−1 trips, but the body does not start


def test_trip_count_from_a_fed_input_uses_the_fed_value() -> None:
    model = proto(loop_model("m", inputs="float[2,3] x, int64 m"))
    check_bounded(model, {**X, "m": np.array(5, np.int64)})
    with pytest.raises(RunRefused, match=r"runs 1099511627776 iterations.*--dim"):
        check_bounded(model, {**X, "m": np.array(2**40, np.int64)})
    with pytest.raises(RunRefused, match=r"trip count cannot be known before running \('m' is an input"):
        check_bounded(model, X)  # not fed: unknown


def test_trip_count_through_shape_arithmetic_follows_the_fed_shape() -> None:
    """M = Shape(t)[0] where t is a graph input: the count is the fed dim."""
    consts = """s = Shape(t)
  zero = Constant<value = int64 {0}>()
  m = Gather(s, zero)"""
    model = proto(loop_model("m", inputs="float[2,3] x, float[N] t", consts=consts))
    check_bounded(model, {**X, "t": np.zeros(7, np.float32)})
    with pytest.raises(RunRefused, match=rf"runs {MAX_ITERATIONS + 1} iterations"):
        check_bounded(model, {**X, "t": np.zeros(MAX_ITERATIONS + 1, np.float32)})


def test_data_dependent_trip_count_is_refused_naming_the_producer() -> None:
    consts = """nz = NonZero(x)
  k = Size(nz)
  m = Mul(k, small)"""
    model = proto(loop_model("m", consts=consts))
    with pytest.raises(RunRefused, match=r"shape of 'nz' is not known before running"):
        check_bounded(model, X)


def test_while_loop_without_trip_count_is_refused() -> None:
    with pytest.raises(RunRefused, match=r"has no trip count: it runs until its condition turns false"):
        check_bounded(proto(loop_model("", "c")), X)


def test_loop_without_trip_count_or_condition_never_ends() -> None:
    with pytest.raises(RunRefused, match=r"neither a trip count nor a condition: it never ends"):
        check_bounded(proto(loop_model("", "")), X)


NESTED = """<ir_version: 8, opset_import: ["" : 17]>
agraph (float[2,3] x) => (float[2,3] y) {
  outer_n = Constant<value = int64 {1000}>()
  inner_n = Constant<value = int64 {2000}>()
  c = Constant<value = bool {1}>()
  y = Loop<body = outer (int64 i, bool cin, float[2,3] v) => (bool cout, float[2,3] w) {
      cout = Identity(cin)
      w = Loop<body = inner (int64 j, bool din, float[2,3] u) => (bool dout, float[2,3] z) {
          dout = Identity(din)
          z = Relu(u)
      }>(inner_n, cin, v)
  }>(outer_n, c, x)
}"""
"""1000 outer iterations × 2000 inner ones (the inner trip count read from the outer scope): 2·10⁶ in all."""


def test_nested_loops_multiply() -> None:
    model = proto(NESTED)
    model.graph.node[3].name = "outer"
    model.graph.node[3].attribute[0].g.node[1].name = "inner"
    check_bounded(model, X, limit=2_000_000)
    with pytest.raises(RunRefused, match=r"Loop 'inner' runs 2000 iterations \(2000000 in all, inside Loop 'outer'\)"):
        check_bounded(model, X)


SCAN = """<ir_version: 8, opset_import: ["" : 17]>
agraph (float[L,0] s) => (float[0] y) {
  init = Constant<value = float[0] {}>()
  y = Scan<num_scan_inputs = 1, body = body (float[0] acc, float[0] e) => (float[0] out) {
      out = Add(acc, e)
  }>(init, s)
}"""
"""A Scan over the first axis of ``s``; with a zero-size second axis, a huge first one costs no memory."""


def test_scan_over_a_huge_axis_is_refused() -> None:
    model = proto(SCAN)
    check_bounded(model, {"s": np.zeros((5, 0), np.float32)})
    with pytest.raises(RunRefused, match=rf"Scan \(output 'y'\) runs {2**40} iterations"):
        check_bounded(model, {"s": np.zeros((2**40, 0), np.float32)})
    with pytest.raises(RunRefused, match=r"length of its scan input 's' cannot be known"):
        check_bounded(model, {})


def test_model_without_loops_is_not_inspected() -> None:
    check_bounded(proto(RESHAPE_FAILS), {})


# --------------------------------------------------------------------------- item 11: no temporaries
def test_terminate_as_exit_raises_system_exit_and_restores_the_handler() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as e, terminate_as_exit():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(SAFETY_S)  # interrupted by the handler's SystemExit
    assert e.value.code == 128 + signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) == before


STALLED_FOLD = """
import signal, sys, time
# Ctrl-C as in a terminal: a runner started in the background (nohup, no job control) hands its children SIGINT
# ignored, and Python then never raises KeyboardInterrupt
signal.signal(signal.SIGINT, signal.default_int_handler)
import graphcost.fold
from graphcost.cli import main

def stalled(*args, **kwargs):  # the check, stalled: the temporary directory exists now
    print("READY", flush=True)
    time.sleep(600)

graphcost.fold.verify = stalled
sys.exit(main(["fold", sys.argv[1], "-o", sys.argv[2]]))
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_killed_fold_leaves_no_temporaries(tmp_path: Path, sig: signal.Signals) -> None:
    model = save(tmp_path, "m.onnx", """<ir_version: 8, opset_import: ["" : 17]>
agraph (float[2,3] x) => (float[2,3] y) { y = Relu(x) }""")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "folded.onnx"
    proc = subprocess.Popen([sys.executable, "-c", STALLED_FOLD, str(model), str(out)], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "READY"
        assert len(leftovers(out_dir)) == 1  # mid-run: the temporary is there, so the kill below tests cleanup
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=SAFETY_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == (128 + signal.SIGTERM if sig == signal.SIGTERM else 130), err
    assert "Traceback" not in err
    assert leftovers(out_dir) == []
    assert not out.exists()
