"""Movement rules: views and metadata are free on purpose, copies cost bytes only, resamplers interpolate."""

from __future__ import annotations

import pytest
import sympy
from ophelp import cost_of

from graphcost._dims import symbol
from graphcost.ops import Kind, Work, lookup


def _m(graph: str, opset: int = 18) -> str:
    return f'<ir_version: 10, opset_import: ["" : {opset}]>\n{graph}'


def work(text: str) -> Work:
    w = cost_of(text)
    assert isinstance(w, Work), w
    return w


@pytest.mark.parametrize(("op", "kind", "free_inputs"), [
    ("Reshape", Kind.VIEW, set()),
    ("Squeeze", Kind.VIEW, set()),
    ("Unsqueeze", Kind.VIEW, set()),
    ("Flatten", Kind.VIEW, set()),
    ("Identity", Kind.VIEW, set()),
    ("Dropout", Kind.VIEW, set()),
    ("Optional", Kind.VIEW, set()),
    ("OptionalGetElement", Kind.VIEW, set()),
    ("Shape", Kind.FREE, {0}),  # reads only the input's shape
    ("Size", Kind.FREE, {0}),
    ("OptionalHasElement", Kind.FREE, {0}),
    ("Constant", Kind.FREE, set()),
    ("Transpose", Kind.MOVEMENT, set()),
    ("Gather", Kind.MOVEMENT, set()),
    ("EyeLike", Kind.MOVEMENT, {0}),  # writes an identity of the input's shape, never reads its data
    ("Resize", Kind.MOVEMENT, set()),
])
def test_kinds(op: str, kind: Kind, free_inputs: set[int]) -> None:
    entry = lookup("", op)
    assert entry is not None
    assert entry.kind is kind
    assert set(entry.free_inputs) == free_inputs


@pytest.mark.parametrize("body", [
    "Y = Transpose <perm: ints = [1, 0]> (X)",
    "Y = Concat <axis: int = 0> (X, X)",
    "Y = Identity (X)",
    "Y = Shape (X)",
    "Y = Flatten (X)",
    "Y = Trilu (X)",
])
def test_copies_and_views_compute_nothing(body: str) -> None:
    assert work(_m(f"g (float[N,C] X) => (Y) {{ {body} }}")).flops == 0


def test_dropout_is_identity_unless_training_mode_is_constant_true() -> None:
    inference = work(_m("g (float[4,5] X) => (Y) { Y = Dropout (X) }"))
    assert inference.flops == 0
    training = work(_m("g (float[4,5] X) => (Y, M) <float r = {0.5}, bool t = {1}> { Y, M = Dropout (X, r, t) }"))
    assert training.flops == 3 * 20  # draw + compare + scale per element
    dynamic = work(_m("g (float[4,5] X, bool t) => (Y) <float r = {0.5}> { Y = Dropout (X, r, t) }"))
    assert dynamic.flops == 0 and "not a constant" in dynamic.note


def test_scatter_reduction_is_one_flop_per_update() -> None:
    sig = "float[5,3] D, int64[2,3] I, float[2,3] U"
    plain = work(_m(f"g ({sig}) => (Y) {{ Y = ScatterElements (D, I, U) }}"))
    added = work(_m(f"g ({sig}) => (Y) {{ Y = ScatterElements <reduction: string = \"add\"> (D, I, U) }}"))
    assert plain.flops == 0  # schema default reduction = none: a copy
    assert added.flops == 2 * 3  # one add per update element


def test_scatter_nd_reduction_symbolic() -> None:
    w = work(_m("g (float[N,4] D, int64[K,1] I, float[K,4] U) => (Y) "
                "{ Y = ScatterND <reduction: string = \"mul\"> (D, I, U) }"))
    assert sympy.expand(w.flops - 4 * symbol("K")) == 0  # one multiply per update element


