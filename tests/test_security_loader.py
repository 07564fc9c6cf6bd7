"""The loader's file-system promises (security issue 9, items 3, 7 and 12).

- A model path that is not a regular file (FIFO, device, directory) is refused in one line before it is
  opened, so a named pipe cannot hang a command; the open itself is non-blocking and re-checked.
- An external-data ``location`` stays inside the model's folder: ``..``, absolute paths, drives, NUL bytes and
  symlinks that lead out are refused before the target is measured, and the message says nothing about the
  outside file (not its size, not whether it exists).
- A valid model whose file name is not UTF-8 analyzes, in every report format.

CLI runs that could hang on a regression go through a subprocess with a 60 s safety timeout: the assertion is
about the outcome (exit 2, one line), never the time.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto, numpy_helper

import graphcost
from graphcost import _scan
from graphcost.load import LoadError, display_path, external_data_path, external_files

REPO = Path(__file__).resolve().parents[1]
SAFETY_TIMEOUT_S = 60  # a safety net against a hang, not a speed requirement
OUTSIDE_SIZE = 98765  # distinctive: must never appear in a refusal
NON_UTF8 = b"m\xff.onnx"

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes need POSIX os.mkfifo")


def _mlp(n: int = 64) -> onnx.ModelProto:
    """x[1, n] @ w[n, 32]: w is 8 KiB for n=64, above the scanner's 1 KiB payload threshold."""
    w = numpy_helper.from_array(np.arange(n * 32, dtype=np.float32).reshape(n, 32), "w")
    g = oh.make_graph([oh.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                      [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
                      [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32])], [w])
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])


