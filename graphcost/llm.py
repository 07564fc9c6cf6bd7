"""The LLM view of a decoder export: prefill and decode bounds, KV-cache bytes per token, tokens/s ceilings.

A decoder export is recognized by its interface, the way every exporter writes it: a token input
(``input_ids``, or ``inputs_embeds`` when the embedding is left out), past K/V inputs (``past_key_values.N.key``,
``past_key.N``, ``past.N.value``, ``past_N`` [2, B, N, P, H]...) and ``present*`` outputs. Its phase dims are read
off those inputs rather than guessed from names:

    batch      axis 0 of the token input          sequence  axis 1 of the token input (new tokens this step)
    past       the past-length axis of the past K/V inputs (−2 of [B, kvN, P, H]; P of [2, B, N, P, H])
    total      axis 1 of ``attention_mask`` when that is a dim of its own (past + new tokens)

The phases bind them as:

    prefill(P)  sequence = P, past = 0, total = P        one pass over a prompt of P tokens
    decode(L)   sequence = 1, past = L, total = L + 1    one new token with L tokens already in the cache

and every number comes from the report's exact totals (``report.totals.formulas``, symbolic in those dims), bound
per phase, so a context sweep is a substitution, not a new analysis. Per phase::

    time   = max(FLOPs / peak, bytes / (bandwidth × efficiency))     the roofline floor of one step
    tokens/s ceiling (decode) = batch / time                          every sequence of the batch gets a token
    KV-cache bytes per token   = Σ over past inputs of (their dims other than batch and past) × element bytes
                               = 2 × layers × kv_heads × head_dim × dtype bytes on a [B, kvN, P, H] cache

The peak is the one of the dtype doing most of the FLOPs (``HardwareSpec.peak_for``); bytes are all charged at
DRAM bandwidth (a decoder's weights never fit on chip). "Fits" adds the weights, the whole cache at the largest
context (every layer, one copy) and the activation peak of that decode step from liveness (the live tensors other
than past/present, at the step where the live set peaks).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from graphcost._dims import Dim, evaluate, free_names, parse_dim
from graphcost.analysis import Analysis
from graphcost.graph import TensorKind, dtype_bits
from graphcost.hardware.spec import HardwareSpec
from graphcost.passes.costs import count_costs
from graphcost.passes.liveness import liveness
from graphcost.passes.roofline import kernel_bound
from graphcost.report.model import Report

TOKEN_INPUTS = ("input_ids", "inputs_embeds")
_PAST = re.compile(r"^past(_key_values)?[._]?.*", re.IGNORECASE)
_PRESENT = re.compile(r"^present", re.IGNORECASE)
MAX_BATCH_SEARCH = 1 << 20
"""The crossover batch is searched up to this; past it decode is memory bound at any batch a device holds."""

DEFAULT_CONTEXTS = (128, 1024, 4096)
DEFAULT_PROMPT = 512


class NotADecoder(ValueError):
    """The model lacks the interface of a decoder export; the message says what is missing."""


@dataclass(frozen=True)
class DecoderDims:
    """Which of the model's dims plays which role (None: the model has no such dim)."""

    batch: str | None
    sequence: str | None
    past: str
    total: str | None = None
    other: tuple[str, ...] = ()
    """Model dims no role claims; they keep the static binding's value."""
    cache: Mapping[str, tuple[int, str]] = field(default_factory=dict)
    """Named dims of the cache other than batch and past (onnxruntime-genai's ``kv_cache_dim``): dim → (size,
    where the size came from: ``--dim``, or the attention node that reads the cache)."""

    def to_dict(self) -> dict[str, Any]:
        return {"batch": self.batch, "sequence": self.sequence, "past": self.past, "total": self.total,
                "other": list(self.other),
                "cache": {k: {"value": v, "from": w} for k, (v, w) in self.cache.items()}}


