"""The fast paths after shape inference give exactly what the general paths give (issue 10 speed, issue 12 scale).

Each speed trick in ``_dims``, ``ops/_registry``, ``ops/movement`` and the report's JSON writer is checked
against the slow path it replaces: the same value, the same type, the same text. No timing is asserted here
(benchmarks are in docs/benchmarks.md); these tests pin the answers.
"""

from __future__ import annotations

import io
import json
import math

import onnx
import pytest
from onnx import TensorProto, helper

from graphcost import _dims, analyze
from graphcost._dims import evaluate, free_names, numel, prod, symbol
from graphcost._sym import sympy
from graphcost.graph import Tensor, TensorKind
from graphcost.ops._registry import tensor_bytes
from graphcost.ops.movement import capped
from graphcost.report import _json as report_json
from graphcost.report import model as report_model
from graphcost.report.model import COMPACT_JSON_NODES

a, b, c = symbol("a"), symbol("b"), symbol("c")


# --------------------------------------------------------------------------- Gather's cap: min(gathered, table)
def test_capped_equal_monomials_take_the_smaller_coefficient():
    # 4·a·b ≤ 8·a·b for every a, b ≥ 0: the rows read are the smaller one, as sympy.Min decides
    assert capped(4 * a * b, 8 * a * b) == 4 * a * b
    assert capped(8 * a * b, 4 * a * b) == 4 * a * b
    assert capped(4 * a * b, 4 * a * b) == 4 * a * b


def test_capped_different_monomials_stay_an_exact_min():
    # 16·a vs 16·b, 4·b·c vs 4·a·b·c: neither is ≤ the other at every binding (set a dim to 0), so Min stays
    for g, t in ((16 * a, 16 * b), (4 * b * c, 4 * a * b * c), (4 * a * b * c, 4 * b * c), (2 * a, 3 * b)):
        got, want = capped(g, t), sympy.Min(g, t)
        assert got == want and str(got) == str(want) and sympy.srepr(got) == sympy.srepr(want)
    assert str(capped(16 * a, 16 * b)) == "Min(16*a, 16*b)"


def test_capped_falls_back_to_sympy_outside_monomials():
    # a power, a sum, an int against a symbol: sympy.Min decides (here it cannot, and says Min(...))
    for g, t in ((a**2, a), (a + 1, a), (4, 4 * a), (sympy.floor(a / 2), a)):
        got, want = capped(g, t), sympy.Min(g, t)
        assert got == want and str(got) == str(want)
    assert capped(3, 5) == 3  # ints: min of ints, an int
    assert isinstance(capped(3, 5), int)


def test_capped_matches_sympy_on_a_grid_of_monomials():
    dims = (a, b, c)
    monomials = [k * m for k in (1, 2, 4, 12) for m in (a, b, a * b, b * c, a * b * c)]
    for g in monomials:
        for t in monomials:
            got, want = capped(g, t), sympy.Min(g, t)
            assert got == want and str(got) == str(want), (g, t)
            # and the number it stands for is the min at a binding
            binding = {str(d): v for d, v in zip(dims, (3, 0, 5), strict=True)}
            assert evaluate(got, binding) == min(evaluate(g, binding), evaluate(t, binding))


# --------------------------------------------------------------------------- evaluate
def test_evaluate_follows_the_binding():
    e = 3 * a * b + 1  # 3·a·b + 1
    assert evaluate(e, {"a": 2, "b": 5}) == 31  # 3·2·5 + 1
    assert evaluate(e, {"a": 2, "b": 5}) == 31  # asked again: the same
    assert evaluate(e, {"a": 1, "b": 5}) == 16  # 3·1·5 + 1: another binding, another value
    assert type(evaluate(e, {"a": 2, "b": 5})) is int


def test_evaluate_keeps_int_and_float_apart():
    e = 2 * a  # 2·a
    assert type(evaluate(e, {"a": 3})) is int and evaluate(e, {"a": 3}) == 6
    got = evaluate(e, {"a": 3.5})  # 2·3.5 = 7.0, a float (3.5 would otherwise hash apart anyway)
    assert got == 7.0 and type(got) is float
    got = evaluate(e, {"a": 3.0})  # 3.0 hashes like 3: must not reuse the int answer
    assert got == 6.0 and type(got) is float


