"""Fusion groups: which nodes one kernel could compute together, the bytes that saves, and why not more.

``fuse(graph, costs, policy)`` partitions the top-level nodes into groups under a policy
(``passes/_fusion_policy.py`` draws what the default ``IDEAL`` matches). The algorithm is TVM FuseOps'
idea with union-find and a dynamic topological order of the groups:

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
* ``bytes_fused``: each distinct storage read from outside the group once (initializers are inputs; a
  view and its input are one storage), plus each tensor the group produces that is read by another
  group or is a graph output, once. Views and free ops (Constant, Shape) move nothing.

Control-flow nodes (If/Loop/Scan) are one opaque group each, fused = unfused; their body nodes are
not grouped (``group_of`` a body node is its control node's group).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from graphcost._dims import Dim, evaluate, simplify_dim
from graphcost._sym import sympy
from graphcost.graph import Graph, Node
from graphcost.hardware.spec import HardwareSpec
from graphcost.ops import lookup
from graphcost.passes._fusion_policy import (
    CAPABILITIES,
    CODE_TEXT,
    IDEAL,
    NON_FUSABLE,
    NONE,
    POLICIES,
    Candidate,
    Code,
    NodeInfo,
    Policy,
    Predicate,
    Refusal,
    Role,
    check,
    classify,
    max_nodes,
    non_fusable_refusal,
    same_compute_dtype,
)
from graphcost.passes.costs import CostResult, NodeCost, tensor_bytes

Number = int | float


@dataclass(frozen=True)
class Boundary:
    """An unfused producer→consumer edge: ``tensor`` is written by ``producer`` and read back by ``consumer``."""

    producer: str
    consumer: str
    tensor: str
    reason: str
    code: str

    def to_dict(self) -> dict[str, str]:
        return {"producer": self.producer, "consumer": self.consumer, "tensor": self.tensor,
                "reason": self.reason, "code": self.code}


@dataclass(frozen=True)
class FusionGroup:
    """One kernel's worth of nodes. Counts are exact (sympy where dims are symbolic); None when unknown."""

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


@dataclass(frozen=True)
class Crossing:
    """Tensors crossing a set of nodes' border: (tensor, node that reads or writes it, bytes) once each."""

    reads: tuple[tuple[str, str, Dim | None], ...]
    writes: tuple[tuple[str, str, Dim | None], ...]

    @property
    def bytes(self) -> Dim | None:
        return sum_dims(b for _, _, b in (*self.reads, *self.writes))


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
    storage: _Storage = field(repr=False, compare=False)

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


# --------------------------------------------------------------------------- storage accounting
class _Storage:
    """Aliases (views share their input's storage), data readers of each storage, graph-output storages."""

    def __init__(self, graph: Graph, infos: Mapping[str, NodeInfo], reads: Mapping[str, tuple[str, ...]],
                 order: list[str]) -> None:
        self.graph = graph
        self.infos = infos
        self.reads = reads
        self.pos = {n: i for i, n in enumerate(order)}
        self.base: dict[str, str] = {}
        self.readers: dict[str, list[str]] = {}
        self.producer: dict[str, str] = {}  # storage → the kernel node that writes it
        for n in order:
            node = graph.node(n)
            info = infos[n]
            if info.role is Role.VIEW and node.inputs and node.inputs[0] and node.outputs:
                self.base[node.outputs[0]] = self.base_of(node.inputs[0])
            if info.kernel:
                for t in reads[n]:
                    self.readers.setdefault(self.base_of(t), []).append(n)
                for t in node.outputs:
                    if t:
                        self.producer[t] = n
        self.output_storages = {self.base_of(t) for t in graph.output_names}

    def base_of(self, tensor: str) -> str:
        return self.base.get(tensor, tensor)

    def crossing(self, members: set[str], runs: Callable[[str], bool] | None) -> Crossing:
        reads: dict[str, tuple[str, str, Dim | None]] = {}
        writes: dict[str, tuple[str, str, Dim | None]] = {}
        for n in sorted(members, key=lambda x: self.pos.get(x, -1)):
            info = self.infos.get(n)
            if info is None or not info.kernel:
                continue
            node = self.graph.node(n)
            for t in self.reads[n]:
                b = self.base_of(t)
                if b not in reads and self.producer.get(b) not in members:
                    reads[b] = (t, n, tensor_bytes(self.graph.tensor(t)))
            for t in node.outputs:
                if not t or t in writes:
                    continue
                outside = (r for r in self.readers.get(t, ()) if r not in members)
                if t in self.output_storages or any(runs is None or runs(r) for r in outside):
                    writes[t] = (t, n, tensor_bytes(self.graph.tensor(t)))
        return Crossing(tuple(reads.values()), tuple(writes.values()))


