"""Recurrent layers: LSTM, GRU, RNN (ai.onnx).

The cost of a recurrent node is the cost of one cell evaluation times the number of cell
evaluations, ``seq_length · batch_size · num_directions``. Shapes come from the inputs:
X is ``[seq, batch, input]`` (``layout=1``: ``[batch, seq, input]``), W is
``[dirs, gates·hidden, input]`` and R is ``[dirs, gates·hidden, hidden]``. Every time step is
costed, even where ``sequence_lens`` stops a sequence early: the count is an upper bound.

One cell, per batch element and direction, following the formulas of the ONNX spec (G gates of
``hidden`` elements each; ``⊙`` is an elementwise product)::

    gates = X_t·W^T + H_{t-1}·R^T [+ Wb + Rb]       input·G·hidden + hidden·G·hidden MACs
                                                     (the sum of the two products is the
                                                     accumulation of the second: no extra add)
                                                     bias: 2 adds per gate element
    [clip]                                           1 op per gate element
    f(gates)                                         1 op per gate element (any activation)

    LSTM (G = 4, gates i, o, f, c):
      [peepholes] P_i⊙C_{t-1}, P_f⊙C_{t-1}, P_o⊙C_t  1 mul + 1 add each: 6 per hidden element
      C_t = f_t⊙C_{t-1} + i_t⊙c_t                   2 mul + 1 add
      H_t = o_t⊙h(C_t)                               1 activation + 1 mul
      (``input_forget`` swaps f_t's activation for 1 − i_t: one op either way, no change)
    GRU (G = 3, gates z, r, h):
      linear_before_reset = 0: (r_t⊙H_{t-1})·Rh^T    1 mul (the product is in the MACs)
      linear_before_reset = 1: r_t⊙(H_{t-1}·Rh^T + Rbh), then + X_t·Wh^T
                                                     1 mul + 1 add (this add is not an
                                                     accumulation: r_t sits between)
      H_t = (1 − z_t)⊙h_t + z_t⊙H_{t-1}              1 sub + 2 mul + 1 add
    RNN (G = 1): H_t is the activated gate itself.

Copying H_t into Y, Y_h and Y_c moves data and computes nothing.

com.microsoft DynamicQuantizeLSTM (onnxruntime's ``quantize_dynamic`` of an LSTM) is the same cell with int8
weights. Its inputs are LSTM's eight, then W_scale, W_zero_point, R_scale, R_zero_point; it has no ``layout``
(X is ``[seq, batch, input]``) and its weights are stored transposed, W ``[dirs, input, 4·hidden]`` and R
``[dirs, hidden, 4·hidden]``. onnxruntime runs each of the two products as a dynamically quantized integer
GEMM, so beside the float cell (the same MACs, counted the same way) every operand is quantized on the fly
and every product scaled back to float, with the per-element counts of ``quantized``::

    X, once per direction (seq·batch·input)       range (2) + quantize (2) + its zero point (1) per element
    H_{t-1}, every cell (hidden)                   range (2) + quantize (2) + its zero point (1) per element
    W and R, once per run (all their elements)     their zero point (1) per element
    both products, every cell (2·4·hidden)         int32 accumulator · (a_scale·w_scale) (1) per element
"""

from __future__ import annotations

from graphcost._dims import Dim
from graphcost.ops._registry import FLOPS_PER_MAC, Kind, NodeView, Work, rule
from graphcost.ops.quantized import (
    MINMAX_FLOPS_PER_ELEMENT,
    QUANTIZE_FLOPS_PER_ELEMENT,
    TO_FLOAT_FLOPS_PER_ELEMENT,
    ZERO_POINT_FLOPS_PER_ELEMENT,
)

LSTM_GATES = 4  # input, output, forget, cell
GRU_GATES = 3  # update, reset, hidden
RNN_GATES = 1


def _projections(input_size: Dim, hidden: Dim, gates: int) -> Dim:
    """MACs of X_t·W^T + H_{t-1}·R^T for one batch element: a dot product per gate element."""
    return input_size * gates * hidden + hidden * gates * hidden  # input + recurrent projection


def _gate_ops(hidden: Dim, gates: int, *, bias: bool, clip: bool) -> Dim:
    """Elementwise work on the pre-activations common to every cell."""
    gate_elems = gates * hidden
    return (
        (2 * gate_elems if bias else 0)  # + Wb + Rb: two adds per gate element
        + (gate_elems if clip else 0)  # clip of the pre-activation
        + gate_elems  # the gate activations, one op per gate element
    )


def lstm_cell(input_size: Dim, hidden: Dim, *, bias: bool, clip: bool, peepholes: bool) -> Work:
    """One LSTM cell for one batch element and direction."""
    macs = _projections(input_size, hidden, LSTM_GATES)
    flops = (
        FLOPS_PER_MAC * macs
        + _gate_ops(hidden, LSTM_GATES, bias=bias, clip=clip)
        + (6 * hidden if peepholes else 0)  # P_i⊙C_{t-1}, P_f⊙C_{t-1}, P_o⊙C_t: a mul and an add each
        + 3 * hidden  # C_t = f_t⊙C_{t-1} + i_t⊙c_t: two muls and an add
        + 2 * hidden  # H_t = o_t⊙h(C_t): the activation h and a mul
    )
    return Work(flops=flops, macs=macs)


