"""No command writes over its own inputs: the one output-path guard (graphcost/cli/output.py) in every command.

Each refused ``-o`` must exit 2 with one line on stderr, leave the model and its weights byte-identical, and fire
before anything runs (no onnxruntime session, no measurement, no export).
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto, numpy_helper

from graphcost.cli.output import OutputPathError, check_output, protected_paths
from tests.clihelp import run_cli

ROOT = Path(__file__).resolve().parents[1]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tiny_model(folder: Path, name: str = "m.onnx", weights: str = "w.bin") -> tuple[Path, Path]:
    """Y = X · W with X [1, 4], W [4, 4] stored in the external-data file ``weights`` beside the model."""
    w = numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(4, 4), "W")
    graph = oh.make_graph([oh.make_node("MatMul", ["X", "W"], ["Y"], name="mm")], "g",
                          [oh.make_tensor_value_info("X", TensorProto.FLOAT, [1, 4])],
                          [oh.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 4])], [w])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 8
    path = folder / name
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=weights,
              size_threshold=0)
    assert (folder / weights).is_file()
    return path, folder / weights


TARGETS = ("model", "model-symlink", "model-hardlink", "model-dotdot", "weights", "weights-symlink",
           "weights-hardlink", "weights-dotdot")


def target_path(kind: str, model: Path, weights: Path, tmp: Path) -> Path:
    """An output path that is, or resolves to, the model or its weights."""
    original = model if kind.startswith("model") else weights
    how = kind.split("-", 1)[1] if "-" in kind else ""
    if how == "symlink":
        link = tmp / f"link-{original.name}"
        link.symlink_to(original)
        return link
    if how == "hardlink":
        other = tmp / "elsewhere"
        other.mkdir(exist_ok=True)
        link = other / f"hard-{original.name}"
        os.link(original, link)
        return link
    if how == "dotdot":
        (tmp / "sub").mkdir(exist_ok=True)
        return tmp / "sub" / ".." / original.name
    return original


@pytest.fixture
def ort_calls(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every onnxruntime measurement the bench/gap commands start (a refused -o must start none)."""
    import graphcost.measure

    calls: list[object] = []
    real = graphcost.measure.run_ort

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(graphcost.measure, "run_ort", spy)
    return calls


def _one_line_refusal(code: int, out: str, err: str) -> str:
    assert code == 2, (code, out, err)
    assert err.startswith("graphcost: ") and err.count("\n") == 1, err
    assert "refusing to overwrite" in err, err
    return err


COMMANDS: dict[str, Callable[[str, str], list[str]]] = {
    "analyze": lambda m, o: ["analyze", m, "-o", o],
    "bench": lambda m, o: ["bench", m, "--repeats", "1", "--warmup", "0", "-o", o],
    "gap": lambda m, o: ["gap", m, "--repeats", "1", "--warmup", "0", "--hardware", "edge-soc", "-o", o],
    "fold": lambda m, o: ["fold", m, "-o", o],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("kind", TARGETS)
def test_output_onto_the_model_or_its_weights_is_refused(command: str, kind: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str],
                                                         ort_calls: list[object]) -> None:
    model, weights = tiny_model(tmp_path)
    before = (sha(model), sha(weights))
    out = target_path(kind, model, weights, tmp_path)
    err = _one_line_refusal(*run_cli(capsys, *COMMANDS[command](str(model), str(out))))
    assert ("external data file 'w.bin'" in err) == kind.startswith("weights"), err  # names what it protects
    assert (sha(model), sha(weights)) == before
    assert ort_calls == []  # refused before anything ran
    if kind.endswith("symlink"):
        assert out.is_symlink()  # the link itself is left as it was, too


@pytest.mark.parametrize("command", ["bench", "gap"])
def test_bench_and_gap_through_a_symlinked_folder(command: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str], ort_calls: list[object]) -> None:
    (tmp_path / "real").mkdir()
    model, weights = tiny_model(tmp_path / "real")
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    before = (sha(model), sha(weights))
    for out in (tmp_path / "alias" / "m.onnx", tmp_path / "alias" / "w.bin"):
        _one_line_refusal(*run_cli(capsys, *COMMANDS[command](str(model), str(out))))
    # the model named through the alias, the output through the real folder
    _one_line_refusal(*run_cli(capsys, *COMMANDS[command](str(tmp_path / "alias" / "m.onnx"), str(weights))))
    assert (sha(model), sha(weights)) == before and ort_calls == []


