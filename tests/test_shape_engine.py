"""The shape engine: onnx's C++ inference first, onnx-shape-inference where tensors stay open, the
specialize pre-pass between rounds; formulas in the graph inputs' dim names, minted names deterministic,
weights never read, dim text never handed over unless it is a plain identifier."""

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
import onnx_ir
import onnx_shape_inference
import pytest
import sympy

import graphcost
from graphcost._dims import parse_dim, symbol
from graphcost.analysis import Analysis
from graphcost.load import load
from graphcost.passes import _engines, shapes

ROOT = Path(__file__).resolve().parent.parent
H = '<ir_version: 8, opset_import: ["" : 17]>'

# Conv stride 2 then nearest Resize ×2: onnx's C++ inference types the Conv but not the Resize.
STRIDED = H + """
g (float[batch,3,height,width] x, float[4,3,3,3] w) => (y) {
   c = Conv<strides = [2, 2], pads = [1, 1, 1, 1]>(x, w)
   roi = Constant<value = float[0] {}>()
   sc = Constant<value = float[4] {1.0, 1.0, 2.0, 2.0}>()
   y = Resize<mode = "nearest">(c, roi, sc) }"""

# STRIDED, then 2×2 blocks of channels spread into space: graphcost's sweep sizes c and y, and DepthToSpace on
# those dims is left to the symbolic engine (no rule of onnx's or graphcost's writes 4·floor(...)).
SPREAD = H + """
g (float[batch,3,height,width] x, float[4,3,3,3] w) => (z) {
   c = Conv<strides = [2, 2], pads = [1, 1, 1, 1]>(x, w)
   roi = Constant<value = float[0] {}>()
   sc = Constant<value = float[4] {1.0, 1.0, 2.0, 2.0}>()
   y = Resize<mode = "nearest">(c, roi, sc)
   z = DepthToSpace<blocksize = 2>(y) }"""

# NonZero's count is known only at run time: its dim is a minted name, carried into the Reshape.
NONZERO = H + """
g (float[N] x) => (y) {
   nz = NonZero(x)
   t = Constant<value = int64[1] {-1}>()
   y = Reshape(nz, t) }"""

# ORT's dynamic quantization: DynamicQuantizeLinear → MatMulInteger.
QUANTIZED = '<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>' + """
g (float[batch,seq,8] x, uint8[8,4] w) => (y) {
   q, s, z = DynamicQuantizeLinear(x)
   zw = Constant<value = uint8 {0}>()
   m = MatMulInteger(q, w, z, zw)
   f = Cast<to = 1>(m)
   y = Mul(f, s) }"""

# paddle2onnx's direction classifier: a `?` batch dim, Reshape target = Concat(Cast(Slice(Shape)), Cast(Constant)).
PADDLE_CLS = H + """
g (float[?,8,4,4] x, float[128,2] w) => (y) {
   s = Shape(x)
   st = Constant<value = int64[1] {0}>()
   en = Constant<value = int64[1] {1}>()
   b = Slice(s, st, en)
   b32 = Cast<to = 6>(b)
   k = Constant<value = int32[1] {-1}>()
   t32 = Concat<axis = 0>(b32, k)
   t = Cast<to = 7>(t32)
   r = Reshape(x, t)
   y = MatMul(r, w) }"""

# Swin-style window padding on a static input: the Pad amounts are computed from Shape, pad = (3 - W % 3) % 3.
WINDOW = H + """
g (float[1,5,5,2] x, float[2,4] w) => (y) {
   s = Shape(x)
   i = Constant<value = int64 {2}>()
   wd = Gather(s, i)
   ws = Constant<value = int64 {3}>()
   m1 = Mod(wd, ws)
   d = Sub(ws, m1)
   pr = Mod(d, ws)
   pr1 = Unsqueeze(pr, zero1)
   zero1 = Constant<value = int64[1] {0}>()
   zeros = Constant<value = int64[3] {0, 0, 0}>()
   z1 = Constant<value = int64[2] {0, 0}>()
   pads = Concat<axis = 0>(zeros, z1, pr1, pr1, z1)
   p = Pad(x, pads)
   y = MatMul(p, w) }"""


