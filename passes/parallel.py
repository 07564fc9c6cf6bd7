"""Parallel splits of one training step: tensor (Megatron), pipeline and data parallel, ZeRO 1–3.

Devices are laid out TP innermost, then PP, then DP (the Megatron-LM order): a group of ``size`` devices at
``stride`` spans nodes when ``stride × size`` exceeds the cluster's devices per node, and then runs at the
inter-node link; otherwise at the intra-node link. The graph's batch is one data-parallel replica's batch per step.

* **TP = t** (Shoeybi et al. 2019): inside each block, every product (MatMul, Gemm, Conv) is split t ways, its
  FLOPs and bytes ÷ t; other ops are replicated (Megatron also splits softmax/GeLU between the split products:
  this is an upper bound on them). Each residual branch ends in one all-reduce of the block's residual stream
  (s·b·h elements): 2 per transformer block forward, 2 more in backward.
* **PP = p**, **m micro-batches**: blocks are cut into p contiguous stages of ⌈blocks/p⌉; nodes before the
  first block go to stage 0, after the last to stage p−1. Each stage boundary sends its activation forward and
  its gradient backward once per micro-batch (S/m bytes each). The bubble is (p−1)/(m+p−1) of the step
  (GPipe / 1F1B): step = (stage time) × (m+p−1)/m. 1F1B keeps min(p, m) micro-batches' activations on stage 0.
* **DP = n** with ZeRO stage z: optimizer state ÷ n (z ≥ 1), gradients ÷ n (z ≥ 2), parameters ÷ n (z = 3).
  Gradient traffic per device per step, ring algorithm: all-reduce 2(n−1)/n × G (z ≤ 2: a reduce-scatter of G
  plus an all-gather of the updated shard moves the same bytes); z = 3 adds an all-gather of the parameters in
  forward and again in backward: (n−1)/n × (2P + G).

A collective's time is its bytes moved per device ÷ the link's per-direction bandwidth (no latency term).
Overlap assumption: TP all-reduces and PP sends are on the critical path (no overlap); the DP gradient
collective overlaps backward (bucketed), so it adds only what exceeds the backward time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from graphcost.graph import Graph, TensorKind, dtype_bits
from graphcost.hardware.interconnect import Cluster
from graphcost.hardware.spec import HardwareSpec
from graphcost.passes._blocks import Blocks
from graphcost.passes.roofline import kernel_bound
from graphcost.passes.training import TrainingCost, TrainingNode

PRODUCTS = frozenset({"MatMul", "Gemm", "Conv", "ConvTranspose", "Einsum"})
OVERLAP = ("TP all-reduces and PP activation sends are not overlapped with compute (on the critical path)",
           "the DP/ZeRO gradient collective overlaps backward; only the part longer than backward adds to the step",
           "collective time = bytes moved per device / per-direction link bandwidth; no latency term")


def ring_factor(n: int) -> float:
    """Bytes each device sends per byte of an all-reduce over n devices (ring): 2(n−1)/n."""
    return 2 * (n - 1) / n if n > 1 else 0.0


@dataclass(frozen=True)
class ParallelOptions:
    tensor: int = 1
    pipeline: int = 1
    data: int = 1
    micro_batches: int = 1
    zero: int = 0
    optimizer_state_multiplier: float = 2.0

    def __post_init__(self) -> None:
        for key in ("tensor", "pipeline", "data", "micro_batches"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key.replace('_', '-')} must be ≥ 1, got {getattr(self, key)}")
        if self.zero not in (0, 1, 2, 3):
            raise ValueError(f"ZeRO stage must be 0, 1, 2 or 3, got {self.zero}")
        if self.optimizer_state_multiplier < 0:
            raise ValueError("optimizer state multiplier must be ≥ 0")


@dataclass(frozen=True)
class Collective:
    kind: str
    """``all-reduce``, ``send``, ``reduce-scatter+all-gather``..."""
    purpose: str
    count: int
    elements: int
    """Elements of one collective's tensor."""
    bytes: int
    """Bytes of one collective's tensor."""
    moved_bytes: float
    """Bytes each device sends for all ``count`` of them (ring factors applied)."""
    link: str
    time_s: float

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "purpose": self.purpose, "count": self.count, "elements": self.elements,
                "bytes": self.bytes, "moved_bytes": self.moved_bytes, "link": self.link, "time_s": self.time_s}


@dataclass(frozen=True)
class LayerBinding:
    block: str
    compute_time_s: float
    memory_time_s: float
    communication_time_s: float

    @property
    def bound(self) -> str:
        times = {"compute": self.compute_time_s, "memory": self.memory_time_s,
                 "communication": self.communication_time_s}
        return max(times, key=lambda k: times[k])

    def to_dict(self) -> dict[str, Any]:
        return {"block": self.block, "compute_time_s": self.compute_time_s, "memory_time_s": self.memory_time_s,
                "communication_time_s": self.communication_time_s, "bound": self.bound}


