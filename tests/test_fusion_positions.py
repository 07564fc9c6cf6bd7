"""The fusion wing's position-indexed tables: a graph listed out of topological order groups as listed in order,
and the one-node crossing (``Storage.traffic_one``) is the general one (``Storage.traffic``) of a one-node set.

Graphs are ONNX text syntax; byte counts are written out term by term.
"""

from __future__ import annotations

import onnx
import onnx.parser
import onnx.shape_inference

from graphcost.load import load
from graphcost.passes._fusion_policy import Role
from graphcost.passes._storage import Storage
from graphcost.passes.costs import count_costs
from graphcost.passes.fusion import FusionResult, fuse
from graphcost.passes.shapes import infer_shapes

FP32 = 4  # bytes per float32 element
HEAD = '<ir_version: 8, opset_import: ["" : 17]>\n'
SIGNATURE = "g (float[2, 4] x, float[4, 4] w) => (float[4, 2] y, float[2, 4] s) {\n"
# in order: MatMul → Relu → Add(·, Constant) → Transpose (a layout change); Sigmoid reads the graph output s
BODY = [
    "m = MatMul (x, w)",
    "r = Relu (m)",
    "one = Constant <value = float {1.0}> ()",
    "a = Add (r, one)",
    "s = Identity (a)",
    "y = Transpose <perm = [1, 0]> (a)",
]


def _model(reverse: bool) -> onnx.ModelProto:
    """BODY's model, nodes named by their op, shapes inferred in order; ``reverse`` lists the nodes backwards."""
    model = onnx.shape_inference.infer_shapes(onnx.parser.parse_model(HEAD + SIGNATURE + "\n".join(BODY) + "\n}"))
    for node in model.graph.node:
        node.name = node.op_type
    if reverse:  # every node listed before the one writing its input: not topological
        nodes = list(model.graph.node)[::-1]
        del model.graph.node[:]
        model.graph.node.extend(nodes)
    return model


def _fused(reverse: bool) -> FusionResult:
    graph = infer_shapes(load(_model(reverse))).graph
    return fuse(graph, count_costs(graph))


def _by_members(r: FusionResult) -> dict[frozenset[str], tuple[object, ...]]:
    return {frozenset(g.nodes): (g.anchor, g.flops, g.bytes_unfused, g.bytes_fused, frozenset(g.inputs),
                                 frozenset(g.outputs), g.opaque) for g in r.groups}


def test_a_graph_listed_out_of_order_groups_as_listed_in_order() -> None:
    in_order, backwards = _fused(False), _fused(True)
    assert _by_members(backwards) == _by_members(in_order)
    assert {(b.producer, b.consumer, b.tensor, b.code) for b in backwards.boundaries} == {
        ("Add", "Identity", "a", "multi_consumer"),  # a is read by the view s (a graph output) and the Transpose
        ("Add", "Transpose", "a", "layout_change")}
    assert [b.consumer for b in in_order.boundaries] == ["Identity", "Transpose"]  # by the consumers' places
    assert [b.consumer for b in backwards.boundaries] == ["Transpose", "Identity"]  # in the topological order
    main = backwards.group_of("MatMul")
    assert main.nodes == ("Add", "Constant", "Relu", "MatMul")  # members listed in graph (file) order
    assert main.anchor == "MatMul"
    assert main.bytes_fused == (
        2 * 4 * FP32  # reads x
        + 4 * 4 * FP32  # reads w
        + 1 * FP32  # reads the Constant's scalar (a parameter, as an initializer is)
        + 2 * 4 * FP32  # writes a, which the Transpose reads back (and s, its view, is a graph output)
    )
    assert backwards.group_of("Transpose").nodes == ("Transpose",)  # a layout change runs alone
    assert backwards.group_of("Identity").bytes_fused == 0  # a view alone moves nothing


def test_the_one_node_crossing_is_the_crossing_of_a_one_node_set() -> None:
    graph = infer_shapes(load(_model(False))).graph
    storage = Storage.of(graph)
    kernels = [n for n in graph.nodes() if storage.infos[n.name].role not in (Role.VIEW, Role.FREE)]
    assert [n.name for n in kernels] == ["MatMul", "Relu", "Add", "Transpose"]
    for n in kernels:
        assert storage.traffic_one(n.name, storage.reads[n.name], n.outputs) == storage.traffic([n.name], [n.name])
