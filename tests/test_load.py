"""Loading: structure only, parameters wherever exporters put them, external data never read."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto, numpy_helper

import graphcost
from graphcost.graph import TensorKind
from graphcost.hardware.spec import HardwareSpec

EDGE = HardwareSpec("edge-test", {"float32": 2e12}, 50e9)


def _mlp(n_in: int = 256, n_out: int = 512) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((n_in, n_out)).astype(np.float32), "w")
    b = numpy_helper.from_array(np.zeros(n_out, np.float32), "b")
    g = oh.make_graph([oh.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                       oh.make_node("Add", ["h", "b"], ["y"], name="add")], "g",
                      [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", n_in])],
                      [oh.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", n_out])], [w, b])
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])


def test_embedded_weights_are_not_loaded_but_counted(tmp_path: Path) -> None:
    path = tmp_path / "mlp.onnx"
    onnx.save(_mlp(), path)
    model = graphcost.load(path)
    w = next(t for t in model.proto.graph.initializer if t.name == "w")
    assert w.data_location == TensorProto.EXTERNAL and not w.raw_data  # payload skipped, offset kept
    r = graphcost.analyze(path, hardware=EDGE, dims={"batch": 4})
    assert r.model.parameter_count == 256 * 512 + 512  # w and b
    assert r.model.parameter_bytes == (256 * 512 + 512) * 4
    assert r.node("mm").bytes_read == (4 * 256 + 256 * 512) * 4  # x and w, read once each


def test_external_data_is_checked_not_read(tmp_path: Path) -> None:
    path = tmp_path / "ext.onnx"
    onnx.save(_mlp(), path, save_as_external_data=True, location="weights.bin", size_threshold=0)
    before = hashlib.sha256((tmp_path / "weights.bin").read_bytes()).hexdigest()
    r = graphcost.analyze(path, hardware=EDGE, dims={"batch": 1})
    assert r.model.parameter_count == 256 * 512 + 512
    assert hashlib.sha256((tmp_path / "weights.bin").read_bytes()).hexdigest() == before
    assert sorted(os.listdir(tmp_path)) == ["ext.onnx", "weights.bin"]  # nothing written beside the model


def test_truncated_external_data_is_a_load_error(tmp_path: Path) -> None:
    path = tmp_path / "ext.onnx"
    onnx.save(_mlp(), path, save_as_external_data=True, location="weights.bin", size_threshold=0)
    data = (tmp_path / "weights.bin").read_bytes()
    (tmp_path / "weights.bin").write_bytes(data[: len(data) // 2])
    with pytest.raises(graphcost.LoadError, match="truncated"):
        graphcost.load(path)


def test_constant_and_constant_of_shape_weights_are_parameters() -> None:
    w = numpy_helper.from_array(np.ones((8, 8), np.float32), "wv")
    shape = numpy_helper.from_array(np.array([8], np.int64), "shape")
    nodes = [
        oh.make_node("Constant", [], ["w"], value=w, name="cw"),  # a paddle-style weight
        oh.make_node("Constant", [], ["s"], value=shape, name="cs"),  # int64 plumbing, not a weight
        oh.make_node("ConstantOfShape", ["s"], ["bias"], value=numpy_helper.from_array(np.zeros(1, np.float32)),
                     name="cb"),
        oh.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        oh.make_node("Add", ["h", "bias"], ["y"], name="add"),
    ]
    g = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                      [oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    r = graphcost.analyze(m, hardware=EDGE)
    assert r.model.parameter_count == 8 * 8 + 8  # the Constant weight and the ConstantOfShape bias
    graph = graphcost.load(m).graph()
    assert graph.tensor("w").kind == TensorKind.PARAMETER
    assert graph.tensor("s").kind == TensorKind.CONSTANT
    assert graph.tensor("bias").kind == TensorKind.PARAMETER
    assert r.node("cw").bytes_read == 0 and r.node("cw").bytes_written == 0  # consumers read it, like an initializer


def test_load_accepts_bytes_and_rejects_non_models() -> None:
    data = _mlp().SerializeToString()
    assert graphcost.load(data).graph().node("mm").op_type == "MatMul"
    with pytest.raises(graphcost.LoadError, match="not an ONNX model"):
        graphcost.load(b"\x12\x03abc")


def test_unnamed_and_duplicate_node_names_are_made_unique() -> None:
    g = oh.make_graph([oh.make_node("Relu", ["x"], ["a"]), oh.make_node("Relu", ["a"], ["b"], name="r"),
                       oh.make_node("Relu", ["b"], ["y"], name="r")], "g",
                      [oh.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                      [oh.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    r = graphcost.analyze(oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)]), hardware=EDGE)
    assert [n.name for n in r.nodes] == ["Relu_0", "r", "r_2"]
