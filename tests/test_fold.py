"""``graphcost fold`` and ``fold_model`` end to end: the folded file agrees with the original in onnxruntime, the
input is never touched, and a fold that would change the outputs writes nothing.

Agreement is checked here independently of the fold's own verification: other random inputs, a second batch size
where the model has a dynamic batch, onnxruntime with graph optimizations off (its BN folding would otherwise make
the reference a folded model too).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto, numpy_helper

import graphcost
import graphcost.fold
from graphcost.cli import main
from graphcost.fold import FoldError, FoldMismatch, fold_model

ROOT = Path(__file__).resolve().parents[1]
TINY_CNN = ROOT / "models" / "tiny_cnn.onnx"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        code = main(list(args))
    except SystemExit as e:  # argparse exits by itself on flag errors
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def ort_outputs(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 2
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def assert_agree(original: Path, folded: Path, shape: tuple[int, ...], seed: int = 123) -> float:
    """Both models on one random input: every element within rtol 1e-4 / atol 1e-5; returns max |diff|."""
    name = onnx.load(original, load_external_data=False).graph.input[0].name
    feeds = {name: np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}
    worst = 0.0
    for a, b in zip(ort_outputs(original, feeds), ort_outputs(folded, feeds), strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)
        worst = max(worst, float(np.max(np.abs(a - b))))
    return worst


def copy_tiny(tmp_path: Path) -> Path:
    src = tmp_path / "tiny_cnn.onnx"
    shutil.copyfile(TINY_CNN, src)
    return src


# ------------------------------------------------------------------------------------------------ CLI
def test_cli_folds_tiny_cnn_and_leaves_input_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = copy_tiny(tmp_path)
    before = digest(src)
    out = tmp_path / "folded.onnx"
    code, stdout, err = run(capsys, "fold", str(src), "-o", str(out), "--hardware", "edge-soc")
    assert code == 0, err
    assert digest(src) == before
    assert "folded 4 of 4 BatchNormalization nodes" in stdout
    assert "/bn1/BatchNormalization -> /conv1/Conv (Conv, preceding)" in stdout
    assert "on edge-soc" in stdout and "verified in onnxruntime" in stdout
    folded = onnx.load(out)
    assert not [n for n in folded.graph.node if n.op_type == "BatchNormalization"]
    assert len(folded.graph.node) == len(onnx.load(src).graph.node) - 4
    assert_agree(src, out, (1, 3, 32, 32))
    assert sorted(os.listdir(tmp_path)) == ["folded.onnx", "tiny_cnn.onnx"]  # no temporary left behind


def test_api_numbers_match_the_analysis_of_both_files(tmp_path: Path) -> None:
    src = copy_tiny(tmp_path)
    out = tmp_path / "folded.onnx"
    result = fold_model(src, out)
    assert [f.into for f in result.folded] == ["/stem/stem.0/Conv", "/conv1/Conv", "/conv2/Conv", "/head/head.0/Conv"]
    assert result.refused == ()
    before, after = graphcost.analyze(src), graphcost.analyze(out)
    assert result.bytes_saved == before.totals.bytes - after.totals.bytes  # the pass's net prediction is exact
    assert result.flops_saved == before.totals.flops - after.totals.flops
    assert 0 <= result.max_abs_diff < 1e-5
    d = result.to_dict()
    assert [x["into"] for x in d["batchnorm"]["foldable"]] == [f.into for f in result.folded]


def test_output_equal_to_input_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = copy_tiny(tmp_path)
    before = digest(src)
    for target in (str(src), str(tmp_path / "." / "tiny_cnn.onnx")):
        code, out, err = run(capsys, "fold", str(src), "-o", target)
        assert out == ""
        assert code == 2 and "refusing to overwrite the input model" in err and len(err.strip().splitlines()) == 1
    link = tmp_path / "link.onnx"
    link.symlink_to(src)
    code, _, err = run(capsys, "fold", str(src), "-o", str(link))
    assert code == 2, err
    with pytest.raises(FoldError):
        fold_model(src, src)
    assert digest(src) == before


@pytest.mark.parametrize("args, needle", [
    (["fold", "X"], "required: -o/--output"),
    (["fold", "X", "-o", "OUT", "--dim", "nosuch=2"], "no input dim of that name"),
    (["fold", "X", "-o", "OUT", "--rtol", "-1"], "--rtol"),
    (["fold", "X", "-o", "OUT", "--hardware", "no-such-device-xyz"], "no-such-device-xyz"),
    (["fold", "MISSING", "-o", "OUT"], "no such file"),
    (["fold", "X", "-o", "NODIR"], "does not exist"),
])
def test_bad_input_exits_2_with_one_line(args: list[str], needle: str, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    src = copy_tiny(tmp_path)
    subst = {"X": str(src), "OUT": str(tmp_path / "o.onnx"), "MISSING": str(tmp_path / "missing.onnx"),
             "NODIR": str(tmp_path / "nodir" / "o.onnx")}
    code, out, err = run(capsys, *[subst.get(a, a) for a in args])
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1 and out == "", err
    assert not (tmp_path / "o.onnx").exists()


def test_a_wrong_fold_exits_1_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    src = copy_tiny(tmp_path)
    before = digest(src)
    real = graphcost.fold.scale_shift

    def off_by_one_percent(*args: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s, t = real(*args)
        return s * 1.01, t

    monkeypatch.setattr(graphcost.fold, "scale_shift", off_by_one_percent)
    out = tmp_path / "folded.onnx"
    code, stdout, err = run(capsys, "fold", str(src), "-o", str(out))
    assert code == 1
    assert "verification failed, nothing written" in err and "largest |diff|" in err
    assert len(err.strip().splitlines()) == 1 and stdout == ""
    assert not out.exists() and sorted(os.listdir(tmp_path)) == ["tiny_cnn.onnx"]
    assert digest(src) == before
    with pytest.raises(FoldMismatch):
        fold_model(src, out)


def test_external_data_in_and_out(tmp_path: Path) -> None:
    src_dir = tmp_path / "src"
    src_dir.mkdir()
    src = src_dir / "m.onnx"
    onnx.save(onnx.load(TINY_CNN), src, save_as_external_data=True, location="m.weights", size_threshold=0)
    hashes = {p.name: digest(p) for p in src_dir.iterdir()}
    out = tmp_path / "folded.onnx"
    result = fold_model(src, out)
    assert len(result.folded) == 4
    assert {p.name: digest(p) for p in src_dir.iterdir()} == hashes
    assert (tmp_path / "folded.onnx.data").is_file()
    assert_agree(src, out, (1, 3, 32, 32))


def test_dynamic_batch_is_bound_by_dim(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.uniform(0.5, 1.5, 4).astype(np.float32), "s"),
             numpy_helper.from_array(rng.normal(0, 0.5, 4).astype(np.float32), "b"),
             numpy_helper.from_array(rng.normal(0, 0.5, 4).astype(np.float32), "m"),
             numpy_helper.from_array(rng.uniform(0.5, 1.5, 4).astype(np.float32), "v")]
    g = oh.make_graph([oh.make_node("Conv", ["x", "w"], ["c"], name="conv"),
                       oh.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["y"], name="bn")], "g",
                      [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8])],
                      [oh.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4, 6, 6])], inits)
    src = tmp_path / "dyn.onnx"
    onnx.save(oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)], ir_version=8), src)
    out = tmp_path / "dyn_folded.onnx"
    code, stdout, err = run(capsys, "fold", str(src), "-o", str(out), "--dim", "batch=3")
    assert code == 0, err
    assert "at batch=3" in stdout
    r1 = fold_model(src, tmp_path / "a.onnx", dims={"batch": 1})
    r3 = fold_model(src, tmp_path / "b.onnx", dims={"batch": 3})
    assert r1.bytes_saved is not None and r3.bytes_saved is not None
    # per image: BN reads and writes [4, 6, 6] floats, the new bias adds 4 floats once
    assert r3.bytes_saved - r1.bytes_saved == 2 * (2 * 4 * 6 * 6 * 4)
    assert_agree(src, out, (5, 3, 8, 8))


# ------------------------------------------------------------------------------------------------ real exports
def export_keeping_bn(name: str, path: Path) -> Path:
    """A legacy export with ``training=PRESERVE``: BatchNormalization nodes stay in the graph."""
    torch = pytest.importorskip("torch")
    from graphcost.models.reference import MODELS, build, example_inputs

    spec = MODELS[name]
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(build(name), example_inputs(name, batch=1), str(path), dynamo=False, opset_version=17,
                          input_names=[spec.input_name], output_names=list(spec.output_names),
                          dynamic_axes={spec.input_name: {0: "batch"}, **{o: {0: "batch"} for o in spec.output_names}},
                          training=torch.onnx.TrainingMode.PRESERVE)
    return path


@pytest.mark.heavy
@pytest.mark.parametrize("name, batchnorms", [("resnet18", 20), ("mobilenet_v2", 52)])
def test_reference_cnn_folds_every_batchnorm(name: str, batchnorms: int, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    src = export_keeping_bn(name, tmp_path / f"{name}.onnx")
    assert sum(n.op_type == "BatchNormalization" for n in onnx.load(src).graph.node) == batchnorms
    before = digest(src)
    out = tmp_path / f"{name}_folded.onnx"
    code, stdout, err = run(capsys, "fold", str(src), "-o", str(out), "--rtol", "1e-4")
    assert code == 0, err
    assert f"folded {batchnorms} of {batchnorms} BatchNormalization nodes" in stdout
    assert digest(src) == before
    assert not [n for n in onnx.load(out).graph.node if n.op_type == "BatchNormalization"]
    for batch in (1, 2):  # the export's batch and the dynamic one
        assert_agree(src, out, (batch, 3, 224, 224), seed=batch)


# ------------------------------------------------------------------------------------------------ deduplicated stats
def _deduplicated_bn_model(path: Path) -> None:
    """x (1,4,8,8) → Conv A → BN 1 → Conv B → BN 2, where BN 2's four statistics are ``Identity`` copies of BN 1's
    initializers: how the legacy exporter writes equal-valued tensors (stored once, one Identity per further use;
    torchvision MaxViT-T's ``pre_norm`` BatchNorms)."""
    rng = np.random.default_rng(0)
    c = 4
    inits = [numpy_helper.from_array(rng.standard_normal((c, c, 3, 3)).astype(np.float32), "wa"),
             numpy_helper.from_array(rng.standard_normal((c, c, 3, 3)).astype(np.float32), "wb")]
    stats = {"g": rng.uniform(0.5, 1.5, c), "b": rng.standard_normal(c), "m": rng.standard_normal(c),
             "v": rng.uniform(0.5, 1.5, c)}
    inits += [numpy_helper.from_array(v.astype(np.float32), k) for k, v in stats.items()]
    nodes = [oh.make_node("Conv", ["x", "wa"], ["a"], pads=[1, 1, 1, 1], name="conv_a"),
             oh.make_node("BatchNormalization", ["a", "g", "b", "m", "v"], ["a_bn"], name="bn_1"),
             *(oh.make_node("Identity", [k], [f"{k}_copy"], name=f"copy_{k}") for k in stats),
             oh.make_node("Conv", ["a_bn", "wb"], ["bb"], pads=[1, 1, 1, 1], name="conv_b"),
             oh.make_node("BatchNormalization", ["bb", "g_copy", "b_copy", "m_copy", "v_copy"], ["y"], name="bn_2")]
    g = oh.make_graph(nodes, "dedup", [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 8, 8])],
                      [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 8, 8])], initializer=inits)
    onnx.save(oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)]), path)


