"""Run a model in onnxruntime: wall-clock latency, per-kernel times, and the arena's activation peak.

Two sessions with the same options:

1. **latency** — profiling off; ``warmup`` discarded runs, then ``repeats`` runs each timed with
   ``time.perf_counter`` around ``session.run`` (numpy feeds in, numpy outputs back: on a GPU that includes the
   host↔device copies).
2. **profiled** — profiling on, and ORT saves the optimized graph *of this session* (temp dir, weights in a side
   file). ORT's Chrome-trace JSON has one ``cat: "Node"`` event ``<kernel>_kernel_time`` per kernel per run
   (``dur`` µs) and one ``cat: "Session"`` ``model_run`` event per run. Events are grouped into runs by the
   ``model_run`` time windows, the first ``warmup`` runs dropped, and each kernel gets one duration per profiled
   run (the sum of its events in that run; 0 in a run where it did not execute). Kernel names are the
   optimized graph's; :func:`graphcost.measure.fusion_ort.map_back` says which source nodes each kernel's unit computes
   (a fused kernel such as FusedConv covers several; a layout conversion covers none). Times stay on kernels:
   a fused kernel's time is never split among its source nodes.

**Memory.** Each Node event's args carry the statistics of the arena allocator the kernel's provider allocates
from (ORT's ``AllocatorStats``): ``mem_bytes_in_use``, ``mem_in_use_delta`` (change across the kernel),
``mem_in_use_peak`` (the arena's maximum bytes in use since the session was created) and ``mem_arena_held``.
The arena also holds what the session allocated before running (pre-packed weights, …), so the activation peak
reported is ``max(mem_in_use_peak) − baseline`` where the baseline is the bytes in use just before the first
kernel of the session's first run (``mem_bytes_in_use − mem_in_use_delta`` of that event). It counts
activations, graph outputs and kernel scratch, in the arena's rounded chunk sizes, over all runs of the
profiled session (the first run allocates tensor by tensor, later runs one planned block); graph inputs fed
from numpy on the CPU are not in it. Without those fields (arena disabled, a provider that does not report)
no number is given.
"""

from __future__ import annotations

import bisect
import json
import os
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graphcost.graph import Graph
from graphcost.load import load
from graphcost.measure import _ort_session
from graphcost.measure._bounded import check_bounded, terminate_as_exit
from graphcost.measure.fusion_ort import OrtError, OrtMapping, map_back, ort_version
from graphcost.measure.inputs import make_inputs
from graphcost.measure.stats import Timing, timing

PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider",
             "tensorrt": "TensorrtExecutionProvider"}
"""graphcost's provider names → onnxruntime's."""
LEVELS = ("disable", "basic", "extended", "all")
"""Graph optimization levels; ``disable`` runs the source graph's nodes one kernel each."""
KERNEL_SUFFIX = "_kernel_time"
US = 1e-6  # profiler durations are microseconds


@dataclass(frozen=True)
class KernelTime:
    """One kernel of ORT's optimized graph and its duration per profiled run."""

    name: str
    op_type: str
    domain: str  # "" when the kernel is not found in the saved optimized graph
    provider: str
    unit: int | None  # index into OrtRun.mapping.units; None if the kernel could not be mapped
    covers: tuple[str, ...]  # source nodes its unit computes; () for conversions and unmapped kernels
    timing: Timing

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "op_type": self.op_type, "domain": self.domain, "provider": self.provider,
                "unit": self.unit, "covers": list(self.covers), "timing": self.timing.to_dict()}