def _model(text: str) -> onnx.ModelProto:
    return onnx.parser.parse_model(text)


def _analyze(text: str, **kw: Any) -> graphcost.Report:
    return graphcost.analyze(_model(text), **kw)


def _shape(result: shapes.ShapeResult, name: str) -> tuple[Any, ...]:
    t = result.graph.tensor(name)
    assert t is not None and t.shape is not None, name
    return tuple(t.shape)


def _infer(text: str, tmp_path: Path, **kw: Any) -> shapes.ShapeResult:
    path = tmp_path / "m.onnx"
    onnx.save(_model(text), str(path))
    return shapes.infer_shapes(load(str(path)), **kw)


# ---------------------------------------------------------------------------- formulas in the input dims
def test_stride_formula_is_in_the_input_dims(tmp_path: Path) -> None:
    r = _infer(STRIDED, tmp_path)
    h, w = symbol("height"), symbol("width")
    conv_h = sympy.floor((h - 1) / 2) + 1  # (height + 2·pad − kernel) / stride + 1, floored
    conv_w = sympy.floor((w - 1) / 2) + 1
    assert _shape(r, "c") == (symbol("batch"), 4, conv_h, conv_w)
    assert _shape(r, "y") == (symbol("batch"), 4, 2 * conv_h, 2 * conv_w)  # Resize ×2: onnx writes no 2·floor(...)
    assert "graphcost-sweep" in r.engines and "onnx-shape-inference" not in r.engines  # graphcost's sweep sized it
    assert "onnxruntime-symbolic" not in r.engines
    spread = _infer(SPREAD, tmp_path)
    assert _shape(spread, "z") == (symbol("batch"), 1, 4 * conv_h, 4 * conv_w)  # 4 channels in 2×2 blocks
    assert "onnx-shape-inference" in spread.engines  # DepthToSpace is the engine's


def test_engine_text_parses_through_our_grammar() -> None:
    h = symbol("height")
    assert parse_dim("floor((height - 1)/2) + 1") == sympy.floor((h - 1) / 2) + 1
    assert parse_dim("floor(height/2 - 1/2) + 1") == sympy.floor((h - 1) / 2) + 1  # the engine's spelling


@pytest.mark.parametrize("spell", ["?", "", -1])
def test_anonymous_input_dims_stay_apart(spell: str | int) -> None:
    """``?`` (as older paddle2onnx stores an unnamed dim), an empty name and ``-1`` are each their own unknown,
    named after the input and axis: read as one shared name, ``?`` made batch, height and width one dim."""
    m = _model(STRIDED)
    dims = m.graph.input[0].type.tensor_type.shape.dim
    for i in (0, 2, 3):
        if isinstance(spell, int):
            dims[i].dim_value = spell
        else:
            dims[i].dim_param = spell
    r = graphcost.analyze(m, fusion=False, memory=False, batchnorm=False)
    n, h, w = sympy.symbols("unk__x_0 unk__x_2 unk__x_3")  # as the formula text reads back
    assert tuple(Analysis.of(m).input_dims) == ("unk__x_0", "unk__x_2", "unk__x_3")
    out_h, out_w = sympy.floor((h - 1) / 2) + 1, sympy.floor((w - 1) / 2) + 1  # (H + 2 − 3) / 2 + 1, floored
    macs = n * 4 * out_h * out_w * 3 * 3 * 3  # N·Cout·H'·W' outputs × Cin·kh·kw
    assert sympy.expand(sympy.sympify(r.totals.formulas["macs"]) - macs) == 0
    bound = graphcost.analyze(m, dims={"unk__x_0": 2, "unk__x_2": 8, "unk__x_3": 6}, fusion=False, memory=False,
                              batchnorm=False)
    assert bound.totals.macs == 2 * 4 * 4 * 3 * 27  # N=2 · Cout=4 · H'=4 · W'=3 · 27


