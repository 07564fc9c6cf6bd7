"""Storages and the bytes crossing a node set: what a fused group, an ORT kernel or a gap row moves.

One convention, written once (:meth:`Storage.crossing`), for every set of top-level nodes run as one kernel:

* **reads** — each *storage* a kernel of the set reads whose writer is outside the set, once. A view
  (Reshape, Squeeze, Flatten, Identity) and its input are one storage; initializers and graph inputs have no
  writer. Only data slots count: the slots a rule declares free (Shape's input) are not read;
  If/Loop/Scan also read the outer-scope values their bodies use. A storage that the set's kernels read only
  in part (a Gather's rows, a Slice's window: the rule's ``window``) costs those parts, added and capped by the
  whole storage; one whole read among them makes it whole;
* **writes** — each tensor a kernel of the set writes that is read by a kernel outside the set (with
  ``runs``: by one that executes), or whose storage is a graph output, once;
* views and free ops (Constant, Shape) move nothing themselves: a view inside the set passes its input's
  storage through, a view outside it reads nothing.

    a ──► Relu ──► r ──► Reshape ──► v ──► Sigmoid ──► z        set {Relu, Reshape}: read a, write r
                                                                set {Reshape, Sigmoid}: read r (as v), write z

``bytes_fused`` of a fusion group is its crossing with every node running; ``graphcost.gap.Bounder`` bounds a
set from the same crossing; ``graphcost.measure.fusion_ort`` passes ``runs`` for the nodes ORT's graph still executes.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from graphcost._dims import Dim, simplify_dim
from graphcost._sym import sympy
from graphcost.graph import Graph, Node
from graphcost.ops import NodeView, lookup, windows
from graphcost.ops.movement import capped
from graphcost.passes._fusion_policy import NodeInfo, Role, classify_all
from graphcost.passes._fusion_roles import tensor_getter
from graphcost.passes.costs import NodeCost, tensor_bytes

_VIEW, _FREE, _CONTROL = Role.VIEW, Role.FREE, Role.CONTROL
_MISSING = object()
_TABLES = ("pos", "readers", "producer", "_bytes", "_users", "parts")
"""The :class:`Storage` tables that :meth:`Storage.release` drops (``base`` stays: a report reads it)."""
Entry = tuple[str, str, Dim | None]
"""(tensor, the member that reads or writes it, its bytes)."""


@dataclass(frozen=True)
class Crossing:
    """Tensors crossing a set of nodes' border: (tensor, node that reads or writes it, bytes) once each."""

    reads: tuple[Entry, ...]
    writes: tuple[Entry, ...]

    @property
    def bytes(self) -> Dim | None:
        return sum_dims(b for _, _, b in (*self.reads, *self.writes))


