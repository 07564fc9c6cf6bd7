"""graphcost audit: one row per model whatever the model does, streamed rows, resume after kill -9.

The zoo is built in tmp_path: the shipped models, small graphs written in ONNX text, an external-data
model (whose data file ends in .onnx, so it looks like a model), and bad files. Workers are real
forkserver children; the crash, hang and memory cases use the workers' test hooks
(GRAPHCOST_AUDIT_TEST_HOOK), since no honest model reliably segfaults.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnx.parser
import pytest
from clihelp import run_cli
from onnx import numpy_helper

from graphcost.audit.find import drop_external_files, find_models, make_jobs
from graphcost.audit.store import Store

ROOT = Path(__file__).resolve().parents[1]
TINY_CNN = ROOT / "models" / "tiny_cnn.onnx"
TINY_TRANSFORMER = ROOT / "models" / "tiny_transformer.onnx"
HOOK = "GRAPHCOST_AUDIT_TEST_HOOK"

CLI_SNIPPET = "import sys, graphcost.cli as c\nsys.exit(c.main(sys.argv[1:]))\n"


@pytest.fixture(autouse=True)
def _no_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(HOOK, raising=False)


def audit(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``graphcost audit ARGS`` in this process: (exit code, stdout, stderr)."""
    return run_cli(capsys, "audit", *args)


