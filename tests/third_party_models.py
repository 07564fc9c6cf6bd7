"""Builders for the third-party export tests (``tests/test_third_party.py``).

Small random-weight models from Hugging Face ``transformers`` (configs only, no hub access), exported with torch's
legacy (``dynamo=False``) and dynamo (``dynamo=True``) exporters with dynamic dims; onnxruntime's own graph optimizer
and its offline transformer optimizer; onnxruntime quantization (dynamic, static QDQ and QOperator); and small
control-flow models. Every builder writes into a caller-given folder and returns the path.

Each HF entry also carries a closed-form MAC count (conv + matmul multiply-accumulates, bias excluded) in the dims
``batch`` and ``seq`` (and ``dec_seq`` for the encoder-decoder), so the tests can check graphcost's totals.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

D = 64  # hidden size of every HF model here
HEADS = 4
LAYERS = 2
VOCAB = 1000
IMAGE = 32  # ViT image side
PATCH = 8  # ViT patch side: (32 / 8)^2 = 16 patches + CLS = 17 tokens

# --------------------------------------------------------------------------------------------------------------
# Hugging Face models
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HFCase:
    """One HF model: how to build it, its example inputs, its dynamic dims and its closed-form MACs."""

    name: str
    build: Callable[[], Any]  # -> torch.nn.Module returning a tuple of tensors
    inputs: Callable[[int, int], dict[str, Any]]  # (batch, seq) -> {input name: tensor}
    dims: dict[str, dict[int, str]]  # input name -> {axis: dim name}
    outputs: tuple[str, ...] = ("last_hidden_state",)
    out_dims: dict[str, dict[int, str]] = field(default_factory=dict)
    macs: Callable[[int, int], int] | None = None  # (batch, seq) -> MACs; None: no closed form
    bind: tuple[str, ...] = ("batch", "seq")  # dims to bind in analyze()


class _Hidden:  # namespace for the wrapper class, built lazily so importing this module needs no torch
    cls: Any = None


def _wrapper() -> Any:
    if _Hidden.cls is None:
        import torch

        class LastHidden(torch.nn.Module):
            """Calls the HF model with keyword inputs and returns ``last_hidden_state`` only."""

            def __init__(self, model: torch.nn.Module, names: tuple[str, ...]) -> None:
                super().__init__()
                self.model = model
                self.names = names
                self.extra = {"use_cache": False} if _uses_cache(model) else {}

            def forward(self, *args: torch.Tensor) -> torch.Tensor:
                kwargs = dict(zip(self.names, args, strict=True))
                return self.model(**kwargs, **self.extra, return_dict=True).last_hidden_state

        _Hidden.cls = LastHidden
    return _Hidden.cls


def _ids(batch: int, seq: int, vocab: int = VOCAB, seed: int = 0) -> Any:
    import torch

    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, seq), generator=g)


def _mask(batch: int, seq: int) -> Any:
    import torch

    m = torch.ones(batch, seq, dtype=torch.int64)
    m[0, -1] = 0  # a real padding position, so the mask is not a no-op
    return m


def _seeded(fn: Callable[[], Any]) -> Any:
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = fn()
    return model.eval()


def _attention_macs(layers: int, width: int, q_len: int, k_len: int) -> int:
    """q @ k^T and probs @ v over all heads: 2 * (heads * head_dim) * q_len * k_len per layer."""
    return layers * 2 * width * q_len * k_len


# ---- GPT-2 --------------------------------------------------------------------------------------------------


def gpt2() -> Any:
    from transformers import GPT2Config, GPT2Model

    cfg = GPT2Config(vocab_size=VOCAB, n_positions=128, n_embd=D, n_layer=LAYERS, n_head=HEADS)
    return _seeded(lambda: GPT2Model(cfg))


def gpt2_macs(b: int, s: int) -> int:
    per_token = LAYERS * (3 * D * D + D * D + 2 * D * 4 * D)  # c_attn, attn c_proj, mlp c_fc + c_proj
    return b * (s * per_token + _attention_macs(LAYERS, D, s, s))


# ---- BERT / RoBERTa / DistilBERT ----------------------------------------------------------------------------


def _bert_like_macs(b: int, s: int) -> int:
    per_token = LAYERS * (4 * D * D + 2 * D * 4 * D)  # q, k, v, attn out; intermediate + output
    return b * (s * per_token + _attention_macs(LAYERS, D, s, s))


def bert(attn: str = "sdpa") -> Any:
    from transformers import BertConfig, BertModel

    cfg = BertConfig(vocab_size=VOCAB, hidden_size=D, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                     intermediate_size=4 * D, max_position_embeddings=128, attn_implementation=attn)
    return _seeded(lambda: BertModel(cfg, add_pooling_layer=False))


def roberta() -> Any:
    from transformers import RobertaConfig, RobertaModel

    cfg = RobertaConfig(vocab_size=VOCAB, hidden_size=D, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                        intermediate_size=4 * D, max_position_embeddings=130)
    return _seeded(lambda: RobertaModel(cfg, add_pooling_layer=False))


def distilbert() -> Any:
    from transformers import DistilBertConfig, DistilBertModel

    cfg = DistilBertConfig(vocab_size=VOCAB, dim=D, n_layers=LAYERS, n_heads=HEADS, hidden_dim=4 * D,
                           max_position_embeddings=128)
    return _seeded(lambda: DistilBertModel(cfg))


# ---- LLaMA / Mistral ----------------------------------------------------------------------------------------

LLAMA_KV_HEADS = 2
LLAMA_FFN = 128


def llama() -> Any:
    from transformers import LlamaConfig, LlamaModel

    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=D, intermediate_size=LLAMA_FFN, num_hidden_layers=LAYERS,
                      num_attention_heads=HEADS, num_key_value_heads=LLAMA_KV_HEADS, max_position_embeddings=128)
    return _seeded(lambda: LlamaModel(cfg))


def mistral() -> Any:
    from transformers import MistralConfig, MistralModel

    cfg = MistralConfig(vocab_size=VOCAB, hidden_size=D, intermediate_size=LLAMA_FFN, num_hidden_layers=LAYERS,
                        num_attention_heads=HEADS, num_key_value_heads=LLAMA_KV_HEADS, max_position_embeddings=128,
                        sliding_window=None)
    return _seeded(lambda: MistralModel(cfg))


def llama_macs(b: int, s: int) -> int:
    head_dim = D // HEADS
    kv = LLAMA_KV_HEADS * head_dim
    per_token = LAYERS * (D * D + 2 * D * kv + D * D + 3 * D * LLAMA_FFN)  # q, k, v, o; gate, up, down
    rotary = s * head_dim // 2  # inv_freq (hd/2, 1) @ position_ids (1, seq), once per model
    return b * (s * per_token + _attention_macs(LAYERS, D, s, s) + rotary)


# ---- T5 (encoder-decoder) -----------------------------------------------------------------------------------

T5_FFN = 128
T5_KV = 16


def t5() -> Any:
    from transformers import T5Config, T5Model

    cfg = T5Config(vocab_size=VOCAB, d_model=D, d_kv=T5_KV, d_ff=T5_FFN, num_layers=LAYERS, num_decoder_layers=LAYERS,
                   num_heads=HEADS, relative_attention_num_buckets=8, decoder_start_token_id=0)
    return _seeded(lambda: T5Model(cfg))


def t5_macs(b: int, s: int, t: int) -> int:
    inner = HEADS * T5_KV
    enc = s * LAYERS * (4 * D * inner + 2 * D * T5_FFN) + _attention_macs(LAYERS, inner, s, s)
    dec_self = t * LAYERS * 4 * D * inner + _attention_macs(LAYERS, inner, t, t)
    dec_cross = LAYERS * (2 * t * D * inner + 2 * s * D * inner) + _attention_macs(LAYERS, inner, t, s)
    dec_ff = t * LAYERS * 2 * D * T5_FFN
    return b * (enc + dec_self + dec_cross + dec_ff)


# ---- ViT ----------------------------------------------------------------------------------------------------


def vit() -> Any:
    from transformers import ViTConfig, ViTModel

    cfg = ViTConfig(hidden_size=D, num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=4 * D,
                    image_size=IMAGE, patch_size=PATCH, num_channels=3)
    return _seeded(lambda: ViTModel(cfg, add_pooling_layer=False))


def vit_macs(b: int, _s: int = 0) -> int:
    patches = (IMAGE // PATCH) ** 2
    tokens = patches + 1
    embed = patches * D * 3 * PATCH * PATCH
    per_token = LAYERS * (4 * D * D + 2 * D * 4 * D)
    return b * (embed + tokens * per_token + _attention_macs(LAYERS, D, tokens, tokens))


# ---- wav2vec2 (conv front end) ------------------------------------------------------------------------------

W2V_CONV = (32, 32)
W2V_KERNEL = (10, 3)
W2V_STRIDE = (5, 2)
W2V_POS_KERNEL = 16
W2V_POS_GROUPS = 4
AUDIO = 1600  # samples at export


def wav2vec2() -> Any:
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    cfg = Wav2Vec2Config(hidden_size=D, num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=4 * D,
                         conv_dim=W2V_CONV, conv_kernel=W2V_KERNEL, conv_stride=W2V_STRIDE, conv_bias=False,
                         num_conv_pos_embeddings=W2V_POS_KERNEL, num_conv_pos_embedding_groups=W2V_POS_GROUPS,
                         feat_extract_norm="group", do_stable_layer_norm=False, mask_time_prob=0.0)
    return _seeded(lambda: Wav2Vec2Model(cfg))


def wav2vec2_frames(samples: int) -> list[int]:
    lengths = [samples]
    for k, st in zip(W2V_KERNEL, W2V_STRIDE, strict=True):
        lengths.append((lengths[-1] - k) // st + 1)
    return lengths


def wav2vec2_macs(b: int, samples: int) -> int:
    lengths = wav2vec2_frames(samples)
    c_in = (1, *W2V_CONV[:-1])
    conv = sum(lo * c * k * co for lo, c, k, co in zip(lengths[1:], c_in, W2V_KERNEL, W2V_CONV, strict=True))
    frames = lengths[-1]
    projection = frames * W2V_CONV[-1] * D
    # positional grouped conv: kernel 16 with padding 8 gives frames + 1 outputs, the last one dropped afterwards
    pos = (frames + 1) * D * (D // W2V_POS_GROUPS) * W2V_POS_KERNEL
    per_token = LAYERS * (4 * D * D + 2 * D * 4 * D)
    return b * (conv + projection + pos + frames * per_token + _attention_macs(LAYERS, D, frames, frames))


# ---- the table ----------------------------------------------------------------------------------------------

_TEXT_DIMS = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
_TEXT_OUT = {"last_hidden_state": {0: "batch", 1: "seq"}}


def _text_inputs(batch: int, seq: int) -> dict[str, Any]:
    return {"input_ids": _ids(batch, seq), "attention_mask": _mask(batch, seq)}


def _t5_inputs(batch: int, seq: int) -> dict[str, Any]:
    dec = max(2, seq // 2)
    return {"input_ids": _ids(batch, seq), "attention_mask": _mask(batch, seq),
            "decoder_input_ids": _ids(batch, dec, seed=1)}


def _pixels(batch: int, _seq: int) -> dict[str, Any]:
    import torch

    g = torch.Generator().manual_seed(0)
    return {"pixel_values": torch.randn(batch, 3, IMAGE, IMAGE, generator=g)}


def _audio(batch: int, samples: int) -> dict[str, Any]:
    import torch

    g = torch.Generator().manual_seed(0)
    return {"input_values": torch.randn(batch, samples, generator=g)}


HF_CASES: dict[str, HFCase] = {
    "gpt2": HFCase("gpt2", gpt2, _text_inputs, _TEXT_DIMS, out_dims=_TEXT_OUT, macs=gpt2_macs),
    "bert": HFCase("bert", bert, _text_inputs, _TEXT_DIMS, out_dims=_TEXT_OUT, macs=_bert_like_macs),
    "roberta": HFCase("roberta", roberta, _text_inputs, _TEXT_DIMS, out_dims=_TEXT_OUT, macs=_bert_like_macs),
    "distilbert": HFCase("distilbert", distilbert, _text_inputs, _TEXT_DIMS, out_dims=_TEXT_OUT,
                         macs=_bert_like_macs),
    "llama": HFCase("llama", llama, _text_inputs, _TEXT_DIMS, out_dims=_TEXT_OUT, macs=llama_macs),
    "mistral": HFCase("mistral", mistral, _text_inputs, _TEXT_DIMS, out_dims=_TEXT_OUT, macs=llama_macs),
    "t5": HFCase("t5", t5, _t5_inputs,
                 {**_TEXT_DIMS, "decoder_input_ids": {0: "batch", 1: "dec_seq"}},
                 out_dims={"last_hidden_state": {0: "batch", 1: "dec_seq"}},
                 macs=None, bind=("batch", "seq", "dec_seq")),
    "vit": HFCase("vit", vit, _pixels, {"pixel_values": {0: "batch"}}, out_dims={"last_hidden_state": {0: "batch"}},
                  macs=vit_macs, bind=("batch",)),
    "wav2vec2": HFCase("wav2vec2", wav2vec2, _audio, {"input_values": {0: "batch", 1: "samples"}},
                       out_dims={"last_hidden_state": {0: "batch", 1: "frames"}},
                       macs=wav2vec2_macs, bind=("batch", "samples")),
}


def example_size(case: HFCase) -> int:
    return AUDIO if case.name == "wav2vec2" else 16


def _uses_cache(model: Any) -> bool:
    import inspect

    return "use_cache" in inspect.signature(model.forward).parameters


def export_hf(case: HFCase, path: Path, *, dynamo: bool, batch: int = 2, opset: int = 18) -> Path:
    """Export ``case`` with dynamic dims to ``path`` with the legacy or the dynamo exporter."""
    import torch

    model = case.build()
    inputs = case.inputs(batch, example_size(case))
    names = tuple(inputs)
    wrapper = _wrapper()(model, names)
    args = tuple(inputs.values())
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        if dynamo:
            dims: dict[str, Any] = {}
            shapes = []
            for name in names:
                axes = case.dims.get(name, {})
                shapes.append({ax: dims.setdefault(dn, torch.export.Dim(dn, max=4096)) for ax, dn in axes.items()})
            torch.onnx.export(wrapper, args, str(path), dynamo=True, opset_version=opset, input_names=list(names),
                              output_names=list(case.outputs), dynamic_shapes={"args": tuple(shapes)},
                              verbose=False, external_data=False)
        else:
            torch.onnx.export(wrapper, args, str(path), dynamo=False, opset_version=opset, input_names=list(names),
                              output_names=list(case.outputs), dynamic_axes={**case.dims, **case.out_dims})
    return path


def run_ort(path: Path, case: HFCase, batch: int, size: int) -> list[np.ndarray]:
    """Run the exported file in onnxruntime at (batch, size); returns the outputs."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {k: v.numpy() for k, v in case.inputs(batch, size).items()}
    wanted = {i.name for i in sess.get_inputs()}
    return sess.run(None, {k: v for k, v in feeds.items() if k in wanted})