@dataclass(frozen=True)
class ParallelResult:
    options: ParallelOptions
    devices: int
    stage_flops: tuple[int | float, ...]
    """Per-device training FLOPs of each pipeline stage (one TP rank)."""
    stage_bytes: tuple[int | float, ...]
    parameters: int
    gradients: int
    optimizer_state: int
    activations: int
    collectives: tuple[Collective, ...]
    bubble: float
    compute_time_s: float
    step_time_s: float
    layers: tuple[LayerBinding, ...]
    cluster: str
    assumptions: tuple[str, ...] = field(default=OVERLAP)

    @property
    def memory_bytes(self) -> int:
        return self.parameters + self.gradients + self.optimizer_state + self.activations

    def communication(self, purpose_prefix: str) -> tuple[Collective, ...]:
        return tuple(c for c in self.collectives if c.purpose.startswith(purpose_prefix))

    def to_dict(self) -> dict[str, Any]:
        o = self.options
        return {
            "tensor_parallel": o.tensor, "pipeline_parallel": o.pipeline, "data_parallel": o.data,
            "micro_batches": o.micro_batches, "zero": o.zero, "devices": self.devices, "cluster": self.cluster,
            "per_device": {"flops": max(self.stage_flops, default=0), "bytes": max(self.stage_bytes, default=0),
                           "stage_flops": list(self.stage_flops), "parameters": self.parameters,
                           "gradients": self.gradients, "optimizer_state": self.optimizer_state,
                           "activations": self.activations, "memory": self.memory_bytes},
            "collectives": [c.to_dict() for c in self.collectives], "bubble": self.bubble,
            "compute_time_s": self.compute_time_s, "step_time_s": self.step_time_s,
            "layers": [x.to_dict() for x in self.layers], "assumptions": list(self.assumptions),
        }


def _spans(cluster: Cluster, stride: int, size: int) -> bool:
    return stride * size > cluster.devices_per_node


def _times(n: TrainingNode, hw: HardwareSpec, split: int) -> tuple[float, float, float]:
    """Compute, memory and bound seconds of one node's forward + backward on one device of ``split``."""
    flops = ((n.forward_flops or 0) + (n.backward_flops or 0)) / split
    moved = ((n.forward_bytes or 0) + (n.backward_bytes or 0)) / split
    k = kernel_bound(flops, moved, hw, dtype=n.dtype, capacity=False)  # per device: every byte at DRAM, on purpose
    return k.compute_s or 0.0, k.memory_s or 0.0, k.time_s or 0.0


