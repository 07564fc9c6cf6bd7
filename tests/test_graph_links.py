"""Graph's neighbour tables built on first use, validate's one-loop order check, and the report's
parameter totals taken once (issue 12: synthetic-100k's memory and the per-node passes)."""

from __future__ import annotations

import onnx.parser
import pytest

from graphcost import api
from graphcost.analysis import Analysis, all_dims
from graphcost.graph import CycleError, Graph
from graphcost.load import Model, load
from graphcost.passes.validate import Severity, validate

# x → A → a ─┬→ B → b ─┐
#            └────────→ C(a, b, a) → y      (C reads ``a`` twice: one predecessor, once)
DIAMOND = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[2] x) => (float[2] y) {
    a = Relu <alpha = 1.0> (x)
    b = Neg (a)
    y = Sum (a, b, a)
}
"""


def _graph(text: str) -> Graph:
    return Model(onnx.parser.parse_model(text), None, None).graph()


def test_neighbour_tables_wait_for_the_first_question() -> None:
    g = _graph(DIAMOND)
    assert g._links is None  # not built by the constructor: analyze never asks (17 MiB at 100k nodes)
    names = [n.name for n in g.nodes()]  # Relu_0, Neg_1, Sum_2 (unnamed nodes: <op>_<index>)
    assert names == ["Relu_0", "Neg_1", "Sum_2"]
    assert g.successors("Relu_0") == ["Neg_1", "Sum_2"]  # a feeds B and C, each once, in graph order
    assert g.successors("Neg_1") == ["Sum_2"]
    assert g.successors("Sum_2") == []  # y is a graph output: no consumer node
    assert g.predecessors("Sum_2") == ["Relu_0", "Neg_1"]  # a (read twice, listed once), then b
    assert g.predecessors("Relu_0") == []  # x is a graph input
    assert g._links is not None
    assert g.cycle() is None


def test_cycle_found_through_the_lazy_tables() -> None:
    # A reads B's output and B reads A's: a two-node loop, listed out of order in the file
    g = _graph("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2] x) => (float[2] y) {
        a = Add (x, b)
        b = Neg (a)
        y = Identity (b)
    }
    """)
    assert g.cycle() == ("Add_0", "Neg_1")  # data-flow order, starting where the file does
    with pytest.raises(CycleError):
        g.topological_order()


def test_validate_refuses_a_node_reading_its_own_output() -> None:
    m = load(onnx.parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2] x) => (float[2] y) {
        a = Add (x, a)
        y = Identity (a)
    }
    """))
    refusals = [f for f in validate(m).findings if f.severity == Severity.REFUSE]
    assert len(refusals) == 1  # one cycle: Add_0 → Add_0
    assert refusals[0].node == "Add_0"
    assert "cycle" in refusals[0].reason


def test_validate_accepts_an_acyclic_graph_listed_out_of_order() -> None:
    # Neg is listed before the Relu that writes its input: out of file order, but no loop
    m = load(onnx.parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2] x) => (float[2] y) {
        y = Neg (a)
        a = Relu (x)
    }
    """))
    assert [f for f in validate(m).findings if f.severity == Severity.REFUSE] == []


def test_all_dims_names_every_dim_of_shared_shapes() -> None:
    a = Analysis.of(onnx.parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[batch, 4] x, float[seq] s) => (float[batch, 4] y, float[seq] t) {
        h = Relu (x)
        y = Neg (h)
        t = Abs (s)
    }
    """))
    assert all_dims(a.graph, a.costs) == {"batch", "seq"}  # x, h, y share [batch, 4]; s, t are [seq]


def test_parameter_totals_are_walked_once_per_report(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = api._parameter_totals

    def counted(g: Graph) -> tuple[int, int]:
        calls.append(1)
        return real(g)

    monkeypatch.setattr(api, "_parameter_totals", counted)
    report = api.analyze(onnx.parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[1, 3] x) => (float[1, 2] y)
      <float[3, 2] w = {1.0, 2.0, 3.0, 4.0, 5.0, 6.0}>
    {
        y = MatMul (x, w)
    }
    """))
    assert len(calls) == 1  # the residency and the model info share one walk (two before)
    assert report.model.parameter_count == 3 * 2  # w: 3 rows × 2 columns
    assert report.model.parameter_bytes == 3 * 2 * 4  # six float32 elements, 4 bytes each
