"""The one-call API and the blog's API shapes, without any ML framework (see test_oneshot_frameworks.py for those).

- ``HardwareSpec("M3 Pro", peak_flops=7.4e12, memory_bandwidth=150e9)``: a bare number is the float32 peak;
- ``--peak-flops`` without ``--hardware`` builds a fresh device (never edge-soc with one roof replaced);
- ``graphcost.analyze`` / ``graphcost.gap`` tell ONNX sources from framework objects, and ``graphcost.gap`` is both
  the callable and the module of ``Budget``;
- ``bench``/``gap FILE.py:FACTORY`` read a file that exists (they said "no such file") and write nothing beside it;
- the blog's first snippet on the ONNX graph a torch ``Linear(768, 1000, bias=False)`` exports to.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnx.parser
import pytest

import graphcost
from graphcost import HardwareSpec, oneshot
from graphcost.hardware import catalog
from tests.clihelp import run_cli

FP32 = 4  # bytes per float32 element
M3_PRO = HardwareSpec("M3 Pro", peak_flops=7.4e12, memory_bandwidth=150e9)  # the blog's spec, as written

LINEAR = """<ir_version: 8, opset_import: ["" : 18]>
    g (float[32,768] x, float[768,1000] w) => (float[32,1000] y) { y = MatMul(x, w) }"""
LINEAR_FP16 = """<ir_version: 8, opset_import: ["" : 18]>
    g (float16[32,768] x, float16[768,1000] w) => (float16[32,1000] y) { y = MatMul(x, w) }"""


def _save(tmp_path: Path, text: str, name: str = "m.onnx") -> Path:
    path = tmp_path / name
    onnx.save(onnx.parser.parse_model(text), str(path))
    return path


# ------------------------------------------------------------------------------------------ HardwareSpec
def test_hardware_spec_takes_a_float_peak_as_written_in_the_blog() -> None:
    # before: HardwareSpec(..., peak_flops=7.4e12) raised AttributeError ('float' object has no attribute 'items')
    assert dict(M3_PRO.peak_flops) == {"float32": 7.4e12}
    assert M3_PRO.peak_for("float16") == (7.4e12, "float32")  # fp16 falls back to the one peak given
    assert M3_PRO.ridge_point() == pytest.approx(7.4e12 / 150e9)  # fp32 peak ÷ DRAM bandwidth ≈ 49.3 FLOP/B


@pytest.mark.parametrize("peak", ["7.4e12", None, [7.4e12], True])
def test_hardware_spec_refuses_a_peak_that_is_neither_number_nor_mapping(peak: object) -> None:
    with pytest.raises(ValueError, match="peak_flops must be ops/s"):
        HardwareSpec("x", peak_flops=peak, memory_bandwidth=1e9)  # type: ignore[arg-type]


def test_adhoc_takes_a_float_peak() -> None:
    spec = catalog.adhoc(7.4e12, 150e9)
    assert dict(spec.peak_flops) == {"float32": 7.4e12} and spec.memory_bandwidth == 150e9


def test_override_warns_when_a_kept_narrow_peak_falls_below_the_new_wide_one() -> None:
    base = catalog.get("edge-soc")  # float32 2e12, float16 4e12
    spec = catalog.override(base, peak_flops={"float32": 7.4e12})
    assert spec.peak_flops["float16"] == base.peak_flops["float16"]  # kept, as override promises
    assert any(s.startswith("warning: peak_flops.float16") for s in spec.sources)
    assert not any("warning" in s for s in catalog.override(base, peak_flops={"float32": 3e12}).sources)


# ------------------------------------------------------------------------------------------ ad-hoc CLI device
def test_peak_flops_without_hardware_builds_a_fresh_device(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = _save(tmp_path, LINEAR_FP16)
    code, out, err = run_cli(capsys, "analyze", str(path), "--format", "json", "--peak-flops", "7.4e12",
                             "--memory-bandwidth", "150e9")
    assert code == 0, err
    report = json.loads(out)
    assert report["hardware"]["name"] == "custom"  # not "edge-soc+overrides"
    assert report["hardware"]["peak_flops"] == {"float32": 7.4e12}  # no fp16 peak left over from edge-soc
    flops = 2 * 32 * 768 * 1000  # 2·M·K·N
    assert report["totals"]["compute_time_s"] == pytest.approx(flops / 7.4e12)  # fp16 at the fp32 peak, not 4e12


@pytest.mark.parametrize(("flags", "missing"), [(["--peak-flops", "7.4e12"], "--memory-bandwidth"),
                                                (["--memory-bandwidth", "150e9"], "--peak-flops")])
def test_half_an_adhoc_device_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 flags: list[str], missing: str) -> None:
    # before: --peak-flops alone overrode edge-soc's fp32 roof and kept its fp16 one (fp16 slower than fp32)
    path = _save(tmp_path, LINEAR)
    code, out, err = run_cli(capsys, "analyze", str(path), *flags)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and missing in err and "--hardware NAME" in err


def test_peak_flops_with_hardware_still_overrides(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _save(tmp_path, LINEAR)
    code, out, err = run_cli(capsys, "analyze", str(path), "--format", "json", "--hardware", "edge-soc",
                             "--peak-flops", "3e12")
    assert code == 0, err
    assert json.loads(out)["hardware"]["name"] == "edge-soc+overrides"


# ------------------------------------------------------------------------------------------ the Python API
def test_gap_is_the_callable_and_the_module() -> None:
    import graphcost.gap as gap_module
    from graphcost.api import gap as gap_fn

    assert "gap" in graphcost.__all__
    assert graphcost.gap is gap_module and callable(graphcost.gap)
    assert graphcost.gap.Budget is gap_module.Budget  # gap.Budget, as docs/api.md documents it
    assert gap_fn.__name__ == "gap"


def test_blog_snippet_1_on_the_exported_graph() -> None:
    """``graphcost.analyze`` of the graph ``torch.nn.Linear(768, 1000, bias=False)`` at batch 32 exports to."""
    report = graphcost.analyze(onnx.parser.parse_model(LINEAR), hardware=M3_PRO)
    flops = 2 * 32 * 768 * 1000  # 2 FLOPs per MAC · M·K·N
    assert report.totals.flops == flops == 49_152_000
    x, w, y = 32 * 768 * FP32, 768 * 1000 * FP32, 32 * 1000 * FP32  # input, weight, output, each once
    assert report.totals.bytes == x + w + y == 3_298_304
    assert report.totals.intensity == pytest.approx(flops / (x + w + y))  # ≈ 14.9 FLOP/B < ridge 49.3
    assert report.totals.compute_time_s == pytest.approx(flops / 7.4e12)  # ≈ 6.6 µs
    assert report.totals.memory_time_s == pytest.approx((x + w + y) / 150e9)  # ≈ 22.0 µs
    assert report.totals.roofline_time_s == pytest.approx(max(flops / 7.4e12, (x + w + y) / 150e9))
    assert report.totals.bound == "memory"


def test_gap_of_an_onnx_file(tmp_path: Path) -> None:
    """``graphcost.gap(path, hardware=spec)``: onnxruntime only, the blog's report fields on the model row."""
    path = _save(tmp_path, LINEAR)
    report = graphcost.gap(path, hardware=M3_PRO, warmup=1, repeats=3)
    row = report.models[0]
    flops = 2 * 32 * 768 * 1000  # 2·M·K·N
    moved = (32 * 768 + 768 * 1000 + 32 * 1000) * FP32  # x, w, y once each
    assert row.runner == "onnxruntime/cpu" and row.bound.flops == flops and row.bound.bytes == moved
    assert row.bound.bound_s == pytest.approx(max(flops / 7.4e12, moved / 150e9))  # bound
    assert row.observed.median_s > 0 and row.efficiency is not None  # observed, efficiency
    assert row.achieved_flops_per_s is not None and row.achieved_bytes_per_s is not None  # GFLOP/s, GB/s
    assert row.diagnosis.next_steps  # "next" advice (which band depends on the machine: not asserted)
    from graphcost.report import gap_text

    text = gap_text.render(report)
    assert "GFLOP/s" in text and "GB/s" in text and row.diagnosis.code in text