def data_reads(graph: Graph, node: Node, info: NodeInfo) -> tuple[str, ...]:
    """The distinct tensors whose data the node reads: not Shape's input, not omitted ones; for If/Loop/Scan
    also the outer-scope values their bodies read."""
    if info.role is Role.FREE:
        return ()
    entry = lookup(node.domain, node.op_type)
    free = entry.free_inputs if entry is not None else frozenset()
    out = [t for i, t in enumerate(node.inputs) if t and i not in free]
    if info.role is Role.CONTROL:
        out += [t for t in _captured(graph, node) if graph.tensor(t) is not None]
    return tuple(dict.fromkeys(out))


def _captured(graph: Graph, node: Node) -> list[str]:
    names: list[str] = []
    for _, child in graph.children(node.name):
        inner = set(child.input_names) | set(child.initializer_names()) | \
            {t for n in child.nodes() for t in n.outputs}
        for n in child.nodes():
            names += [t for t in (*n.inputs, *_captured(child, n)) if t and t not in inner]
    return names


def sum_dims(values: Iterable[Dim | None]) -> Dim | None:
    """Σ of counts, exact (ints stay ints); None when any is unknown."""
    ints = 0
    terms: list[Any] = []
    for v in values:
        if v is None:
            return None
        if isinstance(v, int):
            ints += v
        else:
            terms.append(v)
    return ints if not terms else simplify_dim(sympy.Add(ints, *terms))


