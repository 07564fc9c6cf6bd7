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
* ``bytes_fused``: each distinct storage read from outside the group once (initializers are inputs; a
  view and its input are one storage), plus each tensor the group produces that is read by another
  group or is a graph output, once. Views and free ops (Constant, Shape) move nothing.

Control-flow nodes (If/Loop/Scan) are one opaque group each, fused = unfused; their body nodes are
not grouped (``group_of`` a body node is its control node's group).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeVar

from graphcost._dims import Dim, evaluate, simplify_dim, to_text
from graphcost._sym import sympy
from graphcost.graph import Graph, Node, TensorKind
from graphcost.hardware.spec import HardwareSpec
from graphcost.ops import lookup
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
    is_opaque,
    max_nodes,
    same_compute_dtype,
)
from graphcost.passes.costs import CostResult, NodeCost, tensor_bytes
from graphcost.passes.roofline import RESIDENCIES, Bound, kernel_bound, sum_bounds

Number = int | float
_T = TypeVar("_T")
_MISSING = object()
_ANCHOR, _VIEW, _FREE, _CONTROL = Role.ANCHOR, Role.VIEW, Role.FREE, Role.CONTROL


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
                 order: list[str], pos: Mapping[str, int] | None = None) -> None:
        self.graph = graph
        self.infos = infos
        self.reads = reads
        self.pos = pos if pos is not None else {n: i for i, n in enumerate(order)}
        self.base: dict[str, str] = {}
        self.readers: dict[str, list[str]] = {}
        self.producer: dict[str, str] = {}  # storage → the kernel node that writes it
        self._bytes: dict[str, Dim | None] = {}
        self._users: dict[str, list[str]] = {}  # tensor → the nodes (not free ones) reading it, in any slot
        self.output_names = frozenset(graph.output_names)
        base, readers, producer, users, node_of = self.base, self.readers, self.producer, self._users, graph.node
        for n in order:
            node = node_of(n)
            role = infos[n].role
            if role is _FREE:
                continue
            for t in node.inputs:
                if t:
                    got = users.get(t)
                    if got is None:
                        users[t] = [n]
                    else:
                        got.append(n)
            if role is not _VIEW:
                for t in reads[n]:
                    b = base.get(t, t)
                    got = readers.get(b)
                    if got is None:
                        readers[b] = [n]
                    else:
                        got.append(n)
                for t in node.outputs:
                    if t:
                        producer[t] = n
            elif node.inputs and node.inputs[0] and node.outputs:
                base[node.outputs[0]] = base.get(node.inputs[0], node.inputs[0])
        self.output_storages = {self.base_of(t) for t in graph.output_names}

    def base_of(self, tensor: str) -> str:
        return self.base.get(tensor, tensor)

    def users(self, tensor: str) -> list[str]:
        """The nodes other than free ones that take ``tensor`` as an input (data or not)."""
        return self._users.get(tensor, [])

    def bytes_of(self, tensor: str) -> Dim | None:
        """``tensor_bytes`` of a tensor, computed once."""
        got = self._bytes.get(tensor, _MISSING)
        if got is _MISSING:
            got = self._bytes[tensor] = tensor_bytes(self.graph.tensor(tensor))
        return got  # type: ignore[return-value]

    def crossing(self, members: set[str], runs: Callable[[str], bool] | None) -> Crossing:
        reads, writes = self._crossing(sorted(members, key=lambda x: self.pos.get(x, -1)), members, runs)
        return Crossing(tuple(reads.values()), tuple(writes.values()))

    def _crossing(self, ordered: Iterable[str], members: Collection[str], runs: Callable[[str], bool] | None
                  ) -> tuple[dict[str, tuple[str, str, Dim | None]], dict[str, tuple[str, str, Dim | None]]]:
        """The reads and writes of :meth:`crossing`, keyed by storage; ``ordered`` is ``members`` in order."""
        reads: dict[str, tuple[str, str, Dim | None]] = {}
        writes: dict[str, tuple[str, str, Dim | None]] = {}
        infos, base, producer, readers, node_of = self.infos, self.base, self.producer, self.readers, self.graph.node
        for n in ordered:
            info = infos.get(n)
            if info is None or not info.kernel:
                continue
            for t in self.reads[n]:
                b = base.get(t, t)
                if b not in reads and producer.get(b) not in members:
                    reads[b] = (t, n, self.bytes_of(t))
            for t in node_of(n).outputs:
                if not t or t in writes:
                    continue
                if t in self.output_storages or any(
                        r not in members and (runs is None or runs(r)) for r in readers.get(t, ())):
                    writes[t] = (t, n, self.bytes_of(t))
        return reads, writes


