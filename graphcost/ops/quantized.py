"""Quantized ops: integer products (ai.onnx and com.microsoft), (de)quantization, and the QLinear*
elementwise ops onnxruntime's quantizer writes.

Per-element counts, named once::

    QUANTIZE_FLOPS_PER_ELEMENT = 2    x / scale (1) + zero point (1); round and saturate are the
                                      float→int conversion, free as Cast is
    DEQUANTIZE_FLOPS_PER_ELEMENT = 2  (x − zero point) (1) · scale (1)
    REQUANTIZE_FLOPS_PER_ELEMENT = 2  int32 accumulator · (x_scale·w_scale / y_scale) (1) + y_zero_point (1):
                                      QuantizeLinear of the accumulator by the combined scale
    TO_FLOAT_FLOPS_PER_ELEMENT = 1    int32 accumulator · (a_scale·b_scale) for products that return float
    ZERO_POINT_FLOPS_PER_ELEMENT = 1  (A − a_zero_point): one subtract per element of every operand
                                      whose zero-point input is given
    MINMAX_FLOPS_PER_ELEMENT = 2      DynamicQuantizeLinear's range: a running min and a running max

Integer products (QLinearConv, QLinearMatMul, MatMulInteger, ConvInteger, QGemm...) count the MACs
of their float counterparts. The spec writes zero points as ``(A − a_zp)·(B − b_zp)``; the bound is the
ideal, so an operand's zero point costs, per run::

    zero point omitted, or a constant 0               nothing (there is nothing to subtract)
    constant operand (a weight), constant zero point  nothing per run: B − b_zp is a load-time transform,
                                                      like folding, done once when the weight is packed
    otherwise (an activation; a zero point that is    ZERO_POINT_FLOPS_PER_ELEMENT per operand element
    not a constant)

The graph as written subtracts every weight element each run; the node's note says how many subtracts
the ideal does not charge. Kernels fold the activation side into row/column-sum corrections of the same
order; the count is the reference one. Scalar work on the quantization parameters themselves (O(1) or
O(channels)) is not counted.

The com.microsoft QLinear elementwise ops (QLinearAdd, QLinearSigmoid, QLinearAveragePool...) are
costed as their definition: DequantizeLinear of every input element, the float op's own count,
QuantizeLinear of every output element. onnxruntime runs some of them through 256-entry lookup
tables or in fixed point, which is cheaper; this is the reference count, not the kernel's.

QLinearConv and ConvInteger whose strides, dilations, kernel_shape, pads or group the spec forbids have an
unknown cost naming the attribute (``_window.py``), as Conv has. com.microsoft QLinearConv may be NHWC
(``channels_last = 1``, which onnxruntime's NHWC transformer sets): the channel axis is then the last one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graphcost._dims import Dim, numel, prod, to_text
from graphcost.ops._registry import FLOPS_PER_MAC, Kind, NodeView, Unknown, Work, rule
from graphcost.ops._window import invalid_group, invalid_window
from graphcost.ops.linalg import matmul_macs
from graphcost.ops.microsoft import (
    MS,
    SOFTMAX_FLOPS_PER_ELEMENT,
    attention_core,
    embed_layer_norm,
    exact_div,
    window_ops,
)
from graphcost.ops.movement import capped

QUANTIZE_FLOPS_PER_ELEMENT = 2
DEQUANTIZE_FLOPS_PER_ELEMENT = 2
REQUANTIZE_FLOPS_PER_ELEMENT = QUANTIZE_FLOPS_PER_ELEMENT
TO_FLOAT_FLOPS_PER_ELEMENT = 1
ZERO_POINT_FLOPS_PER_ELEMENT = 1
MINMAX_FLOPS_PER_ELEMENT = 2


def conv_macs(w: tuple[Dim, ...], out: Dim) -> Dim:
    """Conv MACs from W [Cout, Cin/group, k...]: each output element is a Cin/group·∏kernel dot product."""
    return out * w[1] * prod(w[2:])


@dataclass(frozen=True, slots=True)
class ZeroPoints:
    """Per-run zero-point subtracts (``flops``), and those the graph as written does that the ideal hoists."""

    flops: Dim = 0
    hoisted: Dim = 0

    def __add__(self, other: ZeroPoints) -> ZeroPoints:
        return ZeroPoints(self.flops + other.flops, self.hoisted + other.hoisted)

    @property
    def note(self) -> str:
        if isinstance(self.hoisted, int) and self.hoisted == 0:
            return ""
        return (f"constant weight zero point: {to_text(self.hoisted)} subtracts done at load time, "
                "not per run (as written they are per run)")


def _is_const_zero(value: np.ndarray | None) -> bool:
    return value is not None and not np.any(value)


def _zero_points(n: NodeView, *pairs: tuple[int, int]) -> ZeroPoints:
    """(operand − zero point) per run, for each (zero-point input, operand input) pair (module docstring)."""
    total = ZeroPoints()
    for zp, operand in pairs:
        if not n.has_input(zp):
            continue  # omitted: a zero point of 0
        value = n.const_value(zp) if n.is_constant(zp) else None
        if _is_const_zero(value):
            continue  # a constant 0: nothing to subtract
        subtracts = ZERO_POINT_FLOPS_PER_ELEMENT * n.in_numel(operand)  # one per operand element
        if value is not None and n.is_constant(operand):
            total = total + ZeroPoints(hoisted=subtracts)  # B − b_zp folded into the weight at load time
        else:
            total = total + ZeroPoints(flops=subtracts)
    return total


def _integer_product(macs: Dim, zero_points: ZeroPoints, *, out: Dim = 0, bias: bool = False,
                     output_flops: int = 0) -> Work:
    """An integer product: its MACs, the zero-point subtracts, an optional int32 bias and output scaling."""
    return Work(flops=(
        FLOPS_PER_MAC * macs
        + zero_points.flops
        + (out if bias else 0)  # + bias: one add per output element
        + output_flops * out  # requantize to int8, or scale to float
    ), macs=macs, note=zero_points.note)


# ----------------------------------------------------------------- integer products


def _known_dim(n: NodeView, i: int, axis: int) -> Dim | None:
    """Axis ``axis`` of input ``i`` when its shape is known (for the attribute checks only)."""
    t = n.inputs[i] if i < len(n.inputs) else None
    return t.shape[axis] if t is not None and t.shape is not None and len(t.shape) > abs(axis) else None


def _invalid_conv(n: NodeView, x: int, w: int) -> Unknown | None:
    """The first spec-forbidden window or group attribute of an integer convolution (x, w: input slots)."""
    channel_axis = -1 if n.attr("channels_last", 0) else 1  # NHWC com.microsoft QLinearConv: channels last
    channels = [("input channels", _known_dim(n, x, channel_axis)), ("output channels", _known_dim(n, w, 0))]
    return invalid_window(n) or invalid_group(n, [(what, c) for what, c in channels if c is not None])


@rule("QLinearConv", domain=MS, kind=Kind.COMPUTE)
@rule("QLinearConv", kind=Kind.COMPUTE)
def qlinear_conv(n: NodeView) -> Work | Unknown:
    """Inputs: x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B."""
    invalid = _invalid_conv(n, 0, 3)
    if invalid is not None:
        return invalid
    out = n.out_numel(0)
    return _integer_product(conv_macs(n.in_shape(3), out), _zero_points(n, (2, 0), (5, 3)), out=out,
                            bias=n.has_input(8), output_flops=REQUANTIZE_FLOPS_PER_ELEMENT)


@rule("ConvInteger", kind=Kind.COMPUTE)
def conv_integer(n: NodeView) -> Work | Unknown:
    """Inputs: x, w, x_zero_point, w_zero_point; int32 output, no rescale."""
    invalid = _invalid_conv(n, 0, 1)
    if invalid is not None:
        return invalid
    return _integer_product(conv_macs(n.in_shape(1), n.out_numel(0)), _zero_points(n, (2, 0), (3, 1)))


@rule("QLinearMatMul", kind=Kind.COMPUTE)
def qlinear_matmul(n: NodeView) -> Work:
    """Inputs: a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point."""
    out = n.out_shape(0)
    return _integer_product(matmul_macs(n.in_shape(0), n.in_shape(3), out), _zero_points(n, (2, 0), (5, 3)),
                            out=numel(out), output_flops=REQUANTIZE_FLOPS_PER_ELEMENT)


@rule("MatMulInteger", kind=Kind.COMPUTE)
def matmul_integer(n: NodeView) -> Work:
    """Inputs: A, B, a_zero_point, b_zero_point; int32 output."""
    macs = matmul_macs(n.in_shape(0), n.in_shape(1), n.out_shape(0))
    return _integer_product(macs, _zero_points(n, (2, 0), (3, 1)))


@rule("MatMulIntegerToFloat", domain=MS, kind=Kind.COMPUTE)
def matmul_integer_to_float(n: NodeView) -> Work:
    """Inputs: A, B, a_scale, b_scale, a_zero_point, b_zero_point, bias; float output."""
    out = n.out_shape(0)
    return _integer_product(matmul_macs(n.in_shape(0), n.in_shape(1), out), _zero_points(n, (4, 0), (5, 1)),
                            out=numel(out), bias=n.has_input(6), output_flops=TO_FLOAT_FLOPS_PER_ELEMENT)


@rule("DynamicQuantizeMatMul", domain=MS, kind=Kind.COMPUTE)
def dynamic_quantize_matmul(n: NodeView) -> Work:
    """Quantize float A on the fly (DynamicQuantizeLinear), then MatMulIntegerToFloat with int8 B.

    Inputs: A, B, b_scale, b_zero_point, bias. A's computed zero point is always subtracted.
    """
    out = n.out_shape(0)
    a = n.in_numel(0)
    quantize_a = (MINMAX_FLOPS_PER_ELEMENT + QUANTIZE_FLOPS_PER_ELEMENT) * a  # range of A, then quantize it
    zero_points = ZeroPoints(flops=ZERO_POINT_FLOPS_PER_ELEMENT * a) + _zero_points(n, (3, 1))  # A's, B's
    product = _integer_product(matmul_macs(n.in_shape(0), n.in_shape(1), out), zero_points, out=numel(out),
                               bias=n.has_input(4), output_flops=TO_FLOAT_FLOPS_PER_ELEMENT)
    return product + Work(flops=quantize_a)


@rule("QGemm", domain=MS, kind=Kind.COMPUTE)
def qgemm(n: NodeView) -> Work:
    """Inputs: A, a_scale, a_zero_point, B, b_scale, b_zero_point, C, y_scale, y_zero_point.

    Without y_scale the output is float (scaled, not requantized).
    """
    a, out = n.in_shape(0), n.out_numel(0)
    k = a[0] if n.attr("transA", 0) else a[1]  # contracted dim of op(A)
    alpha = out if n.attr("alpha", 1.0) != 1.0 else 0  # alpha·(AB): one multiply per output
    scaling = REQUANTIZE_FLOPS_PER_ELEMENT if n.has_input(7) else TO_FLOAT_FLOPS_PER_ELEMENT
    product = _integer_product(out * k, _zero_points(n, (2, 0), (5, 3)), out=out, bias=n.has_input(6),
                               output_flops=scaling)
    return product + Work(flops=alpha)


@rule("QAttention", domain=MS, kind=Kind.COMPUTE)
def qattention(n: NodeView) -> Work | Unknown:
    """Attention whose QKV projection is an integer product scaled back to float.

    Inputs: input, weight [hidden, 3·hidden], bias, input_scale, weight_scale, mask_index,
    input_zero_point, weight_zero_point, past [2, B, N, P, head_size].
    """
    heads = n.attr("num_heads")
    if not heads:
        return Unknown("QAttention without num_heads")
    x, w = n.in_shape(0), n.in_shape(1)
    batch, seq = x[0], x[1]
    projected = batch * seq * w[1]  # Q, K and V elements
    proj = _integer_product(matmul_macs(x, w, (batch, seq, w[1])), _zero_points(n, (6, 0), (7, 1)),
                            out=projected, bias=n.has_input(2), output_flops=TO_FLOAT_FLOPS_PER_ELEMENT)
    hidden = exact_div(w[1], 3)  # q = k = v hidden size
    kv_len = seq + (n.in_shape(8)[3] if n.has_input(8) else 0)  # past keys extend T
    return proj + attention_core(batch, heads, seq, kv_len, hidden, hidden, masks=int(n.has_input(5)))


@rule("QEmbedLayerNormalization", domain=MS, kind=Kind.NORMALIZATION)
def qembed_layer_norm(n: NodeView) -> Work | Unknown:
    """EmbedLayerNormalization over int8 tables: every gathered embedding element and gamma, beta dequantized.

    Inputs as EmbedLayerNormalization's (input_ids, segment_ids, word, position, segment embeddings, gamma,
    beta, mask), then each table's scale and zero point. The float part is EmbedLayerNormalization's count.
    """
    y = n.out_shape(0)  # [batch, seq, hidden]
    e = numel(y)
    tables = 3 if n.has_input(4) else 2  # word, position [and segment] rows gathered for every token
    dequant = DEQUANTIZE_FLOPS_PER_ELEMENT * (
        tables * e  # each gathered embedding element
        + n.in_numel(5) + n.in_numel(6))  # gamma and beta, once per run
    base = embed_layer_norm(n)
    return base if isinstance(base, Unknown) else base + Work(flops=dequant)


# ----------------------------------------------------------------- block-quantized weights


@rule("MatMulNBits", domain=MS, kind=Kind.COMPUTE)
def matmul_nbits(n: NodeView) -> Work:
    """A [..., K] times a K×N weight packed in ``bits``-bit blocks (B [N, K/block, blob]).

    MACs = M·N·K with M the rows of A. Each of the N·K weights is dequantized once per run
    (zero point, default 2^(bits−1), then block scale): DEQUANTIZE_FLOPS_PER_ELEMENT each.
    """
    k, n_cols = n.attr("K"), n.attr("N")
    rows = prod(n.in_shape(0)[:-1])  # M: every row of A
    macs = rows * n_cols * k  # one MAC per output element per K
    dequant = DEQUANTIZE_FLOPS_PER_ELEMENT * n_cols * k  # unpack the weight: zero point and scale
    bias = rows * n_cols if n.has_input(5) else 0  # + bias: one add per output element
    return Work(flops=FLOPS_PER_MAC * macs + dequant + bias, macs=macs)


@rule("MatMulBnb4", domain=MS, kind=Kind.COMPUTE)
def matmul_bnb4(n: NodeView) -> Work:
    """FP4/NF4 weights: a 16-entry table lookup (free) times the block's absmax: 1 FLOP per weight."""
    k, n_cols = n.attr("K"), n.attr("N")
    macs = prod(n.in_shape(0)[:-1]) * n_cols * k  # M·N·K
    return Work(flops=FLOPS_PER_MAC * macs + n_cols * k, macs=macs)  # + absmax scaling of each weight