def test_evaluate_follows_one_binding_changed_in_place():
    """The binding last asked about is known again by identity and content: one dict changed in place between
    two calls (a value, an int for a float that equals it, a dim added) is a new binding each time."""
    e = 3 * a * b + 1  # 3·a·b + 1
    binding: dict[str, int | float] = {"a": 2, "b": 5}
    assert evaluate(e, binding) == 31  # 3·2·5 + 1
    binding["a"] = 1
    assert evaluate(e, binding) == 16  # 3·1·5 + 1
    binding["a"] = 1.0
    got = evaluate(e, binding)  # 1.0 == 1: must not reuse the int answer
    assert got == 16.0 and type(got) is float
    binding["a"], binding["c"] = 2, 7
    assert evaluate(e + c, binding) == 38  # 3·2·5 + 1 + 7
    assert type(evaluate(e, binding)) is int


def test_evaluate_names_the_unbound_dim():
    with pytest.raises(KeyError, match="b"):
        evaluate(a * b, {"a": 2})


def test_symbolic_bytes_of_many_inputs_are_added_at_once():
    """A Concat of k inputs, input i of shape [d_i, 4] float32 in a dim of its own: it reads 16·Σd_i bytes
    and writes as many, the sum built in one go (``costs._added``) equal to adding the inputs one by one."""
    from graphcost.passes import costs

    k = 40
    names = [f"d{i}" for i in range(k)]
    inputs = [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, [n, 4]) for i, n in enumerate(names)]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["total", 4])
    node = helper.make_node("Concat", [f"x{i}" for i in range(k)], ["y"], axis=0, name="cat")
    model = helper.make_model(helper.make_graph([node], "g", inputs, [out]),
                              opset_imports=[helper.make_opsetid("", 17)])
    from graphcost.load import load
    from graphcost.passes.shapes import infer_shapes

    row = next(n for n in costs.count_costs(infer_shapes(load(model)).graph).top_level() if n.name == "cat")
    total = sum((symbol(n) for n in names), sympy.Integer(0))
    one_by_one = sympy.Integer(0)
    for n in names:
        one_by_one = one_by_one + 16 * symbol(n)  # 4 columns · 4 bytes
    assert row.bytes_read == 16 * total == one_by_one
    assert row.bytes_written == 16 * total  # the output holds Σd_i rows (the declared "total" is that sum)
    assert costs._added(0, [16 * symbol(n) for n in names]) == one_by_one
    assert costs._added(3, [a]) == a + 3
    # a control op's sum of its bodies' counts takes the same way
    assert costs._sum([2, a, 3, b]) == a + b + 5
    assert costs._sum([1, 2]) == 3 and type(costs._sum([1, 2])) is int
    assert costs._sum([1, a, None]) is None


@pytest.mark.parametrize("name", ["k", "batch", "unk__TopK_5_output_0_0", "d_7"])
def test_ceil_log2_of_a_plain_dim_is_what_sympy_evaluates(name: str) -> None:
    d = symbol(name)
    got = _dims.ceil_log2(d)
    evaluated = sympy.ceiling(sympy.log(d, 2))  # sympy's own evaluation, which the fast path skips
    assert got == evaluated and sympy.srepr(got) == sympy.srepr(evaluated)
    assert str(got) == f"ceiling(log({name})/log(2))"
    assert evaluate(got, {name: 9}) == 4 and evaluate(got, {name: 8}) == 3  # ⌈log2 9⌉, ⌈log2 8⌉


def _expansion_cases() -> list[object]:
    x, y, k = symbol("x"), symbol("y"), symbol("k")
    log2k = _dims.ceil_log2(k)
    return [
        20 * x + 16 * y + 7,  # monomials: kept
        x * sympy.Max(1, log2k) + 4 * k,  # a TopK count: kept
        x * (y + 1) + 3 * x,  # a product of a sum: expanded
        (x + 1) ** 2 + y,  # a power of a sum
        sympy.Max(0, x * (x - 1) / 2 + 3),  # a sum to expand inside a function
        sympy.log(8 * x) + x,  # the log hint
        sympy.log(8) * x,  # log of a perfect power: 3*log(2)
        sympy.floor((x + 1) / 2) + sympy.Mod(y * (y + 1), 2) + sympy.Min(x, y) ** 2,
        (x * y) ** k + x / (y + 1) + sympy.Rational(1, 2) * x,
        x ** -1 + y ** 2 * x,
        sympy.Integer(5), x,
    ]


