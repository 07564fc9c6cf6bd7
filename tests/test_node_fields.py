"""Each node's protobuf fields are read once (``graph.read_node_fields``) and shared by the loader's text check,
validation, the shapes pass's census and the Graph (issue 12: per-node records built once).

These tests pin that the shared read gives what each reader got from the proto itself: the same fields, the same
Graph, the same findings, and that a string that is not UTF-8 still reaches the loader's rewrite.
"""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from graphcost.graph import Graph, NodeFields, read_node_fields
from graphcost.load import Model, load
from graphcost.passes.shapes import opset_lookup
from graphcost.passes.validate import validate


def _model_with_if() -> onnx.ModelProto:
    """x → Relu → If(cond) { then: Neg, else: Abs } → y, plus a nameless Softmax with an attribute."""
    then = helper.make_graph([helper.make_node("Neg", ["r"], ["t"], name="neg")], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2, 3])])
    other = helper.make_graph([helper.make_node("Abs", ["r"], ["e"], name="abs")], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2, 3])])
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("If", ["cond"], ["b"], name="branch", then_branch=then, else_branch=other),
        helper.make_node("Softmax", ["b"], ["y"], axis=1),  # no name: Graph calls it Softmax_2
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                                           helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_fields_are_the_node_protos_fields_in_order():
    proto = _model_with_if()
    fields = read_node_fields(proto.graph)
    assert fields == (
        NodeFields("relu", "Relu", "", ("x",), ("r",), False, False),
        NodeFields("branch", "If", "", ("cond",), ("b",), True, True),
        NodeFields("", "Softmax", "", ("b",), ("y",), True, False),
    )


def test_a_graph_built_on_given_fields_is_the_graph_built_from_the_proto():
    proto = _model_with_if()
    own = Graph(proto.graph, opset_lookup(proto))
    shared = Graph(proto.graph, opset_lookup(proto), fields=read_node_fields(proto.graph))
    for g in (own, shared):
        assert [n.name for n in g.nodes()] == ["relu", "branch", "Softmax_2"]
        # in the proto's attribute order (onnx.helper writes attributes sorted by name)
        assert [label for label, _ in g.children("branch")] == ["else_branch", "then_branch"]
        assert [n.name for _, c in g.children("branch") for n in c.nodes()] == ["branch/else_branch/abs",
                                                                                 "branch/then_branch/neg"]
    assert [(n.name, n.op_type, n.domain, n.opset, n.inputs, n.outputs, n.index) for n in own.nodes()] == \
        [(n.name, n.op_type, n.domain, n.opset, n.inputs, n.outputs, n.index) for n in shared.nodes()]
    assert own.tensors() == shared.tensors()


def test_fields_of_another_node_list_are_refused():
    proto = _model_with_if()
    with pytest.raises(RuntimeError, match="2 node fields given for 3 nodes"):
        Graph(proto.graph, opset_lookup(proto), fields=read_node_fields(proto.graph)[:2])


def test_the_loader_hands_its_read_on_and_a_model_made_by_hand_reads_on_first_use(tmp_path):
    proto = _model_with_if()
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    loaded = load(path)
    assert loaded.nodes is not None and loaded.node_fields is loaded.nodes
    by_hand = Model(proto, None, None)
    assert by_hand.nodes is None and by_hand.node_fields == loaded.node_fields
    assert by_hand.node_fields is by_hand.node_fields  # read once


def test_validation_on_the_shared_fields_names_repeats_and_double_writes_as_before():
    # two nodes named "a" (the second is reported as a_2) and two writers of "t"
    nodes = [helper.make_node("Relu", ["x"], ["t"], name="a"), helper.make_node("Neg", ["x"], ["t"], name="a")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    texts = [f.reason for f in validate(Model(proto, None, None)).findings]
    assert "an earlier node is also named 'a'; this one is reported as 'a_2'" in texts
    assert any(t.startswith("writes tensor 't', which node 'a' also writes") for t in texts)


def test_a_node_name_that_is_not_utf8_is_refused_by_the_read_and_rewritten_by_the_loader(tmp_path):
    proto = _model_with_if()
    proto.graph.node[0].name = "relu\u00e9"  # é: two bytes in UTF-8, the second replaced below by 0xff
    raw = proto.SerializeToString().replace("relu\u00e9".encode(), b"relu\xc3\xff")
    broken = onnx.ModelProto()
    broken.ParseFromString(raw)
    assert type(broken.graph.node[0].name) is bytes  # protobuf's form of a string that is not UTF-8
    with pytest.raises(TypeError):
        read_node_fields(broken.graph)
    path = tmp_path / "m.onnx"
    path.write_bytes(raw)
    loaded = load(path)
    assert loaded.node_fields[0].name == "relu\\xc3\\xff"
    assert loaded.node_fields == read_node_fields(loaded.proto.graph)


def test_a_name_that_is_not_utf8_inside_a_custom_ops_graphs_attribute_is_rewritten_too(tmp_path):
    # The look for raw bytes entered only If/Loop/Scan/SequenceMap GRAPH attributes: a subgraph in a GRAPHS
    # attribute of another op reached validation with bytes in it (an internal error). It enters all of them now.
    body = helper.make_graph([helper.make_node("Neg", ["a"], ["b"], name="negQQ")], "body",
                             [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2])],
                             [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])])
    node = helper.make_node("Foo", ["x"], ["y"], name="foo", domain="com.example")
    node.attribute.append(helper.make_attribute("bodies", [body]))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.example", 1)])
    path = tmp_path / "m.onnx"
    path.write_bytes(proto.SerializeToString().replace(b"negQQ", b"neg\xc3\xff"))
    loaded = load(path)
    assert loaded.proto.graph.node[0].attribute[0].graphs[0].node[0].name == "neg\\xc3\\xff"
    assert validate(loaded).findings == ()


def test_one_analysis_of_a_file_reads_the_main_graphs_node_fields_once(tmp_path, monkeypatch):
    import importlib

    from graphcost.analysis import Analysis

    proto = _model_with_if()
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    read: list[str] = []

    def counted(graph: onnx.GraphProto) -> tuple[NodeFields, ...]:
        read.append(graph.name)
        return read_node_fields(graph)

    for name in ("graphcost.graph", "graphcost.load", "graphcost.passes.shapes", "graphcost.passes.validate"):
        monkeypatch.setattr(importlib.import_module(name), "read_node_fields", counted)
    Analysis.of(path)
    assert read.count("g") == 1  # the main graph: by the loader, for validation, the census and the Graph
