"""The shape pass hands back nothing that keeps its inferred model copies alive.

A protobuf message's memory is freed only when no part of it is referenced, so a result that held one of the
inferred copies' nodes or types would keep that whole copy, its value_info included, for the rest of the run
(synthetic-100k: 95 MiB, ``passes/shapes.py`` ``PackedTypes``). These tests check the references, which are
deterministic, not the memory, which is not.
"""

from __future__ import annotations

import onnx
import onnx.parser

from graphcost.load import load
from graphcost.passes.shapes import PackedTypes, infer_shapes

CHAIN = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[batch,4] x, float[4,3] w) => (float[?,?] y) {
  h = MatMul(x, w)
  y = Relu(h)
}
"""


def _model() -> onnx.ModelProto:
    return onnx.parser.parse_model(CHAIN)


def test_graph_is_built_on_the_input_model_not_an_inferred_copy() -> None:
    m = load(_model())
    r = infer_shapes(m)
    assert r.source is m.proto
    assert r.graph.proto is m.proto.graph
    assert r.graph.node(r.graph.proto.node[0].name or "MatMul_0").proto is m.proto.graph.node[0]


def test_input_shapes_build_on_the_reshaped_copy_and_leave_the_input_alone() -> None:
    m = load(_model())
    before = m.proto.SerializeToString()
    r = infer_shapes(m, input_shapes={"x": (2, 4)})
    assert r.source is not m.proto
    assert r.graph.proto is r.source.graph
    assert m.proto.SerializeToString() == before
    h = r.graph.tensor("h")
    assert h is not None and h.shape == (2, 3)  # (2, 4) @ (4, 3)


def test_types_are_packed_and_decode_to_the_inferred_types() -> None:
    r = infer_shapes(load(_model()))
    assert isinstance(r.types, PackedTypes)
    assert set(r.types) >= {"x", "w", "h", "y"} and len(r.types) == len(list(r.types))
    h = r.types["h"].tensor_type
    assert h.elem_type == onnx.TensorProto.FLOAT
    assert [d.dim_param or d.dim_value for d in h.shape.dim] == ["batch", 3]
    assert r.types["h"] is not r.types["h"]  # each read decodes a message of its own: none points into a copy
    assert "nothing" not in r.types and r.types.get("nothing") is None