@dataclass(frozen=True)
class PhaseBound:
    """One step of one phase: the dims it binds and its roofline floor."""

    phase: str
    tokens: int
    """Prompt tokens (prefill) or context tokens already cached (decode)."""
    batch: int
    binding: Mapping[str, int]
    flops: float
    bytes: float
    compute_time_s: float
    memory_time_s: float
    time_s: float
    bound: str
    tokens_per_s: float
    """decode: batch / time (the ceiling); prefill: prompt tokens × batch / time."""

    @property
    def intensity(self) -> float | None:
        return self.flops / self.bytes if self.bytes else None

    def to_dict(self) -> dict[str, Any]:
        return {"phase": self.phase, "tokens": self.tokens, "batch": self.batch, "binding": dict(self.binding),
                "flops": self.flops, "bytes": self.bytes, "intensity": self.intensity,
                "compute_time_s": self.compute_time_s, "memory_time_s": self.memory_time_s, "time_s": self.time_s,
                "bound": self.bound, "tokens_per_s": self.tokens_per_s}


@dataclass(frozen=True)
class MemoryFit:
    """Whether weights + the whole KV cache at the largest context + the activation peak fit the device."""

    context: int
    weights_bytes: int
    kv_cache_bytes: int
    activation_peak_bytes: int
    capacity_bytes: int | None

    @property
    def needed_bytes(self) -> int:
        return self.weights_bytes + self.kv_cache_bytes + self.activation_peak_bytes

    @property
    def fits(self) -> bool | None:
        return None if self.capacity_bytes is None else self.needed_bytes <= self.capacity_bytes

    def to_dict(self) -> dict[str, Any]:
        return {"context": self.context, "weights_bytes": self.weights_bytes, "kv_cache_bytes": self.kv_cache_bytes,
                "activation_peak_bytes": self.activation_peak_bytes, "needed_bytes": self.needed_bytes,
                "capacity_bytes": self.capacity_bytes, "fits": self.fits}


@dataclass(frozen=True)
class LLMSection:
    """The LLM view: weights, KV cache, prefill and decode floors, the tokens/s sweep, crossover, memory fit."""

    dims: DecoderDims
    weights_bytes: int
    quantization_bytes: int
    """Of ``weights_bytes``: block scales and zero points of block-quantized weights (MatMulNBits...)."""
    kv_cache_bytes_per_token: int
    kv_inputs: tuple[str, ...]
    kv_traffic_bytes_per_token: float
    """What one more cached token adds to a decode step's bytes in the graph as costed (reads + writes)."""
    bandwidth_efficiency: float
    peak_flops: float
    peak_dtype: str
    memory_bandwidth: float
    prefill: PhaseBound
    decode: tuple[PhaseBound, ...]
    compute_bound_batch: int | None
    """Smallest batch at which decode at the first context turns compute bound (None: not up to
    ``MAX_BATCH_SEARCH``, or the model has no batch dim)."""
    memory: MemoryFit
    formulas: Mapping[str, str] = field(default_factory=dict)

    @property
    def tokens_per_s(self) -> dict[int, float]:
        return {d.tokens: d.tokens_per_s for d in self.decode}

    def to_dict(self) -> dict[str, Any]:
        return {
            "dims": self.dims.to_dict(), "weights_bytes": self.weights_bytes,
            "quantization_bytes": self.quantization_bytes,
            "kv_cache_bytes_per_token": self.kv_cache_bytes_per_token, "kv_inputs": list(self.kv_inputs),
            "kv_traffic_bytes_per_token": self.kv_traffic_bytes_per_token,
            "bandwidth_efficiency": self.bandwidth_efficiency, "memory_bandwidth": self.memory_bandwidth,
            "peak_flops": self.peak_flops, "peak_dtype": self.peak_dtype,
            "prefill": self.prefill.to_dict(), "decode": [d.to_dict() for d in self.decode],
            "tokens_per_s": {str(d.tokens): d.tokens_per_s for d in self.decode},
            "compute_bound_batch": self.compute_bound_batch, "memory": self.memory.to_dict(),
            "formulas": dict(self.formulas),
        }


