"""One front door (issue 10, items 1 and 6): a Binding, Analysis.of, and the same dim flags on every command.

- ``graphcost.binding.Binding`` is the only place a default dim value lives; its errors speak of dims, not flags.
- Every subcommand that takes a model lists ``--dim``, ``--input-shape`` and ``--input-value`` (one shared
  definition) and says the same line for a dim the model does not have.
- Runs (``bench``, ``fold``, ``gap``) take sizes the model states (``imgsz`` metadata, declared outputs) and refuse
  in one line, naming the dims, where 1 would break the model (a YOLO-style stride-2 Conv → Resize ×2 → Concat),
  instead of failing inside onnxruntime.

CLI runs that reach onnxruntime are subprocesses with a 60 s timeout that is only a hang guard.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx.parser
import pytest
from onnx import numpy_helper

from graphcost.analysis import Analysis
from graphcost.api import analyze
from graphcost.binding import DEFAULT_DIM_VALUE, Binding, UnboundDims, UnknownDim
from graphcost.cli import main

ROOT = Path(__file__).resolve().parents[1]
SAFETY_S = 60  # a hang guard only; nothing asserts on time

YOLO_STYLE = """<ir_version: 8, opset_import: ["" : 17]>
agraph (float[batch,3,height,width] x) => (float[batch,7,height,width] y) {
  c = Conv<strides = [2, 2], pads = [1, 1, 1, 1], kernel_shape = [3, 3]>(x, w)
  scales = Constant<value = float[4] {1, 1, 2, 2}>()
  r = Resize<mode = "nearest">(c, , scales)
  y = Concat<axis = 1>(x, r)
}"""
"""At height 1 the stride-2 Conv gives 1, Resize ×2 gives 2, and the Concat with the 1-high skip branch fails."""


def yolo_style(tmp_path: Path, name: str = "yolo.onnx", imgsz: str | None = None) -> Path:
    m = onnx.parser.parse_model(YOLO_STYLE)
    m.graph.initializer.append(numpy_helper.from_array(np.full((4, 3, 3, 3), 0.1, np.float32), "w"))
    if imgsz is not None:
        p = m.metadata_props.add()
        p.key, p.value = "imgsz", imgsz
    path = tmp_path / name
    onnx.save(m, path)
    return path


def dynamic_relu(tmp_path: Path) -> Path:
    path = tmp_path / "relu.onnx"
    onnx.save(onnx.parser.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
agraph (float[batch,4] x) => (float[batch,4] y) { y = Relu(x) }"""), path)
    return path


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def graphcost(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "GRAPHCOST_DEBUG"}
    return subprocess.run([sys.executable, "-m", "graphcost", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=SAFETY_S)


# ------------------------------------------------------------------------------------------------ the Binding
def test_static_binding_defaults_every_other_dim() -> None:
    b = Binding.static({"batch", "seq", "unk__3"}, {"seq": 16})
    assert b.values == {"batch": DEFAULT_DIM_VALUE, "unk__3": DEFAULT_DIM_VALUE, "seq": 16}
    assert b.user == ("seq",) and b.defaulted == ("batch", "unk__3") and b.value("seq") == 16


def test_unknown_dim_is_a_value_error_without_flag_wording() -> None:
    with pytest.raises(UnknownDim) as info:
        Binding.static({"batch", "seq"}, {"x": 1})
    text = str(info.value)
    assert isinstance(info.value, ValueError) and info.value.name == "x" and info.value.known == ("batch", "seq")
    assert text.startswith("the model has no dim named 'x'") and "its dims: batch, seq" in text
    assert "--" not in text  # the CLI adds the flag
    with pytest.raises(UnknownDim, match="none, all shapes are static"):
        Binding.static(set(), {"x": 1})
    with pytest.raises(UnknownDim):
        Binding.static({"batch"}).value("seq")


def test_analysis_of_runs_the_front_door_once(tmp_path: Path) -> None:
    a = Analysis.of(yolo_style(tmp_path), dims={"height": 64, "width": 64})
    assert a.input_dims == ("batch", "height", "width")
    assert a.binding.as_dict() == {"batch": 1, "height": 64, "width": 64} and a.binding.defaulted == ("batch",)
    assert a.costs.nodes and a.graph.tensor("y") is not None and not a.validation.refusals
    with pytest.raises(UnknownDim):
        Analysis.of(yolo_style(tmp_path), dims={"nosuch": 2})
    ignored = Analysis.of(yolo_style(tmp_path), dims={"nosuch": 2}, unknown_dims="ignore")
    assert ignored.ignored_dims == ("nosuch",)


def test_run_binding_refuses_dims_that_break_at_1_and_defaults_the_rest(tmp_path: Path) -> None:
    a = Analysis.of(yolo_style(tmp_path))
    with pytest.raises(UnboundDims) as info:
        a.run_binding()
    assert info.value.names == ("height", "width") and "Concat" in info.value.why
    assert str(info.value).startswith("dims height, width are not bound") and "--dim" not in str(info.value)
    ok = Analysis.of(yolo_style(tmp_path), dims={"height": 32, "width": 32}).run_binding()
    assert ok.values["batch"] == DEFAULT_DIM_VALUE and ok.defaulted == ("batch",)  # batch 1 breaks nothing


def test_run_binding_takes_imgsz_metadata(tmp_path: Path) -> None:
    b = Analysis.of(yolo_style(tmp_path, imgsz="[64, 96]")).run_binding()
    assert (b.values["height"], b.values["width"]) == (64, 96)
    assert b.taken == {"height": "metadata imgsz", "width": "metadata imgsz"}
    square = Analysis.of(yolo_style(tmp_path, "sq.onnx", imgsz="320")).run_binding()
    assert (square.values["height"], square.values["width"]) == (320, 320)
    for junk in ("__import__('os')", "[0, 640]", "[1, 2, 3]", "9" * 40):  # parsed as numbers, never evaluated
        with pytest.raises(UnboundDims):
            Analysis.of(yolo_style(tmp_path, "junk.onnx", imgsz=junk)).run_binding()


def test_run_binding_takes_a_declared_output_that_pins_a_dim(tmp_path: Path) -> None:
    path = tmp_path / "pinned.onnx"
    onnx.save(onnx.parser.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
agraph (float[n,4] x) => (float[3,4] y) { y = Relu(x) }"""), path)
    b = Analysis.of(path).run_binding()
    assert b.values["n"] == 3 and b.taken == {"n": "declared output 'y'"}


def test_input_values_take_the_inputs_type_and_rank(tmp_path: Path) -> None:
    path = tmp_path / "v.onnx"
    onnx.save(onnx.parser.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
agraph (float[2,4] x, int64[4] shape, int64 sr) => (float[2,4] y) { y = Relu(x) }"""), path)
    a = Analysis.of(path, input_values={"shape": [2, 4, 1, 1], "sr": 16000})
    assert a.input_values["shape"].dtype == np.int64 and a.input_values["shape"].shape == (4,)
    assert a.input_values["sr"].shape == () and int(a.input_values["sr"]) == 16000
    with pytest.raises(ValueError, match="not a graph input"):
        Analysis.of(path, input_values={"nope": 1})
    with pytest.raises(ValueError, match="is not a int64 value"):
        Analysis.of(path, input_values={"sr": 0.5})


