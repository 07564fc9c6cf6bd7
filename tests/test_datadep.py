"""passes/_datadep.py: which shapes depend on run-time values, and the copy the symbolic engines get without them.

Small graphs in ONNX text; the expected sets are read off the graph: NonZero's output count is the data's.
"""

from __future__ import annotations

import onnx
import onnx.parser

from graphcost.passes import _datadep

# x → NonZero (data-dependent count) → Transpose → Gather rows of boxes; the Shape/Relu branch never meets it
DETECTOR = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[100] score, float[100,4] boxes) => (float[?,1,4] picked, float[100] clean) {
  thr = Constant<value = float {0.5}>()
  keep = Greater(score, thr)
  idx = NonZero(keep)
  rows = Transpose<perm = [1, 0]>(idx)
  picked = Gather<axis=0>(boxes, rows)
  clean = Relu(score)
}
"""


def test_nonzero_and_what_it_feeds_are_tainted_the_rest_is_not() -> None:
    dep = _datadep.analyze(onnx.parser.parse_model(DETECTOR))
    assert dep.guarded == {"idx": "NonZero"}  # its count of true entries is the data's
    assert dep.tainted == {"idx", "rows", "picked"}  # NonZero's output and the two nodes downstream of it


def test_without_tainted_drops_the_value_dependent_region_and_keeps_its_input() -> None:
    model = onnx.parser.parse_model(DETECTOR)
    before = model.SerializeToString()
    dep = _datadep.analyze(model)
    cut = _datadep.without_tainted(model, dep)
    assert model.SerializeToString() == before
    assert [n.output[0] for n in cut.graph.node] == ["thr", "keep", "clean"]  # NonZero, Transpose, Gather gone
    assert [vi.name for vi in cut.graph.output] == ["clean"]
    onnx.checker.check_model(cut)


def test_without_tainted_drops_a_node_whose_subgraph_reads_a_dropped_value() -> None:
    model = onnx.parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[100] score, bool c) => (float[100] clean, float[?,1] out) {
      thr = Constant<value = float {0.5}>()
      keep = Greater(score, thr)
      idx = NonZero(keep)
      out = If(c) <
        then_branch = t () => (float[?,1] a) { f = Cast<to = 1>(idx)  a = Transpose<perm = [1, 0]>(f) },
        else_branch = e () => (float[?,1] b) { fb = Cast<to = 1>(idx)  b = Transpose<perm = [1, 0]>(fb) }
      >
      clean = Relu(score)
    }
    """)
    cut = _datadep.without_tainted(model, _datadep.analyze(model))
    # the If reads idx only from its branches: it goes with NonZero, else the copy would read a value it lacks
    assert [n.op_type for n in cut.graph.node] == ["Constant", "Greater", "Relu"]
    onnx.checker.check_model(cut)


def test_without_tainted_is_a_copy_when_nothing_depends_on_values() -> None:
    model = onnx.parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2,3] x) => (float[2,3] y) { y = Relu(x) }
    """)
    dep = _datadep.analyze(model)
    assert dep.tainted == frozenset()
    assert _datadep.without_tainted(model, dep) == model


def test_an_if_whose_branch_reshapes_by_a_value_dependent_count_is_tainted() -> None:
    # the If's only input is a condition, but its then-branch returns a NonZero count's rows: its output and what
    # reads it are value-dependent too (their shapes come from onnx's inference, never from an engine's guess)
    model = onnx.parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[100] score, bool c) => (float[?] out2) {
      thr = Constant<value = float {0.5}>()
      keep = Greater(score, thr)
      idx = NonZero(keep)
      out = If(c) <
        then_branch = t () => (float[?] a) {
          f = Cast<to = 1>(idx)  flat = Constant<value = int64[1] {-1}>()  a = Reshape(f, flat)
        },
        else_branch = e () => (float[?] b) { b = Identity(score) }
      >
      out2 = Relu(out)
    }
    """)
    dep = _datadep.analyze(model)
    assert {"out", "out2"} <= dep.tainted
    assert "keep" not in dep.tainted
