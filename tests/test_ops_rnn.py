"""LSTM, GRU, RNN: closed-form costs over the whole sequence and every direction."""

from __future__ import annotations

import numpy as np
import onnx.parser
import onnxruntime as ort
import pytest
import sympy
from ophelp import cost_of

from graphcost._dims import symbol
from graphcost.ops import Kind, Work, lookup

HEADER = '<ir_version: 8, opset_import: ["" : 17]>'


def work(model: str) -> Work:
    result = cost_of(model)
    assert isinstance(result, Work), result
    return result


def same(a: object, b: object) -> bool:
    return sympy.expand(sympy.sympify(a) - sympy.sympify(b)) == 0


def test_rnn_ops_are_recurrent() -> None:
    for op in ("LSTM", "GRU", "RNN"):
        entry = lookup("", op)
        assert entry is not None and entry.kind is Kind.RECURRENT


LSTM_FWD = HEADER + """
g (float[5,3,16] X, float[1,32,16] W, float[1,32,8] R) => (float[5,1,3,8] Y) {
  Y = LSTM <hidden_size = 8> (X, W, R)
}"""


def test_lstm_forward_no_bias() -> None:
    seq, batch, dirs, inp, hid = 5, 3, 1, 16, 8
    w = work(LSTM_FWD)
    cells = seq * batch * dirs  # one cell evaluation per step, batch element and direction
    macs = cells * (inp * 4 * hid + hid * 4 * hid)  # input + recurrent projections, 4 gates
    flops = (
        2 * macs
        + cells * 4 * hid  # gate activations
        + cells * 3 * hid  # C_t = f⊙C + i⊙c
        + cells * 2 * hid  # H_t = o⊙h(C_t)
    )
    assert (w.macs, w.flops) == (macs, flops)


def test_lstm_bidirectional_bias_peepholes_clip_symbolic_seq() -> None:
    model = HEADER + """
    g (float[seq,batch,16] X, float[2,32,16] W, float[2,32,8] R, float[2,64] B, float[2,24] P)
      => (float[seq,2,batch,8] Y) {
      Y = LSTM <hidden_size = 8, direction = "bidirectional", clip = 3.0> (X, W, R, B, , , , P)
    }"""
    seq, batch = symbol("seq"), symbol("batch")
    inp, hid, dirs = 16, 8, 2
    w = work(model)
    cells = seq * batch * dirs
    macs = cells * (inp * 4 * hid + hid * 4 * hid)  # input + recurrent projections, 4 gates
    flops = (
        2 * macs
        + cells * 2 * 4 * hid  # Wb + Rb on every gate element
        + cells * 4 * hid  # clip of every pre-activation
        + cells * 4 * hid  # gate activations
        + cells * 6 * hid  # three peepholes: a mul and an add each
        + cells * 3 * hid  # cell update
        + cells * 2 * hid  # hidden update
    )
    assert same(w.macs, macs) and same(w.flops, flops)
    assert w.macs.free_symbols == {seq, batch}  # type: ignore[union-attr]


def test_lstm_layout_1_reads_batch_major_input() -> None:
    model = HEADER.replace("17", "14") + """
    g (float[3,5,4] X, float[1,8,4] W, float[1,8,2] R) => (float[3,5,1,2] Y) {
      Y = LSTM <hidden_size = 2, layout = 1> (X, W, R)
    }"""
    batch, seq, inp, hid = 3, 5, 4, 2
    cells = seq * batch  # forward only
    macs = cells * (inp + hid) * 4 * hid  # input + recurrent projections, 4 gates
    assert work(model).macs == macs


def test_lstm_reverse_is_one_direction() -> None:
    model = LSTM_FWD.replace("<hidden_size = 8>", '<hidden_size = 8, direction = "reverse">')
    assert work(model) == work(LSTM_FWD)


@pytest.mark.parametrize("lbr", [0, 1])
def test_gru_linear_before_reset_variants(lbr: int) -> None:
    model = HEADER + f"""
    g (float[seq,2,10] X, float[2,18,10] W, float[2,18,6] R, float[2,36] B) => (float[seq,2,2,6] Y) {{
      Y = GRU <hidden_size = 6, direction = "bidirectional", linear_before_reset = {lbr}> (X, W, R, B)
    }}"""
    seq = symbol("seq")
    batch, dirs, inp, hid = 2, 2, 10, 6
    w = work(model)
    cells = seq * batch * dirs
    macs = cells * (inp * 3 * hid + hid * 3 * hid)  # input + recurrent projections, 3 gates
    reset = 2 * hid if lbr else hid  # r⊙(H·Rh^T + Rbh) then + X·Wh^T  |  r⊙H before Rh
    flops = (
        2 * macs
        + cells * 2 * 3 * hid  # Wb + Rb
        + cells * 3 * hid  # gate activations z, r, h
        + cells * reset  # the reset gate's product (and add)
        + cells * 4 * hid  # H_t = (1 − z)⊙h + z⊙H: sub, 2 mul, add
    )
    assert same(w.macs, macs) and same(w.flops, flops)


def test_rnn_simple() -> None:
    model = HEADER + """
    g (float[7,batch,3] X, float[1,4,3] W, float[1,4,4] R, float[1,8] B) => (float[7,1,batch,4] Y) {
      Y = RNN <hidden_size = 4> (X, W, R, B)
    }"""
    batch = symbol("batch")
    seq, inp, hid = 7, 3, 4
    w = work(model)
    cells = seq * batch  # forward only
    macs = cells * (inp * hid + hid * hid)  # input + recurrent projection, 1 gate
    flops = 2 * macs + cells * 2 * hid + cells * hid  # bias adds (Wb, Rb), tanh
    assert same(w.macs, macs) and same(w.flops, flops)


