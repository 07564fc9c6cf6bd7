"""Activation checkpointing what-ifs: what each policy keeps, what it recomputes, and what that costs.

A policy cuts the graph into *segments* (sets of nodes). The forward pass keeps only each segment's inputs (the
activations it reads from outside: its checkpoint) plus what nodes outside every segment save; backward reruns one
segment's forward at a time, whose saved tensors then live while that segment's backward runs::

    peak activations  = kept + max over segments (what the segment's nodes save, less what is already kept)
    recompute FLOPs   = Σ forward FLOPs of every segment's nodes (each segment recomputed once, last one included,
                        as torch.utils.checkpoint does)
    peak memory       = parameters + gradients + optimizer state + peak activations

Policies: ``none``; ``blocks`` (the repeated blocks of ``_blocks.find_blocks``); ``every:K`` (runs of K
consecutive nodes in graph order); ``sqrt`` (K = ⌈√n⌉, Chen et al. 2016); ``keep:T1,T2`` (segments cut after
the producers of the named tensors, which are the checkpoints). Transient backward buffers (gradients of
activations in flight) are not counted: the peak is a floor. Time added is the recompute's roofline bound.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from graphcost.graph import Graph
from graphcost.hardware.spec import HardwareSpec
from graphcost.passes._blocks import Blocks, segment_inputs
from graphcost.passes.roofline import kernel_bound
from graphcost.passes.training import TrainingCost, TrainingNode

POLICIES = ("none", "blocks", "every:K", "sqrt", "keep:T1,T2")


@dataclass(frozen=True)
class Policy:
    name: str
    k: int = 0
    tensors: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        if self.name == "every":
            return f"every:{self.k}"
        if self.name == "keep":
            return "keep:" + ",".join(self.tensors)
        return self.name


def parse_policy(text: str) -> Policy:
    """``none``, ``blocks``, ``every:K``, ``sqrt`` or ``keep:T1,T2``; ValueError naming the problem."""
    name, _, arg = text.strip().partition(":")
    if name in ("none", "blocks", "sqrt") and not arg:
        return Policy(name)
    if name == "every":
        if not arg.isdigit() or int(arg) < 1:
            raise ValueError(f"checkpoint policy {text!r}: every:K needs a whole number K ≥ 1")
        return Policy("every", int(arg))
    if name == "keep":
        tensors = tuple(t.strip() for t in arg.split(",") if t.strip())
        if not tensors:
            raise ValueError(f"checkpoint policy {text!r}: keep: needs tensor names, e.g. keep:/h.0/Add_1_output_0")
        return Policy("keep", tensors=tensors)
    raise ValueError(f"unknown checkpoint policy {text!r} (expected one of {', '.join(POLICIES)})")


@dataclass(frozen=True)
class CheckpointResult:
    policy: str
    segments: int
    kept_bytes: int
    recompute_peak_bytes: int
    """The largest segment's recomputed saves, live during its backward."""
    peak_activation_bytes: int
    peak_memory_bytes: int
    recompute_flops: int | float
    time_added_s: float | None
    step_time_s: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"policy": self.policy, "segments": self.segments, "kept_bytes": self.kept_bytes,
                "recompute_peak_bytes": self.recompute_peak_bytes,
                "peak_activation_bytes": self.peak_activation_bytes, "peak_memory_bytes": self.peak_memory_bytes,
                "recompute_flops": self.recompute_flops, "time_added_s": self.time_added_s,
                "step_time_s": self.step_time_s}


def segments_for(policy: Policy, graph: Graph, cost: TrainingCost, blocks: Blocks) -> list[set[str]]:
    names = [n.name for n in cost.nodes]
    if policy.name == "none":
        return []
    if policy.name == "blocks":
        if not blocks.blocks:
            raise ValueError(f"checkpoint policy 'blocks': no repeated blocks found ({blocks.rule})")
        return [set(b.nodes) for b in blocks.blocks]
    if policy.name in ("every", "sqrt"):
        k = policy.k if policy.name == "every" else max(1, math.ceil(math.sqrt(len(names))))
        return [set(names[i:i + k]) for i in range(0, len(names), k)]
    index = {n: i for i, n in enumerate(names)}
    cuts = []
    for t in policy.tensors:
        producer = graph.producer(t)
        if graph.tensor(t) is None or producer is None or producer.name not in index:
            raise ValueError(f"checkpoint policy keep: {t!r} is not an activation produced by a top-level node")
        cuts.append(index[producer.name] + 1)
    bounds = [0, *sorted(set(cuts)), len(names)]
    return [set(names[a:b]) for a, b in itertools.pairwise(bounds) if b > a]


def _forward_time(n: TrainingNode, hw: HardwareSpec | None) -> float:
    if hw is None:
        return 0.0
    # every byte at DRAM bandwidth, as the training step's own estimate (passes/training.py) charges it
    return kernel_bound(n.forward_flops or 0, n.forward_bytes or 0, hw, dtype=n.dtype, capacity=False).time_s


def checkpoint(policy: Policy, graph: Graph, cost: TrainingCost, blocks: Blocks, *, state_bytes: int = 0,
               hardware: HardwareSpec | None = None) -> CheckpointResult:
    """One policy's memory and recompute; ``state_bytes`` = parameters + gradients + optimizer state."""
    segments = segments_for(policy, graph, cost, blocks)
    where = {n: i for i, seg in enumerate(segments) for n in seg}
    sizes = cost.sizes

    def size(name: str) -> int:
        return sizes.get(name, 0)

    kept: dict[str, None] = {}
    extra = 0
    for n in cost.nodes:
        if n.name not in where:
            kept.update(dict.fromkeys(n.saved))
            extra += n.extra_saved_bytes
    for seg in segments:
        kept.update(dict.fromkeys(segment_inputs(graph, seg)))
    kept_bytes = sum(size(s) for s in kept) + extra
    inside = [0] * len(segments)
    seen: list[set[str]] = [set() for _ in segments]
    flops: int | float = 0
    added = 0.0
    for n in cost.nodes:
        i = where.get(n.name)
        if i is None:
            continue
        flops += n.forward_flops or 0
        added += _forward_time(n, hardware)
        inside[i] += n.extra_saved_bytes
        for s in n.saved:
            if s not in kept and s not in seen[i]:
                seen[i].add(s)
                inside[i] += size(s)
    recompute_peak = max(inside, default=0)
    peak = kept_bytes + recompute_peak
    step = None if cost.bound is None else cost.bound.step_time_s + added
    return CheckpointResult(policy.label, len(segments), kept_bytes, recompute_peak, peak, state_bytes + peak,
                            flops, None if hardware is None else added, step)


def tradeoff(policies: Sequence[Policy], graph: Graph, cost: TrainingCost, blocks: Blocks, *,
             state_bytes: int = 0, hardware: HardwareSpec | None = None) -> tuple[CheckpointResult, ...]:
    """The memory/time trade-off table: one row per policy that applies (``blocks`` is left out when none exist)."""
    rows = []
    for p in policies:
        if p.name == "blocks" and not blocks.blocks:
            continue
        rows.append(checkpoint(p, graph, cost, blocks, state_bytes=state_bytes, hardware=hardware))
    return tuple(rows)


__all__ = ["POLICIES", "CheckpointResult", "Policy", "checkpoint", "parse_policy", "segments_for", "tradeoff"]
