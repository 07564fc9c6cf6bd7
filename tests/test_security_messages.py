"""Messages a user can act on, and invalid-but-parseable models never give a silent number (issue 9, item 13).

Each bad input reaches the command line as exit 2 and one line naming the file, the node and the problem (never
``KeyError: 7``, ``NetworkXUnfeasible`` or ``TypeError: Cannot convert complex to float``); a ``--hardware`` file
that is too deep, too big, not TOML or mistyped is blamed, never the model. Models that parse but break the spec
are refused (no honest number exists) or analyzed with a warning; a windowed op with a forbidden attribute has an
unknown cost with the reason, never the number its declared output shape would give.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import onnx.parser
import pytest
from onnx import TensorProto, numpy_helper

from graphcost.api import PassError, analyze
from graphcost.binding import UnboundDims
from graphcost.graph import CycleError
from graphcost.hardware import catalog
from graphcost.load import load
from graphcost.passes._order_search import exact_order, problem
from graphcost.passes.costs import count_costs
from graphcost.passes.fusion import fuse, fusion_section
from graphcost.passes.liveness import liveness
from graphcost.passes.shapes import infer_shapes
from graphcost.passes.validate import InvalidModel, Severity, validate
from tests.clihelp import run_cli

ROOT = Path(__file__).resolve().parents[1]
TINY_CNN = ROOT / "models" / "tiny_cnn.onnx"
INTERNALS = ("KeyError", "NetworkX", "TypeError:", "Traceback", "RecursionError", "Cannot convert")


def vi(name: str, shape: Sequence[int | str | None] | None, dtype: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return oh.make_tensor_value_info(name, dtype, shape)


def model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
          inits: list[onnx.TensorProto] | None = None, opset: int = 17,
          value_info: list[onnx.ValueInfoProto] | None = None, extra_domains: tuple[str, ...] = ()) -> onnx.ModelProto:
    g = oh.make_graph(nodes, "g", inputs, outputs, initializer=inits or [], value_info=value_info or [])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", opset), *(oh.make_opsetid(d, 1) for d in extra_domains)])
    m.ir_version = 8
    return m


def save(tmp_path: Path, name: str, m: onnx.ModelProto) -> str:
    path = tmp_path / f"{name}.onnx"
    onnx.save(m, str(path))
    return str(path)


def one_line(err: str) -> str:
    """The stderr of a refused run: exactly one line, with no internal exception names in it."""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert not any(word in lines[0] for word in INTERNALS), lines[0]
    return lines[0]


def two_node_cycle() -> onnx.ModelProto:
    """A's output feeds B, B's output feeds A: the data flow loops, no order runs both."""
    return model([oh.make_node("Add", ["x", "b"], ["a"], name="A"), oh.make_node("Relu", ["a"], ["b"], name="B")],
                 [vi("x", [1, 4])], [vi("a", [1, 4])])


def weight(shape: list[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.zeros(shape, np.float32), "W")


def conv_model(out_shape: list[int], op: str = "Conv", w_shape: list[int] | None = None, **attrs: object
               ) -> onnx.ModelProto:
    """One windowed node with a declared output shape (the old code counted from it whatever the attributes)."""
    inputs = ["x", "W"] if op.startswith("Conv") else ["x"]
    inits = [weight(w_shape or [4, 3, 3, 3])] if op.startswith("Conv") else []
    node = oh.make_node(op, inputs, ["y"], name="n0")
    node.attribute.extend(oh.make_attribute(k, v) for k, v in attrs.items())
    return model([node], [vi("x", [1, 3, 8, 8])], [vi("y", out_shape)], inits)


# --------------------------------------------------------------------------------------------- cycles
def test_two_node_cycle_is_refused_naming_the_file_and_nodes(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    path = save(tmp_path, "cycle", two_node_cycle())
    code, out, err = run_cli(capsys, "analyze", path)  # was: cannot analyze (KeyError: 3), from liveness
    line = one_line(err)
    assert code == 2 and out == ""
    assert path in line and "graph has a cycle through nodes 'A' → 'B' → 'A'" in line
    assert "node 'A' (Add)" in line


def test_cycle_without_memory_pass_is_refused_not_networkx(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = save(tmp_path, "cycle", two_node_cycle())
    code, _, err = run_cli(capsys, "analyze", path, "--no-memory")  # was: NetworkXUnfeasible, from fusion
    assert code == 2 and "'A' → 'B' → 'A'" in one_line(err) and path in err


def test_self_loop_and_longer_cycle_are_named(tmp_path: Path) -> None:
    loop = model([oh.make_node("Add", ["x", "a"], ["a"], name="A")], [vi("x", [1, 4])], [vi("a", [1, 4])])
    with pytest.raises(InvalidModel, match="cycle through nodes 'A' → 'A'"):
        analyze(loop)
    three = model([oh.make_node("Relu", ["x"], ["p"], name="P"),  # P is before the cycle, on no loop
                   oh.make_node("Add", ["p", "c"], ["a"], name="A"), oh.make_node("Relu", ["a"], ["b"], name="B"),
                   oh.make_node("Relu", ["b"], ["c"], name="C"), oh.make_node("Relu", ["a"], ["y"], name="D")],
                  [vi("x", [1, 4])], [vi("y", [1, 4])])
    with pytest.raises(InvalidModel, match="'A' → 'B' → 'C' → 'A'"):
        analyze(three)


def test_cycle_inside_a_subgraph_is_refused_with_its_path() -> None:
    body = oh.make_graph([oh.make_node("Add", ["x", "v"], ["u"], name="U"),
                          oh.make_node("Relu", ["u"], ["v"], name="V")], "then", [], [vi("v", [1, 4])])
    other = oh.make_graph([oh.make_node("Identity", ["x"], ["w"], name="W")], "else", [], [vi("w", [1, 4])])
    m = model([oh.make_node("If", ["c"], ["y"], name="if0", then_branch=body, else_branch=other)],
              [vi("c", [], TensorProto.BOOL), vi("x", [1, 4])], [vi("y", [1, 4])])
    with pytest.raises(InvalidModel, match="'if0/then_branch/U' → 'if0/then_branch/V'"):
        analyze(m)


def test_graph_and_passes_name_the_cycle_when_called_directly() -> None:
    graph = load(two_node_cycle()).graph()
    assert graph.cycle() == ("A", "B")
    with pytest.raises(CycleError, match="'A' → 'B' → 'A'"):
        graph.topological_order()  # was networkx.NetworkXUnfeasible
    with pytest.raises(CycleError, match="'A' → 'B' → 'A'"):
        liveness(graph, {})  # was KeyError from the exact order search
    with pytest.raises(ValueError, match="cycle"):
        fuse(graph, count_costs(graph))
    assert exact_order(problem(graph, {}), 1000) is None  # no order runs every node
    assert load(str(TINY_CNN)).graph().cycle() is None


# --------------------------------------------------------------------------------------------- dims
def test_dim_without_a_real_value_is_refused_naming_the_tensor(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    # 1/(n - 1) at n = 1 is sympy's complex infinity: was "TypeError: Cannot convert complex to float"
    m = model([oh.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", ["1/(n - 1)", 4])], [vi("y", None)])
    path = save(tmp_path, "complex", m)
    code, _, err = run_cli(capsys, "analyze", path)
    line = one_line(err)
    assert code == 2 and path in line
    assert "graph input 'x' has dim '1/(n - 1)'" in line and "no real value under n=1" in line
    code, out, err = run_cli(capsys, "analyze", path, "--dim", "n=2")  # 1/(2 - 1) = 1: a size
    assert code == 0 and err == "" and out


def test_negative_or_fractional_dim_is_refused(tmp_path: Path) -> None:
    for text, value in (("n - 3", "-2"), ("n/2", "0.5")):
        m = model([oh.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", [text, 4])], [vi("y", None)])
        # n was never bound: the refusal asks for it (a binding to give, not a broken model) and says why
        with pytest.raises(UnboundDims, match=re.escape(f"has dim '{text}', which is {value} under n=1, not a whole")) \
                as info:
            analyze(m)
        assert info.value.names == ("n",)
        # bound by the caller, the same dim is the model's problem
        with pytest.raises(InvalidModel, match=re.escape(f"has dim '{text}', which is {value} under n=1, not a whole")):
            analyze(m, dims={"n": 1})


def test_a_default_that_breaks_a_valid_conv_asks_for_the_dim(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A VALID 3x3 Conv after a stride-2 one has height ceiling(h/2) - 2: -1 at the default h = 1. The model is
    fine; the CLI says which dim to pass, in one line, and the analysis runs once it is bound."""
    w1 = numpy_helper.from_array(np.ones((1, 1, 1, 1), np.float32), "w1")
    w2 = numpy_helper.from_array(np.ones((1, 1, 3, 3), np.float32), "w2")
    m = model([oh.make_node("Conv", ["x", "w1"], ["a"], name="down", strides=[2, 2]),
               oh.make_node("Conv", ["a", "w2"], ["y"], name="valid")],
              [vi("x", [1, 1, "h", 8])], [vi("y", None)])
    m.graph.initializer.extend([w1, w2])
    path = save(tmp_path, "valid_conv", m)
    code, _, err = run_cli(capsys, "analyze", path)
    line = one_line(err)
    assert code == 2 and "dim h is not bound; pass --dim h=N" in line and "'valid' (Conv)" in line
    code, out, err = run_cli(capsys, "analyze", path, "--dim", "h=9")  # ceil(9/2) - 2 = 3 rows
    assert code == 0 and out


