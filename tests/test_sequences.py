"""Sequence values (``passes/_sequences.py``): their bytes are their elements', and the ops that build and read
them move no tensor data in the ideal (``graphcost/ops/misc.py``), the copies onnxruntime makes beside it.

The defect this pins: a sequence had no size, so MViT-B's 152 sequence values were "counted as 0 bytes" by the
memory pass and its 228 sequence ops and their Loops had unknown bytes (152 fusion groups unknown)."""

from __future__ import annotations

import onnx.parser
from test_specialize import SPLIT_LOOP

import graphcost
from graphcost.load import load
from graphcost.passes.shapes import infer_shapes

FP32, I64 = 4, 8
TOKEN = 1 * 1 * 96 * FP32  # x[:, 0:1, :]
REST = 1 * 196 * 96 * FP32  # x[:, 1:197, :]

# torch.tensor_split(x, [1], dim=1) as the legacy exporter writes it
SPLIT = SPLIT_LOOP.replace("TRIPS", "1")

BUILT = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[8,16] a, float[4,16] b) => (float[12,16] joined, float[8,16] first) {
  s = SequenceConstruct(a, b)
  k = Constant<value = int64 {0}>()
  first = SequenceAt(s, k)
  split = SplitToSequence<axis = 0>(a)
  joined = ConcatFromSequence<axis = 0>(s)
}
"""


def _graph(text: str):  # type: ignore[no-untyped-def]
    return infer_shapes(load(onnx.parser.parse_model(text))).graph


def test_a_tensor_split_sequence_is_sized_from_its_loop_and_inserts() -> None:
    graph = _graph(SPLIT)
    assert graph.tensor("empty").nbytes == 0
    assert graph.tensor("parts").nbytes == 0 + 1 * TOKEN  # one trip, each adding one token
    assert graph.tensor("all").nbytes == TOKEN + REST


def test_sequence_ops_move_nothing_in_the_ideal_and_say_the_copies_beside_it() -> None:
    report = graphcost.analyze(onnx.parser.parse_model(SPLIT))
    assert not any("0 bytes" in w.message or "not counted" in w.message for w in report.warnings)
    rows = {n.name: n for n in report.nodes}
    head = next(n for n in report.nodes if n.op_type == "SequenceAt")
    assert (head.bytes_read, head.bytes_written) == (0, 0)
    assert head.bytes_as_written == (TOKEN + REST) + I64 + TOKEN  # read the sequence and the index, write piece 0
    insert = next(n for n in report.nodes if n.op_type == "SequenceInsert" and n.depth == 0)
    assert insert.bytes_as_written == TOKEN + REST + (TOKEN + REST)  # read parts and rest, write all
    loop = next(n for n in report.nodes if n.op_type == "Loop")
    assert loop.bytes_read is not None and loop.bytes_written is not None  # its body's bytes are all known now
    assert report.fusion is not None and report.fusion.totals.unknown_groups == 0
    for name in (head.name, insert.name):  # no kernel: the groups they sit in never read a sequence
        assert rows[name].fusion_group is None or "all" not in report.fusion.group_of(name).inputs


def test_sequences_built_whole_are_the_sum_of_their_elements() -> None:
    graph = _graph(BUILT)
    assert graph.tensor("s").nbytes == (8 + 4) * 16 * FP32
    assert graph.tensor("split").nbytes == 8 * 16 * FP32  # the pieces cover a
    report = graphcost.analyze(onnx.parser.parse_model(BUILT))
    concat = next(n for n in report.nodes if n.op_type == "ConcatFromSequence")
    assert concat.bytes_read == (8 + 4) * 16 * FP32 and concat.bytes_written == 12 * 16 * FP32  # a real copy


def test_a_loop_whose_trips_are_data_leaves_its_sequence_unknown_and_says_so() -> None:
    text = SPLIT.replace("(float[1,197,96] x,", "(int64 trips, float[1,197,96] x,").replace(
        "  trips = Constant<value = int64 {1}>()\n", "")
    graph = _graph(text)
    assert graph.tensor("parts").nbytes is None and graph.tensor("all").nbytes is None
    report = graphcost.analyze(onnx.parser.parse_model(text), dims={})
    assert any("unknown size" in w.message for w in report.warnings)  # unknown, never zero


def test_a_loop_that_may_stop_early_is_not_sized() -> None:
    graph = _graph(SPLIT.replace("c2 = Identity(go)", "c2 = Less(i, one)"))
    assert graph.tensor("parts").nbytes is None
