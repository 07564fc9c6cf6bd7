"""The reference zoo in three frameworks, its shipped ONNX files, and ``graphcost export``.

Fast: the shipped ``models/zoo/*.onnx`` load, analyze with no unknown node, and their conv/matmul FLOPs equal the
closed forms derived here from the architectures; the frameworks agree per arch; the zoo's weights and inputs are
deterministic; ``verify_onnx`` and the CLI's errors (exit 2, one line, nothing written) need no framework.

Heavy (``pytest -m heavy``; each framework skipped when not installed): every (framework, arch) exports with the
default exporter and verifies in onnxruntime at two shapes; torch legacy too; an export that disagrees with its
framework raises ExportError and leaves no file; TF from a SavedModel and from a tf.function; the CLI end to end.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import sympy
from clihelp import run_cli

import graphcost
from graphcost.export import ExportError, export_tf, verify_onnx
from graphcost.models import zoo

ROOT = Path(__file__).resolve().parents[1]
ZOO_DIR = ROOT / "models" / "zoo"
SHIPPED_ARCHS = ("mlp", "cnn", "transformer")
SHIPPED = [(fw, arch) for fw in zoo.FRAMEWORKS for arch in SHIPPED_ARCHS]
PRODUCT_OPS = ("Conv", "MatMul", "Gemm", "Einsum")
FLOPS_PER_MAC = 2

BATCH, SEQ = sympy.symbols("batch seq", integer=True, nonnegative=True)


def product_macs(arch: str, features: int = 1024) -> sympy.Expr:
    """Conv and matmul multiply-accumulates of ``arch`` in ``batch`` (and ``seq``), biases excluded."""
    if arch == "mlp":
        return BATCH * (
            64 * 128  # fc1: Dense 64 -> 128
            + 128 * 128  # fc2: Dense 128 -> 128
            + 128 * 10  # fc3: Dense 128 -> 10
        )
    if arch == "cnn":
        hw = 32 * 32  # every conv runs at 32x32 ("same" padding, stride 1); pooling comes after
        return BATCH * (
            hw * 16 * 3 * 3 * 3  # stem conv 3x3, 3 -> 16
            + hw * 16 * 16 * 3 * 3  # block conv1 3x3, 16 -> 16
            + hw * 16 * 16 * 3 * 3  # block conv2 3x3, 16 -> 16
            + 16 * 10  # head: Dense 16 -> 10 after global pooling
        )
    if arch == "transformer":
        d, mlp, heads = 64, 256, 4
        dh = d // heads
        per_token = (
            4 * d * d  # q, k, v and output projections, d -> d each
            + d * mlp  # MLP up, 64 -> 256
            + mlp * d  # MLP down, 256 -> 64
        )
        attention = (
            heads * SEQ * SEQ * dh  # q·kᵀ: per head [seq, dh] x [dh, seq]
            + heads * SEQ * SEQ * dh  # p·v: per head [seq, seq] x [seq, dh]
        )
        return BATCH * (SEQ * per_token + attention)
    if arch == "dense":
        return BATCH * features * features  # one Dense features -> features
    raise KeyError(arch)


def dims_for(arch: str, batch: int = 2, seq: int = 16) -> dict[str, int]:
    return {"batch": batch, "seq": seq} if arch == "transformer" else {"batch": batch}


def product_flops(report: graphcost.Report) -> int:
    """FLOPs of the products only: 2·MACs of every Conv/MatMul/Gemm (bias adds excluded, they differ when an
    exporter folds BN into a conv bias)."""
    return sum(FLOPS_PER_MAC * int(n.macs) for n in report.nodes if n.op_type in PRODUCT_OPS and n.depth == 0)


def expected_flops(arch: str, dims: dict[str, int], features: int = 1024) -> int:
    return FLOPS_PER_MAC * int(product_macs(arch, features).subs({BATCH: dims["batch"], SEQ: dims.get("seq", 1)}))


# ---------------------------------------------------------------------------------------------------------------
# fast: the shipped files
# ---------------------------------------------------------------------------------------------------------------


def test_closed_forms_match_the_zoo_docstring() -> None:
    assert product_macs("mlp").subs(BATCH, 1) == 25_856
    assert product_macs("cnn").subs(BATCH, 1) == 5_161_120
    assert sympy.expand(product_macs("transformer")) == sympy.expand(BATCH * (49_152 * SEQ + 128 * SEQ**2))


@pytest.mark.parametrize(("framework", "arch"), SHIPPED)
def test_shipped_file_loads_and_is_small(framework: str, arch: str) -> None:
    path = ZOO_DIR / f"{framework}_{arch}.onnx"
    assert path.is_file(), f"missing {path.name}: run python -m graphcost.models.build_zoo"
    assert path.stat().st_size < 1_000_000
    model = onnx.load(str(path))
    onnx.checker.check_model(model)
    assert {o.domain or "ai.onnx": o.version for o in model.opset_import}["ai.onnx"] == 18
    (x,) = model.graph.input
    named = [d.dim_param for d in x.type.tensor_type.shape.dim if d.dim_param]
    assert named == (["batch", "seq"] if arch == "transformer" else ["batch"])  # the dims keep their names
    for out in model.graph.output:  # no exporter-invented output dim names left (tf2onnx writes unk__N)
        assert not any(d.dim_param.startswith("unk__") for d in out.type.tensor_type.shape.dim)


@pytest.mark.parametrize(("framework", "arch"), SHIPPED)
def test_shipped_file_analyzes_to_the_closed_form(framework: str, arch: str) -> None:
    r = graphcost.analyze(str(ZOO_DIR / f"{framework}_{arch}.onnx"), dims=dims_for(arch))
    assert r.totals.unknown_nodes == 0
    assert r.coverage.node_share == 1.0
    assert not r.defaulted_dims
    assert math.isfinite(r.totals.roofline_time_s) and r.totals.roofline_time_s > 0
    assert product_flops(r) == expected_flops(arch, dims_for(arch))
    # No other op multiplies-accumulates, so the exact formula of all MACs is the closed form.
    macs = sympy.sympify(r.totals.formulas["macs"], locals={"batch": BATCH, "seq": SEQ})
    assert sympy.expand(macs - product_macs(arch)) == 0


@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
def test_frameworks_agree_per_arch(arch: str) -> None:
    dims = dims_for(arch, batch=3, seq=19)
    flops = {fw: product_flops(graphcost.analyze(str(ZOO_DIR / f"{fw}_{arch}.onnx"), dims=dims))
             for fw in zoo.FRAMEWORKS}
    assert set(flops.values()) == {expected_flops(arch, dims)}, flops


def test_batchnorm_kept_where_documented() -> None:
    """torch (keep_batchnorm) and jax keep the cnn's three BNs, all foldable; tf2onnx folds them into the convs."""
    for fw, kept in (("torch", 3), ("jax", 3), ("tf", 0)):
        path = ZOO_DIR / f"{fw}_cnn.onnx"
        ops = [n.op_type for n in onnx.load(str(path)).graph.node]
        assert ops.count("BatchNormalization") == kept, fw
        assert len(graphcost.analyze(str(path), dims={"batch": 2}).batchnorm.foldable) == kept, fw


