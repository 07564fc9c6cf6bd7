"""The same model analyzed in two processes gives byte-identical JSON (issue 10: determinism).

Minted dim names (a NonZero count, a Resize whose sizes come from a computed tensor) and formula texts must not
depend on set/dict iteration order, ``PYTHONHASHSEED`` or counters shared across models. Two checks:

* every shipped model (``models/``, ``models/zoo/``) and the hand-built ones below, each as a bare
  ``graphcost analyze MODEL --format json`` in its own process, once per hash seed: the stdout bytes are equal;
* all of them in one process per hash seed, in opposite orders: a counter or cache shared across models would
  make a model's JSON depend on which models came before it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted([*ROOT.glob("models/*.onnx"), *ROOT.glob("models/zoo/*.onnx")])
SEEDS = ("1", "4242")
SAFETY_NET_S = 120  # a hung child fails the test instead of the session; no time is asserted


def _nonzero_reshape(path: Path) -> Path:
    """x[batch, n] -> NonZero -> [2, nnz] (nnz minted) -> Reshape to [-1] -> Cast -> Add with itself."""
    graph = helper.make_graph(
        [helper.make_node("NonZero", ["x"], ["nz"]),
         helper.make_node("Reshape", ["nz", "flat_shape"], ["flat"]),
         helper.make_node("Cast", ["flat"], ["flat_f"], to=TensorProto.FLOAT),
         helper.make_node("Add", ["flat_f", "flat_f"], ["y"])],
        "nonzero_reshape",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [helper.make_tensor("flat_shape", TensorProto.INT64, [1], [-1])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _dynamic_resize(path: Path) -> Path:
    """Resize whose sizes are computed from another input's shape: Shape(ref)[2:] -> Concat(N, C) -> sizes."""
    graph = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["xs"]),
         helper.make_node("Slice", ["xs", "zero", "two"], ["nc"]),
         helper.make_node("Shape", ["ref"], ["rs"]),
         helper.make_node("Slice", ["rs", "two", "four"], ["hw"]),
         helper.make_node("Concat", ["nc", "hw"], ["sizes"], axis=0),
         helper.make_node("Resize", ["x", "", "", "sizes"], ["up"], mode="nearest"),
         helper.make_node("Conv", ["up", "w"], ["y"], pads=[1, 1, 1, 1])],
        "dynamic_resize",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, "h", "w"]),
         helper.make_tensor_value_info("ref", TensorProto.FLOAT, ["batch", 1, "H", "W"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [helper.make_tensor("zero", TensorProto.INT64, [1], [0]),
         helper.make_tensor("two", TensorProto.INT64, [1], [2]),
         helper.make_tensor("four", TensorProto.INT64, [1], [4]),
         helper.make_tensor("w", TensorProto.FLOAT, [8, 4, 3, 3], [0.0] * (8 * 4 * 3 * 3))])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _topk_gather(path: Path) -> Path:
    """A data-dependent count feeding a MatMul: TopK with k from ReduceMax of an input (k minted)."""
    graph = helper.make_graph(
        [helper.make_node("ReduceMax", ["kin"], ["kmax"], keepdims=0),
         helper.make_node("Reshape", ["kmax", "one"], ["k"]),
         helper.make_node("TopK", ["x", "k"], ["vals", "idx"], axis=0),
         helper.make_node("MatMul", ["vals", "w"], ["y"])],
        "topk_gather",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", 16]),
         helper.make_tensor_value_info("kin", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [helper.make_tensor("one", TensorProto.INT64, [1], [1]),
         helper.make_tensor("w", TensorProto.FLOAT, [16, 8], [0.0] * 128)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


HAND_BUILT = {"nonzero_reshape": _nonzero_reshape, "dynamic_resize": _dynamic_resize, "topk_gather": _topk_gather}


@pytest.fixture(scope="module")
def hand_built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("determinism")
    return {name: build(root / f"{name}.onnx") for name, build in HAND_BUILT.items()}


def _env(seed: str) -> dict[str, str]:
    return {**os.environ, "PYTHONHASHSEED": seed}


def _analyze_json(model: Path, seed: str) -> bytes:
    cmd = [sys.executable, "-m", "graphcost", "analyze", str(model), "--format", "json"]
    proc = subprocess.run(cmd, capture_output=True, timeout=SAFETY_NET_S, check=False, env=_env(seed))
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    json.loads(proc.stdout)  # it is JSON, and nothing else went to stdout
    return proc.stdout


def _first_difference(a: bytes, b: bytes) -> str:
    at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    return f"first difference at byte {at}: {a[max(0, at - 80):at + 80]!r} vs {b[max(0, at - 80):at + 80]!r}"


@pytest.mark.parametrize("model", SHIPPED, ids=[str(p.relative_to(ROOT)) for p in SHIPPED])
def test_shipped_model_json_is_identical_across_processes(model: Path) -> None:
    a, b = (_analyze_json(model, seed) for seed in SEEDS)
    assert a == b, _first_difference(a, b)


@pytest.mark.parametrize("name", sorted(HAND_BUILT))
def test_minted_names_are_identical_across_processes(name: str, hand_built: dict[str, Path]) -> None:
    a, b = (_analyze_json(hand_built[name], seed) for seed in SEEDS)
    assert a == b, _first_difference(a, b)


_DRIVER = """
import contextlib, io, json, sys
from graphcost.cli import main
out = {}
for path in sys.argv[1:]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["analyze", path, "--format", "json"])
    out[path] = [rc, buf.getvalue()]
print(json.dumps(out))
"""


def test_json_does_not_depend_on_the_models_analyzed_before(hand_built: dict[str, Path]) -> None:
    """All models in one process, forward with one hash seed and reversed with another: the same JSON each."""
    models = [str(p) for p in (*SHIPPED, *hand_built.values())]
    runs = []
    for seed, order in zip(SEEDS, (models, models[::-1]), strict=True):
        proc = subprocess.run([sys.executable, "-c", _DRIVER, *order], capture_output=True, text=True,
                              timeout=4 * SAFETY_NET_S, check=False, env=_env(seed))
        assert proc.returncode == 0, proc.stderr
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    for path in models:
        (rc_a, a), (rc_b, b) = runs[0][path], runs[1][path]
        assert rc_a == rc_b == 0, path
        assert a == b, f"{path}: " + _first_difference(a.encode(), b.encode())
