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