# ---------------------------------------------------------------------------------------------------------------
# fast: the zoo without frameworks
# ---------------------------------------------------------------------------------------------------------------


def test_weights_are_deterministic_and_nontrivial() -> None:
    a, b = zoo.weights("cnn", seed=0), zoo.weights("cnn", seed=0)
    assert list(a) == list(b) and all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["stem.conv.kernel"], zoo.weights("cnn", seed=1)["stem.conv.kernel"])
    assert a["stem.conv.kernel"].shape == (3, 3, 3, 16)  # HWIO
    for bn in ("stem.bn", "block.bn1", "block.bn2"):
        assert np.abs(a[f"{bn}.mean"]).max() > 0.1  # running statistics away from 0 ...
        assert np.abs(a[f"{bn}.var"] - 1).max() > 0.1  # ... and from 1
    assert all(v.dtype == np.float32 for v in a.values())
    mlp = zoo.weights("mlp")
    assert [mlp[f"fc{i}.kernel"].shape for i in (1, 2, 3)] == [(64, 128), (128, 128), (128, 10)]


def test_example_inputs_same_values_in_both_layouts() -> None:
    nchw = zoo.example_inputs("cnn", layout="NCHW", batch=2)["x"]
    nhwc = zoo.example_inputs("cnn", layout="NHWC", batch=2)["x"]
    assert nchw.shape == (2, 3, 32, 32) and nhwc.shape == (2, 32, 32, 3)
    assert np.array_equal(nchw.transpose(0, 2, 3, 1), nhwc)
    assert zoo.example_inputs("transformer", batch=3, seq=5)["x"].shape == (3, 5, 64)
    assert zoo.example_inputs("dense", features=8)["x"].shape == (2, 8)


