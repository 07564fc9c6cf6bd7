"""The jax2tf → tf2onnx export route (``graphcost.export._jax2tf``, extra ``[jax2tf]``).

The route needs jax <= 0.7.1, which cannot share a venv with the main ``[jax]`` extra, so these tests run in their
own venv: ``.ci/jax2tf.sh`` (``pytest -q -m heavy tests/test_export_jax2tf.py`` in ``.venv-jax2tf``). In the main
venv (newer jax) the export tests skip with a reason; the two argument checks that never reach jax2tf (the newer-jax
refusal, the opset limit) run in both.

Each export is checked three ways: by the exporter itself (ONNX Runtime vs JAX at the example batch and one more),
by this file's own ONNX Runtime run at a third batch, and by graphcost, whose conv/matmul FLOPs must equal the
closed form written out in the test.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import sympy

import graphcost
from graphcost.export._jax2tf import EXPORTER, Jax2TfMismatch, export_jax2tf

pytestmark = pytest.mark.heavy

jax = pytest.importorskip("jax")
jnp, lax = jax.numpy, jax.lax

JAX_VERSION = tuple(int(p) for p in re.findall(r"\d+", metadata.version("jax"))[:3])
OLD_JAX = JAX_VERSION <= (0, 7, 1)
needs_route = pytest.mark.skipif(
    not OLD_JAX, reason=f"jax {jax.__version__} > 0.7.1 has no non-native jax2tf; run .ci/jax2tf.sh (own venv)"
)

if OLD_JAX:  # the route also needs TensorFlow and tf2onnx; on newer jax only the refusals run
    pytest.importorskip("tensorflow")
    pytest.importorskip("tf2onnx")

BATCH = sympy.Symbol("batch", integer=True, nonnegative=True)  # graphcost's symbols are integer, nonnegative
ATOL = 1e-5


def _randn(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _assert_ort_matches(path: Path, apply: Callable[..., Any], params: Any, x: np.ndarray) -> None:
    """This test's own check, independent of the exporter's, at the exporter's default tolerances."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {session.get_inputs()[0].name: x})
    np.testing.assert_allclose(got, np.asarray(apply(params, x)), rtol=1e-4, atol=ATOL)


