"""Fusion legality: whether a proposed group is one kernel a device could run, decided from group summaries.

Each group of the grouping (``_fusion_groups.py``) keeps a :class:`Summary` of its members; a proposed merge
is checked from the summaries of the groups it joins (:func:`check_parts`), never by walking their members,
against what one kernel can physically do and what the :class:`~graphcost.passes._fusion_policy.Policy` allows.
``_fusion_policy.py``'s module docstring draws what passes and what is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Protocol

from graphcost._dims import Dim
from graphcost.graph import Graph
from graphcost.passes._fusion_policy import CAPABILITIES, CODES, Candidate, Policy, Refusal
from graphcost.passes._fusion_roles import (
    _ANCHOR,
    _ELEMENTWISE,
    _FREE,
    _REDUCTION,
    _VIEW,
    LAYOUT_OPS,
    NON_FUSABLE,
    NodeInfo,
    Role,
    is_opaque,
    same,
)


def non_fusable_refusal(i: NodeInfo) -> Refusal:
    if i.role is Role.CONTROL:
        return Refusal(CODES.CONTROL_FLOW, f"{i.name} ({i.op_type}) is control flow; its body runs as "
                                           "kernels of its own")
    if i.role is Role.MOVEMENT and (i.op_type in LAYOUT_OPS or "storage size" in i.detail):
        what = i.detail if "storage size" in i.detail else "reorders elements"
        return Refusal(CODES.LAYOUT_CHANGE, f"layout change: {i.name} ({i.op_type}) {what}; it runs as a "
                                            "kernel of its own")
    return Refusal(CODES.NON_FUSABLE, f"{i.name} ({i.op_type}) is not fusable: {i.detail or i.role.value}")


DEQUANTIZE_OPS = frozenset({"DequantizeLinear", "DynamicDequantizeLinear"})


class Summary:
    """What the legality rules need to know about a set of nodes, without walking it: counts, the one
    anchor or non-fusable node, the reductions, and per element count the first elementwise node with it.

    Entries are ``(position, NodeInfo)``, position being the node's place in the order the rules read the
    nodes in ("the first reduction" is the one with the smallest position). A summary is never changed once
    built: :meth:`merged` makes a new one, which is how a fusion group's summary follows its merges.
    """

    __slots__ = ("anchors", "cast", "ew", "gout", "kernels", "mask", "n_ew", "nonfusable", "reductions", "size",
                 "views")

    def __init__(self, size: int, views: int, kernels: int, n_ew: int, nonfusable: tuple[int, NodeInfo] | None,
                 cast: tuple[int, NodeInfo] | None, anchors: tuple[tuple[int, NodeInfo], ...],
                 reductions: tuple[tuple[int, NodeInfo], ...], ew: Mapping[Dim | None, tuple[int, NodeInfo]],
                 gout: tuple[tuple[int, str], ...], mask: int) -> None:
        self.size = size
        self.views = views  # members whose role is VIEW
        self.kernels = kernels  # members that run as (part of) a kernel
        self.n_ew = n_ew  # ELEMENTWISE members
        self.nonfusable = nonfusable  # the first member whose role is in NON_FUSABLE
        self.cast = cast  # the first elementwise member that casts
        self.anchors = anchors  # ANCHOR members, in order
        self.reductions = reductions  # REDUCTION members, in order
        self.ew = ew  # element count → the first ELEMENTWISE member writing that many
        self.gout = gout  # members that write a graph output some node reads
        self.mask = mask  # _M_* bits: which of the above are set (non-zero), for a quick look at a union

    @classmethod
    def of(cls, info: NodeInfo, pos: int, writes_read_output: bool) -> Summary:
        """One node: ``writes_read_output`` when it writes a graph output that a node (maybe a member) reads."""
        role = info.role
        entry = (pos, info)
        gout, m = (((pos, info.name),), _M_GOUT) if writes_read_output else ((), 0)
        if role is _ELEMENTWISE:
            if info.cast is None:
                return cls(1, 0, 1, 1, None, None, (), (), {info.numel: entry}, gout, m | _M_EW)
            return cls(1, 0, 1, 1, None, entry, (), (), {info.numel: entry}, gout, m | _M_EW | _M_CAST)
        if role is _ANCHOR:
            return cls(1, 0, 1, 0, None, None, (entry,), (), _NO_EW, gout, m | _M_ANCHOR)
        if role is _REDUCTION:
            return cls(1, 0, 1, 0, None, None, (), (entry,), _NO_EW, gout, m | _M_REDUCTION)
        if role is _VIEW:
            return cls(1, 1, 0, 0, None, None, (), (), _NO_EW, gout, m | _M_VIEW)
        if role is _FREE:
            return cls(1, 0, 0, 0, None, None, (), (), _NO_EW, gout, m)
        if role in NON_FUSABLE:
            return cls(1, 0, 1, 0, entry, None, (), (), _NO_EW, gout, m | _M_OPAQUE)
        return cls(1, 0, 1, 0, None, None, (), (), _NO_EW, gout, m)

    @classmethod
    def merged(cls, parts: Sequence[Summary]) -> Summary:
        """The summary of the union of disjoint node sets."""
        size = views = kernels = n_ew = 0
        nonfusable = cast = None
        anchors: tuple[tuple[int, NodeInfo], ...] = ()
        reductions: tuple[tuple[int, NodeInfo], ...] = ()
        gout: tuple[tuple[int, str], ...] = ()
        ew: Mapping[Dim | None, tuple[int, NodeInfo]] | None = None
        more: list[Mapping[Dim | None, tuple[int, NodeInfo]]] = []
        mask = 0
        for p in parts:
            mask |= p.mask
            size += p.size
            views += p.views
            kernels += p.kernels
            n_ew += p.n_ew
            q = p.nonfusable
            if q is not None and (nonfusable is None or q[0] < nonfusable[0]):
                nonfusable = q
            q = p.cast
            if q is not None and (cast is None or q[0] < cast[0]):
                cast = q
            if p.anchors:
                anchors = _by_pos(anchors + p.anchors) if anchors else p.anchors
            if p.reductions:
                reductions = _by_pos(reductions + p.reductions) if reductions else p.reductions
            if p.gout:
                gout = tuple(sorted(gout + p.gout)) if gout else p.gout
            if p.ew:
                if ew is None:
                    ew = p.ew  # shared, never changed
                else:
                    more.append(p.ew)
        if more:
            union = dict(ew)  # type: ignore[arg-type]
            for e in more:
                for k, v in e.items():
                    got = union.get(k)
                    if got is None or v[0] < got[0]:
                        union[k] = v
            ew = union
        return cls(size, views, kernels, n_ew, nonfusable, cast, anchors, reductions,
                   _NO_EW if ew is None else ew, gout, mask)


_NO_EW: Mapping[Dim | None, tuple[int, NodeInfo]] = MappingProxyType({})
_M_OPAQUE, _M_GOUT, _M_ANCHOR, _M_REDUCTION, _M_EW, _M_VIEW, _M_CAST = 1, 2, 4, 8, 16, 32, 64


def _by_pos(entries: tuple[tuple[int, NodeInfo], ...]) -> tuple[tuple[int, NodeInfo], ...]:
    return tuple(sorted(entries, key=_first))


def _first(entry: tuple[int, NodeInfo]) -> int:
    return entry[0]


class Members(Protocol):
    """The node set of a proposed group, for the rules that walk the graph (see :func:`check_parts`)."""

    def __contains__(self, node: object) -> bool: ...

    def input_producers(self, node: str) -> Iterable[str]:
        """The nodes writing ``node``'s inputs, in input order (only those that could be members matter)."""
        ...

    def output_readers(self, node: str) -> Iterable[tuple[str, Iterable[str]]]:
        """(tensor, nodes reading it) for each graph output ``node`` writes, in output order."""
        ...

    def nodes(self) -> tuple[str, ...]:
        """All members in order."""
        ...


