"""graphcost diff: totals, op counts, parameters, I/O and node-by-node changes between two models."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from clihelp import run_cli
from onnx import TensorProto, numpy_helper

from graphcost.diff import diff_models

ROOT = Path(__file__).resolve().parents[1]
TINY_CNN = ROOT / "models" / "tiny_cnn.onnx"


def mlp(k: int, *, extra: str | None = None, names: bool = True, batch: int | str = 4) -> onnx.ModelProto:
    """x[batch, k] → MatMul(W[k, 8]) → Add(b[8]) → Relu (→ extra op) → y[batch, 8]."""
    def name(n: str) -> str:
        return n if names else ""

    nodes = [oh.make_node("MatMul", ["x", "w"], ["h"], name=name("fc")),
             oh.make_node("Add", ["h", "b"], ["z"], name=name("bias")),
             oh.make_node("Relu", ["z"], ["r" if extra else "y"], name=name("act"))]
    if extra:
        nodes.append(oh.make_node(extra, ["r"], ["y"], name=name("extra")))
    g = oh.make_graph(nodes, "mlp", [oh.make_tensor_value_info("x", TensorProto.FLOAT, [batch, k])],
                      [oh.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 8])],
                      [numpy_helper.from_array(np.zeros((k, 8), np.float32), "w"),
                       numpy_helper.from_array(np.zeros(8, np.float32), "b")])
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])


def save(tmp_path: Path, name: str, m: onnx.ModelProto) -> str:
    path = tmp_path / name
    onnx.save(m, str(path))
    return str(path)


def test_same_model_is_identical() -> None:
    d = diff_models(str(TINY_CNN), str(TINY_CNN))
    assert d.identical
    assert d.matched == d.matched_by_name == 17 and not d.changed and not d.added and not d.removed


def test_new_version_totals_ops_params_and_nodes(tmp_path: Path) -> None:
    a = save(tmp_path, "a.onnx", mlp(16))
    b = save(tmp_path, "b.onnx", mlp(32, extra="Sigmoid"))
    d = diff_models(a, b)
    totals = {c.name: c for c in d.totals}
    # A: MatMul 4*16*8 MACs = 512 → 1024 FLOPs; Add 4*8 = 32; Relu 32            → 1088
    # B: MatMul 4*32*8 MACs = 1024 → 2048 FLOPs; Add 32; Relu 32; Sigmoid 4*8 × its per-element cost
    assert totals["macs"].a == 4 * 16 * 8 and totals["macs"].b == 4 * 32 * 8
    assert totals["flops"].a == 2 * 4 * 16 * 8 + 32 + 32
    assert totals["nodes"].a == 3 and totals["nodes"].b == 4
    assert [(c.name, c.a, c.b) for c in d.op_counts] == [("Sigmoid", 0, 1)]
    params = {c.name: c for c in d.parameters}
    assert (params["parameter_count"].a, params["parameter_count"].b) == (16 * 8 + 8, 32 * 8 + 8)
    assert d.inputs["changed"] == [{"name": "x", "a": {"shape": [4, 16], "dtype": "float32"},
                                    "b": {"shape": [4, 32], "dtype": "float32"}}]
    assert d.matched == d.matched_by_name == 3
    changed = {p.a: p for p in d.changed}
    assert set(changed) == {"fc"}  # bias and act: same shapes, same cost
    fc = {c.name: c for c in changed["fc"].changes}
    assert (fc["flops"].a, fc["flops"].b) == (2 * 4 * 16 * 8, 2 * 4 * 32 * 8)
    assert changed["fc"].shapes_changed
    assert d.added == (("extra", "Sigmoid"),) and d.removed == ()
    assert not d.identical


def test_unnamed_nodes_line_up_by_op_and_shapes(tmp_path: Path) -> None:
    a = save(tmp_path, "a.onnx", mlp(16, names=False))
    b = save(tmp_path, "b.onnx", mlp(16, extra="Tanh", names=False))
    d = diff_models(a, b)
    assert d.matched == 3 and d.matched_by_name == 0  # graphcost's made-up names are not used for matching
    assert not d.changed
    assert [op for _, op in d.added] == ["Tanh"] and d.removed == ()


def test_dims_bound_where_declared(tmp_path: Path) -> None:
    a = save(tmp_path, "a.onnx", mlp(16, batch="batch"))
    b = save(tmp_path, "b.onnx", mlp(16, batch=4))
    d = diff_models(a, b, dims={"batch": 4})
    assert {c.name: (c.a, c.b) for c in d.totals}["flops"] == (2 * 4 * 16 * 8 + 64, 2 * 4 * 16 * 8 + 64)
    assert dict(d.dims_ignored) == {"b": ("batch",)}


def diff_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    return run_cli(capsys, "diff", *args)


def test_cli_text_json_and_bad_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = save(tmp_path, "a.onnx", mlp(16))
    b = save(tmp_path, "b.onnx", mlp(32, extra="Sigmoid"))
    code, out, err = diff_cli(capsys, a, b)
    assert code == 0, err
    assert "Sigmoid" in out and "+ extra [Sigmoid]" in out and "~ fc [MatMul]" in out
    code, out, _ = diff_cli(capsys, a, b, "--format", "json")
    assert code == 0
    d = json.loads(out)
    assert d["schema"] == "graphcost.diff/1" and d["nodes"]["added"] == [{"name": "extra", "op_type": "Sigmoid"}]
    (tmp_path / "bad.onnx").write_bytes(b"")
    code, _, err = diff_cli(capsys, a, str(tmp_path / "bad.onnx"))
    assert code == 2 and "empty" in err and err.count("\n") == 1