def test_range_nonzero_unique() -> None:
    rng = work(_m("g () => (Y) <float s = {0}, float l = {10}, float d = {2}> { Y = Range (s, l, d) }"))
    assert rng.flops == 5  # 0, 2, 4, 6, 8: one add each
    nz = work(_m("g (float[3,4] X) => (Y) { Y = NonZero (X) }"))
    assert nz.flops == 12  # one compare per input element
    flat = work(_m("g (float[10] X) => (Y) { Y = Unique (X) }"))
    assert flat.flops == 10 * (4 + 1)  # sort: ⌈log2 10⌉ = 4 compares each, + a neighbour compare
    rows = work(_m("g (float[6,4] X) => (Y) { Y = Unique <axis: int = 0> (X) }"))
    assert rows.flops == 24 * (3 + 1)  # 6 rows: ⌈log2 6⌉ = 3 row compares, each touching 4 elements


def _resize(attrs: str, scales: str = "1, 1, 2, 2", out: int = 1 * 3 * 16 * 16) -> tuple[Work, int]:
    text = _m(f"g (float[1,3,8,8] X) => (Y) <float[4] sc = {{{scales}}}> {{ Y = Resize {attrs} (X, , sc) }}")
    return work(text), out


def test_resize_default_mode_is_nearest() -> None:
    w, _ = _resize("")
    assert w.flops == 0  # schema default mode = nearest: index and copy


def test_resize_linear_and_cubic_taps() -> None:
    linear, out = _resize('<mode: string = "linear">')
    assert linear.macs == out * 2**2  # two axes resized: 2 taps each
    assert linear.flops == 2 * linear.macs
    cubic, out = _resize('<mode: string = "cubic">')
    assert cubic.macs == out * 4**2  # 4 taps per resized axis
    one_axis, _ = _resize('<mode: string = "linear">', scales="1, 1, 1, 2", out=3 * 8 * 16)
    assert one_axis.macs == 3 * 8 * 16 * 2  # only W resized


def test_resize_with_every_scale_one_is_a_copy() -> None:
    """BEiT legacy writes a Resize with scales 1, 1, 1, 1: each output is its input element, no tap is weighed."""
    for mode in ("linear", "cubic"):
        w, _ = _resize(f'<mode: string = "{mode}">', scales="1, 1, 1, 1", out=3 * 8 * 8)
        assert w.flops == 0 and w.macs == 0


def test_resize_antialias_widens_downsampling_filter() -> None:
    w, out = _resize('<mode: string = "linear", antialias: int = 1>', scales="1, 1, 0.5, 0.5", out=3 * 4 * 4)
    assert w.macs == out * 4 * 4  # ⌈2 / 0.5⌉ = 4 taps per axis


def test_upsample_linear() -> None:
    w = work(_m("g (float[1,1,4,4] X) => (Y) <float[4] sc = {1, 1, 2, 2}> "
                "{ Y = Upsample <mode: string = \"linear\"> (X, sc) }", opset=9))
    assert w.macs == 1 * 1 * 8 * 8 * 4  # bilinear: 4 taps per output


def test_grid_sample() -> None:
    sig = "float[1,2,4,4] X, float[1,3,3,2] G"
    linear = work(_m(f"g ({sig}) => (Y) {{ Y = GridSample (X, G) }}", opset=20))
    out, coords = 1 * 2 * 3 * 3, 1 * 3 * 3 * 2
    assert linear.macs == out * 4  # schema default mode = linear: 2^2 taps
    assert linear.flops == 2 * linear.macs + 2 * coords  # + unnormalize each grid coordinate
    nearest = work(_m(f"g ({sig}) => (Y) {{ Y = GridSample <mode: string = \"nearest\"> (X, G) }}", opset=20))
    assert nearest.flops == 2 * coords
    old = work(_m(f"g ({sig}) => (Y) {{ Y = GridSample (X, G) }}", opset=16))
    assert old.macs == out * 4  # opset 16's default spells it "bilinear"


def test_affine_grid() -> None:
    w = work(_m("g (float[2,2,3] T) => (Y) <int64[4] sz = {2, 1, 4, 5}> { Y = AffineGrid (T, sz) }", opset=20))
    coords = 2 * 4 * 5 * 2  # N · H · W · 2
    assert w.macs == coords * 2  # rotation/scale row · (x, y)
    assert w.flops == 2 * w.macs + coords  # + translation
