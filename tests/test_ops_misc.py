"""The remaining rules: attention, signal, linear algebra, detection, random, strings, optimizers, ML."""

from __future__ import annotations

import sympy
from ophelp import cost_of

from graphcost._dims import symbol
from graphcost.ops import Kind, Unknown, Work, lookup


def _m(graph: str, opset: int = 18, extra: str = "") -> str:
    return f'<ir_version: 10, opset_import: ["" : {opset}{extra}]>\n{graph}'


def work(text: str) -> Work:
    w = cost_of(text)
    assert isinstance(w, Work), w
    return w


# --- attention -------------------------------------------------------------------------------------


def _attention_expected(b: int, hq: int, sq: int, d: int, hkv: int, t: int, dv: int, per_score: int) -> tuple[int, int]:
    q, k, y = b * hq * sq * d, b * hkv * t * d, b * hq * sq * dv
    scores = b * hq * sq * t
    macs = q * t + y * t  # QKᵀ (dot over d per score) + PV (dot over t per output)
    return 2 * macs + (q + k) + per_score * scores, macs  # + Q, K scaling + per-score work


def test_attention_4d() -> None:
    w = work(_m("g (float[2,3,4,8] Q, float[2,3,6,8] K, float[2,3,6,8] V) => (Y) { Y = Attention (Q, K, V) }",
                opset=23))
    assert (w.flops, w.macs) == _attention_expected(2, 3, 4, 8, 3, 6, 8, per_score=5)  # softmax only


def test_attention_3d_matches_4d() -> None:
    w = work(_m("g (float[2,4,24] Q, float[2,6,24] K, float[2,6,24] V) => (Y) "
                "{ Y = Attention <q_num_heads: int = 3, kv_num_heads: int = 3> (Q, K, V) }", opset=23))
    assert (w.flops, w.macs) == _attention_expected(2, 3, 4, 8, 3, 6, 8, per_score=5)


def test_attention_with_past_and_softcap() -> None:
    w = work(_m("g (float[1,2,1,8] Q, float[1,2,1,8] K, float[1,2,1,8] V, float[1,2,5,8] pk, float[1,2,5,8] pv) "
                "=> (Y, PK, PV) { Y, PK, PV = Attention <softcap: float = 2.0, is_causal: int = 1> "
                "(Q, K, V, , pk, pv) }", opset=23))
    t = 1 + 5  # past and new keys
    assert (w.flops, w.macs) == _attention_expected(1, 2, 1, 8, 2, t, 8, per_score=5 + 3 + 1)  # + softcap, mask


def test_attention_symbolic_causal() -> None:
    w = work(_m("g (float[B,H,S,64] Q, float[B,H,S,64] K, float[B,H,S,64] V) => (Y) "
                "{ Y = Attention <is_causal: int = 1> (Q, K, V) }", opset=23))
    b, h, s = symbol("B"), symbol("H"), symbol("S")
    macs = b * h * s * 64 * s + b * h * s * 64 * s  # QKᵀ + PV: masked positions are still computed
    flops = 2 * macs + 2 * b * h * s * 64 + (5 + 1) * b * h * s * s  # + Q, K scaling + softmax, mask
    assert sympy.expand(w.macs - macs) == 0
    assert sympy.expand(w.flops - flops) == 0


def test_flex_attention_costs_its_score_mod() -> None:
    sig = "g (float[1,2,3,4] Q, float[1,2,3,4] K, float[1,2,3,4] V) => (float[1,2,3,4] Y)"
    plain = work(_m(f"{sig} {{ Y = ai.onnx.preview.FlexAttention (Q, K, V) }}", extra=', "ai.onnx.preview" : 1'))
    modded = work(_m(f"{sig} {{ Y = ai.onnx.preview.FlexAttention <score_mod: graph = m (float[B,H,L,S] s) => "
                     "(float[B,H,L,S] o) <float bias = {0.5}> { o = Add (s, bias) }> (Q, K, V) }",
                     extra=', "ai.onnx.preview" : 1'))
    base, macs = _attention_expected(1, 2, 3, 4, 2, 3, 4, per_score=5)
    assert (plain.flops, plain.macs) == (base, macs)
    assert modded.flops == base + 1 * 2 * 3 * 3  # the Add over the [1, 2, 3, 3] scores