def data_reads(graph: Graph, node: Node, info: NodeInfo) -> tuple[str, ...]:
    """The distinct tensors whose data the node reads: not Shape's input, not omitted ones; for If/Loop/Scan
    also the outer-scope values their bodies read."""
    return _data_reads_all(graph, (node,), {node.name: info})[node.name]


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
def fuse(graph: Graph, costs: CostResult, policy: Policy | str | None = None) -> FusionResult:
    """Partition the top-level nodes of ``graph`` into fusion groups under ``policy`` (default IDEAL)."""
    with _no_cyclic_gc():
        return _fuse(graph, costs, _policy(policy))


@contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """The cyclic garbage collector paused: the pass allocates a few objects per node and frees them by
    reference counting; collections triggered on the way would walk the whole heap again and again."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _fuse(graph: Graph, costs: CostResult, pol: Policy) -> FusionResult:
    nodes = list(graph.nodes())
    producers = {t: n.name for n in nodes for t in n.outputs if t}
    order = _order(graph, nodes, producers)
    infos = classify_all(graph, nodes)
    reads = _data_reads_all(graph, nodes, infos)
    fuser = Fuser(graph, infos, reads, pol, order, producers)
    fuser.run()
    pos = fuser.pos
    home: dict[str, str] = fuser.grp
    for n in reversed(order):  # free ops (Constant, Shape) join their first consumer's group
        if infos[n].role is _FREE:
            readers = sorted({c.name for t in graph.node(n).outputs if t for c in graph.consumers(t)},
                             key=pos.__getitem__)
            home[n] = next((home[r] for r in readers if r in home), n)
    by_root: dict[str, list[str]] = {}  # in order of each group's first node, as the groups are listed
    for node in nodes:
        got = by_root.get(home[node.name])
        if got is None:
            by_root[home[node.name]] = [node.name]
        else:
            got.append(node.name)
    node_costs = {c.name: c for c in costs.nodes}
    storage = _Storage(graph, infos, reads, order, pos)
    in_order = order == [n.name for n in nodes]
    groups = _groups(by_root.values(), graph, infos, node_costs, storage, in_order)
    index: dict[str, int] = {}
    for i, members in enumerate(by_root.values()):
        for m in members:
            index[m] = i
    for c in costs.nodes:  # body nodes: their top-level ancestor's group
        if c.depth > 0:
            top = c.parent
            while top is not None and top not in index:
                top = node_costs[top].parent if top in node_costs else None
            if top is not None:
                index[c.name] = index[top]
    rows = [b for b in fuser.boundaries if index[b[0]] != index[b[1]]]
    rows.sort(key=lambda b: (pos[b[0]], pos[b[1]]))
    boundaries = tuple(_frozen(Boundary, {"producer": b[0], "consumer": b[1], "tensor": b[2], "reason": b[3],
                                          "code": b[4]}) for b in rows)
    return FusionResult(pol.name, tuple(groups), boundaries, graph, MappingProxyType(node_costs),
                        MappingProxyType(infos), MappingProxyType(index), storage)


_NEW, _SET = object.__new__, object.__setattr__


def _frozen(cls: type[_T], fields: dict[str, Any]) -> _T:
    """``cls(**fields)`` for a frozen dataclass without ``__post_init__``, minus the per-field ``__setattr__``
    calls of its ``__init__`` (the same object: eq, hash and repr read the fields)."""
    obj = _NEW(cls)
    _SET(obj, "__dict__", fields)
    return obj


def _data_reads_all(graph: Graph, nodes: Iterable[Node], infos: Mapping[str, NodeInfo]) -> dict[str, tuple[str, ...]]:
    """:func:`data_reads` of every node, the registry looked up once per op type."""
    free_slots: dict[tuple[str, str], frozenset[int]] = {}
    out: dict[str, tuple[str, ...]] = {}
    for node in nodes:
        role = infos[node.name].role
        if role is _FREE:
            out[node.name] = ()
            continue
        key = (node.domain, node.op_type)
        free = free_slots.get(key)
        if free is None:
            entry = lookup(node.domain, node.op_type)
            free = free_slots[key] = entry.free_inputs if entry is not None else frozenset()
        if free:
            ins = [t for i, t in enumerate(node.inputs) if t and i not in free]
        else:
            ins = [t for t in node.inputs if t]
        if role is _CONTROL:
            ins += [t for t in _captured(graph, node) if graph.tensor(t) is not None]
        out[node.name] = tuple(ins) if len(ins) < 2 else tuple(dict.fromkeys(ins))
    return out


def _order(graph: Graph, nodes: list[Node], producers: Mapping[str, str] | None = None) -> list[str]:
    """File order when it is topological (ONNX requires it; it keeps the exporter's main path first), else a sort.

    ``producers``: tensor → the node writing it, when the caller has it."""
    if producers is None:
        producers = {t: n.name for n in nodes for t in n.outputs if t}
    done: set[str] = set()
    for n in nodes:
        for t in n.inputs:
            if t:
                p = producers.get(t)
                if p is not None and p not in done:
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


def _sum(values: list[Dim | None]) -> Dim | None:
    """:func:`sum_dims`, quicker when every value is an int."""
    total = 0
    for v in values:
        if type(v) is not int:
            return sum_dims(values)
        total += v
    return total


def _groups(lists: Iterable[list[str]], graph: Graph, infos: Mapping[str, NodeInfo],
            costs: Mapping[str, NodeCost], storage: _Storage, in_order: bool) -> list[FusionGroup]:
    """The row of each group (its members in graph order), with ids ``g0``, ``g1``… (written out for speed).

    ``bytes_fused`` is the group's crossing with every node running (:meth:`_Storage.crossing`); ``in_order``
    when graph order is the storage's order."""
    out: list[FusionGroup] = []
    base, producer, readers, output_storages = storage.base, storage.producer, storage.readers, storage.output_storages
    sreads, graph_outputs, users, nbytes = storage.reads, storage.output_names, storage._users, storage._bytes
    node_of, tensor, missing, pos = graph.node, graph.tensor, _MISSING, storage.pos
    new, set_dict, group_cls = _NEW, _SET, FusionGroup
    sums: dict[Any, Dim | None] = {}  # a symbolic count (or a pair, added) → sum_dims of it alone
    for i, members in enumerate(lists):
        inputs: dict[str, str] = {}
        outputs: dict[str, str] = {}
        moved: list[Dim | None] = []
        flops: Dim | None
        unfused: Dim | None
        fused: Dim | None
        if len(members) == 1:
            n = members[0]
            info = infos[n]
            role = info.role
            dtype = info.dtype
            c = costs.get(n)
            if c is None:
                flops = unfused = None
            else:
                flops = c.flops
                if type(flops) is not int and flops is not None:
                    got = sums.get(flops, missing)
                    if got is missing:
                        got = sums[flops] = sum_dims((flops,))
                    flops = got  # type: ignore[assignment]
                br, bw = c.bytes_read, c.bytes_written
                if br is None or bw is None:
                    unfused = None
                elif type(br) is int and type(bw) is int:
                    unfused = br + bw
                else:
                    got = sums.get((br, bw), missing)
                    if got is missing:
                        got = sums[(br, bw)] = sum_dims((br + bw,))
                    unfused = got  # type: ignore[assignment]
            outputs_of = node_of(n).outputs
            if role is _VIEW or role is _FREE:
                anchor, opaque, fused = None, False, 0
                for t in sreads[n][:1]:  # views only: what they alias
                    inputs[base.get(t, t)] = t
            else:
                anchor = n if role is _ANCHOR else None
                opaque = is_opaque(role)
                for t in sreads[n]:
                    b = base.get(t, t)
                    if b not in inputs and producer.get(b) != n:
                        inputs[b] = t
                        got = nbytes.get(t, missing)
                        if got is missing:
                            got = nbytes[t] = tensor_bytes(tensor(t))
                        moved.append(got)  # type: ignore[arg-type]
                written: list[str] = []
                for t in outputs_of:
                    if t and t not in written:
                        if t not in output_storages:
                            for r in readers.get(t, ()):
                                if r != n:
                                    break
                            else:
                                continue
                        written.append(t)
                        got = nbytes.get(t, missing)
                        if got is missing:
                            got = nbytes[t] = tensor_bytes(tensor(t))
                        moved.append(got)  # type: ignore[arg-type]
                if role is _CONTROL:  # opaque control flow: its body's own kernels, as the costs pass counted them
                    fused = unfused
                else:
                    fused = 0
                    for v in moved:
                        if type(v) is not int:
                            fused = sum_dims(moved)
                            break
                        fused += v
            for t in outputs_of:
                if t:
                    if t not in graph_outputs:
                        for u in users.get(t, ()):
                            if u != n:
                                break
                        else:
                            continue
                    outputs.setdefault(base.get(t, t), t)
        else:
            inside = set(members)
            kernels = [k for k in (infos[m] for m in members) if k.role is not _VIEW and k.role is not _FREE]
            rows = [costs.get(m) for m in members]
            flops = _sum([None if c is None else c.flops for c in rows])
            unfused = _sum([None if c is None or c.bytes_read is None or c.bytes_written is None
                            else c.bytes_read + c.bytes_written for c in rows])
            if kernels:
                wrote: set[str] = set()
                for m in members if in_order else sorted(inside, key=lambda x: pos.get(x, -1)):
                    k = infos[m]
                    if k.role is _VIEW or k.role is _FREE:
                        continue
                    for t in sreads[m]:
                        b = base.get(t, t)
                        if b not in inputs and producer.get(b) not in inside:
                            inputs[b] = t
                            got = nbytes.get(t, missing)
                            if got is missing:
                                got = nbytes[t] = tensor_bytes(tensor(t))
                            moved.append(got)  # type: ignore[arg-type]
                    for t in node_of(m).outputs:
                        if t and t not in wrote:
                            if t not in output_storages:
                                for r in readers.get(t, ()):
                                    if r not in inside:
                                        break
                                else:
                                    continue
                            wrote.add(t)
                            got = nbytes.get(t, missing)
                            if got is missing:
                                got = nbytes[t] = tensor_bytes(tensor(t))
                            moved.append(got)  # type: ignore[arg-type]
                anchor = None
                opaque = control = False
                for k in kernels:
                    if anchor is None and k.role is _ANCHOR:
                        anchor = k.name
                    if is_opaque(k.role):
                        opaque = True  # such a node never shares its group with a kernel
                        control = control or k.role is _CONTROL
                dtype = infos[anchor].dtype if anchor else kernels[0].dtype
                fused = unfused if control else _sum(moved)
            else:  # views only: what they alias
                anchor, dtype, opaque, fused = None, infos[members[0]].dtype, False, 0
                for m in members:
                    for t in sreads[m][:1]:
                        inputs.setdefault(base.get(t, t), t)
            for m in members:
                for t in node_of(m).outputs:
                    if t:
                        if t not in graph_outputs:
                            for u in users.get(t, ()):
                                if u not in inside:
                                    break
                            else:
                                continue
                        outputs.setdefault(base.get(t, t), t)
        group = new(group_cls)
        set_dict(group, "__dict__", {
            "id": f"g{i}", "nodes": tuple(members), "anchor": anchor, "dtype": dtype, "flops": flops,
            "bytes_unfused": unfused, "bytes_fused": fused, "inputs": tuple(inputs.values()),
            "outputs": tuple(outputs.values()), "opaque": opaque})
        out.append(group)
    return out


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
    kernels: tuple[Bound, ...] = field(default=(), repr=False, compare=False)
    """Per group (as ``groups``): its ``kernel_bound`` as one kernel (a control group: Σ of its nodes'); the
    HTML chart reads compute/memory from here, not from a formula of its own."""

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
    """The value of a count under ``binding``; ValueError, one line naming the dim or the formula, when the
    binding leaves a dim out or the formula has no real value under it (``analyze`` binds every dim the
    model's tensors use and refuses formulas without a value before this runs)."""
    if value is None:
        return None
    try:
        return evaluate(value, binding)
    except KeyError as e:
        raise ValueError(f"dim {e.args[0]!r} is not bound (pass it in the binding)") from None
    except (TypeError, ValueError, ArithmeticError):  # sympy: "Cannot convert complex to float" (1/0 is zoo)
        raise ValueError(f"count {to_text(value)!r} has no real value under the binding "
                         "(it divides by zero or goes imaginary)") from None


def node_time(cost: NodeCost, hw: HardwareSpec, binding: Mapping[str, int], *, resident: Number = 0,
              capacity: bool = True) -> float | None:
    """``kernel_bound`` time of one node as its own kernel, ``resident`` of its bytes possibly on chip
    (None when both times are unknown)."""
    flops = _num(cost.flops, binding)
    moved = None if cost.bytes_read is None or cost.bytes_written is None else \
        _num(cost.bytes_read + cost.bytes_written, binding)
    return kernel_bound(flops, moved, hw, dtype=cost.dtype, resident=resident, capacity=capacity).time_s


def fusion_section(result: FusionResult, hw: HardwareSpec, binding: Mapping[str, int], *, capacity: bool = True,
                   residency: str = "cold") -> FusionSection:
    """Numbers for every group: time_unfused = Σ of its nodes' ``kernel_bound`` times, each node as the report's
    ``nodes`` bound it (the same capacity and residency); time_fused = ``kernel_bound`` of the group as one
    kernel: its FLOPs at the peak of the anchor's (or first kernel's) dtype, ``bytes_fused`` with the
    activations crossing the group resident (cold) or every byte (warm)."""
    with _no_cyclic_gc():
        return _section(result, hw, binding, capacity, residency)


def _section(result: FusionResult, hw: HardwareSpec, binding: Mapping[str, int], capacity: bool,
             residency: str) -> FusionSection:
    if residency not in RESIDENCIES:
        raise ValueError(f"residency must be one of {', '.join(RESIDENCIES)}, got {residency!r}")
    rows: list[GroupNumbers] = []
    kernels: list[Bound] = []
    t_unf = t_fus = 0.0
    b_unf: Number = 0
    b_fus: Number = 0
    unknown = 0
    costs, infos = result.costs, result.infos
    onchip = bool(capacity and hw.levels())  # as roofline(): resident bytes only matter with on-chip levels
    warm = residency == "warm"
    graph = result.graph
    outputs = frozenset(graph.output_names)
    activations: dict[str, Number] = {}  # tensor → its bytes when it may stay on chip (cold), else 0

    values: dict[Any, Any] = {}  # symbolic count (or a pair of them, summed) → its value

    def num(value: Dim | None) -> Number | None:
        got = values.get(value, _MISSING)
        if got is _MISSING:
            got = values[value] = _num(value, binding)
        return got  # type: ignore[return-value]

    def resident_of(tensors: Iterable[str]) -> Number:
        """Bytes of ``tensors`` that may stay on chip: activations that are not graph outputs (roofline's
        ``_onchip_bytes``), each distinct tensor once."""
        total: Number = 0
        for name in dict.fromkeys(tensors):
            got = activations.get(name)
            if got is None:
                got = 0
                t = graph.tensor(name)
                if name not in outputs and t is not None and t.kind == TensorKind.ACTIVATION:
                    b = tensor_bytes(t)
                    got = 0 if b is None else (num(b) or 0)
                activations[name] = got
            total += got
        return total

    for g in result.groups:
        flops, unf, fus = g.flops, g.bytes_unfused, g.bytes_fused
        if type(flops) is not int:
            flops = num(flops)
        if type(unf) is not int:
            unf = num(unf)
        if type(fus) is not int:
            fus = num(fus)
        known: list[float] = []  # kernel_bound time of each node, when known
        parts: list[Bound] = []
        missing = control = False
        for n in g.nodes:
            if infos[n].role is _CONTROL:
                control = True
            c = costs.get(n)
            if c is None:
                continue
            f: Number | None = c.flops  # type: ignore[assignment]
            if type(f) is not int:
                f = num(c.flops)
            moved: Number | None
            br, bw = c.bytes_read, c.bytes_written
            if br is None or bw is None:
                moved = None
            elif type(br) is int and type(bw) is int:
                moved = br + bw
            else:
                moved = values.get((br, bw), _MISSING)
                if moved is _MISSING:
                    moved = values[(br, bw)] = _num(br + bw, binding)
            resident: Number = 0
            if onchip and moved is not None and c.depth == 0:
                resident = moved if warm else resident_of(r.name for r in (*c.inputs, *c.outputs))
            k = kernel_bound(f, moved, hw, dtype=c.dtype, resident=resident, capacity=onchip and c.depth == 0)
            parts.append(k)
            t = k.time_s
            if t is None:
                missing = True
            else:
                known.append(t)
        time_unf = sum(known) if known else None
        if control:
            time_fus = time_unf
            kernels.append(sum_bounds(parts))
        else:
            resident = 0
            if onchip and fus is not None:
                resident = fus if warm else resident_of((*g.inputs, *g.outputs))
            fused = kernel_bound(flops, fus, hw, dtype=g.dtype, resident=resident, capacity=onchip)
            kernels.append(fused)
            time_fus = fused.time_s
        if flops is None or unf is None or fus is None or missing:
            unknown += 1
        if unf is not None and fus is not None:
            b_unf += unf
            b_fus += fus
        t_unf += time_unf or 0.0
        t_fus += time_fus or 0.0
        row = _NEW(GroupNumbers)
        _SET(row, "__dict__", {
            "id": g.id, "nodes": g.nodes, "anchor": g.anchor, "flops": flops, "bytes_unfused": unf,
            "bytes_fused": fus, "time_unfused_s": time_unf, "time_fused_s": time_fus, "inputs": g.inputs,
            "outputs": g.outputs})
        rows.append(row)
    totals = FusionTotals(len(rows), b_unf, b_fus, b_unf - b_fus, t_unf, t_fus, t_unf - t_fus, unknown)
    return FusionSection(result.policy, tuple(rows), result.boundaries, totals, result, tuple(kernels))


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