@dataclass(frozen=True)
class OrtRun:
    model: str
    provider: str
    providers_available: tuple[str, ...]
    intra_op_threads: int  # 0: ORT's default
    level: str
    warmup: int
    repeats: int
    binding: Mapping[str, int]
    input_shapes: Mapping[str, tuple[int, ...]]
    latency: Timing  # session.run wall time, profiling off
    kernels: tuple[KernelTime, ...]  # execution order of the first profiled run
    mapping: OrtMapping | None
    profiled_run: Timing  # model_run durations of the profiled runs
    memory_peak_bytes: int | None
    memory_source: str
    ort_version: str
    warnings: tuple[str, ...]
    profile_repeats: int = 0
    memory_detail: Mapping[str, int] = field(default_factory=dict)  # raw arena figures behind the peak

    @property
    def kernel_sum(self) -> Timing:
        """Per profiled run, the sum of all kernel durations (compare with ``profiled_run``)."""
        return _per_run_sum(self.kernels)

    def kernels_covering(self, node: str) -> tuple[KernelTime, ...]:
        """The kernels whose unit computes source node ``node`` (several when ORT split it)."""
        return tuple(k for k in self.kernels if node in k.covers)

    def to_dict(self) -> dict[str, Any]:
        m = self.mapping
        return {
            "model": self.model, "provider": self.provider, "providers_available": list(self.providers_available),
            "intra_op_threads": self.intra_op_threads, "level": self.level, "warmup": self.warmup,
            "repeats": self.repeats, "profile_repeats": self.profile_repeats, "binding": dict(self.binding),
            "input_shapes": {k: list(v) for k, v in self.input_shapes.items()},
            "latency": self.latency.to_dict(), "profiled_run": self.profiled_run.to_dict(),
            "kernel_sum": self.kernel_sum.to_dict(), "kernels": [k.to_dict() for k in self.kernels],
            "mapping": None if m is None else {"level": m.level, "units": len(m.units),
                                               "uncovered": list(m.uncovered), "overlaps": list(m.overlaps)},
            "memory_peak_bytes": self.memory_peak_bytes, "memory_source": self.memory_source,
            "memory_detail": dict(self.memory_detail), "ort_version": self.ort_version,
            "warnings": list(self.warnings)}


def available_providers() -> tuple[str, ...]:
    """graphcost names of the providers this onnxruntime build offers ("cpu", "cuda", "tensorrt")."""
    import onnxruntime as ort

    have = set(ort.get_available_providers())
    return tuple(short for short, name in PROVIDERS.items() if name in have)


