"""graphcost audit against hostile or odd entries (issue 9, items 5, 6, 7 as the audit sees it, and 14).

- one bad entry never aborts an audit: text that is not UTF-8 in a model, a NUL byte or an outside path in an
  external-data location, and a non-UTF-8 file name each give the model its own row, and ``--resume`` works;
- every entry is accounted for: FIFOs, sockets, device links, directories named ``*.onnx``, dangling symlinks
  and symlink loops are ``skipped`` rows with a reason; a bad target exits 2 with one line;
- the audit process never reads a model file (hashing runs in children, under the time limit);
- a worker killed by a signal names it, and "out of memory" is said only when the OOM killer ran.

Every input is built here in tmp_path; strings that are not UTF-8 are patched into serialized bytes, since
protobuf will not set them.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import os
import signal
import socket
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.parser
import pytest
from clihelp import run_cli
from onnx import numpy_helper

from graphcost.audit import isolate

ROOT = Path(__file__).resolve().parents[1]
TINY_CNN = ROOT / "models" / "tiny_cnn.onnx"
HOOK = "GRAPHCOST_AUDIT_TEST_HOOK"


@pytest.fixture(autouse=True)
def _no_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(HOOK, raising=False)


def audit(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    return run_cli(capsys, "audit", *args)


def rows_of(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def by_name(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {os.path.basename(r["path"]): r for r in rows}


def patched(model: onnx.ModelProto, swaps: dict[bytes, bytes]) -> bytes:
    """The serialized model with placeholder strings swapped for raw bytes (same length: lengths stay valid)."""
    data = model.SerializeToString()
    for old, new in swaps.items():
        assert len(old) == len(new) and old in data, old
        data = data.replace(old, new)
    return data


def non_utf8_models(folder: Path) -> None:
    """op.onnx: an op type, a node name and the producer that are not UTF-8.
    names.onnx: also a domain and a graph input (referred to by a node) that are not UTF-8."""
    m = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[2, 4] x) => (float[2, 4] z) {
            y = Zzzz(x)
            z = Relu(y)
        }""")
    m.producer_name = "PPPP"
    m.graph.node[0].name = "NNNN"
    (folder / "op.onnx").write_bytes(patched(m, {b"Zzzz": b"Z\xff\xfez", b"PPPP": b"P\xffPP", b"NNNN": b"N\xe9NN"}))
    m = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17, "com.qqqq" : 1]>
        g (float[2, 4] xxxx) => (float[2, 4] z) {
            y = Relu(xxxx)
            w = com.qqqq.Zzzz(y)
            z = Relu(w)
        }""")
    (folder / "names.onnx").write_bytes(patched(m, {b"Zzzz": b"Z\xff\xfez", b"xxxx": b"x\xe9xx", b"qqqq": b"q\xe9qq"}))


def test_non_utf8_model_text_is_costed_escaped_and_resumable(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    zoo = tmp_path / "zoo"
    zoo.mkdir()
    non_utf8_models(zoo)
    odd_name = os.fsdecode(b"m\xff.onnx")  # a file name that is not UTF-8 (a str with a surrogate escape)
    (zoo / odd_name).write_bytes(TINY_CNN.read_bytes())
    out = tmp_path / "out"
    code, _, err = audit(capsys, str(zoo), "--out", str(out))
    assert code == 0, err
    r = by_name(rows_of(out))
    assert len(r) == 3
    op = r["op.onnx"]
    assert op["status"] == "ok"  # costed: Relu has a rule, the odd op is an op without one, named escaped
    assert op["analysis"]["no_rule_ops"] == {"Z\\xff\\xfez": 1}
    assert op["analysis"]["model"]["producer"] == "P\\xffPP"
    assert op["analysis"]["op_counts"] == {"Relu": 1, "Z\\xff\\xfez": 1}
    names = r["names.onnx"]
    assert names["status"] == "ok", names["reason"]
    assert names["analysis"]["no_rule_ops"] == {"com.q\\xe9qq::Z\\xff\\xfez": 1}
    # Relu(x) [2,4] and Relu(w) [2,4]: 8 FLOPs each; the input that is not UTF-8 still feeds its node
    assert names["analysis"]["totals"]["flops"] == 8 + 8
    assert r[odd_name]["status"] == "ok" and r[odd_name]["path"] == str(zoo / odd_name)  # exact name kept
    summary = json.loads((out / "summary.json").read_text())
    assert summary["ok"] == 3
    code, _, err = audit(capsys, str(zoo), "--out", str(out), "--resume")
    assert code == 0, err
    assert "3 of 3 models already done" in err


def _external_model(folder: Path, name: str, location: str) -> None:
    """y = x + w, with w (2×4 float32, 32 bytes) stored externally at ``location``."""
    m = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[2, 4] x) => (float[2, 4] y) { y = Add(x, w) }""")
    t = numpy_helper.from_array(np.ones((2, 4), np.float32), "w")
    t.ClearField("raw_data")
    t.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "32")):
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    m.graph.initializer.append(t)
    (folder / name).write_bytes(m.SerializeToString())