# ------------------------------------------------------------------------------------------------ the CLI
MODEL_COMMANDS = {
    "analyze": ["analyze", "M"],
    "fusion": ["fusion", "M"],
    "fold": ["fold", "M", "-o", "OUT"],
    "bench": ["bench", "M", "--warmup", "0", "--repeats", "1"],
    "gap": ["gap", "M", "--warmup", "0", "--repeats", "1", "--hardware", "h100"],
    "diff": ["diff", "M", "M"],
    "audit": ["audit", "M", "--out", "OUT"],
}


@pytest.mark.parametrize("command", sorted(MODEL_COMMANDS))
def test_every_model_command_lists_the_shared_flags(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = capsys.readouterr().out
    for flag in ("--dim NAME=VALUE", "--input-shape INPUT=DIMS", "--input-value NAME=V"):
        assert flag in out, (command, flag)
    assert "dims and inputs" in out  # one argument group, from graphcost.cli.model_flags


@pytest.mark.parametrize("command", sorted(MODEL_COMMANDS))
def test_bad_flag_syntax_is_the_same_line_everywhere(command: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    model = str(dynamic_relu(tmp_path))
    args = [model if a == "M" else str(tmp_path / "out.onnx") if a == "OUT" else a for a in MODEL_COMMANDS[command]]
    for bad, needle in ((["--dim", "batch"], "--dim 'batch': expected NAME=VALUE"),
                        (["--input-value", "x=abc"], "--input-value 'x=abc': 'abc' is not a number"),
                        (["--input-shape", "nonsense"], "expected NAME=DIMS")):
        code, out, err = cli(capsys, *args, *bad)
        assert code == 2 and out == "" and needle in err and len(err.strip().splitlines()) == 1, (command, err)


@pytest.mark.parametrize("command", ["analyze", "fusion", "fold", "bench", "gap"])
def test_a_dim_the_model_lacks_is_the_same_line_everywhere(command: str, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    model = str(dynamic_relu(tmp_path))
    args = [model if a == "M" else str(tmp_path / "out.onnx") if a == "OUT" else a for a in MODEL_COMMANDS[command]]
    code, out, err = cli(capsys, *args, "--dim", "x=1")
    assert code == 2 and out == "", err
    assert err == (f"graphcost: {model}: --dim x: the model has no dim named 'x' (no input dim of that name, and no "
                   "dim of that name in its inferred shapes or costs; its dims: batch)\n")
    assert not (tmp_path / "out.onnx").exists()


def test_diff_refuses_a_dim_neither_model_has(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = str(dynamic_relu(tmp_path))
    code, _, err = cli(capsys, "diff", model, model, "--dim", "x=1")
    assert code == 2 and "--dim x: models A and B have no dim named 'x'" in err and err.count("\n") == 1


def test_fold_takes_input_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "folded.onnx"
    code, stdout, err = cli(capsys, "fold", str(yolo_style(tmp_path)), "-o", str(out), "--input-shape",
                            "x=2x3x32x32")
    assert code == 0, err
    assert "verified in onnxruntime" in stdout and out.is_file()


def test_bench_refuses_a_yolo_style_model_naming_the_dims(tmp_path: Path) -> None:
    model = yolo_style(tmp_path)
    r = graphcost("bench", model, "--warmup", "0", "--repeats", "1", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr
    assert "dims height, width are not bound; pass --dim height=N --dim width=N" in lines[0]
    assert "onnxruntime" not in lines[0]  # refused before any run, not a failure inside it


def test_bench_accepts_imgsz_metadata_or_dims(tmp_path: Path) -> None:
    with_meta = graphcost("bench", yolo_style(tmp_path, "meta.onnx", imgsz="[64, 64]"), "--warmup", "0",
                          "--repeats", "1", cwd=tmp_path)
    assert with_meta.returncode == 0, with_meta.stderr
    assert "x=1x3x64x64" in with_meta.stdout and "height=64 (metadata imgsz)" in with_meta.stderr
    with_dims = graphcost("bench", yolo_style(tmp_path), "--dim", "height=32", "--dim", "width=32", "--warmup", "0",
                          "--repeats", "1", cwd=tmp_path)
    assert with_dims.returncode == 0, with_dims.stderr
    assert "x=1x3x32x32" in with_dims.stdout and "unbound dims batch=1" in with_dims.stderr


def test_a_failed_bench_run_says_one_line_not_a_warning_too(tmp_path: Path) -> None:
    path = tmp_path / "bad.onnx"  # its batch is unbound (a warning once it runs), and the run fails
    onnx.save(onnx.parser.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
agraph (float[batch,6] x) => (float[batch,7,5] y) {
  s = Constant<value = int64[3] {-1, 7, 5}>()
  y = Reshape(x, s)
}"""), path)
    r = graphcost("bench", path, "--warmup", "0", "--repeats", "1", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "warning" not in r.stderr, r.stderr


# ------------------------------------------------------------------------------------------------ one place
def test_the_default_dim_value_and_dim_flags_live_in_one_place() -> None:
    sources = [p for d in ("graphcost", "passes") for p in (ROOT / d).rglob("*.py")]
    defined = [p.relative_to(ROOT).as_posix() for p in sources if re.search(r"^DEFAULT_DIM_VALUE\s*=",
                                                                            p.read_text("utf-8"), re.M)]
    assert defined == ["graphcost/binding.py"]
    declared = [p.relative_to(ROOT).as_posix() for p in sources if '"--dim"' in p.read_text("utf-8")]
    assert declared == ["graphcost/cli/flags.py"]
    for gone in ("def _complete_binding", "def declared_dims", "def _binding(", "all_dims(graph, costs) - set("):
        assert not [p for p in sources if gone in p.read_text("utf-8")], gone


def test_fold_verifies_a_model_whose_file_name_is_not_utf8(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                           ) -> None:
    src = os.fsdecode(os.fsencode(str(tmp_path)) + b"/m\xff.onnx")  # ORT cannot open it by name: given bytes
    os.replace(yolo_style(tmp_path), src)
    out = tmp_path / "folded.onnx"
    code, stdout, err = cli(capsys, "fold", src, "-o", str(out), "--dim", "height=16", "--dim", "width=16")
    assert code == 0, err
    assert "verified in onnxruntime" in stdout and "m\\udcff.onnx" in stdout and out.is_file()


IF_ON_SR = """
<ir_version: 8, opset_import: ["" : 17]>
g (int64 sr, float[1,64] x, float[64,128] w1, float[64,32] w2, float[32,128] w3) => (float[1,128] y) {
  k = Constant<value = int64 {16000}>()
  c = Equal(sr, k)
  y = If(c) <
    then_branch = t () => (float[1,128] ty) { ty = MatMul(x, w1) },
    else_branch = e () => (float[1,128] ey) { eh = MatMul(x, w2)  ey = MatMul(eh, w3) }
  >
}
"""


@pytest.mark.parametrize(("flags", "macs"), [
    ((), max(64 * 128, 64 * 32 + 32 * 128)),  # no value: the more expensive branch (then: 8,192 > 6,144)
    (("--input-value", "sr=16000"), 64 * 128),  # then: x(1×64)·w1(64×128)
    (("--input-value", "sr=8000"), 64 * 32 + 32 * 128),  # else: x·w2(64×32), then (1×32)·w3(32×128)
])
def test_input_value_takes_one_branch_keeps_the_inputs_and_says_so(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str],
                                                                   flags: tuple[str, ...], macs: int) -> None:
    import json

    path = tmp_path / "vad.onnx"
    onnx.save(onnx.parser.parse_model(IF_ON_SR), str(path))
    assert main(["analyze", str(path), "--format", "json", *flags]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["totals"]["macs"] == macs
    # the value only decides shapes and the branch: sr stays an input, not a stored parameter
    assert report["model"]["parameter_count"] == 0
    assert report["model"]["inputs"][0]["name"] == "sr"
    fixed = [w["message"] for w in report["warnings"] if "--input-value" in w["message"]]
    assert fixed == ([f"inputs fixed (--input-value): {flags[1]}; shapes and If branches follow these values"]
                     if flags else [])


def test_a_dim_binds_by_the_models_own_spelling_too() -> None:
    """paddle2onnx names dims ``DynamicDimension.0``; graphcost reads that as ``DynamicDimension_0``: both bind it."""
    m = onnx.parser.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
agraph (float[n,4] x, float[4,3] w) => (y) { y = MatMul(x, w) }""")
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "DynamicDimension.0"
    as_written = analyze(m, dims={"DynamicDimension.0": 5}, fusion=False, memory=False, batchnorm=False)
    as_read = analyze(m, dims={"DynamicDimension_0": 5}, fusion=False, memory=False, batchnorm=False)
    assert as_written.totals.macs == as_read.totals.macs == 5 * 4 * 3  # n · K · N