def parallel(graph: Graph, cost: TrainingCost, blocks: Blocks, options: ParallelOptions, *,
             hardware: HardwareSpec, cluster: Cluster, parameter_bytes: Mapping[str, int]) -> ParallelResult:
    """Per-device cost and per-step communication of one split; ``parameter_bytes``: name → bytes of each
    parameter (floating ones get gradients and optimizer state)."""
    t, p, d, m = options.tensor, options.pipeline, options.data, options.micro_batches
    order = {n.name: i for i, n in enumerate(cost.nodes)}
    block_of = {name: b for b in blocks.blocks for name in b.nodes}
    if (t > 1 or p > 1) and not blocks.blocks:
        raise ValueError(f"tensor/pipeline parallel needs repeated blocks to split; none found ({blocks.rule})")
    per_stage = math.ceil(len(blocks.blocks) / p) if blocks.blocks else 1
    stage_of_block = {b.label: min(i // per_stage, p - 1) for i, b in enumerate(blocks.blocks)}
    stage = 0
    node_stage: dict[str, int] = {}
    for n in cost.nodes:
        b = block_of.get(n.name)
        if b is not None:
            stage = stage_of_block[b.label]
        node_stage[n.name] = stage
    if blocks.blocks:  # nodes after the last block go to the last stage
        last = max(order[x] for x in blocks.blocks[-1].nodes if x in order)
        for n in cost.nodes[last + 1:]:
            node_stage[n.name] = p - 1
    flops = [0.0] * p
    moved = [0.0] * p
    time = [0.0] * p
    backward = [0.0] * p
    kept: list[dict[str, None]] = [{} for _ in range(p)]
    extra = [0] * p
    layer_time: dict[str, list[float]] = {b.label: [0.0, 0.0] for b in blocks.blocks}
    for n in cost.nodes:
        s = node_stage[n.name]
        split = t if (n.op_type in PRODUCTS and n.name in block_of) else 1
        flops[s] += ((n.forward_flops or 0) + (n.backward_flops or 0)) / split
        moved[s] += ((n.forward_bytes or 0) + (n.backward_bytes or 0)) / split
        c, mem, node_s = _times(n, hardware, split)
        time[s] += node_s
        bshare = (n.backward_flops or 0) / max((n.forward_flops or 0) + (n.backward_flops or 0), 1)
        backward[s] += node_s * bshare
        kept[s].update(dict.fromkeys(n.saved))
        extra[s] += n.extra_saved_bytes
        if n.name in block_of:
            acc = layer_time[block_of[n.name].label]
            acc[0] += c
            acc[1] += mem
    # parameters: each counted once, at its first reader's stage; products' weights inside blocks ÷ t
    params = [0.0] * p
    floating = [0.0] * p
    elements = [0.0] * p
    seen: set[str] = set()
    for n in cost.nodes:
        node = graph.node(n.name)
        split = t if (n.op_type in PRODUCTS and n.name in block_of) else 1
        for x in node.inputs:
            tensor = graph.tensor(x) if x else None
            if tensor is None or tensor.kind != TensorKind.PARAMETER or x in seen:
                continue
            seen.add(x)
            size = parameter_bytes.get(x, 0) / split
            params[node_stage[n.name]] += size
            if tensor.dtype.startswith(("float", "bfloat")):
                floating[node_stage[n.name]] += size
                elements[node_stage[n.name]] += size * 8 / (dtype_bits(tensor.dtype) or 32)
    worst = max(range(p), key=lambda i: (time[i], flops[i]))
    p_dev, f_dev = params[worst], floating[worst]
    grads = f_dev / (d if options.zero >= 2 else 1)
    state = options.optimizer_state_multiplier * f_dev / (d if options.zero >= 1 else 1)
    p_held = p_dev / (d if options.zero >= 3 else 1)
    in_flight = min(p, m) / m if p > 1 else 1.0
    acts = (sum(cost.sizes.get(x, 0) for x in kept[worst]) + extra[worst]) * in_flight

    collectives: list[Collective] = []
    tp_time = [0.0] * p
    per_block_comm: dict[str, float] = {}
    if t > 1:
        link = cluster.link_for(t, spans_nodes=_spans(cluster, 1, t))
        for b in blocks.blocks:
            stream = b.stream
            nbytes = cost.sizes.get(stream, 0) if stream else 0
            count = 2 * b.residual_adds  # forward + backward
            sent = count * ring_factor(t) * nbytes
            per_block_comm[b.label] = sent / link.bandwidth
            tp_time[stage_of_block[b.label]] += sent / link.bandwidth
        total_count = sum(2 * b.residual_adds for b in blocks.blocks)
        first = blocks.blocks[0]
        stream = first.stream
        nbytes = cost.sizes.get(stream, 0) if stream else 0
        sent = total_count * ring_factor(t) * nbytes
        collectives.append(Collective("all-reduce", "TP: one per residual branch, forward and backward",
                                      total_count, _elements(graph, stream, cost), nbytes, sent, link.name,
                                      sent / link.bandwidth))
    pp_time = 0.0
    if p > 1:
        link = cluster.link_for(p, spans_nodes=_spans(cluster, t, p))
        boundaries = [b for i, b in enumerate(blocks.blocks) if i and stage_of_block[b.label]
                      != stage_of_block[blocks.blocks[i - 1].label]]
        for b in boundaries:
            stream = b.stream
            nbytes = (cost.sizes.get(stream, 0) if stream else 0) // m
            sent = 2 * m * nbytes  # activation forward + gradient backward, per micro-batch
            pp_time = max(pp_time, sent / link.bandwidth)  # stages send in parallel: the largest boundary binds
            collectives.append(Collective("send", f"PP: stage boundary before {b.label}, activation + gradient "
                                          "per micro-batch", 2 * m, _elements(graph, stream, cost) // m, nbytes,
                                          sent, link.name, sent / link.bandwidth))
    dp_time = 0.0
    if d > 1:
        link = cluster.link_for(d, spans_nodes=_spans(cluster, t * p, d))
        g = int(f_dev)
        if options.zero == 3:
            sent = (d - 1) / d * (2 * p_dev + g)
            kind = "all-gather ×2 + reduce-scatter"
        else:
            sent = ring_factor(d) * g
            kind = "all-reduce" if options.zero < 2 else "reduce-scatter + all-gather"
        dp_time = sent / link.bandwidth
        collectives.append(Collective(kind, f"DP: gradients (ZeRO {options.zero})", 1, int(elements[worst]),
                                      g, sent, link.name, dp_time))
    bubble = (p - 1) / (m + p - 1)
    pipeline = (time[worst] + tp_time[worst] + pp_time) * (m + p - 1) / m
    step = pipeline + max(0.0, dp_time - backward[worst])
    layers = tuple(LayerBinding(b.label, layer_time[b.label][0], layer_time[b.label][1],
                                per_block_comm.get(b.label, 0.0)) for b in blocks.blocks)
    return ParallelResult(options, t * p * d, tuple(flops), tuple(moved), int(p_held), int(grads), math.ceil(state),
                          int(acts), tuple(collectives), bubble, time[worst], step, layers, cluster.name)


def _elements(graph: Graph, name: str | None, cost: TrainingCost) -> int:
    """Elements of an activation, from its bytes under the binding and its element size."""
    t = graph.tensor(name) if name else None
    bits = dtype_bits(t.dtype) if t is not None else None
    if t is None or not bits or name is None:
        return 0
    return cost.sizes.get(name, 0) * 8 // bits


__all__ = ["OVERLAP", "Collective", "LayerBinding", "ParallelOptions", "ParallelResult", "parallel", "ring_factor"]