def _picked_rows(n: NodeView) -> dict[int, Dim]:
    """GatherBlockQuantized's window: of data, scales and zero points (which share data's ``gather_axis``) the
    rows its indices pick, one per index, each capped by the whole tensor."""
    axis = int(n.attr("gather_axis", 0))
    picked = n.in_numel(1)  # one row per index
    out: dict[int, Dim] = {}
    for i in (0, 2, 3):  # data, scales, zero points
        if n.has_input(i):
            shape = n.in_shape(i)
            out[i] = capped(picked * exact_div(n.in_bytes(i), shape[axis % len(shape)]), n.in_bytes(i))
    return out


@rule("GatherBlockQuantized", domain=MS, kind=Kind.MOVEMENT, window=_picked_rows)
def gather_block_quantized(n: NodeView) -> Work:
    """A gather (free) of block-quantized rows, each gathered element dequantized.

    Inputs: data (packed), indices, scales, zero_points. It reads rows, not tables (:func:`_picked_rows`, the
    op's window): the indices whole, of the others the rows picked; it writes the dequantized output.
    """
    return Work(flops=DEQUANTIZE_FLOPS_PER_ELEMENT * n.out_numel(0))


# ----------------------------------------------------------------- (de)quantization


@rule("QuantizeLinear", domain=MS, kind=Kind.ELEMENTWISE)
@rule("QuantizeLinear", kind=Kind.ELEMENTWISE)
def quantize_linear(n: NodeView) -> Work:
    return Work(flops=QUANTIZE_FLOPS_PER_ELEMENT * n.in_numel(0))


