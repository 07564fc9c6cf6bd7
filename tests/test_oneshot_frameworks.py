"""The one-call API with the real frameworks (heavy): ``graphcost.analyze(model, inputs)`` and
``graphcost.gap(model, inputs, hardware=...)`` for torch, JAX and TF objects, the CLI's ``FILE.py:FACTORY``, and
the founding blog's three snippets written against graphcost's API.

Timings are never asserted (they depend on the machine and its load): only the structure of the reports and the
closed-form FLOPs, bytes and bounds. Each framework's tests skip, with the reason, when it is not installed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import graphcost
from graphcost import HardwareSpec
from tests.clihelp import run_cli

pytestmark = pytest.mark.heavy

FP32 = 4  # bytes per float32 element
M3_PRO = HardwareSpec("M3 Pro", peak_flops=7.4e12, memory_bandwidth=150e9)  # the blog's spec, as written
FAST = {"warmup": 1, "repeats": 3}  # structure only: a few runs are enough


def _torch() -> Any:
    return pytest.importorskip("torch", reason="torch is not installed (pip install 'graphcost[torch]')")


def _jax() -> Any:
    return pytest.importorskip("jax", reason="jax is not installed (pip install 'graphcost[jax]')")


def _tf() -> Any:
    return pytest.importorskip("tensorflow", reason="tensorflow is not installed (pip install 'graphcost[tf]')")


def _check_model_rows(report: Any, runners: list[str], flops: int, moved: int, hw: HardwareSpec) -> None:
    """Every runner's row has the blog's fields, the same bound, and advice; none is asserted fast or slow."""
    assert [r.runner for r in report.models] == runners
    for row in report.models:
        assert row.bound.flops == flops and row.bound.bytes == moved
        peak, bandwidth = hw.peak_for("float32")[0], hw.memory_bandwidth
        assert row.bound.bound_s == pytest.approx(max(flops / peak, moved / bandwidth))  # the roofline bound
        assert row.observed.median_s > 0 and row.efficiency is not None
        assert row.achieved_flops_per_s is not None and row.achieved_bytes_per_s is not None
        assert row.diagnosis.next_steps


# ------------------------------------------------------------------------------------------ the blog's snippets
def test_blog_snippet_1_linear_gap_report(tmp_path: Path) -> None:
    """The blog's first snippet in graphcost's words::

        model = torch.nn.Linear(768, 1000, bias=False).eval()
        inputs = (torch.randn(32, 768),)
        hardware = graphcost.HardwareSpec("M3 Pro", peak_flops=7.4e12, memory_bandwidth=150e9)
        estimate = graphcost.analyze(model, inputs, hardware=hardware)
        report = graphcost.gap(model, inputs, hardware=hardware)
        print(graphcost.report.gap_text.render(report))
    """
    torch = _torch()
    from graphcost.report import gap_text

    model = torch.nn.Linear(768, 1000, bias=False).eval()
    inputs = (torch.randn(32, 768),)
    estimate = graphcost.analyze(model, inputs, hardware=M3_PRO, cache_dir=tmp_path)
    report = graphcost.gap(model, inputs, hardware=M3_PRO, cache_dir=tmp_path, **FAST)

    flops = 2 * 32 * 768 * 1000  # 2 FLOPs per MAC · batch · in · out
    x, w, y = 32 * 768 * FP32, 768 * 1000 * FP32, 32 * 1000 * FP32  # input, weight, output, each once
    assert estimate.totals.flops == flops == 49_152_000
    assert estimate.totals.bytes == x + w + y
    assert estimate.totals.roofline_time_s == pytest.approx(max(flops / 7.4e12, (x + w + y) / 150e9))
    assert estimate.totals.bound == "memory"  # intensity ≈ 14.9 FLOP/B, below the ridge 7.4e12 / 150e9 ≈ 49.3
    _check_model_rows(report, ["onnxruntime/cpu", "torch/eager/cpu"], flops, x + w + y, M3_PRO)
    text = gap_text.render(report)
    assert "GFLOP/s" in text and "GB/s" in text and "effic." in text
    assert all(r.diagnosis.code in text for r in report.models)


def test_blog_snippet_2_training_memory_with_adam(tmp_path: Path) -> None:
    """``profile_model(..., training=True, optimizer_state_multiplier=2)`` in graphcost's words::

        from graphcost.passes.liveness import TrainingOptions
        report = graphcost.analyze(model, inputs, training=TrainingOptions(optimizer_state_multiplier=2))
        t = report.memory.training
        t.parameters + t.gradients + t.optimizer_state     # params + grads + Adam's two moments
    """
    torch = _torch()
    from graphcost.passes.liveness import TrainingOptions

    model = torch.nn.Linear(768, 1000, bias=False).eval()
    inputs = (torch.randn(32, 768),)
    report = graphcost.analyze(model, inputs, hardware=M3_PRO, cache_dir=tmp_path,
                               training=TrainingOptions(optimizer_state_multiplier=2))
    t = report.memory.training
    params = 768 * 1000 * FP32  # the fp32 weight
    assert t.parameters == params
    assert t.gradients == params  # one gradient per parameter byte
    assert t.optimizer_state == 2 * params  # Adam's two moment buffers
    assert t.parameters + t.gradients + t.optimizer_state == 4 * params == 12_288_000  # the training minimum
    x, y = 32 * 768 * FP32, 32 * 1000 * FP32
    assert report.memory.min_peak_bytes == x + y  # the one node reads x while it writes y
    assert report.memory.conservative_peak_bytes == x + y  # every forward tensor live at once: the same two
    assert graphcost.analyze(model, inputs, hardware=M3_PRO, cache_dir=tmp_path,
                             training=True).memory.training == t  # training=True: the same defaults


def test_blog_snippet_3_dense_across_installed_frameworks(tmp_path: Path) -> None:
    """``examples/compare_frameworks.py`` in graphcost's words::

        from graphcost.measure.compare import compare, render
        table = compare("dense", hardware=hardware, batches=(1, 16, 64, 256), workdir="/tmp/graphcost")
        print(render(table))
    """
    from graphcost.measure import installed_frameworks
    from graphcost.measure.compare import compare, render

    have = [fw for fw, v in installed_frameworks().items() if v is not None]
    if not have:
        pytest.skip("no framework installed (pip install 'graphcost[torch]', '[jax]' or '[tf]')")
    table = compare("dense", hardware=M3_PRO, batches=(1, 16, 64, 256), workdir=tmp_path, **FAST)
    assert sorted({r.runner for r in table.rows}) == sorted([*have, "onnxruntime"])
    for r in table.rows:
        b = r.batch
        flops = 2 * b * 1024 * 1024 + b * 1024  # 2·B·in·out for the matmul, + B·out bias adds
        moved = (b * 1024 + 1024 * 1024 + 1024 + b * 1024) * FP32  # x, W, bias, y once each (one fused kernel)
        assert r.bound.flops == flops and r.bound.bytes == moved
        assert r.bound.bound_s == pytest.approx(max(flops / 7.4e12, moved / 150e9))
        assert r.bound.bound == ("compute" if flops / 7.4e12 >= moved / 150e9 else "memory")  # 256: past the ridge
    assert "1×1024→1024" in render(table) and "256×1024→1024" in render(table)


# ------------------------------------------------------------------------------------------ one call per framework
def test_torch_module_one_call_with_compile(tmp_path: Path) -> None:
    torch = _torch()
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU())
    x = torch.randn(4, 64)
    report = graphcost.gap(model, (x,), hardware=M3_PRO, cache_dir=tmp_path, compile=True, **FAST)
    flops = 2 * 4 * 64 * 32 + 4 * 32 + 4 * 32  # matmul, bias add, one max per ReLU output
    moved = (4 * 64 + 64 * 32 + 32 + 4 * 32) * FP32  # x, W, b, y: Gemm and ReLU fused into one kernel
    _check_model_rows(report, ["onnxruntime/cpu", "torch/eager/cpu", "torch/compile/cpu"], flops, moved, M3_PRO)
    assert model.training  # exported and timed in eval mode; the caller's flags are left as they were


def test_jax_function_and_nnx_module_one_call(tmp_path: Path) -> None:
    jax = _jax()
    import jax.numpy as jnp

    w = np.linspace(-1, 1, 64 * 32, dtype=np.float32).reshape(64, 32)

    def f(x: Any) -> Any:
        return jnp.tanh(x @ w)

    x = np.ones((4, 64), np.float32)
    for fn, kw in ((jax.jit(f), {}), (f, {"framework": "jax"})):  # a jitted function is known as JAX by its type
        report = graphcost.analyze(fn, (x,), hardware=M3_PRO, cache_dir=tmp_path, **kw)
        product = [n for n in report.nodes if n.op_type != "Tanh"]
        assert sum(n.macs or 0 for n in product) == 4 * 64 * 32  # the matmul: B·in·out MACs (jax2onnx may
        # write it as a Gemm with a C input, whose adds and scaling add FLOPs but no MACs)
        assert report.node(_tanh(report)).outputs[0].shape == (4, 32)  # tanh of every output element
    nnx = pytest.importorskip("flax.nnx", reason="flax is not installed (pip install 'graphcost[jax]')")
    layer = nnx.Linear(64, 32, rngs=nnx.Rngs(0))
    report = graphcost.gap(layer, (x,), hardware=M3_PRO, cache_dir=tmp_path, **FAST)
    flops = 2 * 4 * 64 * 32 + 4 * 32  # matmul + bias adds
    moved = (4 * 64 + 64 * 32 + 32 + 4 * 32) * FP32  # x, kernel, bias, y once each
    _check_model_rows(report, ["onnxruntime/cpu", "jax/jit/cpu"], flops, moved, M3_PRO)


def _tanh(report: Any) -> str:
    return next(n.name for n in report.nodes if n.op_type == "Tanh")


def test_keras_model_and_tf_function_one_call(tmp_path: Path) -> None:
    tf = _tf()
    import keras

    # a nonzero bias: tf2onnx folds away the Add of Keras's default all-zero bias
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, bias_initializer="ones")])
    x = np.ones((4, 8), np.float32)
    report = graphcost.gap(model, (x,), hardware=M3_PRO, cache_dir=tmp_path, **FAST)
    flops = 2 * 4 * 8 * 16 + 4 * 16  # matmul + bias adds
    moved = (4 * 8 + 8 * 16 + 16 + 4 * 16) * FP32  # x, kernel, bias, y once each
    _check_model_rows(report, ["onnxruntime/cpu", "tf/tf.function/cpu"], flops, moved, M3_PRO)
    fn = tf.function(lambda t: tf.matmul(t, tf.eye(8)))  # a weight made inside: a captured tensor is an input
    assert graphcost.analyze(fn, (x,), hardware=M3_PRO, cache_dir=tmp_path).totals.flops == 2 * 4 * 8 * 8


def test_default_cache_writes_nothing_beside_the_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch = _torch()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    report = graphcost.analyze(torch.nn.Linear(8, 4), (torch.randn(2, 8),), hardware=M3_PRO)
    path = Path(report.model.path or "")
    assert path.parent.parent == tmp_path / "cache" / "graphcost" / "exports" and path.name == "model.onnx"
    manifest = json.loads((path.parent / "manifest.json").read_text())
    assert manifest["framework"] == "torch" and manifest["verified"] is True
    assert manifest["inputs"] == {"input": {"shape": [2, 8], "dtype": "float32"}}  # Linear.forward(input)
    assert list(work.iterdir()) == []


# ------------------------------------------------------------------------------------------ FILE.py:FACTORY in the CLI
FACTORY = """import torch

