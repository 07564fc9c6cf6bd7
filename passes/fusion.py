"""Fusion groups: which nodes one kernel could compute together, the bytes that saves, and why not more.

``fuse(graph, costs, policy)`` partitions the top-level nodes into groups under a policy
(``passes/_fusion_policy.py`` draws what the default ``IDEAL`` matches). The algorithm is TVM FuseOps'
idea with merged groups in a dynamic topological order (``passes/_fusion_groups.py`` keeps it linear in
the graph):

* first every compute anchor takes its epilogue, the latest anchor first (a residual block's Add joins
  its main-path conv, not the shortcut conv the exporter wrote earlier), then every producer in graph
  order; for each output tensor, the producer's group tries to join the groups of *all* the tensor's
  data consumers at once (views are looked through). A tensor either stays inside one kernel or is
  written once and read back: no half-fused fan-out, no recompute;
* if some path leaves the proposed group and re-enters it (``a → x → b`` while joining ``a`` and ``b``),
  the groups on those paths must join too (a diamond fuses whole) or the merge is refused: a kernel
  cannot wait for one of its own outputs;
* a refused merge records one :class:`Boundary` per producer→consumer edge, with a code from the fixed
  vocabulary (:class:`Code`) and a sentence naming the nodes; fan-out edges whose own merge would have
  been legal say ``multi_consumer`` and name the consumer that broke it.

Byte accounting (the counting conventions' "each distinct input once, each output once", per group):

* ``bytes_unfused``: Σ of the group's nodes' bytes from the costs pass;
* ``bytes_fused``: the group's crossing, the one set-traffic convention of ``passes/_storage.py``
  (each storage read from outside once, each tensor read outside or a graph output written once;
  views and free ops move nothing), which the gap report's set bounds use too.

The wing, one concept a file: ``_fusion_roles.py`` (what each node is), ``_fusion_policy.py`` (policies,
codes, refusals; draws what fuses), ``_fusion_legality.py`` (the merge check from group summaries),
``_fusion_groups.py`` (the grouping), ``_fusion_order.py`` (the groups' topological order), ``_storage.py``
(storages and set traffic), ``_fusion_rows.py`` (the group rows), ``_fusion_section.py`` (numbers on a device).

Control-flow nodes (If/Loop/Scan) are one opaque group each, fused = unfused; their body nodes are
not grouped (``group_of`` a body node is its control node's group).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from graphcost._dims import Dim
from graphcost._gc import paused as gc_paused
from graphcost.graph import Graph, Node
from graphcost.passes._fusion_groups import Fuser
from graphcost.passes._fusion_policy import (
    CAPABILITIES,
    CODE_TEXT,
    IDEAL,
    NONE,
    POLICIES,
    Candidate,
    Code,
    NodeInfo,
    Policy,
    Predicate,
    Refusal,
    Role,
    classify_all,
    max_nodes,
    same_compute_dtype,
)
from graphcost.passes._fusion_rows import group_rows
from graphcost.passes._fusion_section import (
    FusionSection,
    FusionTotals,
    GroupNumbers,
    fusion_section,
    node_time,
)
from graphcost.passes._storage import Crossing, Storage, data_reads, data_reads_all, sum_dims  # noqa: F401  (data_reads: kept importable here)
from graphcost.passes.costs import CostResult, NodeCost

_FREE = Role.FREE


@dataclass(frozen=True)
class Boundary:
    """An unfused producer→consumer edge: ``tensor`` is written by ``producer`` and read back by ``consumer``."""

    __slots__ = ("code", "consumer", "producer", "reason", "tensor")  # as NodeInfo's (passes/_fusion_roles.py)

    producer: str
    consumer: str
    tensor: str
    reason: str
    code: str

    def to_dict(self) -> dict[str, str]:
        return {"producer": self.producer, "consumer": self.consumer, "tensor": self.tensor,
                "reason": self.reason, "code": self.code}


@dataclass(frozen=True, slots=True)
class FusionGroup:
    """One kernel's worth of nodes. Counts are exact (sympy where dims are symbolic); None when unknown.

    Slotted, as :class:`Boundary`, ``GroupNumbers`` and ``NodeInfo``: one per group, ~104 B against ~330 B with
    a ``__dict__`` (synthetic-100k: 70k groups)."""

    id: str
    nodes: tuple[str, ...]
    anchor: str | None
    dtype: str
    flops: Dim | None
    bytes_unfused: Dim | None
    bytes_fused: Dim | None
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    opaque: bool = False  # a control-flow or non-fusable node alone
    parts: tuple[tuple[str, Dim], ...] = ()
    """The inputs the group reads only in part (a Gather's rows, a Slice's window), with the bytes it reads of
    each (``passes/_storage.py``); every other input is read whole."""


@dataclass(frozen=True)
class FusionResult:
    """Groups in graph order, the boundaries between them, and the questions a compiler engineer asks."""

    policy: str
    groups: tuple[FusionGroup, ...]
    boundaries: tuple[Boundary, ...]
    graph: Graph = field(repr=False, compare=False)
    costs: Mapping[str, NodeCost] = field(repr=False, compare=False)
    infos: Mapping[str, NodeInfo] = field(repr=False, compare=False)
    index: Mapping[str, int] = field(repr=False, compare=False)  # node → position in groups
    storage: Storage = field(repr=False, compare=False)

    def group_of(self, node: str) -> FusionGroup:
        """The group holding ``node`` (a body node of If/Loop/Scan: its control node's group)."""
        try:
            return self.groups[self.index[node]]
        except KeyError:
            raise KeyError(f"no node named {node!r} in the graph") from None

    def why_not_fused(self, producer: str, consumer: str) -> str | None:
        """None when both nodes share a group; else the boundary's reason, or why there is no edge to fuse."""
        gp, gc = self.group_of(producer), self.group_of(consumer)
        for n in (producer, consumer):
            c = self.costs.get(n)
            if c is not None and c.depth > 0:
                return (f"{n} is inside the body of {c.parent}; body nodes are not grouped (the control node "
                        f"is one opaque group, {self.group_of(n).id})")
        if gp is gc:
            return None
        adjacent, boundary = self._path(producer, consumer)
        if boundary is not None:
            return boundary.reason
        for n in (producer, consumer):
            if adjacent and self.infos[n].role is Role.FREE:
                return f"{n} ({self.infos[n].op_type}) runs no kernel: no data crosses this edge"
        if adjacent:
            return f"{producer} and {consumer} are in groups {gp.id} and {gc.id}"  # not reached: edges get reasons
        if self._path(consumer, producer)[0]:
            return (f"{producer} and {consumer} are not adjacent: {consumer} feeds {producer}, not the other way "
                    f"(ask why_not_fused({consumer!r}, {producer!r}))")
        return (f"{producer} and {consumer} are not adjacent (no tensor of {producer} is read by {consumer}); "
                f"they are in groups {gp.id} and {gc.id}")

    def _path(self, producer: str, consumer: str) -> tuple[bool, Boundary | None]:
        """Whether ``consumer`` reads an output of ``producer`` (through views), and the first boundary on the way."""
        by_edge = {(b.producer, b.consumer): b for b in reversed(self.boundaries)}
        stack: list[tuple[str, Boundary | None]] = [(producer, None)]
        seen = {producer}
        while stack:
            node, first = stack.pop()
            for t in self.graph.node(node).outputs:
                for c in self.graph.consumers(t) if t else ():
                    hit = first or by_edge.get((node, c.name))
                    if c.name == consumer:
                        return True, hit
                    if c.name not in seen and self.infos[c.name].role is Role.VIEW and c.inputs[0] == t:
                        seen.add(c.name)
                        stack.append((c.name, hit))
        return False, None

    def crossing(self, members: Collection[str], runs: Callable[[str], bool] | None = None) -> Crossing:
        """The tensors crossing the border of ``members`` (any set of top-level nodes: a group, an ORT kernel).

        ``runs(node)`` says whether a node outside executes; only reads by executing nodes make an output
        escape (None: every node executes).
        """
        return self.storage.crossing(set(members), runs)


# --------------------------------------------------------------------------- the grouping
def fuse(graph: Graph, costs: CostResult, policy: Policy | str | None = None) -> FusionResult:
    """Partition the top-level nodes of ``graph`` into fusion groups under ``policy`` (default IDEAL)."""
    with gc_paused():  # a few objects per node, freed by reference counting (graphcost/_gc.py)
        return _fuse(graph, costs, _policy(policy))


def _fuse(graph: Graph, costs: CostResult, pol: Policy) -> FusionResult:
    nodes = list(graph.nodes())
    producers = {t: i for i, n in enumerate(nodes) for t in n.outputs if t}  # tensor → its writer's index
    order = _order(graph, nodes, producers)
    in_order = len(order) == len(nodes) and all(a == b.name for a, b in zip(order, nodes, strict=True))
    at = nodes
    if not in_order:  # the grouping's positions are in ``order``
        at_pos = {n: i for i, n in enumerate(order)}
        producers = {t: at_pos[nodes[i].name] for t, i in producers.items()}
        at = [graph.node(n) for n in order]
    infos = classify_all(graph, nodes)
    reads = data_reads_all(graph, nodes, infos)
    if in_order and len(infos) == len(reads) == len(order):  # both list the nodes in graph order: no look-ups
        info_at, reads_at = list(infos.values()), list(reads.values())
    else:
        info_at, reads_at = [infos[n] for n in order], [reads[n] for n in order]
    fuser = Fuser(graph, infos, reads_at, pol, order, producers, at, info_at)
    fuser.run()
    pos, grp, refused = fuser.pos, fuser.grp, fuser.boundaries
    del fuser  # its tables (summaries, edges, readers) go before the rows are built: a lower peak (Storage.release)
    for i in range(len(order) - 1, -1, -1):  # free ops (Constant, Shape) join their first consumer's group
        if grp[i] < 0:
            readers = sorted({pos[c.name] for t in at[i].outputs if t for c in graph.consumers(t)})
            grp[i] = next((grp[r] for r in readers if grp[r] >= 0), i)
    # the groups in order of each one's first node in graph order, as they are listed; members in graph order
    lists: list[list[int]] = []
    slot = [-1] * len(order)  # label → its group's index in ``lists``
    group_at = [-1] * len(order)  # position → its group's index
    for i in (range(len(order)) if in_order else [pos[n.name] for n in nodes]):
        label = grp[i]
        k = slot[label]
        if k < 0:
            k = slot[label] = len(lists)
            lists.append([i])
        else:
            lists[k].append(i)
        group_at[i] = k
    node_costs = {c.name: c for c in costs.nodes}
    storage = Storage(graph, infos, reads, order, pos, (at, info_at, reads_at), costs.nodes)
    cost_at: list[NodeCost | None] = [c for c in costs.nodes if c.depth == 0]  # listed in graph order
    if not (in_order and len(cost_at) == len(order)
            and all(c is not None and c.name == n for c, n in zip(cost_at, order, strict=True))):
        cost_at = [node_costs.get(n) for n in order]
    groups = group_rows(lists, order, info_at, cost_at, at, reads_at, storage, FusionGroup, in_order)
    index: dict[str, int] = dict(zip(order, group_at, strict=True))
    for c in costs.nodes:  # body nodes: their top-level ancestor's group
        if c.depth > 0:
            top = c.parent
            while top is not None and top not in index:
                top = node_costs[top].parent if top in node_costs else None
            if top is not None:
                index[c.name] = index[top]
    size = len(order)
    storage.release()  # what only a crossing query reads: built again on the first one
    rows = [b for b in refused if group_at[b[0]] != group_at[b[1]]]
    rows.sort(key=lambda b: b[0] * size + b[1])  # by (producer, consumer) position, stable
    boundaries = tuple(Boundary(order[p], order[c], t, reason, code) for p, c, t, reason, code in rows)
    return FusionResult(pol.name, tuple(groups), boundaries, graph, MappingProxyType(node_costs),
                        MappingProxyType(infos), MappingProxyType(index), storage)


def _order(graph: Graph, nodes: list[Node], producers: Mapping[str, int] | None = None) -> list[str]:
    """File order when it is topological (ONNX requires it; it keeps the exporter's main path first), else a sort.

    ``producers``: tensor → the index in ``nodes`` of the node writing it, when the caller has it."""
    if producers is None:
        producers = {t: i for i, n in enumerate(nodes) for t in n.outputs if t}
    for i, n in enumerate(nodes):
        for t in n.inputs:
            if t:
                p = producers.get(t)
                if p is not None and p >= i:  # read before (or by the node that) it is written
                    return graph.topological_order()
    return [n.name for n in nodes]


def _policy(policy: Policy | str | None) -> Policy:
    if policy is None:
        return IDEAL
    if isinstance(policy, Policy):
        return policy
    if policy in POLICIES:
        return POLICIES[policy]
    raise ValueError(f"unknown fusion policy {policy!r} (named policies: {', '.join(POLICIES)})")


__all__ = [
    "CAPABILITIES",
    "CODE_TEXT",
    "IDEAL",
    "NONE",
    "Boundary",
    "Candidate",
    "Code",
    "Crossing",
    "FusionGroup",
    "FusionResult",
    "FusionSection",
    "FusionTotals",
    "GroupNumbers",
    "Policy",
    "Predicate",
    "Refusal",
    "Role",
    "fuse",
    "fusion_section",
    "max_nodes",
    "node_time",
    "same_compute_dtype",
    "sum_dims",
]