def _check_export(path: Path, apply: Callable[..., Any], params: Any, x: np.ndarray) -> None:
    """The written file: named batch dim in and out, renamed output, and right at a batch the exporter never ran."""
    model = onnx.load(str(path))
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    assert [o.name for o in model.graph.output] == ["output_0"]
    assert model.graph.output[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    big = np.concatenate([x] * 3 + [x[:1]])  # batch 3n+1: neither n nor n+1
    _assert_ort_matches(path, apply, params, big)


def _conv_matmul_flops(report: graphcost.Report) -> dict[str, int]:
    out: dict[str, int] = {}
    for n in report.nodes:
        if n.op_type in ("Conv", "MatMul", "Gemm"):
            out[n.op_type] = out.get(n.op_type, 0) + int(n.flops)
    return out


def _macs_formula(report: graphcost.Report) -> sympy.Expr:
    return sympy.sympify(report.totals.formulas["macs"], locals={"batch": BATCH})


# --------------------------------------------------------------------------- pure JAX


def mlp(p: dict[str, np.ndarray], x: Any) -> Any:
    h = jax.nn.relu(x @ p["w1"] + p["b1"])
    h = jax.nn.relu(h @ p["w2"] + p["b2"])
    return jax.nn.log_softmax(h @ p["w3"] + p["b3"])


@needs_route
def test_mlp_exports_verified_at_two_batches_and_costs_in_closed_form(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    params = {"w1": _randn(rng, 32, 64, scale=0.2), "b1": _randn(rng, 64), "w2": _randn(rng, 64, 64, scale=0.2),
              "b2": _randn(rng, 64), "w3": _randn(rng, 64, 10, scale=0.2), "b3": _randn(rng, 10)}
    x = _randn(rng, 2, 32)
    r = export_jax2tf(mlp, params, {"x": x}, tmp_path / "mlp.onnx", dynamic={"x": {0: "batch"}})
    assert (r.path, r.exporter, r.opset) == (tmp_path / "mlp.onnx", EXPORTER, 18)
    assert r.nodes > 0 and r.max_abs_diff <= ATOL and r.seconds > 0
    _check_export(r.path, mlp, params, x)

    report = graphcost.analyze(r.path, dims={"batch": 3})
    assert report.totals.unknown_nodes == 0
    macs_per_row = (
        32 * 64  # layer 1: 32 -> 64
        + 64 * 64  # layer 2: 64 -> 64
        + 64 * 10  # head: 64 -> 10
    )
    assert _conv_matmul_flops(report) == {"MatMul": 2 * 3 * macs_per_row}  # 2 FLOPs per MAC; bias adds are Add nodes
    assert _macs_formula(report) == BATCH * macs_per_row

    static = export_jax2tf(mlp, params, {"x": x}, tmp_path / "static.onnx")  # no dynamic dims: one shape checked
    dims = onnx.load(str(static.path)).graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims] == [2, 32]


def cnn(p: dict[str, np.ndarray], x: Any) -> Any:
    nhwc = ("NHWC", "HWIO", "NHWC")
    h = lax.conv_general_dilated(x, p["w1"], (1, 1), "SAME", dimension_numbers=nhwc)
    h = jax.nn.relu((h - p["mean"]) * p["scale"] + p["shift"])  # BN-style normalisation, inference form
    r = lax.conv_general_dilated(h, p["w2"], (1, 1), "SAME", dimension_numbers=nhwc)
    h = jax.nn.relu(h + r)  # residual
    h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")  # 2x2 max-pool
    return jnp.mean(h, axis=(1, 2)) @ p["wd"] + p["bd"]


@needs_route
def test_cnn_exports_verified_at_two_batches_and_costs_in_closed_form(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    params = {"w1": _randn(rng, 3, 3, 3, 8, scale=0.3), "mean": _randn(rng, 8),
              "scale": rng.uniform(0.5, 1.5, 8).astype(np.float32), "shift": _randn(rng, 8),
              "w2": _randn(rng, 3, 3, 8, 8, scale=0.2), "wd": _randn(rng, 8, 10), "bd": _randn(rng, 10)}
    x = _randn(rng, 2, 16, 16, 3)
    r = export_jax2tf(cnn, params, {"x": x}, tmp_path / "cnn.onnx", dynamic={"x": {0: "batch"}})
    assert r.opset == 18 and r.max_abs_diff <= ATOL
    _check_export(r.path, cnn, params, x)

    report = graphcost.analyze(r.path, dims={"batch": 3})
    assert report.totals.unknown_nodes == 0
    assert {n.op_type for n in report.nodes} >= {"Conv", "MaxPool", "MatMul"}  # plain ONNX ops, no Xla*
    conv1 = 16 * 16 * 8 * 3 * 3 * 3  # per image: 16x16 outputs x 8 channels, each 3 in-channels x 3x3
    conv2 = 16 * 16 * 8 * 8 * 3 * 3  # per image: 16x16 outputs x 8 channels, each 8 in-channels x 3x3
    dense = 8 * 10  # per image: pooled 8 features -> 10
    assert _conv_matmul_flops(report) == {"Conv": 2 * 3 * (conv1 + conv2), "MatMul": 2 * 3 * dense}
    assert _macs_formula(report) == BATCH * (conv1 + conv2 + dense)


# --------------------------------------------------------------------------- flax 0.12.0


def _perturb(tree: Any, rng: np.random.Generator) -> Any:
    """Random, non-trivial values everywhere: tf2onnx folds away zero biases and unit scales, hiding nodes."""
    return jax.tree_util.tree_map(lambda a: np.asarray(a) + rng.uniform(0.1, 0.5, np.shape(a)).astype(np.float32),
                                  tree)


@needs_route
def test_flax_linen_mlp(tmp_path: Path) -> None:
    pytest.importorskip("flax")
    from flax import linen as nn

    class Mlp(nn.Module):
        @nn.compact
        def __call__(self, x: Any) -> Any:
            return nn.Dense(10)(nn.gelu(nn.LayerNorm()(nn.Dense(64)(x))))

    rng = np.random.default_rng(2)
    x = _randn(rng, 2, 32)
    module = Mlp()
    variables = _perturb(module.init(jax.random.key(0), x), rng)

    def linen_mlp(v: Any, x: Any) -> Any:
        return module.apply(v, x)

    r = export_jax2tf(linen_mlp, variables, {"x": x}, tmp_path / "linen.onnx", dynamic={"x": {0: "batch"}})
    _check_export(r.path, linen_mlp, variables, x)
    report = graphcost.analyze(r.path, dims={"batch": 3})
    assert report.totals.unknown_nodes == 0
    macs_per_row = 32 * 64 + 64 * 10  # Dense 32 -> 64, Dense 64 -> 10
    assert _conv_matmul_flops(report) == {"MatMul": 2 * 3 * macs_per_row}
    assert _macs_formula(report) == BATCH * macs_per_row


@needs_route
def test_flax_nnx_cnn(tmp_path: Path) -> None:
    pytest.importorskip("flax")
    from flax import nnx

    class Cnn(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            self.conv1 = nnx.Conv(3, 8, (3, 3), rngs=rngs)
            self.bn = nnx.BatchNorm(8, rngs=rngs)
            self.conv2 = nnx.Conv(8, 16, (3, 3), rngs=rngs)
            self.head = nnx.Linear(16, 10, rngs=rngs)

        def __call__(self, x: Any) -> Any:
            x = nnx.relu(self.bn(self.conv1(x)))
            x = nnx.max_pool(x, window_shape=(2, 2), strides=(2, 2))
            return self.head(nnx.relu(self.conv2(x)).mean(axis=(1, 2)))

    model = Cnn(nnx.Rngs(0))
    model.eval()  # BatchNorm on its running statistics
    graphdef, state = nnx.split(model)
    rng = np.random.default_rng(3)
    state = _perturb(state, rng)  # the +0.1..0.5 also keeps the running variance positive

    def nnx_cnn(s: Any, x: Any) -> Any:
        return nnx.merge(graphdef, s)(x)

    x = _randn(rng, 2, 16, 16, 3)
    r = export_jax2tf(nnx_cnn, state, {"x": x}, tmp_path / "nnx.onnx", dynamic={"x": {0: "batch"}})
    _check_export(r.path, nnx_cnn, state, x)
    report = graphcost.analyze(r.path, dims={"batch": 3})
    assert report.totals.unknown_nodes == 0
    conv1 = 16 * 16 * 8 * 3 * 3 * 3  # per image: 16x16 x 8 outputs, each 3 in-channels x 3x3
    conv2 = 8 * 8 * 16 * 8 * 3 * 3  # per image, after the 2x2 pool: 8x8 x 16 outputs, each 8 in-channels x 3x3
    head = 16 * 10  # per image: 16 pooled features -> 10
    convs = [n for n in report.nodes if n.op_type == "Conv"]
    assert [len(n.inputs) for n in convs] == [2, 2]  # tf2onnx leaves the conv biases as Add nodes: no bias FLOPs
    assert _conv_matmul_flops(report) == {"Conv": 2 * 3 * (conv1 + conv2), "MatMul": 2 * 3 * head}
    assert _macs_formula(report) == BATCH * (conv1 + conv2 + head)


# --------------------------------------------------------------------------- refusals


def test_opset_above_18_is_refused_before_converting(tmp_path: Path) -> None:
    calls: list[int] = []

    def apply(p: Any, x: Any) -> Any:
        calls.append(1)
        return x

    with pytest.raises(ValueError, match=r"^opset 19 is not supported .*tf2onnx exports opsets 7 to 18$") as info:
        export_jax2tf(apply, {}, {"x": np.zeros((2, 3), np.float32)}, tmp_path / "m.onnx", opset=19)
    assert "\n" not in str(info.value)
    assert calls == [] and list(tmp_path.iterdir()) == []


@pytest.mark.skipif(OLD_JAX, reason="the refusal only fires on jax > 0.7.1")
def test_newer_jax_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match=r"needs jax<=0\.7\.1 .*pip install 'graphcost\[jax2tf\]'") as info:
        export_jax2tf(mlp, {}, {"x": np.zeros((2, 32), np.float32)}, tmp_path / "m.onnx")
    assert "\n" not in str(info.value)
    assert list(tmp_path.iterdir()) == []


@needs_route
def test_wrong_reference_raises_and_leaves_no_file(tmp_path: Path) -> None:
    def drifting(p: dict[str, np.ndarray], x: Any) -> Any:
        y = x @ p["w"]  # traced (and so converted) as x @ w; run eagerly, as the reference, it adds 0.01
        return y if isinstance(x, jax.core.Tracer) else y + 0.01

    x = np.ones((2, 8), np.float32)
    with pytest.raises(Jax2TfMismatch) as info:
        export_jax2tf(drifting, {"w": np.ones((8, 4), np.float32)}, {"x": x}, tmp_path / "bad.onnx",
                      dynamic={"x": {0: "batch"}})
    message = str(info.value)
    assert isinstance(info.value, ValueError) and "\n" not in message
    assert "output 0 ('output_0') at input shapes x=(2, 8)" in message  # the output and the shapes
    assert "largest |diff| 0.01 at index (0, 0)" in message  # the largest difference
    assert list(tmp_path.iterdir()) == []  # neither the model nor a temporary file
