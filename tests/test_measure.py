"""Measurement: timing statistics, generated inputs, onnxruntime runs with per-kernel times, native runners.

The fast tests use tiny parser-built graphs and real onnxruntime sessions (a few repeats: milliseconds). The
``heavy`` ones export a conv model with torch to see ORT's fused kernels mapped back, run the native runners in
torch, JAX and TensorFlow, and check the shipped models' coverage. No test asserts anything about how fast
something ran: only counts, signs, names and structure.
"""

from __future__ import annotations

import math
import random
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnx.parser
import pytest

from graphcost.load import load
from graphcost.measure import (
    FrameworkMissing,
    Timing,
    available_providers,
    installed_frameworks,
    make_inputs,
    run_ort,
    time_jax,
    time_tf,
    time_torch,
    timing,
)
from graphcost.measure import native as native_mod
from graphcost.measure.ort import arena_peak, parse_profile

ROOT = Path(__file__).resolve().parents[1]
FP32 = 4
US = 1e-6


# --------------------------------------------------------------------------- Timing
def test_timing_statistics_of_1_to_100_in_closed_form() -> None:
    values = list(range(1, 101))
    random.Random(0).shuffle(values)
    t = timing(values)
    n = 100
    assert t.samples == tuple(float(v) for v in values)  # run order kept
    assert t.count == n
    assert t.min == 1 and t.max == 100
    # linear interpolation: the q-quantile sits at position q·(n−1) of the sorted values x_i = i + 1
    assert t.median == pytest.approx(1 + 0.5 * (n - 1))  # 50.5
    assert t.p90 == pytest.approx(1 + 0.9 * (n - 1))  # 90.1
    assert t.p99 == pytest.approx(1 + 0.99 * (n - 1))  # 99.01
    assert t.mean == pytest.approx((n + 1) / 2)
    # sample variance of 1..n is n(n+1)/12
    assert t.stdev == pytest.approx(math.sqrt(n * (n + 1) / 12))
    # |i − 50.5| takes the values 0.5, 1.5, …, 49.5 twice each; the 50th and 51st smallest are 24.5 and 25.5
    assert t.mad == pytest.approx(25.0)
    assert t.spread == pytest.approx(t.p90 - 1)  # 89.1
    d = t.to_dict()
    assert d["count"] == n and d["median"] == pytest.approx(50.5) and "samples" not in d
    assert t.to_dict(samples=True)["samples"] == list(t.samples)


def test_timing_edge_cases() -> None:
    one = timing([0.25])
    assert (one.median, one.p99, one.stdev, one.mad, one.spread) == (0.25, 0.25, 0.0, 0.0, 0.0)
    empty = timing([])
    assert empty.count == 0 and math.isnan(empty.median) and empty.to_dict() == {"count": 0}
    with pytest.raises(ValueError, match="sample 1"):
        timing([1.0, -2.0])
    with pytest.raises(ValueError, match="finite"):
        timing([math.nan])


# --------------------------------------------------------------------------- make_inputs
INPUTS_MODEL = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[batch, 4] x, int64[batch, seq] ids, int64[batch, seq] attention_mask, int32[3] flags, bool[2] b,
   int64[batch, seq] pos)
  => (float[batch, seq, 4] e, float[6, batch, seq] p, int64[batch, seq] m, int32[3] f, bool[2] bo,
      float[batch, 4] xo)