# --------------------------------------------------------------------------------------------------------------
# onnxruntime optimizers
# --------------------------------------------------------------------------------------------------------------


def ort_optimize(src: Path, dst: Path, level: str) -> Path:
    """Save onnxruntime's optimized graph at ``level`` ("basic", "extended", "layout" or "all")."""
    import onnxruntime as ort

    levels = {"basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
              "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
              "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}
    if hasattr(ort.GraphOptimizationLevel, "ORT_ENABLE_LAYOUT"):
        levels["layout"] = ort.GraphOptimizationLevel.ORT_ENABLE_LAYOUT
    so = ort.SessionOptions()
    so.graph_optimization_level = levels[level]
    so.optimized_model_filepath = str(dst)
    so.log_severity_level = 3
    ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
    return dst


def transformers_optimize(src: Path, dst: Path, *, model_type: str = "bert", num_heads: int = HEADS,
                          hidden_size: int = D) -> Path:
    """``onnxruntime.transformers.optimizer.optimize_model`` (offline fusions: Attention, EmbedLayerNormalization)."""
    import logging

    from onnxruntime.transformers.optimizer import optimize_model

    logging.getLogger("onnxruntime.transformers").setLevel(logging.ERROR)
    opt = optimize_model(str(src), model_type=model_type, num_heads=num_heads, hidden_size=hidden_size,
                         opt_level=0)
    opt.save_model_to_file(str(dst))
    return dst


# --------------------------------------------------------------------------------------------------------------
# Quantization
# --------------------------------------------------------------------------------------------------------------


class RandomReader:
    """A calibration data reader for ``quantize_static`` feeding a few random batches."""

    def __init__(self, feeds: list[dict[str, np.ndarray]]) -> None:
        self._feeds = feeds
        self._it: Iterator[dict[str, np.ndarray]] = iter(feeds)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._it, None)

    def rewind(self) -> None:
        self._it = iter(self._feeds)


