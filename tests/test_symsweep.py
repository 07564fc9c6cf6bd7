"""graphcost's symbolic sweep (passes/_symsweep.py, passes/_symvalues.py): the shapes onnx's C++ inference
leaves open in symbolic dims, stated in the input dims without onnx-shape-inference.

Each graph is the pattern a real exporter writes (HF attention-head Reshape, rotate_half Slice, position-id
Range, the Where(Equal(shape, -1)) fix-up before an Expand); the expected dims are read off the graph.
"""

from __future__ import annotations

import math

import onnx
import onnx.helper as h
import onnx.parser
import pytest
import sympy
from onnx import TensorProto as T

from graphcost import analyze
from graphcost._dims import parse_dim, symbol
from graphcost.load import Model
from graphcost.passes import _symvalues, shapes


def _dims(result: shapes.ShapeResult, name: str) -> list[int | str]:
    t = result.types[name].tensor_type.shape.dim
    return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in t]


def _infer(text: str) -> shapes.ShapeResult:
    return shapes.infer_shapes(Model(onnx.parser.parse_model(text), None, None))


HEADS = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[batch, seq, 64] x, float[16, 8] w) => (float[?, ?, ?, ?] y, float[?, ?, ?, ?] half) {
  s = Shape(x)
  i0 = Constant<value = int64 {0}>()
  i1 = Constant<value = int64 {1}>()
  b = Gather<axis = 0>(s, i0)
  n = Gather<axis = 0>(s, i1)
  ax = Constant<value = int64[1] {0}>()
  b1 = Unsqueeze(b, ax)
  n1 = Unsqueeze(n, ax)
  minus = Constant<value = int64[1] {-1}>()
  hd = Constant<value = int64[1] {16}>()
  target = Concat<axis = 0>(b1, n1, minus, hd)
  r = Reshape(x, target)
  q = Transpose<perm = [0, 2, 1, 3]>(r)
  y = MatMul(q, w)
  sq = Shape(q)
  last = Constant<value = int64 {-1}>()
  d = Gather<axis = 0>(sq, last)
  two = Constant<value = int64 {2}>()
  mid = Div(d, two)
  mid1 = Unsqueeze(mid, ax)
  zero = Constant<value = int64[1] {0}>()
  big = Constant<value = int64[1] {9223372036854775807}>()
  lastax = Constant<value = int64[1] {-1}>()
  x1 = Slice(q, zero, mid1, lastax)
  x2 = Slice(q, mid1, big, lastax)
  nx2 = Neg(x2)
  half = Concat<axis = -1>(nx2, x1)
}
"""


def test_attention_heads_and_rotate_half_resolve_without_the_engine() -> None:
    result = _infer(HEADS)
    assert "onnx-shape-inference" not in result.engines and "graphcost-sweep" in result.engines
    # the -1 is 64*batch*seq / (batch*seq*16) = 4 heads
    assert _dims(result, "r") == ["batch", "seq", 4, 16]
    assert _dims(result, "q") == ["batch", 4, "seq", 16]
    assert _dims(result, "y") == ["batch", 4, "seq", 8]
    # rotate_half: the last dim 16 is static here, so each half is 8 and the Concat 16
    assert _dims(result, "x1") == ["batch", 4, "seq", 8]
    assert _dims(result, "half") == ["batch", 4, "seq", 16]


def test_a_symbolic_last_dim_halves_in_floor_division() -> None:
    result = _infer("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[batch, d] x) => (float[?, ?] y) {
      s = Shape(x)
      last = Constant<value = int64 {-1}>()
      n = Gather<axis = 0>(s, last)
      two = Constant<value = int64 {2}>()
      mid = Div(n, two)
      ax = Constant<value = int64[1] {0}>()
      mid1 = Unsqueeze(mid, ax)
      zero = Constant<value = int64[1] {0}>()
      big = Constant<value = int64[1] {9223372036854775807}>()
      one = Constant<value = int64[1] {1}>()
      x1 = Slice(x, zero, mid1, one)
      x2 = Slice(x, mid1, big, one)
      y = Concat<axis = 1>(x2, x1)
    }
    """)
    assert _dims(result, "x1") == ["batch", "floor(d/2)"]  # x[:, :d // 2]
    assert _dims(result, "x2") == ["batch", "d - floor(d/2)"]  # x[:, d // 2:]: the odd entry goes here
    assert _dims(result, "y") == ["batch", "d"]


