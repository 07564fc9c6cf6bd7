"""com.microsoft ops that onnxruntime's optimizers emit, and its NCHWc and NHWC layout ops.

Each fused op costs what its unfused subgraph would: a FusedConv is Conv + bias + Z add + one
activation op per output element, an Attention node is its projections, scores, softmax and weighted
sum. Per-element counts are named once here (onnx.defs has no com.microsoft schemas, so every
attribute default below is written out; tests check them against onnxruntime's schemas)::

    SOFTMAX_FLOPS_PER_ELEMENT = 5    max (1 compare), subtract max (1), exp (1), sum (1), divide (1)
    LAYERNORM_FLOPS_PER_ELEMENT = 6  mean (1 add), subtract mean (1), square (1), variance sum (1),
                                     normalize multiply (1), gamma multiply (1); beta adds 1 more
    LAYERNORM_FLOPS_PER_ROW = 4      mean divide (1), variance divide (1), + epsilon (1), sqrt (1)
    RMSNORM_FLOPS_PER_ELEMENT = 4    square (1), sum (1), normalize multiply (1), gamma multiply (1)
    RMSNORM_FLOPS_PER_ROW = 3        mean divide (1), + epsilon (1), sqrt (1)
    ROTARY_FLOPS_PER_ELEMENT = 3     x·cos ∓ x_pair·sin: 2 muls and 1 add per rotated element
    BILINEAR_FLOPS_PER_OUTPUT = 7    4 neighbours × weight (4 muls) summed (3 adds)

The norm counts follow the split ``norm`` uses for LayerNormalization and RMSNormalization (per
element + per normalized row), kept as local constants so this module stands alone.
Activations of any kind (Gelu, QuickGelu, SiLU...) are one op per element, as in ``elementwise``.

Attention, for B batch, S queries, T keys (past included), N heads::

    scores = B·N·S·T
    Q·K^T   B·S·T·(N·head_size) MACs          P·V   B·S·T·(N·v_head_size) MACs
    scale   1 per score (the 1/√head_size the unfused graph divides by)
    masks   1 per score per additive mask or bias input
    softmax SOFTMAX_FLOPS_PER_ELEMENT per score
Every (query, key) pair is costed, causal masking included: an upper bound a causal kernel halves.
Attention, MultiHeadAttention and GroupQueryAttention given a past KV cache append to it in place: their
bytes written are the new K/V, with the whole ``present`` copy as ``bytes_as_written``
(``graphcost.ops.attention.kv_append``).
"""

from __future__ import annotations

from graphcost._dims import Dim, numel, prod, simplify_dim
from graphcost._sym import sympy
from graphcost.ops._registry import FLOPS_PER_MAC, Kind, NodeView, Unknown, Work, register_free, rule
from graphcost.ops._window import invalid_window
from graphcost.ops.attention import kv_append
from graphcost.ops.conv import conv
from graphcost.ops.linalg import gemm, matmul_macs

MS = "com.microsoft"
NCHWC = "com.microsoft.nchwc"

SOFTMAX_FLOPS_PER_ELEMENT = 5
LAYERNORM_FLOPS_PER_ELEMENT = 6
LAYERNORM_FLOPS_PER_ROW = 4
RMSNORM_FLOPS_PER_ELEMENT = 4
RMSNORM_FLOPS_PER_ROW = 3
ROTARY_FLOPS_PER_ELEMENT = 3
BILINEAR_FLOPS_PER_OUTPUT = 7


def exact_div(total: Dim, parts: Dim) -> Dim:
    """total / parts for sizes that divide (head sizes); an inexact int division stays a visible fraction."""
    if isinstance(total, int) and isinstance(parts, int) and total % parts == 0:
        return total // parts
    return simplify_dim(sympy.Integer(total) / parts if isinstance(total, int) else total / parts)


def _activation(n: NodeView) -> Dim:
    """A fused ``activation`` attribute: one op per output element (none when absent)."""
    return n.out_numel(0) if n.attr("activation") else 0


def _plus(base: Work | Unknown, flops: Dim) -> Work | Unknown:
    """A base rule's result (Conv, Gemm) plus the fused elementwise work."""
    return base if isinstance(base, Unknown) else base + Work(flops=flops)


# ----------------------------------------------------------------- fused products


