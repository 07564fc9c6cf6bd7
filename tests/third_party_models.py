"""Builders for the third-party export tests (``tests/test_third_party.py``).

* Small random-weight Hugging Face ``transformers`` models (configs only: nothing is downloaded), exported with torch's
  legacy (``dynamo=False``) and dynamo (``dynamo=True``) exporters with dynamic dims. Each carries its closed-form
  MAC count (conv + matmul multiply-accumulates, bias excluded) as a function of its dims, which also accepts sympy
  symbols.
* onnxruntime's own graph optimizer (the saved optimized model) and its offline transformer optimizer.
* onnxruntime quantization: dynamic, and static in the QDQ and QOperator formats with a random calibration reader.
* Small torch models with control flow (``torch.cond`` via dynamo, a scripted loop via the legacy exporter).

Every builder writes into a caller-given path and returns it. Importing this module needs neither torch nor
transformers; the builders import them.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
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
OPSET = 18

Dims = Mapping[str, Any]  # dim name -> int or sympy symbol

# --------------------------------------------------------------------------------------------------------------
# Hugging Face models
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HFCase:
    """One HF model: how to build it, its example inputs, its dynamic dims and its closed-form MACs."""

    name: str
    build: Callable[[], Any]  # -> torch.nn.Module (eval mode, seeded random weights)
    inputs: Callable[[int, int], dict[str, Any]]  # (batch, size) -> {input name: tensor}
    dims: dict[str, dict[int, str]]  # input name -> {axis: dim name}
    out_dims: dict[str, dict[int, str]]  # output name -> {axis: dim name} (the legacy exporter's dynamic_axes)
    macs: Callable[[Dims], Any]  # {dim name: value} -> conv+matmul MACs, bias excluded
    bind: dict[str, int]  # the dims to bind in analyze(), with their values
    other: dict[str, int]  # a second binding, to check the formula at another point
    size: int = 16  # sequence length (audio samples for wav2vec2) of the example inputs


def _seeded(factory: Callable[[], Any]) -> Any:
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = factory()
    return model.eval()


def _attention_macs(layers: int, width: int, q_len: Any, k_len: Any) -> Any:
    """q @ k^T and probs @ v over all heads: 2 * (heads * head_dim) * q_len * k_len per layer."""
    return layers * 2 * width * q_len * k_len


# ---- GPT-2 ----------------------------------------------------------------------------------------------------


def gpt2() -> Any:
    from transformers import GPT2Config, GPT2Model

    cfg = GPT2Config(vocab_size=VOCAB, n_positions=128, n_embd=D, n_layer=LAYERS, n_head=HEADS)
    return _seeded(lambda: GPT2Model(cfg))


def gpt2_macs(d: Dims) -> Any:
    b, s = d["batch"], d["seq"]
    per_token = LAYERS * (3 * D * D + D * D + 2 * D * 4 * D)  # c_attn, attn c_proj, mlp c_fc + c_proj
    return b * (s * per_token + _attention_macs(LAYERS, D, s, s))


# ---- BERT / RoBERTa / DistilBERT (no pooler) ------------------------------------------------------------------


def bert_like_macs(d: Dims) -> Any:
    b, s = d["batch"], d["seq"]
    per_token = LAYERS * (4 * D * D + 2 * D * 4 * D)  # q, k, v, attention output; intermediate, output
    return b * (s * per_token + _attention_macs(LAYERS, D, s, s))


def bert(attn: str = "sdpa") -> Any:
    from transformers import BertConfig, BertModel

    cfg = BertConfig(vocab_size=VOCAB, hidden_size=D, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                     intermediate_size=4 * D, max_position_embeddings=128, attn_implementation=attn)
    return _seeded(lambda: BertModel(cfg, add_pooling_layer=False))


def bert_eager() -> Any:
    """BERT with the eager attention: the pattern onnxruntime's transformer optimizer fuses into Attention."""
    return bert("eager")


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


# ---- LLaMA / Mistral: RMSNorm, rotary, SiLU-gated MLP, grouped-query attention --------------------------------

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