def random_feeds(path: Path, n: int = 4, dims: dict[str, int] | None = None, vocab: int = 128,
                 seed: int = 0) -> list[dict[str, np.ndarray]]:
    """``n`` random feeds for every graph input of ``path`` (named dims from ``dims``, default 1)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    rng = np.random.default_rng(seed)
    dims = dims or {}
    feeds = []
    for _ in range(n):
        feed = {}
        for vi in model.graph.input:
            if vi.name in inits:
                continue
            tt = vi.type.tensor_type
            shape = [d.dim_value if d.HasField("dim_value") else dims.get(d.dim_param, 1) for d in tt.shape.dim]
            dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
            if dtype.kind in "iu":
                feed[vi.name] = rng.integers(0, vocab, size=shape).astype(dtype)
            else:
                feed[vi.name] = rng.standard_normal(shape).astype(dtype)
        feeds.append(feed)
    return feeds


def quantize(src: Path, dst: Path, mode: str, *, dims: dict[str, int] | None = None, vocab: int = 128) -> Path:
    """Quantize ``src``: ``mode`` is "dynamic", "qdq" or "qoperator" (the latter two static, random calibration)."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    pre = dst.with_name(dst.stem + "_pre.onnx")
    quant_pre_process(str(src), str(pre), skip_symbolic_shape=False)
    if mode == "dynamic":
        quantize_dynamic(str(pre), str(dst), weight_type=QuantType.QInt8)
    else:
        fmt = QuantFormat.QDQ if mode == "qdq" else QuantFormat.QOperator
        reader = RandomReader(random_feeds(pre, n=4, dims=dims, vocab=vocab))
        quantize_static(str(pre), str(dst), reader, quant_format=fmt, activation_type=QuantType.QUInt8,
                        weight_type=QuantType.QInt8, per_channel=False)
    return dst