# --------------------------------------------------------------------------- the grouping
class _Fuser:
    def __init__(self, graph: Graph, infos: Mapping[str, NodeInfo], reads: Mapping[str, tuple[str, ...]],
                 policy: Policy, order: list[str]) -> None:
        self.graph, self.infos, self.policy = graph, infos, policy
        self.outputs = set(graph.output_names)
        self.pos = {n: i for i, n in enumerate(order)}
        self.topo = [n for n in order if infos[n].role is not Role.FREE]
        self.succ: dict[str, list[str]] = {n: [] for n in self.topo}
        self.pred: dict[str, list[str]] = {n: [] for n in self.topo}
        self.readers: dict[str, list[str]] = {}
        for n in self.topo:
            for t in reads[n]:
                if n not in self.readers.setdefault(t, []):
                    self.readers[t].append(n)
                p = graph.producer(t)
                if p is not None and p.name in self.succ and infos[p.name].role is not Role.FREE:
                    self.succ[p.name].append(n)
                    self.pred[n].append(p.name)
        self.parent = {n: n for n in self.topo}
        self.members: dict[str, list[str]] = {n: [n] for n in self.topo}
        self.order: list[str | None] = list(self.topo)
        self.ord = {n: i for i, n in enumerate(self.topo)}
        self.boundaries: dict[tuple[str, str, str], Boundary] = {}
        self.recording = True

    def find(self, n: str) -> str:
        root = n
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[n] != root:
            self.parent[n], n = root, self.parent[n]
        return root

    def _groups_next(self, g: str, edges: Mapping[str, list[str]]) -> set[str]:
        return {self.find(s) for m in self.members[g] for s in edges[m]} - {g}

    def _between(self, roots: set[str]) -> set[str]:
        """Groups on a path that leaves ``roots`` and comes back: they must join too, or the merge is a cycle."""
        lo, hi = min(self.ord[r] for r in roots), max(self.ord[r] for r in roots)
        if hi - lo < len(roots):
            return set()
        back: set[str] = set()
        stack = [p for r in roots for p in self._groups_next(r, self.pred) if p not in roots and self.ord[p] > lo]
        while stack:
            g = stack.pop()
            if g not in back:
                back.add(g)
                stack.extend(p for p in self._groups_next(g, self.pred) if p not in roots and self.ord[p] > lo)
        if not back:
            return set()
        fwd: set[str] = set()
        stack = [s for r in roots for s in self._groups_next(r, self.succ) if s in back]
        while stack:
            g = stack.pop()
            if g not in fwd:
                fwd.add(g)
                stack.extend(s for s in self._groups_next(g, self.succ) if s in back)
        return fwd

    def _merge(self, roots: set[str]) -> None:
        ranked = sorted(roots, key=self.ord.__getitem__)
        new, lo, hi = ranked[0], self.ord[ranked[0]], self.ord[ranked[-1]]
        for r in ranked[1:]:
            self.parent[r] = new
            self.members[new].extend(self.members.pop(r))
        # Keep the group order topological: within the window, the new group's descendants move after it.
        window = [g for g in self.order[lo:hi + 1] if g is not None and g not in roots]
        desc: set[str] = set()
        stack = [s for s in self._groups_next(new, self.succ) if self.ord[s] <= hi]
        while stack:
            g = stack.pop()
            if g not in desc:
                desc.add(g)
                stack.extend(s for s in self._groups_next(g, self.succ) if self.ord[s] <= hi)
        seq = [g for g in window if g not in desc] + [new] + [g for g in window if g in desc]
        self.order[lo:hi + 1] = seq + [None] * (hi - lo + 1 - len(seq))
        for i, g in enumerate(seq):
            self.ord[g] = lo + i

    def _candidate(self, nodes: Iterable[str], producer: str, consumer: str, tensor: str) -> Candidate:
        return Candidate(producer, consumer, tensor, tuple(sorted(nodes, key=self.pos.__getitem__)),
                         self.infos, self.graph)

    def _try(self, roots: set[str], producer: str, consumer: str, tensor: str, merge: bool) -> Refusal | None:
        nodes = [m for r in roots for m in self.members[r]]
        refusal = check(self._candidate(nodes, producer, consumer, tensor), self.policy)
        if refusal is not None:
            return refusal
        between = self._between(roots)
        if between:
            extra = sorted((m for g in between for m in self.members[g]), key=self.pos.__getitem__)
            inner = check(self._candidate([*nodes, *extra], producer, consumer, tensor), self.policy)
            if inner is not None:
                shown = ", ".join(extra[:3]) + (f" and {len(extra) - 3} more" if len(extra) > 3 else "")
                return Refusal(Code.WOULD_CREATE_CYCLE.value,
                               f"would create a cycle: joining {consumer} to {producer}'s group also needs the "
                               f"{len(extra)} op(s) on the paths between them ({shown}), and then {inner.reason}")
            roots = roots | between
        if merge:
            self._merge(roots)
        return None

    def _closure(self, consumer: str, tensor: str) -> list[str]:
        """The consumer and, when it is a view of ``tensor``, everything that reads that storage."""
        out, stack = [consumer], [(consumer, tensor)]
        while stack:
            n, t = stack.pop()
            node = self.graph.node(n)
            if self.infos[n].role is not Role.VIEW or not node.inputs or node.inputs[0] != t or not node.outputs:
                continue
            for r in self.readers.get(node.outputs[0], ()):
                if r not in out:
                    out.append(r)
                    stack.append((r, node.outputs[0]))
        return out

    def _record(self, producer: str, consumer: str, tensor: str, refusal: Refusal) -> None:
        if self.recording:
            self.boundaries.setdefault((producer, consumer, tensor),
                                       Boundary(producer, consumer, tensor, refusal.reason, refusal.code))

    def run(self) -> None:
        # Phase 0: every compute anchor takes its epilogue, the latest anchor first (a residual block's Add
        # belongs to its main path, written after the shortcut's conv, as TVM and ORT assign it).
        self.recording = False
        for a in reversed([n for n in self.topo if self.infos[n].role is Role.ANCHOR]):
            heap, done = [(self.pos[a], a)], set()
            while heap:
                _, p = heapq.heappop(heap)
                if p in done or self.find(p) != self.find(a):
                    continue
                done.add(p)
                self._visit_all(p)
                heap.extend((self.pos[m], m) for m in self.members[self.find(a)] if m not in done)
                heapq.heapify(heap)
        # Phase 1: every producer in order; refusals become boundaries.
        self.recording = True
        for name in self.topo:
            self._visit_all(name)

    def _visit_all(self, name: str) -> None:
        for t in self.graph.node(name).outputs:
            direct = self.readers.get(t, []) if t else []
            if direct:
                self._visit(name, self.infos[name], t, direct)

    def _visit(self, name: str, info: NodeInfo, t: str, direct: list[str]) -> None:
        if info.role in NON_FUSABLE or t in self.outputs:
            refusal = non_fusable_refusal(info) if info.role in NON_FUSABLE else Refusal(
                Code.GRAPH_OUTPUT.value, f"{t} is a graph output and must be written to memory")
            for c in direct:
                self._record(name, c, t, refusal)
            return
        closures = {c: self._closure(c, t) for c in direct}
        roots = {self.find(name)} | {self.find(x) for nodes in closures.values() for x in nodes}
        if len(roots) == 1:
            return
        refusal = self._try(roots, name, direct[0], t, merge=True)
        if refusal is None:
            return
        per: dict[str, Refusal | None] = {}
        for c in direct:
            if self.find(c) != self.find(name):
                sub = {self.find(name)} | {self.find(x) for x in closures[c]}
                per[c] = self._try(sub, name, c, t, merge=False)
        failed = [c for c, r in per.items() if r is not None]
        for c, r in per.items():
            if r is None and failed:
                f = failed[0]
                why = CODE_TEXT.get(per[f].code, per[f].code)  # type: ignore[union-attr]
                r = Refusal(Code.MULTI_CONSUMER.value,
                            f"tensor used by several consumers: {t} is read by {len(direct)} ops "
                            f"({', '.join(direct[:4])}{', ...' if len(direct) > 4 else ''}) that cannot all join "
                            f"one group ({f}: {why}); it must be written and read back")
            self._record(name, c, t, r or refusal)