<float[10, 4] table, float[6, 7] other>
{
  e = Gather <axis: int = 0> (table, ids)
  posc = Cast <to: int = 7> (pos)
  p = Gather <axis: int = 1> (other, posc)
  m = Identity (attention_mask)
  f = Identity (flags)
  bo = Identity (b)
  xo = Identity (x)
}
"""


def test_make_inputs_dtypes_shapes_and_index_ranges() -> None:
    graph = load(onnx.parser.parse_model(INPUTS_MODEL)).graph()
    feeds = make_inputs(graph, {"batch": 3, "seq": 50}, seed=1)
    assert list(feeds) == ["x", "ids", "attention_mask", "flags", "b", "pos"]  # initializers are not inputs
    assert feeds["x"].dtype == np.float32 and feeds["x"].shape == (3, 4)
    assert feeds["ids"].dtype == np.int64 and feeds["ids"].shape == (3, 50)
    # ids index axis 0 of table[10, 4]: values in [0, 10), and 150 draws reach both ends of a small range
    assert feeds["ids"].min() >= 0 and feeds["ids"].max() < 10
    # pos reaches a Gather on axis 1 of other[6, 7] through a Cast: values in [0, 7)
    assert feeds["pos"].min() >= 0 and feeds["pos"].max() < 7
    assert (feeds["attention_mask"] == 1).all()
    assert feeds["flags"].dtype == np.int32 and set(feeds["flags"].tolist()) <= {0, 1}
    assert feeds["b"].dtype == np.bool_ and feeds["b"].all()
    again = make_inputs(graph, {"batch": 3, "seq": 50}, seed=1)
    assert all(np.array_equal(feeds[k], again[k]) for k in feeds)  # seeded


def test_make_inputs_names_an_unbound_dim() -> None:
    graph = load(onnx.parser.parse_model(INPUTS_MODEL)).graph()
    with pytest.raises(ValueError, match="'seq' is unbound"):
        make_inputs(graph, {"batch": 2})


# --------------------------------------------------------------------------- run_ort
N, K, M = 4, 8, 16
MATMUL_RELU = f"""
<ir_version: 8, opset_import: ["" : 17]>
g (float[N, {K}] x) => (float[N, {M}] y)
<float[{K}, {M}] w = {{{", ".join(["0.5"] * (K * M))}}}>
{{
  h = MatMul (x, w)
  y = Relu (h)
}}
"""


@pytest.fixture()
def matmul_relu(tmp_path: Path) -> Path:
    path = tmp_path / "mm.onnx"
    onnx.save(onnx.parser.parse_model(MATMUL_RELU), path)
    return path


@pytest.mark.parametrize("level", ["disable", "all"])
def test_run_ort_tiny_model(matmul_relu: Path, level: str) -> None:
    r = run_ort(matmul_relu, binding={"N": N}, warmup=1, repeats=3, level=level)
    assert r.provider == "cpu" and "cpu" in r.providers_available and r.level == level
    assert r.input_shapes == {"x": (N, K)}
    assert r.latency.count == 3 and all(s > 0 for s in r.latency.samples)
    assert r.profiled_run.count == 3 and all(s > 0 for s in r.profiled_run.samples)
    assert r.mapping is not None
    source = [n.name for n in load(matmul_relu).graph().nodes()]  # unnamed: MatMul_0, Relu_1
    covered = {n for k in r.kernels for n in k.covers}
    assert covered == set(source)  # every source node is computed by some kernel
    for k in r.kernels:
        assert k.provider == "CPUExecutionProvider" and k.unit is not None
        assert k.timing.count == 3  # one duration per profiled run
    assert [k.op_type for k in r.kernels] == ["MatMul", "Relu"]  # MatMul+Relu does not fuse on the CPU
    assert r.kernel_sum.count == 3
    # the arena must at least hold the graph output y[N, M] while the run lasts
    assert r.memory_peak_bytes is not None and r.memory_peak_bytes >= N * M * FP32
    assert r.memory_source.startswith("ort:mem_in_use_peak")
    assert r.memory_detail["mem_in_use_peak"] - r.memory_detail["baseline_bytes_in_use"] == r.memory_peak_bytes
    d = r.to_dict()
    assert d["kernels"][0]["timing"]["count"] == 3 and d["memory_source"] == r.memory_source


def test_run_ort_without_profile_and_with_given_inputs(matmul_relu: Path) -> None:
    x = np.ones((2, K), dtype=np.float32)
    r = run_ort(matmul_relu, inputs={"x": x}, warmup=0, repeats=2, profile=False, threads=1)
    assert r.input_shapes == {"x": (2, K)} and r.intra_op_threads == 1
    assert r.latency.count == 2 and r.kernels == () and r.mapping is None and r.profiled_run.count == 0
    assert r.memory_peak_bytes is None and r.memory_source.startswith("none:")


def test_run_ort_errors(matmul_relu: Path) -> None:
    assert "cpu" in available_providers()
    missing = next(p for p in ("cuda", "tensorrt") if p not in available_providers())
    with pytest.raises(ValueError, match=rf"provider '{missing}' is not available \(available: .*cpu"):
        run_ort(matmul_relu, binding={"N": 1}, provider=missing)
    with pytest.raises(ValueError, match="provider 'tpu' is not available"):
        run_ort(matmul_relu, binding={"N": 1}, provider="tpu")
    with pytest.raises(ValueError, match="unknown ORT optimization level"):
        run_ort(matmul_relu, binding={"N": 1}, level="max")
    with pytest.raises(ValueError, match="repeats must be"):
        run_ort(matmul_relu, binding={"N": 1}, repeats=0)
    with pytest.raises(ValueError, match="'N' is unbound"):
        run_ort(matmul_relu)
    with pytest.raises(ValueError, match="'z' is not an input"):
        run_ort(matmul_relu, inputs={"z": np.ones(1)})


def _event(cat: str, name: str, ts: int, dur: int, **args: str) -> dict[str, object]:
    return {"cat": cat, "name": name, "ts": ts, "dur": dur, "ph": "X", "args": args}


def test_parse_profile_groups_by_run_and_drops_warmup() -> None:
    cpu = "CPUExecutionProvider"
    events = [
        _event("Session", "model_run", 100, 50),  # warm-up run
        _event("Node", "a_kernel_time", 105, 30, op_name="MatMul", provider=cpu),
        _event("Session", "model_run", 200, 50),
        _event("Node", "a_kernel_time", 205, 10, op_name="MatMul", provider=cpu),
        _event("Node", "b_kernel_time", 220, 4, op_name="Relu", provider=cpu),
        _event("Node", "b_kernel_time", 230, 3, op_name="Relu", provider=cpu),  # b runs twice in this run
        _event("Node", "b_fence_before", 240, 1, op_name="Relu"),  # not a kernel event
        _event("Session", "model_run", 300, 40),
        _event("Node", "a_kernel_time", 302, 12, op_name="MatMul", provider=cpu),
    ]
    p = parse_profile(events, warmup=1)
    assert p.run_durations == pytest.approx((50 * US, 40 * US))
    assert p.order == ("a", "b")
    assert p.durations["a"] == pytest.approx((10 * US, 12 * US))
    assert p.durations["b"] == pytest.approx(((4 + 3) * US, 0.0))  # summed in run 1, absent from run 2
    assert p.op_type == {"a": "MatMul", "b": "Relu"} and p.warnings == ()
    assert parse_profile(events, warmup=3).warnings  # no run left after warm-up: said, not raised


def test_arena_peak_is_the_peak_above_the_first_runs_baseline() -> None:
    cpu = "CPUExecutionProvider"
    mem = {"mem_bytes_in_use": "1280", "mem_in_use_delta": "256", "mem_in_use_peak": "1280",
           "mem_arena_held": "4096"}
    later = {"mem_bytes_in_use": "1024", "mem_in_use_delta": "-256", "mem_in_use_peak": "1792",
             "mem_arena_held": "4096"}
    events = [_event("Node", "a_kernel_time", 1, 1, provider=cpu, **mem),
              _event("Node", "b_kernel_time", 2, 1, provider=cpu, **later)]
    peak, text, detail = arena_peak(events, cpu)
    # baseline = bytes in use before the first kernel = 1280 − 256; peak = max(mem_in_use_peak) = 1792
    assert peak == 1792 - (1280 - 256)
    assert detail == {"mem_in_use_peak": 1792, "baseline_bytes_in_use": 1024, "mem_arena_held": 4096}
    assert text.startswith("ort:mem_in_use_peak")
    none, why, _ = arena_peak([_event("Node", "a_kernel_time", 1, 1, provider=cpu)], cpu)
    assert none is None and why.startswith("none:")


# --------------------------------------------------------------------------- native: cheap checks
def test_installed_frameworks_imports_no_framework() -> None:
    code = ("import sys, graphcost.measure as m; v = m.installed_frameworks(); "
            "assert set(v) == {'torch', 'jax', 'tf'}, v; "
            "bad = [k for k in ('torch', 'tensorflow', 'jax') if k in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
    assert set(installed_frameworks()) == {"torch", "jax", "tf"}


def test_framework_missing_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(native_mod._MODULES, "jax", "graphcost_no_such_module")
    with pytest.raises(FrameworkMissing, match=r"pip install 'graphcost\[jax\]'"):
        time_jax(lambda x: x, [np.ones(1)])
    assert issubclass(FrameworkMissing, ImportError)


# --------------------------------------------------------------------------- heavy: real frameworks
@pytest.mark.heavy
def test_run_ort_maps_fused_conv_kernels_of_a_torch_export(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")

    class ConvBlock(torch.nn.Module):
        """x → conv1 → act1 → conv2 → (+ act1) → act2: Conv+Relu fuses, Conv+Add+Relu fuses at NCHWc."""

        def __init__(self) -> None:
            super().__init__()
            self.conv1 = torch.nn.Conv2d(8, 8, 3, padding=1)
            self.act1 = torch.nn.ReLU()
            self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1)
            self.act2 = torch.nn.ReLU()

        def forward(self, x: object) -> object:
            r = self.act1(self.conv1(x))
            return self.act2(self.conv2(r) + r)

    path = tmp_path / "conv.onnx"
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(ConvBlock().eval(), (torch.randn(1, 8, 16, 16),), str(path), dynamo=False,
                          opset_version=17, input_names=["x"], output_names=["y"])
    source = {n.name for n in load(path).graph().nodes()}
    assert source == {"/conv1/Conv", "/act1/Relu", "/conv2/Conv", "/Add", "/act2/Relu"}

    ext = run_ort(path, warmup=1, repeats=2, level="extended")
    fused = [k for k in ext.kernels if k.op_type == "FusedConv"]
    assert fused and fused[0].domain == "com.microsoft"
    assert set(fused[0].covers) == {"/conv1/Conv", "/act1/Relu"}
    assert {n for k in ext.kernels for n in k.covers} == source

    full = run_ort(path, warmup=1, repeats=2, level="all")
    nchwc = [k for k in full.kernels if k.domain == "com.microsoft.nchwc" and k.op_type == "Conv"]
    assert {frozenset(k.covers) for k in nchwc} == {frozenset({"/conv1/Conv", "/act1/Relu"}),
                                                    frozenset({"/conv2/Conv", "/Add", "/act2/Relu"})}
    conversions = [k for k in full.kernels if k.op_type in ("ReorderInput", "ReorderOutput")]
    assert conversions and all(k.covers == () and k.unit is not None for k in conversions)  # kept, cover nothing
    assert all(k.timing.count == 2 for k in full.kernels)


@pytest.mark.heavy
@pytest.mark.parametrize("name, binding", [("tiny_cnn", {}), ("tiny_transformer", {"batch": 2, "seq": 16})])
def test_shipped_models_every_kept_source_node_has_a_kernel(name: str, binding: dict[str, int]) -> None:
    path = ROOT / "models" / f"{name}.onnx"
    r = run_ort(path, binding=binding, warmup=2, repeats=5)
    assert r.mapping is not None and all(k.unit is not None for k in r.kernels)
    covered = {n for k in r.kernels for n in k.covers}
    source = [n.name for n in load(path).graph().nodes()]
    # each source node is computed by a timed kernel, or ORT folded it away (and the mapping says so)
    assert [n for n in source if n not in covered and n not in r.mapping.uncovered] == []
    assert {k.unit for k in r.kernels} == set(range(len(r.mapping.units)))  # every ORT unit ran
    assert r.kernel_sum.count == r.profiled_run.count == 5
    assert r.memory_peak_bytes is not None and r.memory_peak_bytes > 0


DENSE_IN, DENSE_OUT, BATCH = 16, 8, 4


def _dense_arrays() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return (rng.standard_normal((BATCH, DENSE_IN)).astype(np.float32),
            rng.standard_normal((DENSE_IN, DENSE_OUT)).astype(np.float32))


@pytest.mark.heavy
@pytest.mark.parametrize("compile", [False, True])
def test_time_torch_dense(compile: bool) -> None:
    torch = pytest.importorskip("torch")
    x, _ = _dense_arrays()
    r = time_torch(torch.nn.Linear(DENSE_IN, DENSE_OUT).eval(), [x], compile=compile, warmup=2, repeats=7,
                   threads=1)
    assert (r.framework, r.mode, r.device, r.threads) == ("torch", "compile" if compile else "eager", "cpu", 1)
    assert r.latency.count == 7 and all(s > 0 for s in r.latency.samples)
    assert r.memory == {} and r.version == torch.__version__
    with pytest.raises(ValueError, match=r"move the module first|no usable CUDA"):
        time_torch(torch.nn.Linear(2, 2), [x], device="cuda:0")


@pytest.mark.heavy
def test_time_jax_dense() -> None:
    jnp = pytest.importorskip("jax.numpy")
    x, w = _dense_arrays()
    wj = jnp.asarray(w)
    r = time_jax(lambda a: jnp.maximum(a @ wj, 0.0), [x], warmup=2, repeats=7)
    assert (r.framework, r.mode, r.device) == ("jax", "jit", "cpu")
    assert r.latency.count == 7 and all(s > 0 for s in r.latency.samples)
    assert any("compiled during the first warm-up" in n for n in r.notes)


@pytest.mark.heavy
def test_time_tf_dense() -> None:
    tf = pytest.importorskip("tensorflow")
    x, w = _dense_arrays()
    wt = tf.constant(w)
    r = time_tf(lambda a: tf.nn.relu(tf.matmul(a, wt)), [x], warmup=2, repeats=7)
    assert (r.framework, r.mode, r.device) == ("tf", "tf.function", "cpu")
    assert r.latency.count == 7 and all(s > 0 for s in r.latency.samples)
    already = time_tf(tf.function(lambda a: tf.matmul(a, wt)), [x], warmup=1, repeats=3)
    assert "forward is already a tf.function" in already.notes and already.latency.count == 3


def test_timing_type_is_frozen() -> None:
    t = Timing((1.0,))
    with pytest.raises(AttributeError):
        t.samples = ()  # type: ignore[misc]


def test_public_surface() -> None:
    import graphcost.measure

    assert sorted(graphcost.measure.__all__) == sorted([
        "FrameworkMissing", "KernelTime", "NativeRun", "OrtRun", "Timing", "available_providers",
        "installed_frameworks", "make_inputs", "run_ort", "time_jax", "time_tf", "time_torch", "timing"])
