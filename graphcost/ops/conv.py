"""Convolutions: Conv (1-D, 2-D, 3-D, grouped, depthwise), ConvTranspose, CausalConvWithState, DeformConv.

Conv FLOPs = 2·N·Cout·∏out_spatial·(Cin/group)·∏kernel, plus N·Cout·∏out_spatial with a bias.

A node whose strides, dilations, kernel_shape, pads or group the spec forbids (stride 0, group 0...) has an
unknown cost naming the attribute (``_window.py``), not the number its declared output shape would give.
"""

from __future__ import annotations

from graphcost._dims import Dim, numel, prod
from graphcost.ops._registry import FLOPS_PER_MAC, Kind, NodeView, Unknown, Work, rule
from graphcost.ops._window import invalid_group, invalid_window


def _dim(n: NodeView, i: int, axis: int) -> Dim | None:
    """Axis ``axis`` of input ``i`` when its shape is known (for the attribute checks only)."""
    t = n.inputs[i] if i < len(n.inputs) else None
    return t.shape[axis] if t is not None and t.shape is not None and len(t.shape) > axis else None


def _invalid(n: NodeView, channels: list[tuple[str, Dim | None]]) -> Unknown | None:
    """The first spec-forbidden attribute of a convolution, as an Unknown with the reason."""
    return invalid_window(n) or invalid_group(n, [(what, c) for what, c in channels if c is not None])


@rule("Conv", kind=Kind.COMPUTE)
def conv(n: NodeView) -> Work | Unknown:
    invalid = _invalid(n, [("input channels", _dim(n, 0, 1)), ("output channels", _dim(n, 1, 0))])
    if invalid is not None:
        return invalid
    w = n.in_shape(1)  # [Cout, Cin/group, k1, k2, ...]
    out = n.out_numel(0)  # N·Cout·∏out_spatial
    macs = out * w[1] * prod(w[2:])  # each output element: a dot product over Cin/group·∏kernel
    bias = out if n.has_input(2) else 0  # one add per output element
    return Work(flops=FLOPS_PER_MAC * macs + bias, macs=macs)


@rule("ConvTranspose", kind=Kind.COMPUTE)
def conv_transpose(n: NodeView) -> Work | Unknown:
    """Each input element scatters into Cout/group·∏kernel outputs, one MAC each."""
    invalid = _invalid(n, [("input channels", _dim(n, 0, 1))])
    if invalid is not None:
        return invalid
    w = n.in_shape(1)  # [Cin, Cout/group, k1, k2, ...]
    macs = numel(n.in_shape(0)) * w[1] * prod(w[2:])  # N·Cin·∏in_spatial·(Cout/group)·∏kernel
    bias = n.out_numel(0) if n.has_input(2) else 0  # one add per output element
    return Work(flops=FLOPS_PER_MAC * macs + bias, macs=macs)


# --- convolution variants: the causal depthwise conv of state-space models, deformable conv ---------


@rule("CausalConvWithState", kind=Kind.COMPUTE)
def causal_conv_with_state(n: NodeView) -> Work:
    """Depthwise causal 1-D conv: k MACs per output, + bias, + SiLU (1, an activation) if asked."""
    out = n.out_numel(0)  # B · C · L
    macs = out * n.in_shape(1)[2]  # weight [C, 1, k]
    bias = out if n.has_input(2) else 0
    act = out if str(n.attr("activation", "none")) != "none" else 0
    return Work(flops=FLOPS_PER_MAC * macs + bias + act, macs=macs)


@rule("DeformConv", kind=Kind.COMPUTE)
def deform_conv(n: NodeView) -> Work | Unknown:
    """Conv over bilinearly sampled inputs.

    Sampling: every (n, c, output position, kernel tap) reads one sample of 2^r weighted taps (MACs),
    at a position shifted by its offset (1 add per offset element), times the mask (1) if given.
    Then the convolution proper: out · (C/group) · ∏kernel MACs, + bias.
    """
    invalid = _invalid(n, [("input channels", _dim(n, 0, 1)), ("output channels", _dim(n, 1, 0))])
    if invalid is not None:
        return invalid
    x, w, y = n.in_shape(0), n.in_shape(1), n.out_shape(0)
    r = len(x) - 2
    taps = prod(w[2:])
    samples = x[0] * x[1] * prod(y[2:]) * taps  # N · C · ∏out_spatial · ∏kernel
    sample_macs = samples * 2**r  # bilinear (2-D) / trilinear (3-D) interpolation
    conv_macs = numel(y) * w[1] * taps  # the convolution on the sampled columns
    macs = sample_macs + conv_macs
    flops = FLOPS_PER_MAC * macs + n.in_numel(2)  # + offset adds
    flops += samples if n.has_input(4) else 0  # · mask
    flops += numel(y) if n.has_input(3) else 0  # + bias
    return Work(flops=flops, macs=macs)
