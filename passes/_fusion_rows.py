"""The rows of the fusion groups: members, FLOPs, bytes unfused and fused, the tensors in and out.

``bytes_fused`` is the group's crossing with every node running (``passes/_storage.py`` states the
convention; :meth:`Storage.traffic` is the only code that applies it); ``bytes_unfused`` is Σ of the
members' bytes from the costs pass. Groups of views only move nothing: their inputs are what they alias.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from graphcost._dims import Dim
from graphcost.graph import Node
from graphcost.passes._fusion_policy import NodeInfo, Role, is_opaque
from graphcost.passes._storage import Storage, sum_dims
from graphcost.passes.costs import NodeCost

_ANCHOR, _VIEW, _FREE, _CONTROL = Role.ANCHOR, Role.VIEW, Role.FREE, Role.CONTROL
_MISSING = object()


def _sum(values: list[Dim | None]) -> Dim | None:
    """:func:`sum_dims`, quicker when every value is an int."""
    total = 0
    for v in values:
        if type(v) is not int:
            return sum_dims(values)
        total += v
    return total


def group_rows(lists: Iterable[list[int]], names: Sequence[str], info_at: Sequence[NodeInfo],
               cost_at: Sequence[NodeCost | None], nodes_at: Sequence[Node], reads_at: Sequence[tuple[str, ...]],
               storage: Storage, group_cls: type[Any], in_order: bool) -> list[Any]:
    """One ``group_cls`` (``FusionGroup``) per member list (graph order), with ids ``g0``, ``g1``…. Members are
    positions in the storage's (topological) order, whose names, records, costs and data reads the ``*_at``
    lists hold; ``in_order`` when graph order is that order, else the crossing walks each group in it."""
    out: list[Any] = []
    base, graph_outputs, users = storage.base, storage.output_names, storage._users
    traffic_at = storage.traffic_at
    sums: dict[Any, Dim | None] = {}  # a symbolic count (or a pair, added) → sum_dims of it alone
    for gi, positions in enumerate(lists):
        if len(positions) == 1:
            out.append(_single(f"g{gi}", positions[0], names, info_at, cost_at, nodes_at, reads_at, storage, sums,
                               group_cls))
            continue
        members = [names[i] for i in positions]
        parts: tuple[tuple[str, Dim], ...] = ()
        inputs: dict[str, str] = {}
        outputs: dict[str, str] = {}
        inside: Any = members if len(members) < 8 else set(members)  # a short list is the quicker `in`
        kernels = [k for k in (info_at[i] for i in positions) if k.role is not _VIEW and k.role is not _FREE]
        rows = [cost_at[i] for i in positions]
        flops = _sum([None if c is None else c.flops for c in rows])
        unfused = _sum([None if c is None or c.bytes_read is None or c.bytes_written is None
                        else c.bytes_read + c.bytes_written for c in rows])
        fused: Dim | None
        if kernels:
            reads, writes = traffic_at(positions if in_order else sorted(positions), names, info_at, reads_at,
                                       nodes_at, inside)
            for b, (t, _, _) in reads.items():
                inputs[b] = t
            anchor = None
            opaque = control = False
            for k in kernels:
                if anchor is None and k.role is _ANCHOR:
                    anchor = k
                if is_opaque(k.role):
                    opaque = True  # such a node never shares its group with a kernel
                    control = control or k.role is _CONTROL
            dtype = anchor.dtype if anchor else kernels[0].dtype
            if control:  # opaque control flow: its body's own kernels, as the costs pass counted them
                fused = unfused
            else:
                fused = _sum([e[2] for e in (*reads.values(), *writes.values())])
                if storage.parts:
                    parts = tuple((t, b) for t, _, b in reads.values() if b is not None and b != storage.bytes_of(t))
        else:  # views only: what they alias
            anchor, dtype, opaque, fused = None, info_at[positions[0]].dtype, False, 0
            for i in positions:
                for t in reads_at[i][:1]:
                    inputs.setdefault(base.get(t, t), t)
        for i in positions:
            for t in nodes_at[i].outputs:
                if t:
                    if t not in graph_outputs:
                        for u in users.get(t, ()):
                            if u not in inside:
                                break
                        else:
                            continue
                    outputs.setdefault(base.get(t, t), t)
        out.append(group_cls(f"g{gi}", tuple(members), None if anchor is None else anchor.name, dtype, flops, unfused,
                             fused, tuple(inputs.values()), tuple(outputs.values()), opaque, parts))
    return out


def _single(gid: str, i: int, names: Sequence[str], info_at: Sequence[NodeInfo], cost_at: Sequence[NodeCost | None],
            nodes_at: Sequence[Node], reads_at: Sequence[tuple[str, ...]], storage: Storage,
            sums: dict[Any, Dim | None], group_cls: type[Any]) -> Any:
    """The row of a group of one node: :func:`group_rows`'s loop with ``inside == [m]`` (a node reads none of its
    own outputs), for the groups most graphs are made of (synthetic-100k: 50k of 70k; see ``Storage.traffic_one``)."""
    m = names[i]
    info = info_at[i]
    role = info.role
    flops, unfused = _one(cost_at[i], sums)
    base = storage.base
    inputs: dict[str, str] = {}
    if role is not _VIEW and role is not _FREE:
        reads, writes = storage.traffic_one(m, reads_at[i], nodes_at[i].outputs)
        for b, (t, _, _) in reads.items():
            inputs[b] = t
        anchor = m if role is _ANCHOR else None
        opaque = is_opaque(role)
        fused = unfused if role is _CONTROL else _sum([e[2] for e in (*reads.values(), *writes.values())])
    else:  # a view alone: what it aliases
        anchor, opaque, fused = None, False, 0
        for t in reads_at[i][:1]:
            inputs[base.get(t, t)] = t
    outputs: dict[str, str] = {}
    graph_outputs, users = storage.output_names, storage._users
    for t in nodes_at[i].outputs:
        if t:
            if t not in graph_outputs:
                for u in users.get(t, ()):
                    if u != m:
                        break
                else:
                    continue
            outputs.setdefault(base.get(t, t), t)
    c = cost_at[i]
    parts = c.parts if c is not None and role is not _CONTROL else ()  # what traffic_one read in part
    return group_cls(gid, (m,), anchor, info.dtype, flops, unfused, fused, tuple(inputs.values()),
                     tuple(outputs.values()), opaque, parts)


def _one(c: NodeCost | None, sums: dict[Any, Dim | None]) -> tuple[Dim | None, Dim | None]:
    """(FLOPs, bytes read + written) of one node, each symbolic sum simplified once per distinct formula."""
    if c is None:
        return None, None
    flops = c.flops
    if type(flops) is not int and flops is not None:
        got = sums.get(flops, _MISSING)
        if got is _MISSING:
            got = sums[flops] = sum_dims((flops,))
        flops = got  # type: ignore[assignment]
    br, bw = c.bytes_read, c.bytes_written
    if br is None or bw is None:
        return flops, None
    if type(br) is int and type(bw) is int:
        return flops, br + bw
    got = sums.get((br, bw), _MISSING)
    if got is _MISSING:
        got = sums[(br, bw)] = sum_dims((br + bw,))
    return flops, got  # type: ignore[return-value]
