"""Attribute checks shared by the windowed families (convolutions and pools).

A windowed op's count is read off its output shape and its kernel, so an attribute the ONNX spec forbids
(``strides = [0, 0]``, ``group = 0``, negative pads) does not stop the arithmetic: it yields a number for an
op no runtime would run (a stride-0 Conv "costs" whatever output shape the file declares). Such a node's cost
is unknown, with the attribute named, never a number:

    strides, dilations, kernel_shape   every entry ≥ 1
    pads                               every entry ≥ 0
    group (convolutions)               ≥ 1, and dividing the input and output channels where they are known
"""

from __future__ import annotations

from collections.abc import Sequence

from graphcost._dims import Dim
from graphcost.ops._registry import NodeView, Unknown

POSITIVE = ("strides", "dilations", "kernel_shape")
"""Attributes whose every entry must be ≥ 1."""


def _ints(n: NodeView, name: str) -> Sequence[object] | None:
    value = n.node.attribute(name)  # the node's own value: a schema default is always valid
    if value is None:
        return None
    return value if isinstance(value, (list, tuple)) else [value]


def invalid_window(n: NodeView) -> Unknown | None:
    """Unknown naming the first invalid window attribute of ``n``, or None when all are valid."""
    for name in POSITIVE:
        values = _ints(n, name)
        if values is not None and not all(isinstance(v, int) and v >= 1 for v in values):
            return Unknown(f"invalid attribute {name}={list(values)}: every entry must be ≥ 1 "
                           f"(the ONNX {n.op_type} spec), so the count would be meaningless")
    pads = _ints(n, "pads")
    if pads is not None and not all(isinstance(v, int) and v >= 0 for v in pads):
        return Unknown(f"invalid attribute pads={list(pads)}: every entry must be ≥ 0 "
                       f"(the ONNX {n.op_type} spec), so the count would be meaningless")
    return None


def invalid_group(n: NodeView, channels: Sequence[tuple[str, Dim]]) -> Unknown | None:
    """Unknown when ``group`` is < 1 or does not divide one of ``channels`` ((what, count) pairs known so far)."""
    group = n.node.attribute("group")
    if group is None:
        return None
    if not isinstance(group, int) or group < 1:
        return Unknown(f"invalid attribute group={group}: must be ≥ 1 (the ONNX {n.op_type} spec), "
                       "so the count would be meaningless")
    for what, count in channels:
        if isinstance(count, int) and count % group:
            return Unknown(f"invalid attribute group={group}: it does not divide the {count} {what}, "
                           "so the count would be meaningless")
    return None
