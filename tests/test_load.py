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


def _merged_decoder_like() -> onnx.ModelProto:
    """An If whose branches define the same value names with different shapes, as optimum's merged decoders do
    (with past / without past): ``t`` is [2, 4] in one branch and [2, 8] in the other; the cache branch appends to
    the model's ``past`` input and returns it as ``present``."""
    w1 = numpy_helper.from_array(np.ones((3, 4), np.float32), "w1")
    w2 = numpy_helper.from_array(np.ones((3, 8), np.float32), "w2")

    def branch(name: str, w: str, n: int, cache: bool) -> onnx.GraphProto:
        nodes = [oh.make_node("MatMul", ["x", w], ["t"], name="mm"), oh.make_node("Relu", ["t"], ["y"], name="relu")]
        if cache:
            nodes.append(oh.make_node("Concat", ["past", "k"], ["present"], name="append", axis=1))
        else:
            nodes.append(oh.make_node("Identity", ["k"], ["present"], name="fresh"))
        return oh.make_graph(nodes, name, [], [oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, n]),
                                                oh.make_tensor_value_info("present", TensorProto.FLOAT, None)])

    g = oh.make_graph(
        [oh.make_node("If", ["use_cache"], ["out", "present"], name="if", then_branch=branch("then", "w1", 4, True),
                      else_branch=branch("else", "w2", 8, False))],
        "merged",
        [oh.make_tensor_value_info("use_cache", TensorProto.BOOL, []),
         oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
         oh.make_tensor_value_info("past", TensorProto.FLOAT, [2, 100]),
         oh.make_tensor_value_info("k", TensorProto.FLOAT, [2, 1])],
        [oh.make_tensor_value_info("out", TensorProto.FLOAT, None),
         oh.make_tensor_value_info("present", TensorProto.FLOAT, None)], [w1, w2])
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])


def test_sibling_branches_that_reuse_names_keep_their_own_shapes() -> None:
    model = _merged_decoder_like()
    before = model.SerializeToString()
    r = graphcost.analyze(model)
    assert model.SerializeToString() == before  # the caller's proto is not renamed
    rows = {n.name: n for n in r.nodes}
    then_mm, else_mm = rows["if/then_branch/mm"], rows["if/else_branch/mm"]
    assert then_mm.macs == 2 * 3 * 4 and else_mm.macs == 2 * 3 * 8  # each branch its own product
    assert then_mm.outputs[0].shape == (2, 4) and else_mm.outputs[0].shape == (2, 8)
    # the branch visited second (attributes in file order; onnx.helper sorts them: else first) takes the suffix
    assert (then_mm.outputs[0].name, else_mm.outputs[0].name) == ("t@then_branch", "t")
    assert r.totals.macs == 2 * 3 * 8  # the If: the more expensive branch
    append = rows["if/then_branch/append"]  # the model's past, read inside the branch: an append in place
    assert append.bytes_written == 2 * 1 * 4 and append.bytes_as_written == (2 * 100 + 2 * 1 + 2 * 101) * 4


def test_an_if_says_what_its_branch_moves_as_the_graph_writes_it() -> None:
    # the KV copy sits inside the If: its row (and the totals, which add the top-level rows) carry it
    r = graphcost.analyze(_merged_decoder_like())
    rows = {n.name: n for n in r.nodes}
    then = (2 * 3 + 3 * 4 + 2 * 4) * 4 + (2 * 4 + 2 * 4) * 4 + (2 * 100 + 2 * 1 + 2 * 101) * 4  # mm, relu, the copy
    other = (2 * 3 + 3 * 8 + 2 * 8) * 4 + (2 * 8 + 2 * 8) * 4  # mm, relu; the Identity moves nothing
    assert rows["if"].bytes_as_written == max(then, other) + 1  # and the condition's byte
    assert r.totals.bytes_as_written == rows["if"].bytes_as_written


def test_scope_renames_are_the_same_for_the_same_file() -> None:
    from graphcost.graph import separate_scopes

    a, b = _merged_decoder_like(), _merged_decoder_like()
    # the then branch's t, y and present (else is visited first), and else's present: the If's own output shadows it
    assert separate_scopes(a.graph) == separate_scopes(b.graph) == 4
    assert a.SerializeToString() == b.SerializeToString()
    assert separate_scopes(a.graph) == 0  # once apart, nothing clashes


def test_scope_renames_do_not_depend_on_hashing() -> None:
    """A branch visited second that defines both ``x`` (taken by the first) and ``x@then_branch``: which of the two
    takes the counter is decided by file order, in every process (PYTHONHASHSEED differs between them)."""
    import subprocess
    import sys

    code = (
        "import onnx.helper as oh\nfrom onnx import TensorProto as T\nfrom graphcost.graph import separate_scopes\n"
        "def br(n):\n"
        "    nodes = [oh.make_node('Relu', ['a'], ['x@then_branch']), oh.make_node('Neg', ['x@then_branch'], ['x'])]\n"
        "    return oh.make_graph(nodes, n, [], [oh.make_tensor_value_info('x', T.FLOAT, None)])\n"
        "ins = [oh.make_tensor_value_info('c', T.BOOL, []), oh.make_tensor_value_info('a', T.FLOAT, [2])]\n"
        "g = oh.make_graph([oh.make_node('If', ['c'], ['y'], then_branch=br('t'), else_branch=br('e'))], 'g', ins,\n"
        "                  [oh.make_tensor_value_info('y', T.FLOAT, None)])\n"
        "separate_scopes(g)\nprint([o for a in g.node[0].attribute for n in a.g.node for o in n.output])\n")
    seen = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout for seed in range(6)}
    assert len(seen) == 1, seen
    # else (sorted first by onnx.helper) keeps its names; in then, x@then_branch comes first in file order
    assert seen.pop().strip() == ("['x@then_branch', 'x', 'x@then_branch@then_branch', 'x@then_branch2']"), seen