# ------------------------------------------------------------------------------------------------- recognition
def decoder_dims(analysis: Analysis) -> tuple[DecoderDims, tuple[str, ...], int]:
    """(roles, past K/V input names, KV-cache bytes per token per sequence); :class:`NotADecoder` otherwise."""
    graph = analysis.graph
    names = [n for n in graph.input_names if graph.tensor(n) is not None
             and graph.tensor(n).kind != TensorKind.PARAMETER]  # type: ignore[union-attr]
    token = next((n for n in TOKEN_INPUTS if n in names), None)
    past_inputs = tuple(n for n in names if _PAST.match(n) and n not in TOKEN_INPUTS)
    if not past_inputs:
        raise NotADecoder("not a decoder export with a KV cache: no past_key_values.* / past_key* / past.* input "
                          f"(inputs: {', '.join(names) or 'none'})")
    if not any(_PRESENT.match(o) for o in graph.output_names):
        raise NotADecoder("not a decoder export with a KV cache: past inputs but no present* output")
    batch = sequence = None
    if token is not None:
        shape = graph.tensor(token).shape  # type: ignore[union-attr]
        if shape is not None and len(shape) >= 2:
            batch, sequence = _bare(shape[0]), _bare(shape[1])
    past: str | None = None
    per_token = 0
    cache: dict[str, tuple[int, str]] = {}
    for name in past_inputs:
        t = graph.tensor(name)
        shape = None if t is None else t.shape
        if shape is None or len(shape) not in (4, 5):
            raise NotADecoder(f"past input {name!r}: expected [batch, kv_heads, past, head_dim] or "
                              f"[2, batch, heads, past, head_dim], got {'no shape' if shape is None else shape}")
        axis = len(shape) - 2
        p = _bare(shape[axis])
        if p is None:
            raise NotADecoder(f"past input {name!r}: its past-length axis {shape[axis]} is not a named dim")
        if past is None:
            past = p
        elif p != past:
            raise NotADecoder(f"past inputs disagree on the past-length dim: {past!r} and {p!r} ({name!r})")
        rest = [d for i, d in enumerate(shape) if i != axis and not (i == len(shape) - 4 and _bare(d) == batch)]
        sizes: list[int] = []
        for i, d in enumerate(rest):
            if not isinstance(d, int):
                dim = _bare(d)
                if dim is not None and dim not in cache:
                    found = _cache_dim(analysis, name, dim, last=i == len(rest) - 1)
                    if found is not None:
                        cache[dim] = found
                if dim is None or dim not in cache:
                    raise NotADecoder(f"past input {name!r}: its dim {d} is neither batch nor past and no attention "
                                      f"node says its size; bind it with --dim {d}=N")
                d = cache[dim][0]
            sizes.append(d)
        rest = sizes  # type: ignore[assignment]
        bits = dtype_bits(t.dtype)  # type: ignore[union-attr]
        if bits is None:
            raise NotADecoder(f"past input {name!r}: element type {t.dtype} has no size")  # type: ignore[union-attr]
        per_token += math.prod(rest) * bits // 8  # type: ignore[arg-type]
    assert past is not None
    total = None
    mask = graph.tensor("attention_mask") if "attention_mask" in names else None
    if mask is not None and mask.shape is not None and len(mask.shape) == 2:
        named = _bare(mask.shape[1])
        if named is not None and named not in (past, sequence):
            total = named
    roles = {r for r in (batch, sequence, past, total, *cache) if r is not None}
    other = tuple(sorted(d for d in analysis.dims if d not in roles))
    return DecoderDims(batch, sequence, past, total, other, cache), past_inputs, per_token


ATTENTION_PAST = {"GroupQueryAttention": (3, 4), "MultiHeadAttention": (6, 7)}
"""com.microsoft attention ops → input positions of past key and past value ([B, kvN, P, H])."""


def _cache_dim(analysis: Analysis, past_input: str, dim: str, *, last: bool) -> tuple[int, str] | None:
    """The size of a named cache dim: the caller's ``--dim``, else the head size of the attention node reading the
    cache (only for the last axis, the head dim): query width / num_heads, or of packed QKV
    width / (num_heads + 2·kv_num_heads)."""
    if dim in analysis.binding.user:
        return analysis.binding.values[dim], "bound by the caller"
    if not last:
        return None
    graph = analysis.graph
    for node in graph.consumers(past_input):
        slots = ATTENTION_PAST.get(node.op_type)
        if slots is None or node.domain != "com.microsoft":
            continue
        heads = int(node.attribute("num_heads") or 0)
        kv_heads = int(node.attribute("kv_num_heads") or heads)
        q = graph.tensor(node.inputs[0])
        if not heads or q is None or q.shape is None or not isinstance(q.shape[-1], int):
            continue
        packed = len(node.inputs) < 2 or not node.inputs[1]
        parts = heads + 2 * kv_heads if packed else heads
        if q.shape[-1] % parts == 0:
            return q.shape[-1] // parts, f"{node.op_type} {node.name!r} head size"
    return None