def _cli(*args: str | bytes, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    """``python -m graphcost ARGS`` in a child, stdout/stderr strict UTF-8 (no surrogateescape to hide a bug)."""
    env = {**os.environ, "PYTHONIOENCODING": "utf-8:strict", "PYTHONPATH": str(REPO)}
    env.pop("PYTHONUTF8", None)
    return subprocess.run([sys.executable, "-m", "graphcost", *args], cwd=cwd, env=env, capture_output=True,
                          timeout=SAFETY_TIMEOUT_S, check=False)


def _one_line_error(proc: subprocess.CompletedProcess[bytes]) -> str:
    """The refusal: exit 2 and exactly one line on stderr, no traceback."""
    err = proc.stderr.decode("utf-8")
    assert proc.returncode == 2, (proc.returncode, err)
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    return err.strip()


# ------------------------------------------------------------------------------------ non-regular model paths
@needs_fifo
@pytest.mark.parametrize("command", [["analyze"], ["fusion"], ["fold", "-o", "out.onnx"], ["diff", "ok.onnx"]])
def test_fifo_model_path_is_refused_not_opened(tmp_path: Path, command: list[str]) -> None:
    onnx.save(_mlp(), tmp_path / "ok.onnx")
    os.mkfifo(tmp_path / "pipe.onnx")  # nobody ever writes: an open() without O_NONBLOCK blocks forever
    err = _one_line_error(_cli(*command, "pipe.onnx", cwd=tmp_path))
    assert "pipe.onnx" in err and "named pipe" in err
    assert not (tmp_path / "out.onnx").exists()


@needs_fifo
def test_scanner_open_refuses_a_fifo_without_blocking(tmp_path: Path) -> None:
    """The race guard: ``_scan`` itself (used directly by the audit's probe) opens non-blocking and fstat-checks."""
    os.mkfifo(tmp_path / "pipe.onnx")
    code = ("import sys\nfrom graphcost import _scan\n"
            "try:\n    _scan.load_structure(sys.argv[1])\nexcept _scan.ScanError as e:\n    print(e)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "pipe.onnx")], capture_output=True,
                          text=True, timeout=SAFETY_TIMEOUT_S, check=False, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "is a named pipe (FIFO), not a regular file"


def test_symlink_to_a_device_is_refused(tmp_path: Path) -> None:
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero on this system")
    os.symlink("/dev/zero", tmp_path / "zero.onnx")  # endless zeros: must never be read
    with pytest.raises(LoadError, match=r"zero\.onnx: is a character device, not a regular ONNX file$"):
        graphcost.load(tmp_path / "zero.onnx")
    err = _one_line_error(_cli("analyze", "zero.onnx", cwd=tmp_path))
    assert "character device" in err


def test_directory_named_like_a_model_is_refused(tmp_path: Path) -> None:
    (tmp_path / "x.onnx").mkdir()
    with pytest.raises(LoadError, match=r"x\.onnx: is a directory"):
        graphcost.load(tmp_path / "x.onnx")


def test_symlink_to_a_regular_model_still_loads(tmp_path: Path) -> None:
    onnx.save(_mlp(), tmp_path / "real.onnx")
    os.symlink(tmp_path / "real.onnx", tmp_path / "link.onnx")
    value = graphcost.load(tmp_path / "link.onnx").graph().constant_value("w")
    assert value is not None and value.shape == (64, 32)  # the payload read back through the link


# ------------------------------------------------------------------------------------ external data confinement
def _with_location(folder: Path, location: str, name: str = "m.onnx") -> Path:
    """A model in ``folder`` whose weight ``w`` is external at ``location`` (8192 bytes at offset 0)."""
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(_mlp(), folder / "base.onnx", save_as_external_data=True, location="w.bin", size_threshold=0)
    proto = onnx.load(folder / "base.onnx", load_external_data=False)
    for e in proto.graph.initializer[0].external_data:
        if e.key == "location":
            e.value = location
    path = folder / name
    path.write_bytes(proto.SerializeToString())
    return path


def _outside(tmp_path: Path) -> Path:
    target = tmp_path / "outside.bin"
    target.write_bytes(b"\x01" * OUTSIDE_SIZE)
    return target


def _symlink_out(tmp_path: Path) -> str:
    (tmp_path / "d").mkdir()
    os.symlink(_outside(tmp_path), tmp_path / "d" / "inside.bin")  # looks local, leads out
    return "inside.bin"


HOSTILE = {
    "dotdot": lambda tmp: (_outside(tmp), "../outside.bin")[1],
    "dotdot_nested": lambda tmp: (_outside(tmp), "sub/../../outside.bin")[1],
    "dotdot_backslash": lambda tmp: (_outside(tmp), "..\\outside.bin")[1],
    "absolute": lambda tmp: str(_outside(tmp)),
    "drive": lambda tmp: "C:outside.bin",
    "nul_byte": lambda tmp: "w.bin\x00../outside.bin",
    "symlink_out": _symlink_out,
    "missing_outside": lambda tmp: "../no_such_outside.bin",  # refused for leaving, not for being missing
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_external_location_leaving_the_folder_is_refused(tmp_path: Path, case: str) -> None:
    location = HOSTILE[case](tmp_path)
    path = _with_location(tmp_path / "d", location)
    with pytest.raises(LoadError) as info:
        graphcost.load(path)
    message = str(info.value)
    assert "\n" not in message and "tensor 'w'" in message
    assert str(OUTSIDE_SIZE) not in message and "missing" not in message and "truncated" not in message
    err = _one_line_error(_cli("analyze", "d/m.onnx", cwd=tmp_path))
    assert str(OUTSIDE_SIZE) not in err and "missing" not in err
    with pytest.raises(LoadError):
        external_files(onnx.load(path, load_external_data=False), path)  # the audit's and fold's view


def test_external_location_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    """A proto2 string is not validated on parse: upb hands invalid UTF-8 back as bytes, which must not crash."""
    path = _with_location(tmp_path, "w.bin")
    path.write_bytes(path.read_bytes().replace(b"w.bin", b"w\xff.bi"))  # same length: the proto stays valid
    with pytest.raises(LoadError, match="is not UTF-8 text"):
        graphcost.load(path)
    _one_line_error(_cli("analyze", "m.onnx", cwd=tmp_path))


@pytest.mark.parametrize(("location", "reason"), [
    ("", "empty"),
    ("../x", "'..' component"),
    ("/etc/shadow", "absolute path"),
    ("C:\\x", "absolute path"),
    ("a\x00b", "NUL byte"),
])
def test_external_data_path_refuses_before_touching_the_disk(tmp_path: Path, location: str, reason: str) -> None:
    with pytest.raises(LoadError, match=re.escape(reason)):
        external_data_path(str(tmp_path), location)


def test_external_data_path_refuses_non_regular_targets_inside(tmp_path: Path) -> None:
    (tmp_path / "dir.bin").mkdir()
    with pytest.raises(LoadError, match="is a directory"):
        external_data_path(str(tmp_path), "dir.bin")
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "pipe.bin")
        with pytest.raises(LoadError, match="named pipe"):
            external_data_path(str(tmp_path), "pipe.bin")


@needs_fifo
def test_external_data_fifo_inside_the_folder_is_refused(tmp_path: Path) -> None:
    path = _with_location(tmp_path, "pipe.bin")
    os.mkfifo(tmp_path / "pipe.bin")
    err = _one_line_error(_cli("analyze", "m.onnx", cwd=tmp_path))
    assert "pipe.bin" in err and "named pipe" in err
    with pytest.raises(LoadError, match="named pipe"):
        graphcost.load(path)


def test_payload_reader_refuses_a_location_outside(tmp_path: Path) -> None:
    """Values are read through the same gate: a hand-made proto pointing out gets no bytes, not even a size."""
    _outside(tmp_path)
    (tmp_path / "d").mkdir()
    t = onnx.TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4], data_location=TensorProto.EXTERNAL)
    for key, value in (("location", "../outside.bin"), ("offset", "0"), ("length", "16")):
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    with pytest.raises(_scan.ScanError, match=re.escape("'..' component")) as info:
        _scan.read_external_payload(t, str(tmp_path / "d"))
    assert str(OUTSIDE_SIZE) not in str(info.value)