def test_bad_framework_or_arch() -> None:
    with pytest.raises(ValueError, match="unknown framework 'pytorch'"):
        zoo.build_native("pytorch", "mlp")
    with pytest.raises(ValueError, match="unknown architecture 'resnet'"):
        zoo.build_native("torch", "resnet")


def test_missing_framework_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # importlib.util.find_spec now reports it absent
    assert not zoo.available("tf")
    with pytest.raises(zoo.FrameworkMissing, match=r"^tensorflow is not installed \(pip install 'graphcost\[tf\]'\)$"):
        zoo.build_native("tf", "mlp")


def test_importing_graphcost_export_imports_no_framework() -> None:
    code = ("import sys, graphcost.export, graphcost.models.zoo, graphcost.cli.export; "
            "print(sorted(m for m in ('torch', 'tensorflow', 'jax', 'flax', 'keras') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def _relu_model(path: Path) -> None:
    model = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 18]>
        relu (float[batch, 4] x) => (float[batch, 4] y) { y = Relu(x) }
    """)
    onnx.save(model, str(path))


def test_verify_onnx_agrees_and_names_a_mismatch(tmp_path: Path) -> None:
    path = tmp_path / "relu.onnx"
    _relu_model(path)
    x = np.array([[-1.0, 0.5, 2.0, -3.0]], dtype=np.float32)
    x3 = np.ones((3, 4), dtype=np.float32)
    assert verify_onnx(path, lambda f: np.maximum(f["x"], 0), [{"x": x}, {"x": x3}]) == (0.0, 0.0)
    with pytest.raises(ExportError) as e:
        verify_onnx(path, lambda f: np.maximum(f["x"], 0) + 1.0, [{"x": x}], source="torch")
    msg = str(e.value)
    assert "\n" not in msg
    assert msg == ("output y differs from torch at x[1×4]: max |diff| 1 (onnxruntime 0, torch 1 at index (0, 0)), "
                   "4 of 4 elements beyond atol 1e-05 + rtol 0.0001·|ref|")
    with pytest.raises(ExportError, match=r"output y: shape \(1, 4\) in onnxruntime, \(4,\) in the reference"):
        verify_onnx(path, lambda f: np.maximum(f["x"][0], 0), [{"x": x}])


def test_tf_opset_19_is_refused_before_tf2onnx(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match=r"^opset 19: tf2onnx exports opset ≤ 18"):
        export_tf(object(), {"x": np.zeros((1, 2), np.float32)}, tmp_path / "m.onnx", opset=19)
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------------------------------
# fast: CLI errors (exit 2, one line, nothing written); none of these imports a framework
# ---------------------------------------------------------------------------------------------------------------


def _one_line_error(code: int, out: str, err: str) -> str:
    assert code == 2, err
    assert out == ""
    assert err.startswith("graphcost: export: ") and err.endswith("\n") and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize(("source", "extra", "expected"), [
    ("ref:torch/resnet", [], "unknown architecture 'resnet'"),
    ("ref:pytorch/cnn", [], "unknown framework 'pytorch'"),
    ("ref:torch/cnn", ["--input", "x=1,3"], "--input is for FILE.py:FACTORY models"),
    ("ref:jax/cnn", ["--legacy"], "--legacy is for torch models, not jax"),
    ("ref:torch/mlp", ["--batch", "0"], "--batch 0: must be ≥ 1"),
    ("missing_dir/model.py:make", ["--input", "x=batch,8"], "missing_dir/model.py: no such file"),
    ("nothing_here", [], "nothing_here: no such file or directory"),
])
def test_cli_bad_source(tmp_path: Path, capsys: pytest.CaptureFixture[str], source: str, extra: list[str],
                        expected: str) -> None:
    out_path = tmp_path / "out.onnx"
    err = _one_line_error(*run_cli(capsys, "export", source, "-o", str(out_path), *extra))
    assert expected in err
    assert not out_path.exists()


@pytest.mark.parametrize(("spec", "expected"), [
    ("x", "expected NAME=DIMS[:DTYPE]"),
    ("x=batch,-3", "dim '-3' is neither a positive int nor a name"),
    ("x=batch,0", "dim '0' is neither a positive int nor a name"),
    ("x=batch,3:complex64", "dtype 'complex64' is not one of"),
])
def test_cli_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str], spec: str, expected: str) -> None:
    factory = tmp_path / "model.py"
    factory.write_text("def make():\n    raise AssertionError('not reached: --input is checked first')\n")
    err = _one_line_error(*run_cli(capsys, "export", f"{factory}:make", "-o", str(tmp_path / "m.onnx"),
                                   "--input", spec))
    assert f"--input {spec!r}" in err and expected in err


def test_cli_factory_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    factory = tmp_path / "model.py"
    factory.write_text("def make():\n    raise RuntimeError('no model today\\nsecond line')\n")
    out_path = tmp_path / "m.onnx"
    err = _one_line_error(*run_cli(capsys, "export", f"{factory}:make", "-o", str(out_path), "--input", "x=4"))
    assert err.endswith(f"{factory}:make: RuntimeError: no model today\n")
    err = _one_line_error(*run_cli(capsys, "export", f"{factory}:absent", "-o", str(out_path), "--input", "x=4"))
    assert "has no function absent" in err
    err = _one_line_error(*run_cli(capsys, "export", f"{factory}:make", "-o", str(out_path)))
    assert "--input NAME=DIMS" in err
    before = factory.read_bytes()
    err = _one_line_error(*run_cli(capsys, "export", f"{factory}:make", "-o", str(factory), "--input", "x=4"))
    assert "refusing to overwrite the input" in err and factory.read_bytes() == before
    assert not out_path.exists()


def test_cli_refuses_to_write_into_a_saved_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    saved = tmp_path / "saved"
    saved.mkdir()
    err = _one_line_error(*run_cli(capsys, "export", str(saved), "-o", str(saved / "m.onnx")))
    assert "refusing to write inside the input SavedModel" in err
    err = _one_line_error(*run_cli(capsys, "export", "ref:torch/mlp", "-o", str(tmp_path)))
    assert "is a directory" in err


def test_cli_missing_framework(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    code, out, err = run_cli(capsys, "export", "ref:torch/cnn", "-o", str(tmp_path / "cnn.onnx"))
    assert (code, out, err) == (2, "", "graphcost: export: torch is not installed (pip install 'graphcost[torch]')\n")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------------------------------
# heavy: real exports
# ---------------------------------------------------------------------------------------------------------------

MODULES = {"torch": "torch", "tf": "tensorflow", "jax": "jax"}
EXPORTERS = {"torch": ("torch", "onnxscript"), "tf": ("tensorflow", "tf2onnx"), "jax": ("jax", "jax2onnx")}


def _need(framework: str) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    for module in EXPORTERS[framework]:
        pytest.importorskip(module)


def _second_shape(arch: str) -> dict[str, tuple[int, ...]]:
    """The verification's second shape: batch 2 -> 3, seq 16 -> 19."""
    return {"x": {"mlp": (3, 64), "transformer": (3, 19, 64), "dense": (3, 1024)}.get(arch, ())}