# MaxViT's window partition: (1, h, 8) reshaped to (1, h // 7, 7, 8) with no padding; h must be a multiple of 7
PARTITION = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[1, h, 8] x) => (float[?, ?, ?, ?] y) {
  s = Shape(x)
  i1 = Constant<value = int64[1] {1}>()
  hh = Gather(s, i1)
  seven = Constant<value = int64[1] {7}>()
  rows = Div(hh, seven)
  one = Constant<value = int64[1] {1}>()
  eight = Constant<value = int64[1] {8}>()
  target = Concat<axis = 0>(one, rows, seven, eight)
  y = Reshape(x, target)
}"""


def test_a_size_the_model_cannot_run_at_is_refused_in_one_line(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    path = save(tmp_path, "partition", onnx.parser.parse_model(PARTITION))
    code, out, err = run_cli(capsys, "analyze", path, "--dim", "h=14")  # two windows of 7 rows
    assert code == 0 and out
    code, _, err = run_cli(capsys, "analyze", path, "--dim", "h=15")  # 120 elements, 112 asked
    line = one_line(err)
    assert code == 2 and "node 'Reshape_8' (Reshape): reshapes 120 elements into 112 under h=15" in line
    assert "cannot run at these sizes" in line
    code, out, err = run_cli(capsys, "analyze", path)  # h nobody gave, taken as 1: the formulas stand
    assert code == 0 and out


def test_fusion_section_names_an_unbound_or_complex_dim_without_internals() -> None:
    m = model([oh.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", ["1/(n - 1)", 4])], [vi("y", None)])
    graph = infer_shapes(load(m)).graph
    result = fuse(graph, count_costs(graph))
    with pytest.raises(ValueError, match="no real value") as info:
        fusion_section(result, catalog.resolve("edge-soc"), {"n": 1})
    assert "complex" not in str(info.value)
    with pytest.raises(ValueError, match="dim 'n' is not bound"):
        fusion_section(result, catalog.resolve("edge-soc"), {})


def unk_dim_model() -> onnx.ModelProto:
    """A tensor whose only dim ``unk__3`` no node's counts use: both nodes' bytes are unknown (each also writes
    an untyped tensor), yet the fusion group boundary moves it."""
    return model([oh.make_node("Foo", ["x"], ["a", "j1"], name="foo", domain="com.x"),
                  oh.make_node("Bar", ["a"], ["y", "j2"], name="bar", domain="com.x")],
                 [vi("x", [2, 4])], [vi("y", [2, 4])], value_info=[vi("a", ["unk__3", 4])], extra_domains=("com.x",))


def test_unbound_unk_dim_is_defaulted_by_analyze_with_fusion() -> None:
    report = analyze(unk_dim_model())  # the report's rule binds every dim of every tensor
    assert report.binding["unk__3"] == 1 and "unk__3" in report.defaulted_dims
    assert report.fusion is not None


def test_fusion_command_binds_unk_dims(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = save(tmp_path, "unk", unk_dim_model())
    code, out, err = run_cli(capsys, "fusion", path)  # was: cannot analyze (ValueError: dim 'unk__3' is not bound)
    assert code == 0 and "unk__3" in out and err == ""


# --------------------------------------------------------------------------------------------- hardware files
@pytest.mark.parametrize(("name", "text", "expect"), [
    ("deep_arrays", "a = " + "[" * 10000 + "]" * 10000 + "\n", "nested too deeply"),
    ("deep_tables", "a = " + "{b = " * 5000 + "1" + "}" * 5000 + "\n", "nested too deeply"),
    ("huge", 'name = "x"\n# ' + "x" * (catalog.MAX_FILE_BYTES + 10) + "\n", "larger than 1 MiB"),
    ("invalid", "name = \n", "invalid TOML"),
    ("mistyped", 'name = "x"\nmemory_bandwidth = 1e9\n[peak_flops]\nfloat32 = true\n',
     "field 'peak_flops.float32': expected a number, got bool"),
    ("expression", 'name = "x"\nmemory_bandwidth = "__import__(\'os\').getcwd()"\n[peak_flops]\nfloat32 = 1\n',
     "not a quantity"),  # strings are parsed as quantities, never evaluated
])
def test_bad_hardware_file_blames_the_file_not_the_model(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         name: str, text: str, expect: str) -> None:
    hw = tmp_path / f"{name}.toml"
    hw.write_text(text, encoding="utf-8")
    code, out, err = run_cli(capsys, "analyze", str(TINY_CNN), "--hardware", str(hw))
    line = one_line(err)
    assert code == 2 and out == ""
    assert str(hw) in line and expect in line
    assert "tiny_cnn" not in line and "cannot analyze" not in line


def test_hardware_file_not_utf8_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hw = tmp_path / "bin.toml"
    hw.write_bytes(b"\xff\xfe\x00garbage")
    code, _, err = run_cli(capsys, "hardware", "show", str(hw))
    assert code == 2 and str(hw) in one_line(err) and "not UTF-8" in err


# --------------------------------------------------------------------------------------------- invalid models
@pytest.mark.parametrize(("op", "attrs", "w_shape", "reason"), [
    ("Conv", {"strides": [0, 0]}, None, "strides=[0, 0]"),
    ("Conv", {"dilations": [0, 1]}, None, "dilations=[0, 1]"),
    ("Conv", {"group": 0}, None, "group=0"),
    ("Conv", {"group": 2}, [4, 1, 3, 3], "group=2: it does not divide the 3 input channels"),
    ("Conv", {"pads": [-1, 0, 0, 0]}, None, "pads=[-1, 0, 0, 0]"),
    ("Conv", {"kernel_shape": [0, 3]}, None, "kernel_shape=[0, 3]"),
    ("ConvTranspose", {"strides": [0, 0]}, [3, 4, 3, 3], "strides=[0, 0]"),
    ("MaxPool", {"kernel_shape": [2, 2], "strides": [0, 0]}, None, "strides=[0, 0]"),
    ("AveragePool", {"kernel_shape": [2, 2], "pads": [0, 0, -1, 0]}, None, "pads=[0, 0, -1, 0]"),
    ("LpPool", {"kernel_shape": [0, 2]}, None, "kernel_shape=[0, 2]"),
])
def test_forbidden_window_attribute_makes_the_cost_unknown(op: str, attrs: dict[str, object],
                                                           w_shape: list[int] | None, reason: str) -> None:
    # the declared output shape used to be counted as is: Conv with strides 0 gave 7776 FLOPs here
    report = analyze(conv_model([1, 4, 6, 6], op, w_shape, **attrs), fusion=False, memory=False)
    (node,) = report.nodes
    assert node.flops is None and node.macs is None
    assert node.unknown_reason is not None and reason in node.unknown_reason
    assert report.totals.unknown_nodes == 1
    assert any(w.node == "n0" and reason in w.message for w in report.warnings)


def test_valid_conv_still_counts() -> None:
    report = analyze(conv_model([1, 4, 6, 6], strides=[1, 1], pads=[0, 0, 0, 0], group=1), fusion=False)
    # 2 FLOPs per MAC · N·Cout·Ho·Wo (1·4·6·6) · Cin/group·kh·kw (3·3·3)
    assert report.nodes[0].flops == 2 * (1 * 4 * 6 * 6) * (3 * 3 * 3)


def test_duplicate_tensor_producer_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    m = model([oh.make_node("Relu", ["x"], ["y"], name="r1"), oh.make_node("Sigmoid", ["x"], ["y"], name="r2")],
              [vi("x", [1, 4])], [vi("y", [1, 4])])
    path = save(tmp_path, "dup", m)
    code, _, err = run_cli(capsys, "analyze", path)  # was: exit 0, 8 FLOPs, no word of it
    line = one_line(err)
    assert code == 2 and path in line
    assert "node 'r2' (Sigmoid): writes tensor 'y', which node 'r1' also writes" in line


def test_node_writing_an_initializer_is_refused() -> None:
    init = numpy_helper.from_array(np.zeros([1, 4], np.float32), "w")
    m = model([oh.make_node("Relu", ["x"], ["w"], name="r"), oh.make_node("Add", ["x", "w"], ["y"], name="a")],
              [vi("x", [1, 4])], [vi("y", [1, 4])], [init])
    with pytest.raises(InvalidModel, match=r"node 'r' \(Relu\): writes tensor 'w', which is also an initializer"):
        analyze(m)


def test_duplicate_node_names_warn() -> None:
    m = model([oh.make_node("Relu", ["x"], ["a"], name="r"), oh.make_node("Relu", ["a"], ["y"], name="r")],
              [vi("x", [1, 4])], [vi("y", [1, 4])])
    report = analyze(m)
    assert [n.name for n in report.nodes] == ["r", "r_2"]
    assert any(w.node == "r_2" and "also named 'r'" in w.message for w in report.warnings)


def test_output_nothing_produces_warns() -> None:
    m = model([oh.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", [1, 4])], [vi("y", [1, 4]), vi("z", [1, 4])])
    report = analyze(m)
    assert any("output 'z' is produced by no node" in w.message for w in report.warnings)


def test_opset_newer_than_onnx_warns() -> None:
    known = onnx.defs.onnx_opset_version()
    m = model([oh.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", [1, 4])], [vi("y", [1, 4])], opset=999)
    report = analyze(m)
    message = (f"opset 999 is newer than this graphcost's onnx knows ({known}); "
               f"op semantics are taken from opset {known}")
    assert any(w.message == message for w in report.warnings)
    assert report.nodes[0].flops == 4  # Relu: one op per element, still counted


def test_valid_models_have_no_findings() -> None:
    assert validate(load(str(TINY_CNN))).findings == ()
    # a branch may return an outer value as it is: not "an output nothing produces"
    then = oh.make_graph([], "then", [], [vi("x", [1, 4])])
    other = oh.make_graph([oh.make_node("Relu", ["x"], ["w"], name="W")], "else", [], [vi("w", [1, 4])])
    m = model([oh.make_node("If", ["c"], ["y"], name="if0", then_branch=then, else_branch=other)],
              [vi("c", [], TensorProto.BOOL), vi("x", [1, 4])], [vi("y", [1, 4])])
    assert validate(load(m)).findings == ()
    assert all(f.severity in (Severity.REFUSE, Severity.WARN) for f in validate(load(two_node_cycle())).findings)


# --------------------------------------------------------------------------------------------- pass errors
def test_unexpected_pass_error_is_one_line_naming_pass_and_node(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    import graphcost.api as api

    def broken(*_: object, **__: object) -> None:
        raise KeyError("r")

    monkeypatch.setattr(api, "find_foldable", broken)
    m = model([oh.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", [1, 4])], [vi("y", [1, 4])])
    monkeypatch.delenv("GRAPHCOST_DEBUG", raising=False)
    with pytest.raises(PassError, match=r"^batchnorm: node 'r' \(Relu\): internal error") as info:
        analyze(m)
    assert isinstance(info.value.__cause__, KeyError)  # chained, for whoever debugs it
    path = save(tmp_path, "relu", m)
    code, _, err = run_cli(capsys, "analyze", path)
    assert code == 2 and len(err.strip().splitlines()) == 1 and path in err and "batchnorm: node 'r'" in err
    monkeypatch.setenv("GRAPHCOST_DEBUG", "1")  # the original, for its traceback
    with pytest.raises(KeyError):
        analyze(m)
