"""graphcost llm on real decoder exports: onnxruntime-genai's model builder (GQA + MatMulNBits int4) and torch's
TorchScript exporter (a transformers LLaMA with its DynamicCache flattened into past/present tensors).

Both start from the same tiny random-weight LLaMA config saved locally (no network): 2 layers, d 128, 4 query heads,
2 KV heads of 32. Each export's KV cache must come to 2 × layers × kv_heads × head_dim × dtype bytes per token.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from graphcost.analysis import Analysis
from graphcost.api import analyze
from graphcost.hardware.spec import HardwareSpec
from graphcost.llm import llm_view

pytestmark = pytest.mark.heavy

LAYERS, D, HEADS, KV_HEADS, VOCAB = 2, 128, 4, 2, 256
HEAD_DIM = D // HEADS  # 32
FP32 = 4  # both exports keep the cache in float32 (the builder's -p int4 -e cpu writes fp32 I/O)
INT64 = 8
HW = HardwareSpec("edge-test", {"float32": 2e12}, 50e9)


def _config() -> Any:
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=VOCAB, hidden_size=D, intermediate_size=2 * D, num_hidden_layers=LAYERS,
                       num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=256,
                       attn_implementation="eager")  # type: ignore[call-arg]  # a PretrainedConfig kwarg


def _hf_dir(tmp: Path) -> Path:
    """A local HF checkpoint: random LLaMA weights and a 256-word tokenizer (the builder loads one)."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(0)
    out = tmp / "hf"
    LlamaForCausalLM(_config()).save_pretrained(out)
    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(VOCAB)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0", bos_token="t1", eos_token="t2",
                            pad_token="t0").save_pretrained(out)
    return out


def _view(path: Path) -> Any:
    a = Analysis.of(path)
    return llm_view(a, analyze(a, hardware=HW, fusion=False, memory=False, batchnorm=False), HW,
                    contexts=(16, 17))


def test_onnxruntime_genai_builder_int4(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime_genai", reason="pip install 'graphcost[llm]' (onnxruntime-genai)")
    hf = _hf_dir(tmp_path)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-m", str(hf), "-i", str(hf),
                           "-o", str(tmp_path / "out"), "-p", "int4", "-e", "cpu", "-c", str(tmp_path / "cache")],
                          capture_output=True, text=True, env=env, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    s = _view(tmp_path / "out" / "model.onnx")
    assert s.dims.batch == "batch_size" and s.dims.past == "past_sequence_length"
    assert s.dims.total == "total_sequence_length"
    # the builder names the head dim kv_cache_dim; its size is GroupQueryAttention's: packed QKV width / (N + 2·kvN)
    assert s.dims.cache["kv_cache_dim"][0] == (HEADS + 2 * KV_HEADS) * HEAD_DIM // (HEADS + 2 * KV_HEADS) == 32
    assert s.kv_cache_bytes_per_token == 2 * LAYERS * KV_HEADS * HEAD_DIM * FP32 == 1_024  # K, V × layers × kvN × H
    # ideal append: one more cached token adds its K and V once, and its int64 attention_mask entry
    assert s.kv_traffic_bytes_per_token == pytest.approx(1_024 + INT64)
    # block scales of the int4 weights: one fp32 scale per 32 weights (the builder's default block) of every linear
    kn = LAYERS * (D * (HEADS + 2 * KV_HEADS) * HEAD_DIM + D * D + 3 * D * 2 * D) + D * VOCAB  # qkv, o, mlp; lm_head
    assert s.quantization_bytes == kn // 32 * FP32


def test_torchscript_export_with_past(tmp_path: Path) -> None:
    import torch
    from transformers import LlamaForCausalLM
    from transformers.cache_utils import DynamicCache

    torch.manual_seed(0)
    model = LlamaForCausalLM(_config()).eval()

    class WithPast(torch.nn.Module):
        """past K/V in as flat tensors, present K/V out (what optimum's decoder-with-past export writes)."""

        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, input_ids: Any, attention_mask: Any, *past: Any) -> Any:
            cache = DynamicCache()
            for i in range(LAYERS):
                cache.update(past[2 * i], past[2 * i + 1], i)
            out = self.m(input_ids=input_ids, attention_mask=attention_mask, past_key_values=cache, use_cache=True)
            flat = [t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)]
            return (out.logits, *flat)

    b, s, p = 2, 3, 5
    pairs = [(i, kv) for i in range(LAYERS) for kv in ("key", "value")]
    ins = ["input_ids", "attention_mask"] + [f"past_key_values.{i}.{kv}" for i, kv in pairs]
    outs = ["logits"] + [f"present.{i}.{kv}" for i, kv in pairs]
    axes: dict[str, dict[int, str]] = {"input_ids": {0: "batch_size", 1: "sequence_length"},
                                       "attention_mask": {0: "batch_size", 1: "total_sequence_length"},
                                       "logits": {0: "batch_size", 1: "sequence_length"}}
    axes.update({n: {0: "batch_size", 2: "past_sequence_length"} for n in ins[2:]})
    axes.update({n: {0: "batch_size", 2: "total_sequence_length"} for n in outs[1:]})
    args = (torch.randint(0, VOCAB, (b, s)), torch.ones(b, p + s, dtype=torch.int64),
            *[torch.randn(b, KV_HEADS, p, HEAD_DIM) for _ in range(2 * LAYERS)])
    path = tmp_path / "llama_past.onnx"
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(WithPast(), args, str(path), dynamo=False, opset_version=17, input_names=ins,
                          output_names=outs, dynamic_axes=axes)
    view = _view(path)
    assert view.dims.past == "past_sequence_length" and view.dims.sequence == "sequence_length"
    assert view.kv_cache_bytes_per_token == 2 * LAYERS * KV_HEADS * HEAD_DIM * FP32 == 1_024
    # as written, each cached token costs more than the cache: Concat copies it into present, repeat_kv expands it
    # to every query head, and the eager scores and masks grow with it
    assert view.kv_traffic_bytes_per_token > view.kv_cache_bytes_per_token
    decode = view.decode[0]
    assert decode.binding["sequence_length"] == 1 and decode.binding["past_sequence_length"] == 16
