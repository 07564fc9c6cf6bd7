"""Ops no inference engine types (com.microsoft fused, NCHWc, QLinear) still get shapes, so nothing
downstream goes unknown. Reproducers from onnxruntime-optimized third-party exports."""

from __future__ import annotations

import onnx.parser
import pytest

import graphcost

H = '<ir_version: 10, opset_import: ["" : 18, "com.microsoft" : 1, "com.microsoft.nchwc" : 1]>'


def analyze(text: str, **dims: int) -> graphcost.Report:
    return graphcost.analyze(onnx.parser.parse_model(H + text), dims=dims or None)


def test_fused_matmul_feeds_attention() -> None:
    r = analyze("""
        g (float[batch,4,seq,16] q, float[batch,4,16,seq] k, float[batch,4,seq,16] v) => (y) {
           s = com.microsoft.FusedMatMul<alpha: float = 0.25>(q, k)
           p = Softmax<axis = -1>(s)
           y = MatMul(p, v) }""", batch=2, seq=16)
    assert r.totals.unknown_nodes == 0
    qk = 2 * 4 * 16 * 16 * 16  # batch·heads·seq·seq scores, 16 MACs each
    pv = 2 * 4 * 16 * 16 * 16  # batch·heads·seq outputs of 16, a 16-long dot product each
    assert r.totals.macs == qk + pv
    assert r.model.outputs[0].shape == ("batch", 4, "seq", 16)  # shapes stay symbolic; numbers use the binding


def test_fused_matmul_transposes() -> None:
    r = analyze("""
        g (float[8,3] a, float[5,8] b) => (y) { y = com.microsoft.FusedMatMul<transA = 1, transB = 1>(a, b) }""")
    assert r.model.outputs[0].shape == (3, 5)
    assert r.totals.macs == 3 * 8 * 5  # (aᵀ)[3,8] · (bᵀ)[8,5]


def test_fused_conv_then_standard_op() -> None:
    r = analyze("""
        g (float[N,3,8,8] x, float[4,3,3,3] w, float[4] b) => (y) {
           c = com.microsoft.FusedConv<activation: string = "Relu">(x, w, b)
           y = Sigmoid(c) }""", N=2)
    assert r.totals.unknown_nodes == 0
    assert r.totals.macs == 2 * 4 * 6 * 6 * 3 * 3 * 3  # N·Cout·Hout·Wout outputs, Cin·3·3 MACs each
    assert r.node("Sigmoid_1").flops == 2 * 4 * 6 * 6  # the downstream op got its shape


def test_nchwc_conv_chain() -> None:
    r = analyze("""
        g (float[N,8,8,8] x, float[8,8,3,3] w) => (y) {
           xc = com.microsoft.nchwc.ReorderInput(x)
           yc = com.microsoft.nchwc.Conv<pads = [1, 1, 1, 1]>(xc, w)
           pc = com.microsoft.nchwc.MaxPool<kernel_shape = [2, 2], strides = [2, 2]>(yc)
           y = com.microsoft.nchwc.ReorderOutput<channels = 8>(pc) }""", N=2)
    assert r.totals.unknown_nodes == 0
    assert r.totals.macs == 2 * 8 * 8 * 8 * 8 * 3 * 3  # same-padded 3×3 conv, 8→8 channels
    assert r.model.outputs[0].shape == ("N", 8, 4, 4)


def test_simplified_layer_norm_in_the_default_domain() -> None:
    r = analyze("""
        g (float[2,16,64] x, float[64] s) => (y) {
           n = SimplifiedLayerNormalization<axis = -1, epsilon: float = 1e-6>(x, s)
           y = Relu(n) }""")
    assert r.totals.unknown_nodes == 0


@pytest.mark.parametrize("op, attrs", [("QLinearSoftmax", "<axis = -1, opset = 13>"), ("QLinearSigmoid", "")])
def test_qlinear_unary_ops_keep_their_shape(op: str, attrs: str) -> None:
    r = analyze(f"""
        g (uint8[4,10] x, float xs, uint8 xz, float ys, uint8 yz, uint8[10,6] w, float ws, uint8 wz) => (o) {{
           p = com.microsoft.{op}{attrs}(x, xs, xz, ys, yz)
           q = QLinearMatMul(p, ys, yz, w, ws, wz, ys, yz)
           o = DequantizeLinear(q, ys, yz) }}""")
    assert r.totals.unknown_nodes == 0
    assert r.node("QLinearMatMul_1").macs == 4 * 10 * 6


def test_qlinear_global_average_pool() -> None:
    r = analyze("""
        g (uint8[1,16,7,7] x, float s, uint8 z) => (y) {
           p = com.microsoft.QLinearGlobalAveragePool<channels_last = 0>(x, s, z, s, z)
           y = DequantizeLinear(p, s, z) }""")
    assert r.totals.unknown_nodes == 0
    assert r.model.outputs[0].shape == (1, 16, 1, 1)


# ----------------------------------------------------------------- onnxruntime's quantizer and NHWC transformer


