"""The rows of the fusion groups: members, FLOPs, bytes unfused and fused, the tensors in and out.

``bytes_fused`` is the group's crossing with every node running (``passes/_storage.py`` states the
convention; :meth:`Storage.traffic` is the only code that applies it); ``bytes_unfused`` is Σ of the
members' bytes from the costs pass. Groups of views only move nothing: their inputs are what they alias.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from graphcost._dims import Dim
from graphcost.graph import Graph
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


def group_rows(lists: Iterable[list[str]], graph: Graph, infos: Mapping[str, NodeInfo],
               costs: Mapping[str, NodeCost], storage: Storage, group_cls: type[Any], in_order: bool) -> list[Any]:
    """One ``group_cls`` (``FusionGroup``) per member list (graph order), with ids ``g0``, ``g1``…; ``in_order``
    when graph order is the storage's (topological) order, else the crossing walks each group in that order."""
    out: list[Any] = []
    base, graph_outputs, users = storage.base, storage.output_names, storage._users
    sreads, node_of, traffic, pos = storage.reads, graph.node, storage.traffic, storage.pos
    sums: dict[Any, Dim | None] = {}  # a symbolic count (or a pair, added) → sum_dims of it alone
    for i, members in enumerate(lists):
        inputs: dict[str, str] = {}
        outputs: dict[str, str] = {}
        inside: Any = members if len(members) < 8 else set(members)  # a short list is the quicker `in`
        kernels = [k for k in (infos[m] for m in members) if k.role is not _VIEW and k.role is not _FREE]
        if len(members) == 1:
            flops, unfused = _one(costs.get(members[0]), sums)
        else:
            rows = [costs.get(m) for m in members]
            flops = _sum([None if c is None else c.flops for c in rows])
            unfused = _sum([None if c is None or c.bytes_read is None or c.bytes_written is None
                            else c.bytes_read + c.bytes_written for c in rows])
        fused: Dim | None
        if kernels:
            reads, writes = traffic(members if in_order or len(members) == 1 else
                                    sorted(members, key=lambda x: pos.get(x, -1)), inside)
            for b, (t, _, _) in reads.items():
                inputs[b] = t
            anchor = None
            opaque = control = False
            for k in kernels:
                if anchor is None and k.role is _ANCHOR:
                    anchor = k.name
                if is_opaque(k.role):
                    opaque = True  # such a node never shares its group with a kernel
                    control = control or k.role is _CONTROL
            dtype = infos[anchor].dtype if anchor else kernels[0].dtype
            if control:  # opaque control flow: its body's own kernels, as the costs pass counted them
                fused = unfused
            else:
                fused = _sum([e[2] for e in (*reads.values(), *writes.values())])
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
        out.append(group_cls(f"g{i}", tuple(members), anchor, dtype, flops, unfused, fused, tuple(inputs.values()),
                             tuple(outputs.values()), opaque))
    return out


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