class _CandidateMembers:
    """:class:`Members` of a :class:`Candidate`, its nodes read in the order given."""

    def __init__(self, c: Candidate) -> None:
        self.c = c
        self.set = set(c.nodes)

    def __contains__(self, node: object) -> bool:
        return node in self.set

    def input_producers(self, node: str) -> Iterable[str]:
        graph = self.c.graph
        return [p.name for t in graph.node(node).inputs if t and (p := graph.producer(t)) is not None]

    def output_readers(self, node: str) -> Iterable[tuple[str, Iterable[str]]]:
        graph = self.c.graph
        outputs = set(graph.output_names)
        return [(t, [x.name for x in graph.consumers(t)]) for t in graph.node(node).outputs if t in outputs]

    def nodes(self) -> tuple[str, ...]:
        return self.c.nodes


def summarize(c: Candidate) -> Summary:
    """The summary of a candidate's nodes, positions being their places in ``c.nodes``."""
    outputs = set(c.graph.output_names)
    parts = []
    for i, n in enumerate(c.nodes):
        writes = any(t in outputs and c.graph.consumers(t) for t in c.graph.node(n).outputs)
        parts.append(Summary.of(c.infos[n], i, writes))
    return Summary.merged(parts)


def _prologue(members: Members, infos: Mapping[str, NodeInfo], anchor: NodeInfo,
              dequant: bool) -> tuple[NodeInfo | None, set[str]]:
    """The first member that feeds the anchor other than views (and DequantizeLinear, with ``dequant``), if any,
    and the members that feed it legally."""
    stack = [anchor.name]
    seen = {anchor.name}
    while stack:
        for p in members.input_producers(stack.pop()):
            if p in seen or p not in members:
                continue
            seen.add(p)
            info = infos[p]
            if info.role is not _VIEW and not (dequant and info.op_type in DEQUANTIZE_OPS):
                return info, seen
            stack.append(p)
    return None, seen - {anchor.name}


