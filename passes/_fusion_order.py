"""The order of the fusion groups, kept topological while they merge (the grouping: ``_fusion_groups.py``).

The groups are kept in a topological order: a doubly linked list (``prv``/``nxt``) with increasing integer
positions (``ord``). Only groups strictly between a merge's first and last group in that order can lie on a path
from one to the other, so when none lies between (the common case: a producer and its next consumers) there is
no path to look for and the merge costs O(groups merged); otherwise the search for such paths runs forward and
back at once within those positions, and costs what the smaller side does (:meth:`GroupOrder._between`).

A group is a label (the name of one of its members); ``grp`` maps every member to it directly, and a merge
relabels the smaller groups (each node is relabelled O(log n) times). Each group keeps the nodes of the groups
it reads from and writes to (``gpred``/``gsucc``), mapped through ``grp`` when read.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterable

from graphcost.passes._fusion_legality import Summary

_NONE: frozenset[str] = frozenset()


class GroupOrder:
    """The order and the labels of the groups; :class:`~graphcost.passes._fusion_groups.Fuser` fills the
    tables and decides which merges to make."""

    grp: dict[str, str]
    ord: dict[str, int]
    nxt: dict[str, str]
    prv: dict[str, str]
    pos: dict[str, int]
    summary: dict[str, Summary]
    members: dict[str, list[str]]
    gsucc: dict[str, Collection[str]]
    gpred: dict[str, Collection[str]]
    watch: str | None
    heap: list[tuple[int, str]]

    def _members_of(self, groups: Iterable[str]) -> list[str]:
        out: list[str] = []
        members = self.members
        for g in groups:
            got = members.get(g)
            if got is None:
                out.append(g)
            else:
                out += got
        return out

    def _span(self, groups: set[str] | frozenset[str]) -> tuple[str, bool]:
        """The earliest of ``groups`` in the order, and whether they follow each other there."""
        ordd, nxt = self.ord, self.nxt
        if len(groups) == 2:
            a, b = groups
            if ordd[a] > ordd[b]:
                a, b = b, a
            return a, nxt.get(a) == b
        first = min(groups, key=ordd.__getitem__)
        g: str | None = first
        for _ in range(len(groups) - 1):
            g = nxt.get(g)  # type: ignore[arg-type]
            if g not in groups:
                return first, False
        return first, True

    def _between(self, groups: set[str], first: str) -> set[str] | frozenset[str]:
        """Groups on a path that leaves ``groups`` and comes back: they must join too, or the merge is a cycle.

        They are the descendants of ``groups`` that are also ancestors of them. All lie strictly between
        ``first`` (the earliest of ``groups`` in the order) and the latest, so the search forward stops at the
        latest and the search back at ``first``; the two run a step each in turn, and the side that finishes
        first bounds the rest (from the other end, only its groups are looked at). A merge of a group with a
        far-away one costs what the smaller of the two sides does, not the whole stretch between them.
        """
        ordd, grp, gpred, gsucc = self.ord, self.grp, self.gpred, self.gsucc
        lo, hi = ordd[first], max(ordd[g] for g in groups)
        ahead: set[str] = set()  # descendants seen
        behind: set[str] = set()  # ancestors seen
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
        out: set[str] = set()
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

    def _merge(self, groups: set[str] | frozenset[str], adjacent: bool) -> None:
        """Join ``groups`` (``adjacent``: they follow each other in the order, so no other group moves)."""
        ordd, prv, nxt, summary = self.ord, self.prv, self.nxt, self.summary
        if adjacent and len(groups) == 2:  # the common case: a producer's group and the next one
            a, b = groups
            if ordd[a] > ordd[b]:
                a, b = b, a
            p = prv.pop(a, None)  # a leaves the order; b's place is the merged group's
            del nxt[a]
            if p is None:
                del prv[b]
            else:
                prv[b] = p
                nxt[p] = b
            del ordd[a]
            ranked = [a, b]
            new = a if summary[a].size > summary[b].size else b
            if new == a:
                self._take_place(b, a)
            self._join(ranked, new)
            return
        ranked = sorted(groups, key=ordd.__getitem__)
        first, last = ranked[0], ranked[-1]
        new = ranked[0]  # the label kept: the biggest group's
        for g in ranked:
            if summary[g].size > summary[new].size:
                new = g
        # Keep the order topological: the merged group's descendants among the groups between its first and
        # last one move after it; the others stay before it.
        desc: set[str] = set()
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
            before, after = prv.get(first), nxt.get(last)
            for g in ranked:
                prv.pop(g, None)
                nxt.pop(g, None)
                del ordd[g]
            prev = before
            for g, o in zip(seq, slots, strict=True):
                ordd[g] = o
                if prev is None:
                    prv.pop(g, None)
                else:
                    prv[g] = prev
                    nxt[prev] = g
                prev = g
            if after is None:
                nxt.pop(new if prev is None else prev, None)
            else:
                nxt[prev] = after  # type: ignore[index]
                prv[after] = prev  # type: ignore[assignment]
        else:  # nothing to move: the merged group takes the last one's place
            for g in ranked[:-1]:
                before_g, after_g = prv.pop(g, None), nxt.pop(g, None)
                if before_g is not None:
                    if after_g is not None:
                        nxt[before_g] = after_g
                    else:
                        del nxt[before_g]
                if after_g is not None:
                    if before_g is not None:
                        prv[after_g] = before_g
                    else:
                        del prv[after_g]
                del ordd[g]
            if new != last:
                self._take_place(last, new)
        self._join(ranked, new)

    def _take_place(self, old: str, new: str) -> None:
        """``new`` (already out of the order) takes ``old``'s place in it: its neighbours and its rank."""
        prv, nxt = self.prv, self.nxt
        p, n = prv.pop(old, None), nxt.pop(old, None)
        if p is not None:
            prv[new] = p
            nxt[p] = new
        if n is not None:
            nxt[new] = n
            prv[n] = new
        self.ord[new] = self.ord.pop(old)

    def _join(self, ranked: list[str], new: str) -> None:
        """The bookkeeping of a merge once the order is done: summary, members, labels, outside edges."""
        grp, summary, gsucc, gpred = self.grp, self.summary, self.gsucc, self.gpred
        near_s: set[str] = set()  # the groups' outside edges, before the labels change
        near_p: set[str] = set()
        for g in ranked:
            near_s.update(gsucc.pop(g))
            near_p.update(gpred.pop(g))
        summary[new] = Summary.merged([summary.pop(g) for g in ranked])
        members = self.members
        if self.watch in ranked:
            for m in self._members_of(g for g in ranked if g != self.watch):
                heapq.heappush(self.heap, (self.pos[m], m))
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