def test_position_ids_and_the_expand_fix_up_resolve() -> None:
    result = _infer("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (int64[batch, seq] ids, float[batch, 1, 1, seq] m) => (float[?, ?, ?, ?] y, int64[?, ?] pos) {
      s = Shape(ids)
      i0 = Constant<value = int64 {0}>()
      i1 = Constant<value = int64 {1}>()
      n = Gather<axis = 0>(s, i1)
      b = Gather<axis = 0>(s, i0)
      one = Constant<value = int64 {1}>()
      r = Range(i0, n, one)
      ax = Constant<value = int64[1] {0}>()
      pos = Unsqueeze(r, ax)
      b1 = Unsqueeze(b, ax)
      n1 = Unsqueeze(n, ax)
      o1 = Constant<value = int64[1] {1}>()
      shape = Concat<axis = 0>(b1, o1, n1, n1)
      minus = Constant<value = int64[4] {-1, -1, -1, -1}>()
      is_minus = Equal(shape, minus)
      ones = Constant<value = int64[4] {1, 1, 1, 1}>()
      fixed = Where(is_minus, ones, shape)
      y = Expand(m, fixed)
    }
    """)
    assert "onnx-shape-inference" not in result.engines
    assert _dims(result, "r") == ["seq"]  # Range(0, seq, 1)
    assert _dims(result, "pos") == [1, "seq"]
    # a dim is never -1, so Where keeps [batch, 1, seq, seq]; Expand broadcasts m's [batch, 1, 1, seq] to it
    assert _dims(result, "y") == ["batch", 1, "seq", "seq"]


def test_the_resolved_shapes_price_the_nodes_in_the_input_dims() -> None:
    report = analyze(onnx.parser.parse_model(HEADS), dims={"batch": 2, "seq": 5}, fusion=False, memory=False,
                     batchnorm=False)
    matmul = next(n for n in report.nodes if n.op_type == "MatMul")
    assert matmul.macs == 2 * 4 * 5 * 16 * 8  # batch * heads * seq rows, 16 deep, 8 wide
    assert matmul.flops == 2 * matmul.macs  # one MAC is 2 FLOPs
    assert report.totals.unknown_nodes == 0


def test_two_different_symbols_are_not_broadcast_by_guess() -> None:
    result = _infer("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[a, 3] x, float[c, 3] z) => (float[?, ?] y) {
      sz = Shape(z)
      y = Expand(x, sz)
    }
    """)
    # a against c: either may be 1 at run time, so the sweep states nothing for axis 0 (another engine may)
    assert "graphcost-sweep" not in result.engines


@pytest.mark.parametrize(("x", "y", "want"), [(7, 2, 3), (-7, 2, -3), (7, -2, -3), (6, 3, 2)])
def test_integer_div_truncates_as_onnx_says(x: int, y: int, want: int) -> None:
    a = _symvalues.Value((x,), ())
    b = _symvalues.Value((y,), ())
    got = _symvalues.VALUE_RULES["Div"](h.make_node("Div", ["a", "b"], ["c"]), [a, b], {}, 17)
    assert got is not None and got.items == (want,)


def test_a_dim_compared_with_minus_one_is_known_unequal_and_other_comparisons_stay_open() -> None:
    node = h.make_node("Equal", ["a", "b"], ["c"])
    dims = _symvalues.Value((symbol("seq"), symbol("seq")), (2,))
    got = _symvalues.VALUE_RULES["Equal"](node, [dims, _symvalues.Value((-1, 1), (2,))], {}, 17)
    assert got is not None and got.items == (0, None)  # seq == -1 is false; seq == 1 is not known


def test_an_external_constant_is_never_read() -> None:
    t = h.make_tensor("c", T.INT64, [2], [3, 4])
    assert _symvalues.constant_value(t) is not None
    t.data_location = T.EXTERNAL
    t.external_data.add(key="location", value="../../etc/passwd")
    assert _symvalues.constant_value(t) is None  # the sweep reads only what the file itself holds