def fuse(graph: Graph, costs: CostResult, policy: Policy | str | None = None) -> FusionResult:
    """Partition the top-level nodes of ``graph`` into fusion groups under ``policy`` (default IDEAL)."""
    pol = _policy(policy)
    nodes = list(graph.nodes())
    order = _order(graph, nodes)
    infos = MappingProxyType({n.name: classify(graph, n) for n in nodes})
    reads = MappingProxyType({n.name: data_reads(graph, n, infos[n.name]) for n in nodes})
    fuser = _Fuser(graph, infos, reads, pol, order)
    fuser.run()
    home: dict[str, str] = {n: fuser.find(n) for n in fuser.topo}
    pos = {n: i for i, n in enumerate(order)}
    for n in reversed(order):  # free ops (Constant, Shape) join their first consumer's group
        if infos[n].role is Role.FREE:
            readers = sorted({c.name for t in graph.node(n).outputs if t for c in graph.consumers(t)},
                             key=pos.__getitem__)
            home[n] = next((home[r] for r in readers if r in home), n)
    by_root: dict[str, list[str]] = {}
    for n in (x.name for x in nodes):
        by_root.setdefault(home[n], []).append(n)
    node_costs = MappingProxyType({c.name: c for c in costs.nodes})
    storage = _Storage(graph, infos, reads, order)
    groups: list[FusionGroup] = []
    index: dict[str, int] = {}
    for i, members in enumerate(sorted(by_root.values(), key=lambda m: graph.node(m[0]).index)):
        groups.append(_group(f"g{i}", members, graph, infos, node_costs, storage))
        for m in members:
            index[m] = i
    for c in costs.nodes:  # body nodes: their top-level ancestor's group
        if c.depth > 0:
            top = c.parent
            while top is not None and top not in index:
                top = node_costs[top].parent if top in node_costs else None
            if top is not None:
                index[c.name] = index[top]
    boundaries = tuple(b for b in sorted(fuser.boundaries.values(), key=lambda b: (pos[b.producer], pos[b.consumer]))
                       if index[b.producer] != index[b.consumer])
    return FusionResult(pol.name, tuple(groups), boundaries, graph, node_costs, infos, MappingProxyType(index),
                        storage)