@rule("FusedConv", domain=MS, kind=Kind.COMPUTE)
def fused_conv(n: NodeView) -> Work | Unknown:
    """activation(Conv(X, W) + B + Z): inputs X, W, B as Conv's, Z the residual sum."""
    out = n.out_numel(0)
    z = out if n.has_input(3) else 0  # + Z: one add per output element
    return _plus(conv(n), z + _activation(n))


@rule("FusedGemm", domain=MS, kind=Kind.COMPUTE)
def fused_gemm(n: NodeView) -> Work | Unknown:
    return _plus(gemm(n), _activation(n))  # Gemm, then one activation op per output


def fused_matmul_k(a: tuple[Dim, ...], trans_a: bool, trans_batch_a: bool) -> Dim:
    """The contracted dim of A in FusedMatMul.

    transBatchA moves A's first dim behind its batch dims ([d0, b.., m, k] → [b.., m, d0, k]);
    transA then swaps the last two. So K is a[-1] unless transA, then a[0] with transBatchA, else a[-2].
    """
    if len(a) == 1 or not trans_a:
        return a[-1]
    return a[0] if trans_batch_a else a[-2]


@rule("FusedMatMul", domain=MS, kind=Kind.COMPUTE)
def fused_matmul(n: NodeView) -> Work:
    out = n.out_numel(0)
    k = fused_matmul_k(n.in_shape(0), bool(n.attr("transA", 0)), bool(n.attr("transBatchA", 0)))
    macs = out * k  # one MAC per output element per contracted index
    alpha = out if n.attr("alpha", 1.0) != 1.0 else 0  # alpha·(AB): one multiply per output
    return Work(flops=FLOPS_PER_MAC * macs + alpha, macs=macs)


# ----------------------------------------------------------------- elementwise


@rule(("Gelu", "QuickGelu"), domain=MS, kind=Kind.ELEMENTWISE)
def gelu(n: NodeView) -> Work:
    return Work(flops=n.out_numel(0))  # the activation: one op per element


@rule("FastGelu", domain=MS, kind=Kind.ELEMENTWISE)
def fast_gelu(n: NodeView) -> Work:
    out = n.out_numel(0)
    return Work(flops=out + (out if n.has_input(1) else 0))  # gelu, + bias add when given


@rule("BiasGelu", domain=MS, kind=Kind.ELEMENTWISE)
def bias_gelu(n: NodeView) -> Work:
    return Work(flops=2 * n.out_numel(0))  # bias add + gelu per element


@rule("BiasAdd", domain=MS, kind=Kind.ELEMENTWISE)
def bias_add(n: NodeView) -> Work:
    return Work(flops=2 * n.out_numel(0))  # X + bias + skip: two adds per element


@rule("BiasSoftmax", domain=MS, kind=Kind.REDUCTION)
def bias_softmax(n: NodeView) -> Work:
    out = n.out_numel(0)
    return Work(flops=out + SOFTMAX_FLOPS_PER_ELEMENT * out)  # bias add, then softmax


# ----------------------------------------------------------------- normalization


def layer_norm_work(x: tuple[Dim, ...], axis: int = -1, *, beta: bool) -> Dim:
    """Layer norm of x over the axes from ``axis`` on: per-element passes, per-row statistics, + beta."""
    e, rows = numel(x), prod(x[:axis % len(x)])
    return LAYERNORM_FLOPS_PER_ELEMENT * e + LAYERNORM_FLOPS_PER_ROW * rows + (e if beta else 0)


def rms_norm_work(x: tuple[Dim, ...], axis: int = -1) -> Dim:
    """RMS norm of x over the axes from ``axis`` on: per-element passes and per-row statistics."""
    return RMSNORM_FLOPS_PER_ELEMENT * numel(x) + RMSNORM_FLOPS_PER_ROW * prod(x[:axis % len(x)])


@rule("SkipLayerNormalization", domain=MS, kind=Kind.NORMALIZATION)
def skip_layer_norm(n: NodeView) -> Work:
    """LayerNorm(input + skip [+ bias]) · gamma [+ beta]; inputs: input, skip, gamma, beta, bias."""
    x = n.in_shape(0)
    e = numel(x)
    bias = e if n.has_input(4) else 0  # + bias
    return Work(flops=e + bias + layer_norm_work(x, beta=n.has_input(3)))  # + skip, then the layer norm