def test_dynamic_quantize_lstm_feeds_the_classifier() -> None:
    """quantize_dynamic of torch LSTM + Linear: before the rule every node after the LSTM was unknown."""
    r = analyze("""
        g (float[seq,batch,16] x, int8[1,16,32] w, int8[1,8,32] rw, float[1] ws, int8[1] wz, float[1] rs,
           int8[1] rz, float[8,10] fc) => (y) {
           one = Constant<value = int64[1] {1}>()
           h, hn, cn = com.microsoft.DynamicQuantizeLSTM<hidden_size = 8>(x, w, rw, , , , , , ws, wz, rs, rz)
           hs = Squeeze(h, one)
           y = MatMul(hs, fc) }""", seq=7, batch=2)
    assert r.totals.unknown_nodes == 0
    assert r.model.outputs[0].shape == ("seq", "batch", 10)
    lstm = 7 * 2 * (16 * 4 * 8 + 8 * 4 * 8)  # seq·batch cells, input + recurrent projections of 4 gates
    assert r.totals.macs == lstm + 7 * 2 * 8 * 10  # + the classifier


def test_dynamic_quantize_lstm_hidden_from_r_and_bidirectional_states() -> None:
    r = analyze("""
        g (float[seq,batch,16] x, int8[2,16,32] w, int8[2,8,32] rw, float[2] ws, int8[2] wz, float[2] rs,
           int8[2] rz) => (h, hn, cn) {
           h, hn, cn = com.microsoft.DynamicQuantizeLSTM<direction = "bidirectional">(x, w, rw, , , , , , ws, wz,
                                                                                      rs, rz) }""")
    assert [o.shape for o in r.model.outputs] == [("seq", 2, "batch", 8), (2, "batch", 8), (2, "batch", 8)]


def test_qembed_layer_norm_feeds_qattention() -> None:
    """The transformers optimizer, then quantize_dynamic (onnxruntime's BERT recipe)."""
    r = analyze("""
        g (int32[batch,seq] ids, int32[batch,seq] mask, uint8[50,16] word, uint8[32,16] pos, uint8[16] gamma,
           uint8[16] beta, float es, uint8 ez, int8[16,48] wt, float[48] bias, float xs, float wsc, uint8 xz,
           int8 wz) => (y) {
           e, mi = com.microsoft.QEmbedLayerNormalization(ids, , word, pos, , gamma, beta, mask, es, es, , es, es,
                                                          ez, ez, , ez, ez)
           qe, qs, qz = DynamicQuantizeLinear(e)
           a = com.microsoft.QAttention<num_heads = 2>(qe, wt, bias, qs, wsc, mi, qz, wz)
           y = Relu(a) }""", batch=2, seq=5)
    assert r.totals.unknown_nodes == 0
    assert r.model.outputs[0].shape == ("batch", "seq", 16)
    proj = 2 * 5 * 16 * 48  # the QKV projection
    core = 2 * 5 * 5 * 16 * 2  # Q·K^T and P·V over 2 heads of 8
    assert r.totals.macs == proj + core


def test_nhwc_qlinear_conv_and_max_pool() -> None:
    """ORT_ENABLE_ALL on a quantized CNN: Transpose to NHWC, com.microsoft QLinearConv (channels_last) and
    NhwcMaxPool, Transpose back. Before these rules everything from the first conv on was unknown."""
    r = analyze("""
        g (uint8[N,3,8,8] x, float s, uint8 z, int8[4,3,3,3] w, float ws, int8 wz) => (y) {
           t = Transpose<perm = [0, 2, 3, 1]>(x)
           c = com.microsoft.QLinearConv<channels_last = 1, pads = [1, 1, 1, 1]>(t, s, z, w, ws, wz, s, z)
           p = com.microsoft.NhwcMaxPool<kernel_shape = [2, 2], strides = [2, 2]>(c)
           y = Transpose<perm = [0, 3, 1, 2]>(p) }""", N=2)
    assert r.totals.unknown_nodes == 0
    assert r.model.outputs[0].shape == ("N", 4, 4, 4)
    assert r.totals.macs == 2 * 8 * 8 * 4 * 3 * 3 * 3  # N·H·W·Cout outputs, Cin·3·3 MACs each


def test_qlinear_where_broadcasts() -> None:
    r = analyze("""
        g (bool[N,1] c, uint8[N,8] x, float s, uint8 z, uint8[8] y0) => (y) {
           q = com.microsoft.QLinearWhere(c, x, s, z, y0, s, z, s, z)
           y = DequantizeLinear(q, s, z) }""", N=3)
    assert r.totals.unknown_nodes == 0
    assert r.model.outputs[0].shape == ("N", 8)


def test_gather_block_quantized_unpacks_4_bit_rows() -> None:
    """uint8 data holds two 4-bit values a byte along the quantized (last) axis."""
    r = analyze("""
        g (uint8[100,16] data, int64[batch,seq] idx, float[100,1] scales, float[32,8] w) => (y) {
           e = com.microsoft.GatherBlockQuantized<block_size = 32>(data, idx, scales)
           y = MatMul(e, w) }""", batch=2, seq=3)
    assert r.totals.unknown_nodes == 0
    assert r.model.outputs[0].shape == ("batch", "seq", 8)
    assert r.totals.macs == 2 * 3 * 32 * 8


def test_matmul_bnb4_output() -> None:
    r = analyze("""
        g (float[M,32] a, uint8[256] bq, float[32] absmax) => (y) {
           m = com.microsoft.MatMulBnb4<K = 32, N = 16, block_size = 16, quant_type = 1>(a, bq, absmax)
           y = Relu(m) }""", M=4)
    assert r.totals.unknown_nodes == 0
    assert r.model.outputs[0].shape == ("M", 16)
