"""The costs pass looks each tensor and each op's rule up once (``passes/costs.py _Context``): the rows must be the
ones a lookup per use gives — bytes of a name read at a free slot and a data slot, a tensor shared by rows, a
view's zero bytes, an unknown shape's warning."""

from __future__ import annotations

import onnx
import onnx.parser

from graphcost.analysis import Analysis
from graphcost.ops import Kind, Work, rule, unregister
from graphcost.passes.costs import count_costs

FP32 = 4  # bytes per float32 element


def _costs(text: str):  # type: ignore[no-untyped-def]
    return count_costs(Analysis.of(onnx.parser.parse_model(text)).graph)


def test_a_name_at_a_free_slot_and_a_data_slot_is_read_once_for_the_data_slot() -> None:
    @rule("MetaThenData", domain="com.example", kind=Kind.ELEMENTWISE, free_inputs=(0,))
    def _meta_then_data(n):  # type: ignore[no-untyped-def]
        return Work(flops=n.in_numel(1))  # one op per element of the data input

    try:
        costs = _costs("""<ir_version: 8, opset_import: ["" : 17, "com.example" : 1]>
            g (float[4,8] x) => (float[4,8] y) { y = com.example.MetaThenData(x, x) }""")
        row = costs.nodes[0]
        assert row.bytes_read == 4 * 8 * FP32  # x read once, for slot 1 (slot 0 reads only its metadata)
        assert row.bytes_written == 4 * 8 * FP32  # y once (its declared shape)
        assert row.flops == 4 * 8  # one op per element of x
    finally:
        unregister("MetaThenData", "com.example")


def test_a_tensor_read_by_two_nodes_is_one_ref_and_a_view_moves_no_bytes() -> None:
    costs = _costs("""<ir_version: 8, opset_import: ["" : 17]>
        g (float[2,3] x) => (z) {
            y = Relu(x)
            s = Constant<value = int64[1] {6}>()
            r = Reshape(y, s)
            z = Add(y, y)
        }""")
    relu, _, reshape, add = costs.nodes
    assert relu.outputs[0] is reshape.inputs[0] is add.inputs[0] is add.inputs[1]  # one ref for y
    assert (reshape.bytes_read, reshape.bytes_written) == (0, 0)  # a view aliases its input
    assert add.bytes_read == 2 * 3 * FP32  # y, named twice, read once
    assert add.bytes_written == 2 * 3 * FP32  # z once
    assert add.flops == 2 * 3  # one add per output element


def test_an_unknown_shape_leaves_bytes_unknown_with_a_warning() -> None:
    costs = _costs("""<ir_version: 8, opset_import: ["" : 17, "com.example" : 1]>
        g (float[2,3] x) => (z) {
            y = com.example.Opaque(x)
            z = Relu(y)
        }""")
    relu = costs.nodes[1]
    assert relu.bytes_read is None and relu.bytes_written is None  # y's shape is unknown: never 0
    assert any(w.node == relu.name and "bytes of Relu not counted" in w.message for w in costs.warnings)