def test_analyze_refuses_example_inputs_for_an_onnx_model(tmp_path: Path) -> None:
    path = _save(tmp_path, LINEAR)
    with pytest.raises(ValueError, match="example_inputs and framework are for framework models"):
        graphcost.analyze(path, (np.zeros((32, 768), np.float32),))


def test_analyze_of_an_object_of_no_framework_says_so() -> None:
    def plain(x: np.ndarray) -> np.ndarray:  # numpy only: no framework to export it with
        return x

    with pytest.raises(ValueError, match="cannot tell the framework of a function"):
        graphcost.analyze(plain, (np.zeros(3, np.float32),))
    with pytest.raises(ValueError, match="framework 'mxnet'"):
        oneshot.export(plain, (np.zeros(3, np.float32),), framework="mxnet")


def test_example_arrays_take_names_from_the_call() -> None:
    def f(image: object, mask: object) -> None:
        return None

    a, b = np.ones((2, 3), np.float32), np.zeros((2,), np.int64)
    assert list(oneshot.example_arrays(f, "jax", (a, b))) == ["image", "mask"]
    assert list(oneshot.example_arrays(f, "jax", {"m": b, "i": a})) == ["m", "i"]  # a mapping: its own order
    assert list(oneshot.example_arrays(lambda *xs: None, "jax", [a, b])) == ["input_0", "input_1"]
    assert list(oneshot.example_arrays(f, "jax", a)) == ["input_0"]  # one tensor, too few for (image, mask)
    with pytest.raises(ValueError, match="needs example inputs"):
        oneshot.example_arrays(f, "jax", None)
    with pytest.raises(ValueError, match="not an array or tensor"):
        oneshot.example_arrays(f, "jax", ({"nested": 1}, a))


