"""graphcost llm: decoder recognition, KV-cache bytes per token, prefill/decode floors and tokens/s ceilings.

The decoders are built here with onnx.helper: GroupQueryAttention with past/present K/V, MatMulNBits weights stored
as external data in a sparse file (``f.truncate(size)``: a 1.7 GB model costs no disk), ``inputs_embeds`` in
(the embedding left out, as onnxruntime-genai's ``exclude_embeds`` writes it). Every expected number is derived in
the test body from the shapes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto

from graphcost.analysis import Analysis
from graphcost.api import analyze
from graphcost.cli import main
from graphcost.hardware.spec import HardwareSpec
from graphcost.llm import NotADecoder, decoder_dims, llm_view

MS = "com.microsoft"
FP16 = 2  # bytes per float16 element
INT64 = 8  # bytes per int64 element


def decoder(path: Path, *, layers: int, d: int, heads: int, kv_heads: int, head_dim: int, ffn: int, vocab: int,
            bits: int = 4, block: int = 32) -> Path:
    """A LLaMA-shaped GQA decoder (RMS norms, SiLU-gated MLP, lm_head) with MatMulNBits weights, external data."""
    data_name = path.name + ".data"
    inits: list[onnx.TensorProto] = []
    offset = 0

    def external(name: str, dtype: int, shape: list[int], nbytes: int) -> None:
        nonlocal offset
        t = onnx.TensorProto()
        t.name, t.data_type = name, dtype
        t.dims.extend(shape)
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", data_name), ("offset", str(offset)), ("length", str(nbytes))):
            e = t.external_data.add()
            e.key, e.value = k, v
        offset += nbytes
        inits.append(t)

    nodes: list[onnx.NodeProto] = []

    def linear(x: str, name: str, k: int, n: int) -> str:
        blocks = k // block
        external(f"{name}.qweight", TensorProto.UINT8, [n, blocks, block * bits // 8], n * blocks * block * bits // 8)
        external(f"{name}.scales", TensorProto.FLOAT16, [n * blocks], n * blocks * FP16)
        nodes.append(oh.make_node("MatMulNBits", [x, f"{name}.qweight", f"{name}.scales"], [f"{name}.out"],
                                  name=name, domain=MS, K=k, N=n, bits=bits, block_size=block))
        return f"{name}.out"

    def norm(x: str, name: str) -> str:
        external(f"{name}.weight", TensorProto.FLOAT16, [d], d * FP16)
        nodes.append(oh.make_node("SimplifiedLayerNormalization", [x, f"{name}.weight"], [f"{name}.out"], name=name,
                                  axis=-1, epsilon=1e-5))
        return f"{name}.out"

    b, s, p, t = "batch_size", "sequence_length", "past_sequence_length", "total_sequence_length"
    inputs = [oh.make_tensor_value_info("inputs_embeds", TensorProto.FLOAT16, [b, s, d]),
              oh.make_tensor_value_info("attention_mask", TensorProto.INT64, [b, t])]
    outputs = [oh.make_tensor_value_info("logits", TensorProto.FLOAT, [b, s, vocab])]
    nodes += [oh.make_node("ReduceSum", ["attention_mask", "one_axis"], ["mask_sum"], keepdims=0, name="mask_sum"),
              oh.make_node("Sub", ["mask_sum", "one_i64"], ["seqlens64"], name="seqlens_sub"),
              oh.make_node("Cast", ["seqlens64"], ["seqlens_k"], to=TensorProto.INT32, name="seqlens_cast"),
              oh.make_node("Shape", ["attention_mask"], ["mask_shape"], start=1, end=2, name="mask_shape"),
              oh.make_node("Squeeze", ["mask_shape"], ["total64"], name="total_squeeze"),
              oh.make_node("Cast", ["total64"], ["total_seq"], to=TensorProto.INT32, name="total_cast")]
    inits += [onnx.numpy_helper.from_array(np.array([1], np.int64), "one_axis"),
              onnx.numpy_helper.from_array(np.array(1, np.int64), "one_i64")]
    x = "inputs_embeds"
    for i in range(layers):
        pre = f"layers.{i}"
        h = norm(x, f"{pre}.input_norm")
        q = linear(h, f"{pre}.attn.q_proj", d, heads * head_dim)
        k = linear(h, f"{pre}.attn.k_proj", d, kv_heads * head_dim)
        v = linear(h, f"{pre}.attn.v_proj", d, kv_heads * head_dim)
        pk, pv, ok, ov = (f"past_key_values.{i}.key", f"past_key_values.{i}.value", f"present.{i}.key",
                          f"present.{i}.value")
        inputs += [oh.make_tensor_value_info(nm, TensorProto.FLOAT16, [b, kv_heads, p, head_dim]) for nm in (pk, pv)]
        outputs += [oh.make_tensor_value_info(nm, TensorProto.FLOAT16, [b, kv_heads, t, head_dim]) for nm in (ok, ov)]
        nodes.append(oh.make_node("GroupQueryAttention", [q, k, v, pk, pv, "seqlens_k", "total_seq"],
                                  [f"{pre}.attn.out", ok, ov], name=f"{pre}.attn.gqa", domain=MS,
                                  num_heads=heads, kv_num_heads=kv_heads))
        o = linear(f"{pre}.attn.out", f"{pre}.attn.o_proj", heads * head_dim, d)
        nodes.append(oh.make_node("Add", [x, o], [f"{pre}.attn.residual"], name=f"{pre}.attn.residual"))
        x = f"{pre}.attn.residual"
        h = norm(x, f"{pre}.post_norm")
        g = linear(h, f"{pre}.mlp.gate_proj", d, ffn)
        u = linear(h, f"{pre}.mlp.up_proj", d, ffn)
        nodes += [oh.make_node("Sigmoid", [g], [f"{pre}.mlp.sig"], name=f"{pre}.mlp.sig"),
                  oh.make_node("Mul", [g, f"{pre}.mlp.sig"], [f"{pre}.mlp.silu"], name=f"{pre}.mlp.silu"),
                  oh.make_node("Mul", [f"{pre}.mlp.silu", u], [f"{pre}.mlp.act"], name=f"{pre}.mlp.act")]
        dn = linear(f"{pre}.mlp.act", f"{pre}.mlp.down_proj", ffn, d)
        nodes.append(oh.make_node("Add", [x, dn], [f"{pre}.mlp.residual"], name=f"{pre}.mlp.residual"))
        x = f"{pre}.mlp.residual"
    logits = linear(norm(x, "final_norm"), "lm_head", d, vocab)
    nodes.append(oh.make_node("Cast", [logits], ["logits"], to=TensorProto.FLOAT, name="logits_cast"))
    graph = oh.make_graph(nodes, "decoder", inputs, outputs, initializer=inits)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21), oh.make_opsetid(MS, 1)], ir_version=10)
    onnx.save(model, path)
    with open(path.parent / data_name, "wb") as f:
        f.truncate(offset)  # sparse: the weights cost no disk
    return path


def _view(path: Path, hw: HardwareSpec, **kw: object):  # type: ignore[no-untyped-def]
    a = Analysis.of(path)
    return llm_view(a, analyze(a, hardware=hw, fusion=False, memory=False, batchnorm=False), hw, **kw)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------- Problem 3
P3 = dict(layers=26, d=3072, heads=32, kv_heads=8, head_dim=96, ffn=8192)
P3_VOCAB = 137_906  # chosen so the int4 weights come to 1.5 GB: 3072 × 976,562 weights × ½ B
PHONE = HardwareSpec("phone-68", {"float16": 4e12}, 68e9)  # the chapter's 68 GB/s device (peak unused by decode)


def test_problem3_decode_ceiling_at_short_and_4096_context(tmp_path: Path) -> None:
    path = decoder(tmp_path / "p3.onnx", **P3, vocab=P3_VOCAB)
    s = _view(path, PHONE, contexts=(1, 4096), efficiency=0.7, prompt=128)
    assert s.dims.batch == "batch_size" and s.dims.past == "past_sequence_length"
    assert s.dims.sequence == "sequence_length" and s.dims.total == "total_sequence_length"
    # weights: Σ K·N over the linears, per layer q 3072² + k, v 3072·768 + o 3072² + gate, up, down 3·3072·8192
    per_layer = 3072 * 3072 + 2 * 3072 * 768 + 3072 * 3072 + 3 * 3072 * 8192  # = 3072 × 32,256
    kn = 26 * per_layer + 3072 * P3_VOCAB  # + lm_head 3072 × vocab = 2,999,998,464 int4 weights
    packed = kn // 2  # ½ B per int4 weight = 1,499,999,232 B ≈ 1.5 GB
    scales = kn // 32 * FP16  # one fp16 scale per 32-weight block: 187,499,904 B
    norms = (2 * 26 + 1) * 3072 * FP16  # two RMS norms per layer + the final one
    plumbing = 2 * INT64  # the mask's axis [1] and the constant 1
    assert packed == 1_499_999_232 and scales == 187_499_904
    assert s.weights_bytes == packed + scales + norms + plumbing
    assert s.quantization_bytes == scales  # the block scales add 187.5 MB (12.5 %) on top of the 1.5 GB
    assert s.kv_cache_bytes_per_token == 2 * 26 * 8 * 96 * FP16 == 79_872  # K and V × layers × kvN × H × fp16
    bw = 0.7 * 68e9  # 47.6 GB/s sustained
    # the chapter's ceilings: 1.5 GB of weights, + 79,872 B per cached token
    assert bw / 1.5e9 == pytest.approx(31.7, abs=0.05)
    assert bw / (1.5e9 + 4096 * 79_872) == pytest.approx(26.0, abs=0.1)
    short, long = s.decode
    assert short.bound == long.bound == "memory"
    assert short.tokens_per_s == pytest.approx(bw / short.bytes)  # one token per step, batch 1
    # a step reads the weights once, the cache once (ideal append), the mask (int64 per token), and activations
    kv_growth = 79_872 + INT64  # per cached token: its K and V in every layer, and its attention_mask entry
    assert long.bytes - short.bytes == pytest.approx(4095 * kv_growth)
    activations = short.bytes - s.weights_bytes - 1 * kv_growth
    # a decode step's activations, unfused: each written and read once, ~0.3 MB per layer, + the logits
    assert 0 < activations < 1e-2 * s.weights_bytes
    # without the block scales (what the chapter counts) the tool's numbers are the chapter's, less the 0.6 % the
    # unfused activations add: 31.5 and 25.9 tokens/s
    no_scales = s.weights_bytes - scales
    assert bw / (no_scales + activations + 1 * kv_growth) == pytest.approx(31.7, abs=0.25)
    assert bw / (no_scales + activations + 4096 * kv_growth) == pytest.approx(26.0, abs=0.25)
    # with them (what an int4 export with 32-weight blocks reads): 28.0 and 23.5 tokens/s
    assert short.tokens_per_s == pytest.approx(bw / (packed + scales + norms + plumbing + activations + kv_growth))
    assert long.tokens_per_s == pytest.approx(bw / (packed + scales + norms + plumbing + activations
                                                    + 4096 * kv_growth))
    assert short.tokens_per_s == pytest.approx(28.0, abs=0.05)
    assert long.tokens_per_s == pytest.approx(23.5, abs=0.05)


def test_7b_int8_decode_at_50_gbs(tmp_path: Path) -> None:
    # LLaMA-2-7B shapes: 32 layers, d 4096, 32 heads × 128 (no GQA), FFN 11008, vocab 32000; int8 MatMulNBits
    path = decoder(tmp_path / "7b.onnx", layers=32, d=4096, heads=32, kv_heads=32, head_dim=128, ffn=11008,
                   vocab=32000, bits=8, block=128)
    edge = HardwareSpec("edge-50", {"float16": 4e12}, 50e9)
    kn = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008) + 4096 * 32000  # q, k, v, o + gate, up, down; lm_head
    weights = kn + kn // 128 * FP16 + (2 * 32 + 1) * 4096 * FP16 + 2 * INT64  # 1 B each + scales + norms
    peak = _view(path, edge, contexts=(1,))
    assert peak.weights_bytes == weights  # 6.71 GB ≈ "7 GB of weights"
    # 50 GB/s ÷ the weights = 7.45 tokens/s, "about 7"; the step's unfused activations add 0.2 % to its bytes
    assert peak.decode[0].tokens_per_s == pytest.approx(50e9 / weights, rel=5e-3)
    assert round(peak.decode[0].tokens_per_s) == 7
    real = _view(path, edge, contexts=(1,), efficiency=0.7)
    assert real.decode[0].tokens_per_s == pytest.approx(0.7 * 50e9 / weights, rel=5e-3)  # 5.2: "5 at 70 %"
    assert round(real.decode[0].tokens_per_s) == 5


# --------------------------------------------------------------------------------------- two layers, exactly
SMALL = dict(layers=2, d=256, heads=4, kv_heads=2, head_dim=64, ffn=512, vocab=1000)


def test_prefill_binds_sequence_and_decode_turns_compute_bound(tmp_path: Path) -> None:
    path = decoder(tmp_path / "small.onnx", **SMALL)
    hw = HardwareSpec("toy", {"float16": 1e12}, 100e9)
    s = _view(path, hw, prompt=64, contexts=(16,))
    assert s.kv_cache_bytes_per_token == 2 * 2 * 2 * 64 * FP16  # K,V × 2 layers × 2 kv heads × 64 × fp16 = 1,024
    p = s.prefill
    assert p.binding["sequence_length"] == 64 and p.binding["past_sequence_length"] == 0
    assert p.binding["total_sequence_length"] == 64
    d = s.decode[0]
    assert d.binding["sequence_length"] == 1 and d.binding["past_sequence_length"] == 16
    assert d.binding["total_sequence_length"] == 17
    # linears: MACs = tokens × Σ K·N; weight K·N per layer 256·(256 + 2·128 + 256) + 3·256·512, lm_head 256·1000
    kn = 2 * (256 * 256 + 2 * 256 * 128 + 256 * 256 + 3 * 256 * 512) + 256 * 1000
    assert p.flops > 2 * 64 * kn  # prefill: 2 FLOPs per MAC for 64 tokens, + attention, norms, dequant
    assert s.peak_dtype == "float16" and s.peak_flops == 1e12
    b = s.compute_bound_batch
    assert b is not None and b > 1
    # the crossover is exact: one batch less is memory bound
    a = Analysis.of(path)
    r = analyze(a, hardware=hw, fusion=False, memory=False, batchnorm=False)
    at = {x: llm_view(a, r, hw, contexts=(16,), batch=x).decode[0] for x in (b - 1, b)}
    assert at[b - 1].bound == "memory" and at[b].bound == "compute"
    assert at[b].tokens_per_s == pytest.approx(b / at[b].time_s)  # every sequence gets a token per step


def test_memory_fit_counts_weights_whole_cache_and_activations(tmp_path: Path) -> None:
    path = decoder(tmp_path / "small.onnx", **SMALL)
    s = _view(path, HardwareSpec("toy", {"float16": 1e12}, 100e9, memory_bytes=10**9), contexts=(100, 2000))
    m = s.memory
    assert m.context == 2000
    assert m.kv_cache_bytes == 1_024 * 2001  # the whole cache after the step: 2,000 cached + the new token
    assert m.needed_bytes == s.weights_bytes + m.kv_cache_bytes + m.activation_peak_bytes
    assert m.activation_peak_bytes > 0 and m.fits is True
    tight = _view(path, HardwareSpec("toy", {"float16": 1e12}, 100e9), contexts=(2000,), memory_bytes=s.weights_bytes)
    assert tight.memory.fits is False  # the weights alone fill it


def test_not_a_decoder_is_a_reason(tmp_path: Path) -> None:
    m = onnx.parser.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
        g (float[1,8] x) => (float[1,8] y) { y = Relu(x) }""")
    with pytest.raises(NotADecoder, match="no past_key_values"):
        decoder_dims(Analysis.of(m))