@pytest.mark.heavy
@pytest.mark.parametrize("framework", zoo.FRAMEWORKS)
@pytest.mark.parametrize("arch", zoo.ARCHS)
def test_export_verifies_at_two_shapes(framework: str, arch: str, tmp_path: Path) -> None:
    _need(framework)
    from graphcost.export import export_native

    model = zoo.build_native(framework, arch)
    path = tmp_path / f"{framework}_{arch}.onnx"
    r = export_native(model, path)
    assert r.path == path and path.is_file()
    assert list(tmp_path.iterdir()) == [path]  # the temporary file is gone
    assert r.exporter == {"torch": "torch.dynamo", "tf": "tf2onnx", "jax": "jax2onnx"}[framework]
    assert r.opset == 18 and r.nodes == len(onnx.load(str(path)).graph.node)
    first = {"x": model.inputs["x"].shape}
    second = dict(first)
    second["x"] = (first["x"][0] + 1, *first["x"][1:])  # batch 2 -> 3
    if arch == "transformer":
        second["x"] = (3, 19, 64)  # seq 16 -> 19 as well
    assert r.checked_shapes == (first, second)
    assert r.max_abs_diff <= 1e-4 and r.max_rel_diff <= 1e-4
    report = graphcost.analyze(str(path), dims=dims_for(arch))
    assert report.totals.unknown_nodes == 0
    assert product_flops(report) == expected_flops(arch, dims_for(arch))


