"""The order of the fusion groups, kept topological while they merge (the grouping: ``_fusion_groups.py``).

Nodes are ints, their positions in the grouping's topological order, and a group is a label: the int of one
of its members. Every table is a list indexed by that int (``grp``, ``ord``, ``nxt``, ``prv``, ``summary``,
``gsucc``, ``gpred``), not a dict keyed by name: at 100k nodes a dict look-up in a 100k-entry table costs
~0.5 µs on this machine against ~0.07 µs at 10k (the table no longer fits in cache, and a string's hash sends
each look-up to a random slot), while a list read near the node being visited stays in cache. That is what
kept the grouping from being flat per node (see ``Fuser``'s docstring for the measurement).

The groups are kept in a topological order: a doubly linked list (``prv``/``nxt``, -1 for none) with increasing
integer ranks (``ord``). Only groups strictly between a merge's first and last group in that order can lie on a
path from one to the other, so when none lies between (the common case: a producer and its next consumers)
there is no path to look for and the merge costs O(groups merged); otherwise the search for such paths runs
forward and back at once within those ranks, and costs what the smaller side does (:meth:`GroupOrder._between`).
The trials of one tensor's consumers one by one, which merge nothing, search the producer's descendants once
(:class:`Reach`) and walk back from each consumer over them (:meth:`GroupOrder._between_from`).

``grp`` maps every member to its label directly, and a merge relabels the smaller groups (each node is
relabelled O(log n) times). Each group keeps the nodes of the groups it reads from and writes to
(``gpred``/``gsucc``), mapped through ``grp`` when read. The entries of a label that a merge retired are
left as they were and never read again.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterable

from graphcost.passes._fusion_legality import Summary

_NONE: frozenset[int] = frozenset()


class Reach:
    """The groups reachable from group ``home``, found in rank order as far as :meth:`below` has been asked.

    It is valid while no group merges: the grouping's per-consumer trials of one tensor (which merge nothing)
    ask it for every consumer, so home's descendants are searched once, not once per consumer. Why: a decoder's
    rotary cos and sin are read by two Muls in every layer, and the trial of layer k's Mul finds every group of
    layers 0..k on the paths, so searching each trial on its own grows with the square of the depth (the
    grouping's trials of HF LLaMA exports, summed, in one process: 16 layers 0.09 s, 32 layers 0.40 s, 64 layers
    1.22 s; with this 0.15 s at 32 and 0.36 s at 64, the reports byte-identical)."""

    def __init__(self, order: GroupOrder, home: int) -> None:
        self.order, self.home = order, home
        self.seen: set[int] = set()
        self.paths: dict[int, set[int] | frozenset[int]] = {}
        """Group → the groups on the paths from home to it, for the groups already asked about: a later walk
        back that meets one takes them whole (LLaMA: a layer's rotary Mul meets the layer before's)."""
        ordd, grp = order.ord, order.grp
        self.heap = [(ordd[g], g) for x in order.gsucc[home] if (g := grp[x]) != home]
        heapq.heapify(self.heap)

    def below(self, rank: int) -> set[int]:
        """home's descendants ranked below ``rank`` (and maybe some beyond it, found for an earlier ask)."""
        heap, seen = self.heap, self.seen
        ordd, grp, gsucc = self.order.ord, self.order.grp, self.order.gsucc
        while heap and heap[0][0] < rank:
            _, g = heapq.heappop(heap)
            if g in seen:
                continue
            seen.add(g)
            for x in gsucc[g]:
                n = grp[x]
                if n != g and n not in seen:
                    heapq.heappush(heap, (ordd[n], n))
        return seen