def test_rotary_embedding() -> None:
    full = work(_m("g (float[2,4,3,8] X, float[50,4] c, float[50,4] s, int64[2,3] p) => (Y) "
                   "{ Y = RotaryEmbedding (X, c, s, p) }", opset=23))
    assert full.flops == 3 * 2 * 4 * 3 * 8  # x·cos + x'·sin + add, every element
    part = work(_m("g (float[2,3,32] X, float[50,2] c, float[50,2] s, int64[2,3] p) => (Y) "
                   "{ Y = RotaryEmbedding <num_heads: int = 4, rotary_embedding_dim: int = 4> (X, c, s, p) }",
                   opset=23))
    assert part.flops == 3 * (2 * 3 * 4) * 4  # B·S·heads rows × 4 rotated dims


def test_linear_attention_update_rules() -> None:
    sig = "float[2,4,32] q, float[2,4,32] k, float[2,4,32] v, float[2,4,32] g, float[2,4,4] b"
    tokens, heads, dk, dv = 2 * 4, 4, 8, 8
    state = dk * dv

    def run(rule: str, inputs: str) -> Work:
        return work(_m(f"g ({sig}) => (o, st) {{ o, st = LinearAttention <q_num_heads: int = 4, kv_num_heads: int = 4, "
                       f"update_rule: string = \"{rule}\"> ({inputs}) }}", opset=27))

    linear = run("linear", "q, k, v")
    macs = tokens * (heads * state + heads * state)  # S += k⊗v, o = qᵀS
    assert linear.macs == macs
    assert linear.flops == 2 * macs + tokens * heads * dv  # + scale the readout
    gated = run("gated", "q, k, v, , g")
    assert gated.flops == linear.flops + tokens * heads * state + 2 * 4 * 32  # decay the state, exp(g)
    delta = run("delta", "q, k, v, , , b")
    assert delta.macs == macs + tokens * heads * state  # Sᵀk
    assert delta.flops == 2 * delta.macs + tokens * heads * dv + tokens * heads * 2 * dv  # v − Sᵀk, ·β


def test_swiglu_and_causal_conv() -> None:
    assert work(_m("g (float[2,8] A, float[2,8] B) => (Y) { Y = SwiGLU (A, B) }", opset=28)).flops == 2 * 16
    w = work(_m("g (float[2,4,8] X, float[4,1,4] W, float[4] b) => (Y, S) "
                "{ Y, S = CausalConvWithState <activation: string = \"silu\"> (X, W, b) }", opset=27))
    out = 2 * 4 * 8
    assert w.macs == out * 4  # k = 4 taps per output
    assert w.flops == 2 * w.macs + out + out  # + bias + SiLU


def test_deform_conv() -> None:
    w = work(_m("g (float[1,1,3,3] X, float[1,1,2,2] W, float[1,8,2,2] off) => (Y) "
                "{ Y = DeformConv <kernel_shape: ints = [2, 2]> (X, W, off) }", opset=19))
    samples = 1 * 1 * (2 * 2) * (2 * 2)  # N · C · ∏out · ∏kernel
    conv = (1 * 1 * 2 * 2) * 1 * 4  # outputs · C/group · ∏kernel
    assert w.macs == samples * 4 + conv  # bilinear samples + the convolution
    assert w.flops == 2 * w.macs + 1 * 8 * 2 * 2  # + one add per offset element


# --- signal ------------------------------------------------------------------------------------------


def test_dft_real_and_complex() -> None:
    real = work(_m("g (float[1,10,10,1] X) => (Y) { Y = DFT (X) }", opset=20))
    # opset 20's default axis is −2 (the last signal axis): 10 transforms of length 10, ⌈log2 10⌉ = 4
    assert real.flops == 10 * 5 * 10 * 4 // 2  # a real input costs half
    cplx = work(_m("g (float[3,8,2] X) => (Y) { Y = DFT <axis: int = 1> (X) }", opset=17))
    assert cplx.flops == 3 * 5 * 8 * 3  # 3 transforms of 5·N·log2 N