def _bare(d: Dim) -> str | None:
    return str(d) if getattr(d, "is_Symbol", False) else None


# --------------------------------------------------------------------------------------------------- the view
def llm_view(analysis: Analysis, report: Report, hardware: HardwareSpec, *, prompt: int = DEFAULT_PROMPT,
             contexts: Sequence[int] = DEFAULT_CONTEXTS, batch: int = 1, efficiency: float = 1.0,
             memory_bytes: int | None = None) -> LLMSection:
    """The LLM section of a decoder's report (see the module docstring for every formula).

    ``efficiency`` scales the bandwidth (the chapter's "at 70 %"); ``memory_bytes`` is the device's memory
    capacity (default: ``hardware.memory_bytes``, when the spec has one).
    """
    if not 0 < efficiency <= 1:
        raise ValueError(f"--efficiency {efficiency:g}: must be in (0, 1]")
    if prompt < 1 or batch < 1 or not contexts or any(c < 0 for c in contexts):
        raise ValueError("prompt and batch must be ≥ 1 and contexts ≥ 0")
    dims, kv_inputs, kv_per_token = decoder_dims(analysis)
    exprs = _exact(analysis, report)
    bw = hardware.memory_bandwidth * efficiency
    dtype = _main_dtype(report)
    peak, peak_dtype = hardware.peak_for(dtype)
    fixed = {d: report.binding.get(d, 1) for d in dims.other}
    fixed.update({d: v for d, (v, _) in dims.cache.items()})

    def bind(phase: str, tokens: int, b: int) -> PhaseBound:
        values = dict(fixed)
        if dims.batch:
            values[dims.batch] = b
        if phase == "prefill":
            values.update({k: v for k, v in ((dims.sequence, tokens), (dims.past, 0), (dims.total, tokens)) if k})
        else:
            values.update({k: v for k, v in ((dims.sequence, 1), (dims.past, tokens), (dims.total, tokens + 1))
                           if k})
        flops = float(_at(exprs["flops"], values))
        moved = float(_at(exprs["bytes"], values))
        # all bytes at DRAM, on purpose (module docstring): capacity=False, the bandwidth at ``efficiency``
        k = kernel_bound(flops, moved, hardware, dtype=dtype, capacity=False, efficiency=efficiency)
        t = k.time_s or 0.0
        made = b * (tokens if phase == "prefill" else 1)
        return PhaseBound(phase, tokens, b, values, flops, moved, k.compute_s or 0.0, k.memory_s or 0.0, t,
                          k.bound or "compute", made / t if t > 0 else math.inf)

    decode = tuple(bind("decode", c, batch) for c in contexts)
    first = contexts[0]
    traffic = bind("decode", first + 1, 1).bytes - bind("decode", first, 1).bytes
    crossover = None
    if dims.batch:
        crossover = _crossover(lambda b: bind("decode", first, b))
    largest = max(contexts)
    kv_bytes = batch * kv_per_token * (largest + 1)
    act = _activation_peak(analysis, bind("decode", largest, batch).binding, kv_inputs)
    capacity = memory_bytes if memory_bytes is not None else getattr(hardware, "memory_bytes", None)
    weights = report.model.parameter_bytes
    return LLMSection(
        dims=dims, weights_bytes=weights, quantization_bytes=_quantization_bytes(analysis),
        kv_cache_bytes_per_token=kv_per_token, kv_inputs=kv_inputs, kv_traffic_bytes_per_token=traffic,
        bandwidth_efficiency=efficiency, peak_flops=peak, peak_dtype=peak_dtype, memory_bandwidth=bw,
        prefill=bind("prefill", prompt, batch), decode=decode, compute_bound_batch=crossover,
        memory=MemoryFit(largest, weights, kv_bytes, act, capacity),
        formulas={k: report.totals.formulas[k] for k in ("flops", "bytes") if k in report.totals.formulas})