def _space(i: NodeInfo, allowed: Iterable[Dim], what: str) -> Refusal | None:
    if i.numel is None:
        return Refusal(CODES.SHAPE_UNKNOWN, f"the shape of {i.name} ({i.op_type}) is unknown")
    if any(same(i.numel, a) for a in allowed):
        return None
    return Refusal(CODES.ITERATION_SPACE, f"{i.name} ({i.op_type}) writes {i.numel} elements but {what}")


def _first_off_space(parts: Sequence[Summary], allowed: Sequence[Dim], skip: Collection[str],
                     members: Members, infos: Mapping[str, NodeInfo]) -> NodeInfo | None:
    """The first elementwise member not in ``skip`` whose element count is unknown or none of ``allowed``."""
    best: tuple[int, NodeInfo] | None = None
    for p in parts:
        for count, entry in p.ew.items():
            if count is not None:
                for a in allowed:
                    if same(count, a):
                        break
                else:
                    a = None
                if a is not None:
                    continue
            if entry[1].name in skip:  # the first of that count is skipped: look at every member
                for n in members.nodes():
                    i = infos[n]
                    if i.role is _ELEMENTWISE and n not in skip and (
                            i.numel is None or not any(same(i.numel, a) for a in allowed)):
                        return i
                return None
            if best is None or entry[0] < best[0]:
                best = entry
    return None if best is None else best[1]


def check(c: Candidate, policy: Policy) -> Refusal | None:
    """The first rule a proposed group breaks, or None when one kernel can compute it under ``policy``.

    Order (the first that holds is the reason): non-fusable member (the edge's consumer, then its producer,
    then the rest), graph output inside, second anchor, prologue (dtype cast when it is a Cast), reduction
    in an anchor's group, iteration spaces, the policy's capabilities, its predicates. "First" is in the
    order of ``c.nodes``.
    """
    return check_parts((summarize(c),), c.producer, c.consumer, c.tensor, policy, _CandidateMembers(c),
                       c.infos, c.graph)


