"""Which shapes depend on run-time *values*, so no inference engine may state them as numbers.

An op such as Split, Squeeze or Reshape takes a shape-carrying input (split sizes, axes, target
shape). When that input is a constant, or is computed from shapes alone (Shape → Gather → Concat),
inference can know the output shape. When it carries run-time data (it traces back to a graph
input's values), the output shape is not knowable statically — and onnxruntime's symbolic inference
has been seen to guess anyway (Split assumed equal parts, Squeeze removed every 1-dim). Such outputs
are *guarded*: they get named unknown dims, and everything downstream takes only onnx's inference
(which propagates unknown dims instead of guessing).
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx

# op_type → input slots whose *values* decide the output shape.
SHAPE_SLOTS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "Slice": (1, 2, 3, 4), "Squeeze": (1,), "Unsqueeze": (1,),
    "Split": (1,), "Pad": (1, 3), "Resize": (1, 2, 3), "Upsample": (1,), "ConstantOfShape": (0,),
    "Range": (0, 1, 2), "OneHot": (1,), "TopK": (1,), "CenterCropPad": (1,), "Col2Im": (1, 2),
    "DFT": (1, 2), "STFT": (1, 3), "HannWindow": (0,), "HammingWindow": (0,), "BlackmanWindow": (0,),
    "MelWeightMatrix": (0, 1), "MaxUnpool": (2,), "AffineGrid": (1,), "SplitToSequence": (1,),
    "ReduceSum": (1,), "ReduceMean": (1,), "ReduceMax": (1,), "ReduceMin": (1,), "ReduceProd": (1,),
    "ReduceL1": (1,), "ReduceL2": (1,), "ReduceLogSum": (1,), "ReduceLogSumExp": (1,), "ReduceSumSquare": (1,),
    "Compress": (1,), "NonZero": (0,), "Unique": (0,), "NonMaxSuppression": (0, 1, 2),
    "RandomNormal": (), "RandomUniform": (),
}
# Ops whose output rank equals input 0's rank whatever the shape-carrying values are.
RANK_PRESERVING = frozenset({"Split", "Slice", "Pad", "Tile", "Resize", "Upsample", "TopK", "CenterCropPad",
                             "MaxUnpool"})
# Ops whose outputs carry values computed from shapes only, never from data.
SHAPE_ONLY_VALUES = frozenset({"Shape", "Size"})


@dataclass(frozen=True)
class DataDependence:
    guarded: dict[str, str]
    """Output tensor → op type, for outputs whose shape depends on run-time values."""
    tainted: frozenset[str]
    """Tensors downstream of a guarded output (their shapes come from onnx inference only)."""


def analyze(model: onnx.ModelProto) -> DataDependence:
    inits = {t.name for t in model.graph.initializer}
    data: set[str] = {vi.name for vi in model.graph.input if vi.name not in inits}
    guarded: dict[str, str] = {}
    tainted: set[str] = set()
    _visit(model.graph, data, guarded, tainted)
    return DataDependence(guarded, frozenset(tainted))


def _visit(graph: onnx.GraphProto, data: set[str], guarded: dict[str, str], tainted: set[str]) -> None:
    for node in graph.node:
        # subgraph bodies: their formal inputs are run-time data; they may read outer values
        for a in node.attribute:
            subs = [a.g] if a.type == onnx.AttributeProto.GRAPH else (
                list(a.graphs) if a.type == onnx.AttributeProto.GRAPHS else [])
            for sub in subs:
                inner_inits = {t.name for t in sub.initializer}
                data |= {vi.name for vi in sub.input if vi.name not in inner_inits}
                _visit(sub, data, guarded, tainted)
        ins = list(node.input)
        outs = [o for o in node.output if o]
        is_std = node.domain in ("", "ai.onnx")
        slots = SHAPE_SLOTS.get(node.op_type, ()) if is_std else ()
        if any(i < len(ins) and ins[i] and ins[i] in data for i in slots):
            for o in outs:
                guarded[o] = node.op_type
                tainted.add(o)
        elif any(i in tainted for i in ins if i):
            tainted.update(outs)
        if not (is_std and node.op_type in SHAPE_ONLY_VALUES) and any(i in data for i in ins if i):
            data.update(outs)
        elif node.op_type in ("If", "Loop", "Scan"):
            data.update(outs)  # values produced by a body are run-time data
