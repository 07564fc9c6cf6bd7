"""The grouping behind ``passes/fusion.py``: groups merged under a policy, in a dynamic topological order.

``Fuser(...).run()`` leaves ``grp`` (node → its group's label) and ``boundaries`` (one row per refused
producer→consumer edge); ``fusion.py`` turns them into :class:`FusionGroup` rows. The algorithm is the one
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
from collections.abc import Collection, Iterable, Mapping

from graphcost.graph import Graph
from graphcost.passes._fusion_legality import Summary, check_parts, non_fusable_refusal
from graphcost.passes._fusion_order import GroupOrder
from graphcost.passes._fusion_policy import CODE_TEXT, CODES, NodeInfo, Policy, Refusal, Role, is_opaque

_NONE: frozenset[str] = frozenset()
_VIEW, _ANCHOR, _FREE = Role.VIEW, Role.ANCHOR, Role.FREE

BoundaryRow = tuple[str, str, str, str, str]
"""(producer, consumer, tensor, reason, code) of one refused edge."""


class Fuser(GroupOrder):
    """Groups the top-level nodes of ``graph``.

    ``order`` is a topological order of all of them; ``producers`` maps each tensor a node writes to that node.
    """

    def __init__(self, graph: Graph, infos: Mapping[str, NodeInfo], reads: Mapping[str, tuple[str, ...]],
                 policy: Policy, order: list[str], producers: Mapping[str, str]) -> None:
        self.graph, self.infos, self.reads, self.policy = graph, infos, reads, policy
        self.node = graph.node
        self.outputs = outputs = set(graph.output_names)
        self.pos = pos = {n: i for i, n in enumerate(order)}
        self.topo = topo = [n for n in order if infos[n].role is not _FREE]
        self.grp: dict[str, str] = dict(zip(topo, topo, strict=True))  # node → its group's label
        self.producers = producers
        readers: dict[str, list[str]] = {}  # tensor → the non-free nodes reading its data, in order
        summary: dict[str, Summary] = {}
        opaque: set[str] = set()
        views: set[str] = set()
        # label → nodes of the groups it writes to / reads from: map them through ``grp`` (some may be inside
        # the group by now); a merge stores the union with current labels
        gsucc: dict[str, Collection[str]] = {n: [] for n in topo}
        gpred: dict[str, Collection[str]] = {}
        of = Summary.of
        for n in topo:
            info = infos[n]
            near: list[str] = []
            for t in reads[n]:
                got = readers.get(t)
                if got is None:
                    readers[t] = [n]
                else:
                    got.append(n)
                p = producers.get(t)
                if p is not None:
                    after = gsucc.get(p)
                    if after is not None:  # p is a node of the order, not a free one
                        after.append(n)  # type: ignore[attr-defined]
                        near.append(p)
            gpred[n] = near
            summary[n] = of(info, pos[n], False)
            role = info.role
            if role is _VIEW:
                views.add(n)
            elif is_opaque(role):
                opaque.add(n)
        self.readers, self.summary, self.opaque, self.views = readers, summary, opaque, views
        # graph outputs a node writes, with the nodes reading them (a group holding both is illegal)
        self.out_readers: dict[str, list[tuple[str, list[str]]]] = {}
        grp = self.grp
        for t in outputs:
            p = producers.get(t)
            if p is not None and p in grp and p not in self.out_readers:
                rows = [(o, [c.name for c in graph.consumers(o) if c.name in grp])
                        for o in self.node(p).outputs if o in outputs]
                self.out_readers[p] = rows
                summary[p] = of(infos[p], pos[p], any(r for _, r in rows))
        self.members: dict[str, list[str]] = {}  # label → members, for groups of more than one node
        self.gsucc, self.gpred = gsucc, gpred
        self.ord = {n: i for i, n in enumerate(topo)}
        self.nxt = dict(itertools.pairwise(topo))
        self.prv = {b: a for a, b in itertools.pairwise(topo)}
        self.boundaries: list[BoundaryRow] = []
        self.recording = True
        self.cur: set[str] | frozenset[str] = _NONE  # the groups of the proposed merge, for check_parts
        self.watch: str | None = None  # phase 0: the anchor's group, whose new members go on ``heap``
        self.heap: list[tuple[int, str]] = []
        self._producers: dict[str, tuple[str, ...]] = {}
        self._refusals: dict[str, Refusal] = {}

    # ----------------------------------------------------------------- Members (for check_parts)
    def __contains__(self, node: object) -> bool:
        return self.grp.get(node) in self.cur  # type: ignore[call-overload]

    def input_producers(self, node: str) -> Iterable[str]:
        got = self._producers.get(node)
        if got is None:
            producers, grp = self.producers, self.grp
            got = self._producers[node] = tuple(
                p for t in self.node(node).inputs if t and (p := producers.get(t)) is not None and p in grp)
        return got

    def output_readers(self, node: str) -> Iterable[tuple[str, Iterable[str]]]:
        return self.out_readers.get(node, ())

    def nodes(self) -> tuple[str, ...]:
        return tuple(sorted(self._members_of(self.cur), key=self.pos.__getitem__))

    def _opaque(self, info: NodeInfo) -> Refusal:
        got = self._refusals.get(info.name)
        if got is None:
            got = self._refusals[info.name] = non_fusable_refusal(info)
        return got

    # ----------------------------------------------------------------- merging
    def _try(self, groups: set[str], producer: str, consumer: str, tensor: str, merge: bool) -> Refusal | None:
        summary = self.summary
        self.cur = groups
        refusal = check_parts(list(map(summary.__getitem__, groups)), producer, consumer, tensor, self.policy,
                              self, self.infos, self.graph, self._opaque)
        if refusal is not None:
            return refusal
        first, adjacent = self._span(groups)
        if not adjacent:
            between = self._between(groups, first)
            if between:
                whole = groups | between
                self.cur = whole
                inner = check_parts(list(map(summary.__getitem__, whole)), producer, consumer, tensor, self.policy,
                                    self, self.infos, self.graph, self._opaque)
                if inner is not None:
                    extra = sorted(self._members_of(between), key=self.pos.__getitem__)
                    shown = ", ".join(extra[:3]) + (f" and {len(extra) - 3} more" if len(extra) > 3 else "")
                    return Refusal(CODES.WOULD_CREATE_CYCLE,
                                   f"would create a cycle: joining {consumer} to {producer}'s group also needs the "
                                   f"{len(extra)} op(s) on the paths between them ({shown}), and then {inner.reason}")
                groups = whole
                adjacent = self._span(groups)[1]
        if merge:
            self._merge(groups, adjacent)
        return None

    def _closure(self, consumer: str, tensor: str) -> list[str]:
        """The consumer and, when it is a view of ``tensor``, everything that reads that storage."""
        if consumer not in self.views:
            return [consumer]
        out, stack = [consumer], [(consumer, tensor)]
        while stack:
            n, t = stack.pop()
            node = self.node(n)
            if n not in self.views or not node.inputs or node.inputs[0] != t or not node.outputs:
                continue
            for r in self.readers.get(node.outputs[0], ()):
                if r not in out:
                    out.append(r)
                    stack.append((r, node.outputs[0]))
        return out

    def run(self) -> None:
        # Phase 0: every compute anchor takes its epilogue, the latest anchor first (a residual block's Add
        # belongs to its main path, written after the shortcut's conv, as TVM and ORT assign it). The
        # anchor's group is visited in node order, members that join it on the way included (``_merge``
        # puts them on the heap).
        self.recording = False
        pos, infos = self.pos, self.infos
        for a in reversed([n for n in self.topo if infos[n].role is _ANCHOR]):
            group = self.grp[a]
            later = [m for m in self._members_of((group,)) if m != a]
            heap = self.heap = [(pos[a], a)]
            self.watch = group
            done: set[str] = set()
            while heap:
                _, p = heapq.heappop(heap)
                if p in done:
                    continue
                done.add(p)
                self._visit_all(p)
                for m in later:
                    heapq.heappush(heap, (pos[m], m))
                later = []
            self.watch = None
        # Phase 1: every producer in order; refusals become boundaries.
        self.recording = True
        for name in self.topo:
            self._visit_all(name)

    def _visit_all(self, name: str) -> None:
        readers = self.readers
        for t in self.node(name).outputs:
            direct = readers.get(t) if t else None
            if direct:
                self._visit(name, t, direct)

    def _visit(self, name: str, t: str, direct: list[str]) -> None:
        if name in self.opaque or t in self.outputs:
            if self.recording:
                refusal = self._opaque(self.infos[name]) if name in self.opaque else Refusal(
                    CODES.GRAPH_OUTPUT, f"{t} is a graph output and must be written to memory")
                reason, code = refusal.reason, refusal.code
                rows = self.boundaries
                for c in direct:
                    rows.append((name, c, t, reason, code))
            return
        grp = self.grp
        home = grp[name]
        if len(direct) == 1:
            c = direct[0]
            if c in self.views:
                groups = {home}
                for x in self._closure(c, t):
                    groups.add(grp[x])
                if len(groups) == 1:
                    return
            else:
                other = grp[c]
                if other == home:
                    return
                if c in self.opaque:  # what check_parts says first: the consumer runs alone
                    if self.recording:
                        refusal = self._opaque(self.infos[c])
                        self.boundaries.append((name, c, t, refusal.reason, refusal.code))
                    return
                groups = {home, other}
            refusal = self._try(groups, name, c, t, merge=True)
            # the merge of that one consumer alone is the merge just refused
            if refusal is not None and self.recording and grp[c] != home:
                self.boundaries.append((name, c, t, refusal.reason, refusal.code))
            return
        closures = {c: self._closure(c, t) for c in direct}
        groups = {home}
        for nodes in closures.values():
            for x in nodes:
                groups.add(grp[x])
        if len(groups) == 1:
            return
        refusal = self._try(groups, name, direct[0], t, merge=True)
        if refusal is None or not self.recording:
            return
        per: dict[str, Refusal | None] = {}
        for c in direct:
            if grp[c] != home:
                sub = {home}
                for x in closures[c]:
                    sub.add(grp[x])
                per[c] = self._try(sub, name, c, t, merge=False)
        failed = [c for c, r in per.items() if r is not None]
        for c, r in per.items():
            if r is None and failed:
                f = failed[0]
                why = CODE_TEXT.get(per[f].code, per[f].code)  # type: ignore[union-attr]
                r = Refusal(CODES.MULTI_CONSUMER,
                            f"tensor used by several consumers: {t} is read by {len(direct)} ops "
                            f"({', '.join(direct[:4])}{', ...' if len(direct) > 4 else ''}) that cannot all join "
                            f"one group ({f}: {why}); it must be written and read back")
            r = r or refusal
            self.boundaries.append((name, c, t, r.reason, r.code))