def test_external_data_outside_or_malformed_is_an_error_row_never_hashed(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"S" * 4096)
    secret_sha = hashlib.sha256(secret.read_bytes()).hexdigest()
    zoo = tmp_path / "zoo" / "m"
    zoo.mkdir(parents=True)
    (zoo / "link.bin").symlink_to(secret)
    (zoo / "inside.bin").write_bytes(np.ones((2, 4), np.float32).tobytes())
    _external_model(zoo, "abs.onnx", str(secret))
    _external_model(zoo, "dotdot.onnx", "../../secret.bin")
    _external_model(zoo, "link.onnx", "link.bin")
    _external_model(zoo, "nul.onnx", "w\x00.bin")  # a NUL byte used to abort discovery (os.path.realpath)
    _external_model(zoo, "fine.onnx", "inside.bin")
    _external_model(zoo, "utf.onnx", "abcdefgh.bin")
    raw = (zoo / "utf.onnx").read_bytes()
    (zoo / "utf.onnx").write_bytes(raw.replace(b"abcdefgh.bin", b"ab\xffdefgh.bin"))  # a location that is not UTF-8
    out = tmp_path / "out"
    code, _, err = audit(capsys, str(tmp_path / "zoo"), "--out", str(out))
    assert code == 0, err
    r = by_name(rows_of(out))
    assert sorted(r) == ["abs.onnx", "dotdot.onnx", "fine.onnx", "link.onnx", "nul.onnx", "utf.onnx"]
    assert r["fine.onnx"]["status"] == "ok"
    assert r["fine.onnx"]["external_data"][0]["location"] == "inside.bin"
    expect = {"abs.onnx": "absolute path", "dotdot.onnx": "'..'", "link.onnx": "outside the model's folder",
              "nul.onnx": "NUL byte", "utf.onnx": "not UTF-8"}
    for name, words in expect.items():
        assert r[name]["status"] == "error" and words in r[name]["reason"], r[name]
        assert r[name]["external_data"] == []  # nothing outside the folder was measured or hashed
    assert secret_sha not in (out / "results.jsonl").read_text()


def test_every_entry_named_like_a_model_gets_a_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    zoo = tmp_path / "zoo"
    zoo.mkdir()
    (zoo / "good.onnx").write_bytes(TINY_CNN.read_bytes())
    os.mkfifo(zoo / "fifo.onnx")
    (zoo / "zero.onnx").symlink_to("/dev/zero")
    (zoo / "dir.onnx").mkdir()
    (zoo / "dir.onnx" / "inner.onnx").write_bytes(TINY_CNN.read_bytes())  # a folder named .onnx is still searched
    (zoo / "dangling.onnx").symlink_to(zoo / "nowhere")
    (zoo / "loop.onnx").symlink_to(zoo / "loop.onnx")
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(zoo / "sock.onnx"))
        out = tmp_path / "out"
        code, stdout, err = audit(capsys, str(zoo), "--out", str(out))
    finally:
        sock.close()
    assert code == 0, err
    r = by_name(rows_of(out))
    assert sorted(r) == ["dangling.onnx", "dir.onnx", "fifo.onnx", "good.onnx", "inner.onnx", "loop.onnx",
                         "sock.onnx", "zero.onnx"]
    assert r["good.onnx"]["status"] == r["inner.onnx"]["status"] == "ok"
    expect = {"fifo.onnx": "named pipe", "zero.onnx": "character device", "dir.onnx": "directory",
              "dangling.onnx": "does not exist", "loop.onnx": "loop", "sock.onnx": "socket"}
    for name, words in expect.items():
        assert r[name]["status"] == "skipped" and words in r[name]["reason"], r[name]
        assert r[name]["sha256"] is None and r[name]["analysis"] is None
    assert "skipped" in stdout
    code, _, err = audit(capsys, str(zoo), "--out", str(out), "--resume")  # skipped rows resume like the others
    assert code == 0 and "8 of 8 models already done" in err, err


def test_a_bad_target_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    os.mkfifo(tmp_path / "fifo.onnx")
    (tmp_path / "dangling.onnx").symlink_to(tmp_path / "nowhere")
    (tmp_path / "loop.onnx").symlink_to(tmp_path / "loop.onnx")
    targets = {"/dev/zero": "character device", str(tmp_path / "fifo.onnx"): "named pipe",
               str(tmp_path / "dangling.onnx"): "does not exist", str(tmp_path / "loop.onnx"): "loop"}
    for target, words in targets.items():
        code, _, err = audit(capsys, target, "--out", str(tmp_path / "out"))
        assert code == 2 and err.count("\n") == 1 and words in err, (target, err)
        assert "Traceback" not in err