@rule("SkipSimplifiedLayerNormalization", domain=MS, kind=Kind.NORMALIZATION)
def skip_rms_norm(n: NodeView) -> Work:
    """RMSNorm(input + skip [+ bias]) · gamma; inputs: input, skip, gamma, bias."""
    x = n.in_shape(0)
    e = numel(x)
    bias = e if n.has_input(3) else 0  # + bias
    return Work(flops=e + bias + rms_norm_work(x))  # + skip, then the RMS norm


@rule("LayerNormalization", domain=MS, kind=Kind.NORMALIZATION)
def layer_norm(n: NodeView) -> Work:
    return Work(flops=layer_norm_work(n.in_shape(0), int(n.attr("axis", -1)), beta=n.has_input(2)))


@rule("SimplifiedLayerNormalization", domain=MS, kind=Kind.NORMALIZATION)
@rule("SimplifiedLayerNormalization", kind=Kind.NORMALIZATION)  # ORT's optimizer writes it in the default domain
def rms_norm(n: NodeView) -> Work:
    return Work(flops=rms_norm_work(n.in_shape(0), int(n.attr("axis", -1))))


@rule("EmbedLayerNormalization", domain=MS, kind=Kind.NORMALIZATION)
def embed_layer_norm(n: NodeView) -> Work:
    """Gather word, position [and segment] embeddings (free), sum them, layer-normalize.

    Inputs: input_ids, segment_ids, word_embedding, position_embedding, segment_embedding, gamma,
    beta, mask, position_ids. The mask_index output sums the mask over each sequence.
    """
    y = n.out_shape(0)  # [batch, seq, hidden]
    e = numel(y)
    return Work(flops=(
        e  # word + position embedding
        + (e if n.has_input(4) else 0)  # + segment embedding
        + layer_norm_work(y, beta=True)  # beta is a required input
        + (n.in_numel(7) if n.has_input(7) else 0)  # mask_index: one add per mask element
    ))


@rule("SkipGroupNorm", domain=MS, kind=Kind.NORMALIZATION)
def skip_group_norm(n: NodeView) -> Work:
    """Activation(GroupNorm(X + skip [+ bias]) · gamma + beta); inputs: X, gamma, beta, skip, bias.

    The statistics are those of a layer norm whose rows are the (batch, group) blocks.
    """
    x = n.in_shape(0)
    e = numel(x)
    groups = x[0] * int(n.attr("groups"))  # one (batch, group) block each
    return Work(flops=(
        e  # + skip
        + (e if n.has_input(4) else 0)  # + bias
        + LAYERNORM_FLOPS_PER_ELEMENT * e + LAYERNORM_FLOPS_PER_ROW * groups + e  # group norm, + beta
        + (e if n.attr("activation", 0) else 0)  # SiLU when activation = 1
    ))


# ----------------------------------------------------------------- attention


def attention_core(batch: Dim, heads: Dim, q_len: Dim, kv_len: Dim, qk_hidden: Dim, v_hidden: Dim,
                   *, masks: int = 0) -> Work:
    """Scores, softmax and weighted sum of multi-head attention (hidden = heads · head size)."""
    scores = batch * heads * q_len * kv_len  # one score per head, query and key
    qk = batch * q_len * kv_len * qk_hidden  # Q·K^T: a head_size dot product per score
    av = batch * q_len * kv_len * v_hidden  # P·V: each output element sums kv_len products
    macs = qk + av
    flops = (
        FLOPS_PER_MAC * macs
        + scores  # the 1/√head_size scale
        + masks * scores  # each additive mask / bias on the scores
        + SOFTMAX_FLOPS_PER_ELEMENT * scores
    )
    return Work(flops=flops, macs=macs)


def _heads(n: NodeView) -> int | None:
    heads = n.attr("num_heads")
    return int(heads) if heads else None


def _masks(n: NodeView, *inputs: int) -> int:
    return sum(1 for i in inputs if n.has_input(i))