def test_dim_text_outside_the_grammar_stays_a_symbol_inside_formulas(tmp_path: Path) -> None:
    """paddle2onnx 2.1 names dynamic dims ``DynamicDimension.0``...: the engine sees them renamed, and what it
    writes from them must come back as a formula in graphcost's symbol for that text, not as one opaque name for
    the whole expression (``floor__DynamicDimension_1__2___1_2____1``, which the PP-OCR detector's MACs were in)."""
    m = _model(SPREAD)
    dims = m.graph.input[0].type.tensor_type.shape.dim
    dims[0].dim_param, dims[2].dim_param, dims[3].dim_param = "DynamicDimension.0", "DynamicDimension.1", "?"
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    r = shapes.infer_shapes(load(str(path)))
    n, h, w = parse_dim("DynamicDimension.0"), parse_dim("DynamicDimension.1"), symbol("unk__x_3")
    assert (str(n), str(h)) == ("DynamicDimension_0", "DynamicDimension_1")  # the opaque symbols; ? is anonymous
    conv_h = sympy.floor((h - 1) / 2) + 1  # (height + 2·pad − kernel) / stride + 1, floored
    conv_w = sympy.floor((w - 1) / 2) + 1
    assert _shape(r, "y") == (n, 4, 2 * conv_h, 2 * conv_w)  # Resize ×2, typed by graphcost's sweep
    assert _shape(r, "z") == (n, 1, 4 * conv_h, 4 * conv_w)  # DepthToSpace, typed by the symbolic engine
    assert "onnx-shape-inference" in r.engines


@pytest.mark.parametrize("batch_dim", ["?", None], ids=["question-mark-name", "anonymous"])
def test_question_mark_dim_and_cast_reshape_target_resolve(tmp_path: Path, batch_dim: str | None) -> None:
    m = _model(PADDLE_CLS)
    if batch_dim is not None:
        m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = batch_dim  # what paddle2onnx writes
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    r = shapes.infer_shapes(load(str(path)))
    (batch,) = _shape(r, "x")[:1]
    assert _shape(r, "r") == (batch, 128)  # 8·4·4 = 128 features per row, the rows are x's batch
    assert _shape(r, "y") == (batch, 2)
    rep = graphcost.analyze(str(path))
    assert rep.totals.unknown_nodes == 0
    assert rep.totals.macs == 128 * 2  # one row at the default binding, 128 MACs per output


def test_window_padding_resolves_exactly_on_a_static_graph(tmp_path: Path) -> None:
    r = _infer(WINDOW, tmp_path)
    assert _shape(r, "p") == (1, 6, 6, 2)  # 5 + (3 − 5 mod 3) mod 3 = 6 on both padded axes
    assert _shape(r, "y") == (1, 6, 6, 4)
    rep = _analyze(WINDOW)
    assert rep.totals.macs == 6 * 6 * 2 * 4  # 36 rows of a 2→4 matmul
    assert not rep.totals.formulas  # a static graph has no symbolic dim left


def test_input_values_pass_through(tmp_path: Path) -> None:
    text = H + """
    g (float[N,6] x, int64[2] shape) => (y) {
       y = Reshape(x, shape) }"""
    open_ = _infer(text, tmp_path)
    assert any(not isinstance(d, int) and not str(d).startswith("N") for d in _shape(open_, "y"))
    given = _infer(text, tmp_path, input_values={"shape": np.array([3, 4], dtype=np.int64)})
    assert _shape(given, "y") == (3, 4)


