"""The command line: outputs on a shipped model, and bad input → one line on stderr, exit 2."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto, numpy_helper

from graphcost.cli import main

ROOT = Path(__file__).resolve().parents[1]
TINY_CNN = ROOT / "models" / "tiny_cnn.onnx"
TINY_TRANSFORMER = ROOT / "models" / "tiny_transformer.onnx"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        code = main(list(args))
    except SystemExit as e:  # argparse exits by itself on flag errors
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_text_report_on_shipped_model(capsys: pytest.CaptureFixture[str]) -> None:
    before = digest(TINY_CNN)
    code, out, err = run(capsys, "analyze", str(TINY_CNN), "--top", "3")
    assert code == 0, err
    assert "Summary" in out and "Top 3 nodes by bound time" in out and "By op type" in out
    assert digest(TINY_CNN) == before


def test_json_and_csv_agree(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "analyze", str(TINY_TRANSFORMER), "--format", "json", "--dim", "batch=2",
                       "--dim", "seq=16", "--hardware", "edge-soc")
    assert code == 0
    report = json.loads(out)
    assert report["schema"] == "graphcost.report/1"
    assert report["binding"] == {"batch": 2, "seq": 16}
    code, out, _ = run(capsys, "analyze", str(TINY_TRANSFORMER), "--format", "csv", "--dim", "batch=2",
                       "--dim", "seq=16")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == len(report["nodes"])  # one row per node
    top = [n for n in report["nodes"] if n["depth"] == 0]
    assert sum(int(r["flops"] or 0) for r in rows if r["depth"] == "0") == sum(n["flops"] or 0 for n in top)


def test_output_file_and_refusing_to_overwrite_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_file = tmp_path / "r.json"
    code, _, _ = run(capsys, "analyze", str(TINY_CNN), "--format", "json", "-o", str(out_file))
    assert code == 0 and json.loads(out_file.read_text())["model"]["node_count"] > 0
    copy = tmp_path / "m.onnx"
    copy.write_bytes(TINY_CNN.read_bytes())
    before = digest(copy)
    code, _, err = run(capsys, "analyze", str(copy), "-o", str(copy))
    assert code == 2 and "refusing to overwrite the input model" in err
    assert digest(copy) == before


def _bad_files(tmp_path: Path) -> dict[str, Path]:
    files: dict[str, Path] = {}
    files["empty"] = tmp_path / "empty.onnx"
    files["empty"].write_bytes(b"")
    good = TINY_CNN.read_bytes()
    files["truncated"] = tmp_path / "truncated.onnx"
    files["truncated"].write_bytes(good[: len(good) // 2])
    files["text"] = tmp_path / "text.onnx"
    files["text"].write_text("this is not a model\n" * 50)
    files["random"] = tmp_path / "random.onnx"
    files["random"].write_bytes(np.random.default_rng(0).bytes(4096))
    files["missing"] = tmp_path / "does_not_exist.onnx"
    files["directory"] = tmp_path / "dir.onnx"
    files["directory"].mkdir()
    # a model whose external data file is gone
    w = numpy_helper.from_array(np.ones((64, 64), np.float32), "w")
    g = oh.make_graph([oh.make_node("MatMul", ["x", "w"], ["y"])], "g",
                      [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                      [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], [w])
    ext = tmp_path / "ext.onnx"
    onnx.save(oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)]), ext, save_as_external_data=True,
              location="ext.bin", size_threshold=0)
    (tmp_path / "ext.bin").unlink()
    files["no_external"] = ext
    return files


def test_bad_files_exit_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for label, path in _bad_files(tmp_path).items():
        before = digest(path) if path.is_file() else None
        code, out, err = run(capsys, "analyze", str(path))
        assert code == 2, (label, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1, (label, err)
        assert str(path) in lines[0] and "Traceback" not in err, (label, err)
        assert out == ""
        if before is not None:
            assert digest(path) == before, label
    err_missing = tmp_path / "ext.onnx"
    code, _, err = run(capsys, "analyze", str(err_missing))
    assert "missing external data file" in err


@pytest.mark.parametrize("args, needle", [
    (["analyze", "X", "--dim", "batch"], "expected NAME=VALUE"),
    (["analyze", "X", "--dim", "batch=two"], "whole number"),
    (["analyze", "X", "--format", "xml"], "invalid choice"),
    (["analyze", "X", "--hardware", "no-such-device-xyz"], "no-such-device-xyz"),
    (["analyze", "X", "--input-shape", "nonsense"], "NAME=DIMS"),
    (["analyze", "X", "--dim", "nosuchdim=3"], "no dim of that name"),
    (["analyze", "X", "--input-shape", "nosuchinput=1x2"], "not a graph input"),
    (["frobnicate"], "invalid choice"),
])
def test_bad_flags_exit_2(args: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = [str(TINY_CNN) if a == "X" else a for a in args]
    code, _, err = run(capsys, *args)
    assert code == 2
    assert needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_hardware_list_and_show(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "hardware", "list")
    assert code == 0 and "edge-soc" in out and "h100" in out.lower()
    code, out, _ = run(capsys, "hardware", "show", "edge-soc")
    assert code == 0 and "50" in out


def test_adhoc_hardware_flags(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "analyze", str(TINY_CNN), "--format", "json", "--peak-flops", "1e12",
                         "--memory-bandwidth", "10GB/s", "--energy-per-byte", "100pJ")
    assert code == 0, err
    hw = json.loads(out)["hardware"]
    assert hw["peak_flops"]["float32"] == 1e12 and hw["memory_bandwidth"] == 10e9
    assert hw["energy_per_byte"] == pytest.approx(100e-12)


def test_console_entry_point_runs_as_module() -> None:
    env = dict(os.environ)
    proc = subprocess.run([sys.executable, "-m", "graphcost", "analyze", str(TINY_CNN), "--format", "json"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["totals"]["flops"] > 0
