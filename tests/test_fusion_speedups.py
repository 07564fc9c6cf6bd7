"""The fusion pass's speed and memory tricks give what the plain code gives: ``Storage.traffic_at`` is
``Storage.traffic`` read by position, and a released storage answers a crossing as before.

The graph is ONNX text syntax; byte counts are written out term by term.
"""

from __future__ import annotations

import itertools

import onnx
import onnx.parser
import onnx.shape_inference

from graphcost.graph import Graph
from graphcost.load import load
from graphcost.passes._storage import Storage
from graphcost.passes.costs import count_costs
from graphcost.passes.fusion import fuse
from graphcost.passes.shapes import infer_shapes

FP32 = 4  # bytes per float32 element
MODEL = """<ir_version: 8, opset_import: ["" : 17]>
g (float[2, 4] x, float[4, 4] w) => (float[4, 2] y, float[2, 4] s) {
    m = MatMul (x, w)
    r = Relu (m)
    shape = Constant <value = int64[2] {2, 4}> ()
    v = Reshape (r, shape)
    a = Add (v, x)
    s = Identity (a)
    y = Transpose <perm = [1, 0]> (a)
}"""


def _graph() -> Graph:
    model = onnx.shape_inference.infer_shapes(onnx.parser.parse_model(MODEL))
    for node in model.graph.node:
        node.name = node.op_type
    return infer_shapes(load(model)).graph


def test_traffic_by_position_is_traffic_by_name_for_every_node_set() -> None:
    graph = _graph()
    storage = Storage.of(graph)
    order = graph.topological_order()
    at = [graph.node(n) for n in order]
    info_at = [storage.infos[n] for n in order]
    reads_at = [storage.reads[n] for n in order]
    for k in range(1, len(order) + 1):
        for chosen in itertools.combinations(range(len(order)), k):  # positions, in order
            names = [order[i] for i in chosen]
            inside = set(names)
            assert storage.traffic_at(chosen, order, info_at, reads_at, at, inside) == \
                storage.traffic(names, inside)


def test_a_released_storage_answers_a_crossing_as_before() -> None:
    graph = _graph()
    result = fuse(graph, count_costs(graph))
    assert "readers" not in vars(result.storage)  # released when fuse returned
    fresh = Storage.of(graph)
    members = {"MatMul", "Relu", "Reshape", "Add"}
    crossing = result.crossing(members)
    assert crossing == fresh.crossing(members)
    assert crossing.bytes == (
        2 * 4 * FP32  # reads x (MatMul, and Add's second operand: one storage, once)
        + 4 * 4 * FP32  # reads w
        + 2 * 4 * FP32  # writes a, read by the Transpose outside (and s, its view, is a graph output)
    )
    assert result.storage.users("r") == ["Reshape"]  # the other rebuilt tables answer too


LAYERS = 40


def _shared_model() -> onnx.ModelProto:
    """A tensor every layer reads, as a decoder's rotary cos: ``p = Relu(c)``, then per layer k
    ``m_k = Mul(h_k, p)`` and ``h_{k+1} = MatMul(m_k, w_k)``."""
    weights = ", ".join(f"float[4, 4] w{k}" for k in range(LAYERS))
    body = ["p = Relu (c)"]
    for k in range(LAYERS):
        body += [f"m{k} = Mul (h{k}, p)", f"h{k + 1} = MatMul (m{k}, w{k})"]
    text = (f'<ir_version: 8, opset_import: ["" : 17]>\ng (float[4, 4] h0, float[4, 4] c, {weights}) => '
            f"(float[4, 4] h{LAYERS}) {{\n" + "\n".join(body) + "\n}")
    model = onnx.shape_inference.infer_shapes(onnx.parser.parse_model(text))
    for node in model.graph.node:
        node.name = node.output[0]
    return model


def test_trials_of_one_shared_tensor_share_its_producers_descendants(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Each layer's Mul (k >= 1) sits in a group with the MatMul before it (its epilogue), so joining it to p's
    group also needs Mul 0 and the groups of layers 1..k-1 on the paths between: 1 + 2 (k - 1) ops. From the
    trial whose paths hold ``_SHARE_AFTER`` groups on, the later trials walk p's descendants found once
    (:class:`Reach`), and give what the search of every trial on its own gives."""
    from graphcost.passes import _fusion_groups, _fusion_order

    graph = infer_shapes(load(_shared_model())).graph
    costs = count_costs(graph)
    walks: list[int] = []
    plain = _fusion_order.GroupOrder._between_from

    def counted(self, groups, first, reach):  # type: ignore[no-untyped-def]
        walks.append(first)
        return plain(self, groups, first, reach)

    monkeypatch.setattr(_fusion_order.GroupOrder, "_between_from", counted)
    shared = fuse(graph, costs)
    # the trials from layer _SHARE_AFTER + 1 on (k groups between for layer k) walk the shared descendants
    assert len(walks) == LAYERS - 1 - _fusion_groups._SHARE_AFTER
    monkeypatch.setattr(_fusion_groups, "_SHARE_AFTER", 10**9)  # every trial searches on its own
    alone = fuse(graph, costs)
    assert shared.groups == alone.groups
    assert shared.boundaries == alone.boundaries
    reasons = {b.consumer: b.reason for b in shared.boundaries if b.producer == "p"}
    for k in range(2, LAYERS):
        assert f"also needs the {1 + 2 * (k - 1)} op(s) on the paths between them" in reasons[f"m{k}"]