def check_parts(parts: Sequence[Summary], producer: str, consumer: str, tensor: str, policy: Policy,
                members: Members, infos: Mapping[str, NodeInfo], graph: Graph,
                opaque: Callable[[NodeInfo], Refusal] = non_fusable_refusal) -> Refusal | None:
    """:func:`check` of the union of disjoint node sets given by their summaries (the fusion pass keeps one
    per group, so a proposed merge is checked without walking the groups). ``opaque`` is
    :func:`non_fusable_refusal`, maybe cached."""
    mask = 0
    for p in parts:
        mask |= p.mask
    if mask & _M_OPAQUE:
        for n in (consumer, producer):
            if n in members and is_opaque(infos[n].role):
                return opaque(infos[n])
        first: tuple[int, NodeInfo] | None = None
        for p in parts:
            q = p.nonfusable
            if q is not None and (first is None or q[0] < first[0]):
                first = q
        return opaque(first[1])  # type: ignore[index]
    if mask & _M_GOUT:
        for _, n in sorted(g for p in parts for g in p.gout):
            for t, readers in members.output_readers(n):
                if any(x in members for x in readers):
                    return Refusal(CODES.GRAPH_OUTPUT, f"{t} is a graph output and must be written to memory")
    anchors: tuple[tuple[int, NodeInfo], ...] = ()
    if mask & _M_ANCHOR:
        for p in parts:
            if p.anchors:
                anchors += p.anchors
        if len(anchors) > 1:
            anchors = _by_pos(anchors)
            a, b = anchors[0][1], anchors[1][1]
            return Refusal(CODES.SECOND_ANCHOR, f"second compute anchor: {a.name} ({a.op_type}) and {b.name} "
                                                f"({b.op_type}); a kernel runs at most one")
    reductions: tuple[tuple[int, NodeInfo], ...] = ()
    if mask & _M_REDUCTION:
        for p in parts:
            if p.reductions:
                reductions += p.reductions
        if len(reductions) > 1:
            reductions = _by_pos(reductions)
    if anchors:
        a = anchors[0][1]
        pro, feeding = _prologue(members, infos, a, "dequant_prologue" in policy.allow)
        if pro is not None and pro.cast is not None:
            return Refusal(CODES.DTYPE_CAST, f"dtype cast: {pro.name} casts {pro.cast[0]}→{pro.cast[1]} for "
                                             f"anchor {a.name}, which reads its operands from memory as stored")
        if pro is not None:
            return Refusal(CODES.PROLOGUE, f"{pro.name} ({pro.op_type}) feeds compute anchor {a.name} "
                                           f"({a.op_type}); an anchor reads its operands from memory")
        if reductions:
            r = reductions[0][1]
            return Refusal(CODES.REDUCTION_IN_EPILOGUE, f"{r.name} ({r.op_type}) is a reduction; anchor "
                                                        f"{a.name} takes only an elementwise epilogue")
        if a.numel is None:
            return Refusal(CODES.SHAPE_UNKNOWN, f"the shape of {a.name} ({a.op_type}) is unknown")
        if mask & _M_EW:
            e = _first_off_space(parts, (a.numel,), feeding, members, infos)
            if e is not None:
                return _space(e, [a.numel], f"anchor {a.name} writes {a.numel}; an epilogue iterates its anchor's "
                                            "output")
    elif reductions:
        reds = [r for _, r in reductions]
        first_r = reds[0]
        for r in reds:
            if r.in_numel is None or (r.rows is None and r.numel is None):
                return Refusal(CODES.SHAPE_UNKNOWN, f"the shape of {r.name} ({r.op_type}) is unknown")
        if len(reds) > 1:
            own = next((r for r in reds if r.rows is None), None)
            if own is not None:
                other = next(r for r in reds if r is not own)
                return Refusal(CODES.REDUCTION_MISMATCH,
                               f"{own.name} ({own.op_type}) iterates a space of its own; it cannot share a loop "
                               f"nest with {other.name} ({other.op_type})")
            for r in reds[1:]:
                if not (same(r.in_numel, first_r.in_numel) and same(r.rows, first_r.rows)):  # type: ignore[arg-type]
                    return Refusal(CODES.REDUCTION_MISMATCH,
                                   f"{first_r.name} reduces {first_r.in_numel} elements to {first_r.rows} rows but "
                                   f"{r.name} reduces {r.in_numel} to {r.rows}; they cannot share a loop nest")
        spaces = [first_r.in_numel, first_r.rows if first_r.rows is not None else first_r.numel]
        allowed = [s for s in spaces if s is not None]
        if mask & _M_EW:
            e = _first_off_space(parts, allowed, (), members, infos)
            if e is not None:
                return _space(e, allowed, f"reduction {first_r.name} iterates {spaces[0]} elements and {spaces[1]} "
                                          "rows")
    allow = policy.allow
    if len(allow) < len(CAPABILITIES):  # the capabilities the group needs, in CAPABILITIES order
        if mask & _M_VIEW and "views" not in allow and (len(parts) > 1 or parts[0].size > 1):
            return _capability_refusal(policy, "views", None)
        if anchors and mask & _M_EW and "anchor_epilogues" not in allow:
            return _capability_refusal(policy, "anchor_epilogues", None)
        if (not anchors and not reductions and mask & _M_EW and "elementwise_chains" not in allow
                and sum(p.n_ew for p in parts) > 1):
            return _capability_refusal(policy, "elementwise_chains", None)
        if reductions and (len(reductions) > 1 or mask & _M_EW) and "reduction_blocks" not in allow:
            return _capability_refusal(policy, "reduction_blocks", None)
        if mask & _M_CAST and "casts" not in allow and sum(p.kernels for p in parts) > 1:
            cast: tuple[int, NodeInfo] | None = None
            for p in parts:
                q = p.cast
                if q is not None and (cast is None or q[0] < cast[0]):
                    cast = q
            return _capability_refusal(policy, "casts", cast[1])  # type: ignore[index]
    if policy.can_fuse:
        candidate = Candidate(producer, consumer, tensor, members.nodes(), infos, graph)
        for pred in policy.can_fuse:
            out = pred(candidate)
            if isinstance(out, Refusal):
                return out
            if out:
                return Refusal(CODES.POLICY, f"policy {policy.name}: {out}")
    return None


def _capability_refusal(policy: Policy, capability: str, cast: NodeInfo | None) -> Refusal:
    if cast is not None:
        return Refusal(CODES.DTYPE_CAST, f"dtype cast: {cast.name} casts {cast.cast[0]}→{cast.cast[1]}; "  # type: ignore[index]
                                         f"policy {policy.name} runs casts as kernels of their own")
    what = {"views": "views into other ops", "anchor_epilogues": "a compute anchor with its epilogue",
            "elementwise_chains": "elementwise ops with each other",
            "reduction_blocks": "a reduction with its neighbours"}[capability]
    return Refusal(CODES.POLICY, f"policy {policy.name} does not fuse {what} (no {capability!r})")


__all__ = ["DEQUANTIZE_OPS", "Members", "Summary", "check", "check_parts", "non_fusable_refusal", "summarize"]
