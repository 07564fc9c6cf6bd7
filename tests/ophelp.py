"""Test helper: run one node's cost rule on a tiny model written in ONNX text syntax."""

from __future__ import annotations

import onnx
import onnx.parser

from graphcost.graph import Graph
from graphcost.ops import NodeView, ShapeUnknown, Unknown, Work, lookup


def typed_graph(model_text: str) -> Graph:
    model = onnx.parser.parse_model(model_text)
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    opsets = {o.domain: o.version for o in inferred.opset_import}
    return Graph(inferred.graph, opsets)


def cost_of(model_text: str, node_index: int = 0) -> Work | Unknown:
    """The rule's result for node ``node_index`` of the model (shapes from onnx shape inference)."""
    g = typed_graph(model_text)
    node = list(g.nodes())[node_index]
    entry = lookup(node.domain, node.op_type)
    if entry is None:
        return Unknown(f"no rule for {node.domain}::{node.op_type}")
    view = NodeView(node,
                    tuple(g.tensor(t) if t else None for t in node.inputs),
                    tuple(g.tensor(t) if t else None for t in node.outputs), g)
    try:
        return entry.fn(view)
    except ShapeUnknown as e:
        return Unknown(str(e))
