"""Pool rules: output elements × window, global pools over the input, RoI pools, Col2Im."""

from __future__ import annotations

import sympy
from ophelp import cost_of

from graphcost._dims import symbol
from graphcost.ops import Kind, Unknown, Work, lookup


def _m(graph: str, opset: int = 18) -> str:
    return f'<ir_version: 10, opset_import: ["" : {opset}]>\n{graph}'


def test_max_pool_is_outputs_times_window() -> None:
    w = cost_of(_m("g (float[1,3,32,32] X) => (Y) { Y = MaxPool <kernel_shape: ints = [3, 3]> (X) }"))
    assert isinstance(w, Work)
    out = 1 * 3 * 30 * 30  # N·C·Ho·Wo, a 3×3 window without padding
    assert w.flops == out * 3 * 3  # one compare per window element
    assert w.macs == 0


def test_max_pool_symbolic_batch_and_channels() -> None:
    w = cost_of(_m("g (float[N,64,H,W] X) => (Y) "
                   "{ Y = MaxPool <kernel_shape: ints = [2, 2], strides: ints = [2, 2]> (X) }"))
    assert isinstance(w, Work)
    # onnx leaves the pooled spatial dims unnamed: the graph names them after the output tensor
    ho, wo = symbol("unk__0"), symbol("unk__1")
    assert sympy.simplify(w.flops - symbol("N") * 64 * ho * wo * 4) == 0  # outputs × 2·2 window


def test_average_pool_adds_one_divide_per_output() -> None:
    text = _m("g (float[1,1,5,5] X) => (Y) "
              "{ Y = AveragePool <kernel_shape: ints = [3, 3], pads: ints = [1, 1, 1, 1]> (X) }")
    w = cost_of(text)
    assert isinstance(w, Work)
    out = 5 * 5  # same-padded 3×3 window keeps 5×5
    assert w.flops == out * 9 + out  # 9 adds per output + one divide per output


def test_average_pool_count_include_pad_changes_only_the_divisor() -> None:
    base = ("g (float[1,1,5,5] X) => (Y) "
            "{ Y = AveragePool <kernel_shape: ints = [3, 3], pads: ints = [1, 1, 1, 1]%s> (X) }")
    excluded = cost_of(_m(base % ""))  # schema default count_include_pad = 0
    included = cost_of(_m(base % ", count_include_pad: int = 1"))
    assert isinstance(excluded, Work) and isinstance(included, Work)
    assert excluded.flops == included.flops == 5 * 5 * 9 + 5 * 5


def test_lp_pool() -> None:
    w = cost_of(_m("g (float[1,2,8,8] X) => (Y) "
                   "{ Y = LpPool <kernel_shape: ints = [2, 2], strides: ints = [2, 2]> (X) }"))
    assert isinstance(w, Work)
    out = 1 * 2 * 4 * 4
    assert w.flops == 2 * out * 4 + out  # (|x|^p + add) per window element, one root per output


def test_global_pools_reduce_every_input_element() -> None:
    x = "float[N,C,H,W] X"
    n, c, h, wd = (symbol(s) for s in ("N", "C", "H", "W"))
    avg = cost_of(_m(f"g ({x}) => (Y) {{ Y = GlobalAveragePool (X) }}"))
    mx = cost_of(_m(f"g ({x}) => (Y) {{ Y = GlobalMaxPool (X) }}"))
    lp = cost_of(_m(f"g ({x}) => (Y) {{ Y = GlobalLpPool (X) }}"))
    assert isinstance(avg, Work) and isinstance(mx, Work) and isinstance(lp, Work)
    assert sympy.simplify(avg.flops - (n * c * h * wd + n * c)) == 0  # an add per input, a divide per (n, c)
    assert sympy.simplify(mx.flops - n * c * h * wd) == 0  # a compare per input
    assert sympy.simplify(lp.flops - (2 * n * c * h * wd + n * c)) == 0  # |x|^p + add per input, root per (n, c)