def _order(graph: Graph, nodes: list[Node]) -> list[str]:
    """File order when it is topological (ONNX requires it; it keeps the exporter's main path first), else a sort."""
    done: set[str] = set()
    for n in nodes:
        if any((p := graph.producer(t)) is not None and p.name not in done for t in n.inputs if t):
            return graph.topological_order()
        done.add(n.name)
    return [n.name for n in nodes]


def _policy(policy: Policy | str | None) -> Policy:
    if policy is None:
        return IDEAL
    if isinstance(policy, Policy):
        return policy
    if policy in POLICIES:
        return POLICIES[policy]
    raise ValueError(f"unknown fusion policy {policy!r} (named policies: {', '.join(POLICIES)})")


def _group(gid: str, members: list[str], graph: Graph, infos: Mapping[str, NodeInfo],
           costs: Mapping[str, NodeCost], storage: _Storage) -> FusionGroup:
    member_set = set(members)
    kernels = [infos[m] for m in members if infos[m].kernel]
    anchor = next((k.name for k in kernels if k.role is Role.ANCHOR), None)
    dtype = infos[anchor].dtype if anchor else (kernels[0].dtype if kernels else infos[members[0]].dtype)
    rows = [costs.get(m) for m in members]
    flops = sum_dims(None if c is None else c.flops for c in rows)
    unfused = sum_dims(None if c is None or c.bytes_read is None or c.bytes_written is None
                    else c.bytes_read + c.bytes_written for c in rows)
    opaque = any(k.role in NON_FUSABLE for k in kernels)  # such a node never shares its group with a kernel
    crossing = storage.crossing(member_set, None)
    # opaque control flow: its body's own kernels, as the costs pass counted them
    fused = unfused if any(k.role is Role.CONTROL for k in kernels) else crossing.bytes
    inputs = {storage.base_of(t): t for t, _, _ in crossing.reads}
    if not kernels:  # views only: what they alias
        for m in members:
            for t in storage.reads[m][:1]:
                inputs.setdefault(storage.base_of(t), t)
    outputs: dict[str, str] = {}
    for m in members:
        for t in graph.node(m).outputs:
            if t and (t in graph.output_names or any(c.name not in member_set and infos[c.name].role is not Role.FREE
                                                     for c in graph.consumers(t))):
                outputs.setdefault(storage.base_of(t), t)
    return FusionGroup(gid, tuple(members), anchor, dtype, flops, unfused, fused, tuple(inputs.values()),
                       tuple(outputs.values()), opaque)


# --------------------------------------------------------------------------- numbers on a device
@dataclass(frozen=True)
class GroupNumbers:
    """One group's numbers for a binding of the dims on one device (seconds, bytes, FLOPs)."""

    id: str
    nodes: tuple[str, ...]
    anchor: str | None
    flops: Number | None
    bytes_unfused: Number | None
    bytes_fused: Number | None
    time_unfused_s: float | None
    time_fused_s: float | None
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    @property
    def bytes_saved(self) -> Number | None:
        if self.bytes_unfused is None or self.bytes_fused is None:
            return None
        return self.bytes_unfused - self.bytes_fused

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "nodes": list(self.nodes), "anchor": self.anchor, "flops": self.flops,
                "bytes_unfused": self.bytes_unfused, "bytes_fused": self.bytes_fused,
                "time_unfused_s": self.time_unfused_s, "time_fused_s": self.time_fused_s,
                "inputs": list(self.inputs), "outputs": list(self.outputs)}


