"""KV cache and Gather counting on real decoder exports (heavy: torch + transformers).

Tiny random-weight Hugging Face GPT-2 and LLaMA (GQA: 4 query heads, 2 KV heads) configs, built locally (nothing
is downloaded), exported with their KV cache as ``past_key_values.{i}.key|value`` inputs and
``present.{i}.key|value`` outputs, by torch's legacy (``dynamo=False``) and dynamo exporters. Every expected
number is derived in closed form: the ideal KV traffic per past token is the cache itself,
2 (K, V) × layers × kv_heads × head_dim × 4 B (fp32), exactly, whichever exporter wrote the graph.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import pytest

import graphcost
from graphcost._dims import evaluate
from graphcost.analysis import Analysis
from graphcost.passes.costs import count_costs, kv_cache_traffic

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

pytestmark = pytest.mark.heavy

LAYERS, HIDDEN, HEADS, VOCAB, FP32 = 2, 64, 4, 1000, 4
HEAD_DIM = HIDDEN // HEADS  # 16
KV_HEADS = {"gpt2": HEADS, "llama": 2}  # GPT-2: one KV head per query head; the LLaMA config: GQA with 2
PAST = "past_sequence_length"


def _build(which: str) -> Any:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        if which == "llama":
            cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN,
                              num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                              num_key_value_heads=KV_HEADS["llama"], max_position_embeddings=128)
            return LlamaForCausalLM(cfg).eval()
        gpt2 = GPT2Config(vocab_size=VOCAB, n_positions=128, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS,
                          bos_token_id=0, eos_token_id=0)
        return GPT2LMHeadModel(gpt2).eval()


def _export(which: str, path: Path, *, dynamo: bool) -> Path:
    """The decoder with its cache as flat tensors: (input_ids, attention_mask, past...) → (logits, present...)."""
    import torch
    from transformers.cache_utils import DynamicCache

    model = _build(which)

    class WithCache(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, *past: torch.Tensor) -> Any:
            cache = DynamicCache()
            for i in range(LAYERS):
                cache.update(past[2 * i], past[2 * i + 1], i)
            out = self.m(input_ids=input_ids, attention_mask=attention_mask, past_key_values=cache, use_cache=True)
            present = []
            for layer in out.past_key_values.layers:
                present += [layer.keys, layer.values]
            return (out.logits, *present)

    batch, past_len, kv = 1, 5, KV_HEADS[which]
    ids = torch.randint(0, VOCAB, (batch, 1))
    mask = torch.ones(batch, past_len + 1, dtype=torch.int64)
    past = [torch.randn(batch, kv, past_len, HEAD_DIM) for _ in range(2 * LAYERS)]
    caches = [f"{i}.{t}" for i in range(LAYERS) for t in ("key", "value")]
    names_in = ["input_ids", "attention_mask", *(f"past_key_values.{c}" for c in caches)]
    names_out = ["logits", *(f"present.{c}" for c in caches)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            from torch.export import Dim

            b, p = Dim("batch", min=1, max=64), Dim(PAST, min=1, max=100)
            shapes = {"input_ids": {0: b}, "attention_mask": {0: b, 1: p + 1},
                      "past": tuple({0: b, 2: p} for _ in range(2 * LAYERS))}
            torch.onnx.export(WithCache(), (ids, mask, *past), str(path), dynamo=True, dynamic_shapes=shapes,
                              input_names=names_in, output_names=names_out, opset_version=18)
        else:
            axes: dict[str, dict[int, str]] = {"input_ids": {0: "batch"},
                                               "attention_mask": {0: "batch", 1: "total_sequence_length"}}
            axes.update({n: {0: "batch", 2: PAST} for n in names_in[2:]})
            axes.update({n: {0: "batch", 2: "total_sequence_length"} for n in names_out[1:]})
            torch.onnx.export(WithCache(), (ids, mask, *past), str(path), dynamo=False, input_names=names_in,
                              output_names=names_out, dynamic_axes=axes, opset_version=18)
    return path


@pytest.fixture(scope="module", params=[("gpt2", False), ("gpt2", True), ("llama", False), ("llama", True)],
                ids=["gpt2-legacy", "gpt2-dynamo", "llama-legacy", "llama-dynamo"])
def export(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, bool, Path]:
    pytest.importorskip("transformers")
    which, dynamo = request.param
    path = tmp_path_factory.mktemp("decoders") / f"{which}-{'dynamo' if dynamo else 'legacy'}.onnx"
    return which, dynamo, _export(which, path, dynamo=dynamo)


def _per_token(value: Any) -> Any:
    """Bytes per past token of one sequence: the count at P + 1 minus the count at P (batch 1; linear in P)."""
    return evaluate(value, {"batch": 1, PAST: 11}) - evaluate(value, {"batch": 1, PAST: 10})


def test_kv_cache_bytes_per_token_is_the_cache_exactly(export: tuple[str, bool, Path]) -> None:
    which, dynamo, path = export
    a = Analysis.of(path)
    g = a.shapes.symbolic_graph if a.shapes.symbolic_graph is not None else a.graph
    kv = kv_cache_traffic(g, count_costs(g))
    assert kv is not None
    one_cache = KV_HEADS[which] * HEAD_DIM * FP32  # one layer's K (or V) cache: KV heads × head dim × fp32
    per_token = 2 * LAYERS * one_cache  # K and V × layers × kv_heads × head_dim × dtype bytes
    assert per_token == {"gpt2": 1024, "llama": 512}[which]
    assert _per_token(kv.ideal) == per_token  # read once (by the attention), appended in place
    # As written: each Concat reads past and writes present (2×), and the attention reads present (1×); the
    # legacy exporter also copies layer 0's past key through a one-input Concat first (read + write).
    extra = 0 if dynamo else 2 * one_cache
    assert _per_token(kv.as_written) == 3 * per_token + extra


def test_report_and_embedding_gather_on_a_real_export(export: tuple[str, bool, Path]) -> None:
    _, dynamo, path = export
    dims = {"batch": 1, PAST: 10} | ({} if dynamo else {"total_sequence_length": 11})  # legacy: the mask's dim
    r = graphcost.analyze(path, dims=dims, fusion=False, memory=False, batchnorm=False)
    assert r.totals.bytes_as_written is not None and r.totals.bytes_as_written > r.totals.bytes
    embedding = [n for n in r.nodes if n.op_type == "Gather" and n.inputs and n.inputs[0].shape == (VOCAB, HIDDEN)]
    assert embedding, "the token embedding Gather"
    row = HIDDEN * FP32  # one 64-float row
    assert embedding[0].bytes_read == 8 + row  # one int64 id, then its row: not the 1000 × 64 table (256,000 B)
    assert embedding[0].bytes_written == row