def _exact(analysis: Analysis, report: Report) -> dict[str, Dim]:
    """The report's exact FLOPs and bytes as expressions (numbers when the model has no free dims).

    The formulas are read back from ``report.totals.formulas``; one longer than the dim grammar reads
    (``_dimexpr.MAX_TEXT``) is summed again from the same symbolic costs the report's formulas came from.
    """
    out: dict[str, Dim] = {}
    summed: dict[str, Dim] | None = None
    for key, static in (("flops", report.totals.flops), ("bytes", report.totals.bytes)):
        text = report.totals.formulas.get(key)
        if text is None:
            out[key] = int(static)
            continue
        expr = parse_dim(text)
        if free_names(expr) - set(report.binding):  # too long for the grammar: one opaque symbol
            summed = summed if summed is not None else _symbolic_totals(analysis)
            expr = summed[key]
        out[key] = expr
    return out


def _symbolic_totals(analysis: Analysis) -> dict[str, Dim]:
    """Σ over top-level nodes of known cost, as ``graphcost.api`` sums ``totals.formulas`` (not as text)."""
    graph = analysis.shapes.symbolic_graph
    costs = count_costs(graph) if graph is not None else analysis.costs
    top = costs.top_level()
    flops: Dim = sum((c.flops for c in top if c.flops is not None), start=0)  # type: ignore[arg-type]
    moved: Dim = sum((c.bytes_read for c in top if c.bytes_read is not None), start=0)  # type: ignore[arg-type]
    moved = moved + sum((c.bytes_written for c in top if c.bytes_written is not None), start=0)  # type: ignore
    return {"flops": flops, "bytes": moved}


def _at(expr: Dim, values: Mapping[str, int]) -> int | float:
    return evaluate(expr, {k: values.get(k, 1) for k in free_names(expr)})


def _main_dtype(report: Report) -> str:
    """The dtype doing most of the FLOPs at the static binding (float32 when nothing has FLOPs)."""
    by: dict[str, float] = {}
    for n in report.nodes:
        if n.depth == 0 and n.flops:
            by[n.dtype] = by.get(n.dtype, 0.0) + float(n.flops) * (n.multiplier if isinstance(n.multiplier, int)
                                                                  else 1)
    return max(by, key=lambda k: by[k]) if by else "float32"


def _crossover(step: Any) -> int | None:
    """Smallest batch b with step(b) compute bound (compute time − memory time grows with b), else None."""
    if step(MAX_BATCH_SEARCH).bound != "compute":
        return None
    lo, hi = 0, MAX_BATCH_SEARCH  # step(lo) memory bound (or lo = 0), step(hi) compute bound
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if step(mid).bound == "compute":
            hi = mid
        else:
            lo = mid
    return hi


def _activation_peak(analysis: Analysis, binding: Mapping[str, int], kv_inputs: Sequence[str]) -> int:
    """The live bytes at a decode step's peak, past and present tensors left out (the cache is counted whole)."""
    values = {**analysis.binding.values, **binding}
    mem = liveness(analysis.graph, values, search_order=False)
    kv = set(kv_inputs) | {o for o in analysis.graph.output_names if _PRESENT.match(o)}
    return int(mem.peak_activation_bytes - sum(t.bytes for t in mem.live_at_peak if t.name in kv))


QUANTIZED_WEIGHT_OPS = {"MatMulNBits": (2, 3), "GatherBlockQuantized": (2, 3), "MatMulBnb4": (2,)}
"""op → input positions holding block scales and zero points."""


def _quantization_bytes(analysis: Analysis) -> int:
    graph = analysis.graph
    seen: set[str] = set()
    total = 0
    for node in graph.nodes():
        for i in QUANTIZED_WEIGHT_OPS.get(node.op_type, ()):
            if i >= len(node.inputs) or not node.inputs[i] or node.inputs[i] in seen:
                continue
            t = graph.tensor(node.inputs[i])
            if t is None or t.kind != TensorKind.PARAMETER or t.shape is None:
                continue
            bits = dtype_bits(t.dtype)
            if bits is not None and all(isinstance(d, int) for d in t.shape):
                seen.add(t.name)
                total += math.prod(t.shape) * bits // 8  # type: ignore[arg-type]
    return total


__all__ = ["DEFAULT_CONTEXTS", "DEFAULT_PROMPT", "DecoderDims", "LLMSection", "MemoryFit", "NotADecoder",
           "PhaseBound", "decoder_dims", "llm_view"]