class GroupOrder:
    """The order and the labels of the groups; :class:`~graphcost.passes._fusion_groups.Fuser` fills the
    tables and decides which merges to make."""

    grp: list[int]  # node → its group's label; -1 for a free node (in no group)
    ord: list[int]  # label → rank in the order
    nxt: list[int]  # label → the next label in the order, -1 for none
    prv: list[int]
    summary: list[Summary | None]
    members: dict[int, list[int]]  # label → members, for groups of more than one node
    gsucc: list[Collection[int]]
    gpred: list[Collection[int]]
    watch: int  # phase 0: the anchor's group (-1: none), whose new members go on ``heap``
    heap: list[int]

    def _members_of(self, groups: Iterable[int]) -> list[int]:
        out: list[int] = []
        members = self.members
        for g in groups:
            got = members.get(g)
            if got is None:
                out.append(g)
            else:
                out += got
        return out

    def _span(self, groups: set[int] | frozenset[int]) -> tuple[int, bool]:
        """The earliest of ``groups`` in the order, and whether they follow each other there."""
        ordd, nxt = self.ord, self.nxt
        if len(groups) == 2:
            a, b = groups
            if ordd[a] > ordd[b]:
                a, b = b, a
            return a, nxt[a] == b
        first = min(groups, key=ordd.__getitem__)
        g = first
        for _ in range(len(groups) - 1):
            g = nxt[g]
            if g not in groups:
                return first, False
        return first, True

    def _between(self, groups: set[int], first: int) -> set[int] | frozenset[int]:
        """Groups on a path that leaves ``groups`` and comes back: they must join too, or the merge is a cycle.

        They are the descendants of ``groups`` that are also ancestors of them. All lie strictly between
        ``first`` (the earliest of ``groups`` in the order) and the latest, so the search forward stops at the
        latest and the search back at ``first``; the two run a step each in turn, and the side that finishes
        first bounds the rest (from the other end, only its groups are looked at). A merge of a group with a
        far-away one costs what the smaller of the two sides does, not the whole stretch between them.
        """
        ordd, grp, gpred, gsucc = self.ord, self.grp, self.gpred, self.gsucc
        lo, hi = ordd[first], max(ordd[g] for g in groups)
        ahead: set[int] = set()  # descendants seen
        behind: set[int] = set()  # ancestors seen
        fwd = [g for r in groups for x in gsucc[r] if (g := grp[x]) not in groups and ordd[g] < hi]
        back = [g for r in groups for x in gpred[r] if (g := grp[x]) not in groups and ordd[g] > lo]
        while fwd and back:
            g = fwd.pop()
            if g not in ahead:
                ahead.add(g)
                for x in gsucc[g]:
                    n = grp[x]
                    if n not in ahead and n not in groups and ordd[n] < hi:
                        fwd.append(n)
            g = back.pop()
            if g not in behind:
                behind.add(g)
                for x in gpred[g]:
                    n = grp[x]
                    if n not in behind and n not in groups and ordd[n] > lo:
                        back.append(n)
        # one side is complete: the answer is its groups that the other side reaches from ``groups``
        within, step = (ahead, gpred) if not fwd else (behind, gsucc)
        if not within:
            return _NONE
        out: set[int] = set()
        stack = [g for r in groups for x in step[r] if (g := grp[x]) in within]
        while stack:
            g = stack.pop()
            if g in out:
                continue
            out.add(g)
            for x in step[g]:
                n = grp[x]
                if n in within and n not in out:
                    stack.append(n)
        return out

    def _between_from(self, groups: set[int], first: int, reach: Reach) -> set[int] | frozenset[int]:
        """:meth:`_between` of a pair whose earlier group is ``reach``'s ``home``, through its descendants.

        For two groups a before b in the order, the groups on a path between them are a's descendants that are
        b's ancestors (a path from b back to a would be a cycle; one from a group to itself too). ``reach``
        holds a's descendants ranked below b, found once for every pair it serves, so this is a walk back from
        b over those alone: what the groups on the paths cost, not the two searches :meth:`_between` runs."""
        other = next(g for g in groups if g != first)
        within = reach.below(self.ord[other])
        ordd, grp, gpred, known = self.ord, self.grp, self.gpred, reach.paths
        out: set[int] = set()
        # latest first, so that an earlier trial's consumer is met before the groups on its paths
        heap = [(-ordd[g], g) for x in gpred[other] if (g := grp[x]) in within]
        heapq.heapify(heap)
        while heap:
            g = heapq.heappop(heap)[1]
            if g in out:
                continue
            out.add(g)
            before = known.get(g)
            if before is not None:  # an earlier trial's consumer: its groups on paths from home are g's ancestors
                out |= before
                continue
            for x in gpred[g]:
                n = grp[x]
                if n in within and n not in out:
                    heapq.heappush(heap, (-ordd[n], n))
        known[other] = out
        return out

    def _merge(self, groups: set[int] | frozenset[int], adjacent: bool) -> None:
        """Join ``groups`` (``adjacent``: they follow each other in the order, so no other group moves)."""
        ordd, prv, nxt, summary = self.ord, self.prv, self.nxt, self.summary
        if adjacent and len(groups) == 2:  # the common case: a producer's group and the next one
            a, b = groups
            if ordd[a] > ordd[b]:
                a, b = b, a
            p = prv[a]  # a leaves the order; b's place is the merged group's
            prv[b] = p
            if p >= 0:
                nxt[p] = b
            new = a if summary[a].size > summary[b].size else b  # type: ignore[union-attr]
            if new == a:
                self._take_place(b, a)
            self._join([a, b], new)
            return
        ranked = sorted(groups, key=ordd.__getitem__)
        first, last = ranked[0], ranked[-1]
        new = ranked[0]  # the label kept: the biggest group's
        for g in ranked:
            if summary[g].size > summary[new].size:  # type: ignore[union-attr]
                new = g
        # Keep the order topological: the merged group's descendants among the groups between its first and
        # last one move after it; the others stay before it.
        desc: set[int] = set()
        if not adjacent:
            hi, grp, gsucc = ordd[last], self.grp, self.gsucc
            stack = [g for r in ranked for x in gsucc[r] if (g := grp[x]) not in groups and ordd[g] <= hi]
            while stack:
                g = stack.pop()
                if g in desc:
                    continue
                desc.add(g)
                for x in gsucc[g]:
                    n = grp[x]
                    if n not in desc and n != g and ordd[n] <= hi:
                        stack.append(n)
        if desc:
            span = [first]
            while span[-1] != last:
                span.append(nxt[span[-1]])
            seq = [g for g in span if g not in groups and g not in desc] + [new] + [g for g in span if g in desc]
            slots = [ordd[g] for g in span][:len(seq)]
            prev, after = prv[first], nxt[last]
            for g, o in zip(seq, slots, strict=True):
                ordd[g] = o
                prv[g] = prev
                if prev >= 0:
                    nxt[prev] = g
                prev = g
            nxt[prev] = after
            if after >= 0:
                prv[after] = prev
        else:  # nothing to move: the merged group takes the last one's place
            for g in ranked[:-1]:
                before_g, after_g = prv[g], nxt[g]
                if before_g >= 0:
                    nxt[before_g] = after_g
                if after_g >= 0:
                    prv[after_g] = before_g
            if new != last:
                self._take_place(last, new)
        self._join(ranked, new)

    def _take_place(self, old: int, new: int) -> None:
        """``new`` (already out of the order) takes ``old``'s place in it: its neighbours and its rank."""
        prv, nxt = self.prv, self.nxt
        p, n = prv[old], nxt[old]
        prv[new] = p
        if p >= 0:
            nxt[p] = new
        nxt[new] = n
        if n >= 0:
            prv[n] = new
        self.ord[new] = self.ord[old]

    def _join(self, ranked: list[int], new: int) -> None:
        """The bookkeeping of a merge once the order is done: summary, members, labels, outside edges."""
        grp, summary, gsucc, gpred = self.grp, self.summary, self.gsucc, self.gpred
        near_s: set[int] = set()  # the groups' outside edges, before the labels change
        near_p: set[int] = set()
        for g in ranked:
            near_s.update(gsucc[g])
            near_p.update(gpred[g])
        summary[new] = Summary.merged([summary[g] for g in ranked])  # type: ignore[misc]
        members = self.members
        if self.watch in ranked:
            for m in self._members_of(g for g in ranked if g != self.watch):
                heapq.heappush(self.heap, m)
            self.watch = new
        kept = members.get(new)
        if kept is None:
            kept = members[new] = [new]
        for g in ranked:
            if g != new:
                moved = members.pop(g, None)
                if moved is None:
                    grp[g] = new
                    kept.append(g)
                else:
                    for m in moved:
                        grp[m] = new
                    kept += moved
        out = {grp[x] for x in near_s}
        out.discard(new)
        gsucc[new] = out
        out = {grp[x] for x in near_p}
        out.discard(new)
        gpred[new] = out
