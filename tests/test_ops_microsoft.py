"""com.microsoft and com.microsoft.nchwc rules: closed-form costs, symbolic dims, real models.

onnx cannot infer shapes of contrib ops, so every model declares its output shapes.
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
from graphcost.ops.microsoft import (
    BILINEAR_FLOPS_PER_OUTPUT,
    LAYERNORM_FLOPS_PER_ELEMENT,
    LAYERNORM_FLOPS_PER_ROW,
    RMSNORM_FLOPS_PER_ELEMENT,
    RMSNORM_FLOPS_PER_ROW,
    ROTARY_FLOPS_PER_ELEMENT,
    SOFTMAX_FLOPS_PER_ELEMENT,
)

HEADER = '<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1, "com.microsoft.nchwc" : 1]>'
MS, NCHWC = "com.microsoft", "com.microsoft.nchwc"
b, s = symbol("batch"), symbol("seq")


def work(body: str) -> Work:
    result = cost_of(HEADER + body)
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


# ----------------------------------------------------------------- fused products

FUSED_CONV = """
g (float[N,8,10,10] X, float[16,8,3,3] W, float[16] B, float[N,16,8,8] Z) => (float[N,16,8,8] Y) {
  Y = com.microsoft.FusedConv <activation = "Relu", kernel_shape = [3, 3]> (X, W, B, Z)
}"""


def test_fused_conv_bias_sum_activation_symbolic_batch() -> None:
    n = symbol("N")
    out = n * 16 * 8 * 8  # N·Cout·H·W
    macs = out * 8 * 3 * 3  # Cin·kh·kw per output element
    flops = 2 * macs + out + out + out  # bias add, Z add, Relu
    check(work(FUSED_CONV), macs, flops)
    run_in_ort(FUSED_CONV, N=2)


def test_fused_conv_without_extras_is_conv() -> None:
    w = work("""
    g (float[1,4,6,6] X, float[2,4,3,3] W) => (float[1,2,4,4] Y) {
      Y = com.microsoft.FusedConv (X, W)
    }""")
    macs = 1 * 2 * 4 * 4 * 4 * 3 * 3  # outputs · Cin·kh·kw
    check(w, macs, 2 * macs)


def test_fused_matmul_trans_batch_a_and_alpha() -> None:
    body = """
    g (float[4,2,3,5] A, float[2,3,4,6] B) => (float[2,3,5,6] Y) {
      Y = com.microsoft.FusedMatMul <transA = 1, transBatchA = 1, alpha = 0.5> (A, B)
    }"""
    out = 2 * 3 * 5 * 6
    macs = out * 4  # K is A's first dim: transBatchA moves it last, transA makes it the contracted dim
    check(work(body), macs, 2 * macs + out)  # + alpha multiply per output
    run_in_ort(body)


@pytest.mark.parametrize("a, attrs", [("float[batch,8,16]", ""), ("float[batch,16,8]", "<transA = 1>")])
def test_fused_matmul_symbolic(a: str, attrs: str) -> None:
    w = work(f"""
    g ({a} A, float[16,32] B) => (float[batch,8,32] Y) {{
      Y = com.microsoft.FusedMatMul {attrs} (A, B)
    }}""")
    macs = b * 8 * 32 * 16  # M·N·K per batch; transA reads K = 16 from A's second-last dim
    check(w, macs, 2 * macs)


def test_fused_gemm_bias_activation_symbolic_m() -> None:
    body = """
    g (float[M,8] A, float[8,16] B, float[16] C) => (float[M,16] Y) {
      Y = com.microsoft.FusedGemm <activation = "Relu"> (A, B, C)
    }"""
    m = symbol("M")
    out = m * 16
    macs = out * 8  # K = 8
    check(work(body), macs, 2 * macs + out + out)  # bias add, Relu
    run_in_ort(body, M=3)


# ----------------------------------------------------------------- elementwise

ELEMENTWISE = [
    ("Gelu", "X", 1),  # gelu
    ("QuickGelu", "X", 1),  # x·sigmoid(αx): one activation
    ("FastGelu", "X", 1),  # gelu, no bias
    ("FastGelu", "X, bias", 2),  # bias add + gelu
    ("BiasGelu", "X, bias", 2),  # bias add + gelu
    ("BiasAdd", "X, bias, skip", 2),  # two adds
]


@pytest.mark.parametrize("op, args, per_element", ELEMENTWISE)
def test_elementwise_symbolic(op: str, args: str, per_element: int) -> None:
    body = f"""
    g (float[batch,seq,64] X, float[64] bias, float[batch,seq,64] skip) => (float[batch,seq,64] Y) {{
      Y = com.microsoft.{op} ({args})
    }}"""
    check(work(body), 0, per_element * b * s * 64)
    assert lookup(MS, op).kind is Kind.ELEMENTWISE  # type: ignore[union-attr]
    if op != "BiasAdd":  # BiasAdd has only a CUDA kernel in onnxruntime
        run_in_ort(body, batch=2, seq=3)


def test_bias_softmax() -> None:
    w = work("""
    g (float[batch,4,seq,seq] X, float[batch,1,seq,seq] B) => (float[batch,4,seq,seq] Y) {
      Y = com.microsoft.BiasSoftmax <axis = 3, is_inner_broadcast = 0> (X, B)
    }""")
    e = b * 4 * s * s
    check(w, 0, e + SOFTMAX_FLOPS_PER_ELEMENT * e)  # bias add, softmax


# ----------------------------------------------------------------- normalization


@pytest.mark.parametrize("args, extra", [
    ("x, skip, gamma", 0),
    ("x, skip, gamma, beta", 1),  # + beta
    ("x, skip, gamma, beta, bias", 2),  # + beta, + bias
    ("x, skip, gamma, , bias", 1),  # + bias
])
def test_skip_layer_norm(args: str, extra: int) -> None:
    body = f"""
    g (float[batch,seq,32] x, float[batch,seq,32] skip, float[32] gamma, float[32] beta, float[32] bias)
      => (float[batch,seq,32] y) {{
      y = com.microsoft.SkipLayerNormalization ({args})
    }}"""
    e, rows = b * s * 32, b * s  # elements; rows normalized over the last dim
    flops = e + LAYERNORM_FLOPS_PER_ELEMENT * e + LAYERNORM_FLOPS_PER_ROW * rows + extra * e  # skip, LN, beta/bias
    check(work(body), 0, flops)
    run_in_ort(body, batch=2, seq=3)


def test_skip_simplified_layer_norm() -> None:
    w = work("""
    g (float[batch,seq,32] x, float[batch,seq,32] skip, float[32] gamma, float[32] bias) => (float[batch,seq,32] y) {
      y = com.microsoft.SkipSimplifiedLayerNormalization (x, skip, gamma, bias)
    }""")
    e, rows = b * s * 32, b * s
    check(w, 0, e + e + RMSNORM_FLOPS_PER_ELEMENT * e + RMSNORM_FLOPS_PER_ROW * rows)  # skip, bias, rms norm


def test_ms_layer_norms() -> None:
    ln = work("""
    g (float[batch,32] x, float[32] g, float[32] bias) => (float[batch,32] y) {
      y = com.microsoft.LayerNormalization (x, g, bias)
    }""")
    rms = work("""
    g (float[batch,32] x, float[32] g) => (float[batch,32] y) {
      y = com.microsoft.SimplifiedLayerNormalization (x, g)
    }""")
    check(ln, 0, (LAYERNORM_FLOPS_PER_ELEMENT + 1) * b * 32 + LAYERNORM_FLOPS_PER_ROW * b)  # layer norm + B
    check(rms, 0, RMSNORM_FLOPS_PER_ELEMENT * b * 32 + RMSNORM_FLOPS_PER_ROW * b)


def test_embed_layer_norm() -> None:
    w = work("""
    g (int32[batch,seq] ids, int32[batch,seq] seg, float[100,32] wemb, float[64,32] pemb, float[2,32] semb,
       float[32] gamma, float[32] beta, int32[batch,seq] mask) => (float[batch,seq,32] y, int32[batch] mi) {
      y, mi = com.microsoft.EmbedLayerNormalization (ids, seg, wemb, pemb, semb, gamma, beta, mask)
    }""")
    e = b * s * 32
    flops = (
        2 * e  # word + position + segment embeddings: two adds
        + LAYERNORM_FLOPS_PER_ELEMENT * e + LAYERNORM_FLOPS_PER_ROW * b * s + e  # layer norm per token, + beta
        + b * s  # mask_index: sum of the mask
    )
    check(w, 0, flops)


def test_skip_group_norm_with_silu() -> None:
    w = work("""
    g (float[batch,8,8,64] x, float[64] gamma, float[64] beta, float[batch,8,8,64] skip, float[64] bias)
      => (float[batch,8,8,64] y) {
      y = com.microsoft.SkipGroupNorm <activation = 1, groups = 32> (x, gamma, beta, skip, bias)
    }""")
    e, groups = b * 8 * 8 * 64, b * 32  # elements; (batch, group) blocks
    flops = (
        e + e  # + skip, + bias
        + LAYERNORM_FLOPS_PER_ELEMENT * e + LAYERNORM_FLOPS_PER_ROW * groups  # group norm, · gamma
        + e + e  # + beta, SiLU
    )
    check(w, 0, flops)


# ----------------------------------------------------------------- attention


def attention_flops(batch: object, heads: int, q: object, t: object, qk_h: int, v_h: int, masks: int) -> tuple:
    """(macs, flops) of scores, softmax and weighted sum, spelled out."""
    scores = batch * heads * q * t  # type: ignore[operator]
    macs = batch * q * t * qk_h + batch * q * t * v_h  # type: ignore[operator]  # Q·K^T + P·V
    flops = 2 * macs + scores + masks * scores + SOFTMAX_FLOPS_PER_ELEMENT * scores  # scale, masks, softmax
    return macs, flops


ATTENTION = """
g (float[batch,seq,64] x, float[64,192] w, float[192] bias, int32[batch] mask) => (float[batch,seq,64] y) {
  y = com.microsoft.Attention <num_heads = 4> (x, w, bias, mask)
}"""


def test_attention_self_with_projection_symbolic() -> None:
    proj = b * s * 64 * 192  # QKV projection: [b·s, 64] × [64, 192]
    core_macs, core_flops = attention_flops(b, 4, s, s, 64, 64, masks=1)  # mask_index adds to the scores
    check(work(ATTENTION), proj + core_macs, 2 * proj + b * s * 192 + core_flops)  # + projection bias
    run_in_ort(ATTENTION.replace(", int32[batch] mask", "").replace(", mask)", ")"), batch=2, seq=3)


def test_attention_past_and_qkv_hidden_sizes() -> None:
    w = work("""
    g (float[batch,seq,64] x, float[64,160] w, float[2,batch,4,past,16] past) => (float[batch,seq,32] y) {
      y = com.microsoft.Attention <num_heads = 4, qkv_hidden_sizes = [64, 64, 32]> (x, w, , , past)
    }""")
    t = s + symbol("past")  # keys: the past and this step's
    proj = b * s * 64 * 160
    core_macs, core_flops = attention_flops(b, 4, s, t, 64, 32, masks=0)
    check(w, proj + core_macs, 2 * proj + core_flops)


def test_attention_rotary() -> None:
    w = work("""
    g (float[batch,seq,64] x, float[64,192] w) => (float[batch,seq,64] y) {
      y = com.microsoft.Attention <num_heads = 4, do_rotary = 1, rotary_embedding_dim = 8> (x, w)
    }""")
    proj = b * s * 64 * 192
    core_macs, core_flops = attention_flops(b, 4, s, s, 64, 64, masks=0)
    rotary = ROTARY_FLOPS_PER_ELEMENT * 2 * b * s * 4 * 8  # Q and K: 4 heads × 8 rotated features per token
    check(w, proj + core_macs, 2 * proj + core_flops + rotary)


def test_attention_without_heads_is_unknown() -> None:
    result = cost_of(HEADER + ATTENTION.replace("<num_heads = 4>", ""))
    assert isinstance(result, Unknown) and "num_heads" in result.reason


def test_multi_head_attention_cross_with_bias_and_past() -> None:
    w = work("""
    g (float[batch,seq,64] q, float[batch,kv,64] k, float[batch,kv,32] v, float[160] bias,
       float[batch,4,past,16] pk, float[batch,4,past,8] pv) => (float[batch,seq,32] y) {
      y = com.microsoft.MultiHeadAttention <num_heads = 4> (q, k, v, bias, , , pk, pv)
    }""")
    kv, past = symbol("kv"), symbol("past")
    core_macs, core_flops = attention_flops(b, 4, s, kv + past, 64, 32, masks=0)
    bias = b * s * 64 + b * kv * (64 + 32)  # bias on Q rows, and on the new K and V rows
    check(w, core_macs, core_flops + bias)


def test_multi_head_attention_packed_qkv() -> None:
    body = """
    g (float[batch,seq,4,3,16] qkv, float[batch,1,seq,seq] ab) => (float[batch,seq,64] y) {
      y = com.microsoft.MultiHeadAttention <num_heads = 4> (qkv, , , , , ab)
    }"""
    core_macs, core_flops = attention_flops(b, 4, s, s, 64, 64, masks=1)  # attention_bias adds
    check(work(body), core_macs, core_flops)  # (onnxruntime's CPU kernel lacks packed QKV: no run here)


def test_multi_head_attention_runs() -> None:
    body = """
    g (float[batch,seq,64] q, float[batch,kv,64] k, float[batch,kv,32] v) => (float[batch,seq,32] y) {
      y = com.microsoft.MultiHeadAttention <num_heads = 4> (q, k, v)
    }"""
    core_macs, core_flops = attention_flops(b, 4, s, symbol("kv"), 64, 32, masks=0)
    check(work(body), core_macs, core_flops)
    run_in_ort(body, batch=2, seq=3, kv=5)


GQA = """
g (float[batch,seq,128] q, float[batch,seq,32] k, float[batch,seq,32] v, float[batch,2,past,16] pk,
   float[batch,2,past,16] pv, int32[batch] seqlens, int32 total, float[64,8] cos, float[64,8] sin)
  => (float[batch,seq,128] y) {
  y = com.microsoft.GroupQueryAttention <num_heads = 8, kv_num_heads = 2, do_rotary = 1>
      (q, k, v, pk, pv, seqlens, total, cos, sin)
}"""


def test_group_query_attention_past_and_rotary() -> None:
    t = s + symbol("past")  # total_sequence_length is a run-time value: past + new
    core_macs, core_flops = attention_flops(b, 8, s, t, 128, 128, masks=0)  # 8 query heads of 16
    rotary = ROTARY_FLOPS_PER_ELEMENT * b * s * (8 + 2) * 16  # Q's 8 heads and K's 2, rotary dim 2·8
    check(work(GQA), core_macs, core_flops + rotary)


def test_group_query_attention_constant_total_and_packed_qkv() -> None:
    w = work("""
    g (float[batch,seq,192] qkv, int32[batch] seqlens) => (float[batch,seq,128] y) <int32 total = {40}> {
      y = com.microsoft.GroupQueryAttention <num_heads = 8, kv_num_heads = 2> (qkv, , , , , seqlens, total)
    }""")
    core_macs, core_flops = attention_flops(b, 8, s, 40, 128, 128, masks=0)  # head = 192 / (8 + 2·2) = 16
    check(w, core_macs, core_flops)


def test_group_query_attention_softcap_and_qk_norm() -> None:
    w = work("""
    g (float[batch,seq,128] q, float[batch,seq,32] k, float[batch,seq,32] v, int32[batch] seqlens, int32 total,
       float[16] qn, float[16] kn) => (float[batch,seq,128] y) {
      y = com.microsoft.GroupQueryAttention <num_heads = 8, kv_num_heads = 2, softcap = 30.0>
          (q, k, v, , , seqlens, total, , , , , , , , qn, kn)
    }""")
    core_macs, core_flops = attention_flops(b, 8, s, s, 128, 128, masks=0)
    softcap = 3 * b * 8 * s * s  # c·tanh(score / c): a divide, a tanh, a multiply per score
    norms = RMSNORM_FLOPS_PER_ELEMENT * (b * s * 128 + b * s * 32)  # RMS norm of every Q and K element
    check(w, core_macs, core_flops + softcap + norms)


@pytest.mark.parametrize("x, attrs, cos, rotated", [
    ("float[batch,seq,64]", "<num_heads = 4>", "float[128,8]", b * s * 4 * 16),  # full heads of 16
    ("float[batch,seq,64]", "<num_heads = 4, rotary_embedding_dim = 8>", "float[128,4]", b * s * 4 * 8),  # half
    ("float[batch,4,seq,16]", "", "float[128,8]", b * 4 * s * 16),  # BNSH input
    ("float[batch,seq,64]", "", "float[128,8]", b * s * 64),  # head size = rotary dim
])
def test_rotary_embedding(x: str, attrs: str, cos: str, rotated: sympy.Expr) -> None:
    body = f"""
    g ({x} x, int64[batch,seq] pos, {cos} cos, {cos} sin) => ({x} y) {{
      y = com.microsoft.RotaryEmbedding {attrs} (x, pos, cos, sin)
    }}"""
    check(work(body), 0, ROTARY_FLOPS_PER_ELEMENT * rotated)  # 2 muls + 1 add per rotated element


def test_rotary_embedding_runs() -> None:
    run_in_ort("""
    g (float[batch,seq,64] x, int64[batch,seq] pos, float[128,8] cos, float[128,8] sin) => (float[batch,seq,64] y) {
      y = com.microsoft.RotaryEmbedding <num_heads = 4> (x, pos, cos, sin)
    }""", batch=2, seq=3)


# ----------------------------------------------------------------- NCHWc


def test_nchwc_conv_with_sum_and_activation() -> None:
    w = work("""
    g (float[N,16,10,10] X, float[32,16,3,3] W, float[32] B, float[N,32,8,8] S) => (float[N,32,8,8] Y) {
      Y = com.microsoft.nchwc.Conv <activation = "Relu", kernel_shape = [3, 3]> (X, W, B, S)
    }""")
    out = symbol("N") * 32 * 8 * 8
    macs = out * 16 * 3 * 3  # Cin·kh·kw per output, channels as blocked
    check(w, macs, 2 * macs + out + out + out)  # bias, Sum, Relu


def test_nchwc_pools_and_upsample() -> None:
    def one(op: str, attrs: str, out: str) -> Work:
        return work(f"""
        g (float[N,16,8,8] X) => ({out} Y) {{
          Y = com.microsoft.nchwc.{op} {attrs} (X)
        }}""")

    n = symbol("N")
    pooled = n * 16 * 6 * 6  # 3×3 windows, stride 1, no pads
    check(one("MaxPool", "<kernel_shape = [3, 3]>", "float[N,16,6,6]"), 0, pooled * 9)  # compares
    check(one("AveragePool", "<kernel_shape = [3, 3]>", "float[N,16,6,6]"), 0, pooled * 9 + pooled)  # adds, divide
    check(one("GlobalMaxPool", "", "float[N,16,1,1]"), 0, n * 16 * 64)  # a compare per input element
    check(one("GlobalAveragePool", "", "float[N,16,1,1]"), 0, n * 16 * 64 + n * 16)  # adds, divides
    up = n * 16 * 16 * 16
    check(one("Upsample", "<scales = [1, 1, 2, 2]>", "float[N,16,16,16]"), 0, 0)  # nearest: copies
    check(one("Upsample", '<scales = [1, 1, 2, 2], mode = "linear">', "float[N,16,16,16]"),
          0, BILINEAR_FLOPS_PER_OUTPUT * up)
    for op in ("ReorderInput", "ReorderOutput"):
        check(one(op, "", "float[N,16,8,8]"), 0, 0)
        assert lookup(NCHWC, op).kind is Kind.MOVEMENT  # type: ignore[union-attr]


# ----------------------------------------------------------------- registry and defaults

REGISTERED = {
    MS: {
        "FusedConv": Kind.COMPUTE, "FusedMatMul": Kind.COMPUTE, "FusedGemm": Kind.COMPUTE,
        "Gelu": Kind.ELEMENTWISE, "FastGelu": Kind.ELEMENTWISE, "BiasGelu": Kind.ELEMENTWISE,
        "QuickGelu": Kind.ELEMENTWISE, "BiasAdd": Kind.ELEMENTWISE, "BiasSoftmax": Kind.REDUCTION,
        "SkipLayerNormalization": Kind.NORMALIZATION, "SkipSimplifiedLayerNormalization": Kind.NORMALIZATION,
        "LayerNormalization": Kind.NORMALIZATION, "SimplifiedLayerNormalization": Kind.NORMALIZATION,
        "EmbedLayerNormalization": Kind.NORMALIZATION, "SkipGroupNorm": Kind.NORMALIZATION,
        "Attention": Kind.COMPUTE, "MultiHeadAttention": Kind.COMPUTE, "GroupQueryAttention": Kind.COMPUTE,
        "RotaryEmbedding": Kind.ELEMENTWISE,
    },
    NCHWC: {
        "Conv": Kind.COMPUTE, "MaxPool": Kind.REDUCTION, "AveragePool": Kind.REDUCTION,
        "GlobalAveragePool": Kind.REDUCTION, "GlobalMaxPool": Kind.REDUCTION, "Upsample": Kind.MOVEMENT,
        "ReorderInput": Kind.MOVEMENT, "ReorderOutput": Kind.MOVEMENT,
    },
}


def test_registered_with_kinds() -> None:
    for domain, ops in REGISTERED.items():
        for op, kind in ops.items():
            entry = lookup(domain, op)
            assert entry is not None and entry.kind is kind, (domain, op)


def ort_schema_default(domain: str, op: str, attr: str) -> object:
    from onnxruntime.capi import onnxruntime_pybind11_state as c

    for schema in c.get_all_operator_schema():
        if schema.domain == domain and schema.name == op:
            raw = schema.attributes[attr]._default_value
            return onnx.helper.get_attribute_value(onnx.AttributeProto.FromString(raw)) if raw else None
    raise LookupError(f"{domain}::{op}")


@pytest.mark.parametrize("domain, op, attr, assumed", [
    (MS, "FusedMatMul", "alpha", 1.0),
    (MS, "FusedMatMul", "transA", 0),
    (MS, "FusedMatMul", "transBatchA", 0),
    (MS, "FusedGemm", "transA", 0),
    (MS, "FusedGemm", "alpha", 1.0),
    (MS, "FusedGemm", "beta", 1.0),
    (NCHWC, "Upsample", "mode", b"nearest"),
    (MS, "RotaryEmbedding", "rotary_embedding_dim", None),  # no default: the rule reads 0, "use the cache"
    (MS, "GroupQueryAttention", "do_rotary", None),
    (MS, "Attention", "do_rotary", None),
])
def test_attribute_defaults_match_onnxruntime(domain: str, op: str, attr: str, assumed: object) -> None:
    """onnx.defs has no com.microsoft schemas, so the rules spell defaults out; they must be ORT's."""
    assert ort_schema_default(domain, op, attr) == assumed


