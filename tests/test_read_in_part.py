"""Inputs read only in part (``RuleEntry.window``): a gather's rows, a slice's window, a compress's kept elements.

The node's own bytes, a fused group's crossing and a gap row all charge what is read, never the whole tensor:
one node, one bound. The defect this pins: the set-traffic convention charged a Gather's whole table, so the
embedding lookup of GPT-2-medium, 1,049,600 B as a node, was a 206,377,984 B "fused" group of one node; and a
Slice was charged its whole input (MViT's class-token Slice: 9,634,200 B read for a 384 B token).
"""

from __future__ import annotations

import onnx.parser
import pytest

from graphcost import analyze
from graphcost.gap import Bounder
from graphcost.hardware.spec import HardwareSpec
from graphcost.load import load
from graphcost.passes._storage import Storage
from graphcost.passes.costs import count_costs
from graphcost.passes.fusion import fuse
from graphcost.passes.shapes import infer_shapes

FP32, I64 = 4, 8
ROWS, COLS = 1000, 64  # the table and the sliced tensor
HW = HardwareSpec("one-level", {"float32": 1e12}, 10e9)

SLICE = f"""<ir_version: 8, opset_import: ["" : 17]>
g (float[{ROWS},{COLS}] x) => (float[10,{COLS}] y, float[5,{COLS}] z)
  <int64[1] s = {{10}}, int64[1] e = {{20}}, int64[1] ax = {{0}}, int64[1] s2 = {{0}}, int64[1] e2 = {{10}},
   int64[1] st = {{2}}> {{
    y = Slice(x, s, e, ax)
    z = Slice(x, s2, e2, ax, st)
}}"""

GATHER = f"""<ir_version: 8, opset_import: ["" : 17]>
g (int64[3] ids) => (float[3,{COLS}] y) <float[{ROWS},{COLS}] table = {{{', '.join(['0.5'] * ROWS * COLS)}}}> {{
    y = Gather(table, ids)
}}"""

# the same input read in part by a Slice and whole by an Add, and twice in part by two Slices
MIXED = f"""<ir_version: 8, opset_import: ["" : 17]>
g (float[{ROWS},{COLS}] x, float[{ROWS},{COLS}] b) => (float[10,{COLS}] y, float[{ROWS},{COLS}] w,
                                                       float[5,{COLS}] z)
  <int64[1] s = {{10}}, int64[1] e = {{20}}, int64[1] ax = {{0}}, int64[1] s2 = {{30}}, int64[1] e2 = {{35}}> {{
    y = Slice(x, s, e, ax)
    w = Add(x, b)
    z = Slice(x, s2, e2, ax)
}}"""

COMPRESS = f"""<ir_version: 8, opset_import: ["" : 17]>
g (float[{ROWS},{COLS}] x, bool[{ROWS}] keep) => (float[n,{COLS}] y) {{
    y = Compress<axis = 0>(x, keep)
}}"""


def _graph(text: str):  # type: ignore[no-untyped-def]
    graph = infer_shapes(load(onnx.parser.parse_model(text))).graph
    return graph, count_costs(graph)


def test_a_slice_reads_its_window_and_its_index_inputs() -> None:
    _, costs = _graph(SLICE)
    y, z = costs.nodes
    assert y.bytes_read == 10 * COLS * FP32 + 3 * I64  # rows 10..19, then starts, ends, axes
    assert y.bytes_written == 10 * COLS * FP32
    assert z.bytes_read == 5 * COLS * FP32 + 4 * I64  # every second row of 0..9: 5 rows, and steps too
    assert z.bytes_written == 5 * COLS * FP32


def test_a_gather_reads_the_rows_it_takes_as_a_node_a_group_and_a_gap_row() -> None:
    graph, costs = _graph(GATHER)
    (node,) = costs.nodes
    moved = 3 * I64 + 3 * COLS * FP32 + 3 * COLS * FP32  # the indices, three rows, the output
    assert node.bytes_read + node.bytes_written == moved
    (group,) = fuse(graph, costs).groups
    assert group.bytes_unfused == group.bytes_fused == moved
    assert Bounder(graph, costs.nodes, HW, {}).of(group.nodes).bytes == moved