def test_cli_text_json_and_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = decoder(tmp_path / "small.onnx", **SMALL)
    flags = ["--memory-bandwidth", "50GB/s", "--peak-flops", "float16=2T"]
    assert main(["llm", str(path), *flags, "--context", "8,64", "--efficiency", "0.7"]) == 0
    out = capsys.readouterr().out
    assert "KV cache 1,024 B per token" in out and "tokens/s ceiling" in out
    assert main(["llm", str(path), *flags, "--context", "8,64", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    llm = doc["llm"]
    assert llm["kv_cache_bytes_per_token"] == 1_024 and llm["weights_bytes"] == doc["model"]["parameter_bytes"]
    assert set(llm["tokens_per_s"]) == {"8", "64"} and llm["prefill"]["phase"] == "prefill"
    assert [x["bound"] for x in llm["decode"]] == ["memory", "memory"]
    assert main(["llm", str(path), *flags, "--format", "html", "-o", str(tmp_path / "r.html")]) == 0
    assert "tokens/s" in (tmp_path / "r.html").read_text(encoding="utf-8")
    capsys.readouterr()
    other = tmp_path / "relu.onnx"
    onnx.save(onnx.parser.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
        g (float[1,8] x) => (float[1,8] y) { y = Relu(x) }"""), other)
    for argv in (["llm", str(other)], ["llm", str(path), "--context", "a,b"], ["llm", str(path), "--efficiency", "2"],
                 ["llm", str(path), "--memory-bytes", "lots"], ["llm", str(path), "--batch", "0"]):
        before = path.read_bytes() if argv[1] == str(path) else b""
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err
        if before:
            assert path.read_bytes() == before
    assert os.path.getsize(path.parent / "small.onnx.data") > 0