# ----------------------------------------------------------------- NHWC (onnxruntime's NHWC transformer)

NHWC_MAX_POOL = """
g (uint8[N,8,8,4] x) => (uint8[N,4,4,4] y) {
  y = com.microsoft.NhwcMaxPool <kernel_shape = [2, 2], strides = [2, 2]> (x)
}"""


def test_nhwc_max_pool() -> None:
    """Written beside NHWC QLinearConv at ORT_ENABLE_ALL on a quantized CNN: a compare per window element."""
    n = symbol("N")
    check(work(NHWC_MAX_POOL), 0, n * 4 * 4 * 4 * (2 * 2))  # N·H·W·C outputs, a 2×2 window each
    run_in_ort(NHWC_MAX_POOL, N=2)
    entry = lookup(MS, "NhwcMaxPool")
    assert entry is not None and entry.kind is Kind.REDUCTION


def test_nhwc_max_pool_refuses_a_zero_stride() -> None:
    result = cost_of(HEADER + NHWC_MAX_POOL.replace("strides = [2, 2]", "strides = [0, 2]"))
    assert isinstance(result, Unknown) and "strides=[0, 2]" in result.reason


@pytest.mark.parametrize("domain, op, attr, assumed", [
    (MS, "DynamicQuantizeLSTM", "direction", b"forward"),
    (MS, "DynamicQuantizeLSTM", "clip", None),  # no default: absent means no clipping
    (MS, "QLinearConv", "channels_last", 0),
    (MS, "GatherBlockQuantized", "bits", 4),
    (MS, "GatherBlockQuantized", "gather_axis", 0),
    (MS, "GatherBlockQuantized", "quantize_axis", 1),
    (MS, "NhwcMaxPool", "kernel_shape", None),  # required, as for MaxPool
])
def test_quantizer_op_defaults_match_onnxruntime(domain: str, op: str, attr: str, assumed: object) -> None:
    """The defaults the new rules (rnn, quantized, _contrib_shapes) spell out are onnxruntime's."""
    assert ort_schema_default(domain, op, attr) == assumed