@pytest.mark.parametrize("case", range(12))
def test_expand_is_what_sympy_expands(case: int) -> None:
    value = _expansion_cases()[case]
    got, want = _dims.expand(value), sympy.expand(value)
    assert got == want and sympy.srepr(got) == sympy.srepr(want)
    assert str(got) == str(want)


def test_expand_vouches_only_for_the_forms_it_knows():
    x, y = symbol("x"), symbol("y")
    kept = [20 * x, x * y ** 2, sympy.Max(1, _dims.ceil_log2(x)) * y, sympy.floor(x / 2), sympy.log(x)]
    assert all(_dims._expanded(e) for e in kept)
    for e in kept:
        assert _dims.expand(e) is e
    total = sympy.Add(*kept)
    assert _dims.expand(total) is total  # nothing to do: the same object, no rebuild
    not_sure = [x * (y + 1), (x + 1) ** 2, sympy.log(8), sympy.log(x * y), sympy.sqrt(x), sympy.Float(0.5) * x,
                sympy.Abs(x - y)]
    assert not any(_dims._expanded(e) for e in not_sure)


def test_free_names_cached_and_exact():
    e = a * b + c
    assert free_names(e) == frozenset({"a", "b", "c"})
    assert free_names(e) is free_names(e)  # the cache hands back the same object
    assert free_names(7) == frozenset()


# --------------------------------------------------------------------------- sizes of symbolic shapes
def test_numel_fast_and_symbolic_paths_agree_with_prod():
    assert numel((2, 3, 4)) == 24 and type(numel((2, 3, 4))) is int  # 2·3·4
    assert numel(()) == 1  # a scalar
    shape = (2, a, 3, b)
    assert numel(shape) == prod(shape) == 6 * a * b  # 2·a·3·b
    assert numel([2, a]) == 2 * a  # a list still works (not cached: unhashable)


def test_tensor_bytes_symbolic_cached_and_exact():
    t = Tensor("x", (a, 3), "float16", TensorKind.ACTIVATION)
    assert tensor_bytes(t) == 6 * a  # a·3 elements · 2 bytes
    packed = Tensor("q", (a, 3), "int4", TensorKind.ACTIVATION)
    # a·3 elements · 4 bits = 12·a bits, rounded up to whole bytes: ⌈12·a/8⌉ = ⌈3·a/2⌉
    assert tensor_bytes(packed) == sympy.ceiling(3 * a / 2)
    assert tensor_bytes(Tensor("s", (5, 3), "int4", TensorKind.ACTIVATION)) == 8  # ⌈15·4/8⌉ = ⌈7.5⌉


# --------------------------------------------------------------------------- the JSON writer
def _chain(n: int) -> onnx.ModelProto:
    """x[1, 4] → Relu → Relu → … (n Relus) → y: a graph past COMPACT_JSON_NODES that analyzes quickly."""
    nodes = [helper.make_node("Relu", [f"t{i}" if i else "x"], [f"t{i + 1}" if i + 1 < n else "y"], name=f"r{i}")
             for i in range(n)]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _old_json(report: report_model.Report, indent: int | None) -> str:
    """The writer as it was: the whole to_dict(), non-finite numbers outside node rows as null."""
    return json.dumps(report_json.finite(report.to_dict()), indent=indent,
                      separators=None if indent else (",", ":"))


def test_compact_json_is_the_old_bytes():
    report = analyze(_chain(COMPACT_JSON_NODES + 1))
    text = report.to_json()
    assert "\n" not in text  # past COMPACT_JSON_NODES: compact, the chunked writer
    assert text == _old_json(report, None)
    buf = io.StringIO()
    report.write_json(buf)
    assert buf.getvalue() == text
    d = json.loads(text)
    assert len(d["nodes"]) == COMPACT_JSON_NODES + 1 and list(d) == list(report.to_dict())


def test_indented_json_is_the_old_bytes():
    report = analyze(_chain(3))
    assert report.to_json() == _old_json(report, 2)
    assert report.to_json(indent=4) == _old_json(report, 4)