def gru_cell(input_size: Dim, hidden: Dim, *, bias: bool, clip: bool, linear_before_reset: bool) -> Work:
    """One GRU cell for one batch element and direction."""
    macs = _projections(input_size, hidden, GRU_GATES)
    reset = (
        2 * hidden  # r_t⊙(H_{t-1}·Rh^T + Rbh): a mul, then the add to X_t·Wh^T that is no accumulation
        if linear_before_reset
        else hidden  # r_t⊙H_{t-1} before the Rh projection: a mul
    )
    flops = (
        FLOPS_PER_MAC * macs
        + _gate_ops(hidden, GRU_GATES, bias=bias, clip=clip)
        + reset
        + 4 * hidden  # H_t = (1 − z_t)⊙h_t + z_t⊙H_{t-1}: a sub, two muls and an add
    )
    return Work(flops=flops, macs=macs)


def rnn_cell(input_size: Dim, hidden: Dim, *, bias: bool, clip: bool) -> Work:
    """One simple RNN cell for one batch element and direction: H_t = f(gates)."""
    macs = _projections(input_size, hidden, RNN_GATES)
    return Work(flops=FLOPS_PER_MAC * macs + _gate_ops(hidden, RNN_GATES, bias=bias, clip=clip), macs=macs)


def _cells(n: NodeView) -> Dim:
    """Cell evaluations of the node: seq_length · batch_size · num_directions."""
    x = n.in_shape(0)
    seq, batch = (x[1], x[0]) if n.attr("layout", 0) else (x[0], x[1])  # layout=1: batch-major X
    dirs = 2 if n.attr("direction", "forward") == "bidirectional" else 1  # forward / reverse: 1
    return seq * batch * dirs


def _sizes(n: NodeView) -> tuple[Dim, Dim]:
    """input_size from W [dirs, gates·hidden, input], hidden_size from R [dirs, gates·hidden, hidden]."""
    return n.in_shape(1)[2], n.in_shape(2)[2]


def _times(cell: Work, cells: Dim) -> Work:
    return Work(flops=cells * cell.flops, macs=cells * cell.macs)


def _clip(n: NodeView) -> bool:
    return n.attr("clip") is not None  # no schema default: absent means no clipping


@rule("LSTM", kind=Kind.RECURRENT)
def lstm(n: NodeView) -> Work:
    input_size, hidden = _sizes(n)
    cell = lstm_cell(input_size, hidden, bias=n.has_input(3), clip=_clip(n), peepholes=n.has_input(7))
    return _times(cell, _cells(n))


@rule("GRU", kind=Kind.RECURRENT)
def gru(n: NodeView) -> Work:
    input_size, hidden = _sizes(n)
    cell = gru_cell(input_size, hidden, bias=n.has_input(3), clip=_clip(n),
                    linear_before_reset=bool(n.attr("linear_before_reset", 0)))
    return _times(cell, _cells(n))


@rule("RNN", kind=Kind.RECURRENT)
def rnn(n: NodeView) -> Work:
    input_size, hidden = _sizes(n)
    return _times(rnn_cell(input_size, hidden, bias=n.has_input(3), clip=_clip(n)), _cells(n))


MS = "com.microsoft"
DYNAMIC_QUANTIZE_FLOPS_PER_ELEMENT = (MINMAX_FLOPS_PER_ELEMENT + QUANTIZE_FLOPS_PER_ELEMENT
                                      + ZERO_POINT_FLOPS_PER_ELEMENT)
"""An activation quantized on the fly: its range, the quantization, then (x − zero point) in the product."""


def dynamic_quantize_lstm_work(seq: Dim, batch: Dim, dirs: int, input_size: Dim, hidden: Dim, weights: Dim, *,
                               bias: bool, clip: bool, peepholes: bool) -> Work:
    """DynamicQuantizeLSTM over the whole sequence: the float LSTM's cells plus the quantization around its
    two integer products (``weights``: elements of W and R together, each with its zero point once)."""
    cells = seq * batch * dirs  # cell evaluations, as for LSTM
    cell = lstm_cell(input_size, hidden, bias=bias, clip=clip, peepholes=peepholes)
    quantize = (
        DYNAMIC_QUANTIZE_FLOPS_PER_ELEMENT * dirs * seq * batch * input_size  # X, quantized for each direction
        + DYNAMIC_QUANTIZE_FLOPS_PER_ELEMENT * cells * hidden  # H_{t-1}, quantized before every recurrent product
        + ZERO_POINT_FLOPS_PER_ELEMENT * weights  # (W − W_zero_point), (R − R_zero_point), once per run
        + TO_FLOAT_FLOPS_PER_ELEMENT * cells * 2 * LSTM_GATES * hidden  # both products scaled back to float
    )
    return _times(cell, cells) + Work(flops=quantize)


@rule("DynamicQuantizeLSTM", domain=MS, kind=Kind.RECURRENT)
def dynamic_quantize_lstm(n: NodeView) -> Work:
    """Inputs: X [seq, batch, input], W [dirs, input, 4·hidden], R [dirs, hidden, 4·hidden], B, sequence_lens,
    initial_h, initial_c, P, W_scale, W_zero_point, R_scale, R_zero_point (onnxruntime's contrib spec)."""
    x, w, r = n.in_shape(0), n.in_shape(1), n.in_shape(2)
    dirs = 2 if n.attr("direction", "forward") == "bidirectional" else 1  # forward / reverse: 1
    return dynamic_quantize_lstm_work(x[0], x[1], dirs, w[1], r[1], n.in_numel(1) + n.in_numel(2),
                                      bias=n.has_input(3), clip=_clip(n), peepholes=n.has_input(7))