def rows_of(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def by_name(rows: list[dict]) -> dict[str, dict]:
    return {Path(r["path"]).name: r for r in rows}


def digests(folder: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def small_model(i: int, batch: str = "batch") -> onnx.ModelProto:
    """y = relu(x @ W_i + b): a MatMul of [batch, 16+i] × [16+i, 8], then Add and Relu."""
    k = 16 + i
    m = onnx.parser.parse_model(f"""
        <ir_version: 8, opset_import: ["" : 17]>
        g{i} (float[{batch}, {k}] x) => (float[{batch}, 8] y) {{
            h = MatMul(x, w)
            z = Add(h, b)
            y = Relu(z)
        }}""")
    rng = np.random.default_rng(i)
    m.graph.initializer.extend([numpy_helper.from_array(rng.standard_normal((k, 8)).astype(np.float32), "w"),
                                numpy_helper.from_array(np.zeros(8, np.float32), "b")])
    return m


def unknown_domain_model() -> onnx.ModelProto:
    return onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17, "com.acme" : 1]>
        g (float[2, 4] x) => (float[2, 4] z) {
            y = com.acme.Frob(x)
            z = Relu(y)
        }""")


def external_model(folder: Path) -> Path:
    """A model whose weight lives in ``weights.onnx`` — a data file that ends in .onnx, i.e. not a model."""
    m = small_model(40)
    w = m.graph.initializer[0]
    w.CopyFrom(numpy_helper.from_array(np.ones((56, 8), np.float32), "w"))
    folder.mkdir(parents=True)
    path = folder / "ext.onnx"
    onnx.save_model(m, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location="weights.onnx",
                    size_threshold=0)
    return path


def make_zoo(root: Path) -> Path:
    zoo = root / "zoo"
    (zoo / "cnn").mkdir(parents=True)
    shutil.copy(TINY_CNN, zoo / "cnn" / "tiny_cnn.onnx")
    shutil.copy(TINY_TRANSFORMER, zoo / "tiny_transformer.onnx")
    onnx.save(small_model(1), str(zoo / "mlp1.onnx"))
    onnx.save(small_model(2, batch="n"), str(zoo / "mlp2.onnx"))
    onnx.save(unknown_domain_model(), str(zoo / "unknown_domain.onnx"))
    external_model(zoo / "ext")
    (zoo / "empty.onnx").write_bytes(b"")
    (zoo / "truncated.onnx").write_bytes(TINY_CNN.read_bytes()[:3000])
    (zoo / "notes.onnx").write_text("this is not a model\n")
    (zoo / "README.txt").write_text("not a .onnx file: not a model either\n")
    return zoo


def test_zoo_one_row_per_model_exit_0_inputs_untouched(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    zoo = make_zoo(tmp_path)
    before = digests(zoo)
    out = tmp_path / "out"
    code, stdout, err = audit(capsys, str(zoo), "--out", str(out), "--jobs", "2", "--dim", "batch=2")
    assert code == 0, err
    assert digests(zoo) == before  # inputs byte-identical
    rows = rows_of(out)
    names = sorted(Path(r["path"]).name for r in rows)
    # 9 models: weights.onnx is ext.onnx's data, README.txt is not .onnx
    assert names == ["empty.onnx", "ext.onnx", "mlp1.onnx", "mlp2.onnx", "notes.onnx", "tiny_cnn.onnx",
                     "tiny_transformer.onnx", "truncated.onnx", "unknown_domain.onnx"]
    r = by_name(rows)
    for ok in ("ext.onnx", "mlp1.onnx", "mlp2.onnx", "tiny_cnn.onnx", "tiny_transformer.onnx"):
        assert r[ok]["status"] == "ok" and r[ok]["reason"] is None, r[ok]
    assert r["empty.onnx"]["status"] == "error" and "empty" in r["empty.onnx"]["reason"]
    assert r["truncated.onnx"]["status"] == "error" and "truncated" in r["truncated.onnx"]["reason"]
    assert r["notes.onnx"]["status"] == "error" and "not an ONNX model" in r["notes.onnx"]["reason"]
    unk = r["unknown_domain.onnx"]
    assert unk["status"] == "ok" and "com.acme::Frob" in unk["reason"]  # costed where possible, and says why not
    assert unk["analysis"]["no_rule_ops"] == {"com.acme::Frob": 1}

    # the external data is part of the model's identity
    ext = r["ext.onnx"]
    assert [e["location"] for e in ext["external_data"]] == ["weights.onnx"]
    assert ext["external_data"][0]["sha256"] == hashlib.sha256((zoo / "ext" / "weights.onnx").read_bytes()).hexdigest()
    # --dim binds where declared, is listed as ignored elsewhere
    assert r["mlp1.onnx"]["analysis"]["binding"] == {"batch": 2}
    assert r["mlp2.onnx"]["analysis"]["dims_ignored"] == ["batch"]
    # mlp1: MatMul [2,17]x[17,8] = 2*17*8 MACs (2 FLOPs each) + Add 2*8 + Relu 2*8
    assert r["mlp1.onnx"]["analysis"]["totals"]["flops"] == 2 * (2 * 17 * 8) + 2 * 8 + 2 * 8
    assert len(r["tiny_cnn.onnx"]["analysis"]["top_nodes"]) == 5

    summary = json.loads((out / "summary.json").read_text())
    assert (summary["models"], summary["ok"], summary["failed"]) == (9, 6, 3)
    assert summary["ops_without_rules"] == [{"op": "com.acme::Frob", "models": 1, "nodes": 1}]
    assert summary["top_by_roofline_time_s"][0]["path"].endswith("tiny_cnn.onnx")
    csv_lines = (out / "summary.csv").read_text().splitlines()
    assert len(csv_lines) == 1 + 9
    page = (out / "summary.html").read_text()
    assert page.count("tiny_cnn.onnx") >= 1 and "<svg" in page and "http" not in page.split("<body", 1)[-1].lower()
    assert "Ops without cost rules" in stdout and "com.acme::Frob" in stdout and "Failed models" in stdout
    assert "[9/9]" in err  # plain progress lines when stderr is not a terminal
    timings = [json.loads(line) for line in (out / "timings.jsonl").read_text().splitlines()]
    assert len(timings) == 9 and all(t["elapsed_s"] >= 0 for t in timings)


def test_crash_hang_oom_and_probe_crash_become_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # The hang runs in an audit of its own with a short time limit; the rest get a limit no loaded machine
    # reaches, so what each row says never depends on how fast this machine is.
    zoo, hang = tmp_path / "zoo", tmp_path / "hang"
    zoo.mkdir()
    hang.mkdir()
    for i, name in enumerate(("crashes", "hogs", "buggy", "fine")):
        onnx.save(small_model(i), str(zoo / f"{name}.onnx"))
    onnx.save(small_model(4), str(hang / "hangs.onnx"))
    monkeypatch.setenv(HOOK, "abort:crashes,sleep:hangs,alloc:hogs,raise:buggy,probe-abort:fine")

    start = time.monotonic()
    code, _, err = audit(capsys, str(hang), "--out", str(tmp_path / "out-hang"), "--timeout", "4")
    assert code == 0, err
    assert time.monotonic() - start < 60  # the hang was cut at the time limit, not left to run
    (row,) = rows_of(tmp_path / "out-hang")
    assert (row["status"], row["reason"]) == ("timeout", "exceeded the time limit (4 s)")

    out = tmp_path / "out"
    code, _, err = audit(capsys, str(zoo), "--out", str(out), "--jobs", "2", "--timeout", "600",
                         "--memory-limit", "768MiB")
    assert code == 0, err
    rows = rows_of(out)
    r = by_name(rows)
    assert len(rows) == len(r) == 4
    assert (r["crashes.onnx"]["status"], r["crashes.onnx"]["reason"]) == ("crashed", "worker crashed (SIGABRT)")
    assert r["hogs.onnx"]["status"] == "oom" and "768.00 MiB" in r["hogs.onnx"]["reason"]
    assert r["buggy.onnx"]["status"] == "error" and "RuntimeError" in r["buggy.onnx"]["reason"]
    assert r["fine.onnx"]["status"] == "ok"  # its discovery probe crashed; the retry one by one found it a model


def test_resume_after_sigkill_gives_the_uninterrupted_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                           ) -> None:
    zoo = tmp_path / "zoo"
    zoo.mkdir()
    for i in range(20):
        onnx.save(small_model(i), str(zoo / f"m{i:02d}.onnx"))
    (zoo / "bad.onnx").write_bytes(b"\x00\x01garbage")
    ref = tmp_path / "ref"
    code, _, err = audit(capsys, str(zoo), "--out", str(ref), "--jobs", "2")
    assert code == 0, err

    out = tmp_path / "killed"
    # 0.5 s per model, so the kill lands mid-run; the smallest (m00, started last) hangs, so however the
    # machine is loaded the audit cannot finish before it is killed
    env = {**os.environ, HOOK: "delay:m,sleep:m00"}
    proc = subprocess.Popen([sys.executable, "-c", CLI_SNIPPET, "audit", str(zoo), "--out", str(out), "--jobs", "1"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = out / "results.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if results.exists() and results.read_bytes().count(b"\n") >= 3:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the audit finished before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_before = len(rows_of(out))
    assert 3 <= done_before < 21

    code, _, err = audit(capsys, str(zoo), "--out", str(out), "--jobs", "2", "--resume")
    assert code == 0, err
    assert f"resuming: {done_before} of 21 models already done" in err
    rows = rows_of(out)
    assert sorted(r["path"] for r in rows) == sorted(r["path"] for r in rows_of(ref))  # each model exactly once
    assert sorted((out / "results.jsonl").read_text().splitlines()) == \
        sorted((ref / "results.jsonl").read_text().splitlines())
    assert (out / "summary.json").read_bytes() == (ref / "summary.json").read_bytes()

    code, _, err = audit(capsys, str(zoo), "--out", str(out), "--resume")  # nothing left to do
    assert code == 0 and "21 of 21 models already done" in err
    assert len(rows_of(out)) == 21


def test_partial_last_line_is_cut_before_appending(tmp_path: Path) -> None:
    store = Store(str(tmp_path))
    good = {"schema": "graphcost.audit/1", "key": "k", "path": "/a.onnx", "status": "ok"}
    (tmp_path / "results.jsonl").write_text(json.dumps(good) + "\n" + '{"schema": "graphcost.au')
    assert store.read_rows() == [good]
    assert (tmp_path / "results.jsonl").read_text() == json.dumps(good) + "\n"


def test_resume_key_covers_content_external_data_and_settings(tmp_path: Path) -> None:
    path = external_model(tmp_path / "ext")
    data = tmp_path / "ext" / "weights.onnx"
    models = find_models([str(tmp_path)])
    assert models == [str(path), str(data)]  # by name both could be models; the probe tells them apart
    externals = {str(path): [str(data)], str(data): []}
    assert drop_external_files(models, externals) == [str(path)]

    def key(settings_key: str = "s") -> str:
        return make_jobs([str(path)], externals, {}, settings_key, jobs=1)[0]["key"]

    k0 = key()
    assert key() == k0
    assert key("other settings") != k0
    data.write_bytes(data.read_bytes()[:-4] + b"\x00\x00\x80\x3f")  # same size, different weight
    assert key() != k0


def test_user_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    zoo = tmp_path / "zoo"
    zoo.mkdir()
    onnx.save(small_model(0), str(zoo / "a.onnx"))
    out = tmp_path / "out"
    code, _, err = audit(capsys, str(tmp_path / "missing"), "--out", str(out))
    assert code == 2 and "no such file" in err
    for flags in (["--jobs", "0"], ["--memory-limit", "lots"], ["--timeout", "-1"], ["--retry-failed"]):
        code, _, err = audit(capsys, str(zoo), "--out", str(out), *flags)
        assert code == 2 and err.count("\n") == 1, (flags, err)
    assert audit(capsys, str(zoo), "--out", str(out))[0] == 0
    code, _, err = audit(capsys, str(zoo), "--out", str(out))  # results exist: resume or another --out
    assert code == 2 and "--resume" in err
    code, _, err = audit(capsys, str(zoo), "--out", str(out), "--resume", "--hardware", "h100-sxm")
    assert code == 2 and "other analysis settings" in err
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time\n"
                               "fd = os.open(sys.argv[1], os.O_RDWR)\n"
                               "fcntl.lockf(fd, fcntl.LOCK_EX)\nprint('locked', flush=True)\ntime.sleep(60)\n",
                               str(out / ".lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        code, _, err = audit(capsys, str(zoo), "--out", str(out), "--resume")  # another audit is writing there
        assert code == 2 and "another audit" in err
    finally:
        holder.kill()
        holder.wait()


def test_hardware_spec_crosses_to_workers_whole() -> None:
    # tasks carry the spec as JSON-ready dicts: every roof must survive, cache levels included
    import json

    from graphcost.hardware.spec import HardwareSpec

    spec = HardwareSpec("m", {"float32": 1e11, "float64": 5e10}, 2e10, onchip_bytes=1 << 25, onchip_bandwidth=7e10,
                        cache_levels=((1 << 16, 9e10), (1 << 20, 8e10), (1 << 25, 7e10)), kind="measured")
    back = HardwareSpec.from_dict(json.loads(json.dumps(spec.to_dict(complete=True))))
    assert back == spec


def test_the_memory_limit_is_the_models_not_the_parents(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A child forked from a big parent (a session that imported torch: over 1 GiB of address space) starts with
    the parent's mappings; --memory-limit bounds what the model's work adds, so a small model still analyzes."""
    import mmap

    zoo = tmp_path / "zoo"
    zoo.mkdir()
    onnx.save(small_model(0), str(zoo / "fine.onnx"))
    reserved = mmap.mmap(-1, 2 << 30)  # 2 GiB of address space in this (parent) process, never touched
    try:
        code, _, err = audit(capsys, str(zoo), "--out", str(tmp_path / "out"), "--memory-limit", "768MiB")
    finally:
        reserved.close()
    assert code == 0, err
    rows = rows_of(tmp_path / "out")
    assert [r["status"] for r in rows] == ["ok"], rows
