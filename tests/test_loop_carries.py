"""Loop-carried values that grow, and guarded ops that keep the dims they do not touch (passes/shapes.py).

A Loop whose body Concats a row onto its carried tensor (how R-CNN exports append one row per detection) ends
with as many rows as it ran trips. onnx-shape-inference types the Loop's output as the body's one-iteration
shape; graphcost must not take that: the grown axis is a named unknown unless the trips are known and the
Loop is unrolled exactly. Expected numbers are read off each graph.
"""

from __future__ import annotations

import onnx
import onnx.helper as h
import onnx.parser
from onnx import TensorProto as T

from graphcost import analyze
from graphcost.graph import unknown_dim_name
from graphcost.load import Model
from graphcost.passes import shapes


def _growing_loop(trips_from_input: bool, rows0: int) -> onnx.ModelProto:
    """acc ← Concat(acc, row) on axis 0 per trip, row (1, 3, 17); then y = acc * acc.

    ``trips_from_input``: the trip count is x's leading dim ``n`` (a symbolic value no pass unrolls);
    otherwise it is the constant 5 (the specialize pass unrolls it exactly)."""
    body = h.make_graph(
        [h.make_node("Identity", ["cond_in"], ["cond_out"]),
         h.make_node("Concat", ["acc_in", "row"], ["acc_out"], axis=0)],
        "body",
        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond_in", T.BOOL, []),
         h.make_tensor_value_info("acc_in", T.FLOAT, None)],
        [h.make_tensor_value_info("cond_out", T.BOOL, []), h.make_tensor_value_info("acc_out", T.FLOAT, None)],
        initializer=[h.make_tensor("row", T.FLOAT, [1, 3, 17], [0.0] * 51)])
    nodes = [h.make_node("Loop", ["M", "c", "init"], ["acc"], body=body), h.make_node("Mul", ["acc", "acc"], ["y"])]
    inputs = [h.make_tensor_value_info("init", T.FLOAT, [rows0, 3, 17])]
    inits = [h.make_tensor("c", T.BOOL, [], [True])]
    if trips_from_input:
        nodes = [h.make_node("Shape", ["x"], ["sx"]), h.make_node("Gather", ["sx", "zero"], ["M"], axis=0), *nodes]
        inputs.append(h.make_tensor_value_info("x", T.FLOAT, ["n", 4]))
        inits.append(h.make_tensor("zero", T.INT64, [], [0]))
    else:
        inits.append(h.make_tensor("M", T.INT64, [], [5]))
    g = h.make_graph(nodes, "g", inputs, [h.make_tensor_value_info("y", T.FLOAT, None)], initializer=inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def _dims(result: shapes.ShapeResult, name: str) -> list[int | str]:
    t = result.types[name].tensor_type.shape.dim
    return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in t]


def test_a_growing_carry_with_unknown_trips_gets_a_named_row_count_not_one_iterations_shape() -> None:
    result = shapes.infer_shapes(Model(_growing_loop(True, 0), None, None))
    rows = unknown_dim_name("acc", 0)
    assert _dims(result, "acc") == [rows, 3, 17]  # not (1, 3, 17): one trip's Concat of an empty init
    assert _dims(result, "y") == [rows, 3, 17]  # downstream carries the name
    assert _dims(result, "acc_in")[1:] == [3, 17]  # the body's carried input: the stable axes kept


def test_the_named_row_count_binds_and_prices_the_consumer() -> None:
    report = analyze(_growing_loop(True, 0), dims={unknown_dim_name("acc", 0): 7, "n": 7}, fusion=False,
                     memory=False, batchnorm=False)
    mul = next(n for n in report.nodes if n.op_type == "Mul")
    assert mul.flops == 7 * 3 * 17  # one multiply per element of the 7 grown rows


def test_a_growing_carry_with_known_trips_is_unrolled_exactly() -> None:
    result = shapes.infer_shapes(Model(_growing_loop(False, 1), None, None))
    assert _dims(result, "acc") == [1 + 5, 3, 17]  # the initial row plus one per trip
    assert _dims(result, "y") == [6, 3, 17]


def test_a_stable_carry_keeps_its_shape() -> None:
    model = onnx.parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[n, 4] x, float[2, 8] init) => (float[?, ?] y) {
      sx = Shape(x)
      zero = Constant<value = int64 {0}>()
      M = Gather<axis = 0>(sx, zero)
      c = Constant<value = bool {1}>()
      acc = Loop(M, c, init) <
        body = b (int64 i, bool cin, float[2, 8] a) => (bool cout, float[2, 8] a2) {
          cout = Identity(cin)
          a2 = Relu(a)
        }
      >
      y = Mul(acc, acc)
    }
    """)
    result = shapes.infer_shapes(Model(model, None, None))
    assert _dims(result, "acc") == [2, 8] and _dims(result, "y") == [2, 8]
    assert not any("run-time values" in w.message for w in result.warnings)


def test_a_guarded_slice_on_constant_axes_keeps_the_other_axes() -> None:
    model = onnx.parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[100, 17, 56, 56] heat, int64[1] k) => (float[?, ?, ?, ?] r) {
      starts = Constant<value = int64[1] {0}>()
      axes = Constant<value = int64[1] {0}>()
      top = Slice(heat, starts, k, axes)
      r = Relu(top)
    }
    """)
    result = shapes.infer_shapes(Model(model, None, None))
    assert _dims(result, "top") == [unknown_dim_name("top", 0), 17, 56, 56]  # only axis 0 is the data's


def test_a_guarded_topk_keeps_the_axes_it_does_not_sort() -> None:
    model = onnx.parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[8, 1000] s, int64[1] k) => (float[?, ?] rv, int64[?, ?] ri) {
      v, i = TopK<axis = 1>(s, k)
      rv = Relu(v)
      ri = Identity(i)
    }
    """)
    result = shapes.infer_shapes(Model(model, None, None))
    assert _dims(result, "v") == [8, unknown_dim_name("v", 1)]
    assert _dims(result, "i") == [8, unknown_dim_name("i", 1)]