def test_fold_refuses_a_data_file_that_lands_on_the_weights(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """fold writes OUT and OUT.data: ``-o w`` beside weights named ``w.data`` would replace the weights."""
    model, weights = tiny_model(tmp_path, weights="w.data")
    before = (sha(model), sha(weights))
    code, out, err = run_cli(capsys, "fold", str(model), "-o", str(tmp_path / "w"))
    assert out == "" and code == 2 and err.count("\n") == 1 and "its data file" in err and "w.data" in err, err
    assert (sha(model), sha(weights)) == before and not (tmp_path / "w").exists()


def test_the_hardware_spec_is_an_input_too(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           ort_calls: list[object]) -> None:
    model, _ = tiny_model(tmp_path)
    spec = tmp_path / "spec.toml"
    from graphcost.hardware import catalog

    spec.write_text(catalog.to_toml(catalog.resolve("edge-soc")), encoding="utf-8")
    before = sha(spec)
    for args in (["analyze", str(model)], ["bench", str(model), "--repeats", "1", "--warmup", "0"],
                 ["gap", str(model), "--repeats", "1", "--warmup", "0"], ["fold", str(model)],
                 ["compare", "--frameworks", "onnxruntime", "--batch", "1", "--repeats", "1"]):
        err = _one_line_refusal(*run_cli(capsys, *args, "--hardware", str(spec), "-o", str(spec)))
        assert "--hardware spec file" in err
    assert sha(spec) == before and ort_calls == []


@pytest.mark.parametrize("command", ["analyze", "bench", "compare", "hardware-detect"])
def test_a_fifo_is_refused_not_opened(command: str, tmp_path: Path) -> None:
    """Opening a FIFO for writing blocks until a reader comes: the guard refuses it by its type instead.

    A subprocess, so that a regression hangs one child (killed after a generous 60 s) rather than the suite.
    """
    model, _ = tiny_model(tmp_path)
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    args = {"analyze": ["analyze", str(model)], "bench": ["bench", str(model), "--repeats", "1", "--warmup", "0"],
            "compare": ["compare", "--frameworks", "onnxruntime", "--batch", "1", "--repeats", "1",
                        "--hardware", "edge-soc"],
            "hardware-detect": ["hardware", "detect"]}[command]
    try:
        p = subprocess.run([sys.executable, "-m", "graphcost", *args, "-o", str(fifo)], capture_output=True,
                           text=True, timeout=60, cwd=ROOT)
    except subprocess.TimeoutExpired:
        pytest.fail("the command opened the FIFO and blocked")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "is a FIFO" in p.stderr, p.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # still a FIFO: not replaced by a file either


def test_dev_null_is_still_a_fine_output(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """bench/run.py times ``analyze M --format json -o /dev/null``: a character device is written, not replaced."""
    model, _ = tiny_model(tmp_path)

    def no_replace(src: str, dst: str) -> None:  # a regression must fail here, not replace /dev/null as root
        raise OSError(1, f"test: os.replace({src!r}, {dst!r}) must not be called for a device")

    monkeypatch.setattr(os, "replace", no_replace)
    code, out, err = run_cli(capsys, "analyze", str(model), "--format", "json", "-o", os.devnull)
    assert code == 0 and out == "" and err == "", err
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


@pytest.mark.parametrize("args", [["analyze", "MODEL"], ["bench", "MODEL", "--repeats", "1", "--warmup", "0"],
                                  ["compare", "--frameworks", "onnxruntime", "--batch", "1", "--repeats", "1"],
                                  ["hardware", "detect"]])
def test_a_directory_is_refused(args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model, _ = tiny_model(tmp_path)
    argv = [str(model) if a == "MODEL" else a for a in args]
    code, _, err = run_cli(capsys, *argv, "-o", str(tmp_path))
    assert code == 2 and err.count("\n") == 1 and "is a directory" in err, err


def test_normal_outputs_still_work_and_are_written_atomically(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    model, weights = tiny_model(tmp_path)
    before = (sha(model), sha(weights))
    report = tmp_path / "report.txt"
    code, out, err = run_cli(capsys, "analyze", str(model), "-o", str(report))
    assert code == 0 and out == "" and "mm" in report.read_text(), err
    code, out, err = run_cli(capsys, "bench", str(model), "--repeats", "1", "--warmup", "0", "--format", "json",
                             "-o", str(report))
    assert code == 0 and '"graphcost.bench/1"' in report.read_text(), err
    # a report written over a hard link replaces the name: the other name keeps its old content
    other = tmp_path / "other.txt"
    other.write_text("keep me\n")
    shared = tmp_path / "shared.txt"
    os.link(other, shared)
    code, _, err = run_cli(capsys, "analyze", str(model), "-o", str(shared))
    assert code == 0 and "mm" in shared.read_text() and other.read_text() == "keep me\n", err
    # a report written through a symlink lands in the link's target (as before), the link stays a link
    target = tmp_path / "target.txt"
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    code, _, err = run_cli(capsys, "analyze", str(model), "-o", str(link))
    assert code == 0 and link.is_symlink() and "mm" in target.read_text(), err
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == [] and (sha(model), sha(weights)) == before


def test_a_failed_write_leaves_the_old_report_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from graphcost import cli

    report = tmp_path / "report.txt"
    report.write_text("the old report\n")

    def fail_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail_replace)
    with pytest.raises(cli.CliError, match="cannot write"):
        cli.write_output(str(report), "the new report, longer than the old\n")
    assert report.read_text() == "the old report\n"
    assert [p.name for p in tmp_path.iterdir()] == ["report.txt"]  # the temporary file is gone


def test_export_refuses_its_source_under_any_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    factory = tmp_path / "model.py"
    factory.write_text("def make():\n    raise AssertionError('not reached: -o is checked first')\n")
    before = sha(factory)
    (tmp_path / "sub").mkdir()
    hard = tmp_path / "hard.py"
    os.link(factory, hard)
    sym = tmp_path / "sym.py"
    sym.symlink_to(factory)
    for out in (hard, sym, tmp_path / "sub" / ".." / "model.py"):
        code, _, err = run_cli(capsys, "export", f"{factory}:make", "-o", str(out), "--input", "x=4")
        assert code == 2 and err.count("\n") == 1 and "refusing to overwrite the input" in err, err
    assert sha(factory) == before and sym.is_symlink()


def test_export_refuses_a_saved_model_file_through_a_link(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    saved = tmp_path / "saved"
    (saved / "variables").mkdir(parents=True)
    pb = saved / "saved_model.pb"
    pb.write_bytes(b"not really a graph")
    before = sha(pb)
    link = tmp_path / "out.onnx"
    os.link(pb, link)
    code, _, err = run_cli(capsys, "export", str(saved), "-o", str(link))
    assert code == 2 and err.count("\n") == 1 and "refusing to overwrite the input SavedModel's file" in err, err
    assert sha(pb) == before


def test_audit_refuses_an_out_folder_whose_files_are_the_models(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "zoo").mkdir()
    model, weights = tiny_model(tmp_path / "zoo")
    before = (sha(model), sha(weights))
    out = tmp_path / "out"
    out.mkdir()
    os.link(model, out / "results.jsonl")  # appended to, and truncated back to its last whole row
    code, _, err = run_cli(capsys, "audit", str(tmp_path / "zoo"), "--out", str(out), "--jobs", "1")
    assert code == 2 and err.count("\n") == 1 and "refusing to overwrite the audited model" in err, err
    (out / "results.jsonl").unlink()
    os.link(weights, out / "results.jsonl")  # a hard link the guard cannot name: refused as a link
    code, _, err = run_cli(capsys, "audit", str(tmp_path / "zoo"), "--out", str(out), "--jobs", "1")
    assert code == 2 and err.count("\n") == 1 and "hard link" in err, err
    # a model named on the command line, in the folder the summaries are written to
    named = tmp_path / "zoo" / "summary.csv"
    named.write_bytes(model.read_bytes())
    code, _, err = run_cli(capsys, "audit", str(named), "--out", str(tmp_path / "zoo"), "--jobs", "1")
    assert code == 2 and err.count("\n") == 1 and "refusing to overwrite the audited model" in err, err
    assert (sha(model), sha(weights)) == before and sha(named) == before[0]


def test_protected_paths_names_the_model_and_every_weights_file(tmp_path: Path) -> None:
    model, weights = tiny_model(tmp_path)
    assert sorted(protected_paths(str(model))) == sorted([str(model), str(weights)])
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x00not a model")
    assert list(protected_paths(str(junk))) == [str(junk)]  # unloadable: just itself
    (tmp_path / "sub").mkdir()
    with pytest.raises(OutputPathError, match="refusing to overwrite the input model's external data"):
        check_output(tmp_path / "sub" / ".." / "w.bin", protected_paths(str(model)))
    check_output(tmp_path / "fresh.txt", protected_paths(str(model)))  # a new file is fine

    def not_needed() -> dict[str, str]:
        raise AssertionError("a path that does not exist yet cannot be an input: no model load needed")

    check_output(tmp_path / "fresh.txt", not_needed)
    check_output(os.devnull, not_needed)
    with pytest.raises(OutputPathError, match=r"refusing to overwrite the input model$"):
        check_output(model, lambda: protected_paths(str(model)))


def test_an_output_that_cannot_be_the_weights_is_checked_without_loading_the_model(tmp_path: Path) -> None:
    """External data lies inside the model's real folder, so an existing single-named file elsewhere is checked
    against the model's own path only (no structure load); inside the folder, or through a second hard link,
    the weights are found and protected as before."""
    folder = tmp_path / "model"
    folder.mkdir()
    model, weights = tiny_model(folder)
    elsewhere = tmp_path / "report.json"
    elsewhere.write_text("old")
    beside = folder / "report.json"
    beside.write_text("old")
    hard = tmp_path / "hard.bin"
    os.link(weights, hard)
    real_weights = os.path.realpath(weights)
    assert protected_paths(model, elsewhere) == {str(model): "the input model"}
    assert real_weights in protected_paths(model, beside)
    assert real_weights in protected_paths(model, hard)
    assert real_weights in protected_paths(model)  # no output given: everything, as before
    with pytest.raises(OutputPathError, match="refusing to overwrite the input model's external data"):
        check_output(hard, lambda: protected_paths(model, hard))
    check_output(elsewhere, lambda: protected_paths(model, elsewhere))  # nothing to refuse