def test_a_fed_initializer_has_no_value() -> None:
    # an initializer that is also a graph input may be overridden at run time: its stored entries are no value
    model = h.make_model(h.make_graph(
        [h.make_node("Reshape", ["x", "t"], ["y"])], "g",
        [h.make_tensor_value_info("x", T.FLOAT, ["n", 4]), h.make_tensor_value_info("t", T.INT64, [2])],
        [h.make_tensor_value_info("y", T.FLOAT, None)], initializer=[h.make_tensor("t", T.INT64, [2], [-1, 2])]),
        opset_imports=[h.make_opsetid("", 17)])
    result = shapes.infer_shapes(Model(model, None, None))
    assert "graphcost-sweep" not in result.engines


def test_a_plain_dim_against_its_clamp_broadcasts_to_the_plain_dim() -> None:
    result = _infer("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[batch, seq, 8] x, float[1, 512, 8] table) => (float[?, ?, ?] y) {
      zero = Constant<value = int64[1] {0}>()
      s = Shape(x)
      one = Constant<value = int64[1] {1}>()
      two = Constant<value = int64[1] {2}>()
      n = Slice(s, one, two)
      pos = Slice(table, zero, n, one)
      y = Add(x, pos)
    }
    """)
    assert _dims(result, "pos") == [1, "Min(512, seq)", 8]  # table[:, :seq], clamped to the table's 512 rows
    # seq against Min(512, seq): equal when seq <= 512, both 1 when seq is 1; any other seq fails at run time
    assert _dims(result, "y") == ["batch", "seq", 8]
    assert "onnx-shape-inference" not in result.engines


def test_windows_in_symbolic_spatial_dims() -> None:
    result = _infer("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[n, 3, h, w] x, float[8, 3, 3, 3] k, float[8, 8, 2, 2] kt) => (float[?, ?, ?, ?] y) {
      c = Conv<strides = [2, 2], pads = [1, 1, 1, 1]>(x, k)
      p = MaxPool<kernel_shape = [2, 2], strides = [2, 2]>(c)
      s = Conv<strides = [2, 2], auto_pad = "SAME_UPPER">(x, k)
      t = ConvTranspose<strides = [2, 2]>(p, kt)
      g = GlobalAveragePool(t)
      scales = Constant<value = float[4] {1.0, 1.0, 2.0, 2.0}>()
      roi = Constant<value = float[0] {}>()
      y = Resize<mode = "nearest">(g, roi, scales)
    }
    """)
    assert "onnx-shape-inference" not in result.engines
    h, w = symbol("h"), symbol("w")
    c = [parse_dim(d) if isinstance(d, str) else d for d in _dims(result, "c")]
    assert c == [symbol("n"), 8, sympy.floor((h + 1 + 1 - (3 - 1) - 1) / 2) + 1,  # pads 1 + 1, kernel 3, stride 2
                 sympy.floor((w - 1) / 2) + 1]
    assert _dims(result, "s") == ["n", 8, "ceiling(h/2)", "ceiling(w/2)"]  # SAME: ceil(d / stride)
    p = parse_dim(str(_dims(result, "p")[2]))
    assert p == sympy.floor((c[2] - (2 - 1) - 1) / 2) + 1  # the pool: kernel 2, stride 2, no pads
    t = parse_dim(str(_dims(result, "t")[2]))
    assert t == 2 * (p - 1) + (2 - 1) + 1  # ConvTranspose: stride·(d - 1) + dilation·(k - 1) + 1
    assert _dims(result, "g") == ["n", 8, 1, 1]
    assert _dims(result, "y") == ["n", 8, 2, 2]  # floor(1 · 2) per spatial dim