def test_the_audit_process_never_reads_a_model_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    zoo = tmp_path / "zoo"
    zoo.mkdir()
    with open(zoo / "big.onnx", "wb") as f:
        f.truncate(20 * 2**30)  # 20 GiB, sparse: no disk, but hashing it reads 20 GiB of zeros
    (zoo / "good.onnx").write_bytes(TINY_CNN.read_bytes())
    parent = os.getpid()
    opened: list[str] = []  # files named like a model that the audit process itself opened
    real_open, real_os_open = builtins.open, os.open

    def note(path: Any) -> None:
        if os.getpid() == parent and str(os.fspath(path) if not isinstance(path, int) else "").endswith(".onnx"):
            opened.append(str(path))

    def spy_open(file: Any, *a: Any, **k: Any) -> Any:
        note(file)
        return real_open(file, *a, **k)

    def spy_os_open(path: Any, *a: Any, **k: Any) -> Any:
        note(path)
        return real_os_open(path, *a, **k)

    monkeypatch.setattr(builtins, "open", spy_open)
    monkeypatch.setattr(os, "open", spy_os_open)
    # big.onnx alone under a short time limit (however fast the machine, either row is right); good.onnx
    # under none, so its "ok" does not depend on the machine's speed either
    code, _, err = audit(capsys, str(zoo / "big.onnx"), "--out", str(tmp_path / "out-big"), "--timeout", "2")
    assert code == 0, err
    code, _, err = audit(capsys, str(zoo / "good.onnx"), "--out", str(tmp_path / "out-good"))
    monkeypatch.undo()
    assert code == 0, err
    assert opened == []  # the children (forked: other pids) did all the reading
    r = {**by_name(rows_of(tmp_path / "out-big")), **by_name(rows_of(tmp_path / "out-good"))}
    assert r["good.onnx"]["status"] == "ok"
    assert r["big.onnx"]["status"] in ("timeout", "error"), r["big.onnx"]  # cut at 2 s, or zeros are not a model
    if r["big.onnx"]["status"] == "timeout":
        assert "hashing the model file" in r["big.onnx"]["reason"]


def _killed_zoo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    zoo = tmp_path / "zoo"
    zoo.mkdir()
    for name in ("termed", "killed", "fine"):
        (zoo / f"{name}.onnx").write_bytes(TINY_CNN.read_bytes())
    monkeypatch.setenv(HOOK, "sigterm:termed,sigkill:killed")
    return zoo


def test_a_worker_killed_by_a_signal_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    zoo = _killed_zoo(tmp_path, monkeypatch)
    monkeypatch.setattr(isolate, "oom_kills", lambda: (0, 0), raising=False)  # the kernel's OOM killer never ran
    out = tmp_path / "out"
    code, _, err = audit(capsys, str(zoo), "--out", str(out), "--jobs", "2")
    assert code == 0, err
    r = by_name(rows_of(out))
    assert (r["termed.onnx"]["status"], r["termed.onnx"]["reason"]) == ("crashed", "worker killed by SIGTERM")
    assert (r["killed.onnx"]["status"], r["killed.onnx"]["reason"]) == \
        ("crashed", "worker killed by SIGKILL (cause unknown; out of memory is one possibility)")
    assert r["fine.onnx"]["status"] == "ok"


def test_sigkill_reads_as_oom_only_when_the_oom_killer_ran(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    zoo = _killed_zoo(tmp_path, monkeypatch)
    calls = iter(range(10**6))
    monkeypatch.setattr(isolate, "oom_kills", lambda: (next(calls), None), raising=False)  # counts up: it ran
    out = tmp_path / "out"
    code, _, err = audit(capsys, str(zoo), "--out", str(out))
    assert code == 0, err
    r = by_name(rows_of(out))
    assert r["killed.onnx"]["status"] == "oom" and "OOM killer" in r["killed.onnx"]["reason"]
    assert r["termed.onnx"]["reason"] == "worker killed by SIGTERM"  # only SIGKILL is the OOM killer's signal


def test_classify_exit_names_each_signal() -> None:
    limits = {"timeout_s": 5.0}
    assert isolate.classify_exit(-signal.SIGTERM, False, limits) == ("crashed", "worker killed by SIGTERM")
    assert isolate.classify_exit(-signal.SIGHUP, False, limits) == ("crashed", "worker killed by SIGHUP")
    assert isolate.classify_exit(-signal.SIGSEGV, False, limits) == ("crashed", "worker crashed (SIGSEGV)")
    assert isolate.classify_exit(-signal.SIGKILL, False, limits, None)[0] == "crashed"  # unknown cause: not oom
    assert isolate.classify_exit(-signal.SIGKILL, False, limits, False)[0] == "crashed"
    assert isolate.classify_exit(-signal.SIGKILL, False, limits, True)[0] == "oom"
    assert isolate.classify_exit(-signal.SIGKILL, True, limits) == ("timeout", "exceeded the time limit (5 s)")
    assert isolate.oom_killer_ran((None, None), (None, None)) is None
    assert isolate.oom_killer_ran((None, 3), (None, 3)) is False
    assert isolate.oom_killer_ran((1, 3), (2, 3)) is True
