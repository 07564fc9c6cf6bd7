"""The fusion wing's fast paths give what the general code gives: the section's kernel_bound cache (a repeated
block's groups get the bound of their own counts) and data_reads keeping a node's own input tuple."""

from __future__ import annotations

import onnx.parser
import pytest

from graphcost.hardware.spec import HardwareSpec
from graphcost.load import load
from graphcost.passes._fusion_roles import classify_all
from graphcost.passes._storage import data_reads_all
from graphcost.passes.costs import count_costs
from graphcost.passes.fusion import fuse, fusion_section
from graphcost.passes.shapes import infer_shapes

EDGE = HardwareSpec("edge", {"float32": 2e12, "float16": 4e12}, 50e9)  # 2/4 TFLOP/s, 50 GB/s, no on-chip levels
FP32, FP16 = 4, 2  # bytes per element

# Two Transposes (each a kernel of its own) of the same shape and dtype, then one in float16 of the same size in
# bytes: the first two ask kernel_bound the same question, the third differs only in dtype.
REPEATED = """<ir_version: 8, opset_import: ["" : 17]>
g (float[4,8] x, float16[8,8] h) => (float[4,8] y, float16[8,8] z) {
  a = Transpose <perm = [1,0]> (x)
  y = Transpose <perm = [1,0]> (a)
  s = Sigmoid (h)
  z = Transpose <perm = [1,0]> (s)
}"""


def test_repeated_groups_get_the_bound_of_their_own_counts() -> None:
    graph = infer_shapes(load(onnx.parser.parse_model(REPEATED))).graph
    sec = fusion_section(fuse(graph, count_costs(graph)), EDGE, {})
    t1, t2, sig, t3 = sec.groups
    assert (t1.nodes, t2.nodes, sig.nodes, t3.nodes) == (("Transpose_0",), ("Transpose_1",), ("Sigmoid_2",),
                                                         ("Transpose_3",))
    moved32 = 4 * 8 * FP32 + 4 * 8 * FP32  # a Transpose reads its input and writes its output once: 256 B
    moved16 = 8 * 8 * FP16 + 8 * 8 * FP16  # the float16 one: 256 B too
    assert t1.bytes_fused == t2.bytes_fused == moved32 == t3.bytes_fused == moved16 == 256
    assert t1.flops == t2.flops == t3.flops == 0  # movement: no FLOPs
    for row in (t1, t2, t3):
        assert row.time_fused_s == pytest.approx(256 / 50e9)  # memory-bound: 5.12 ns at 50 GB/s
        assert row.time_unfused_s == row.time_fused_s  # one node: its own bound
    assert sec.kernels[0] == sec.kernels[1] == sec.kernels[3]  # one question, one answer
    sig_flops = sig.flops
    assert isinstance(sig_flops, int) and sig_flops > 0
    assert sec.kernels[2].compute_s == pytest.approx(sig_flops / 4e12)  # the float16 peak, not float32's
    assert sig.time_fused_s == pytest.approx(max(sig_flops / 4e12, 256 / 50e9))  # Sigmoid moves 256 B as well


READS = """<ir_version: 8, opset_import: ["" : 17]>
g (float[4,8] x, float[4,8] w, float mx) => (float[4,8] z, float[4,8] d, float[4,8] c, float[8,4] r, int64[2] s) {
  z = Mul (x, w)
  d = Add (x, x)
  c = Clip (x, , mx)
  sh = Constant <value = int64[2] {8, 4}> ()
  r = Reshape (x, sh)
  s = Shape (x)
}"""


def test_data_reads_keep_a_plain_nodes_inputs_and_filter_the_rest() -> None:
    graph = infer_shapes(load(onnx.parser.parse_model(READS))).graph
    nodes = list(graph.nodes())
    reads = data_reads_all(graph, nodes, classify_all(graph, nodes))
    mul, add, clip, const, reshape, shape = nodes
    assert reads[mul.name] == ("x", "w") and reads[mul.name] is mul.inputs  # distinct, none omitted: its own tuple
    assert reads[add.name] == ("x",)  # the same tensor in two slots is read once
    assert reads[clip.name] == ("x", "mx")  # the omitted min is no read
    assert reads[const.name] == ()  # a free op reads nothing
    assert reads[reshape.name] == ("x", "sh")  # the registry declares no free slot for Reshape (a view reads
    # nothing in a crossing anyway: passes/_storage.py)
    assert reads[shape.name] == ()  # Shape reads only its input's shape