def test_a_dim_against_its_clamp_at_zero_is_the_dim() -> None:
    # Wav2Vec2's positional conv: a kernel-2 conv on one branch, x[..., :-1] on the other
    result = _infer("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[batch, 8, t] x, float[8, 8, 2] w) => (float[?, ?, ?] y) {
      a = Conv(x, w)
      zero = Constant<value = int64[1] {0}>()
      minus = Constant<value = int64[1] {-1}>()
      two = Constant<value = int64[1] {2}>()
      b = Slice(x, zero, minus, two)
      y = Add(a, b)
    }
    """)
    assert _dims(result, "a") == ["batch", 8, "t - 1"]  # t - (2 - 1) positions for a kernel of 2
    assert _dims(result, "b") == ["batch", 8, "Max(0, t - 1)"]  # x[..., :-1], clamped as ONNX says
    assert _dims(result, "y") == ["batch", 8, "t - 1"]  # equal wherever t - 1 is a dim
    assert "onnx-shape-inference" not in result.engines


def test_swin_window_padding_in_symbolic_dims() -> None:
    """The legacy exporter's ``F.pad(x, (0, 0, 0, pad_w, 0, pad_h))``, pad = (7 - d % 7) % 7: the pads list is
    reshaped to pairs, flipped with a step of -1, transposed and flattened before the Pad reads it."""
    from graphcost._dims import evaluate

    result = _infer("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[1, h, w, 8] x) => (float[?, ?, ?, ?] y) {
      s = Shape(x)
      i1 = Constant<value = int64[1] {1}>()
      i2 = Constant<value = int64[1] {2}>()
      hh = Gather(s, i1)
      ww = Gather(s, i2)
      seven = Constant<value = int64[1] {7}>()
      hm = Mod(hh, seven)
      wm = Mod(ww, seven)
      hs = Sub(seven, hm)
      ws = Sub(seven, wm)
      ph = Mod(hs, seven)
      pw = Mod(ws, seven)
      z = Constant<value = int64[1] {0}>()
      flat = Concat<axis = 0>(z, z, z, pw, z, ph, z, z)
      pairs_shape = Constant<value = int64[2] {-1, 2}>()
      pairs = Reshape(flat, pairs_shape)
      start = Constant<value = int64[1] {-1}>()
      stop = Constant<value = int64[1] {-9223372036854775807}>()
      axis0 = Constant<value = int64[1] {0}>()
      back = Constant<value = int64[1] {-1}>()
      flipped = Slice(pairs, start, stop, axis0, back)
      cols = Transpose<perm = [1, 0]>(flipped)
      minus = Constant<value = int64[1] {-1}>()
      padflat = Reshape(cols, minus)
      pads = Cast<to = 7>(padflat)
      y = Pad(x, pads)
    }
    """)
    assert "onnx-shape-inference" not in result.engines
    n, hp, wp, c = _dims(result, "y")
    assert (n, c) == (1, 8)
    for d in range(1, 30):  # padded up to a whole number of 7-wide windows
        assert evaluate(parse_dim(str(hp)), {"h": d}) == 7 * -(-d // 7)
        assert evaluate(parse_dim(str(wp)), {"w": d}) == 7 * -(-d // 7)


def test_a_value_sliced_backward_stops_before_the_front() -> None:
    node = h.make_node("Slice", ["v", "s", "e", "a", "st"], ["o"])
    v = _symvalues.Value((1, 2, 3, 4), (4,))
    ints = [_symvalues.Value((x,), (1,)) for x in (-1, -9223372036854775807, 0, -1)]
    got = _symvalues.VALUE_RULES["Slice"](node, [v, *ints], {}, 17)
    assert got is not None and got.items == (4, 3, 2, 1)  # all four, last first: the end is "before index 0"


def test_bound_dims_make_a_static_copy_that_specialize_folds_exactly() -> None:
    # NonZero of a range made from x's shape: no rule can say the count in h (the entries are not one number), but
    # once h is bound the copy is a static graph and specialize evaluates it
    model = onnx.parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[h] x) => (y) {
      s = Shape(x)
      zero = Constant<value = int64 {0}>()
      one = Constant<value = int64 {1}>()
      n = Gather<axis = 0>(s, zero)
      r = Range(zero, n, one)
      nz = NonZero(r)
      y = Transpose(nz)
    }
    """)
    assert _dims(shapes.infer_shapes(Model(model, None, None)), "y")[1] == 1  # the count is a named unknown
    bound = shapes.infer_shapes(Model(model, None, None), dims={"h": 5})
    assert _dims(bound, "y") == [4, 1]  # 0, 1, 2, 3, 4: four non-zero entries, each with one coordinate


def test_nonzero_of_one_number_repeated_counts_every_entry() -> None:
    # The legacy exporter's index range: NonZero(ConstantOfShape(shape)) is every position when the fill is not
    # zero (Longformer's sliding windows), none when it is; a view of the fill is the same fill
    model = onnx.parser.parse_model("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[b, h] x) => (y, none, flat) {
      s = Shape(x)
      c = ConstantOfShape<value = float[1] {1.0}>(s)
      nz = NonZero(c)
      y = Transpose(nz)
      z = ConstantOfShape(s)
      none = NonZero(z)
      minus = Constant<value = int64[1] {-1}>()
      f = Reshape(c, minus)
      flat = NonZero(f)
    }
    """)
    result = shapes.infer_shapes(Model(model, None, None))
    assert _dims(result, "nz") == [2, "b*h"]  # rank 2, b·h non-zero entries
    assert _dims(result, "y") == ["b*h", 2]
    assert _dims(result, "none") == [2, 0]  # the default fill is zero
    assert _dims(result, "flat") == [1, "b*h"]
    assert "onnx-shape-inference" not in result.engines


