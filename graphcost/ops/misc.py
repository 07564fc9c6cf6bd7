"""The rest of ai.onnx (and its ml/preview/training domains): attention, signal, random, sequences,
strings, detection, optimizers and the classic ML ops.

Each rule states its count in its docstring. The recurring conventions:

* ``macs`` counts the multiply-accumulates of dot products: attention's QKᵀ and PV, convolutions,
  linear models, SVM kernels, interpolation taps. Every other arithmetic step is a FLOP only; FFT
  butterflies (complex multiplies and adds mixed) are FLOPs only too.
* transcendental functions (exp, cos, tanh, sqrt) count 1 FLOP, as in elementwise.py.
* string, hash-lookup and container ops do no floating-point arithmetic: zero FLOPs, registered on
  purpose. Their work is real but is not FLOPs (and is data-dependent: string lengths).
* where work depends on data (an image's encoding, a gradient graph), the rule says Unknown and why.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx
import sympy

from graphcost._dims import Dim, numel, prod
from graphcost.graph import Graph
from graphcost.ops._registry import (
    FLOPS_PER_MAC,
    ZERO,
    Kind,
    NodeView,
    ShapeUnknown,
    Unknown,
    Work,
    lookup,
    register_free,
    rule,
)
from graphcost.ops.reduce import SOFTMAX_FLOPS_PER_ELEMENT, ceil_log2

ML = "ai.onnx.ml"
TRAINING = "ai.onnx.preview.training"
PREVIEW = "ai.onnx.preview"


def _div(a: Dim, b: Dim) -> Dim:
    """Exact quotient of dims known to divide (hidden / heads)."""
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    return sympy.simplify(a / b)


def _batch(shape: Sequence[Dim]) -> Dim:
    """Rows of an ML input: [N, F] has N, a lone feature vector [F] has 1."""
    return prod(shape[:-1])


# --- attention -------------------------------------------------------------------------------------

SOFTCAP_FLOPS_PER_SCORE = 3
"""softcap · tanh(score / softcap): divide 1 + tanh 1 + multiply 1."""


def _attention_work(q_numel: Dim, k_numel: Dim, y_numel: Dim, scores: Dim, kv_len: Dim, *,
                    softcap: bool, masked: bool) -> Work:
    """Scaled dot-product attention, as the ONNX Attention diagram writes it.

    QKᵀ: every score is a dot product over the head size, i.e. numel(Q)·T MACs over all heads;
    PV: every output element is a dot product over the T keys, i.e. numel(Y)·T MACs.
    Q and K are each scaled by sqrt(scale) (1 multiply per element); per score: softcap 3 if set,
    mask add 1 if a mask or causal bias applies, softmax 5. Masked positions are computed, not skipped.
    """
    macs = q_numel * kv_len + y_numel * kv_len  # QKᵀ + PV
    per_score = SOFTMAX_FLOPS_PER_ELEMENT + (SOFTCAP_FLOPS_PER_SCORE if softcap else 0) + (1 if masked else 0)
    scaling = q_numel + k_numel  # Q·sqrt(scale), K·sqrt(scale)
    return Work(flops=FLOPS_PER_MAC * macs + scaling + per_score * scores, macs=macs)


@rule("Attention", kind=Kind.COMPUTE)
def attention(n: NodeView) -> Work:
    """Q is [B, Hq, Sq, D] or 3-D [B, Sq, Hq·D] with ``q_num_heads``; T = past + new key length."""
    q, k = n.in_shape(0), n.in_shape(1)
    heads = q[1] if len(q) == 4 else int(n.attr("q_num_heads"))
    sq = q[2] if len(q) == 4 else q[1]
    kv_len = k[2] if len(k) == 4 else k[1]
    k_numel = numel(k)
    if n.has_input(4):  # past_key [B, Hkv, P, D] is concatenated in front of K
        kv_len = kv_len + n.in_shape(4)[2]
        k_numel = k_numel + n.in_numel(4)
    scores = q[0] * heads * sq * kv_len  # B·Hq·Sq·T
    masked = n.has_input(3) or bool(n.attr("is_causal", 0))
    return _attention_work(numel(q), k_numel, n.out_numel(0), scores, kv_len,
                           softcap=float(n.attr("softcap", 0.0)) != 0.0, masked=masked)


@rule("FlexAttention", domain=PREVIEW, kind=Kind.COMPUTE)
def flex_attention(n: NodeView) -> Work | Unknown:
    """Attention on rank-4 Q/K/V, plus the cost of the ``score_mod``/``prob_mod`` subgraphs.

    Each modifier maps the [B, Hq, L, S] score tensor to one of the same shape; its nodes are costed
    with their own rules on the subgraph, whose symbolic input dims are bound to the real ones.
    """
    q, k = n.in_shape(0), n.in_shape(1)
    scores_shape = (q[0], q[1], q[2], k[2])
    base = _attention_work(numel(q), numel(k), n.out_numel(0), prod(scores_shape), k[2],
                           softcap=False, masked=False)
    total = base
    for label, child in n.graph.children(n.node.name):
        mod = _subgraph_work(child, n.graph.opsets, scores_shape)
        if isinstance(mod, Unknown):
            return Unknown(f"{label}: {mod.reason}")
        total = total + Work(mod.flops, mod.macs, f"{label}: {mod.flops} FLOPs")
    return total


def _subgraph_work(child: Graph, opsets: dict[str, int], input_shape: Sequence[Dim]) -> Work | Unknown:
    """Cost a one-input modifier subgraph with the op rules, binding its input dims to ``input_shape``."""
    model = onnx.helper.make_model(
        child.proto, opset_imports=[onnx.helper.make_opsetid(d, v) for d, v in opsets.items()])
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception as e:  # a subgraph onnx cannot type is a reason, not a crash
        return Unknown(f"subgraph shapes cannot be inferred ({e})")
    g = Graph(inferred.graph, opsets)
    declared = g.tensor(g.input_names[0]) if g.input_names else None
    binding = {}
    if declared is not None and declared.shape is not None:
        binding = {d: real for d, real in zip(declared.shape, input_shape, strict=False) if not isinstance(d, int)}
    total = ZERO
    for node in g.nodes():
        entry = lookup(node.domain, node.op_type)
        if entry is None:
            return Unknown(f"no cost rule for {node.domain}::{node.op_type} in the subgraph")
        view = NodeView(node, tuple(g.tensor(t) if t else None for t in node.inputs),
                        tuple(g.tensor(t) if t else None for t in node.outputs), g)
        try:
            result = entry.fn(view)
        except ShapeUnknown as e:
            return Unknown(f"subgraph node {node.op_type}: {e}")
        if isinstance(result, Unknown):
            return result
        total = total + result
    flops, macs = total.flops, total.macs
    if binding:
        flops = flops if isinstance(flops, int) else sympy.sympify(flops).xreplace(binding)
        macs = macs if isinstance(macs, int) else sympy.sympify(macs).xreplace(binding)
    return Work(flops=flops if not isinstance(flops, sympy.Integer) else int(flops),
                macs=macs if not isinstance(macs, sympy.Integer) else int(macs))


ROTARY_FLOPS_PER_ELEMENT = 3
"""x·cos 1 + x_pair·sin 1 + add/subtract 1, per rotated element; the rest pass through."""


@rule("RotaryEmbedding", kind=Kind.ELEMENTWISE)
def rotary_embedding(n: NodeView) -> Work:
    x = n.in_shape(0)  # [B, H, S, D] or [B, S, H·D]
    rot = int(n.attr("rotary_embedding_dim", 0))
    if rot == 0:
        rotated = numel(x)  # full rotation: every element
    elif len(x) == 4:
        rotated = prod(x[:3]) * rot  # B·H·S tokens-heads × rotated dims
    else:
        rotated = x[0] * x[1] * int(n.attr("num_heads")) * rot  # B·S·H × rotated dims
    return Work(flops=ROTARY_FLOPS_PER_ELEMENT * rotated)


@rule("LinearAttention", kind=Kind.COMPUTE)
def linear_attention(n: NodeView) -> Work:
    """The recurrent form of the spec, per token and head (state S is d_k × d_v per KV head)::

        update   S += k ⊗ v                      d_k·d_v MACs per KV head
        readout  o = scale · qᵀS                 d_k·d_v MACs + d_v multiplies per query head
        gated    S ← exp(g)·S                    d_k·d_v multiplies per KV head, + exp per decay element
        delta    v − Sᵀk, · β                    d_k·d_v MACs + 2·d_v per KV head

    Chunk-parallel kernels reorder this work; the count is that of the recurrence.
    """
    q, v = n.in_shape(0), n.in_shape(2)  # [B, T, Hq·dk], [B, T, Hkv·dv]
    hq, hkv = int(n.attr("q_num_heads")), int(n.attr("kv_num_heads"))
    dk, dv = _div(q[2], hq), _div(v[2], hkv)
    tokens = q[0] * q[1]  # B·T recurrence steps
    rule_name = str(n.attr("update_rule", "gated_delta"))
    state = dk * dv  # one state matrix
    macs = tokens * (hkv * state + hq * state)  # update + readout
    flops: Dim = tokens * hq * dv  # scale the readout
    if rule_name in ("gated", "gated_delta"):
        flops += tokens * hkv * state  # decay the state
        flops += n.in_numel(4) if n.has_input(4) else 0  # exp of each decay element
    if rule_name in ("delta", "gated_delta"):
        macs += tokens * hkv * state  # Sᵀk
        flops += tokens * hkv * 2 * dv  # v − Sᵀk, · β
    return Work(flops=FLOPS_PER_MAC * macs + flops, macs=macs)


@rule("SwiGLU", kind=Kind.ELEMENTWISE)
def swiglu(n: NodeView) -> Work:
    return Work(flops=2 * n.out_numel(0))  # Swish(A) 1 (an activation) + · B 1, per output element


# --- convolution variants that live outside conv.py's Conv/ConvTranspose ----------------------------


@rule("CausalConvWithState", kind=Kind.COMPUTE)
def causal_conv_with_state(n: NodeView) -> Work:
    """Depthwise causal 1-D conv: k MACs per output, + bias, + SiLU (1, an activation) if asked."""
    out = n.out_numel(0)  # B · C · L
    macs = out * n.in_shape(1)[2]  # weight [C, 1, k]
    bias = out if n.has_input(2) else 0
    act = out if str(n.attr("activation", "none")) != "none" else 0
    return Work(flops=FLOPS_PER_MAC * macs + bias + act, macs=macs)


@rule("DeformConv", kind=Kind.COMPUTE)
def deform_conv(n: NodeView) -> Work:
    """Conv over bilinearly sampled inputs.

    Sampling: every (n, c, output position, kernel tap) reads one sample of 2^r weighted taps (MACs),
    at a position shifted by its offset (1 add per offset element), times the mask (1) if given.
    Then the convolution proper: out · (C/group) · ∏kernel MACs, + bias.
    """
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


# --- signal ------------------------------------------------------------------------------------------

FFT_FLOPS_PER_POINT_LOG = 5
"""A complex radix-2 FFT of length N: N/2·log2 N butterflies of 1 complex multiply (6) + 2 complex adds
(4) = 5·N·log2 N FLOPs. A real input costs half. Other lengths are counted with ⌈log2 N⌉."""


def _fft_flops(length: Dim, transforms: Dim, real: bool) -> Dim:
    per = FFT_FLOPS_PER_POINT_LOG * length * ceil_log2(length)  # one complex transform
    total = transforms * per
    if not real:
        return total
    return total // 2 if isinstance(total, int) else total / 2  # a real signal: half the butterflies


@rule("DFT", kind=Kind.COMPUTE)
def dft(n: NodeView) -> Work:
    x = n.in_shape(0)  # [..., signal..., 1 or 2]
    if n.opset < 20:
        axis = int(n.attr("axis", 1)) % len(x)
    else:
        axis_value = n.const_value(2)
        axis = (int(axis_value.reshape(-1)[0]) if axis_value is not None else -2) % len(x)
    length_value = n.const_value(1)
    if length_value is not None:
        length: Dim = int(length_value.reshape(-1)[0])
    else:
        length = x[axis]  # no (constant) dft_length: the signal's own length
    transforms = prod(d for i, d in enumerate(x[:-1]) if i != axis)  # every other index is one signal
    return Work(flops=_fft_flops(length, transforms, real=x[-1] == 1))


@rule("STFT", kind=Kind.COMPUTE)
def stft(n: NodeView) -> Work:
    """frames × (window multiply + DFT of frame_length) per batch row."""
    x, y = n.in_shape(0), n.out_shape(0)  # signal [B, L, 1|2], output [B, frames, bins, 2]
    note = ""
    length_value = n.const_value(3)
    if length_value is not None:
        length: Dim = int(length_value.reshape(-1)[0])
    elif n.has_input(2):
        length = n.in_shape(2)[0]  # the window's length
    elif not n.has_input(3):
        length = x[1]  # one frame of the whole signal
    else:  # a non-constant frame_length: read it back from the bins
        length = 2 * (y[2] - 1) if int(n.attr("onesided", 1)) else y[2]
        note = "frame_length not constant: taken from the output bins"
    frames = x[0] * y[1]  # B · frames
    window = frames * length * x[2] if n.has_input(2) else 0  # one multiply per sample component
    return Work(flops=window + _fft_flops(length, frames, real=x[2] == 1), note=note)


WINDOW_FLOPS_PER_ELEMENT = {"HannWindow": 4, "HammingWindow": 4, "BlackmanWindow": 8}
"""Hann/Hamming a0 − a1·cos(2πn/N): angle 1 + cos 1 + multiply 1 + subtract 1 = 4.
Blackman adds + a2·cos(4πn/N): angle 1 + cos 1 + multiply 1 + add 1 → 8."""


@rule(tuple(WINDOW_FLOPS_PER_ELEMENT), kind=Kind.ELEMENTWISE)
def window(n: NodeView) -> Work:
    return Work(flops=WINDOW_FLOPS_PER_ELEMENT[n.op_type] * n.out_numel(0))


@rule("MelWeightMatrix", kind=Kind.ELEMENTWISE)
def mel_weight_matrix(n: NodeView) -> Work:
    """[dft_length/2 + 1, num_mel_bins]: a triangle value (subtract 1 + divide 1) per entry, zeros included."""
    return Work(flops=2 * n.out_numel(0))


# --- linear algebra, detection -----------------------------------------------------------------------


@rule("Det", kind=Kind.COMPUTE)
def det(n: NodeView) -> Work:
    """LU by Gaussian elimination per n×n matrix: Σ_{j<n} j² = (n−1)n(2n−1)/6 MACs (≈ n³/3),
    n(n−1)/2 divides for the multipliers, n−1 multiplies for the product of the diagonal."""
    x = n.in_shape(0)
    m, batch = x[-1], prod(x[:-2])
    cube = (m - 1) * m * (2 * m - 1)
    macs = batch * (cube // 6 if isinstance(cube, int) else cube / 6)
    square = m * (m - 1)
    divides = batch * (square // 2 if isinstance(square, int) else square / 2)
    return Work(flops=FLOPS_PER_MAC * macs + divides + batch * (m - 1), macs=macs)


IOU_FLOPS = 13
"""One IoU test: 4 max/min for the intersection corners + 2 subtracts (width, height) + 2 clamps at 0
+ 1 multiply (area) + 2 for the union (a + b − inter) + 1 divide + 1 compare with the threshold."""


@rule("NonMaxSuppression", kind=Kind.REDUCTION)
def non_max_suppression(n: NodeView) -> Work:
    """Per (batch, class): score filter S, sort S·⌈log2 S⌉, and IoU tests between candidates.

    The IoU count depends on the scores; it is bounded here by the worst case: every candidate is tested
    against every box kept, at most min(S(S−1)/2, m·(S−1)) pairs with m = max_output_boxes_per_class.
    Box areas (3 per box) and center→corner conversion (4 per box) are per batch, shared by classes.
    """
    boxes, scores = n.in_shape(0), n.in_shape(1)  # [B, S, 4], [B, C, S]
    s = boxes[1]
    m_value = n.const_value(2)
    m = int(m_value.reshape(-1)[0]) if m_value is not None else None
    if not n.has_input(2) or m == 0:
        return Work(flops=0, note="max_output_boxes_per_class is 0: nothing is selected")
    pairs: Dim = (s * (s - 1) // 2) if isinstance(s, int) else s * (s - 1) / 2
    if m is not None:
        bound = m * (s - 1)
        pairs = min(pairs, bound) if isinstance(pairs, int) and isinstance(bound, int) else sympy.Min(pairs, bound)
    groups = scores[0] * scores[1]  # B · C
    per_group = s * ceil_log2(s) + IOU_FLOPS * pairs + (s if n.has_input(4) else 0)  # sort, IoU, threshold
    per_batch = 3 * s + (4 * s if int(n.attr("center_point_box", 0)) else 0)  # areas (+ conversion)
    return Work(flops=groups * per_group + boxes[0] * per_batch, note="IoU pairs: worst case")


# --- random ------------------------------------------------------------------------------------------

RANDOM_FLOPS_PER_ELEMENT = 1
"""One draw per output element: the generator's integer work is not floating-point arithmetic, and the
transform to a normal (Box–Muller) is counted as one op, as transcendental ops are."""


@rule(("RandomNormal", "RandomUniform"), kind=Kind.ELEMENTWISE)
def random_tensor(n: NodeView) -> Work:
    return Work(flops=RANDOM_FLOPS_PER_ELEMENT * n.out_numel(0))


@rule(("RandomNormalLike", "RandomUniformLike"), kind=Kind.ELEMENTWISE, free_inputs=(0,))
def random_like(n: NodeView) -> Work:
    return Work(flops=RANDOM_FLOPS_PER_ELEMENT * n.out_numel(0))  # the input gives only the shape


@rule("Bernoulli", kind=Kind.ELEMENTWISE)
def bernoulli(n: NodeView) -> Work:
    return Work(flops=(RANDOM_FLOPS_PER_ELEMENT + 1) * n.out_numel(0))  # draw + compare with p


@rule("Multinomial", kind=Kind.ELEMENTWISE)
def multinomial(n: NodeView) -> Work:
    """Per batch row: exp and a running sum over the C logits (the CDF); per sample: a draw and a
    binary search of ⌈log2 C⌉ compares."""
    x = n.in_shape(0)  # [batch, C]
    cdf = 2 * numel(x)  # exp + add per logit
    per_sample = RANDOM_FLOPS_PER_ELEMENT + ceil_log2(x[1])
    return Work(flops=cdf + n.out_numel(0) * per_sample)


# --- sequences, strings, decoding, gradients --------------------------------------------------------

register_free(("SequenceConstruct", "SequenceInsert", "SequenceAt", "SequenceErase", "SplitToSequence",
               "ConcatFromSequence"), kind=Kind.MOVEMENT)
register_free(("SequenceEmpty",), kind=Kind.FREE)
register_free(("SequenceLength",), kind=Kind.FREE, free_inputs=(0,))
# String ops: no floating-point arithmetic; their work scales with string lengths, which are data.
register_free(("StringNormalizer", "StringConcat", "StringSplit", "RegexFullMatch"), kind=Kind.MOVEMENT)


@rule("ImageDecoder", kind=Kind.COMPUTE)
def image_decoder(_: NodeView) -> Unknown:
    return Unknown("decoding work depends on the encoded image's format, size and content, which are data")


@rule("Gradient", domain=TRAINING, kind=Kind.COMPUTE)
def gradient(_: NodeView) -> Unknown:
    return Unknown("Gradient differentiates the graph between its xs and y: its work is a backward pass "
                   "of that graph, which one node does not state")


@rule("TfIdfVectorizer", kind=Kind.REDUCTION)
def tfidf_vectorizer(n: NodeView) -> Work:
    """One counter increment per candidate n-gram (the lookup is hashing, not arithmetic), and one
    multiply per output element for the IDF/TFIDF weights.

    Candidates per row of length L: Σ over n-gram lengths n and skips s of max(0, L − (n−1)(s+1));
    unigrams have no skips.
    """
    x = n.in_shape(0)
    length, rows = x[-1], prod(x[:-1])
    lo, hi, skip = int(n.attr("min_gram_length")), int(n.attr("max_gram_length")), int(n.attr("max_skip_count"))
    candidates: Dim = 0
    for gram in range(lo, hi + 1):
        for s in range(skip + 1 if gram > 1 else 1):
            span = length - (gram - 1) * (s + 1)
            candidates += max(0, span) if isinstance(span, int) else sympy.Max(0, span)
    weights = n.out_numel(0) if n.attr("mode") in ("IDF", "TFIDF") else 0
    return Work(flops=rows * candidates + weights)


# --- optimizers (ai.onnx.preview.training) -----------------------------------------------------------

OPTIMIZER_FLOPS_PER_ELEMENT = {
    # G' = norm·X + G 2; H += G'² 2; sqrt(H) + eps 2; X − r·G'/… 3
    "Adagrad": 9,
    # G' 2; V = alpha·V + beta·G' 3; X − R·V 2 (nesterov: X − R·(G' + alpha·V) 4)
    "Momentum": 7,
    # G' 2; V = alpha·V + (1−alpha)·G' 3; H = beta·H + (1−beta)·G'² 4; sqrt(H) + eps 2; X − R'·V/… 3
    "Adam": 14,
}
_OPTIMIZER_TENSORS = {"Adagrad": 3, "Momentum": 3, "Adam": 4}  # inputs per optimized tensor: X, G, state...


@rule(tuple(OPTIMIZER_FLOPS_PER_ELEMENT), domain=TRAINING, kind=Kind.ELEMENTWISE)
def optimizer(n: NodeView) -> Work:
    """Per element of the optimized tensors X; the scalar learning-rate schedule is not counted."""
    count = (len(n.node.inputs) - 2) // _OPTIMIZER_TENSORS[n.op_type]
    elements = sum((n.in_numel(2 + i) for i in range(count)), start=0)  # the X inputs
    per = OPTIMIZER_FLOPS_PER_ELEMENT[n.op_type]
    if n.op_type == "Momentum" and n.attr("mode") == "nesterov":
        per += 2  # the look-ahead: G' + alpha·V
    if n.op_type == "Adam" and float(n.attr("norm_coefficient_post", 0.0)) != 0.0:
        per += 1  # X · (1 − norm_coefficient_post)
    return Work(flops=per * elements)


# --- ai.onnx.ml ----------------------------------------------------------------------------------------

# Lookups, casts, concatenations and container conversions: no arithmetic.
register_free(("ArrayFeatureExtractor", "LabelEncoder", "CategoryMapper", "CastMap", "DictVectorizer",
               "FeatureVectorizer", "OneHotEncoder", "ZipMap"), domain=ML, kind=Kind.MOVEMENT)

POST_TRANSFORM_FLOPS = {"NONE": 0, "SOFTMAX": SOFTMAX_FLOPS_PER_ELEMENT, "SOFTMAX_ZERO": SOFTMAX_FLOPS_PER_ELEMENT,
                        "LOGISTIC": 1, "PROBIT": 1}
"""Per score: softmax 5 (reduce.py), logistic and probit 1 each (activations)."""
_POST_TRANSFORM_CODES = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")  # TreeEnsemble's ints


def _post(n: NodeView, scores: Dim) -> Dim:
    pt = n.attr("post_transform")  # a string, or TreeEnsemble's int code; schema default NONE / 0
    name = "NONE" if pt is None else _POST_TRANSFORM_CODES[pt] if isinstance(pt, int) else str(pt)
    return POST_TRANSFORM_FLOPS.get(name, 1) * scores


@rule("Binarizer", domain=ML, kind=Kind.ELEMENTWISE)
def binarizer(n: NodeView) -> Work:
    return Work(flops=n.in_numel(0))  # one compare per element


@rule("Imputer", domain=ML, kind=Kind.ELEMENTWISE)
def imputer(n: NodeView) -> Work:
    return Work(flops=n.in_numel(0))  # one compare with the missing-value marker per element


@rule("Scaler", domain=ML, kind=Kind.ELEMENTWISE)
def scaler(n: NodeView) -> Work:
    return Work(flops=2 * n.in_numel(0))  # (x − offset) · scale


NORMALIZER_FLOPS_PER_ELEMENT = {"MAX": 2, "L1": 3, "L2": 4}
"""MAX: compare 1 + divide 1; L1: |x| 1 + add 1 + divide 1; L2 (sqrt(x²/Σx²)): square 1 + add 1 + divide 1
+ sqrt 1."""


@rule("Normalizer", domain=ML, kind=Kind.NORMALIZATION)
def normalizer(n: NodeView) -> Work:
    return Work(flops=NORMALIZER_FLOPS_PER_ELEMENT.get(str(n.attr("norm", "MAX")), 3) * n.in_numel(0))


@rule(("LinearClassifier", "LinearRegressor"), domain=ML, kind=Kind.COMPUTE)
def linear_model(n: NodeView) -> Work:
    """Scores = X·Wᵀ + b: one MAC per coefficient per row, one add per intercept per row, the post
    transform per score, and (classifier) an argmax over the classes per row."""
    rows = _batch(n.in_shape(0))
    coefficients = len(n.attr("coefficients") or [])
    intercepts = len(n.attr("intercepts") or [])
    if n.op_type == "LinearClassifier":
        outputs = len(n.attr("classlabels_ints") or n.attr("classlabels_strings") or []) or max(intercepts, 1)
    else:
        outputs = int(n.attr("targets", 1))
    macs = rows * coefficients  # the dot products
    flops = FLOPS_PER_MAC * macs + rows * intercepts + _post(n, rows * outputs)
    if n.op_type == "LinearClassifier":
        flops += rows * outputs  # argmax for the label
    return Work(flops=flops, macs=macs)


def _kernel_flops(n: NodeView, features: Dim) -> tuple[Dim, Dim]:
    """(MACs, other FLOPs) of one SVM kernel evaluation over ``features``."""
    kind = str(n.attr("kernel_type", "LINEAR"))
    if kind == "RBF":
        return features, features + 2  # Σ(x − sv)²: subtract + MAC per feature; · gamma, exp
    if kind in ("POLY", "SIGMOID"):
        return features, 3  # dot; · gamma, + coef0, pow/tanh
    return features, 0  # LINEAR: the dot product


@rule(("SVMClassifier", "SVMRegressor"), domain=ML, kind=Kind.COMPUTE)
def svm(n: NodeView) -> Work:
    """Kernel evaluations against every support vector, then the dual-coefficient sums.

    Classifier (one-vs-one, libsvm layout): ``coefficients`` holds (C−1)·n_sv dual coefficients, one MAC
    each per row; per class pair: + rho 1 and a vote compare 1, and Platt scaling 3 when prob_a is set
    (the pairwise-coupling solver that follows is iterative and not counted). Without support vectors
    the model is linear: one MAC per coefficient per row.
    """
    x = n.in_shape(0)
    rows, features = _batch(x), x[-1]
    coefficients = len(n.attr("coefficients") or [])
    if n.op_type == "SVMClassifier":
        n_sv = sum(int(v) for v in (n.attr("vectors_per_class") or []))
        classes = len(n.attr("classlabels_ints") or n.attr("classlabels_strings") or [])
    else:
        n_sv, classes = int(n.attr("n_supports", 0)), 2
    pairs = classes * (classes - 1) // 2
    if n_sv == 0:  # linear mode: coefficients are a weight matrix
        macs = rows * coefficients
        return Work(flops=FLOPS_PER_MAC * macs + rows * len(n.attr("rho") or []), macs=macs)
    k_macs, k_other = _kernel_flops(n, features)
    macs = rows * (n_sv * k_macs + coefficients)  # kernels + dual sums
    per_pair = 2 + (3 if n.attr("prob_a") else 0)  # rho and vote (+ Platt)
    flops = FLOPS_PER_MAC * macs + rows * n_sv * k_other + rows * pairs * per_pair
    return Work(flops=flops + _post(n, rows * max(classes, 1)), macs=macs)


def _longest_paths(children: list[tuple[int | None, int | None]], roots: Sequence[int]) -> int:
    """Σ over roots of the number of interior nodes on the longest root-to-leaf path (iterative)."""
    depth: dict[int, int] = {}
    for root in roots:
        stack = [root]
        while stack:
            node = stack[-1]
            kids = [c for c in children[node] if c is not None and c not in depth]
            if kids:
                stack.extend(kids)
                continue
            stack.pop()
            depth[node] = 1 + max((depth[c] for c in children[node] if c is not None), default=0)
    return sum(depth[r] for r in roots)


def _tree_v5_depths(n: NodeView) -> tuple[int, int]:
    """(Σ longest path, trees) of an opset-5 TreeEnsemble: children index nodes unless flagged leaves."""
    true_ids, false_ids = n.attr("nodes_truenodeids"), n.attr("nodes_falsenodeids")
    true_leaf, false_leaf = n.attr("nodes_trueleafs"), n.attr("nodes_falseleafs")
    children = [(None if tl else int(t), None if fl else int(f))
                for t, f, tl, fl in zip(true_ids, false_ids, true_leaf, false_leaf, strict=True)]
    roots = [int(r) for r in n.attr("tree_roots")]
    return _longest_paths(children, roots), len(roots)


def _tree_legacy_depths(n: NodeView) -> tuple[int, int]:
    """(Σ longest path, trees) of TreeEnsembleClassifier/Regressor: nodes are (tree id, node id) pairs."""
    tree_ids, node_ids = n.attr("nodes_treeids"), n.attr("nodes_nodeids")
    leaf = [(m.decode() if isinstance(m, bytes) else str(m)) == "LEAF" for m in n.attr("nodes_modes")]
    index = {(int(t), int(i)): k for k, (t, i) in enumerate(zip(tree_ids, node_ids, strict=True))}
    links = [(None, None) if leaf[k] else (index.get((int(t), int(tn))), index.get((int(t), int(fn))))
             for k, (t, tn, fn) in enumerate(zip(tree_ids, n.attr("nodes_truenodeids"), n.attr("nodes_falsenodeids"),
                                                 strict=True))]
    referenced = {c for pair in links for c in pair if c is not None}
    roots = [k for k in range(len(links)) if k not in referenced]
    # A leaf is not a compare: drop leaf children, so a path counts its interior nodes only.
    children = [tuple(None if c is None or leaf[c] else c for c in pair) for pair in links]
    interior_roots = [r for r in roots if not leaf[r]]
    return _longest_paths(children, interior_roots), len(roots)  # type: ignore[arg-type]


def _tree_work(n: NodeView, compares: int, trees: int, outputs: int, average: bool) -> Work:
    """Per row and tree: one compare per node on the path (bounded by the tree's longest path: the real
    path depends on the features), one add of the reached leaf's weights; then the average's divides,
    the post transform, and the classifier's argmax.
    """
    rows = _batch(n.in_shape(0))
    flops = rows * (compares + trees)  # path compares + leaf accumulation
    flops += rows * outputs * (1 if average else 0) + _post(n, rows * outputs)
    if n.op_type == "TreeEnsembleClassifier":
        flops += rows * outputs  # argmax for the label
    return Work(flops=flops, note="tree paths: longest (worst case)")


@rule("TreeEnsemble", domain=ML, kind=Kind.COMPUTE)
def tree_ensemble(n: NodeView) -> Work:
    compares, trees = _tree_v5_depths(n)
    average = int(n.attr("aggregate_function", 1)) == 0  # 0 AVERAGE, 1 SUM, 2 MIN, 3 MAX
    return _tree_work(n, compares, trees, int(n.attr("n_targets")), average)


@rule(("TreeEnsembleClassifier", "TreeEnsembleRegressor"), domain=ML, kind=Kind.COMPUTE)
def tree_ensemble_legacy(n: NodeView) -> Work:
    compares, trees = _tree_legacy_depths(n)
    ids = n.attr("class_ids") or n.attr("target_ids") or []
    outputs = max(1, len({int(i) for i in ids}))
    average = str(n.attr("aggregate_function", "SUM")) == "AVERAGE"
    return _tree_work(n, compares, trees, outputs, average)