class Storage:
    """Aliases (views share their input's storage), data readers of each storage, graph-output storages."""

    def __init__(self, graph: Graph, infos: Mapping[str, NodeInfo], reads: Mapping[str, tuple[str, ...]],
                 order: list[str], pos: Mapping[str, int] | None = None,
                 at: tuple[Sequence[Node], Sequence[NodeInfo], Sequence[tuple[str, ...]]] | None = None,
                 costs: Iterable[NodeCost] | None = None) -> None:
        """``at``: the nodes' records, infos and data reads listed in ``order``, when the caller has them (each
        name look-up in a 100k-entry table costs ~0.5 µs at synthetic-100k: three per node saved). ``costs``:
        the costs pass's rows of the graph, whose ``parts`` (the inputs each node reads in part) are then taken
        as they are instead of asking each rule's window again (symbolic caps are sympy ``Min``s: dynamic-size
        Swin-T's 1,130 windows took 2.8 s the second time, cProfile)."""
        self.graph = graph
        self.infos = infos
        self.reads = reads
        self.order = order
        self._given = None if costs is None else {c.name: c.parts for c in costs if c.depth == 0 and c.parts}
        self.output_names = frozenset(graph.output_names)
        self._tensor = tensor_getter(graph)
        self._build(pos, at)
        self.output_storages = {self.base_of(t) for t in graph.output_names}

    def _build(self, pos: Mapping[str, int] | None,
               at: tuple[Sequence[Node], Sequence[NodeInfo], Sequence[tuple[str, ...]]] | None) -> None:
        """The per-tensor tables, from ``order`` (again after :meth:`release`: the same tables)."""
        graph, infos, reads, order = self.graph, self.infos, self.reads, self.order
        self.pos = pos if pos is not None else {n: i for i, n in enumerate(order)}
        self.base: dict[str, str] = {}
        self.readers: dict[str, list[str]] = {}
        self.producer: dict[str, str] = {}  # storage → the kernel node that writes it
        self._bytes: dict[str, Dim | None] = {}
        self._users: dict[str, list[str]] = {}  # tensor → the nodes (not free ones) reading it, in any slot
        self.parts: dict[tuple[str, str], Dim] = {}  # (node, tensor) → the bytes it reads of it, read in part
        base, readers, producer, users, parts = self.base, self.readers, self.producer, self._users, self.parts
        if at is None:
            at = ([graph.node(n) for n in order], [infos[n] for n in order], [reads[n] for n in order])
        windowed: dict[tuple[str, str], Any] = {}  # (domain, op) → its rule entry when it has a window, else None
        given = self._given
        if given is not None:
            for n, taken in given.items():
                for t, b in taken:
                    parts[(n, t)] = b
        for n, node, info, data in zip(order, *at, strict=True):
            role = info.role
            if role is _FREE:
                continue
            if given is None:  # no costs given: ask each windowed rule (a look-up per op type)
                key = (node.domain, node.op_type)
                entry = windowed.get(key, _MISSING)
                if entry is _MISSING:
                    entry = lookup(*key)
                    entry = windowed[key] = entry if entry is not None and entry.window is not None else None
            else:
                entry = None
            if entry is not None:
                view = NodeView(node, tuple(graph.tensor(t) if t else None for t in node.inputs),
                                tuple(graph.tensor(t) if t else None for t in node.outputs), graph)
                for t, b in windows(entry, view).items():
                    parts[(n, t)] = b
            for t in node.inputs:
                if t:
                    got = users.get(t)
                    if got is None:
                        users[t] = [n]
                    else:
                        got.append(n)
            if role is not _VIEW:
                for t in data:
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

    def release(self) -> None:
        """Drop the tables only a crossing reads (:data:`_TABLES`); the first use after builds them again, the
        same. A fusion result keeps its storage for the API's crossing queries, which a report never asks:
        synthetic-100k keeps ~40 MiB less after ``fuse`` (tracemalloc; ``_users`` and ``readers``, one-element lists,
        24 MiB), and with ``fuse`` freeing the grouping's tables before the rows, ``analyze``'s peak RSS is
        620 → 573 MiB (``/usr/bin/time``, two runs each, side by side)."""
        for name in _TABLES:
            self.__dict__.pop(name, None)

    def __getattr__(self, name: str) -> Any:
        """Called only for an attribute not set: one of :data:`_TABLES` after :meth:`release` builds them all."""
        if name in _TABLES and "order" in self.__dict__:
            base = self.__dict__.get("base")
            self._build(None, None)
            if base is not None:
                self.base = base  # the same table; kept, as a caller may hold it
            return self.__dict__[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @classmethod
    def of(cls, graph: Graph, costs: Iterable[NodeCost] | None = None) -> Storage:
        """The storages of ``graph``'s top-level nodes, classified as the fusion pass classifies them (``costs``:
        as in the constructor)."""
        nodes = list(graph.nodes())
        infos = classify_all(graph, nodes)
        return cls(graph, infos, data_reads_all(graph, nodes, infos), graph.topological_order(), costs=costs)

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

    def crossing(self, members: Collection[str], runs: Callable[[str], bool] | None = None) -> Crossing:
        """The tensors crossing the border of ``members`` (the module docstring's convention), in graph order."""
        inside = members if isinstance(members, (set, frozenset)) else set(members)
        reads, writes = self.traffic(sorted(inside, key=lambda x: self.pos.get(x, -1)), inside, runs)
        return Crossing(tuple(reads.values()), tuple(writes.values()))

    def traffic_one(self, n: str, reads: Iterable[str], outputs: Iterable[str]
                    ) -> tuple[dict[str, Entry], dict[str, Entry]]:
        """:meth:`traffic` of the set ``{n}``, ``n`` a kernel node of an acyclic graph (so it reads none of its own
        outputs), every node running; ``reads`` and ``outputs`` are its data reads and outputs. Most fusion groups
        are one node (synthetic-100k: 50k of 70k), and each look-up in a table this size costs ~0.5 µs at 100k
        nodes: this asks the fewest (synthetic-100k's group_rows, with per-position lists for the nodes' records:
        1.28 s → 1.02 s CPU, best of 4, side by side)."""
        entries: dict[str, Entry] = {}
        writes: dict[str, Entry] = {}
        base, readers, nbytes, tensor, parts = self.base, self.readers, self._bytes, self._tensor, self.parts
        for t in reads:
            b = base.get(t, t)
            if b not in entries:
                got = parts.get((n, t), _MISSING) if parts else _MISSING
                if got is _MISSING:
                    got = nbytes.get(t, _MISSING)
                    if got is _MISSING:
                        got = nbytes[t] = tensor_bytes(tensor(t))
                entries[b] = (t, n, got)  # type: ignore[assignment]
        output_storages = self.output_storages
        for t in outputs:
            if not t or t in writes:
                continue
            if t not in output_storages and not readers.get(t):
                continue
            got = nbytes.get(t, _MISSING)
            if got is _MISSING:
                got = nbytes[t] = tensor_bytes(tensor(t))
            writes[t] = (t, n, got)  # type: ignore[assignment]
        return entries, writes

    def traffic(self, ordered: Iterable[str], inside: Collection[str], runs: Callable[[str], bool] | None = None
                ) -> tuple[dict[str, Entry], dict[str, Entry]]:
        """:meth:`crossing` as two dicts, reads keyed by storage and writes by tensor; ``ordered`` is ``inside``
        in the order the entries are wanted (the fusion pass passes its groups' member lists as they are)."""
        infos, sreads, node_of = self.infos, self.reads, self.graph.node

        def kernels() -> Iterator[tuple[str, tuple[str, ...], tuple[str, ...]]]:
            for n in ordered:
                info = infos.get(n)
                if info is not None and info.role is not _VIEW and info.role is not _FREE:
                    yield n, sreads[n], node_of(n).outputs

        return self._traffic(kernels(), inside, runs)

    def traffic_at(self, ordered: Iterable[int], names: Sequence[str], info_at: Sequence[NodeInfo],
                   reads_at: Sequence[tuple[str, ...]], nodes_at: Sequence[Node], inside: Collection[str]
                   ) -> tuple[dict[str, Entry], dict[str, Entry]]:
        """:meth:`traffic` of the members at positions ``ordered`` (every node running), their names, infos, data
        reads and records read from the ``*_at`` lists by position instead of three name look-ups per member
        (synthetic-100k's 20k groups of several nodes)."""

        def kernels() -> Iterator[tuple[str, tuple[str, ...], tuple[str, ...]]]:
            for i in ordered:
                role = info_at[i].role
                if role is not _VIEW and role is not _FREE:
                    yield names[i], reads_at[i], nodes_at[i].outputs

        return self._traffic(kernels(), inside, None)

    def _traffic(self, kernels: Iterable[tuple[str, tuple[str, ...], tuple[str, ...]]], inside: Collection[str],
                 runs: Callable[[str], bool] | None) -> tuple[dict[str, Entry], dict[str, Entry]]:
        """The set-traffic convention itself, over ``inside``'s kernel nodes as (name, data reads, outputs) in the
        order wanted: each storage read from outside once, each tensor read by a running node outside (or a graph
        output) written once."""
        reads: dict[str, Entry] = {}
        writes: dict[str, Entry] = {}
        base, producer, readers, parts = self.base, self.producer, self.readers, self.parts
        output_storages, nbytes, tensor = self.output_storages, self._bytes, self.graph.tensor
        partial: dict[str, Dim | None] = {}  # storage read only in part so far → its whole bytes
        for n, data, outputs in kernels:
            for t in data:
                b = base.get(t, t)
                part = parts.get((n, t), _MISSING) if parts else _MISSING
                if b not in reads:
                    if producer.get(b) in inside:
                        continue
                    got = nbytes.get(t, _MISSING)
                    if got is _MISSING:
                        got = nbytes[t] = tensor_bytes(tensor(t))
                    if part is not _MISSING:
                        partial[b] = got  # type: ignore[assignment]
                        got = part
                    reads[b] = (t, n, got)  # type: ignore[assignment]
                elif b in partial:  # read in part before: another part adds, a whole read makes it whole
                    first, whole = reads[b], partial[b]
                    if part is _MISSING:
                        del partial[b]
                        reads[b] = (first[0], first[1], whole)
                    elif whole is not None and first[2] is not None:
                        reads[b] = (first[0], first[1], capped(first[2] + part, whole))  # type: ignore[operator]
            for t in outputs:
                if not t or t in writes:
                    continue
                if t not in output_storages:
                    for r in readers.get(t, ()):
                        if r not in inside and (runs is None or runs(r)):
                            break
                    else:
                        continue
                got = nbytes.get(t, _MISSING)
                if got is _MISSING:
                    got = nbytes[t] = tensor_bytes(tensor(t))
                writes[t] = (t, n, got)  # type: ignore[assignment]
        return reads, writes


def data_reads(graph: Graph, node: Node, info: NodeInfo) -> tuple[str, ...]:
    """The distinct tensors whose data the node reads: not Shape's input, not omitted ones; for If/Loop/Scan
    also the outer-scope values their bodies read."""
    return data_reads_all(graph, (node,), {node.name: info})[node.name]


def data_reads_all(graph: Graph, nodes: Iterable[Node], infos: Mapping[str, NodeInfo]) -> dict[str, tuple[str, ...]]:
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
        inputs = node.inputs
        if not free and role is not _CONTROL and "" not in inputs and (
                len(inputs) < 2 or (len(inputs) == 2 and inputs[0] != inputs[1])):
            out[node.name] = inputs  # what the rest computes, not copied (synthetic-100k: 8.8 → 4.3 MiB)
            continue
        if free:
            ins = [t for i, t in enumerate(node.inputs) if t and i not in free]
        else:
            ins = [t for t in node.inputs if t]
        if role is _CONTROL:
            ins += [t for t in _captured(graph, node) if graph.tensor(t) is not None]
        out[node.name] = tuple(ins) if len(ins) < 2 else tuple(dict.fromkeys(ins))
    return out


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
