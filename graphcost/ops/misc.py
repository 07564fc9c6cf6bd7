"""The rest of ai.onnx and its preview/training domains: signal, linear algebra, detection,
random, sequences, strings, decoding and optimizers. (Attention lives in ``attention.py``, the
``ai.onnx.ml`` ops in ``ml.py``, convolution variants in ``conv.py``.)

Each rule states its count in its docstring. The recurring conventions:

* ``macs`` counts the multiply-accumulates of dot products. Every other arithmetic step is a FLOP
  only; FFT butterflies (complex multiplies and adds mixed) are FLOPs only too.
* transcendental functions (exp, cos, tanh, sqrt) count 1 FLOP, as in elementwise.py.
* string, hash-lookup and container ops do no floating-point arithmetic: zero FLOPs, registered on
  purpose. Their work is real but is not FLOPs (and is data-dependent: string lengths).
* where work depends on data (an image's encoding, a gradient graph), the rule says Unknown and why.
"""

from __future__ import annotations

from graphcost._dims import Dim, ceil_log2, numel, prod
from graphcost._minmax import dim_max, dim_min
from graphcost.ops._registry import (
    FLOPS_PER_MAC,
    Kind,
    NodeView,
    Unknown,
    Work,
    register_free,
    rule,
)

TRAINING = "ai.onnx.preview.training"


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
        pairs = min(pairs, bound) if isinstance(pairs, int) and isinstance(bound, int) else dim_min(pairs, bound)
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

# A sequence holds its elements by reference: building one, adding to it, taking an element out or erasing one
# moves no tensor data in the ideal. onnxruntime copies each element in and out; that uniform charge (the
# sequence's bytes from passes/_sequences.py) is kept beside it as the node's bytes as written.
SEQUENCE_REFERENCES = ("SequenceConstruct", "SequenceInsert", "SequenceAt", "SequenceErase")


@rule(SEQUENCE_REFERENCES, kind=Kind.MOVEMENT)
def sequence_reference(n: NodeView) -> Work:
    """0 bytes in the ideal (references to the elements); the copies the graph as written makes beside it."""
    return Work(flops=0, bytes_read=0, bytes_written=0, as_written=True)


# Splitting into a sequence and concatenating one copy the data: charged their inputs and outputs.
register_free(("SplitToSequence", "ConcatFromSequence"), kind=Kind.MOVEMENT)
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
            candidates += max(0, span) if isinstance(span, int) else dim_max(0, span)
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
