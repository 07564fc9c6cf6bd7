"""The grouping behind ``passes/fusion.py``: groups merged under a policy, in a dynamic topological order.

``Fuser(...).run()`` leaves ``grp`` (node → its group's label, both as positions in the order; -1 for a free
node) and ``boundaries`` (one row per refused producer→consumer edge); ``fusion.py`` turns them into
:class:`FusionGroup` and :class:`Boundary` rows. The algorithm is the one
the module docstring of ``fusion.py`` describes; this file is about doing it in time linear in the graph for
the graphs models are made of:

* each group keeps a :class:`Summary` of its members, so the legality of a proposed merge is decided from
  the groups' summaries (:func:`check_parts`, ``_fusion_legality.py``), not by walking their members;
* the groups are labels kept in a topological order that a merge updates in time proportional to the
  groups it joins, not to the graph (:class:`~graphcost.passes._fusion_order.GroupOrder`, which this class
  extends: ``_fusion_order.py`` says how).

Which member names a group's label, and which topological order is kept, do not show in the result: the
groups, the boundaries and their reasons are the same for any choice.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Collection, Iterable, Mapping, Sequence

from graphcost.graph import Graph, Node
from graphcost.passes._fusion_legality import Summary, check_parts, non_fusable_refusal
from graphcost.passes._fusion_order import GroupOrder, Reach
from graphcost.passes._fusion_policy import CODE_TEXT, CODES, NodeInfo, Policy, Refusal, Role, is_opaque

_VIEW, _ANCHOR, _FREE = Role.VIEW, Role.ANCHOR, Role.FREE

_SHARE_AFTER = 16
"""Groups on the paths of one per-consumer trial from which the later trials of that tensor share one search of
the producer's descendants (:class:`Reach`). Chosen, not tuned: below it a trial's own search is short, and the
shared one, which goes as far as the furthest consumer asked, could cost more than it saves."""

BoundaryRow = tuple[int, int, str, str, str]
"""(producer, consumer, tensor, reason, code) of one refused edge, the nodes as positions."""


class Fuser(GroupOrder):
    """Groups the top-level nodes of ``graph``.

    ``order`` is a topological order of all of them (``nodes``, ``reads``, ``info_at``: their records, data reads
    and infos, in that order); ``producers`` maps each tensor a node writes to its writer's position in ``order``.
    Inside, a node is its position (``_fusion_order.py`` says why: synthetic-100k's ``Fuser()`` + ``run()`` took
    2.88 s keyed by name and 1.95 s by position, CPU time, best of 4, side by side in one process); names come
    back at the edges (the legality check, the boundaries).
    """

    def __init__(self, graph: Graph, infos: Mapping[str, NodeInfo], reads: Sequence[tuple[str, ...]],
                 policy: Policy, order: list[str], producers: Mapping[str, int], nodes: Sequence[Node],
                 info_at: list[NodeInfo]) -> None:
        self.graph, self.infos, self.policy = graph, infos, policy
        self.names = order
        self.nodes_at = nodes
        self.outputs = outputs = set(graph.output_names)
        self.pos = {n: i for i, n in enumerate(order)}  # name → position
        self.info_at = info_at
        size = len(order)
        self.topo = topo = [i for i, info in enumerate(info_at) if info.role is not _FREE]
        self.grp = grp = [-1] * size
        for i in topo:
            grp[i] = i
        self.producers = producers
        readers: dict[str, list[int]] = {}  # tensor → the non-free nodes reading its data, in order
        summary: list[Summary | None] = [None] * size
        self.opaque = opaque = [False] * size
        self.views = views = [False] * size
        # label → nodes of the groups it writes to / reads from: map them through ``grp`` (some may be inside
        # the group by now); a merge stores the union with current labels
        gsucc: list[Collection[int]] = [()] * size
        for i in topo:
            gsucc[i] = []
        gpred: list[Collection[int]] = [()] * size
        of = Summary.of
        for i in topo:
            info = info_at[i]
            near: list[int] = []
            for t in reads[i]:
                got = readers.get(t)
                if got is None:
                    readers[t] = [i]
                else:
                    got.append(i)
                p = producers.get(t)
                if p is not None and grp[p] >= 0:  # p is a node of a group, not a free one
                    gsucc[p].append(i)  # type: ignore[attr-defined]
                    near.append(p)
            gpred[i] = near
            summary[i] = of(info, i, False)
            role = info.role
            if role is _VIEW:
                views[i] = True
            elif is_opaque(role):
                opaque[i] = True
        self.readers, self.summary = readers, summary
        # graph outputs a node writes, with the nodes reading them (a group holding both is illegal)
        self.out_readers: dict[int, list[tuple[str, list[str]]]] = {}
        pos = self.pos
        for t in outputs:
            p = producers.get(t)
            if p is not None and grp[p] >= 0 and p not in self.out_readers:
                rows = [(o, [c.name for c in graph.consumers(o) if grp[pos[c.name]] >= 0])
                        for o in nodes[p].outputs if o in outputs]
                self.out_readers[p] = rows
                summary[p] = of(info_at[p], p, any(r for _, r in rows))
        self.members: dict[int, list[int]] = {}  # label → members, for groups of more than one node
        self.gsucc, self.gpred = gsucc, gpred
        self.ord = ordd = [0] * size
        self.nxt = nxt = [-1] * size
        self.prv = prv = [-1] * size
        for r, i in enumerate(topo):
            ordd[i] = r
        for a, b in itertools.pairwise(topo):
            nxt[a] = b
            prv[b] = a
        self.boundaries: list[BoundaryRow] = []
        self.recording = True
        self.cur: set[int] | frozenset[int] = frozenset()  # the groups of the proposed merge, for check_parts
        self.watch = -1
        self.heap: list[int] = []
        self.shared = -1  # the group whose per-consumer trials run now (``_visit``), -1 outside them
        self.reach: Reach | None = None  # its descendants, once one trial's cycle search found many groups
        self._producers: dict[str, tuple[str, ...]] = {}
        self._refusals: dict[str, Refusal] = {}

    # ----------------------------------------------------------------- Members (for check_parts)
    def __contains__(self, node: object) -> bool:
        i = self.pos.get(node)  # type: ignore[call-overload]
        return i is not None and self.grp[i] in self.cur

    def input_producers(self, node: str) -> Iterable[str]:
        got = self._producers.get(node)
        if got is None:
            producers, grp, names = self.producers, self.grp, self.names
            got = self._producers[node] = tuple(
                names[p] for t in self.nodes_at[self.pos[node]].inputs
                if t and (p := producers.get(t)) is not None and grp[p] >= 0)
        return got

    def output_readers(self, node: str) -> Iterable[tuple[str, Iterable[str]]]:
        return self.out_readers.get(self.pos[node], ())

    def nodes(self) -> tuple[str, ...]:
        names = self.names
        return tuple(names[i] for i in sorted(self._members_of(self.cur)))

    def _opaque(self, info: NodeInfo) -> Refusal:
        got = self._refusals.get(info.name)
        if got is None:
            got = self._refusals[info.name] = non_fusable_refusal(info)
        return got

    # ----------------------------------------------------------------- merging
    def _try(self, groups: set[int], producer: str, consumer: str, tensor: str, merge: bool) -> Refusal | None:
        summary = self.summary
        self.cur = groups
        refusal = check_parts(list(map(summary.__getitem__, groups)), producer, consumer, tensor,  # type: ignore[arg-type]
                              self.policy, self, self.infos, self.graph, self._opaque)
        if refusal is not None:
            return refusal
        first, adjacent = self._span(groups)
        if not adjacent:
            reach = self.reach
            if reach is not None and reach.home == first and len(groups) == 2:
                between = self._between_from(groups, first, reach)
            else:
                between = self._between(groups, first)
                if self.shared == first and len(groups) == 2 and len(between) >= _SHARE_AFTER:
                    self.reach = Reach(self, first)
                    self.reach.paths[next(g for g in groups if g != first)] = between
            if between:
                whole = groups | between
                self.cur = whole
                inner = check_parts(list(map(summary.__getitem__, whole)), producer, consumer, tensor,  # type: ignore[arg-type]
                                    self.policy, self, self.infos, self.graph, self._opaque)
                if inner is not None:
                    names = self.names
                    on_paths = self._members_of(between)
                    n = len(on_paths)  # the message names the first three: those are picked, not all sorted
                    shown = ", ".join(names[i] for i in heapq.nsmallest(3, on_paths)) + (
                        f" and {n - 3} more" if n > 3 else "")
                    return Refusal(CODES.WOULD_CREATE_CYCLE,
                                   f"would create a cycle: joining {consumer} to {producer}'s group also needs the "
                                   f"{n} op(s) on the paths between them ({shown}), and then {inner.reason}")
                groups = whole
                adjacent = self._span(groups)[1]
        if merge:
            self._merge(groups, adjacent)
        return None

    def _closure(self, consumer: int, tensor: str) -> list[int]:
        """The consumer and, when it is a view of ``tensor``, everything that reads that storage."""
        views = self.views
        if not views[consumer]:
            return [consumer]
        out, stack = [consumer], [(consumer, tensor)]
        while stack:
            n, t = stack.pop()
            node = self.nodes_at[n]
            if not views[n] or not node.inputs or node.inputs[0] != t or not node.outputs:
                continue
            for r in self.readers.get(node.outputs[0], ()):
                if r not in out:
                    out.append(r)
                    stack.append((r, node.outputs[0]))
        return out

    def run(self) -> None:
        # Phase 0: every compute anchor takes its epilogue, the latest anchor first (a residual block's Add
        # belongs to its main path, written after the shortcut's conv, as TVM and ORT assign it). The
        # anchor's group is visited in node order, members that join it on the way included (``_join``
        # puts them on the heap).
        self.recording = False
        info_at = self.info_at
        for a in reversed([i for i in self.topo if info_at[i].role is _ANCHOR]):
            group = self.grp[a]
            later = [m for m in self._members_of((group,)) if m != a]
            heap = self.heap = [a]
            self.watch = group
            done: set[int] = set()
            while heap:
                p = heapq.heappop(heap)
                if p in done:
                    continue
                done.add(p)
                self._visit_all(p)
                for m in later:
                    heapq.heappush(heap, m)
                later = []
            self.watch = -1
        # Phase 1: every producer in order; refusals become boundaries.
        self.recording = True
        readers, nodes_at, visit = self.readers, self.nodes_at, self._visit
        for i in self.topo:  # _visit_all, inlined: a call per node saved (100k calls at synthetic-100k)
            for t in nodes_at[i].outputs:
                if t:
                    direct = readers.get(t)
                    if direct:
                        visit(i, t, direct)

    def _visit_all(self, i: int) -> None:
        readers = self.readers
        for t in self.nodes_at[i].outputs:
            direct = readers.get(t) if t else None
            if direct:
                self._visit(i, t, direct)

    def _visit(self, i: int, t: str, direct: list[int]) -> None:
        names = self.names
        if self.opaque[i] or t in self.outputs:
            if self.recording:
                refusal = self._opaque(self.info_at[i]) if self.opaque[i] else Refusal(
                    CODES.GRAPH_OUTPUT, f"{t} is a graph output and must be written to memory")
                reason, code = refusal.reason, refusal.code
                rows = self.boundaries
                for c in direct:
                    rows.append((i, c, t, reason, code))
            return
        grp = self.grp
        home = grp[i]
        if len(direct) == 1:
            c = direct[0]
            if self.views[c]:
                groups = {home}
                for x in self._closure(c, t):
                    groups.add(grp[x])
                if len(groups) == 1:
                    return
            else:
                other = grp[c]
                if other == home:
                    return
                if self.opaque[c]:  # what check_parts says first: the consumer runs alone
                    if self.recording:
                        refusal = self._opaque(self.info_at[c])
                        self.boundaries.append((i, c, t, refusal.reason, refusal.code))
                    return
                groups = {home, other}
            refusal = self._try(groups, names[i], names[c], t, merge=True)
            # the merge of that one consumer alone is the merge just refused
            if refusal is not None and self.recording and grp[c] != home:
                self.boundaries.append((i, c, t, refusal.reason, refusal.code))
            return
        closures = {c: self._closure(c, t) for c in direct}
        groups = {home}
        for nodes in closures.values():
            for x in nodes:
                groups.add(grp[x])
        if len(groups) == 1:
            return
        refusal = self._try(groups, names[i], names[direct[0]], t, merge=True)
        if refusal is None or not self.recording:
            return
        per: dict[int, Refusal | None] = {}
        self.shared = home  # these trials merge nothing, so their cycle searches may share home's descendants
        for c in direct:
            if grp[c] != home:
                sub = {home}
                for x in closures[c]:
                    sub.add(grp[x])
                per[c] = self._try(sub, names[i], names[c], t, merge=False)
        self.shared, self.reach = -1, None
        failed = [c for c, r in per.items() if r is not None]
        for c, r in per.items():
            if r is None and failed:
                f = failed[0]
                why = CODE_TEXT.get(per[f].code, per[f].code)  # type: ignore[union-attr]
                shown = ", ".join(names[x] for x in direct[:4])
                r = Refusal(CODES.MULTI_CONSUMER,
                            f"tensor used by several consumers: {t} is read by {len(direct)} ops "
                            f"({shown}{', ...' if len(direct) > 4 else ''}) that cannot all join "
                            f"one group ({names[f]}: {why}); it must be written and read back")
            r = r or refusal
            self.boundaries.append((i, c, t, r.reason, r.code))