@dataclass(frozen=True)
class FusionTotals:
    """Sums over groups; byte totals over groups whose bytes are known (``unknown_groups`` counts the rest)."""

    groups: int
    bytes_unfused: Number
    bytes_fused: Number
    bytes_saved: Number
    time_unfused_s: float
    time_fused_s: float
    time_saved_s: float
    unknown_groups: int

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class FusionSection:
    """The fusion section of a report: groups with numbers, boundaries, totals."""

    policy: str
    groups: tuple[GroupNumbers, ...]
    boundaries: tuple[Boundary, ...]
    totals: FusionTotals
    result: FusionResult = field(repr=False, compare=False)

    def group_of(self, node: str) -> GroupNumbers:
        """The numbers of the group holding ``node``."""
        self.result.group_of(node)  # the KeyError naming the node, if there is none
        return self.groups[self.result.index[node]]

    def why_not_fused(self, producer: str, consumer: str) -> str | None:
        return self.result.why_not_fused(producer, consumer)

    def to_dict(self) -> dict[str, Any]:
        """The JSON ``fusion`` object: policy, groups, boundaries, totals."""
        return {"policy": self.policy, "groups": [g.to_dict() for g in self.groups],
                "boundaries": [b.to_dict() for b in self.boundaries], "totals": self.totals.to_dict()}


def _num(value: Dim | None, binding: Mapping[str, int]) -> Number | None:
    if value is None:
        return None
    try:
        return evaluate(value, binding)
    except KeyError as e:
        raise ValueError(f"dim {e.args[0]!r} is not bound (pass it in the binding)") from None


def _roof(compute: float | None, memory: float | None) -> float | None:
    known = [x for x in (compute, memory) if x is not None]
    return max(known) if known else None


def node_time(cost: NodeCost, hw: HardwareSpec, binding: Mapping[str, int]) -> float | None:
    """max(compute, memory) of one node as its own kernel, at DRAM bandwidth (None when both are unknown)."""
    flops = _num(cost.flops, binding)
    moved = None if cost.bytes_read is None or cost.bytes_written is None else \
        _num(cost.bytes_read + cost.bytes_written, binding)
    return _roof(None if flops is None else flops / hw.peak_for(cost.dtype)[0],
                 None if moved is None else moved / hw.memory_bandwidth)


def fusion_section(result: FusionResult, hw: HardwareSpec, binding: Mapping[str, int]) -> FusionSection:
    """Numbers for every group: time_unfused = Σ of its nodes' max(compute, memory); time_fused =
    max(group FLOPs / peak(anchor's or first kernel's dtype), bytes_fused / DRAM bandwidth)."""
    rows: list[GroupNumbers] = []
    t_unf = t_fus = 0.0
    b_unf: Number = 0
    b_fus: Number = 0
    unknown = 0
    for g in result.groups:
        flops = _num(g.flops, binding)
        unf, fus = _num(g.bytes_unfused, binding), _num(g.bytes_fused, binding)
        times = [node_time(result.costs[n], hw, binding) for n in g.nodes if n in result.costs]
        time_unf = sum(t for t in times if t is not None) if any(t is not None for t in times) else None
        if any(result.infos[n].role is Role.CONTROL for n in g.nodes):
            time_fus = time_unf
        else:
            time_fus = _roof(None if flops is None else flops / hw.peak_for(g.dtype)[0],
                             None if fus is None else fus / hw.memory_bandwidth)
        if flops is None or unf is None or fus is None or None in times:
            unknown += 1
        if unf is not None and fus is not None:
            b_unf += unf
            b_fus += fus
        t_unf += time_unf or 0.0
        t_fus += time_fus or 0.0
        rows.append(GroupNumbers(g.id, g.nodes, g.anchor, flops, unf, fus, time_unf, time_fus, g.inputs, g.outputs))
    totals = FusionTotals(len(rows), b_unf, b_fus, b_unf - b_fus, t_unf, t_fus, t_unf - t_fus, unknown)
    return FusionSection(result.policy, tuple(rows), result.boundaries, totals, result)


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
