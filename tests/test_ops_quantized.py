"""Quantized rules: integer products, (de)quantization, QLinear* ops and block-quantized weights.

Expected counts are spelled with the module's named per-element constants; their values are pinned
once in ``test_per_element_constants``.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import onnxruntime as ort
import pytest
import sympy
from ophelp import cost_of

from graphcost._dims import symbol
from graphcost.ops import Kind, Unknown, Work, lookup
from graphcost.ops import quantized as q
from graphcost.ops.microsoft import SOFTMAX_FLOPS_PER_ELEMENT

HEADER = '<ir_version: 8, opset_import: ["" : 21, "com.microsoft" : 1]>'
MS = "com.microsoft"
b, s = symbol("batch"), symbol("seq")
QUANT, DEQUANT = q.QUANTIZE_FLOPS_PER_ELEMENT, q.DEQUANTIZE_FLOPS_PER_ELEMENT
REQUANT, TO_FLOAT = q.REQUANTIZE_FLOPS_PER_ELEMENT, q.TO_FLOAT_FLOPS_PER_ELEMENT
ZP, MINMAX = q.ZERO_POINT_FLOPS_PER_ELEMENT, q.MINMAX_FLOPS_PER_ELEMENT


def work(body: str, header: str = HEADER) -> Work:
    result = cost_of(header + body)
    assert isinstance(result, Work), result
    return result


def same(a: object, c: object) -> bool:
    return sympy.expand(sympy.sympify(a) - sympy.sympify(c)) == 0


def check(w: Work, macs: object, flops: object) -> None:
    assert same(w.macs, macs), (w.macs, macs)
    assert same(w.flops, flops), (w.flops, flops)


def run_in_ort(body: str, **dims: int) -> None:
    """onnxruntime builds and runs the model, and its outputs have the declared shapes."""
    proto = onnx.parser.parse_model(HEADER + body)
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    initialized = {i.name for i in proto.graph.initializer}

    def shape(vi: onnx.ValueInfoProto) -> list[int]:
        return [d.dim_value if d.HasField("dim_value") else dims[d.dim_param] for d in vi.type.tensor_type.shape.dim]

    feeds = {}
    for vi in proto.graph.input:
        if vi.name in initialized:
            continue
        dtype = onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        values = rng.uniform(0.5, 1.5, shape(vi)) if dtype.kind == "f" else rng.integers(0, 4, shape(vi))
        feeds[vi.name] = np.asarray(values).astype(dtype)
    outputs = sess.run(None, feeds)
    for vi, y in zip(proto.graph.output, outputs, strict=True):
        assert list(y.shape) == shape(vi), vi.name


def test_per_element_constants() -> None:
    """The documented choices (see the module docstring)."""
    assert (QUANT, DEQUANT, REQUANT, TO_FLOAT, ZP, MINMAX) == (2, 2, 2, 1, 1, 2)


# ----------------------------------------------------------------- integer products

def qlinear_conv(domain: str) -> str:
    weights = ", ".join(["1"] * 8 * 4 * 9)
    return f"""
    g (uint8[N,4,6,6] x, float xs, float ws, float ys, int32[8] B) => (uint8[N,8,4,4] y)
      <uint8 xz = {{0}}, int8[8,4,3,3] w = {{{weights}}}, int8 wz = {{0}}, uint8 yz = {{128}}> {{
      y = {domain}QLinearConv (x, xs, xz, w, ws, wz, ys, yz, B)
    }}"""


@pytest.mark.parametrize("domain", ["", "com.microsoft."])
def test_qlinear_conv_symbolic_batch(domain: str) -> None:
    body = qlinear_conv(domain)
    n = symbol("N")
    out = n * 8 * 4 * 4  # N·Cout·H·W
    macs = out * 4 * 3 * 3  # Cin·kh·kw per output, as Conv
    flops = (
        2 * macs
        # x_zp and w_zp are constant 0: no subtracts (docs/conventions.md, "Zero points")
        + out  # + B (int32 bias)
        + REQUANT * out  # rescale to y and add y_zp
    )
    check(work(body), macs, flops)
    run_in_ort(body, N=2)


def test_conv_integer_with_only_x_zero_point() -> None:
    w = work("""
    g (uint8[1,4,6,6] x, uint8[8,4,3,3] w, uint8 xz) => (int32[1,8,4,4] y) {
      y = ConvInteger (x, w, xz)
    }""")
    macs = 8 * 4 * 4 * 4 * 9  # outputs · Cin·kh·kw
    check(w, macs, 2 * macs + ZP * 4 * 6 * 6)  # x − x_zp only; int32 output, no rescale


QLINEAR_MATMUL = """
g (uint8[batch,8,16] a, float as, uint8 az, int8[16,32] bw, float bs, int8 bz, float ys, uint8 yz)
  => (uint8[batch,8,32] y) {
  y = QLinearMatMul (a, as, az, bw, bs, bz, ys, yz)
}"""


def test_qlinear_matmul_symbolic() -> None:
    out = b * 8 * 32
    macs = out * 16  # K = 16
    flops = 2 * macs + ZP * b * 8 * 16 + ZP * 16 * 32 + REQUANT * out  # a − a_zp, b − b_zp, requantize
    check(work(QLINEAR_MATMUL), macs, flops)
    run_in_ort(QLINEAR_MATMUL, batch=2)


def test_matmul_integer_a_zero_point_only() -> None:
    w = work("""
    g (uint8[M,16] a, int8[16,8] bw, uint8 az) => (int32[M,8] y) {
      y = MatMulInteger (a, bw, az)
    }""")
    m = symbol("M")
    macs = m * 8 * 16
    check(w, macs, 2 * macs + ZP * m * 16)  # a − a_zp


def test_matmul_integer_to_float() -> None:
    body = """
    g (uint8[batch,16] a, int8[16,8] bw, float as, float bs, uint8 az, float[8] bias) => (float[batch,8] y) {
      y = com.microsoft.MatMulIntegerToFloat (a, bw, as, bs, az, , bias)
    }"""
    out = b * 8
    macs = out * 16
    check(work(body), macs, 2 * macs + ZP * b * 16 + TO_FLOAT * out + out)  # a − a_zp, scale, + bias
    run_in_ort(body, batch=2)


def test_dynamic_quantize_matmul() -> None:
    body = """
    g (float[batch,16] a, int8[16,8] bw, float bs, int8 bz, float[8] bias) => (float[batch,8] y) {
      y = com.microsoft.DynamicQuantizeMatMul (a, bw, bs, bz, bias)
    }"""
    out = b * 8
    macs = out * 16
    flops = (
        (MINMAX + QUANT) * b * 16  # DynamicQuantizeLinear of A
        + 2 * macs
        + ZP * b * 16 + ZP * 16 * 8  # A's computed zero point, b_zero_point
        + TO_FLOAT * out + out  # scale to float, + bias
    )
    check(work(body), macs, flops)
    run_in_ort(body, batch=2)


@pytest.mark.parametrize("with_y", [True, False])
def test_qgemm(with_y: bool) -> None:
    tail = ", ys, yz" if with_y else ""
    ytype = "uint8" if with_y else "float"
    w = work(f"""
    g (uint8[M,16] a, float as, uint8 az, int8[8,16] bw, float bs, int8 bz, int32[8] c, float ys, uint8 yz)
      => ({ytype}[M,8] y) {{
      y = com.microsoft.QGemm <transB = 1> (a, as, az, bw, bs, bz, c{tail})
    }}""")
    m = symbol("M")
    out = m * 8
    macs = out * 16  # K = 16
    scaling = REQUANT if with_y else TO_FLOAT  # requantize to uint8, or scale to float
    check(w, macs, 2 * macs + ZP * m * 16 + ZP * 8 * 16 + out + scaling * out)  # zero points, + C


def test_qattention() -> None:
    w = work("""
    g (uint8[batch,seq,64] x, int8[64,192] wt, float[192] bias, float xs, float ws, int32[batch] mask,
       uint8 xz, int8 wz) => (float[batch,seq,64] y) {
      y = com.microsoft.QAttention <num_heads = 4> (x, wt, bias, xs, ws, mask, xz, wz)
    }""")
    proj = b * s * 64 * 192  # QKV projection
    scores = b * 4 * s * s
    core = b * s * s * 64 + b * s * s * 64  # Q·K^T + P·V
    flops = (
        2 * proj
        + ZP * b * s * 64 + ZP * 64 * 192  # input − zp, weight − zp
        + TO_FLOAT * b * s * 192 + b * s * 192  # scale to float, + bias
        + 2 * core + scores + scores + SOFTMAX_FLOPS_PER_ELEMENT * scores  # scale, mask, softmax
    )
    check(w, proj + core, flops)


# ----------------------------------------------------------------- block-quantized weights

MATMUL_NBITS = """
g (float[batch,seq,32] a, uint8[16,2,8] bq, float[32] scales, float[16] bias) => (float[batch,seq,16] y) {
  y = com.microsoft.MatMulNBits <K = 32, N = 16, bits = 4, block_size = 16> (a, bq, scales, , , bias)
}"""


def test_matmul_nbits_symbolic() -> None:
    macs = b * s * 16 * 32  # M·N·K, M = batch·seq rows of A
    flops = 2 * macs + DEQUANT * 16 * 32 + b * s * 16  # dequantize each of the N·K weights once, + bias
    check(work(MATMUL_NBITS), macs, flops)
    run_in_ort(MATMUL_NBITS, batch=2, seq=3)


def test_matmul_bnb4() -> None:
    w = work("""
    g (float[M,32] a, uint8[256] bq, float[32] absmax) => (float[M,16] y) {
      y = com.microsoft.MatMulBnb4 <K = 32, N = 16, block_size = 16, quant_type = 1> (a, bq, absmax)
    }""")
    macs = symbol("M") * 16 * 32
    check(w, macs, 2 * macs + 16 * 32)  # each weight: table lookup (free) · absmax


def test_gather_block_quantized() -> None:
    body = """
    g (uint8[100,16] data, int64[batch,seq] idx, float[100,1] scales) => (float[batch,seq,32] y) {
      y = com.microsoft.GatherBlockQuantized <block_size = 32> (data, idx, scales)
    }"""
    check(work(body), 0, DEQUANT * b * s * 32)  # each gathered element dequantized
    run_in_ort(body, batch=2, seq=3)


# ----------------------------------------------------------------- (de)quantization


@pytest.mark.parametrize("domain", ["", "com.microsoft."])
@pytest.mark.parametrize("op, per_element", [("QuantizeLinear", QUANT), ("DequantizeLinear", DEQUANT)])
def test_quantize_dequantize(domain: str, op: str, per_element: int) -> None:
    dtype_in, dtype_out = ("float", "uint8") if op == "QuantizeLinear" else ("uint8", "float")
    w = work(f"""
    g ({dtype_in}[batch,64] x, float sc, uint8 zp) => ({dtype_out}[batch,64] y) {{
      y = {domain}{op} (x, sc, zp)
    }}""")
    check(w, 0, per_element * b * 64)


def test_dynamic_quantize_linear() -> None:
    w = work("""
    g (float[batch,64] x) => (uint8[batch,64] y, float ys, uint8 yz) {
      y, ys, yz = DynamicQuantizeLinear (x)
    }""")
    check(w, 0, MINMAX * b * 64 + QUANT * b * 64)  # min/max over the tensor, then quantize


# ----------------------------------------------------------------- QLinear elementwise


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_qlinear_binary_broadcast(op: str) -> None:
    body = f"""
    g (uint8[batch,64] a, float as, uint8 az, uint8[64] bb, float bs, uint8 bz, float cs, uint8 cz)
      => (uint8[batch,64] c) {{
      c = com.microsoft.{op} (a, as, az, bb, bs, bz, cs, cz)
    }}"""
    out = b * 64
    check(work(body), 0, DEQUANT * out + DEQUANT * 64 + out + QUANT * out)  # dequantize A and B, op, quantize
    run_in_ort(body, batch=2)


@pytest.mark.parametrize("op", ["QLinearSigmoid", "QLinearLeakyRelu"])
def test_qlinear_activation(op: str) -> None:
    w = work(f"""
    g (uint8[batch,64] x, float xs, uint8 xz, float ys, uint8 yz) => (uint8[batch,64] y) {{
      y = com.microsoft.{op} (x, xs, xz, ys, yz)
    }}""")
    e = b * 64
    check(w, 0, DEQUANT * e + e + QUANT * e)  # dequantize, activation, quantize


def test_qlinear_softmax() -> None:
    w = work("""
    g (uint8[batch,64] x, float xs, uint8 xz, float ys, uint8 yz) => (uint8[batch,64] y) {
      y = com.microsoft.QLinearSoftmax <opset = 13> (x, xs, xz, ys, yz)
    }""")
    e = b * 64
    check(w, 0, DEQUANT * e + SOFTMAX_FLOPS_PER_ELEMENT * e + QUANT * e)


def test_qlinear_pools_and_reduce_mean() -> None:
    def one(op: str, attrs: str, out: str) -> Work:
        return work(f"""
        g (uint8[N,8,4,4] x, float xs, uint8 xz, float ys, uint8 yz) => (uint8{out} y) {{
          y = com.microsoft.{op} {attrs} (x, xs, xz, ys, yz)
        }}""")

    n = symbol("N")
    x = n * 8 * 16  # input elements
    gap, pooled = n * 8, n * 8 * 3 * 3  # global output; 2×2 windows at stride 1
    check(one("QLinearGlobalAveragePool", "", "[N,8,1,1]"), 0, DEQUANT * x + x + gap + QUANT * gap)  # adds, divides
    check(one("QLinearReduceMean", "<axes = [2, 3], keepdims = 1>", "[N,8,1,1]"), 0,
          DEQUANT * x + x + gap + QUANT * gap)
    check(one("QLinearAveragePool", "<kernel_shape = [2, 2]>", "[N,8,3,3]"), 0,
          DEQUANT * x + pooled * 4 + pooled + QUANT * pooled)  # window adds, divide


def concat(c_scale: str) -> str:
    return f"""
    g (uint8[batch,3] a, uint8[batch,4] c) => (uint8[batch,7] y)
      <float ys = {{0.5}}, uint8 yz = {{128}}, float as = {{0.5}}, uint8 az = {{128}}, float cs = {{{c_scale}}},
       uint8 cz = {{128}}> {{
      y = com.microsoft.QLinearConcat <axis = 1> (ys, yz, a, as, az, c, cs, cz)
    }}"""


def test_qlinear_concat_copies_inputs_quantized_like_the_output() -> None:
    check(work(concat("0.5")), 0, 0)  # every input shares the output's scale and zero point
    check(work(concat("0.25")), 0, (DEQUANT + QUANT) * b * 4)  # only c is requantized
    run_in_ort(concat("0.25"), batch=2)


def test_qlinear_concat_unknown_scales_requantize_everything() -> None:
    w = work("""
    g (float ys, uint8 yz, uint8[batch,3] a, float as, uint8 az, uint8[batch,4] c, float cs, uint8 cz)
      => (uint8[batch,7] y) {
      y = com.microsoft.QLinearConcat <axis = 1> (ys, yz, a, as, az, c, cs, cz)
    }""")
    check(w, 0, (DEQUANT + QUANT) * b * 7)


# ----------------------------------------------------------------- registry

REGISTERED = {
    "": {
        "QLinearConv": Kind.COMPUTE, "QLinearMatMul": Kind.COMPUTE, "MatMulInteger": Kind.COMPUTE,
        "ConvInteger": Kind.COMPUTE, "QuantizeLinear": Kind.ELEMENTWISE, "DequantizeLinear": Kind.ELEMENTWISE,
        "DynamicQuantizeLinear": Kind.REDUCTION,
    },
    MS: {
        "QLinearConv": Kind.COMPUTE, "QGemm": Kind.COMPUTE, "DynamicQuantizeMatMul": Kind.COMPUTE,
        "MatMulIntegerToFloat": Kind.COMPUTE, "QAttention": Kind.COMPUTE, "MatMulNBits": Kind.COMPUTE,
        "MatMulBnb4": Kind.COMPUTE, "QuantizeLinear": Kind.ELEMENTWISE, "DequantizeLinear": Kind.ELEMENTWISE,
        "QLinearAdd": Kind.ELEMENTWISE, "QLinearMul": Kind.ELEMENTWISE, "QLinearSigmoid": Kind.ELEMENTWISE,
        "QLinearLeakyRelu": Kind.ELEMENTWISE, "QLinearSoftmax": Kind.REDUCTION,
        "QLinearGlobalAveragePool": Kind.REDUCTION, "QLinearAveragePool": Kind.REDUCTION,
        "QLinearReduceMean": Kind.REDUCTION, "QLinearConcat": Kind.MOVEMENT, "GatherBlockQuantized": Kind.MOVEMENT,
    },
}


def test_registered_with_kinds() -> None:
    for domain, ops in REGISTERED.items():
        for op, kind in ops.items():
            entry = lookup(domain, op)
            assert entry is not None and entry.kind is kind, (domain, op)


# ----------------------------------------------------------------- onnxruntime's quantizer and NHWC transformer

QEMBED = """
g (int32[batch,seq] ids, int32[batch,seq] seg, uint8[50,16] word, uint8[32,16] pos, uint8[4,16] segt,
   uint8[16] gamma, uint8[16] beta, int32[batch,seq] mask, float ws, float ps, float ss, float gs, float bs,
   uint8 wz, uint8 pz, uint8 sz, uint8 gz, uint8 bz) => (float[batch,seq,16] y, int32[batch] mi) {
  y, mi = com.microsoft.QEmbedLayerNormalization (ids, seg, word, pos, segt, gamma, beta, mask,
                                                  ws, ps, ss, gs, bs, wz, pz, sz, gz, bz)
}"""


def test_qembed_layer_norm_symbolic() -> None:
    """The standard recipe (transformers optimizer, then quantize_dynamic) writes it for BERT's embeddings."""
    from graphcost.ops.microsoft import LAYERNORM_FLOPS_PER_ELEMENT, LAYERNORM_FLOPS_PER_ROW

    e, rows = b * s * 16, b * s  # output elements, normalized rows
    flops = (
        DEQUANT * 3 * e  # the gathered word, position and segment rows, dequantized
        + DEQUANT * (16 + 16)  # gamma and beta, dequantized once
        + e + e  # word + position, + segment
        + LAYERNORM_FLOPS_PER_ELEMENT * e + LAYERNORM_FLOPS_PER_ROW * rows + e  # the layer norm, + beta
        + b * s  # mask_index: one add per mask element
    )
    check(work(QEMBED), 0, flops)
    run_in_ort(QEMBED, batch=2, seq=5)