def test_stft_with_window() -> None:
    w = work(_m("g (float[1,128,1] X, float[16] win) => (Y) <int64 step = {8}> { Y = STFT (X, step, win) }",
                opset=17))
    frames = (128 - 16) // 8 + 1  # 15
    window = frames * 16  # one multiply per sample of each frame
    fft = frames * 5 * 16 * 4 // 2  # real frames of 16: half of 5·N·log2 N
    assert w.flops == window + fft


def test_window_functions_and_mel() -> None:
    hann = work(_m("g () => (Y) <int64 n = {10}> { Y = HannWindow (n) }", opset=17))
    blackman = work(_m("g () => (Y) <int64 n = {10}> { Y = BlackmanWindow (n) }", opset=17))
    assert hann.flops == 4 * 10  # angle, cos, multiply, subtract
    assert blackman.flops == 8 * 10  # + second angle, cos, multiply, add
    mel = work(_m("g () => (Y) <int64 b = {8}, int64 d = {16}, int64 r = {8000}, float lo = {0}, float hi = {4000}> "
                  "{ Y = MelWeightMatrix (b, d, r, lo, hi) }", opset=17))
    assert mel.flops == 2 * (16 // 2 + 1) * 8  # subtract and divide per matrix entry


# --- linear algebra, detection, random ---------------------------------------------------------------


def test_det() -> None:
    w = work(_m("g (float[4,3,3] X) => (Y) { Y = Det (X) }"))
    macs = 4 * (2 * 3 * 5 // 6)  # Σ j² for j < 3 = 1 + 4 = 5 elimination updates per matrix
    assert w.macs == macs
    assert w.flops == 2 * macs + 4 * 3 + 4 * 2  # + n(n−1)/2 divides + (n−1) diagonal products
    sym = work(_m("g (float[n,n] X) => (Y) { Y = Det (X) }"))
    n = symbol("n")
    assert sympy.expand(sym.macs - (n - 1) * n * (2 * n - 1) / 6) == 0


def test_non_max_suppression_worst_case() -> None:
    sig = "g (float[1,6,4] B, float[1,1,6] S) => (I)"
    w = work(_m(f"{sig} <int64[1] m = {{3}}, float[1] iou = {{0.5}}, float[1] th = {{0.0}}> "
                "{ I = NonMaxSuppression (B, S, m, iou, th) }"))
    s = 6
    pairs = min(s * (s - 1) // 2, 3 * (s - 1))  # all pairs, or each of 3 kept boxes vs the rest
    per_class = s * 3 + 13 * pairs + s  # sort (⌈log2 6⌉ = 3), IoU tests, score threshold
    assert w.flops == per_class + 3 * s  # + box areas
    none = work(_m(f"{sig} {{ I = NonMaxSuppression (B, S) }}"))
    assert none.flops == 0  # max_output_boxes_per_class defaults to 0: nothing selected


def test_random() -> None:
    assert work(_m("g () => (Y) { Y = RandomNormal <shape: ints = [3, 4]> () }")).flops == 12  # one draw each
    assert work(_m("g (float[10] P) => (Y) { Y = Bernoulli (P) }", opset=15)).flops == 2 * 10  # draw + compare
    multi = work(_m("g (float[2,5] X) => (Y) { Y = Multinomial <sample_size: int = 3> (X) }"))
    assert multi.flops == 2 * 10 + 2 * 3 * (1 + 3)  # CDF (exp + add); per sample a draw + ⌈log2 5⌉ compares
    like = lookup("", "RandomUniformLike")
    assert like is not None and set(like.free_inputs) == {0}


# --- strings, sequences, decoding, n-grams -----------------------------------------------------------


def test_free_families_are_registered_on_purpose() -> None:
    for op, kind in [("SequenceConstruct", Kind.MOVEMENT), ("SequenceLength", Kind.FREE),
                     ("StringConcat", Kind.MOVEMENT), ("RegexFullMatch", Kind.MOVEMENT)]:
        entry = lookup("", op)
        assert entry is not None and entry.kind is kind, op
    w = work(_m('g (string[3] X) => (Y) { Y = StringNormalizer <case_change_action: string = "LOWER"> (X) }'))
    assert w.flops == 0


def test_image_decoder_is_unknown_with_a_reason() -> None:
    r = cost_of(_m("g (uint8[100] X) => (Y) { Y = ImageDecoder (X) }", opset=20))
    assert isinstance(r, Unknown) and "data" in r.reason


def test_tfidf_vectorizer() -> None:
    tf = work(_m("g (int32[12] X) => (Y) { Y = TfIdfVectorizer <max_gram_length: int = 2, max_skip_count: int = 0, "
                 "min_gram_length: int = 2, mode: string = \"TF\", ngram_counts: ints = [0, 4], "
                 "ngram_indexes: ints = [0, 1, 2], pool_int64s: ints = [2, 3, 5, 4, 5]> (X) }"))
    assert tf.flops == 12 - 1  # one bigram candidate per adjacent pair
    skip = work(_m("g (int32[12] X) => (Y) { Y = TfIdfVectorizer <max_gram_length: int = 2, max_skip_count: int = 2, "
                   "min_gram_length: int = 1, mode: string = \"TFIDF\", ngram_counts: ints = [0, 4], "
                   "ngram_indexes: ints = [0, 1, 2, 3, 4, 5, 6], pool_int64s: ints = [2, 3, 5, 4, 5, 6, 7, 8], "
                   "weights: floats = [1, 1, 1, 1, 1, 1, 1]> (X) }"))
    candidates = 12 + 11 + 10 + 9  # unigrams; bigrams with skips 0, 1, 2
    assert skip.flops == candidates + 7  # + a weight multiply per output


# --- optimizers --------------------------------------------------------------------------------------


def test_optimizers() -> None:
    training = ', "ai.onnx.preview.training" : 1'
    adam = work(_m("g (float R, int64 T, float[2] X, float[2] G, float[2] V, float[2] H) => (X2, V2, H2) "
                   "{ X2, V2, H2 = ai.onnx.preview.training.Adam (R, T, X, G, V, H) }", extra=training))
    assert adam.flops == 14 * 2  # regularize 2, V 3, H 4, sqrt+eps 2, update 3
    adagrad = work(_m("g (float R, int64 T, float[3] X1, float[4] X2, float[3] G1, float[4] G2, float[3] H1, "
                      "float[4] H2) => (A, B, C, D) { A, B, C, D = ai.onnx.preview.training.Adagrad "
                      "(R, T, X1, X2, G1, G2, H1, H2) }", extra=training))
    assert adagrad.flops == 9 * (3 + 4)  # over both optimized tensors
    nesterov = work(_m("g (float R, int64 T, float[5] X, float[5] G, float[5] V) => (X2, V2) "
                       "{ X2, V2 = ai.onnx.preview.training.Momentum <alpha: float = 0.9, beta: float = 1.0, "
                       "mode: string = \"nesterov\", norm_coefficient: float = 0.0> (R, T, X, G, V) }", extra=training))
    assert nesterov.flops == (7 + 2) * 5


# --- ai.onnx.ml -----------------------------------------------------------------------------------------

ML = ', "ai.onnx.ml" : 3'


def test_ml_elementwise() -> None:
    assert work(_m("g (float[3,4] X) => (Y) { Y = ai.onnx.ml.Binarizer (X) }", extra=ML)).flops == 12
    assert work(_m("g (float[3,4] X) => (Y) { Y = ai.onnx.ml.Scaler <offset: floats = [0], scale: floats = [2]> (X) }",
                   extra=ML)).flops == 2 * 12  # subtract, multiply
    assert work(_m('g (float[3,4] X) => (Y) { Y = ai.onnx.ml.Normalizer <norm: string = "L2"> (X) }',
                   extra=ML)).flops == 4 * 12  # square, add, divide, sqrt


def test_linear_classifier() -> None:
    w = work(_m("g (float[5,3] X) => (L, S) { L, S = ai.onnx.ml.LinearClassifier "
                "<coefficients: floats = [1, 2, 3, 4, 5, 6], intercepts: floats = [0, 1], "
                "classlabels_ints: ints = [0, 1], post_transform: string = \"SOFTMAX\"> (X) }", extra=ML))
    assert w.macs == 5 * 6  # each row · 2 classes × 3 features
    assert w.flops == 2 * 30 + 5 * 2 + 5 * (5 * 2) + 5 * 2  # + intercepts + softmax + argmax


def test_svm_classifier_rbf() -> None:
    w = work(_m("g (float[2,3] X) => (L, S) { L, S = ai.onnx.ml.SVMClassifier <kernel_type: string = \"RBF\", "
                "kernel_params: floats = [0.1, 0, 3], vectors_per_class: ints = [2, 1], "
                "classlabels_ints: ints = [0, 1], "
                "support_vectors: floats = [1, 2, 3, 4, 5, 6, 7, 8, 9], coefficients: floats = [1, 1, -1], "
                "rho: floats = [0]> (X) }", extra=ML))
    kernels = 2 * 3  # rows × support vectors
    assert w.macs == kernels * 3 + 2 * 3  # Σ(x − sv)² over 3 features; (C−1)·n_sv dual coefficients per row
    assert w.flops == 2 * w.macs + kernels * (3 + 2) + 2 * 1 * 2  # subtracts, ·gamma, exp; rho + vote per pair


def test_svm_regressor_linear_mode() -> None:
    w = work(_m("g (float[2,3] X) => (Y) { Y = ai.onnx.ml.SVMRegressor <coefficients: floats = [1, 2, 3], "
                "n_supports: int = 0, rho: floats = [0.5]> (X) }", extra=ML))
    assert w.macs == 2 * 3 and w.flops == 2 * 6 + 2  # a dot product and rho per row


def test_tree_ensemble_longest_path() -> None:
    w = work(_m("g (double[3,2] X) => (Y) { Y = ai.onnx.ml.TreeEnsemble <aggregate_function: int = 1, "
                "leaf_targetids: ints = [0, 1, 0, 1], leaf_weights: tensor = double[4] {5.23, 12.12, -12.23, 7.21}, "
                "n_targets: int = 2, nodes_falseleafs: ints = [0, 1, 1], nodes_falsenodeids: ints = [2, 2, 3], "
                "nodes_featureids: ints = [0, 0, 0], nodes_modes: tensor = uint8[3] {0, 0, 0}, "
                "nodes_splits: tensor = double[3] {3.14, 1.2, 4.2}, nodes_trueleafs: ints = [0, 1, 1], "
                "nodes_truenodeids: ints = [1, 0, 1], post_transform: int = 0, tree_roots: ints = [0]> (X) }",
                extra=', "ai.onnx.ml" : 5'))
    assert w.flops == 3 * (2 + 1)  # per row: 2 compares on the deepest path + 1 leaf accumulation


def test_legacy_tree_ensemble_regressor() -> None:
    w = work(_m("g (float[4,2] X) => (Y) { Y = ai.onnx.ml.TreeEnsembleRegressor <n_targets: int = 1, "
                "nodes_treeids: ints = [0, 0, 0, 0, 0, 1, 1, 1], nodes_nodeids: ints = [0, 1, 2, 3, 4, 0, 1, 2], "
                "nodes_featureids: ints = [0, 1, 0, 0, 0, 1, 0, 0], nodes_values: floats = [0, 0, 0, 0, 0, 0, 0, 0], "
                "nodes_modes: strings = [\"BRANCH_LEQ\", \"BRANCH_LEQ\", \"LEAF\", \"LEAF\", \"LEAF\", \"BRANCH_LEQ\", "
                "\"LEAF\", \"LEAF\"], nodes_truenodeids: ints = [1, 3, 0, 0, 0, 1, 0, 0], "
                "nodes_falsenodeids: ints = [2, 4, 0, 0, 0, 2, 0, 0], target_treeids: ints = [0, 0, 0, 1, 1], "
                "target_nodeids: ints = [2, 3, 4, 1, 2], target_ids: ints = [0, 0, 0, 0, 0], "
                "target_weights: floats = [1, 2, 3, 4, 5]> (X) }", extra=ML))
    compares = 2 + 1  # tree 0's longest path has 2 branch nodes, tree 1's has 1
    assert w.flops == 4 * (compares + 2)  # + one leaf accumulation per tree, per row