def test_statistics_read_through_identity_copies_fold_and_the_copies_go(tmp_path: Path) -> None:
    src, out = tmp_path / "dedup.onnx", tmp_path / "folded.onnx"
    _deduplicated_bn_model(src)
    before = digest(src)
    result = fold_model(src, out)
    assert sorted(f.into for f in result.folded) == ["conv_a", "conv_b"]  # both, not only the one reading inits
    assert result.refused == ()
    assert digest(src) == before
    folded = onnx.load(out)
    assert [n.op_type for n in folded.graph.node] == ["Conv", "Conv"]  # no BN, no dangling Identity copy
    assert {t.name for t in folded.graph.initializer}.isdisjoint({"g", "b", "m", "v"})  # the statistics went too
    assert_agree(src, out, (1, 4, 8, 8))


def test_a_bias_read_through_an_identity_copy_is_rewritten_as_the_readers_own(tmp_path: Path) -> None:
    """x → BN → Conv B, whose bias is an Identity copy of the bias Conv C reads too. The BN folds into Conv B (its
    producer is the graph input); B's copy becomes B's own constant and C's bias stays as it was."""
    rng = np.random.default_rng(1)
    c = 3
    bs = rng.standard_normal(c).astype(np.float32)
    inits = [numpy_helper.from_array(rng.standard_normal((c, c, 1, 1)).astype(np.float32), "wb"),
             numpy_helper.from_array(rng.standard_normal((c, c, 1, 1)).astype(np.float32), "wc"),
             numpy_helper.from_array(bs, "bs"),
             *(numpy_helper.from_array(v.astype(np.float32), k) for k, v in (
                 ("g", rng.uniform(0.5, 1.5, c)), ("b", rng.standard_normal(c)), ("m", rng.standard_normal(c)),
                 ("v", rng.uniform(0.5, 1.5, c))))]
    nodes = [oh.make_node("Conv", ["x", "wc", "bs"], ["y1"], name="conv_c"),
             oh.make_node("BatchNormalization", ["x", "g", "b", "m", "v"], ["xn"], name="bn"),
             oh.make_node("Identity", ["bs"], ["bs_copy"], name="copy_bs"),
             oh.make_node("Conv", ["xn", "wb", "bs_copy"], ["y2"], name="conv_b")]
    g = oh.make_graph(nodes, "shared_bias", [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 5, 5])],
                      [oh.make_tensor_value_info("y1", TensorProto.FLOAT, [1, c, 5, 5]),
                       oh.make_tensor_value_info("y2", TensorProto.FLOAT, [1, c, 5, 5])], initializer=inits)
    src, out = tmp_path / "shared_bias.onnx", tmp_path / "folded.onnx"
    onnx.save(oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)]), src)
    result = fold_model(src, out)
    assert [f.into for f in result.folded] == ["conv_b"]
    folded = onnx.load(out)
    assert [n.op_type for n in folded.graph.node] == ["Conv", "Constant", "Conv"]  # the copy is B's own now
    kept = {t.name: numpy_helper.to_array(t) for t in folded.graph.initializer}
    np.testing.assert_array_equal(kept["bs"], bs)  # C's bias untouched
    assert_agree(src, out, (1, c, 5, 5))