def test_external_data_inside_the_folder_still_loads(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    onnx.save(_mlp(), tmp_path / "m.onnx", save_as_external_data=True, location="sub/w.bin", size_threshold=0)
    os.symlink("sub/w.bin", tmp_path / "alias.bin")  # a symlink that stays inside is fine
    _with_location(tmp_path, "alias.bin", name="aliased.onnx")
    for name in ("m.onnx", "aliased.onnx"):
        model = graphcost.load(tmp_path / name)
        expected = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
        np.testing.assert_array_equal(model.graph().constant_value("w"), expected)
        assert external_files(model.proto, tmp_path / name) == [os.path.realpath(tmp_path / "sub" / "w.bin")]
        assert _cli("analyze", name, cwd=tmp_path).returncode == 0


# ------------------------------------------------------------------------------------ non-UTF-8 file names
def _non_utf8_model(tmp_path: Path) -> bytes:
    """A valid model saved as ``m\\xff.onnx`` (bytes path); skips where the file system insists on UTF-8."""
    path = os.path.join(os.fsencode(tmp_path), NON_UTF8)
    try:
        with open(path, "wb") as f:
            f.write(_mlp().SerializeToString())
    except OSError as e:
        pytest.skip(f"this file system refuses non-UTF-8 names ({e})")
    return path


@pytest.mark.parametrize("fmt", ["text", "json", "csv", "html"])
def test_non_utf8_file_name_analyzes_in_every_format(tmp_path: Path, fmt: str) -> None:
    _non_utf8_model(tmp_path)
    proc = _cli("analyze", NON_UTF8, "--format", fmt, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")
    out = proc.stdout.decode("utf-8")  # valid UTF-8, whatever the name
    if fmt == "json":
        assert os.fsencode(json.loads(out)["model"]["path"]) == NON_UTF8  # exact name, JSON-escaped
    proc = _cli("analyze", NON_UTF8, "--format", fmt, "-o", f"report.{fmt}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")
    (tmp_path / f"report.{fmt}").read_text(encoding="utf-8")


def test_non_utf8_file_name_loads_and_reads_its_own_payloads(tmp_path: Path) -> None:
    path = os.fsdecode(_non_utf8_model(tmp_path))
    model = graphcost.load(path)
    w = model.proto.graph.initializer[0]
    location = next(e.value for e in w.external_data if e.key == "location")
    assert location == _scan.OWN_FILE_PREFIX + "m%FF.onnx"  # a protobuf string must be UTF-8
    np.testing.assert_array_equal(model.graph().constant_value("w"),
                                  np.arange(64 * 32, dtype=np.float32).reshape(64, 32))
    assert external_files(model.proto, path) == []  # the own file is not external data


def test_non_utf8_file_name_in_an_error_is_one_printable_line(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    bad = os.path.join(os.fsencode(tmp_path), b"bad\xfe\n.onnx")
    try:
        with open(bad, "wb") as f:
            f.write(b"\x08\x07garbage")
    except OSError as e:
        pytest.skip(f"this file system refuses such names ({e})")
    err = _one_line_error(_cli("analyze", b"bad\xfe\n.onnx", cwd=tmp_path))
    assert err.startswith("graphcost: bad\\udcfe\\n.onnx: ")


def test_display_path_escapes_what_a_terminal_would_act_on() -> None:
    assert display_path(os.fsdecode(b"m\xff.onnx")) == "m\\udcff.onnx"
    assert display_path(b"a\xfe\nb") == "a\\udcfe\\nb"
    assert display_path("ok/ünï.onnx") == "ok/ünï.onnx"  # letters are kept
    assert display_path("x\u202ey\x1b") == "x\\u202ey\\x1b"


@pytest.mark.parametrize("fmt", ["text", "json", "csv", "html"])
@pytest.mark.parametrize("where", ["node", "op_type", "tensor", "subgraph"])
def test_non_utf8_names_inside_the_model_analyze_escaped(tmp_path: Path, fmt: str, where: str) -> None:
    # protobuf hands a string field that is not UTF-8 over as bytes; the loader turns every one into escaped text
    # (was: "validate: internal error (TypeError: can only concatenate str (not "bytes") to str)").
    relu = oh.make_node("Relu", ["x"], ["y"], name="n0")
    if where == "subgraph":
        branch = oh.make_graph([oh.make_node("Relu", ["x"], ["z"], name="n0")], "b", [],
                               [oh.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])])
        cond = oh.make_tensor_value_info("c", TensorProto.BOOL, [])
        node = oh.make_node("If", ["c"], ["y"], name="if", then_branch=branch, else_branch=branch)
        graph = oh.make_graph([node], "g", [cond, oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    else:
        graph = oh.make_graph([relu], "g", [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    raw = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]).SerializeToString()
    old = {"node": b"\x02n0", "subgraph": b"\x02n0", "op_type": b"\x04Relu", "tensor": b"\x01y"}[where]
    new = {"node": b"\x02n\xff", "subgraph": b"\x02n\xff", "op_type": b"\x04Re\xffu", "tensor": b"\x01\xff"}[where]
    assert old in raw
    path = tmp_path / "m.onnx"
    path.write_bytes(raw.replace(old, new))
    proc = _cli("analyze", str(path), "--format", fmt, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr.decode()
    out = proc.stdout.decode("utf-8")  # valid UTF-8 all through
    assert "b'" not in out  # never a bytes repr
    if fmt == "json":  # every name is in the JSON, escaped once by the loader and once by JSON
        assert "\\\\xff" in out