# ---------------------------------------------------------------------------- shape data through Where, Equal, Div
# torch's legacy `cls.expand(batch, -1, -1)` (ViT's class token): the target is Where(Equal(t, -1), 1, t) with
# t = Concat(batch, -1, -1), and the -1 probe is ConstantOfShape(Shape(t)) · -1.
EXPAND_BATCH = H + """
g (float[batch,2,4] x, float[1,1,4] cls, float[4,8] w) => (y) {
   s = Shape(x)
   i0 = Constant<value = int64 {0}>()
   b = Gather(s, i0)
   ax = Constant<value = int64[1] {0}>()
   bu = Unsqueeze(b, ax)
   m1 = Constant<value = int64[1] {-1}>()
   t = Concat<axis = 0>(bu, m1, m1)
   n = Shape(t)
   ones = ConstantOfShape<value = int64[1] {1}>(n)
   neg = Constant<value = int64 {-1}>()
   probe = Mul(ones, neg)
   eq = Equal(t, probe)
   target = Where(eq, ones, t)
   e = Expand(cls, target)
   y = MatMul(e, w) }"""

# T5's relative-position buckets: a ConstantOfShape shaped like a tensor only the symbolic engine types (here a
# nearest Resize ×2 along seq, which onnx's C++ inference leaves open on symbolic dims).
FILL_LIKE = H + """
g (float[batch,seq,4] x, float[4,8] w) => (y) {
   roi = Constant<value = float[0] {}>()
   sc = Constant<value = float[3] {1.0, 2.0, 1.0}>()
   u = Resize<mode = "nearest">(x, roi, sc)
   s = Shape(u)
   z = ConstantOfShape<value = float[1] {0.0}>(s)
   y = MatMul(z, w) }"""

# The dynamo exporter's `samples // 10` in a Reshape target (wav2vec2's feature frames).
FLOOR_DIV = H + """
g (float[batch,samples] x, float[10,4] w) => (y) {
   s = Shape(x)
   st = Constant<value = int64[1] {1}>()
   en = Constant<value = int64[1] {2}>()
   n1 = Slice(s, st, en)
   n = Squeeze(n1)
   ten = Constant<value = int64 {10}>()
   q = Div(n, ten)
   ax = Constant<value = int64[1] {0}>()
   qu = Unsqueeze(q, ax)
   b1 = Slice(s, ax, st)
   k = Constant<value = int64[1] {10}>()
   t = Concat<axis = 0>(b1, qu, k)
   whole = Mul(qu, k)
   xs = Slice(x, ax, whole, st)
   r = Reshape(xs, t)
   y = MatMul(r, w) }"""
"""``x[:, :samples // 10 * 10].reshape(batch, samples // 10, 10)``: the columns that fill whole rows of 10, so the
model runs at any ``samples`` (at 95: 9 rows, the last 5 columns dropped)."""


def test_expand_to_batch_minus_one_keeps_the_batch_dim(tmp_path: Path) -> None:
    r = _infer(EXPAND_BATCH, tmp_path)
    batch = symbol("batch")
    assert _shape(r, "e") == (batch, 1, 4)  # Where picks 1 where t is -1, and batch (never -1) elsewhere
    rep = _analyze(EXPAND_BATCH, dims={"batch": 3})
    assert rep.totals.macs == 3 * 1 * 4 * 8  # batch · 1 row · K=4 · N=8
    assert sympy.sympify(rep.totals.formulas["macs"]) == 32 * sympy.Symbol("batch")


def test_constant_of_shape_takes_symbolic_dims(tmp_path: Path) -> None:
    r = _infer(FILL_LIKE, tmp_path)
    batch, seq = symbol("batch"), symbol("seq")
    assert _shape(r, "z") == (batch, 2 * seq, 4)
    rep = _analyze(FILL_LIKE, dims={"batch": 2, "seq": 5})
    assert rep.totals.macs == 2 * (2 * 5) * 4 * 8  # batch · 2·seq rows (Resize ×2) · K=4 · N=8
    assert sympy.sympify(rep.totals.formulas["macs"]) == 64 * sympy.Symbol("batch") * sympy.Symbol("seq")


