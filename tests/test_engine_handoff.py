"""What the shape pass hands the symbolic engine, and when it hands nothing: the speed paths of issue 10.

Each test checks behaviour (which model the engine sees, how often it runs, that the answer is the
same), never time."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import onnx
import onnx.parser
import pytest
import sympy

from graphcost import _dimeval, _sym
from graphcost._dims import evaluate, parse_dim, symbol
from graphcost.load import load
from graphcost.passes import _engines, shapes

H = '<ir_version: 8, opset_import: ["" : 17, "com.example" : 1]>'

# A static model where one value stays shapeless (an op no engine knows): the engine runs once and
# writes no symbolic dim, so its constraint pass (which rewrites symbolic dims only) has nothing to do.
STATIC_UNKNOWN = H + """
g (float[2,8] x) => (z) {
   y = com.example.Mystery(x)
   z = Relu(y) }"""

# The If reads a value-dependent count (NonZero), so it leaves the model handed to the engine with the
# value-dependent nodes; the shapeless value inside its branch is then nowhere in that model.
OPEN_ONLY_BEHIND_VALUES = H + """
g (float[4] x) => (z) {
   nz = NonZero(x)
   k = Size(nz)
   zero = Constant<value = int64 {0}>()
   c = Greater(k, zero)
   z = If(c) <then_branch = t () => (float[4] a) { a = com.example.Mystery(x) },
              else_branch = e () => (float[4] b) { b = Identity(x) }> }"""

# A large static part that is resolved (p: ten Relus on u) beside a symbolic part neither onnx nor graphcost's
# own sweep can size: DepthToSpace doubles N (no rule but the engine's writes 2·N), and the Reshape target is
# computed from Shape(x) with a -1 that needs x2's size.
CONE = '<ir_version: 8, opset_import: ["" : 17]>' + """
g (float[1,8,N,2] x, float[4,4] u) => (r, p) {
   x2 = DepthToSpace<blocksize = 2>(x)
   s = Shape(x)
   i2 = Constant<value = int64[1] {2}>()
   n = Gather(s, i2)
   two = Constant<value = int64[1] {2}>()
   m = Mul(n, two)
   minus = Constant<value = int64[1] {-1}>()
   t = Concat<axis = 0>(m, two, minus)
   r = Reshape(x2, t)
   p1 = Relu(u)
   p2 = Relu(p1)
   p3 = Relu(p2)
   p4 = Relu(p3)
   p5 = Relu(p4)
   p6 = Relu(p5)
   p7 = Relu(p6)
   p8 = Relu(p7)
   p9 = Relu(p8)
   p = Relu(p9) }"""


def _infer(text: str, tmp_path: Path) -> shapes.ShapeResult:
    path = tmp_path / "m.onnx"
    onnx.save(onnx.parser.parse_model(text), str(path))
    return shapes.infer_shapes(load(str(path)))


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[tuple[onnx.ModelProto, bool]]:
    seen: list[tuple[onnx.ModelProto, bool]] = []
    real = _engines.symbolic_infer

    def spy(model: onnx.ModelProto, base_dir: str | None, *, constraints: bool = True) -> _engines.EngineRun:
        seen.append((model, constraints))
        return real(model, base_dir, constraints=constraints)

    monkeypatch.setattr(_engines, "symbolic_infer", spy)
    return seen


def _dims_of(r: shapes.ShapeResult, name: str) -> list[Any]:
    return [d.dim_value if d.HasField("dim_value") else d.dim_param
            for d in r.types[name].tensor_type.shape.dim]


# ---------------------------------------------------------------------------- how often the engine runs
def test_no_constraint_pass_after_a_run_without_symbolic_dims(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _spy(monkeypatch)
    r = _infer(STATIC_UNKNOWN, tmp_path)
    assert [c for _, c in seen] == [False]  # one run; before, a second with the constraint pass typed nothing more
    y = r.types.get("y")
    assert y is None or not y.tensor_type.HasField("shape")  # still open: nothing was lost by skipping it


def test_engine_not_run_when_open_values_sit_behind_value_dependent_nodes(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _spy(monkeypatch)
    r = _infer(OPEN_ONLY_BEHIND_VALUES, tmp_path)
    assert seen == []  # before: two whole-model runs, and the model they got did not hold the open value
    assert "a" in r.types  # the value keeps onnx's type (element type float, no shape)


# ---------------------------------------------------------------------------- what the engine is handed
def test_engine_sees_only_the_cone_of_the_open_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _spy(monkeypatch)
    r = _infer(CONE, tmp_path)
    handed = seen[0][0]
    ops = [n.op_type for n in handed.graph.node]
    assert "Relu" not in ops  # the resolved static part stays behind
    assert {"DepthToSpace", "Concat", "Reshape", "Shape"} <= set(ops)  # x2; t; r; the target's source
    n = symbol("N")
    assert [parse_dim(d) if isinstance(d, str) else d for d in _dims_of(r, "x2")] == [1, 2, 2 * n, 4]  # 2×2 blocks
    # target (2N, 2, -1): the -1 is 16·N elements over 2N·2
    rows, two, last = (parse_dim(d) if isinstance(d, str) else d for d in _dims_of(r, "r"))
    assert (rows, two) == (2 * n, 2)
    assert all(evaluate(last, {"N": k}) == 4 for k in (1, 7, 1000))
    assert _dims_of(r, "p") == [4, 4]  # Relu keeps u's shape


def test_cone_gives_the_types_the_whole_model_gives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cut = _infer(CONE, tmp_path).types
    monkeypatch.setattr(_engines, "CONE_MOST", 0.0)  # every cone is "most of the model": the whole model is handed over
    seen = _spy(monkeypatch)
    whole = _infer(CONE, tmp_path).types
    nodes = len(onnx.parser.parse_model(CONE).graph.node)
    assert seen and all(len(m.graph.node) == nodes for m, _ in seen)  # the whole model went to the engine
    assert {k: v.SerializeToString() for k, v in cut.items()} == {k: v.SerializeToString() for k, v in whole.items()}


def test_cone_keeps_producers_of_small_values_and_cuts_at_large_resolved_ones() -> None:
    model = onnx.parser.parse_model(CONE)
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    types = {vi.name: vi.type for vi in (*inferred.graph.input, *inferred.graph.value_info)}
    types.pop("x2")  # left open, as onnx leaves 2·N
    cone = _engines.open_cone(model, types, ["x2"], frozenset({"N"}))
    assert cone is not None
    assert [n.op_type for n in cone.graph.node] == ["DepthToSpace"]  # x2 reads x, a graph input
    assert [vi.name for vi in cone.graph.input] == ["x"]
    small = _engines.open_cone(model, types, ["r"], frozenset({"N"}))  # r reads the small target t: its chain comes too
    assert small is not None and {"Shape", "Gather", "Mul"} <= {n.op_type for n in small.graph.node}


# ---------------------------------------------------------------------------- sympy text and values
def test_memoized_str_writes_what_str_writes() -> None:
    h, w, b = symbol("height"), symbol("width"), symbol("batch")
    exprs = [sympy.floor(sympy.floor((h - 1) / 2) / 2) + 1, 21 * sympy.floor(h / 8) * sympy.floor(w / 8) + 3 * b,
             sympy.Max(h, w - 3) * sympy.Min(b, 4), sympy.Mod(h * w, 7) - sympy.ceiling(b / 3), (h + w) ** 2 / 3,
             sympy.Float(0.5) * h, -h + 2 * w]
    want = [str(e) for e in exprs]
    from sympy.core import _print_helpers

    original = _print_helpers.Printable.__dict__["__str__"]
    with _sym.memoized_str():
        assert _print_helpers.Printable.__dict__["__str__"] is not original
        assert [str(e) for e in exprs] == want
        assert [str(e) for e in exprs] == want  # the second time from the memo
    assert _print_helpers.Printable.__dict__["__str__"] is original  # put back


def test_evaluate_exact_path_matches_sympy() -> None:
    texts = ["floor(floor(floor(height/2 - 1/2)/2)/2)*21 + 3", "Max(a, b - 3)*floor(a/7)",
             "Mod(a*b + 3, 7) - ceiling(b/3)", "floor((a - 1)/2) + 1", "(a + b)**2 - Min(a, 4*b)", "a*b/3",
             "floor(a/3)**3 - a"]
    for text in texts:
        e = parse_dim(text)
        for a in range(0, 13):
            for b in range(1, 6):
                binding = {"a": a, "b": b, "height": 7 * a + b}
                subs = {s: sympy.Integer(binding[str(s)]) for s in e.free_symbols}
                slow = sympy.sympify(e).xreplace(subs)
                want = int(slow) if slow.is_Integer else float(slow)
                got = evaluate(e, binding)
                assert got == want and type(got) is type(want), (text, binding)


def test_evaluate_exact_path_closed_form() -> None:
    h = symbol("height")
    out = sympy.floor(sympy.floor(sympy.floor(h / 2 - sympy.Rational(1, 2)) / 2) / 2)  # three stride-2 halvings
    # floor(640/2 - 1/2) = 319, floor(319/2) = 159, floor(159/2) = 79
    assert evaluate(21 * out + 3, {"height": 640}) == 21 * 79 + 3
    assert _dimeval.exact(out, {"height": 640}, {}) == 79  # the exact walk itself
    assert evaluate(h / 3, {"height": 4}) == float(Fraction(4, 3))  # not whole: sympy's float, as before
