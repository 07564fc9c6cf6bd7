"""Checks shared by the real-export tests (torchvision/YOLO/If in ``test_real_exports.py``, paddle2onnx in
``test_paddle_exports.py``): what "every standard op costed" and "every shape resolved" mean there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

STANDARD_DOMAINS = ("ai.onnx", "ai.onnx.ml", "")


def assert_no_unknown_standard_op(r: Any) -> None:
    unknown: dict[str, list[str]] = {}
    for n in r.nodes:
        if n.flops is None and (n.domain or "") in STANDARD_DOMAINS:
            unknown.setdefault(n.op_type, []).append(f"{n.name}: {n.unknown_reason}")
    summary = "; ".join(f"{op} x{len(v)} (e.g. {v[0]})" for op, v in sorted(unknown.items()))
    assert not unknown, f"standard-domain nodes without a cost: {summary}"


def sequence_values(path: Path) -> set[str]:
    """Values of sequence type (onnx's inference says which): a sequence has no tensor shape to resolve, its
    elements do (MViT's ``tensor_split`` exports as SequenceEmpty -> Loop(SequenceInsert) -> SequenceAt)."""
    import onnx

    from graphcost.graph import graph_protos

    inferred = onnx.shape_inference.infer_shapes(onnx.load(str(path), load_external_data=False))
    return {vi.name for g in graph_protos(inferred.graph) for vi in (*g.input, *g.value_info, *g.output)
            if vi.type.HasField("sequence_type")}