def test_integer_division_of_a_dim_is_floor(tmp_path: Path) -> None:
    r = _infer(FLOOR_DIV, tmp_path)
    batch, samples = symbol("batch"), symbol("samples")
    assert _shape(r, "r") == (batch, sympy.floor(samples / 10), 10)
    rep = _analyze(FLOOR_DIV, dims={"batch": 2, "samples": 95})
    assert rep.totals.macs == 2 * (95 // 10) * 10 * 4  # batch · floor(samples/10) rows · K=10 · N=4
    formula = sympy.sympify(rep.totals.formulas["macs"])
    assert {s.name for s in formula.free_symbols} == {"batch", "samples"}


def test_equal_decides_only_what_holds_for_every_dim() -> None:
    from graphcost.passes import _osi_rules

    d = onnx_ir.SymbolicDim("batch")
    assert _osi_rules._equal_element(d, -1) == 0  # a dim is never negative
    assert _osi_rules._equal_element(d, 1) is None  # batch may be 1: undecided, so Where keeps the engine's answer
    assert _osi_rules._equal_element(d, onnx_ir.SymbolicDim("batch")) == 1
    assert _osi_rules._equal_element(3, 3) == 1 and _osi_rules._equal_element(3, -1) == 0
    fresh = onnx_ir.SymbolicDim("_d3")  # the engine's name for a value it could not decide: may be -1
    assert _osi_rules._equal_element(fresh, -1) is None
    assert _osi_rules._equal_element(onnx_ir.SymbolicDim("2*_d3 + batch"), -1) is None


def test_rules_hold_on_the_first_engine_call_of_a_process(tmp_path: Path) -> None:
    """The engine fills its registry on first use; the rules must be in place for that first call too."""
    import json

    path = tmp_path / "fill.onnx"
    onnx.save(_model(FILL_LIKE), str(path))
    run = subprocess.run([sys.executable, "-m", "graphcost", "analyze", str(path), "--format", "json"],
                         capture_output=True, cwd=ROOT, timeout=120)
    assert run.returncode == 0, run.stderr.decode()[-2000:]
    macs = sympy.sympify(json.loads(run.stdout)["totals"]["formulas"]["macs"])
    assert macs == 64 * sympy.Symbol("batch") * sympy.Symbol("seq")  # batch · 2·seq rows · K=4 · N=8


# An op no engine knows: its output stays open after every turn, and nothing about it depends on run-time values
# (a value-dependent dim such as NonZero's count no longer keeps the engine running at all).
UNKNOWN_OP = '<ir_version: 8, opset_import: ["" : 17, "com.example" : 1]>' + """
g (float[N] x) => (z) {
   y = com.example.Mystery(x)
   z = Relu(y) }"""


@pytest.mark.parametrize(("text", "runs"), [(SPREAD, [False]), (UNKNOWN_OP, [False, True]), (NONZERO, [])],
                         ids=["resolved-in-one-run", "open-after-the-turns", "only-value-dependent-dims-open"])
def test_engine_constraint_pass_runs_only_where_dims_stay_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              text: str, runs: list[bool]) -> None:
    seen: list[bool] = []
    real = _engines.symbolic_infer

    def spy(model: onnx.ModelProto, base_dir: str | None, *, constraints: bool = True) -> _engines.EngineRun:
        seen.append(constraints)
        return real(model, base_dir, constraints=constraints)

    monkeypatch.setattr(_engines, "symbolic_infer", spy)
    _infer(text, tmp_path)
    assert seen[:len(runs)] == runs and all(c == runs[-1] for c in seen[len(runs):])


def test_rules_leave_the_engine_registry_as_it_was() -> None:
    from onnx_shape_inference import _registry

    from graphcost.passes import _osi_rules

    before = {k: list(v) for k, v in _registry.registry._registrations.items()}
    with _osi_rules.installed():
        assert _registry.registry._registrations[("", "Where")] != before[("", "Where")]
    assert _registry.registry._registrations == before