@terminate_as_exit()  # SIGTERM unwinds: the profile's temp dir (and a caller's) is removed
def run_ort(path: str | os.PathLike[str], *, binding: Mapping[str, int] | None = None,
            inputs: dict[str, np.ndarray] | None = None, provider: str = "cpu", threads: int | None = None,
            warmup: int = 10, repeats: int = 50, level: str = "all", profile: bool = True,
            profile_repeats: int | None = None, seed: int = 0) -> OrtRun:
    """Time ``path`` in onnxruntime (see the module docstring). Inputs not given are made by
    :func:`~graphcost.measure.inputs.make_inputs` from ``binding`` and ``seed``."""
    import onnxruntime as ort

    n_prof = repeats if profile_repeats is None else profile_repeats
    _check_counts(warmup=warmup, repeats=repeats, profile_repeats=n_prof)
    if level not in LEVELS:
        raise ValueError(f"unknown ORT optimization level {level!r} (one of {', '.join(LEVELS)})")
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be at least 1 (or None for ORT's default), got {threads}")
    available = available_providers()
    if provider not in PROVIDERS or provider not in available:
        raise ValueError(f"provider {provider!r} is not available (available: {', '.join(available)})")
    model = os.fspath(path)
    loaded = load(model)
    source = loaded.graph()
    bound = dict(binding or {})
    feeds = _feeds(source, bound, inputs, seed)
    check_bounded(loaded.proto, feeds, base_dir=loaded.base_dir)  # RunRefused before a run that may not end
    providers = _session_providers(provider)

    def options() -> Any:
        so = _ort_session.options()  # quiet: ORT's log lines would precede graphcost's one line
        so.graph_optimization_level = {
            "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
            "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}[level]
        if threads is not None:
            so.intra_op_num_threads = threads
        return so

    warnings: list[str] = []
    if provider != "cpu":
        warnings.append(f"{provider}: latency includes host↔device copies of inputs and outputs; Node event "
                        "durations are host-side times of each kernel's Compute call")
    sess = _session(model, options(), providers)
    latency = timing(_time_runs(sess, feeds, warmup, repeats))
    del sess

    kernels: tuple[KernelTime, ...] = ()
    mapping: OrtMapping | None = None
    profiled = Timing(())
    memory: tuple[int | None, str, dict[str, int]] = (None, "none: profiling was off (profile=False)", {})
    if profile:
        with tempfile.TemporaryDirectory(prefix="graphcost-measure-") as tmp:
            so = options()
            so.enable_profiling = True
            so.profile_file_prefix = os.path.join(tmp, "profile")
            optimized_path = os.path.join(tmp, "optimized.onnx")
            so.optimized_model_filepath = optimized_path
            so.add_session_config_entry("session.optimized_model_external_initializers_file_name", "optimized.data")
            so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "64")
            try:
                psess = _session(model, so, providers)
            except OrtError as e:  # compiled EPs (TensorRT) cannot serialize their graph: profile without it
                warnings.append(f"optimized graph not saved, kernels unmapped ({e})")
                so = options()
                so.enable_profiling = True
                so.profile_file_prefix = os.path.join(tmp, "profile")
                psess = _session(model, so, providers)
                optimized_path = ""
            _time_runs(psess, feeds, warmup, n_prof)
            with open(psess.end_profiling()) as f:
                events = json.load(f)
            del psess
            optimized = load(optimized_path).graph() if optimized_path and os.path.exists(optimized_path) else None
            if optimized is not None:  # map while the optimized model's files still exist
                mapping = map_back(source, optimized, level)
            parsed = parse_profile(events, warmup)
            kernels = _kernel_times(parsed, optimized, mapping, warnings)
        warnings.extend(parsed.warnings)
        profiled = timing(parsed.run_durations)
        memory = arena_peak(events, PROVIDERS[provider])
        summed = _per_run_sum(kernels)
        if summed.count and summed.median > latency.median:
            warnings.append(f"kernel times include the profiler's per-kernel bookkeeping: their sum per run "
                            f"(median {summed.median / US:.0f} µs) exceeds the unprofiled latency "
                            f"(median {latency.median / US:.0f} µs); compare kernels with each other, and whole "
                            "runs with `latency`")
        if mapping is not None and mapping.overlaps:
            warnings.append(f"{len(mapping.overlaps)} source node(s) claimed by two ORT units (kept by the first): "
                            + ", ".join(mapping.overlaps[:5]))
    peak, source_text, detail = memory
    return OrtRun(
        model=model, provider=provider, providers_available=available, intra_op_threads=threads or 0,
        level=level, warmup=warmup, repeats=repeats, binding=bound,
        input_shapes={k: tuple(int(d) for d in v.shape) for k, v in feeds.items()}, latency=latency,
        kernels=kernels, mapping=mapping, profiled_run=profiled, memory_peak_bytes=peak, memory_source=source_text,
        ort_version=ort_version(), warnings=tuple(warnings), profile_repeats=n_prof if profile else 0,
        memory_detail=detail)


def _per_run_sum(kernels: tuple[KernelTime, ...]) -> Timing:
    if not kernels:
        return Timing(())
    return Timing(tuple(sum(k.timing.samples[i] for k in kernels) for i in range(kernels[0].timing.count)))


# --------------------------------------------------------------------------- sessions
def _check_counts(**counts: int) -> None:
    for name, value in counts.items():
        low = 0 if name == "warmup" else 1
        if not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an integer ≥ {low}, got {value!r}")


def _session_providers(provider: str) -> list[str]:
    """The requested provider first, with CPU behind it for the ops it does not implement."""
    chain = {"cpu": ["cpu"], "cuda": ["cuda", "cpu"], "tensorrt": ["tensorrt", "cuda", "cpu"]}[provider]
    have = set(available_providers())
    return [PROVIDERS[p] for p in chain if p in have]


def _session(model: str, so: Any, providers: list[str]) -> Any:
    try:
        sess = _ort_session.session(model, so, providers)
    except Exception as e:  # ORT raises its own exception types
        text = str(e).strip()
        first = text.splitlines()[0] if text else type(e).__name__
        raise OrtError(f"onnxruntime could not load {model}: {first}") from e
    if providers[0] not in sess.get_providers():
        raise OrtError(f"onnxruntime could not use {providers[0]} for {model} "
                       f"(the session fell back to {', '.join(sess.get_providers())})")
    return sess


def _feeds(source: Graph, binding: Mapping[str, int], given: Mapping[str, np.ndarray] | None,
           seed: int) -> dict[str, np.ndarray]:
    names = [n for n in source.input_names if n not in set(source.initializer_names())]
    given = dict(given or {})
    unknown = sorted(set(given) - set(source.input_names))
    if unknown:
        raise ValueError(f"input {unknown[0]!r} is not an input of the model (its inputs: {', '.join(names)})")
    missing = [n for n in names if n not in given]
    made = make_inputs(source, binding, seed=seed) if missing else {}
    return {n: np.asarray(given[n]) if n in given else made[n] for n in names}


def _time_runs(sess: Any, feeds: Mapping[str, np.ndarray], warmup: int, repeats: int) -> list[float]:
    """Wall seconds of ``repeats`` session runs after ``warmup`` untimed ones.

    A failing run raises :class:`OrtError` with ORT's first line (the session logs nothing itself)."""
    feed = dict(feeds)
    out: list[float] = []
    clock = time.perf_counter
    try:
        with _ort_session.quiet():  # once around the loop: nothing added inside the timed calls
            for _ in range(warmup):
                sess.run(None, feed)
            for _ in range(repeats):
                t0 = clock()
                sess.run(None, feed)
                out.append(clock() - t0)
    except Exception as e:  # ORT raises its own exception types
        text = str(e).strip()
        raise OrtError(f"onnxruntime failed running the model: {text.splitlines()[0] if text else type(e).__name__}"
                       ) from e
    return out


# --------------------------------------------------------------------------- the profile
@dataclass(frozen=True)
class ParsedProfile:
    """Node events grouped by profiled run (warm-up runs dropped)."""

    run_durations: tuple[float, ...]  # seconds, one per profiled run
    order: tuple[str, ...]  # kernel names in first-execution order
    durations: Mapping[str, tuple[float, ...]]  # kernel → seconds per profiled run
    op_type: Mapping[str, str]
    provider: Mapping[str, str]
    warnings: tuple[str, ...]


def parse_profile(events: list[dict[str, Any]], warmup: int) -> ParsedProfile:
    """Group an ORT profile's ``_kernel_time`` Node events by ``model_run`` window; drop ``warmup`` runs."""
    runs = sorted((int(e["ts"]), int(e["dur"])) for e in events
                  if e.get("cat") == "Session" and e.get("name") == "model_run")
    warnings: list[str] = []
    if len(runs) <= warmup:
        return ParsedProfile((), (), {}, {}, {}, (f"the profile has {len(runs)} model_run events, none after "
                                                  f"the {warmup} warm-up runs",))
    kept = runs[warmup:]
    starts = [ts for ts, _ in kept]
    sums: dict[str, list[float]] = {}
    op_type: dict[str, str] = {}
    provider: dict[str, str] = {}
    outside = 0
    nodes = sorted((e for e in events if e.get("cat") == "Node" and str(e.get("name", "")).endswith(KERNEL_SUFFIX)),
                   key=lambda e: int(e["ts"]))
    for e in nodes:
        ts = int(e["ts"])
        if ts < starts[0]:
            continue  # a warm-up run
        i = bisect.bisect_right(starts, ts) - 1
        run_ts, run_dur = kept[i]
        if ts > run_ts + run_dur:
            outside += 1
            continue
        name = str(e["name"])[:-len(KERNEL_SUFFIX)]
        args = e.get("args") or {}
        if name not in sums:
            sums[name] = [0.0] * len(kept)
            op_type[name] = str(args.get("op_name", ""))
            provider[name] = str(args.get("provider", ""))
        sums[name][i] += int(e["dur"]) * US
    if outside:
        warnings.append(f"{outside} kernel event(s) fell outside every model_run window and were dropped")
    return ParsedProfile(tuple(d * US for _, d in kept), tuple(sums), {k: tuple(v) for k, v in sums.items()},
                         op_type, provider, tuple(warnings))


def _kernel_times(parsed: ParsedProfile, optimized: Graph | None, mapping: OrtMapping | None,
                  warnings: list[str]) -> tuple[KernelTime, ...]:
    node_of = _match_nodes(parsed, optimized)
    unit_of = {} if mapping is None else {k.name: i for i, u in enumerate(mapping.units) for k in u.kernels}
    out: list[KernelTime] = []
    unmapped: list[str] = []
    for name in parsed.order:
        node = node_of.get(name)
        unit = None if node is None or mapping is None else unit_of.get(node)
        if unit is None and mapping is not None:
            unmapped.append(name)
        domain = "" if node is None or optimized is None else optimized.node(node).domain
        covers = () if unit is None or mapping is None else mapping.units[unit].covers
        out.append(KernelTime(name, parsed.op_type[name], domain, parsed.provider[name], unit, covers,
                              Timing(parsed.durations[name])))
    if unmapped:
        warnings.append(f"{len(unmapped)} kernel(s) not found in the optimized graph: " + ", ".join(unmapped[:5]))
    return tuple(out)


def _match_nodes(parsed: ParsedProfile, optimized: Graph | None) -> dict[str, str]:
    """Kernel (event) name → optimized-graph node name.

    Named nodes match by name. ORT names an unnamed node's events ``<OpType>_<its internal index>``, which the
    saved file does not record; those take the file's unnamed nodes of the same op type in order.
    """
    if optimized is None:
        return {}
    named = {n.name for n in optimized.nodes() if n.proto.name}
    unnamed: dict[str, list[str]] = {}
    for n in optimized.nodes():
        if not n.proto.name:
            unnamed.setdefault(n.op_type, []).append(n.name)
    out: dict[str, str] = {}
    for name in parsed.order:
        if name in named:
            out[name] = name
        elif unnamed.get(parsed.op_type[name]):
            out[name] = unnamed[parsed.op_type[name]].pop(0)
    return out


def arena_peak(events: list[dict[str, Any]], provider: str) -> tuple[int | None, str, dict[str, int]]:
    """(activation peak bytes, what it is, raw figures) from the arena statistics of ``provider``'s kernels."""
    stats = [e["args"] for e in sorted((e for e in events if e.get("cat") == "Node"), key=lambda e: int(e["ts"]))
             if (e.get("args") or {}).get("provider") == provider and "mem_in_use_peak" in e["args"]]
    if not stats:
        return None, (f"none: {provider}'s kernel events carry no arena statistics (mem_in_use_peak); "
                      "the arena is disabled or the provider does not report it"), {}
    first = stats[0]
    baseline = int(first["mem_bytes_in_use"]) - int(first.get("mem_in_use_delta", 0))
    peak = max(int(a["mem_in_use_peak"]) for a in stats)
    held = max(int(a.get("mem_arena_held", 0)) for a in stats)
    detail = {"mem_in_use_peak": peak, "baseline_bytes_in_use": baseline, "mem_arena_held": held}
    text = (f"ort:mem_in_use_peak − baseline: the {provider} arena's peak bytes in use over the profiled "
            "session's runs minus its bytes in use before the first run (activations, outputs and kernel "
            "scratch, in arena chunks; weights excluded)")
    first_peak = int(first["mem_in_use_peak"])
    if first_peak == peak and first_peak > int(first["mem_bytes_in_use"]):
        text += ("; an upper bound: the peak was already reached when the first kernel ended, possibly during "
                 "session initialization")
    return peak - baseline, text, detail


__all__ = ["KERNEL_SUFFIX", "LEVELS", "PROVIDERS", "KernelTime", "OrtRun", "ParsedProfile", "arena_peak",
           "available_providers", "parse_profile", "run_ort"]