@rule("DequantizeLinear", domain=MS, kind=Kind.ELEMENTWISE)
@rule("DequantizeLinear", kind=Kind.ELEMENTWISE)
def dequantize_linear(n: NodeView) -> Work:
    return Work(flops=DEQUANTIZE_FLOPS_PER_ELEMENT * n.in_numel(0))


@rule("DynamicQuantizeLinear", kind=Kind.REDUCTION)
def dynamic_quantize_linear(n: NodeView) -> Work:
    """A whole-tensor min/max reduction, then QuantizeLinear: REDUCTION, since no output precedes the range."""
    x = n.in_numel(0)
    return Work(flops=MINMAX_FLOPS_PER_ELEMENT * x + QUANTIZE_FLOPS_PER_ELEMENT * x)  # range, then quantize


# ----------------------------------------------------------------- QLinear elementwise (dequantize → op → quantize)


def _qlinear(n: NodeView, float_op: Dim, *data_inputs: int) -> Work:
    """Dequantize every element of the data inputs, run the float op, quantize every output element."""
    dequant = sum((DEQUANTIZE_FLOPS_PER_ELEMENT * n.in_numel(i) for i in data_inputs), start=0)
    return Work(flops=dequant + float_op + QUANTIZE_FLOPS_PER_ELEMENT * n.out_numel(0))