QLINEAR_WHERE = """
g (bool[N,8] c, uint8[N,8] x, float xs, uint8 xz, uint8[8] y, float ys, uint8 yz, float zs, uint8 zz)
  => (uint8[N,8] z) {
  z = com.microsoft.QLinearWhere (c, x, xs, xz, y, ys, yz, zs, zz)
}"""


def test_qlinear_where_costs_the_requantization_only() -> None:
    n = symbol("N")
    flops = DEQUANT * n * 8 + DEQUANT * 8 + QUANT * n * 8  # dequantize X and Y, select (free), quantize Z
    check(work(QLINEAR_WHERE), 0, flops)
    run_in_ort(QLINEAR_WHERE, N=3)


def test_qlinear_conv_channels_last() -> None:
    """onnxruntime's NHWC transformer writes com.microsoft QLinearConv with channels_last = 1: x, y NHWC."""
    weights = ", ".join(["1"] * 8 * 4 * 9)
    body = f"""
    g (uint8[N,6,6,4] x, float xs, float ws, float ys) => (uint8[N,4,4,8] y)
      <uint8 xz = {{0}}, int8[8,4,3,3] w = {{{weights}}}, int8 wz = {{0}}, uint8 yz = {{128}}> {{
      y = com.microsoft.QLinearConv <channels_last = 1> (x, xs, xz, w, ws, wz, ys, yz)
    }}"""
    n = symbol("N")
    out = n * 4 * 4 * 8  # N·H·W·Cout
    macs = out * 4 * 3 * 3  # Cin·kh·kw per output
    check(work(body), macs, 2 * macs + REQUANT * out)  # zero points are constant 0: no subtracts
    run_in_ort(body, N=2)


