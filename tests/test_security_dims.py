"""A dim_param is text from the model file: it is never evaluated, and any dim costs bounded work.

Each exploit below ran code under the old ``sympy.sympify`` parse (the subclass walk reaches
``open`` and creates a marker file); each size bomb hung ``analyze`` or ate gigabytes. Now every one
parses to an opaque dim name (or is refused in one line) and the marker never appears.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.parser
import pytest
import sympy

import graphcost
from graphcost import _dimexpr
from graphcost._dims import as_expr, evaluate, expands_within, parse_dim, symbol, to_text
from graphcost.passes import _engines, shapes
from tests.clihelp import run_cli

MARKER = "pwned"
"""A relative name: each test runs with the current directory in its own tmp_path."""

_SUBCLASS_WALK = ("[c for c in ().__class__.__base__.__subclasses__() if c.__name__=='_wrap_close'][0]"
                  ".__init__.__globals__['__builtins__']['open']")
EXPLOITS = [
    f"{_SUBCLASS_WALK}('{MARKER}','w')",  # created the marker under the old parse (no bare names needed)
    f"{_SUBCLASS_WALK}('{MARKER}','w') and N",
    f"__import__('builtins').open('{MARKER}','w')",
    f"open('{MARKER}','w')",
    f"(lambda: open('{MARKER}','w'))()",
    f"floor(open('{MARKER}','w'))",
    "Max(N, ().__class__)",
    f"N.__class__.__init__.__globals__['__builtins__']['open']('{MARKER}','w')",
]

BOMBS = {
    "tower": "9**9**9",  # chained powers: a number with 370 million digits
    "tall_tower": "2**2**40",
    "multinomial": "(a+b+c+d+e+f+g+h+i+j)**40",  # expands to C(49, 9) ≈ 2e9 terms
    "long": "N" + "+N" * 50_000,  # a 100k-character dim
    "deep": "(" * 10_000 + "N" + ")" * 10_000,  # a 10k-deep parenthesis nest
    "big_literal": "9" * 5000,  # past Python's int-from-text limit
    "wide_product": "*".join(f"(a{i}+b{i})" for i in range(20)),  # 2**20 terms once expanded
}

# Graph: x[P, 4] → Shape → Gather(0) → Range(0, n, 1) → Cast → z[?], and x as [1, 4, P, 1] through DepthToSpace
# → w[1, 1, 2P, 2]. onnx sizes neither; graphcost's sweep sizes z (z[P]) and only the symbolic engine
# (onnx-shape-inference) w, so every inference engine sees the dim text P.
_RANGE_MODEL = '''<ir_version: 8, opset_import: ["" : 17]>
g (float[N, 4] x) => (float[M] z, float[1, 1, K, 2] w) {
  xt = Transpose<perm = [1, 0]>(x)
  ax = Constant<value = int64[2] {0, 3}>()
  x4 = Unsqueeze(xt, ax)
  w = DepthToSpace<blocksize = 2>(x4)
  s = Shape(x)
  i0 = Constant<value = int64 {0}>()
  n = Gather(s, i0)
  zero = Constant<value = int64 {0}>()
  one = Constant<value = int64 {1}>()
  r = Range(zero, n, one)
  z = Cast<to=1>(r)
}'''


def _model(dim_text: str) -> onnx.ModelProto:
    m = onnx.parser.parse_model(_RANGE_MODEL)
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = dim_text
    return m


def _save(tmp_path: Path, dim_text: str, name: str = "m.onnx") -> Path:
    path = tmp_path / name
    onnx.save(_model(dim_text), str(path))
    return path


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    parse_dim.cache_clear()  # a cached parse would hide the parser from the test
    return tmp_path


def _opaque(value: Any) -> bool:
    return isinstance(value, sympy.Symbol) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(value)) is not None


# ---------------------------------------------------------------------------- never evaluated
@pytest.mark.parametrize("text", EXPLOITS)
def test_parse_dim_never_evaluates(in_tmp: Path, text: str) -> None:
    value = parse_dim(text)
    assert not (in_tmp / MARKER).exists()
    assert _opaque(value)  # outside the grammar: one opaque dim name, an identifier


def test_analyze_api_never_evaluates(in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = _engines.symbolic_infer

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(_engines, "symbolic_infer", counted)
    report = graphcost.analyze(str(_save(in_tmp, EXPLOITS[0])))
    assert calls  # the symbolic engine's hand-off ran (onnx cannot size z), so it is covered too
    assert not (in_tmp / MARKER).exists()
    assert report.totals is not None


@pytest.mark.parametrize("args", [("analyze", "--format", "json"), ("analyze", "--format", "csv"),
                                  ("analyze", "--format", "html"), ("analyze", "--format", "text"),
                                  ("fusion",), ("diff",)])
def test_cli_never_evaluates(in_tmp: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...]) -> None:
    path = str(_save(in_tmp, EXPLOITS[0]))
    models = (path, str(_save(in_tmp, EXPLOITS[2], "b.onnx"))) if args[0] == "diff" else (path,)
    code, _, err = run_cli(capsys, args[0], *models, *args[1:])
    assert not (in_tmp / MARKER).exists()
    assert code == 0 or (code == 2 and len(err.strip().splitlines()) == 1), err


def test_the_symbolic_engine_sees_only_plain_identifiers(in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import onnx_ir
    import onnx_shape_inference

    seen: list[str] = []
    real = onnx_shape_inference.infer_symbolic_shapes

    def spy(model: onnx_ir.Model, **kw: Any) -> onnx_ir.Model:
        for v in (*model.graph.inputs, *model.graph.outputs):
            for d in v.shape.dims if v.shape is not None else ():
                if isinstance(d, onnx_ir.SymbolicDim) and d.value is not None:
                    seen.append(d.value)
        return real(model, **kw)

    monkeypatch.setattr(onnx_shape_inference, "infer_symbolic_shapes", spy)
    text = EXPLOITS[1]
    r = shapes.infer_shapes(graphcost.load(str(_save(in_tmp, text))))
    assert seen and all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", s) for s in seen), seen
    assert not (in_tmp / MARKER).exists()
    # the engine sized z from the renamed dim; the original text comes back, as one opaque dim of our grammar
    z = r.graph.tensor("z")
    assert z is not None and z.shape == (parse_dim(text),)


def test_engine_rename_round_trip() -> None:
    m = onnx.parser.parse_model(_RANGE_MODEL)
    dims = m.graph.input[0].type.tensor_type.shape.dim
    dims[0].dim_param, dims[1].dim_param = "batch*seq", "gc_dim0"  # an identifier that takes the prefix
    renamed = _engines.plain_dim_names(m)
    assert dims[1].dim_param == "gc_dim0"  # plain identifiers are handed over as they are
    (new,) = renamed
    assert dims[0].dim_param == new and not new.startswith("gc_dim0") and re.fullmatch(r"gc_dim_+0", new), new
    out = m.graph.output[0].type.tensor_type.shape
    out.dim.add().dim_param = f"2*{new}"
    out.dim.add().dim_param = new
    _engines.restore_dim_names(m, renamed)
    assert [d.dim_param for d in out.dim] == ["M", "2*(batch*seq)", "batch*seq"]
    batch, seq = symbol("batch"), symbol("seq")
    assert parse_dim(out.dim[1].dim_param) == 2 * batch * seq  # the same expression the engine's own text gave


# ---------------------------------------------------------------------------- bounded work
@pytest.mark.parametrize("name", sorted(BOMBS))
def test_dim_bombs_parse_to_opaque_names(name: str) -> None:
    value = parse_dim(BOMBS[name])
    assert _opaque(value)
    assert len(str(value)) <= 2 * _dimexpr.MAX_TEXT  # the name is bounded too
    assert parse_dim(BOMBS[name]) == value  # and deterministic


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_dim_bombs_analyze_finishes(tmp_path: Path, name: str) -> None:
    path = _save(tmp_path, BOMBS[name])
    # The timeout is a safety net against a hang, far above the sub-second run; the test asserts the outcome.
    proc = subprocess.run([sys.executable, "-m", "graphcost", "analyze", str(path), "--format", "json"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert proc.returncode in (0, 2), proc.stderr[-2000:]
    assert len(proc.stderr.strip().splitlines()) <= 1, proc.stderr[-2000:]


def test_formula_of_many_wide_dims_is_printed_unexpanded() -> None:
    # Each dim is small, but a count multiplies them: 12 two-term factors expand to 4096 terms + 1.
    product = sympy.Integer(1)
    for i in range(13):
        product *= parse_dim(f"a{i} + b{i}")
    assert not expands_within(product, 4096)
    assert to_text(product) == str(product)  # exact, only factored
    assert expands_within(parse_dim("(a + b)*(c + d)"), 4)
    assert to_text(parse_dim("(a + b)*(c + d)")) == "a*c + a*d + b*c + b*d"


# ---------------------------------------------------------------------------- the grammar
def test_ort_style_expressions_parse_as_before() -> None:
    H, N, a, b = (symbol(s) for s in ("H", "N", "a", "b"))
    half = sympy.Rational(1, 2)
    assert parse_dim("floor(H/2 - 1/2) + 1") == sympy.floor(H * half - half) + 1  # Conv/Pool output size
    assert parse_dim("floor((H + 2*1 - 3)/2) + 1") == sympy.floor(H * half - half) + 1
    assert parse_dim("ceiling(N/2)") == sympy.ceiling(N * half)
    assert parse_dim("ceil(N/2)") == sympy.ceiling(N * half)
    assert parse_dim("Max(0, N - 1)") == sympy.Max(0, N - 1)
    assert parse_dim("Min(N, 512)") == sympy.Min(N, 512)
    assert parse_dim("max(a, b)") == sympy.Max(a, b)  # what sympify's namespace also meant by max
    assert parse_dim("Mod(N, 2)") == sympy.Mod(N, 2)
    assert parse_dim("a % b") == sympy.Mod(a, b)
    assert parse_dim("a // b") == sympy.floor(a / b)
    assert parse_dim("2*a*b") == 2 * a * b
    assert parse_dim("-N + 5") == 5 - N
    assert parse_dim("N**2") == parse_dim("N^2") == N**2
    assert parse_dim("-2**2") == -4  # power binds tighter than unary minus, as in Python
    assert parse_dim("floor(0.5*N)") == sympy.floor(sympy.Float("0.5") * N)  # Resize with a float scale
    assert parse_dim(" 12 ") == 12 and parse_dim("-5") == -5
    assert parse_dim("batch") == symbol("batch")
    assert parse_dim("N**8") == N**8
    # Ten stride-2 Convs, as ORT writes H after them: nested ten deep, well inside the limits.
    h = H
    text = "H"
    for _ in range(10):
        text = f"floor({text}/2 - 3/2)"
        h = sympy.floor(h / 2 - sympy.Rational(3, 2))
    assert parse_dim(text) == h


@pytest.mark.parametrize("text", ["N**9", "N**a", "N**-1", "a b", "N!", "f(N)", "Mod(N)", "floor(a, b)",
                                  "N/0", "Mod(N, 0)", "(N", "N)", "", "²", "2N", "9" * 20 + "*N",
                                  "(" * 100 + "N" + ")" * 100, "N" + "+N" * 300, "x.y", "'N'", "N if N else 1", "[N]"])
def test_outside_the_grammar_is_one_opaque_name(text: str) -> None:
    value = parse_dim(text)
    assert _opaque(value)
    assert parse_dim(text) == value


def test_long_opaque_names_stay_distinct() -> None:
    a, b = "x" * 2000 + "a", "x" * 2000 + "b"  # over MAX_TEXT: named by a prefix and a hash
    assert parse_dim(a) != parse_dim(b)


def test_as_expr_refuses_text() -> None:
    with pytest.raises(TypeError):
        as_expr("N + 1")
    with pytest.raises(TypeError):
        as_expr(b"N")
    assert as_expr(3) == sympy.Integer(3) and as_expr(np.int64(3)) == 3
    assert as_expr(symbol("N")) is symbol("N")
    assert as_expr(0.5) == sympy.Float(0.5)


def test_evaluate_binds_without_text() -> None:
    N = symbol("N")
    assert evaluate(sympy.floor(N / 2) + 1, {"N": 9}) == 5
    assert evaluate(N, {"N": np.int64(7)}) == 7  # type: ignore[dict-item]  # numpy ints from callers
    with pytest.raises(TypeError):
        evaluate(N, {"N": "__import__('os')"})  # type: ignore[dict-item]


def test_a_formula_longer_than_any_dim_reads_back_exactly() -> None:
    """``totals.formulas`` of a whole model run past the dim limits (a dynamic-size ResNet-50's MACs: 1,035
    characters; SSD300's bytes: hundreds of terms). ``parse_formula`` reads them by the same grammar; a dim of
    that length from a model file stays one opaque symbol."""
    from graphcost._dims import parse_formula

    h, w = symbol("height"), symbol("width")
    total = sympy.Add(*(sympy.Integer(1000 + k) * sympy.floor(h / (k + 2)) * sympy.ceiling(w / (k + 3))
                        for k in range(300)))
    text = to_text(total)
    assert len(text) > 10_000
    assert parse_formula(text) == total
    assert parse_dim(text) != total and len(parse_dim(text).free_symbols) == 1  # as a dim: one opaque name
    with pytest.raises(ValueError, match="not a formula"):
        parse_formula("__import__('os').system('true')")