@pytest.mark.heavy
@pytest.mark.parametrize("arch", SHIPPED_ARCHS)
def test_torch_legacy_export(arch: str, tmp_path: Path) -> None:
    _need("torch")
    from graphcost.export import export_native

    model = zoo.build_native("torch", arch)
    r = export_native(model, tmp_path / "m.onnx", dynamo=False)
    assert r.exporter == "torch.legacy" and len(r.checked_shapes) == 2
    report = graphcost.analyze(str(r.path), dims=dims_for(arch))
    assert report.totals.unknown_nodes == 0
    assert product_flops(report) == expected_flops(arch, dims_for(arch))


@pytest.mark.heavy
@pytest.mark.parametrize("dynamo", [True, False])
def test_torch_keep_batchnorm(dynamo: bool, tmp_path: Path) -> None:
    _need("torch")
    from graphcost.export import export_native

    model = zoo.build_native("torch", "cnn")
    for keep, count in ((False, 0), (True, 3)):
        r = export_native(model, tmp_path / f"cnn_{keep}.onnx", dynamo=dynamo, keep_batchnorm=keep)
        ops = [n.op_type for n in onnx.load(str(r.path)).graph.node]
        assert ops.count("BatchNormalization") == count


@pytest.mark.heavy
def test_torch_module_is_not_modified(tmp_path: Path) -> None:
    _need("torch")
    import torch

    from graphcost.export import export_torch

    module = zoo.build_native("torch", "cnn").module
    module.train()
    before = {k: v.clone() for k, v in module.state_dict().items()}
    export_torch(module, {"x": zoo.example_inputs("cnn")["x"]}, tmp_path / "m.onnx", dynamic={"x": {0: "batch"}})
    assert module.training and all(m.training for m in module.modules())
    after = module.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # running stats untouched