@rule("Attention", domain=MS, kind=Kind.COMPUTE)
def attention(n: NodeView) -> Work | Unknown:
    """Self-attention with its QKV projection: input [B, S, in_hidden] · weights [in_hidden, q+k+v].

    Inputs: input, weights, bias, mask_index, past ([2, B, N, P, head_size]), attention_bias.
    ``qkv_hidden_sizes`` gives q, k, v hidden sizes; else each is a third of the weight's columns.
    """
    heads = _heads(n)
    if heads is None:
        return Unknown("Attention without num_heads")
    x, w = n.in_shape(0), n.in_shape(1)
    batch, seq = x[0], x[1]
    sizes = n.attr("qkv_hidden_sizes")
    q_h, v_h = (sizes[0], sizes[2]) if sizes else (exact_div(w[1], 3),) * 2  # K's size is Q's
    kv_len = seq + (n.in_shape(4)[3] if n.has_input(4) else 0)  # past keys extend T
    proj = matmul_macs(x, w, (batch, seq, w[1]))  # the fused QKV projection
    bias = batch * seq * w[1] if n.has_input(2) else 0  # one add per projected element
    rotary: Dim = 0
    if n.attr("do_rotary", 0):  # rotate Q and K: heads·rotary_dim features per token each
        rd = n.attr("rotary_embedding_dim", 0) or exact_div(q_h, heads)
        rotary = ROTARY_FLOPS_PER_ELEMENT * 2 * batch * seq * heads * rd
    core = attention_core(batch, heads, seq, kv_len, q_h, v_h, masks=_masks(n, 3, 5))
    return core + Work(flops=FLOPS_PER_MAC * proj + bias + rotary, macs=proj) + kv_append(n, ((4, 1),), 3, seq)


@rule("MultiHeadAttention", domain=MS, kind=Kind.COMPUTE)
def multi_head_attention(n: NodeView) -> Work | Unknown:
    """Attention over given Q, K, V (no projection), in any of the layouts onnxruntime accepts.

    query [B, S, D] or packed QKV [B, S, N, 3, H]; key [B, L, D], [B, N, L, H] or packed KV
    [B, L, N, 2, H]; past_key [B, N, P, H] extends T = L + P. Inputs 3 (bias on Q, K, V), 4 (key
    padding mask) and 5 (attention bias) add to the count when given.
    """
    heads = _heads(n)
    if heads is None:
        return Unknown("MultiHeadAttention without num_heads")
    q = n.in_shape(0)
    batch, q_len = q[0], q[1]
    q_h = q[2] * q[4] if len(q) == 5 else q[2]  # packed QKV: N·H
    if n.has_input(1):
        k = n.in_shape(1)
        new_kv = k[2] if len(k) == 4 else k[1]  # BNSH key vs [B, L, ...]
    else:
        new_kv = q_len  # packed QKV: keys are the queries' tokens
    kv_len = new_kv + (n.in_shape(6)[2] if n.has_input(6) else 0)
    v_h = n.out_shape(0)[2]  # output [B, S, N·v_head_size]
    bias = 0
    if n.has_input(3):  # bias [q + k + v] adds to Q's rows and to the new K and V rows
        bias = batch * q_len * q_h + batch * new_kv * (n.in_shape(3)[0] - q_h)
    core = attention_core(batch, heads, q_len, kv_len, q_h, v_h, masks=_masks(n, 4, 5))
    return core + Work(flops=bias) + kv_append(n, ((6, 1), (7, 2)), 2, new_kv)


@rule("GroupQueryAttention", domain=MS, kind=Kind.COMPUTE)
def group_query_attention(n: NodeView) -> Work | Unknown:
    """N query heads share kv_num_heads K/V heads; MACs are those of N-head attention.

    query [B, S, N·H] (or packed QKV [B, S, (N + 2·kvN)·H] without key); T is the constant
    ``total_sequence_length`` input when the graph holds it, else past length + S (with a shared
    past/present buffer that is the buffer length: an upper bound).
    """
    heads, kv_heads = _heads(n), n.attr("kv_num_heads")
    if heads is None or not kv_heads:
        return Unknown("GroupQueryAttention without num_heads / kv_num_heads")
    q = n.in_shape(0)
    batch, q_len = q[0], q[1]
    head = exact_div(q[2], heads if n.has_input(1) else heads + 2 * kv_heads)
    total = n.const_value(6)
    if total is not None:
        kv_len: Dim = int(total.reshape(-1)[0])
    else:
        kv_len = q_len + (n.in_shape(3)[2] if n.has_input(3) else 0)  # past_key [B, kvN, P, H]
    rd = 2 * n.in_shape(7)[-1] if n.has_input(7) else head  # cos_cache [max_pos, rotary_dim / 2]
    rotary = ROTARY_FLOPS_PER_ELEMENT * batch * q_len * (heads + kv_heads) * rd if n.attr("do_rotary", 0) else 0
    norms = RMSNORM_FLOPS_PER_ELEMENT * batch * q_len * head * (
        (heads if n.has_input(14) else 0) + (kv_heads if n.has_input(15) else 0))  # q / k RMS norm
    core = attention_core(batch, heads, q_len, kv_len, heads * head, heads * head, masks=_masks(n, 10))
    softcap = 3 * batch * heads * q_len * kv_len if n.attr("softcap", 0.0) else 0  # c·tanh(x/c) per score
    return core + Work(flops=rotary + norms + softcap) + kv_append(n, ((3, 1), (4, 2)), 2, q_len)


