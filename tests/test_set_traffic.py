"""One set-traffic convention (``passes/_storage.py``): a fusion group and a gap row over the same nodes move
the same bytes and get the same ``kernel_bound`` (issue 12, item 1).

The defect this pins: a view inside a group that reads a graph input made the fusion section count the input's
bytes as on chip (the group's ``inputs`` name the view's output, an activation), while the gap's set bound read
through the view to the graph input and charged it at DRAM: one node set, two bounds.
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
from graphcost.passes.fusion import fuse, fusion_section
from graphcost.passes.shapes import infer_shapes

FP32 = 4
N = 1024  # elements of every tensor
PEAK, DRAM, ONCHIP, CAPACITY = 1e12, 10e9, 100e9, 1 << 20  # FLOP/s, B/s, B/s, B (one 1 MiB on-chip level)
HW = HardwareSpec("one-level", {"float32": PEAK}, DRAM, onchip_bytes=CAPACITY, onchip_bandwidth=ONCHIP)

# x is a graph input read through a Reshape inside the group; a stays inside; z is the graph output
VIEWED_INPUT = f"""<ir_version: 8, opset_import: ["" : 17]>
g (float[4,256] x, float[{N}] b) => (float[{N}] z) <int64[1] flat = {{{N}}}> {{
    v = Reshape(x, flat)
    a = Add(v, b)
    z = Relu(a)
}}"""

# three elementwise nodes: a gap row over the first two writes b, an activation the third reads back
CHAIN = f"""<ir_version: 8, opset_import: ["" : 17]>
g (float[{N}] x) => (float[{N}] y) {{
    a = Relu(x)
    b = Neg(a)
    y = Relu(b)
}}"""


def _both(text: str, residency: str):  # type: ignore[no-untyped-def]
    graph = infer_shapes(load(onnx.parser.parse_model(text))).graph
    costs = count_costs(graph)
    result = fuse(graph, costs)
    section = fusion_section(result, HW, {}, residency=residency)
    return result, section, Bounder(graph, costs.nodes, HW, {}, residency=residency)


@pytest.mark.parametrize("residency", ["cold", "warm"])
def test_a_group_and_a_gap_row_over_the_same_nodes_agree(residency: str) -> None:
    result, section, bounder = _both(VIEWED_INPUT, residency)
    (group,) = result.groups  # Reshape, Add and Relu fuse into one kernel
    (kernel,) = section.kernels
    row = bounder.of(group.nodes)
    moved = 3 * FP32 * N  # read x (through the view) and b, write z; v and a never leave the kernel
    assert group.bytes_fused == row.bytes == kernel.bytes == moved
    # cold: x and b are graph inputs, z the graph output — nothing may already be on chip; warm: all of it
    dram = moved if residency == "cold" else 0
    assert kernel.dram_bytes == row.dram_bytes == dram
    assert kernel.memory_s == row.memory_s == pytest.approx(max(dram / DRAM, moved / ONCHIP))
    assert kernel.compute_s == row.compute_s == pytest.approx(2 * N / PEAK)  # one add and one max per element
    assert kernel.time_s == row.bound_s


def test_a_gap_row_over_part_of_a_group_is_the_crossing_of_that_part() -> None:
    result, _, bounder = _both(CHAIN, "cold")
    relu, neg, _ = (n.name for n in result.graph.nodes())
    storage = Storage.of(result.graph)
    part = storage.crossing({relu, neg})
    assert [t for t, _, _ in part.reads] == ["x"] and [t for t, _, _ in part.writes] == ["b"]
    assert part.bytes == bounder.of([relu, neg]).bytes == 2 * FP32 * N  # x in, b out
    # b is an activation that the next node reads back: cold residency lets it stay on chip (1 MiB fits)
    assert bounder.of([relu, neg]).dram_bytes == FP32 * N  # only x crosses DRAM


def test_a_node_reading_a_view_of_a_graph_input_has_one_bound_in_nodes_fusion_and_gap() -> None:
    # regression: report.nodes counted the view v (an activation by kind) as on chip, though its storage is x
    report = analyze(onnx.parser.parse_model(VIEWED_INPUT), hardware=HW, fusion_policy="none")
    add = next(n for n in report.nodes if n.op_type == "Add")
    graph = infer_shapes(load(onnx.parser.parse_model(VIEWED_INPUT))).graph
    gap = Bounder(graph, count_costs(graph).nodes, HW, {}, residency="cold").of([add.name])
    moved = 3 * FP32 * N  # read v (x's storage) and b, write a
    dram = 2 * FP32 * N  # cold: x and b are graph inputs; only a, which Relu reads back, may stay on chip
    assert gap.bytes == moved and gap.dram_bytes == dram
    assert add.dram_bytes == dram
    t = max(dram / DRAM, moved / ONCHIP)
    assert add.roofline_time_s == pytest.approx(t)
    assert report.fusion is not None
    assert report.fusion.group_of(add.name).time_unfused_s == pytest.approx(t)
    assert gap.bound_s == pytest.approx(t)