@rule(("QLinearAdd", "QLinearMul"), domain=MS, kind=Kind.ELEMENTWISE)
def qlinear_binary(n: NodeView) -> Work:
    """Inputs: A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale, C_zero_point."""
    return _qlinear(n, n.out_numel(0), 0, 3)  # the add or mul: one per output element


@rule(("QLinearSigmoid", "QLinearLeakyRelu"), domain=MS, kind=Kind.ELEMENTWISE)
def qlinear_activation(n: NodeView) -> Work:
    return _qlinear(n, n.out_numel(0), 0)  # the activation: one per element


@rule("QLinearWhere", domain=MS, kind=Kind.ELEMENTWISE)
def qlinear_where(n: NodeView) -> Work:
    """Inputs: condition, X, x_scale, x_zero_point, Y, y_scale, y_zero_point, z_scale, z_zero_point.

    The select is free, as Where is; what costs is dequantizing X and Y and quantizing Z.
    """
    return _qlinear(n, 0, 1, 4)


@rule("QLinearSoftmax", domain=MS, kind=Kind.REDUCTION)
def qlinear_softmax(n: NodeView) -> Work:
    return _qlinear(n, SOFTMAX_FLOPS_PER_ELEMENT * n.out_numel(0), 0)


@rule("QLinearGlobalAveragePool", domain=MS, kind=Kind.REDUCTION)
def qlinear_global_average_pool(n: NodeView) -> Work:
    return _qlinear(n, n.in_numel(0) + n.out_numel(0), 0)  # an add per input element, a divide per output


