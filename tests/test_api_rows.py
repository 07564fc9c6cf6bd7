"""Report assembly in ``graphcost.api`` and the passes around it, kept equal to what they replaced (session 7, HE):
node rows built positionally, fusion-group ids, the parameter split's digests and read counts, and validate's
node naming."""

from __future__ import annotations

import dataclasses

import onnx
import onnx.helper as oh
import onnx.parser

from graphcost import api
from graphcost.analysis import Analysis
from graphcost.load import Model
from graphcost.params import split_parameters
from graphcost.passes.validate import validate
from graphcost.report.model import NodeReport

_ROW_FIELDS = ("name", "op_type", "domain", "kind", "dtype", "flops", "macs", "bytes_read", "bytes_written",
               "dram_bytes", "intensity", "compute_time_s", "memory_time_s", "roofline_time_s", "bound", "inputs",
               "outputs", "depth", "parent", "multiplier", "note", "unknown_reason", "has_rule", "fusion_group",
               "bytes_as_written")


def test_node_rows_pass_the_fields_in_node_reports_order() -> None:
    # api._node_reports calls NodeReport positionally: a reordered or new field must show up here first
    assert tuple(f.name for f in dataclasses.fields(NodeReport)) == _ROW_FIELDS


def _mlp() -> onnx.ModelProto:
    return onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        mlp (float[batch, 4] x) => (float[batch, 2] y) <float[4, 8] w1 = {1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,
            1,1,1,1,1,1,1,1,1,1,1,1}, float[8, 2] w2 = {1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1}> {
            h = MatMul(x, w1)
            r = Relu(h)
            y = MatMul(r, w2)
        }
    """)


def test_node_rows_equal_rows_built_by_keyword() -> None:
    report = api.analyze(_mlp())
    a = Analysis.of(_mlp())
    groups = {n.name: n.fusion_group for n in report.nodes}
    for row, c in zip(report.nodes, a.costs.nodes, strict=True):
        assert (row.name, row.op_type, row.domain, row.kind, row.dtype) == (c.name, c.op_type, c.domain, c.kind,
                                                                           c.dtype)
        assert row.depth == c.depth and row.parent == c.parent and row.multiplier == c.multiplier
        assert [t.name for t in row.inputs] == [r.name for r in c.inputs]
        assert row.fusion_group == groups[c.name] and row.fusion_group is not None  # every node has a group
    # MatMul x[batch, 4] · w1[4, 8] at batch = 1 (unbound: the default): 1·4·8 = 32 MACs, 2 FLOPs per MAC = 64
    assert (report.nodes[0].macs, report.nodes[0].flops) == (32, 64)
    # one TensorInfo per tensor: h is MatMul's output and Relu's input
    assert report.nodes[0].outputs[0] is report.nodes[1].inputs[0]
    # a named dim stays text in a shape: x is [batch, 4]
    assert report.nodes[0].inputs[0].shape == ("batch", 4)


def test_fusion_group_ids_follow_group_of() -> None:
    report = api.analyze(_mlp())
    assert report.fusion is not None
    for row in report.nodes:
        assert row.fusion_group == report.fusion.group_of(row.name).id


def _split_model() -> onnx.ModelProto:
    """Two equal inline [2]-element initializers (one duplicate of 2 elements), a third that differs, and a
    Constant equal to the first (another duplicate: Constant values are stored tensors too); ``a`` is read by
    two nodes (shared), and a node with an omitted optional input."""
    def init(name: str, vals: list[float]) -> onnx.TensorProto:
        return oh.make_tensor(name, onnx.TensorProto.FLOAT, [2], vals)

    nodes = [
        oh.make_node("Constant", [], ["k"], value=init("kv", [1.0, 2.0])),
        oh.make_node("Add", ["x", "a"], ["s1"]),
        oh.make_node("Add", ["s1", "b"], ["s2"]),
        oh.make_node("Mul", ["s2", "a"], ["s3"]),
        oh.make_node("Add", ["s3", "c"], ["s4"]),
        oh.make_node("Add", ["s4", "k"], ["s5"]),
        oh.make_node("Clip", ["s5", "", ""], ["y"]),  # min and max omitted
    ]
    g = oh.make_graph(nodes, "split", [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
                      [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])],
                      [init("a", [1.0, 2.0]), init("b", [1.0, 2.0]), init("c", [3.0, 4.0])])
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])


def test_parameter_split_duplicates_and_shared_in_closed_form() -> None:
    a = Analysis.of(_split_model())
    split = split_parameters(a.graph, a.model.proto, 0)
    # stored: a, b, c and the Constant k, 2 float32 elements each = 8 elements, 32 bytes
    assert (split.stored_count, split.stored_bytes) == (8, 32)
    # duplicates: b equals a (2 elements, 8 bytes), k equals a (2, 8); c differs
    assert (split.duplicate_count, split.duplicate_bytes) == (4, 16)
    # shared: only a has two readers (Add and Mul): 2 elements, 8 bytes; "" (Clip's omitted inputs) is no tensor
    assert (split.shared_count, split.shared_bytes) == (2, 8)


def test_validate_names_a_nameless_node_like_graph_without_a_rename_warning() -> None:
    # node 1 is nameless, so Graph calls it "Relu_1"; node 0 is really named "Relu_1": the nameless one becomes
    # "Relu_1_2", which renames nothing the user wrote (no warning); a real repeat ("n" twice) warns once
    nodes = [oh.make_node("Relu", ["x"], ["a"], name="Relu_1"), oh.make_node("Relu", ["a"], ["b"]),
             oh.make_node("Relu", ["b"], ["c"], name="n"), oh.make_node("Relu", ["c"], ["y"], name="n")]
    g = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
                      [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])])
    model = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    found = validate(Model(model, None, None)).findings
    assert [(f.node, f.reason) for f in found] == [
        ("n_2", "an earlier node is also named 'n'; this one is reported as 'n_2'")]
    assert [n.name for n in Analysis.of(model).graph.nodes()] == ["Relu_1", "Relu_1_2", "n", "n_2"]