def make():
    return torch.nn.Linear(768, 1000, bias=False)

def make_with_inputs():
    return torch.nn.Linear(768, 1000, bias=False), (torch.randn(32, 768),)
"""


def test_cli_bench_and_gap_take_a_factory_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _torch()
    code_dir = tmp_path / "code"
    code_dir.mkdir()
    (code_dir / "model.py").write_text(FACTORY)
    spec = str(code_dir / "model.py")
    code, out, err = run_cli(capsys, "bench", f"{spec}:make_with_inputs", "--native", "--format", "json",
                             "--warmup", "1", "--repeats", "3")
    assert code == 0, err
    bench = json.loads(out)
    assert [n["framework"] + "/" + n["mode"] for n in bench["native"]] == ["torch/eager"]
    assert bench["input_shapes"] == {"input": [32, 768]}
    code, out, err = run_cli(capsys, "gap", f"{spec}:make", "--input", "x=batch,768", "--dim", "batch=4",
                             "--native", "--peak-flops", "7.4e12", "--memory-bandwidth", "150e9", "--format",
                             "json", "--warmup", "1", "--repeats", "3")
    assert code in (0, 1), err  # 1 only if a row beat its bound: a timing outcome, not asserted here
    gap = json.loads(out)
    assert [m["runner"] for m in gap["models"]] == ["onnxruntime/cpu", "torch/eager/cpu"]
    assert gap["floor"]["flops"] == 2 * 4 * 768 * 1000  # batch 4 from --dim: 2·B·in·out
    assert sorted(p.name for p in code_dir.iterdir()) == ["model.py"]  # no __pycache__, no export beside it