@pytest.mark.heavy
@pytest.mark.parametrize("dynamo", [True, False])
def test_disagreeing_export_raises_and_leaves_no_file(dynamo: bool, tmp_path: Path) -> None:
    """A module that computes x + 1 when run but x when exported: the check must catch it."""
    _need("torch")
    import torch

    from graphcost.export import export_torch

    class Sneaky(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if torch.compiler.is_exporting() or torch.jit.is_tracing():
                return x * 1.0
            return x + 1.0

    path = tmp_path / "sneaky.onnx"
    x = np.zeros((2, 5), np.float32)
    with pytest.raises(ExportError) as e:
        export_torch(Sneaky(), {"x": x}, path, dynamic={"x": {0: "batch"}}, dynamo=dynamo)
    msg = str(e.value)
    assert "\n" not in msg
    assert "differs from torch at x[2×5]: max |diff| 1 " in msg and "10 of 10 elements" in msg
    assert list(tmp_path.iterdir()) == []  # neither the file nor its temporary


@pytest.mark.heavy
@pytest.mark.parametrize("framework", zoo.FRAMEWORKS)
def test_verify_against_a_wrong_reference(framework: str, tmp_path: Path) -> None:
    """The framework's own forward + 1.0 as the reference: verify_onnx names the difference."""
    _need(framework)
    from graphcost.export import export_native

    model = zoo.build_native(framework, "mlp")
    path = export_native(model, tmp_path / "mlp.onnx").path

    def wrong(feeds: dict[str, np.ndarray]) -> np.ndarray:
        y = model.forward(*(zoo.to_native(framework, a) for a in feeds.values()))
        return zoo.to_numpy(framework, y) + 1.0

    with pytest.raises(ExportError, match=r"differs from the reference at x\[2×64\]: max \|diff\| 1 "):
        verify_onnx(path, wrong, [model.inputs])


@pytest.mark.heavy
def test_frameworks_compute_the_same_function() -> None:
    """Same canonical weights and inputs: torch, tf and jax outputs agree to float32 rounding."""
    for fw in zoo.FRAMEWORKS:
        _need(fw)
    for arch in zoo.ARCHS:
        outputs = {}
        for fw in zoo.FRAMEWORKS:
            m = zoo.build_native(fw, arch, features=64)
            y = m.forward(*(zoo.to_native(fw, a) for a in m.inputs.values()))
            outputs[fw] = zoo.to_numpy(fw, y)
        for fw in ("tf", "jax"):
            np.testing.assert_allclose(outputs[fw], outputs["torch"], rtol=1e-4, atol=1e-5, err_msg=f"{arch} {fw}")


@pytest.mark.heavy
def test_jax_module_is_not_modified(tmp_path: Path) -> None:
    _need("jax")
    import jax
    from flax import nnx

    from graphcost.export import export_native

    model = zoo.build_native("jax", "cnn")
    before = [np.asarray(a) for a in jax.tree_util.tree_leaves(nnx.state(model.module))]
    export_native(model, tmp_path / "cnn.onnx")
    after = [np.asarray(a) for a in jax.tree_util.tree_leaves(nnx.state(model.module))]
    assert len(before) == len(after) and all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))
    assert model.module.stem_bn.use_running_average  # still in inference mode


@pytest.mark.heavy
def test_jax_forward_jits() -> None:
    _need("jax")
    import jax

    m = zoo.build_native("jax", "transformer")
    x = zoo.to_native("jax", m.inputs["x"])
    np.testing.assert_allclose(np.asarray(jax.jit(m.forward)(x)), np.asarray(m.forward(x)), rtol=1e-5, atol=1e-5)