def test_cache_folder_is_under_the_user_cache_and_names_model_and_shapes(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert oneshot.default_cache_dir() == tmp_path / "xdg" / "graphcost" / "exports"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert oneshot.default_cache_dir() == tmp_path / "home" / ".cache" / "graphcost" / "exports"

    def f(x: object) -> object:
        return x

    small = {"x": np.zeros((1, 4), np.float32)}
    same = oneshot.fingerprint(f, "jax", small, {"opset": 18})
    assert same == oneshot.fingerprint(f, "jax", {"x": np.ones((1, 4), np.float32)}, {"opset": 18})  # values
    assert same != oneshot.fingerprint(f, "jax", {"x": np.zeros((2, 4), np.float32)}, {"opset": 18})  # shapes
    assert same != oneshot.fingerprint(f, "jax", small, {"opset": 17})  # export options
    assert len(same) == oneshot.FINGERPRINT_CHARS


# ------------------------------------------------------------------------------------------ FILE.py:FACTORY in the CLI
def _factory(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "code" / "model.py"
    path.parent.mkdir()
    path.write_text(body)
    return path


@pytest.mark.parametrize("command", ["bench", "gap"])
def test_factory_file_that_exists_is_read_not_called_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             command: str) -> None:
    # before: `bench FILE.py:factory --native` said "FILE.py:factory: no such file" for a file that exists
    path = _factory(tmp_path, "class Thing:\n    pass\n\ndef make():\n    return Thing()\n")
    code, out, err = run_cli(capsys, command, f"{path}:make", "--input", "x=2,3", "--native",
                             "--hardware", "edge-soc")
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "no such file" not in err
    assert "cannot tell the framework of a Thing" in err
    assert sorted(p.name for p in path.parent.iterdir()) == ["model.py"]  # no __pycache__ beside the code


def test_factory_file_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _factory(tmp_path, "def make():\n    return object()\n")
    cases = [
        ([f"{tmp_path / 'missing.py'}:make", "--input", "x=2"], "missing.py: no such file"),
        ([f"{path}:make"], "give the example inputs with --input"),
        ([f"{path}:nothing", "--input", "x=2"], "has no function nothing"),
        ([f"{path}:make", "--input", "x=batch", "--dim", "seq=4"], "--dim seq: no --input names that dim"),
        ([str(_save(tmp_path, LINEAR)), "--input", "x=2"], "--input and --framework are for FILE.py:FACTORY"),
    ]
    for args, message in cases:
        code, out, err = run_cli(capsys, "bench", *args)
        assert code == 2 and out == "", args
        assert len(err.strip().splitlines()) == 1 and message in err, (args, err)
        assert "export:" not in err  # the bench command's own words, not the export command's prefix


def test_native_on_an_onnx_file_names_both_sources(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "bench", str(_save(tmp_path, LINEAR)), "--native", "--repeats", "1",
                           "--warmup", "0")
    assert code == 2 and "ref:FRAMEWORK/ARCH or FILE.py:FACTORY" in err