@rule("QLinearReduceMean", domain=MS, kind=Kind.REDUCTION)
def qlinear_reduce_mean(n: NodeView) -> Work:
    return _qlinear(n, n.in_numel(0) + n.out_numel(0), 0)  # an add per input element, a divide per output


@rule("QLinearAveragePool", domain=MS, kind=Kind.REDUCTION)
def qlinear_average_pool(n: NodeView) -> Work:
    out = n.out_numel(0)
    return _qlinear(n, window_ops(out, tuple(n.attr("kernel_shape"))) + out, 0)  # window sums, divides


def _same_qparams(n: NodeView, scale_a: int, scale_b: int) -> bool:
    """Both (scale, zero point) pairs are constants with equal values: requantizing is a copy."""
    sa, za, sb, zb = (n.const_value(i) for i in (scale_a, scale_a + 1, scale_b, scale_b + 1))
    if sa is None or za is None or sb is None or zb is None:
        return False
    return bool(np.array_equal(sa, sb) and np.array_equal(za, zb))


@rule("QLinearConcat", domain=MS, kind=Kind.MOVEMENT)
def qlinear_concat(n: NodeView) -> Work:
    """Inputs: Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per input.

    An input quantized like the output is copied (0 FLOPs); any other input is requantized: a
    DequantizeLinear and a QuantizeLinear per element.
    """
    flops: Dim = 0
    for x in range(2, len(n.node.inputs), 3):
        if not _same_qparams(n, x + 1, 0):
            flops = flops + (DEQUANTIZE_FLOPS_PER_ELEMENT + QUANTIZE_FLOPS_PER_ELEMENT) * n.in_numel(x)
    return Work(flops=flops)