@pytest.mark.heavy
def test_tf_from_saved_model_and_tf_function(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _need("tf")
    import tensorflow as tf

    from graphcost.export import export_tf

    model = zoo.build_native("tf", "cnn")
    inputs, dynamic = model.inputs, model.dynamic
    saved = tmp_path / "saved"
    model.module.export(str(saved), verbose=False)  # Keras 3: a SavedModel with a serving signature
    r = export_tf(saved, inputs, tmp_path / "from_saved.onnx", dynamic=dynamic)
    assert len(r.checked_shapes) == 2 and r.max_abs_diff <= 1e-4
    fn = tf.function(lambda x: model.module(x, training=False))
    r = export_tf(fn, inputs, tmp_path / "from_fn.onnx", dynamic=dynamic)
    assert len(r.checked_shapes) == 2
    for name in ("from_saved.onnx", "from_fn.onnx"):
        assert product_flops(graphcost.analyze(str(tmp_path / name), dims={"batch": 2})) == \
            expected_flops("cnn", {"batch": 2})
    # The CLI infers TF from the directory and the inputs from the signature (unknown axis 0 -> batch).
    code, out, err = run_cli(capsys, "export", str(saved), "-o", str(tmp_path / "cli.onnx"))
    assert code == 0, err
    assert out.startswith(f"wrote {tmp_path / 'cli.onnx'}: tf2onnx, opset 18, ")
    # Wrong input names for the SavedModel: one line, nothing written.
    with pytest.raises(ExportError, match="the SavedModel's inputs are"):
        export_tf(saved, {"image": inputs["x"]}, tmp_path / "bad.onnx")
    assert not (tmp_path / "bad.onnx").exists()


@pytest.mark.heavy
def test_jax_plain_function(tmp_path: Path) -> None:
    _need("jax")
    import jax.numpy as jnp

    from graphcost.export import export_jax

    def f(x: Any, y: Any) -> Any:
        return jnp.tanh(x) @ y

    x = np.ones((2, 3, 4), np.float32)
    y = np.ones((4, 5), np.float32)
    r = export_jax(f, {"x": x, "y": y}, tmp_path / "f.onnx", dynamic={"x": {0: "batch", 1: "seq"}})
    assert r.checked_shapes == ({"x": (2, 3, 4), "y": (4, 5)}, {"x": (3, 6, 4), "y": (4, 5)})
    (xi, _) = onnx.load(str(r.path)).graph.input
    assert [d.dim_param or d.dim_value for d in xi.type.tensor_type.shape.dim] == ["batch", "seq", 4]


@pytest.mark.heavy
def test_cli_exports_a_reference_and_a_factory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _need("torch")
    code, out, err = run_cli(capsys, "export", "ref:torch/cnn", "-o", str(tmp_path / "cnn.onnx"), "--keep-batchnorm")
    assert code == 0, err
    assert out.startswith(f"wrote {tmp_path / 'cnn.onnx'}: torch.dynamo, opset 18, 13 nodes, max |diff| ")
    assert "at x[2×3×32×32] and x[3×3×32×32]" in out and out.count("\n") == 1
    factory = tmp_path / "model.py"
    factory.write_text(textwrap.dedent("""
        import torch

        class Tagger(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = torch.nn.Embedding(10, 8)
                self.out = torch.nn.Linear(8, 3)

            def forward(self, ids, mask):
                return self.out(self.emb(ids)) * mask.unsqueeze(-1)

        def make():
            return Tagger()
    """))
    for extra in ([], ["--legacy"]):
        code, out, err = run_cli(capsys, "export", f"{factory}:make", "-o", str(tmp_path / "tagger.onnx"),
                                 "--input", "ids=batch,seq:int64", "--input", "mask=batch,seq", *extra)
        assert code == 0, err
        assert "at ids[2×16], mask[2×16] and ids[3×19], mask[3×19]" in out
    # A wrong example shape: the exporter's reason, in one line, nothing written.
    code, out, err = run_cli(capsys, "export", f"{factory}:make", "-o", str(tmp_path / "bad.onnx"),
                             "--input", "ids=batch,seq,2:int64", "--input", "mask=batch,seq")
    _one_line_error(code, out, err)
    assert not (tmp_path / "bad.onnx").exists()


@pytest.mark.heavy
def test_cli_infers_jax_for_a_plain_function(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a factory returning a plain jnp function: the framework is the one its module imported, no --framework
    _need("jax")
    factory = tmp_path / "fn.py"
    factory.write_text(textwrap.dedent("""
        import jax.numpy as jnp
        import numpy as np

        W = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)

        def make():
            return lambda x: jnp.tanh(x @ W)
    """))
    code, out, err = run_cli(capsys, "export", f"{factory}:make", "-o", str(tmp_path / "fn.onnx"),
                             "--input", "x=batch,8")
    assert code == 0, err
    assert "jax2onnx" in out and (tmp_path / "fn.onnx").exists()