# --------------------------------------------------------------------------------------------------------------
# Control flow
# --------------------------------------------------------------------------------------------------------------


def export_cond(path: Path) -> Path:
    """``torch.cond`` exported with dynamo: an ``If`` whose branches hold a MatMul each."""
    import torch

    class Cond(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Linear(16, 16)
            self.b = torch.nn.Linear(16, 16)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cond(x.sum() > 0, lambda t: self.a(t).relu(), lambda t: self.b(t).sigmoid(), (x,))

    model = _seeded(Cond)
    x = torch.randn(2, 16)
    batch = torch.export.Dim("batch", max=1024)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), str(path), dynamo=True, input_names=["x"], output_names=["y"],
                          dynamic_shapes=({0: batch},), verbose=False)
    return path


def export_scripted_loop(path: Path) -> Path:
    """A scripted loop (and an if) exported with the legacy exporter: ``Loop`` with a MatMul in its body."""
    import torch

    class Body(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(16, 16) * 0.1)

        def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:
            for _ in range(n):
                x = torch.tanh(torch.matmul(x, self.w))
            if bool(x.sum() > 0):
                x = x * 2.0
            else:
                x = x - 1.0
            return x

    class Outer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = torch.jit.script(_seeded(Body))

        def forward(self, x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
            return self.body(x, int(n))

    scripted = torch.jit.script(_seeded(Body))
    x = torch.randn(2, 16)
    n = torch.tensor(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(scripted, (x, n), str(path), dynamo=False, input_names=["x", "n"], output_names=["y"],
                          dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    return path