@rule("RotaryEmbedding", domain=MS, kind=Kind.ELEMENTWISE)
def rotary_embedding(n: NodeView) -> Work:
    """Rotate the first rotary_dim features of each head; the rest is copied.

    input [B, S, hidden] or [B, N, S, H]; cos_cache [..., rotary_dim / 2]. Without num_heads on a
    3-D input the head size is the rotary dim (as onnxruntime infers it).
    """
    x = n.in_shape(0)
    rd = n.attr("rotary_embedding_dim", 0) or 2 * n.in_shape(2)[-1]
    if len(x) == 4:
        tokens, heads = x[0] * x[2], x[1]
    else:
        tokens, heads = x[0] * x[1], n.attr("num_heads", 0) or exact_div(x[2], rd)
    return Work(flops=ROTARY_FLOPS_PER_ELEMENT * tokens * heads * rd)  # 2 muls + 1 add per rotated element


# ----------------------------------------------------------------- NCHWc layout (com.microsoft.nchwc)


def window_ops(out: Dim, kernel: tuple[Dim, ...]) -> Dim:
    """A windowed reduction: one add or compare per window element per output."""
    return out * prod(kernel)


@rule("Conv", domain=NCHWC, kind=Kind.COMPUTE)
def nchwc_conv(n: NodeView) -> Work | Unknown:
    """Conv on channel-blocked tensors (channels padded to the block): Conv + Sum + activation."""
    out = n.out_numel(0)
    total = out if n.has_input(3) else 0  # + Sum: one add per output element
    return _plus(conv(n), total + _activation(n))


@rule("MaxPool", domain=NCHWC, kind=Kind.REDUCTION)
def nchwc_max_pool(n: NodeView) -> Work:
    return Work(flops=window_ops(n.out_numel(0), tuple(n.attr("kernel_shape"))))  # a compare per window element


@rule("NhwcMaxPool", domain=MS, kind=Kind.REDUCTION)
def nhwc_max_pool(n: NodeView) -> Work | Unknown:
    """MaxPool on an NHWC int8/uint8 tensor (onnxruntime's NHWC transformer, beside QLinearConv): the layout
    moves the channels, not the count. kernel_shape is required, as for MaxPool."""
    invalid = invalid_window(n)
    if invalid is not None:
        return invalid
    return Work(flops=window_ops(n.out_numel(0), tuple(n.attr("kernel_shape"))))  # a compare per window element


@rule("AveragePool", domain=NCHWC, kind=Kind.REDUCTION)
def nchwc_average_pool(n: NodeView) -> Work:
    out = n.out_numel(0)
    return Work(flops=window_ops(out, tuple(n.attr("kernel_shape"))) + out)  # window sum, then a divide


@rule("GlobalAveragePool", domain=NCHWC, kind=Kind.REDUCTION)
def nchwc_global_average_pool(n: NodeView) -> Work:
    return Work(flops=n.in_numel(0) + n.out_numel(0))  # an add per input element, a divide per output


@rule("GlobalMaxPool", domain=NCHWC, kind=Kind.REDUCTION)
def nchwc_global_max_pool(n: NodeView) -> Work:
    return Work(flops=n.in_numel(0))  # a compare per input element


@rule("Upsample", domain=NCHWC, kind=Kind.MOVEMENT)
def nchwc_upsample(n: NodeView) -> Work:
    """Nearest is a copy; linear interpolates 4 neighbours per output (H and W are scaled)."""
    if n.attr("mode", "nearest") == "linear":
        return Work(flops=BILINEAR_FLOPS_PER_OUTPUT * n.out_numel(0))
    return Work(flops=0)


# Layout changes between NCHW and NCHWc: data movement only.
register_free(("ReorderInput", "ReorderOutput"), domain=NCHWC, kind=Kind.MOVEMENT)

