"""Convolutions: Conv (1-D, 2-D, 3-D, grouped, depthwise) and ConvTranspose.

Conv FLOPs = 2·N·Cout·∏out_spatial·(Cin/group)·∏kernel, plus N·Cout·∏out_spatial with a bias.
"""

from __future__ import annotations

from graphcost._dims import numel, prod
from graphcost.ops._registry import FLOPS_PER_MAC, Kind, NodeView, Work, rule


@rule("Conv", kind=Kind.COMPUTE)
def conv(n: NodeView) -> Work:
    w = n.in_shape(1)  # [Cout, Cin/group, k1, k2, ...]
    out = n.out_numel(0)  # N·Cout·∏out_spatial
    macs = out * w[1] * prod(w[2:])  # each output element: a dot product over Cin/group·∏kernel
    bias = out if n.has_input(2) else 0  # one add per output element
    return Work(flops=FLOPS_PER_MAC * macs + bias, macs=macs)


@rule("ConvTranspose", kind=Kind.COMPUTE)
def conv_transpose(n: NodeView) -> Work:
    """Each input element scatters into Cout/group·∏kernel outputs, one MAC each."""
    w = n.in_shape(1)  # [Cin, Cout/group, k1, k2, ...]
    macs = numel(n.in_shape(0)) * w[1] * prod(w[2:])  # N·Cin·∏in_spatial·(Cout/group)·∏kernel
    bias = n.out_numel(0) if n.has_input(2) else 0  # one add per output element
    return Work(flops=FLOPS_PER_MAC * macs + bias, macs=macs)
