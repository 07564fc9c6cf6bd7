"""Two shortcuts of the shape pass give what the long way gives.

- The specialize rounds stop without a second sweep when the first one already knew every static shape and
  element type the inference after it states (``shapes._settled``): on a model whose value-dependent shapes
  keep the rounds going, the result equals the one with the second sweep always run.
- The minted-name rename walks only types whose bytes can hold a minted name, and collects the model's own
  dim names only when its bytes can hold one that matters (``_engines._model_names_for_minted``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import onnx
import onnx.parser
import pytest

from graphcost.load import Model
from graphcost.passes import _engines, shapes
from graphcost.passes.specialize import Specialization, specialize_model

# NonZero's count is a run-time value: its output stays unresolved, so the rounds do not end on
# "nothing unresolved"; the Shape → Gather → Div → Concat chain folds in the first sweep.
GUARDED = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[2,6,8] x) => (float[?,?,?] y, int64[?,?] nz) {
  s = Shape(x)
  i = Constant<value = int64[1] {2}>()
  w = Gather<axis = 0>(s, i)
  two = Constant<value = int64[1] {2}>()
  h = Div(w, two)
  lead = Constant<value = int64[2] {2, 6}>()
  target = Concat<axis = 0>(lead, h, two)
  r = Reshape(x, target)
  y = Relu(r)
  nz = NonZero(x)
}
"""


def _result_key(r: shapes.ShapeResult) -> tuple[object, ...]:
    return ([(k, v.SerializeToString()) for k, v in r.types.items()], r.warnings, r.input_dims, r.engines,
            r.source.SerializeToString())


def _dims(t: onnx.TypeProto) -> list[int | str]:
    return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in t.tensor_type.shape.dim]


def test_rounds_stop_without_a_second_sweep_and_give_the_same_types(monkeypatch: pytest.MonkeyPatch) -> None:
    model = Model(onnx.parser.parse_model(GUARDED), None, None)
    asked: list[bool] = []
    settled: Callable[..., bool] = shapes._settled

    def spy(*args: object) -> bool:
        asked.append(settled(*args))
        return asked[-1]

    sweeps: list[int] = []
    real = shapes._specialize.specialize_model

    def counted(*args: object, **kwargs: object) -> Specialization:
        sweeps.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(shapes._specialize, "specialize_model", counted)
    monkeypatch.setattr(shapes, "_settled", spy)
    fast = shapes.infer_shapes(model)
    assert asked == [True] and len(sweeps) == 1  # the shortcut decided: one sweep, not two
    monkeypatch.setattr(shapes, "_settled", lambda *args: False)
    sweeps.clear()
    slow = shapes.infer_shapes(model)
    assert len(sweeps) == 2  # the long way: a second sweep that finds the same node counts
    assert _result_key(fast) == _result_key(slow)
    # r: x's 2x6x8 reshaped to [2, 6, 8 / 2, 2] = [2, 6, 4, 2] (the folded target)
    assert _dims(fast.types["r"]) == [2, 6, 4, 2]


def _sweep(static: Mapping[str, tuple[int, ...]], elems: Mapping[str, int], *, limited: bool = False) -> Specialization:
    return Specialization(onnx.ModelProto(), (), (), (), (), static, elems, limited)


def _typ(elem: int, dims: list[int | str] | None) -> onnx.TypeProto:
    return onnx.helper.make_tensor_type_proto(elem, dims)


F, I64 = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64


def test_settled_only_when_the_types_add_nothing_the_sweep_did_not_know() -> None:
    typed = {"a": _typ(F, [2, 3]), "b": _typ(I64, ["n"]), "c": _typ(F, None)}
    knew: dict[str, tuple[int, ...]] = {"a": (2, 3)}
    elems = {"a": F, "b": I64, "c": F}
    assert shapes._settled(_sweep(knew, elems), typed)  # b and c are not static: nothing new to sweep with
    assert not shapes._settled(_sweep(knew, elems, limited=True), typed)  # a bound held the sweep back
    assert not shapes._settled(_sweep({}, elems), typed)  # a's static shape is new to the sweep
    assert not shapes._settled(_sweep({"a": (3, 2)}, elems), typed)  # ... or other than it knew
    assert not shapes._settled(_sweep(knew, {"a": F, "b": I64}), typed)  # c's element type is new


def _loop(body_nodes: int) -> onnx.ModelProto:
    """A 64-trip Loop whose body passes its condition on and chains ``body_nodes`` Relus."""
    chain = "\n".join(f"v{k + 1} = Relu(v{k})" for k in range(body_nodes))
    return onnx.parser.parse_model(f"""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2] x) => (float[2] y) {{
      n = Constant<value = int64 {{64}}>()
      t = Constant<value = bool {{1}}>()
      y = Loop(n, t, x) <body = b (int64 i, bool c, float[2] v0) => (bool co, float[2] v{body_nodes}) {{
        co = Identity(c)
        {chain}
      }}>
    }}""")


def test_a_sweep_says_it_was_limited_when_a_loop_is_too_long_to_unroll() -> None:
    small = specialize_model(_loop(1))
    assert small.unrolled and not small.limited  # 64 trips x 2 body nodes = 128 unrolled nodes: within bounds
    big = specialize_model(_loop(400))
    # 64 trips x (1 Identity + 400 Relus) = 25,664 > UNROLL_NODES (20,000): refused by the bound, and said so
    assert not big.unrolled and big.limited