# ---------------------------------------------------------------------------- deterministic minted names
def test_minted_names_come_from_tensor_and_axis(tmp_path: Path) -> None:
    r = _infer(NONZERO, tmp_path)
    nz = _shape(r, "nz")
    assert nz[0] == 1  # rank of x
    assert str(nz[1]) == "unk__nz_1"  # the count of non-zeros: named after its tensor and axis
    (y,) = _shape(r, "y")
    assert str(y) == "unk__y_0"  # downstream of a run-time value only onnx's inference speaks; named the same way
    for name, t in r.types.items():
        for d in t.tensor_type.shape.dim if t.HasField("tensor_type") else ():
            if d.HasField("dim_param"):
                assert not re.search(r"\b(?:_d|unk__)[0-9]+\b", d.dim_param), (name, d.dim_param)


def test_name_minted_dims_follows_graph_order() -> None:
    def typ(*dims: str | int) -> onnx.TypeProto:
        return onnx.helper.make_tensor_type_proto(onnx.TensorProto.FLOAT, list(dims))

    graph = _model(H + "g (float[_d0] x) => (y) { y = Identity(x) }").graph  # the model's own `_d0` is a name
    types = {"b": typ("2*_d7 + 1", "unk__3"), "a": typ("_d7", "_d0"), "z": typ("unk__3")}
    out = _engines.name_minted_dims(types, ["a", "b"], graph)
    dims = {k: [d.dim_param for d in v.tensor_type.shape.dim] for k, v in out.items()}
    assert dims == {"a": ["unk__a_0", "_d0"], "b": ["2*unk__a_0 + 1", "unk__b_1"], "z": ["unk__b_1"]}
    assert types["a"].tensor_type.shape.dim[0].dim_param == "_d7"  # the input table is not changed


@pytest.mark.parametrize("text", [NONZERO, QUANTIZED, STRIDED, SPREAD, PADDLE_CLS],
                         ids=["nonzero", "quantized", "strided", "spread", "paddle"])
def test_two_processes_give_the_same_bytes(tmp_path: Path, text: str) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_model(text), str(path))
    outs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        run = subprocess.run([sys.executable, "-m", "graphcost", "analyze", str(path), "--format", "json"],
                             capture_output=True, env=env, cwd=ROOT, timeout=120)
        assert run.returncode == 0, run.stderr.decode()[-2000:]
        outs.append(run.stdout)
    assert outs[0] == outs[1]
    assert not re.search(rb"\b(?:_d|unk__)[0-9]+\b", outs[0])  # no counter-minted name reaches the report


def test_quantized_chain_is_resolved() -> None:
    rep = _analyze(QUANTIZED, dims={"batch": 2, "seq": 3})
    assert rep.totals.unknown_nodes == 0
    assert rep.model.outputs[0].shape == ("batch", "seq", 4)


# ---------------------------------------------------------------------------- what the engine is handed
def test_engine_sees_only_plain_identifiers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    real = onnx_shape_inference.infer_symbolic_shapes

    def spy(model: onnx_ir.Model, **kw: Any) -> onnx_ir.Model:
        for v in (*model.graph.inputs, *model.graph.outputs):
            for d in v.shape.dims if v.shape is not None else ():
                if isinstance(d, onnx_ir.SymbolicDim) and d.value is not None:
                    seen.append(d.value)
        return real(model, **kw)

    monkeypatch.setattr(onnx_shape_inference, "infer_symbolic_shapes", spy)
    m = _model(SPREAD)
    dims = m.graph.input[0].type.tensor_type.shape.dim
    dims[0].dim_param, dims[2].dim_param = "?", "height+1"  # paddle2onnx's `?`, and an expression
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    r = shapes.infer_shapes(load(str(path)))
    assert seen and all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", s) for s in seen), seen
    h1 = symbol("height") + 1
    assert _shape(r, "c")[2] == sympy.floor(h1 / 2 - sympy.Rational(1, 2)) + 1  # the original text is back
    assert str(_shape(r, "c")[0]) != "gc_dim0"