def test_a_storage_read_in_parts_costs_the_parts_and_one_whole_read_makes_it_whole() -> None:
    graph, _ = _graph(MIXED)
    first, add, second = (n.name for n in graph.nodes())
    storage = Storage.of(graph)
    index = 5 * I64  # the Slices' starts and ends, and the axes they share
    both = storage.crossing({first, second})
    x_read = [b for t, _, b in both.reads if t == "x"]
    assert x_read == [(10 + 5) * COLS * FP32]  # two windows of x, added
    assert both.bytes == (10 + 5) * COLS * FP32 + index + (10 + 5) * COLS * FP32  # and y, z written
    with_add = storage.crossing({first, add})
    assert [b for t, _, b in with_add.reads if t == "x"] == [ROWS * COLS * FP32]  # the Add reads x whole


def test_parts_are_capped_by_the_whole_storage() -> None:
    overlap = MIXED.replace("s2 = {30}, int64[1] e2 = {35}", "s2 = {0}, int64[1] e2 = {1000}").replace(
        "float[5,", "float[1000,")
    graph, _ = _graph(overlap)
    first, _, second = (n.name for n in graph.nodes())
    x_read = [b for t, _, b in Storage.of(graph).crossing({first, second}).reads if t == "x"]
    assert x_read == [ROWS * COLS * FP32]  # 10 rows + all 1000 rows, but x holds only 1000


def test_a_compress_reads_the_condition_and_the_kept_rows() -> None:
    report = analyze(onnx.parser.parse_model(COMPRESS), dims={"n": 7})
    (node,) = report.nodes
    assert node.bytes_read == ROWS * 1 + 7 * COLS * FP32  # the bool condition, then the 7 rows kept
    assert node.bytes_written == 7 * COLS * FP32


@pytest.mark.parametrize("text", [SLICE, GATHER, MIXED])
def test_every_one_node_group_moves_what_its_node_moves(text: str) -> None:
    graph, costs = _graph(text)
    rows = {c.name: c for c in costs.nodes}
    for group in fuse(graph, costs).groups:
        if len(group.nodes) == 1:
            c = rows[group.nodes[0]]
            assert group.bytes_fused == group.bytes_unfused == c.bytes_read + c.bytes_written


# a Slice taking 10 rows of an activation that fits on chip, for a graph output
ON_CHIP = f"""<ir_version: 8, opset_import: ["" : 17]>
g (float[{ROWS},{COLS}] x) => (float[10,{COLS}] y) <int64[1] s = {{10}}, int64[1] e = {{20}}, int64[1] ax = {{0}}> {{
    a = Relu(x)
    y = Slice(a, s, e, ax)
}}"""
PEAK, DRAM, ONCHIP, CAPACITY = 1e12, 10e9, 100e9, 1 << 20  # FLOP/s, B/s, B/s, B (one 1 MiB on-chip level)
CHIP = HardwareSpec("one-level", {"float32": PEAK}, DRAM, onchip_bytes=CAPACITY, onchip_bandwidth=ONCHIP)


def test_a_window_of_an_on_chip_activation_is_on_chip_and_nothing_more_in_nodes_fusion_and_gap() -> None:
    report = analyze(onnx.parser.parse_model(ON_CHIP), hardware=CHIP, residency="cold")
    node = next(n for n in report.nodes if n.op_type == "Slice")
    window, index = 10 * COLS * FP32, 3 * I64
    moved = window + index + window  # the window of a, starts/ends/axes, y written
    dram = index + window  # cold: the constants and the graph output y cross DRAM; only a's window is on chip
    assert node.bytes_read + node.bytes_written == moved
    assert node.dram_bytes == dram  # not 0: a's whole 256,000 B on chip would have hidden the rest
    t = max(dram / DRAM, moved / ONCHIP)
    assert node.roofline_time_s == pytest.approx(t)
    assert report.fusion is not None
    group = report.fusion.group_of(node.name)
    assert group.time_unfused_s == pytest.approx(t) and group.time_fused_s == pytest.approx(t)
    graph = infer_shapes(load(onnx.parser.parse_model(ON_CHIP))).graph
    gap = Bounder(graph, count_costs(graph).nodes, CHIP, {}, residency="cold").of([node.name])
    assert gap.bytes == moved and gap.dram_bytes == dram and gap.bound_s == pytest.approx(t)