def test_dumps_writes_non_finite_numbers_as_null():
    d = {"totals": {"intensity": math.inf, "x": [1.5, -math.inf, math.nan]}, "nodes": None}
    assert report_json.dumps(d, None) == '{"totals":{"intensity":null,"x":[1.5,null,null]},"nodes":null}'
    assert report_json.dumps({"a": 1.5}, None) == '{"a":1.5}'  # finite: the first try stands


def test_dims_module_keeps_its_public_names():
    for name in ("evaluate", "free_names", "numel", "prod", "to_text", "parse_dim", "symbol"):
        assert callable(getattr(_dims, name))


# --------------------------------------------------------------------------- fusion's "same storage size"
def test_same_compares_monomials_without_expanding():
    from graphcost.passes._fusion_policy import same

    assert same(4 * a * b, 4 * b * a)  # one canonical form: 4·a·b
    assert same(2 * a**2, 2 * a * a)  # a·a is a**2
    assert not same(4 * a * b, 4 * a * c)  # b ≠ c at a = 1, b = 1, c = 2
    assert not same(4 * a, 8 * a)
    assert same(2 * (a + 1), 2 * a + 2)  # not monomials: expanded, 2·a + 2 both
    monomials = [k * m for k in (1, 2, sympy.Rational(1, 2)) for m in (a, b, a * b, a**2, a**2 * b)]
    for x in monomials:
        for y in monomials:
            assert same(x, y) == (sympy.expand(x - y) == 0), (x, y)


# --------------------------------------------------------------------------- dim texts without sympy
@pytest.mark.parametrize("text", ["batch", "N", "E", "I", "pi", "oo", "floor", "Min", "_", "unk__x_0", "a1",
                                  "batch*seq", "floor((h - 1)/2) + 1", "DynamicDimension.0", "?", "x" * 300])
def test_text_names_are_the_free_names_of_the_parsed_dim(text: str) -> None:
    assert _dims.text_names(text) == free_names(_dims.parse_dim(text))


def test_plain_dim_names_are_judged_without_a_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    # the shapes pass asks the names of every dim text an engine wrote (Swin-T: 868, all plain names); a parse
    # would import sympy for them (0.7 s of a 2 s analyze)
    from graphcost.passes import shapes

    def no_parse(text: str) -> object:
        raise AssertionError(f"parsed {text!r}")

    monkeypatch.setattr(_dims, "parse_dim", no_parse)
    monkeypatch.setattr(shapes, "parse_dim", no_parse)
    d = onnx.TensorShapeProto.Dimension(dim_param="unk__x_0")
    assert shapes._dim_unresolved(d, frozenset({"batch"})) and not shapes._dim_unresolved(d, frozenset({"unk__x_0"}))
    assert shapes._dim_unresolved(d)  # a minted name, without known input dims


# --------------------------------------------------------------------------- the parameter split stays linear
def test_parameter_split_takes_each_tensor_table_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # Graph.tensors() copies the whole table; asked per node it made the split quadratic (synthetic-100k: 78 s)
    import numpy as np

    from graphcost.graph import Graph
    from graphcost.load import Model
    from graphcost.params import split_parameters
    from graphcost.passes.shapes import infer_shapes

    n = 40
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 4], np.eye(4, dtype=np.float32).ravel().tolist())
    nodes = []
    for i in range(n):  # an Identity copy of the weight (a deduplicated initializer) and a MatMul by it, per layer
        nodes += [helper.make_node("Identity", ["w"], [f"w{i}"]),
                  helper.make_node("MatMul", [f"h{i}" if i else "x", f"w{i}"], [f"h{i + 1}" if i + 1 < n else "y"])]
    graph = helper.make_graph(nodes, "layers", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [w])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    g = infer_shapes(Model(proto, None, None)).graph
    calls = []
    real = Graph.tensors
    monkeypatch.setattr(Graph, "tensors", lambda self: calls.append(1) or real(self))
    split = split_parameters(g, proto, 16)
    assert split.stored_count == 16  # one 4×4 weight, stored once
    assert split.learnable_count + split.buffer_count == split.stored_count + split.merged_count
    assert len(calls) <= 5  # a constant number of tables per graph, not one per node (2n + … before)