def test_static_graph_never_reaches_the_symbolic_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kw: Any) -> Any:
        raise AssertionError("the symbolic engine ran on a static graph")

    monkeypatch.setattr(_engines, "symbolic_infer", refuse)
    r = _infer(H + """
    g (float[2,8] x, float[8,4] w) => (y) { m = MatMul(x, w)
       y = Relu(m) }""", tmp_path)
    assert r.engines == ("onnx",)
    assert _shape(r, "y") == (2, 4)


def test_external_payloads_are_never_read_lazily(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scanner leaves big payloads as references into the file; onnx_ir must not resolve them."""
    text = H + """
    g (float[N,300] x) => (y) {
       y = Add(x, b) }"""
    m = _model(text)
    b = onnx.numpy_helper.from_array(np.ones(300, np.float32), "b")  # 1.2 KB: stripped by the scanner
    m.graph.initializer.append(b)
    m.graph.node.append(onnx.helper.make_node("Constant", [], ["k"], value=onnx.numpy_helper.from_array(
        np.arange(300, dtype=np.int64), "k")))  # a big 1-d int64 constant: read only through the scanner
    m.graph.node.append(onnx.helper.make_node("Shape", ["y"], ["s"]))
    m.graph.output.append(onnx.helper.make_tensor_value_info("s", onnx.TensorProto.INT64, None))
    m.graph.output.append(onnx.helper.make_tensor_value_info("k", onnx.TensorProto.INT64, None))
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))

    def refuse(self: Any, *args: Any, **kw: Any) -> Any:
        raise AssertionError(f"onnx_ir read external tensor {self.name!r}")

    monkeypatch.setattr(onnx_ir.ExternalTensor, "numpy", refuse)
    monkeypatch.setattr(onnx_ir.ExternalTensor, "tobytes", refuse)
    monkeypatch.chdir(tmp_path)  # where a lazy read would resolve the file's own basename
    model = load(str(path))
    assert any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.proto.graph.initializer)
    run = _engines.symbolic_infer(model.proto, model.base_dir)
    assert run.note is None
    assert [d.dim_value for d in run.types["s"].tensor_type.shape.dim] == [2]
    r = shapes.infer_shapes(model)
    assert _shape(r, "y") == (symbol("N"), 300)


def test_engine_failure_is_one_sentence_and_keeps_onnx_shapes(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(model: onnx_ir.Model, **kw: Any) -> onnx_ir.Model:
        raise onnx_shape_inference.ShapeInferenceError(node_name="n1", op_type="Resize", domain="",
                                                       message="broken\nsecond line")

    monkeypatch.setattr(onnx_shape_inference, "infer_symbolic_shapes", boom)
    r = _infer(SPREAD, tmp_path)
    assert _shape(r, "c")[1] == 4  # onnx's own inference still typed the Conv
    notes = [w.message for w in r.warnings if "onnx-shape-inference" in w.message]
    assert notes and all("\n" not in n and "'n1'" in n for n in notes), notes


_ANALYZE_ALL = """
import sys
from graphcost import cli
for path in sys.argv[1:]:
    code = cli.main(["analyze", path, "--format", "json"])
    print(f"== {path} {code}", flush=True)
"""


def test_shipped_models_give_the_same_bytes_in_two_processes() -> None:
    paths = sorted(str(p) for p in (*(ROOT / "models").glob("*.onnx"), *(ROOT / "models" / "zoo").glob("*.onnx")))
    assert paths
    outs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        run = subprocess.run([sys.executable, "-c", _ANALYZE_ALL, *paths], capture_output=True, env=env, cwd=ROOT,
                             timeout=600)
        assert run.returncode == 0, run.stderr.decode()[-2000:]
        outs.append(run.stdout)
    assert outs[0] == outs[1]
    assert outs[0].count(b"== ") == len(paths) and b" 0\n" in outs[0]