def test_roi_align_fixed_sampling_ratio() -> None:
    text = _m("g (float[1,4,10,10] X, float[3,4] rois, int64[3] bi) => (Y) "
              "{ Y = RoiAlign <output_height: int = 2, output_width: int = 3, sampling_ratio: int = 2> (X, rois, bi) }")
    w = cost_of(text)
    assert isinstance(w, Work)
    out = 3 * 4 * 2 * 3  # num_rois · C · oh · ow
    samples = out * 2 * 2  # a 2×2 grid of bilinear samples per bin
    assert w.macs == samples * 4  # 4 weighted taps per sample
    assert w.flops == 2 * w.macs + out  # + one divide per output


def test_roi_align_max_mode() -> None:
    text = _m("g (float[1,4,10,10] X, float[3,4] rois, int64[3] bi) => (Y) "
              "{ Y = RoiAlign <mode: string = \"max\", sampling_ratio: int = 2> (X, rois, bi) }")
    w = cost_of(text)
    assert isinstance(w, Work)
    samples = 3 * 4 * 1 * 1 * 2 * 2  # schema default output 1×1, 2×2 grid
    assert w.flops == samples * (4 + 4)  # 4 weighted taps + 4 compares per sample
    assert w.macs == 0


def test_roi_align_adaptive_grid_needs_constant_boxes() -> None:
    data = ("g (float[1,2,10,10] X, float[1,4] rois, int64[1] bi) => (Y) "
            "{ Y = RoiAlign <output_height: int = 2, output_width: int = 2> (X, rois, bi) }")
    unknown = cost_of(_m(data))
    assert isinstance(unknown, Unknown) and "data" in unknown.reason
    const = ("g (float[1,2,10,10] X, int64[1] bi) => (Y) <float[1,4] rois = {0, 0, 4, 6}> "
             "{ Y = RoiAlign <output_height: int = 2, output_width: int = 2> (X, rois, bi) }")
    w = cost_of(_m(const))
    assert isinstance(w, Work)
    grid = 3 * 2  # ceil(6 / 2) rows × ceil(4 / 2) columns of samples per bin
    out = 1 * 2 * 2 * 2  # rois · C · oh · ow
    assert w.macs == out * grid * 4
    assert w.flops == 2 * w.macs + out


def test_max_roi_pool_counts_covered_cells_for_constant_rois() -> None:
    const = ("g (float[1,2,8,8] X) => (Y) <float[1,5] rois = {0, 0, 0, 3, 3}> "
             "{ Y = MaxRoiPool <pooled_shape: ints = [2, 2]> (X, rois) }")
    w = cost_of(_m(const))
    assert isinstance(w, Work)
    cells = 4 * 4  # the RoI spans cells 0..3 on both axes; two bins of 2 each
    assert w.flops == 2 * cells  # one compare per cell per channel
    data = cost_of(_m("g (float[1,2,8,8] X, float[1,5] rois) => (Y) "
                      "{ Y = MaxRoiPool <pooled_shape: ints = [2, 2]> (X, rois) }"))
    assert isinstance(data, Unknown) and "data" in data.reason


def test_col2im_adds_every_column_element() -> None:
    text = ("g (float[1,4,6] X) => (Y) <int64[2] img = {3, 4}, int64[2] blk = {2, 2}> "
            "{ Y = Col2Im (X, img, blk) }")
    w = cost_of(_m(text))
    assert isinstance(w, Work)
    assert w.flops == 1 * 4 * 6  # N · C·∏block · L adds


def test_max_unpool_is_a_free_scatter() -> None:
    text = _m("g (float[1,1,2,2] X, int64[1,1,2,2] I) => (Y) "
              "{ Y = MaxUnpool <kernel_shape: ints = [2, 2], strides: ints = [2, 2]> (X, I) }")
    w = cost_of(text)
    assert isinstance(w, Work) and w.flops == 0
    entry = lookup("", "MaxUnpool")
    assert entry is not None and entry.kind is Kind.MOVEMENT
