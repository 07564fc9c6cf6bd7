"""Repeated blocks of a graph (transformer layers, residual stages): the unit checkpointing and TP/PP split.

Two rules, the first that finds at least two blocks wins:

1. **Name prefixes.** Exporters name nodes after the module path: ``/h.3/attn/MatMul`` (GPT-2),
   ``/model/layers.3/mlp/...`` (Llama), ``/encoder/layer.3/...`` (BERT), ``blocks_3``. A node belongs to block
   ``(family, i)`` when its name has a segment ``FAMILY.i`` / ``FAMILY_i`` / ``FAMILY/i`` with FAMILY one of
   ``h``, ``layer``, ``layers``, ``block``, ``blocks`` (:data:`PREFIX`). The family with the most indices wins.
2. **Repeated op-type sequences between residual adds.** A *residual add* is an ``Add`` of two activations one of
   which is read by another node too (the skip). Cutting graph order after each residual add gives segments; the
   shortest period p (in segments) whose op-type sequence repeats the most times, contiguously, makes blocks of p
   segments (p = 2 for a pre-norm transformer layer: attention, then MLP)::

       x ─┬─ LN ─ attn ─ Add ─┬─ LN ─ MLP ─ Add ─┬─ ...     segments:  [LN attn Add] [LN MLP Add] [LN attn Add] ...
          └──────────────────┘└─────────────────┘                      \\_______ block 0 _______/ \\_ block 1 ...

Nodes outside every block (embeddings, the head) stay unassigned.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from graphcost.graph import Graph, Node
from graphcost.passes.training import is_activation, storage

PREFIX = re.compile(r"(?:^|[/.])(h|layers?|blocks?)[._/](\d+)(?=[/._]|$)")
MAX_SEGMENTS = 4096
"""The period search is quadratic in segments; past this many the residual rule gives up (and says so)."""


@dataclass(frozen=True)
class Block:
    label: str
    nodes: tuple[str, ...]
    """Node names, in graph order."""
    inputs: tuple[str, ...]
    """Storage names of the activations the block reads that it does not produce (its checkpoint)."""
    residual_adds: int
    """Residual adds inside the block: one Megatron tensor-parallel all-reduce each in the forward."""
    stream: str | None = None
    """The residual stream entering the block (the input a residual add reads), else its first input."""


@dataclass(frozen=True)
class Blocks:
    blocks: tuple[Block, ...]
    rule: str
    """``name prefix 'h'``, ``residual period 2`` or ``none: REASON``."""


def residual_adds(graph: Graph) -> set[str]:
    out = set()
    for node in graph.nodes():
        if node.op_type != "Add" or len(node.inputs) != 2 or not all(is_activation(graph, x) for x in node.inputs):
            continue
        if any(len(graph.consumers(x)) >= 2 for x in node.inputs):
            out.add(node.name)
    return out


def segment_inputs(graph: Graph, names: set[str]) -> tuple[str, ...]:
    """Storage names of activations read by nodes in ``names`` and produced outside them (graph inputs too)."""
    produced = {o for n in names for o in graph.node(n).outputs}
    out: dict[str, None] = {}
    for n in sorted(names, key=lambda x: graph.node(x).index):
        for x in graph.node(n).inputs:
            if not x or x in produced or not is_activation(graph, x):
                continue
            root = storage(graph, x)
            producer = graph.producer(root)
            if producer is not None and producer.name in names:
                continue
            out[root] = None
    return tuple(out)


def _block(graph: Graph, label: str, nodes: list[Node], adds: set[str]) -> Block:
    names = [n.name for n in nodes]
    inputs = segment_inputs(graph, set(names))
    read_by_adds = {storage(graph, x) for n in nodes if n.name in adds for x in n.inputs}
    stream = next((x for x in inputs if x in read_by_adds), inputs[0] if inputs else None)
    return Block(label, tuple(names), inputs, sum(1 for n in names if n in adds), stream)


def find_blocks(graph: Graph) -> Blocks:
    nodes = list(graph.nodes())
    adds = residual_adds(graph)
    groups: dict[str, dict[int, list[Node]]] = defaultdict(lambda: defaultdict(list))
    for node in nodes:
        m = PREFIX.search(node.name)
        if m is not None:
            groups[m.group(1)][int(m.group(2))].append(node)
    if groups:
        family = max(groups, key=lambda f: (len(groups[f]), sum(map(len, groups[f].values()))))
        if len(groups[family]) >= 2:
            found = tuple(_block(graph, f"{family}.{i}", groups[family][i], adds) for i in sorted(groups[family]))
            return Blocks(found, f"name prefix {family!r}")
    return _by_residual(graph, nodes, adds)


def _by_residual(graph: Graph, nodes: list[Node], adds: set[str]) -> Blocks:
    segments: list[list[Node]] = [[]]
    for node in nodes:
        segments[-1].append(node)
        if node.name in adds:
            segments.append([])
    segments = [s for s in segments if s]
    if len(segments) > MAX_SEGMENTS:
        return Blocks((), f"none: {len(segments)} residual segments, more than {MAX_SEGMENTS} searched")
    sigs = [tuple(n.op_type for n in s) for s in segments]
    best: tuple[int, int, int] | None = None  # (covered segments, -period, start)
    for p in range(1, len(sigs) // 2 + 1):
        for start in range(len(sigs) - 2 * p + 1):
            k = 1
            while sigs[start + k * p:start + (k + 1) * p] == sigs[start:start + p]:
                k += 1
            if k >= 2:
                cand = (k * p, -p, start)
                if best is None or cand > best:
                    best = cand
    if best is None:
        return Blocks((), "none: no name prefix and no repeated sequence between residual adds")
    covered, neg_p, start = best
    p = -neg_p
    found = []
    for i in range(covered // p):
        chunk = [n for s in segments[start + i * p:start + (i + 1) * p] for n in s]
        found.append(_block(graph, f"block.{i}", chunk, adds))
    return Blocks(tuple(found), f"residual period {p}")


__all__ = ["Block", "Blocks", "find_blocks", "residual_adds", "segment_inputs"]