def test_shape_values_that_grow_without_bound_are_given_up_not_expanded() -> None:
    """A file that squares ``a + b`` 30 times would ask for a 2**30-term expansion, or ``a**(2**30)``: the sweep
    states nothing it cannot expand within its bound, so the work stays small on any input."""
    nodes = [h.make_node("Shape", ["x"], ["s"]), h.make_node("ReduceSum", ["s"], ["v0"], keepdims=1)]
    for k in range(30):
        nodes.append(h.make_node("Mul", [f"v{k}", f"v{k}"], [f"v{k + 1}"]))
    nodes.append(h.make_node("ConstantOfShape", ["v30"], ["y"]))
    model = h.make_model(h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, ["a", "b"])],
                                      [h.make_tensor_value_info("y", T.FLOAT, None)]),
                         opset_imports=[h.make_opsetid("", 13)])
    result = shapes.infer_shapes(Model(model, None, None))  # returns at once; before the bound it did not
    assert "graphcost-sweep" not in result.engines
    got = _symvalues.VALUE_RULES["Mul"](h.make_node("Mul", ["p", "q"], ["r"]),
                                        [_symvalues.Value((symbol("a") ** 8,), (1,))] * 2, {}, 17)
    assert got is not None and got.items == (None,)  # a**16 is past the highest power a shape may hold


def test_a_reduction_whose_axes_are_not_known_states_no_value() -> None:
    rule = _symvalues.VALUE_RULES["ReduceProd"]
    dims = _symvalues.Value((2, 3, 4), (3,))
    node = h.make_node("ReduceProd", ["s", "axes"], ["n"], keepdims=0)
    assert rule(node, [dims, None], {"keepdims": 0}, 18) is None  # axes named, value unknown: not a guess
    got = rule(node, [dims, _symvalues.Value((0,), (1,))], {"keepdims": 0}, 18)
    assert got is not None and got.items == (2 * 3 * 4,)  # the vector's one axis: numel
    whole = rule(h.make_node("ReduceProd", ["s"], ["n"], keepdims=0), [dims], {"keepdims": 0}, 18)
    assert whole is not None and whole.items == (24,)  # no axes: every axis


@pytest.mark.parametrize(("attrs", "want"), [
    # floor((d + pads - dilation·(k - 1) - 1) / stride) + 1 on 17 × 17, kernel 3
    ({"strides": [2, 2], "pads": [1, 1, 1, 1]}, [9, 9]),  # (17 + 2 - 2 - 1) // 2 + 1
    ({"strides": [2, 2], "dilations": [2, 2]}, [7, 7]),  # (17 - 4 - 1) // 2 + 1
    ({"strides": [3, 3], "auto_pad": b"SAME_UPPER"}, [6, 6]),  # ceil(17 / 3)
    ({"strides": [2, 2], "ceil_mode": 1, "pool": True}, [8, 8]),  # ceil((17 - 2 - 1) / 2) + 1
    ({"strides": [2, 2], "pool": True}, [8, 8]),  # floor((17 - 2 - 1) / 2) + 1
    # ceil_mode with a window that would start in the end padding: ceil((17 + 1 - 1 - 1) / 3) + 1 = 7, but the
    # seventh would start at 6·3 = 18 ≥ 17 + 0 (17 + begin pad), so ONNX drops it; onnxruntime 1.32 gives 6 too
    # (onnx's C++ inference 7)
    ({"kernel_shape": [2, 2], "strides": [3, 3], "pads": [0, 0, 1, 1], "ceil_mode": 1, "pool": True}, [6, 6]),
    ({"kernel_shape": [2, 2], "strides": [3, 3], "pads": [0, 0, 1, 1], "pool": True}, [6, 6]),  # floor: 16 // 3 + 1
])
def test_a_window_over_numbers_is_numbers(attrs: dict, want: list[int]) -> None:  # type: ignore[type-arg]
    """The sweep's sliding-window rule on static dims works in ints (a static export must not import sympy for
    them: ShuffleNet-V2 legacy did, 0.4-0.9 s of a 1.1-1.5 s run), with the values of the ONNX formula."""
    from graphcost.passes import _symsweep

    attrs = dict(attrs)
    pool = attrs.pop("pool", False)
    op = "MaxPool" if pool else "Conv"
    node = h.make_node(op, ["x", "w"][: 1 if pool else 2], ["y"])
    a = {"kernel_shape": [3, 3], **attrs}
    shapes_in = [(1, 8, 17, 17)] + ([] if pool else [(4, 8, 3, 3)])
    [out] = _symsweep._window(node, shapes_in, [None] * len(shapes_in), a, 17)
    assert out == (1, 8 if pool else 4, *want)
    assert all(type(d) is int for d in out)