@pytest.mark.parametrize("op, gates, extra", [
    ("LSTM", 4, ""),
    ("GRU", 3, ", linear_before_reset = 1"),
    ("RNN", 1, ""),
])
def test_models_run_in_onnxruntime(op: str, gates: int, extra: str) -> None:
    """The text models are real: onnxruntime builds and runs them with the declared output shape."""
    seq, batch, inp, hid = 5, 3, 4, 2
    model = HEADER + f"""
    g (float[seq,batch,{inp}] X, float[2,{gates * hid},{inp}] W, float[2,{gates * hid},{hid}] R,
       float[2,{2 * gates * hid}] B) => (float[seq,2,batch,{hid}] Y) {{
      Y = {op} <hidden_size = {hid}, direction = "bidirectional"{extra}> (X, W, R, B)
    }}"""
    proto = onnx.parser.parse_model(model)
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {
        "X": rng.standard_normal((seq, batch, inp), dtype=np.float32),
        "W": rng.standard_normal((2, gates * hid, inp), dtype=np.float32),
        "R": rng.standard_normal((2, gates * hid, hid), dtype=np.float32),
        "B": rng.standard_normal((2, 2 * gates * hid), dtype=np.float32),
    }
    (y,) = sess.run(None, feeds)
    assert y.shape == (seq, 2, batch, hid)
    w = work(model)
    assert same(w.macs, symbol("seq") * symbol("batch") * 2 * (inp + hid) * gates * hid)


# ----------------------------------------------------------------- com.microsoft DynamicQuantizeLSTM

MS_HEADER = '<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>'
DQ_LSTM = MS_HEADER + """
g (float[seq,batch,16] X, int8[2,16,32] W, int8[2,8,32] R, float[2,64] B, float[2] ws, int8[2] wz, float[2] rs,
   int8[2] rz) => (float[seq,2,batch,8] Y, float[2,batch,8] Yh, float[2,batch,8] Yc) {
  Y, Yh, Yc = com.microsoft.DynamicQuantizeLSTM <hidden_size = 8, direction = "bidirectional">
                  (X, W, R, B, , , , , ws, wz, rs, rz)
}"""


def test_dynamic_quantize_lstm_is_lstm_plus_quantization() -> None:
    """onnxruntime's quantize_dynamic turns LSTM into DynamicQuantizeLSTM: W [dirs, input, 4·hidden] and R
    [dirs, hidden, 4·hidden] int8 (stored transposed), every product a dynamically quantized integer GEMM."""
    from graphcost.ops import quantized as q

    seq, batch = symbol("seq"), symbol("batch")
    inp, hid, dirs = 16, 8, 2
    cells = seq * batch * dirs
    macs = cells * (inp * 4 * hid + hid * 4 * hid)  # the float LSTM's: input + recurrent projections, 4 gates
    dynamic = q.MINMAX_FLOPS_PER_ELEMENT + q.QUANTIZE_FLOPS_PER_ELEMENT + q.ZERO_POINT_FLOPS_PER_ELEMENT
    flops = (
        2 * macs
        + cells * 2 * 4 * hid  # Wb + Rb
        + cells * 4 * hid  # gate activations
        + cells * 3 * hid  # C_t = f⊙C + i⊙c
        + cells * 2 * hid  # H_t = o⊙h(C_t)
        + dynamic * dirs * seq * batch * inp  # X: range, quantize, zero point, once per direction
        + dynamic * cells * hid  # H_{t-1}: the same before every recurrent product
        + q.ZERO_POINT_FLOPS_PER_ELEMENT * (dirs * inp * 4 * hid + dirs * hid * 4 * hid)  # W, R zero points
        + q.TO_FLOAT_FLOPS_PER_ELEMENT * cells * 2 * 4 * hid  # both int32 products scaled back to float
    )
    w = work(DQ_LSTM)
    assert same(w.macs, macs) and same(w.flops, flops)
    entry = lookup("com.microsoft", "DynamicQuantizeLSTM")
    assert entry is not None and entry.kind is Kind.RECURRENT


def test_dynamic_quantize_lstm_macs_equal_the_float_lstm() -> None:
    """Same layer, float and quantized: the MACs agree (the weights' layout differs, not the products)."""
    float_lstm = HEADER + """
    g (float[seq,batch,16] X, float[2,32,16] W, float[2,32,8] R, float[2,64] B) => (float[seq,2,batch,8] Y) {
      Y = LSTM <hidden_size = 8, direction = "bidirectional"> (X, W, R, B)
    }"""
    assert same(work(DQ_LSTM).macs, work(float_lstm).macs)


def test_dynamic_quantize_lstm_runs_in_onnxruntime() -> None:
    """The text model is real: onnxruntime runs it, with the declared output shapes."""
    proto = onnx.parser.parse_model(DQ_LSTM)
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {
        "X": rng.standard_normal((5, 3, 16), dtype=np.float32),
        "W": rng.integers(-100, 100, (2, 16, 32)).astype(np.int8),
        "R": rng.integers(-100, 100, (2, 8, 32)).astype(np.int8),
        "B": rng.standard_normal((2, 64), dtype=np.float32),
        "ws": np.full(2, 0.01, np.float32), "wz": np.zeros(2, np.int8),
        "rs": np.full(2, 0.01, np.float32), "rz": np.zeros(2, np.int8),
    }
    y, yh, yc = sess.run(None, feeds)
    assert (y.shape, yh.shape, yc.shape) == ((5, 2, 3, 8), (2, 3, 8), (2, 3, 8))
