"""The shape pass's shortcuts give what the long way gives: memoized evaluations and rule answers in the
specialize sweep, the rename skipped for tables without minted names, the data-dependence walk without a
producer table, the contrib rounds skipped for models without a contrib op.

Each test builds two look-alike nodes that differ in one thing the memo key must see (an attribute, an input
value, an omitted optional input) and checks each gets its own closed-form answer.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser

from graphcost.load import Model
from graphcost.passes import _datadep, shapes
from graphcost.passes.specialize import specialize, specialize_model


def _initializers(model: onnx.ModelProto) -> dict[str, list[int]]:
    return {t.name: onnx.numpy_helper.to_array(t).reshape(-1).tolist() for t in model.graph.initializer}


def _shape(types: dict[str, onnx.TypeProto], name: str) -> list[int | str]:
    return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in types[name].tensor_type.shape.dim]


# ---------------------------------------------------------------------------- evaluation memo
SAME_OP = """
<ir_version: 8, opset_import: ["" : 11]>
g (float[2,3,5] x) => (float[?] y) {
  s = Shape(x)
  a = Unsqueeze<axes = [0]>(s)
  b = Unsqueeze<axes = [1]>(s)
  sa = Shape(a)
  sb = Shape(b)
  i0 = Constant<value = int64[1] {0}>()
  i1 = Constant<value = int64[1] {1}>()
  g0 = Gather<axis = 0>(s, i0)
  g1 = Gather<axis = 0>(s, i1)
  g0b = Gather<axis = 0>(s, i0)
  t = Concat<axis = 0>(sa, sb, g0, g1, g0b)
  y = Reshape(x, t)
}
"""


def test_one_op_with_other_attributes_or_inputs_is_evaluated_apart() -> None:
    out = specialize(onnx.parser.parse_model(SAME_OP))
    values = _initializers(out)
    # Concat of: Shape(Unsqueeze axes=[0] of a [3] vector) = [1, 3]; Shape(Unsqueeze axes=[1]) = [3, 1];
    # x's dim 0 = 2 and dim 1 = 3 (same Gather attributes, other index input); dim 0 again = 2 (a repeat)
    assert values["t"] == [1, 3, 3, 1, 2, 3, 2]


def test_an_evaluation_that_fails_is_remembered_as_failed_only_for_its_inputs() -> None:
    model = onnx.parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[4,6] x) => (float[?,?] y) {
      s = Shape(x)
      zero = Constant<value = int64[1] {0}>()
      two = Constant<value = int64[1] {2}>()
      bad = Div(s, zero)
      good = Div(s, two)
      y = Reshape(x, good)
    }
    """)
    values = _initializers(specialize(model))
    assert "bad" not in values  # an integer division by zero is not evaluated
    assert values["good"] == [4 // 2, 6 // 2]  # x's dims halved: the failed Div's memo entry is not this one's


# ---------------------------------------------------------------------------- onnx-rule memo
TRANSPOSES = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[2,3,5] x) => (float[?,?,?] y, float[?,?,?] z, float[?,?,?] u) {
  p = Transpose<perm = [1, 0, 2]>(x)
  q = Transpose<perm = [2, 1, 0]>(x)
  r = Transpose<perm = [1, 0, 2]>(x)
  sp = Shape(p)
  sq = Shape(q)
  sr = Shape(r)
  y = Reshape(p, sp)
  z = Reshape(q, sq)
  u = Reshape(r, sr)
}
"""


def test_one_rule_with_other_attributes_types_each_node_apart() -> None:
    # no types given: every Transpose is typed by onnx's rule inside the sweep, and each Shape evaluates
    values = _initializers(specialize(onnx.parser.parse_model(TRANSPOSES)))
    assert values["sp"] == [3, 2, 5]  # perm (1, 0, 2) of (2, 3, 5)
    assert values["sq"] == [5, 3, 2]  # perm (2, 1, 0)
    assert values["sr"] == [3, 2, 5]  # the first node's question again


def test_the_rule_memo_sees_known_input_values_and_omitted_inputs() -> None:
    model = onnx.parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[6,8] x) => (float[?,?] y, float[?,?] z, float[?,?] w) {
      starts = Constant<value = int64[1] {1}>()
      ends = Constant<value = int64[1] {5}>()
      ends2 = Constant<value = int64[1] {3}>()
      axes = Constant<value = int64[1] {1}>()
      a = Slice(x, starts, ends)
      b = Slice(x, starts, ends2)
      c = Slice(x, starts, ends, axes)
      sa = Shape(a)
      sb = Shape(b)
      sc = Shape(c)
      y = Reshape(a, sa)
      z = Reshape(b, sb)
      w = Reshape(c, sc)
    }
    """)
    values = _initializers(specialize(model))
    assert values["sa"] == [5 - 1, 8]  # rows 1..4 of axis 0 (axes omitted: the first axes)
    assert values["sb"] == [3 - 1, 8]  # the same node but another known end
    assert values["sc"] == [6, 5 - 1]  # axes given: columns 1..4