def test_a_static_window_imports_no_sympy() -> None:
    import subprocess
    import sys

    code = ("import sys, onnx.helper as h\nfrom graphcost.passes import _symsweep\n"
            "node = h.make_node('MaxPool', ['x'], ['y'])\n"
            "out = _symsweep._window(node, [(1, 3, 9, 9)], [None], {'kernel_shape': [3, 3], 'strides': [2, 2]}, 17)\n"
            "assert out == [(1, 3, 4, 4)], out\nassert 'sympy' not in sys.modules\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("op", ["ScatterND", "ScatterElements", "Scatter"])
def test_a_scatter_keeps_its_datas_shape(op: str) -> None:
    """A scatter writes into a copy of its data (ONNX: the output has the data's shape), so the sweep states it:
    Swin's shifted-window mask is a ScatterND into ConstantOfShape(computed size), and what reads the mask's
    shape no longer waits for a second sweep round."""
    from graphcost.passes import _symsweep

    node = h.make_node(op, ["data", "indices", "updates"], ["y"])
    b = symbol("b")
    data = (b, 49, 49)  # b windows of a 7 x 7 window's 49 positions against 49
    [out] = _symsweep.SHAPE_RULES[op](node, [data, (4, 1), (4, 49, 49)], [None, None, None], {}, 17)
    assert out == data


def test_a_ceil_mode_pool_over_a_symbolic_dim() -> None:
    """Funnel's ``AveragePool(kernel 2, stride 2, ceil_mode=1)``: ``ceil((seq - 2) / 2) + 1 = ceiling(seq/2)``,
    exact at every seq because no window can start in the (absent) end padding; with an end pad the stride
    reaches past the window, a last window may be dropped, and the dim stays open for the engines."""
    from graphcost.passes import _symsweep

    seq = symbol("seq")
    node = h.make_node("AveragePool", ["x"], ["y"])
    [out] = _symsweep._window(node, [(2, 8, seq)], [None], {"kernel_shape": [2], "strides": [2], "ceil_mode": 1}, 17)
    assert out == (2, 8, sympy.ceiling(seq / 2))
    [k3] = _symsweep._window(node, [(2, 8, seq)], [None],
                             {"kernel_shape": [3], "strides": [2], "pads": [1, 1], "ceil_mode": 1}, 17)
    assert k3 == (2, 8, sympy.ceiling((seq - 1) / 2) + 1)  # stride 2 + end pad 1 ≤ extent 3: exact
    [open_] = _symsweep._window(node, [(2, 8, seq)], [None],
                                {"kernel_shape": [2], "strides": [2], "pads": [1, 1], "ceil_mode": 1}, 17)
    assert open_ == (2, 8, None)  # stride 2 + end pad 1 > extent 2
    for n in range(1, 40):  # the closed forms are the numbers the int path (ONNX's rule, checked) gives
        [a] = _symsweep._window(node, [(2, 8, n)], [None], {"kernel_shape": [2], "strides": [2], "ceil_mode": 1}, 17)
        [b] = _symsweep._window(node, [(2, 8, n)], [None],
                                {"kernel_shape": [3], "strides": [2], "pads": [1, 1], "ceil_mode": 1}, 17)
        assert a[2] == -(-n // 2) and b[2] == -(-(n - 1) // 2) + 1


def test_a_float_shape_value_rounded_up_and_cast_back_resolves() -> None:
    """MobileViT legacy: ``int(ceil(h / 2) * 2)`` in float, then the patch count ``// 2`` into a Reshape. The cast
    back to int64 of ``2*ceiling(height/2)`` is exact (a whole number), though sympy knows no sign of a ceiling."""
    result = _infer("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[batch, 4, height, width] x, float[2, 8] w) => (float[?, ?, ?, ?] y) {
      s = Shape(x)
      i2 = Constant<value = int64 {2}>()
      i3 = Constant<value = int64 {3}>()
      hh = Gather<axis = 0>(s, i2)
      ww = Gather<axis = 0>(s, i3)
      hf = Cast<to = 1>(hh)
      two_f = Constant<value = float {2.0}>()
      hd = Div(hf, two_f)
      hc = Ceil(hd)
      hm = Mul(hc, two_f)
      hi = Cast<to = 7>(hm)
      two = Constant<value = int64 {2}>()
      nph = Div(hi, two)
      npw = Div(ww, two)
      i0 = Constant<value = int64 {0}>()
      b = Gather<axis = 0>(s, i0)
      four = Constant<value = int64 {4}>()
      bc = Mul(b, four)
      bcn = Mul(bc, nph)
      ax = Constant<value = int64[1] {0}>()
      u0 = Unsqueeze(bcn, ax)
      u2 = Unsqueeze(npw, ax)
      two1 = Constant<value = int64[1] {2}>()
      shp = Concat<axis = 0>(u0, two1, u2, two1)
      r = Reshape(x, shp)
      y = MatMul(r, w)
    }
    """)
    assert _dims(result, "r") == ["4*batch*ceiling(height/2)", 2, "floor(width/2)", 2]
    assert _dims(result, "y") == ["4*batch*ceiling(height/2)", 2, "floor(width/2)", 8]
    assert "onnx-shape-inference" not in result.engines


def test_a_ceiling_is_known_non_negative() -> None:
    h_ = symbol("h")
    assert sympy.ceiling(h_ / 2).is_nonnegative is None  # what sympy says
    assert _symvalues.nonnegative(sympy.ceiling(h_ / 2)) and _symvalues.nonnegative(3 * sympy.ceiling(h_ / 2) + 1)
    assert not _symvalues.nonnegative(sympy.ceiling(h_ / 2) - 1)
    assert _symvalues._truncated(3 * sympy.ceiling(h_ / 2) / 2) == sympy.floor(3 * sympy.ceiling(h_ / 2) / 2)
    assert _symvalues._truncated(2 * sympy.ceiling(h_ / 2)) == 2 * sympy.ceiling(h_ / 2)


def test_a_dim_rounded_up_by_a_mod_is_written_as_a_ceiling() -> None:
    """``x + Mod(-x, k)`` (sympy: ``Mod((k-1)*x, k)``; for k = 2 ``Mod(x, 2)``) is x rounded up to a multiple of k."""
    x = symbol("h")
    assert _symvalues.round_ups(x + sympy.Mod(x, 2)) == 2 * sympy.ceiling(x / 2)
    padded = sympy.Mod(7 - sympy.Mod(x, 7), 7)  # Swin: (7 - W % 7) % 7
    assert _symvalues.round_ups(sympy.expand(x + padded)) == 7 * sympy.ceiling(x / 7)
    assert _symvalues.round_ups(3 * x + 3 * sympy.Mod(x, 2)) == 6 * sympy.ceiling(x / 2)
    assert _symvalues.round_ups(x + sympy.Mod(x, 7)) == x + sympy.Mod(x, 7)  # not a round-up: left as it is
    assert _symvalues.round_ups(x / 2 + sympy.Mod(x / 2, 2)) == x / 2 + sympy.Mod(x / 2, 2)  # x/2 is no integer


# Swin's PatchMerging pads H to even (F.pad by H % 2) and keeps rows 0::2 and 1::2; the next stage pads to a
# multiple of its 7-wide window ((7 - d % 7) % 7) and reshapes into windows
MERGE = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[1, h, 8] x) => (float[?, ?, ?, ?] y) {
  s = Shape(x)
  i1 = Constant<value = int64[1] {1}>()
  hh = Gather(s, i1)
  two = Constant<value = int64[1] {2}>()
  odd = Mod(hh, two)
  z = Constant<value = int64[1] {0}>()
  pads = Concat<axis = 0>(z, z, z, z, odd, z)
  p = Pad(x, pads)
  big = Constant<value = int64[1] {9223372036854775807}>()
  one = Constant<value = int64[1] {1}>()
  even = Slice(p, z, big, i1, two)
  rest = Slice(p, one, big, i1, two)
  m = Concat<axis = -1>(even, rest)
  s2 = Shape(m)
  d = Gather(s2, i1)
  seven = Constant<value = int64[1] {7}>()
  dm = Mod(d, seven)
  ds = Sub(seven, dm)
  pd = Mod(ds, seven)
  wpads = Concat<axis = 0>(z, z, z, z, pd, z)
  w = Pad(m, wpads)
  s3 = Shape(w)
  d3 = Gather(s3, i1)
  nw = Div(d3, seven)
  c16 = Constant<value = int64[1] {16}>()
  target = Concat<axis = 0>(one, nw, seven, c16)
  y = Reshape(w, target)
}
"""


def test_patch_merging_then_window_padding_stay_exact_ceilings() -> None:
    from graphcost._dims import evaluate

    result = _infer(MERGE)
    assert "onnx-shape-inference" not in result.engines
    assert _dims(result, "p")[1] == "2*ceiling(h/2)"
    assert _dims(result, "even")[1] == "ceiling(h/2)"  # rows 0::2 of it
    for n in range(0, 40):  # rows 1::2: the start clamped to the dim, exact at h = 0 too
        assert evaluate(parse_dim(str(_dims(result, "rest")[1])), {"h": n}) == -(-n // 2)
    assert _dims(result, "w")[1] == "7*ceiling(ceiling(h/2)/7)"
    one, windows, seven, c = _dims(result, "y")
    assert (one, seven, c) == (1, 7, 16)
    for n in range(1, 40):
        assert evaluate(parse_dim(str(windows)), {"h": n}) == math.ceil(math.ceil(n / 2) / 7)  # windows


def test_a_window_padded_dim_cropped_back_is_the_dim() -> None:
    """Swin crops the window-padded map back (``x[:, :H]``): ``Min(7*ceiling(d/7), d)`` is d, which sympy's
    ``Min`` leaves undecided; the next block's shapes stood on it."""
    d = sympy.ceiling(symbol("h") / 2)
    assert _symvalues.at_least(7 * sympy.ceiling(d / 7), d)
    assert not _symvalues.at_least(d, 7 * sympy.ceiling(d / 7))
    assert _symvalues.at_least(d + 3, d) and not _symvalues.at_least(d, d + 3)
    text = MERGE.replace("  y = Reshape(w, target)\n", "  crop = Slice(w, z, d, i1)\n  y = Reshape(crop, s2)\n")
    result = _infer(text)
    assert _dims(result, "crop")[1] == "ceiling(h/2)"
    assert "onnx-shape-inference" not in result.engines


def test_the_last_entries_a_slice_keeps_of_a_dim_are_known_non_negative() -> None:
    """``d - Max(0, d - 3)`` (``x[-3:]`` of a dim d, Swin's shifted-window mask) is ``Min(d, 3) ≥ 0``: a Where
    that fixes up ``shape == -1`` before an Expand then knows the entry is no -1."""
    d = 7 * sympy.ceiling(symbol("w") / 7)
    assert _symvalues.nonnegative(d - sympy.Max(0, d - 3))
    assert not _symvalues.nonnegative(d - sympy.Max(0, d + 3))  # d - Max(0, d + 3) is -3 for any d
    assert not _symvalues.nonnegative(symbol("v") - sympy.Max(0, d - 3))  # another dim's clamp proves nothing


def test_a_clamp_is_built_once_and_is_sympys_own() -> None:
    from graphcost._minmax import dim_max, dim_min

    d = 7 * sympy.ceiling(symbol("h") / 7)
    first = dim_max(0, d - 7)
    assert first == sympy.Max(0, d - 7) and dim_max(0, d - 7) is first
    assert dim_min(d, symbol("h")) == sympy.Min(d, symbol("h"))