# ---------------------------------------------------------------------------- minted names
def test_model_names_are_collected_only_when_the_bytes_can_hold_one_that_matters() -> None:
    plain = onnx.parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[batch] x) => (float[batch] y) { Gather_dim_0 = Identity(x)  y = Identity(Gather_dim_0) }""")
    assert _engines._model_names_for_minted(plain.graph) == frozenset()  # "_dim" holds no "_d" and a digit
    own = onnx.parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[unk__a_0, _d7] x) => (float[unk__a_0, _d7] y) { y = Identity(x) }""")
    assert _engines._model_names_for_minted(own.graph) == _engines.model_dim_names(own.graph) == {"unk__a_0", "_d7"}


def test_rename_keeps_the_models_own_names_and_avoids_them() -> None:
    own = onnx.parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[unk__a_0, _d7] x) => (float[unk__a_0, _d7] y) { y = Identity(x) }""")
    types = {"a": _typ(F, ["unk__3", "_d7"]), "s": _typ(F, ["batch_dim"]), "n": _typ(F, [4])}
    out = _engines.name_minted_dims(types, ["a", "s", "n"], own.graph)
    # unk__3 is minted: named after (a, 0), whose plain name the model already uses, so one "_" goes on;
    # _d7 is the model's own name and stays; "batch_dim" holds "_d" but no minted symbol
    assert {k: _dims(v) for k, v in out.items()} == {"a": ["unk__a_0_", "_d7"], "s": ["batch_dim"], "n": [4]}
    assert out["n"] is types["n"]  # a type without a minted name is shared, not copied
    plain = onnx.parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[batch] x) => (float[batch] y) { y = Identity(x) }""")
    out = _engines.name_minted_dims(types, ["a", "s", "n"], plain.graph)
    # no model name in the way: both minted symbols take (a, axis) names
    assert {k: _dims(v) for k, v in out.items()} == {"a": ["unk__a_0", "unk__a_1"], "s": ["batch_dim"], "n": [4]}


# ---------------------------------------------------------------------------- the subgraph walk
NESTED = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[2] x, bool c) => (float[2] y) {
  n = Constant<value = int64 {3}>()
  y = Loop(n, c, x) <body = b (int64 i, bool ci, float[2] v) => (bool co, float[2] vo) {
    co = Identity(ci)
    vo = If(ci) <then_branch = t () => (float[2] a) { a = Relu(v) },
                 else_branch = e () => (float[2] a) { a = Neg(v) }>
  }>
}
"""


def test_the_walk_by_op_type_visits_what_the_full_walk_visits(monkeypatch: pytest.MonkeyPatch) -> None:
    from graphcost.graph import graph_protos

    model = onnx.parser.parse_model(NESTED)
    census = shapes._census(model.graph)
    holders = census.holders
    assert not census.flat and census.names is None and holders == {"Loop", "If"}  # the ops holding a subgraph
    assert holders is not None
    token, ops = shapes._FLAT.set(False), shapes._GRAPH_OPS.set(holders)
    try:
        walked = [g.name for g in shapes._walk_graphs(model.graph)]
    finally:
        shapes._GRAPH_OPS.reset(ops)
        shapes._FLAT.reset(token)
    # outer first, then each node's subgraphs in node and attribute order, depth first: g, b, then If's two
    assert walked == [g.name for g in graph_protos(model.graph)] == ["g", "b", "t", "e"]


def test_data_dependence_reads_only_the_holders_attributes_and_finds_the_same() -> None:
    from graphcost.passes import _datadep

    model = onnx.parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[4] x, bool c) => (float[?] y) {
      y = If(c) <then_branch = t () => (float[?] a) { nz = NonZero(x)  f = Flatten(nz)  a = Cast<to = 1>(f) },
                 else_branch = e () => (float[?] a) { a = Relu(x) }>
    }""")
    full = _datadep.analyze(model)
    narrowed = _datadep.analyze(model, holders=frozenset({"If"}))
    # NonZero's count is a run-time value: nz is guarded, f and a after it in the branch are tainted, and so is
    # the If's own output y, which returns a (the If reads only c, but its branch computes from nz)
    assert full == narrowed
    assert full.guarded == {"nz": "NonZero"} and full.tainted == {"nz", "f", "a", "y"}


def test_data_dependence_from_the_census_slots_finds_what_its_own_walk_finds() -> None:
    from graphcost.passes import _datadep

    model = onnx.parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2,6] x, int64[2] t) => (float[?,?] y, float[3,4] z) {
      r = Reshape(x, t)
      y = Relu(r)
      k = Constant<value = int64[2] {3, 4}>()
      z = Reshape(x, k)
    }""")
    census = shapes._census(model.graph)
    assert census.slots is not None and [(n.output[0], s) for n, s in census.slots] == [("r", ["t"]), ("z", ["k"])]
    own = _datadep.analyze(model, nested=False)
    given = _datadep.analyze(model, nested=False, candidates=census.slots)
    # r's target is the graph input t's values: r is guarded and y after it tainted; z's target is a constant
    assert own == given
    assert own.guarded == {"r": "Reshape"} and own.tainted == {"r", "y"}