def test_a_sweep_with_memo_folds_what_onnx_would_type() -> None:
    spec = specialize_model(onnx.parser.parse_model(SAME_OP))
    # every node but the Reshape (it makes the graph output) is folded: 12 nodes in SAME_OP
    assert len(spec.folded) == 12 - 1 - 2  # the two Constants stay as they are
    assert [n.op_type for n in spec.model.graph.node] == ["Constant", "Constant", "Reshape"]


# ---------------------------------------------------------------------------- shapes-pass shortcuts
STATIC = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[2,4] x, float[4,3] w) => (float[2,3] y) {
  m = MatMul(x, w)
  y = Relu(m)
}
"""


def test_a_static_table_keeps_its_names_and_object() -> None:
    model = onnx.parser.parse_model(STATIC)
    types = shapes._collect_types(onnx.shape_inference.infer_shapes(model).graph)
    assert shapes._final_names(types, ["m", "y"], model.graph) is types  # nothing can be minted: not copied
    result = shapes.infer_shapes(Model(model, None, None))
    assert _shape(dict(result.types), "m") == [2, 3]  # (2, 4) @ (4, 3)
    assert result.engines == ("onnx",)


def test_a_minted_name_is_still_renamed() -> None:
    model = onnx.parser.parse_model(STATIC)
    t = onnx.helper.make_tensor_type_proto(onnx.TensorProto.FLOAT, ["unk__7", 3])
    renamed = shapes._final_names({"m": t}, ["m"], model.graph)
    assert _shape(renamed, "m") == ["unk__m_0", 3]  # named after the first (tensor, axis) that carries it


def test_scores_depend_on_the_type_not_the_object() -> None:
    token = shapes._SCORES.set({})
    try:
        a = onnx.helper.make_tensor_type_proto(onnx.TensorProto.FLOAT, ["batch", 3])
        b = onnx.TypeProto()
        b.CopyFrom(a)
        known = frozenset({"batch"})
        assert shapes._type_score(a, known) == 0 == shapes._type_score(b, known)  # batch is an input dim
        assert shapes._type_score(b, frozenset()) == 1  # the same bytes, other input dims: one open dim
        assert shapes._type_score(onnx.helper.make_tensor_type_proto(onnx.TensorProto.FLOAT, None)) == 1000
    finally:
        shapes._SCORES.reset(token)


def test_data_dependence_without_a_producer_walk() -> None:
    model = onnx.parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2,6] x, int64[2] target) => (float[?,?] y, float[?,?] z) {
      y = Reshape(x, target)
      z = Reshape(x, fixed)
    }
    """)
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.array([3, 4], dtype=np.int64), "fixed"))
    dep = _datadep.analyze(model)
    # a graph input's values decide y's shape; an initializer decides z's, which is knowable
    assert dep.guarded == {"y": "Reshape"}
    assert dep.tainted == frozenset({"y"})


def test_census_of_a_model_with_a_contrib_op_only_inside_a_branch() -> None:
    branch = onnx.helper.make_graph(
        [onnx.helper.make_node("Gelu", ["x"], ["g"], domain="com.microsoft")], "then",
        [], [onnx.helper.make_tensor_value_info("g", onnx.TensorProto.FLOAT, None)])
    other = onnx.helper.make_graph(
        [onnx.helper.make_node("Identity", ["x"], ["h"])], "else",
        [], [onnx.helper.make_tensor_value_info("h", onnx.TensorProto.FLOAT, None)])
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=other)], "g",
        [onnx.helper.make_tensor_value_info("c", onnx.TensorProto.BOOL, []),
         onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)])
    census = shapes._census(graph)
    assert (census.flat, census.contrib, census.names) == (False, True, None)  # the Gelu sits in a branch
    assert census.holders == {"If"}  # the op type that holds subgraphs (the walks look into its nodes only)
    census = shapes._census(onnx.parser.parse_model(STATIC).graph)
    assert (census.flat, census.contrib, census.names, census.holders) == (True, False, ["m", "y"], None)


def test_census_leaves_out_omitted_outputs() -> None:
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Dropout", ["x"], ["d", ""]), onnx.helper.make_node("Relu", ["d"], ["y"])], "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)])
    census = shapes._census(graph)
    assert (census.flat, census.contrib, census.names) == (True, False, ["d", "y"])  # Dropout's mask: no name