def llama_macs(d: Dims) -> Any:
    """GQA: k and v project to 2 heads x 16; attention still runs over all 4 query heads (k/v are repeated).

    The rotary embedding (transformers 5.x) is an elementwise outer product, not a MatMul: no MACs.
    """
    b, s = d["batch"], d["seq"]
    kv = LLAMA_KV_HEADS * (D // HEADS)
    per_token = LAYERS * (D * D + 2 * D * kv + D * D + 3 * D * LLAMA_FFN)  # q, k, v, o; gate, up, down
    return b * (s * per_token + _attention_macs(LAYERS, D, s, s))


# ---- T5 (encoder-decoder, relative attention bias, RMS-style LayerNorm) ---------------------------------------

T5_FFN = 128
T5_KV = 16


def t5() -> Any:
    from transformers import T5Config, T5Model

    cfg = T5Config(vocab_size=VOCAB, d_model=D, d_kv=T5_KV, d_ff=T5_FFN, num_layers=LAYERS, num_decoder_layers=LAYERS,
                   num_heads=HEADS, relative_attention_num_buckets=8, decoder_start_token_id=0)
    return _seeded(lambda: T5Model(cfg))


def t5_macs(d: Dims) -> Any:
    b, s, t = d["batch"], d["seq"], d["dec_seq"]
    inner = HEADS * T5_KV
    enc = s * LAYERS * (4 * D * inner + 2 * D * T5_FFN) + _attention_macs(LAYERS, inner, s, s)
    dec_self = t * LAYERS * 4 * D * inner + _attention_macs(LAYERS, inner, t, t)
    dec_cross = LAYERS * (2 * t * D * inner + 2 * s * D * inner) + _attention_macs(LAYERS, inner, t, s)  # q,o; k,v
    dec_ff = t * LAYERS * 2 * D * T5_FFN
    return b * (enc + dec_self + dec_cross + dec_ff)


# ---- ViT ------------------------------------------------------------------------------------------------------

IMAGE = 32
PATCH = 8  # (32 / 8)^2 = 16 patches + CLS = 17 tokens


def vit() -> Any:
    from transformers import ViTConfig, ViTModel

    cfg = ViTConfig(hidden_size=D, num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=4 * D,
                    image_size=IMAGE, patch_size=PATCH, num_channels=3)
    return _seeded(lambda: ViTModel(cfg, add_pooling_layer=False))


def vit_macs(d: Dims) -> Any:
    patches = (IMAGE // PATCH) ** 2
    tokens = patches + 1
    embed = patches * D * 3 * PATCH * PATCH  # the patch-embedding Conv
    per_token = LAYERS * (4 * D * D + 2 * D * 4 * D)
    return d["batch"] * (embed + tokens * per_token + _attention_macs(LAYERS, D, tokens, tokens))


# ---- wav2vec2: Conv1d feature extractor, weight-normed grouped positional conv --------------------------------

W2V_CONV = (32, 32)
W2V_KERNEL = (10, 3)
W2V_STRIDE = (5, 2)
W2V_POS_KERNEL = 16
W2V_POS_GROUPS = 4
AUDIO = 1600  # samples in the example input


def wav2vec2() -> Any:
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    cfg = Wav2Vec2Config(hidden_size=D, num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=4 * D,
                         conv_dim=W2V_CONV, conv_kernel=W2V_KERNEL, conv_stride=W2V_STRIDE, conv_bias=False,
                         num_conv_pos_embeddings=W2V_POS_KERNEL, num_conv_pos_embedding_groups=W2V_POS_GROUPS,
                         feat_extract_norm="group", do_stable_layer_norm=False, mask_time_prob=0.0)
    return _seeded(lambda: Wav2Vec2Model(cfg))


def wav2vec2_macs(d: Dims) -> Any:
    lengths = [d["samples"]]
    for k, st in zip(W2V_KERNEL, W2V_STRIDE, strict=True):
        lengths.append((lengths[-1] - k) // st + 1)
    c_in = (1, *W2V_CONV[:-1])
    conv = sum(lo * c * k * co for lo, c, k, co in zip(lengths[1:], c_in, W2V_KERNEL, W2V_CONV, strict=True))
    frames = lengths[-1]
    projection = frames * W2V_CONV[-1] * D
    # positional grouped conv, kernel 16, padding 8: frames + 1 outputs (the last is dropped afterwards)
    pos = (frames + 1) * D * (D // W2V_POS_GROUPS) * W2V_POS_KERNEL
    per_token = LAYERS * (4 * D * D + 2 * D * 4 * D)
    return d["batch"] * (conv + projection + pos + frames * per_token + _attention_macs(LAYERS, D, frames, frames))


# ---- families checked against onnxruntime's shapes only (no closed form here) -----------------------------------
# Each writes a shape computation the symbolic sweep must carry: MobileViT's unfold size int(ceil(h/2)*2) in float,
# Funnel's AveragePool(ceil_mode=1) over the sequence, Longformer's NonZero(ConstantOfShape(n)) index ranges.

PROBE_IMAGE = 64


def mobilevit() -> Any:
    from transformers import MobileViTConfig, MobileViTModel

    cfg = MobileViTConfig(image_size=PROBE_IMAGE, hidden_sizes=[32, 48, 64],
                          neck_hidden_sizes=[8, 8, 16, 16, 24, 24, 64], num_attention_heads=HEADS)
    return _seeded(lambda: MobileViTModel(cfg, expand_output=True))


def funnel() -> Any:
    from transformers import FunnelConfig, FunnelModel

    cfg = FunnelConfig(vocab_size=VOCAB, block_sizes=[1, 1], block_repeats=None, num_decoder_layers=1, d_model=D,
                       n_head=HEADS, d_head=D // HEADS, d_inner=2 * D, max_position_embeddings=128)
    return _seeded(lambda: FunnelModel(cfg))


def longformer() -> Any:
    from transformers import LongformerConfig, LongformerModel

    cfg = LongformerConfig(vocab_size=VOCAB, hidden_size=D, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                           intermediate_size=2 * D, max_position_embeddings=130, attention_window=4)
    return _seeded(lambda: LongformerModel(cfg, add_pooling_layer=False))


def no_closed_form(_d: Dims) -> Any:
    raise NotImplementedError("no closed-form MACs for this family: its shapes are checked against onnxruntime")


# ---- inputs and the table -------------------------------------------------------------------------------------


def _ids(batch: int, seq: int, seed: int = 0) -> Any:
    import torch

    return torch.randint(0, VOCAB, (batch, seq), generator=torch.Generator().manual_seed(seed))


def _text_inputs(batch: int, seq: int) -> dict[str, Any]:
    import torch

    mask = torch.ones(batch, seq, dtype=torch.int64)
    mask[0, -1] = 0  # one padded position, so the mask is not trivially all ones
    return {"input_ids": _ids(batch, seq), "attention_mask": mask}


def _t5_inputs(batch: int, seq: int) -> dict[str, Any]:
    return {**_text_inputs(batch, seq), "decoder_input_ids": _ids(batch, max(2, seq // 2), seed=1)}


def _pixels(batch: int, _size: int) -> dict[str, Any]:
    import torch

    return {"pixel_values": torch.randn(batch, 3, IMAGE, IMAGE, generator=torch.Generator().manual_seed(0))}


def _pixels_sized(batch: int, size: int) -> dict[str, Any]:
    import torch

    return {"pixel_values": torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(0))}


def _audio(batch: int, samples: int) -> dict[str, Any]:
    import torch

    return {"input_values": torch.randn(batch, samples, generator=torch.Generator().manual_seed(0))}


_TEXT = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
_TEXT_OUT = {"last_hidden_state": {0: "batch", 1: "seq"}}
_BS = {"batch": 2, "seq": 16}
_BS2 = {"batch": 3, "seq": 37}


def _text_case(name: str, build: Callable[[], Any], macs: Callable[[Dims], Any]) -> HFCase:
    return HFCase(name, build, _text_inputs, _TEXT, _TEXT_OUT, macs, _BS, _BS2)


HF_CASES: dict[str, HFCase] = {
    "gpt2": _text_case("gpt2", gpt2, gpt2_macs),
    "bert": _text_case("bert", bert, bert_like_macs),
    "bert_eager": _text_case("bert_eager", bert_eager, bert_like_macs),
    "roberta": _text_case("roberta", roberta, bert_like_macs),
    "distilbert": _text_case("distilbert", distilbert, bert_like_macs),
    "llama": _text_case("llama", llama, llama_macs),
    "mistral": _text_case("mistral", mistral, llama_macs),
    "t5": HFCase("t5", t5, _t5_inputs, {**_TEXT, "decoder_input_ids": {0: "batch", 1: "dec_seq"}},
                 {"last_hidden_state": {0: "batch", 1: "dec_seq"}}, t5_macs,
                 {"batch": 2, "seq": 16, "dec_seq": 8}, {"batch": 3, "seq": 37, "dec_seq": 11}),
    "vit": HFCase("vit", vit, _pixels, {"pixel_values": {0: "batch"}}, {"last_hidden_state": {0: "batch"}},
                  vit_macs, {"batch": 2}, {"batch": 5}),
    "wav2vec2": HFCase("wav2vec2", wav2vec2, _audio, {"input_values": {0: "batch", 1: "samples"}},
                       {"last_hidden_state": {0: "batch", 1: "frames"}}, wav2vec2_macs,
                       {"batch": 2, "samples": AUDIO}, {"batch": 3, "samples": 2011}, size=AUDIO),
    "mobilevit": HFCase("mobilevit", mobilevit, _pixels_sized, {"pixel_values": {0: "batch", 2: "height", 3: "width"}},
                        {"last_hidden_state": {0: "batch"}}, no_closed_form,
                        {"batch": 2, "height": PROBE_IMAGE, "width": PROBE_IMAGE}, {}, size=PROBE_IMAGE),
    "funnel": _text_case("funnel", funnel, no_closed_form),
    "longformer": _text_case("longformer", longformer, no_closed_form),
}


def _output_only(model: Any, names: tuple[str, ...]) -> Any:
    """Wrap ``model`` so it takes positional tensors (``names`` in order) and returns ``last_hidden_state``."""
    import inspect

    import torch

    extra = {"use_cache": False} if "use_cache" in inspect.signature(model.forward).parameters else {}

    class LastHidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args: torch.Tensor) -> torch.Tensor:
            kwargs = dict(zip(names, args, strict=True))
            return self.model(**kwargs, **extra, return_dict=True).last_hidden_state

    return LastHidden().eval()


def export_hf(case: HFCase, path: Path, *, dynamo: bool, batch: int = 2, opset: int = OPSET) -> Path:
    """Export ``case`` to ``path`` (one file, no external data) with dynamic dims named as in ``case.dims``."""
    import torch

    inputs = case.inputs(batch, case.size)
    names = tuple(inputs)
    wrapper = _output_only(case.build(), names)
    args = tuple(inputs.values())
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # legacy-exporter deprecation, TracerWarnings, HF notices
        if dynamo:
            made: dict[str, Any] = {}
            shapes = tuple({axis: made.setdefault(dim, torch.export.Dim(dim, max=4096))
                            for axis, dim in case.dims[name].items()} for name in names)
            torch.onnx.export(wrapper, args, str(path), dynamo=True, opset_version=opset, input_names=list(names),
                              output_names=["last_hidden_state"], dynamic_shapes={"args": shapes}, verbose=False,
                              external_data=False)
        else:
            torch.onnx.export(wrapper, args, str(path), dynamo=False, opset_version=opset, input_names=list(names),
                              output_names=["last_hidden_state"], dynamic_axes={**case.dims, **case.out_dims})
    return path


def export_torch(model: Any, args: tuple[Any, ...], path: Path, *, dynamo: bool, input_names: list[str],
                 dims: dict[str, dict[int, str]], output_names: list[str], opset: int = OPSET) -> Path:
    """Export a plain torch model with named dynamic dims (``dims``: input name -> {axis: dim name})."""
    import torch

    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        if dynamo:
            made: dict[str, Any] = {}
            shapes = tuple({axis: made.setdefault(dim, torch.export.Dim(dim, max=4096))
                            for axis, dim in dims.get(name, {}).items()} for name in input_names)
            torch.onnx.export(model, args, str(path), dynamo=True, opset_version=opset, input_names=input_names,
                              output_names=output_names, dynamic_shapes=shapes, verbose=False, external_data=False)
        else:
            out_axes = {name: {0: "batch"} for name in output_names}
            torch.onnx.export(model, args, str(path), dynamo=False, opset_version=opset, input_names=input_names,
                              output_names=output_names, dynamic_axes={**dims, **out_axes})
    return path


# --------------------------------------------------------------------------------------------------------------
# onnxruntime optimizers
# --------------------------------------------------------------------------------------------------------------


def ort_optimize(src: Path, dst: Path, level: str) -> Path:
    """Save onnxruntime's optimized graph at ``level`` ("basic", "extended", "layout" or "all") to ``dst``.

    Write ``dst`` next to ``src``: onnxruntime keeps external-data references relative to the original file.
    """
    import onnxruntime as ort

    levels = {"basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
              "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
              "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}
    if hasattr(ort.GraphOptimizationLevel, "ORT_ENABLE_LAYOUT"):
        levels["layout"] = ort.GraphOptimizationLevel.ORT_ENABLE_LAYOUT
    so = ort.SessionOptions()
    so.graph_optimization_level = levels[level]
    so.optimized_model_filepath = str(dst)
    so.log_severity_level = 3  # the "hardware specific" NCHWc notice at ALL
    so.intra_op_num_threads = 1
    ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
    return dst


def transformers_optimize(src: Path, dst: Path, *, model_type: str = "bert", num_heads: int = HEADS,
                          hidden_size: int = D) -> Path:
    """``onnxruntime.transformers.optimizer.optimize_model``: offline fusions (Attention, EmbedLayerNormalization)."""
    import logging

    from onnxruntime.transformers.optimizer import optimize_model

    logging.getLogger("onnxruntime.transformers").setLevel(logging.ERROR)
    opt = optimize_model(str(src), model_type=model_type, num_heads=num_heads, hidden_size=hidden_size, opt_level=0)
    opt.save_model_to_file(str(dst))
    return dst


# --------------------------------------------------------------------------------------------------------------
# Quantization
# --------------------------------------------------------------------------------------------------------------


class RandomReader:
    """A calibration data reader for ``quantize_static`` that feeds a few fixed random batches."""

    def __init__(self, feeds: list[dict[str, np.ndarray]]) -> None:
        self._feeds = feeds
        self._it: Iterator[dict[str, np.ndarray]] = iter(feeds)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._it, None)

    def rewind(self) -> None:
        self._it = iter(self._feeds)


def random_feeds(path: Path, n: int = 4, dims: Mapping[str, int] | None = None, vocab: int = 128,
                 seed: int = 0) -> list[dict[str, np.ndarray]]:
    """``n`` random feeds for the graph inputs of ``path``; named dims from ``dims`` (default 1)."""
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


def quantize(src: Path, dst: Path, mode: str, *, dims: Mapping[str, int] | None = None, vocab: int = 128) -> Path:
    """Quantize ``src`` to ``dst``. ``mode``: "dynamic" (weights int8, activations at run time), "qdq" or
    "qoperator" (static, uint8 activations / int8 weights, calibrated on 4 random batches).

    ``quant_pre_process`` runs without ORT's symbolic shape inference: that fails on the legacy tiny_transformer
    export and, when it fails, writes ``sym_shape_infer_temp.onnx`` into the current directory.
    """
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    pre = dst.with_name(dst.stem + "_pre.onnx")
    quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # RuntimeWarnings computing zero points of all-constant tensors
        if mode == "dynamic":
            quantize_dynamic(str(pre), str(dst), weight_type=QuantType.QInt8)
        else:
            fmt = {"qdq": QuantFormat.QDQ, "qoperator": QuantFormat.QOperator}[mode]
            reader = RandomReader(random_feeds(pre, n=4, dims=dims, vocab=vocab))
            quantize_static(str(pre), str(dst), reader, quant_format=fmt, activation_type=QuantType.QUInt8,
                            weight_type=QuantType.QInt8, per_channel=False)
    return dst


# --------------------------------------------------------------------------------------------------------------
# Control flow
# --------------------------------------------------------------------------------------------------------------

CF_WIDTH = 16


def export_cond(path: Path) -> Path:
    """``torch.cond`` exported with dynamo: an ``If`` whose branches each hold one Linear (a Gemm, 16x16)."""
    import torch

    class Cond(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Linear(CF_WIDTH, CF_WIDTH)
            self.b = torch.nn.Linear(CF_WIDTH, CF_WIDTH)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cond(x.sum() > 0, lambda t: self.a(t).relu(), lambda t: self.b(t).sigmoid(), (x,))

    return export_torch(_seeded(Cond), (torch.randn(2, CF_WIDTH),), path, dynamo=True, input_names=["x"],
                        dims={"x": {0: "batch"}}, output_names=["y"])


def export_scripted_loop(path: Path) -> Path:
    """A scripted ``for`` loop (trip count from an input) and an ``if``, legacy export: Loop and If.

    The Loop body holds one MatMul (batch x 16 x 16 per trip).
    """
    import torch

    class Body(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(CF_WIDTH, CF_WIDTH) * 0.1)

        def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:
            for _ in range(n):
                x = torch.tanh(torch.matmul(x, self.w))
            if bool(x.sum() > 0):
                x = x * 2.0
            else:
                x = x - 1.0
            return x

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scripted = torch.jit.script(_seeded(Body))
    return export_torch(scripted, (torch.randn(2, CF_WIDTH), torch.tensor(3)), path, dynamo=False,
                        input_names=["x", "n"], dims={"x": {0: "batch"}}, output_names=["y"])