@pytest.mark.parametrize("attrs, named", [
    ("strides = [0, 0]", "strides=[0, 0]"),
    ("dilations = [1, 0]", "dilations=[1, 0]"),
    ("pads = [-1, 0, 0, 0]", "pads=[-1, 0, 0, 0]"),
    ("kernel_shape = [3, 0]", "kernel_shape=[3, 0]"),
    ("group = 0", "group=0"),
    ("group = 3", "group=3"),  # divides neither the 4 input nor the 8 output channels
])
@pytest.mark.parametrize("op", ["QLinearConv", "com.microsoft.QLinearConv", "ConvInteger"])
def test_integer_convs_refuse_invalid_window_attributes(op: str, attrs: str, named: str) -> None:
    """As Conv does (``_window.py``): a spec-forbidden attribute gives an unknown naming it, not the number the
    declared output shape would give (the old rules counted 8·4·4·4·9 MACs for a stride-0 conv)."""
    args = "(x, w, xz, wz)" if op == "ConvInteger" else "(x, xs, xz, w, ws, wz, ys, yz)"
    result = cost_of(HEADER + f"""
    g (uint8[1,4,6,6] x, float xs, uint8 xz, int8[8,4,3,3] w, float ws, int8 wz, float ys, uint8 yz)
      => (int32[1,8,4,4] y) {{
      y = {op} <{attrs}> {args}
    }}""")
    assert isinstance(result, Unknown), result
    assert named in result.reason
