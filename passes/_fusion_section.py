"""Fusion groups on a device: each group's FLOPs, bytes and times under one binding, and the totals.

``time_unfused`` = Σ of the group's nodes' ``kernel_bound`` times, each node as the report's ``nodes`` bound it
(the same capacity and residency); ``time_fused`` = ``kernel_bound`` of the group as one kernel. The groups
themselves come from ``passes/fusion.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from graphcost._dims import Dim
from graphcost._gc import paused as gc_paused
from graphcost.graph import TensorKind
from graphcost.hardware.spec import HardwareSpec
from graphcost.passes._fusion_policy import Role
from graphcost.passes.costs import NodeCost, tensor_bytes
from graphcost.passes.roofline import RESIDENCIES, Bound, count_value, kernel_bound, sum_bounds

if TYPE_CHECKING:
    from graphcost.passes.fusion import Boundary, FusionResult

Number = int | float
_MISSING = object()
_CONTROL = Role.CONTROL


@dataclass(frozen=True)
class GroupNumbers:
    """One group's numbers for a binding of the dims on one device (seconds, bytes, FLOPs). Slotted as
    ``NodeInfo`` (passes/_fusion_roles.py): one per group."""

    __slots__ = (
        "anchor",
        "bytes_fused",
        "bytes_unfused",
        "flops",
        "id",
        "inputs",
        "nodes",
        "outputs",
        "time_fused_s",
        "time_unfused_s",
    )

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

    def to_dict(self, *, lazy: bool = False) -> dict[str, Any]:
        """The JSON ``fusion`` object: policy, groups, boundaries, totals. ``lazy``: groups and boundaries as
        iterators of their dicts, for a writer that streams them (``Report.json_chunks``)."""
        groups = (g.to_dict() for g in self.groups)
        boundaries = (b.to_dict() for b in self.boundaries)
        if not lazy:
            return {"policy": self.policy, "groups": list(groups), "boundaries": list(boundaries),
                    "totals": self.totals.to_dict()}
        return {"policy": self.policy, "groups": groups, "boundaries": boundaries, "totals": self.totals.to_dict()}


def node_time(cost: NodeCost, hw: HardwareSpec, binding: Mapping[str, int], *, resident: Number = 0,
              capacity: bool = True) -> float | None:
    """``kernel_bound`` time of one node as its own kernel, ``resident`` of its bytes possibly on chip
    (None when both times are unknown)."""
    flops = count_value(cost.flops, binding)
    moved = None if cost.bytes_read is None or cost.bytes_written is None else \
        count_value(cost.bytes_read + cost.bytes_written, binding)
    return kernel_bound(flops, moved, hw, dtype=cost.dtype, resident=resident, capacity=capacity).time_s


def fusion_section(result: FusionResult, hw: HardwareSpec, binding: Mapping[str, int], *, capacity: bool = True,
                   residency: str = "cold") -> FusionSection:
    """Numbers for every group: time_unfused = Σ of its nodes' ``kernel_bound`` times, each node as the report's
    ``nodes`` bound it (the same capacity and residency); time_fused = ``kernel_bound`` of the group as one
    kernel: its FLOPs at the peak of the anchor's (or first kernel's) dtype, ``bytes_fused`` with the
    activations crossing the group resident (cold) or every byte (warm)."""
    with gc_paused():  # a few objects per node, freed by reference counting (graphcost/_gc.py)
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
    base_of = result.storage.base_of

    values: dict[Any, Any] = {}  # symbolic count (or a pair of them, summed) → its value
    bounds: dict[tuple[Any, ...], Bound] = {}  # (flops, bytes, dtype, resident, capacity) → kernel_bound

    def bound(f: Number | None, moved: Number | None, dtype: str, resident: Number, cap: bool) -> Bound:
        """``kernel_bound`` on ``hw``, once per distinct argument tuple of ints (a Bound is immutable; a float
        is not cached: ``1 == 1.0`` would hand back a bound whose counts print otherwise). A model of repeated
        blocks asks the same few tuples again and again (synthetic-10k: 17k asks, 9 distinct): synthetic-100k's
        section took 0.57 s computing each and 0.39 s with this cache (best of 2, side by side)."""
        if (type(f) is int or f is None) and (type(moved) is int or moved is None) and type(resident) is int:
            key = (f, moved, dtype, resident, cap)
            got = bounds.get(key)
            if got is None:
                got = bounds[key] = kernel_bound(f, moved, hw, dtype=dtype, resident=resident, capacity=cap)
            return got
        return kernel_bound(f, moved, hw, dtype=dtype, resident=resident, capacity=cap)

    def num(value: Dim | None) -> Number | None:
        got = values.get(value, _MISSING)
        if got is _MISSING:
            got = values[value] = count_value(value, binding)
        return got  # type: ignore[return-value]

    def resident_of(tensors: Iterable[str], parts: Mapping[str, Dim] | None = None) -> Number:
        """Bytes of ``tensors`` that may stay on chip: activations that are not graph outputs (roofline's
        ``_onchip_bytes``), each distinct tensor once; a view is what its storage is (a view of a graph
        input is not an activation on chip). Of a tensor read only in part (``parts``), only that part."""
        total: Number = 0
        for name in dict.fromkeys(tensors):
            if parts and name in parts:
                whole = resident_of((name,))
                total += min(whole, num(parts[name]) or 0) if whole else 0
                continue
            got = activations.get(name)
            if got is None:
                got = 0
                t = graph.tensor(name)
                root = base_of(name)
                if root != name and graph.tensor(root) is not None:
                    t = graph.tensor(root)
                if name not in outputs and root not in outputs and t is not None and t.kind == TensorKind.ACTIVATION:
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
        missing = False
        # a control node is opaque, and so its group (``_fusion_rows.py``): the others need no look-up per node
        control = g.opaque and any(infos[n].role is _CONTROL for n in g.nodes)
        for n in g.nodes:
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
                    moved = values[(br, bw)] = count_value(br + bw, binding)
            resident: Number = 0
            if onchip and moved is not None and c.depth == 0:
                resident = moved if warm else resident_of((r.name for r in (*c.inputs, *c.outputs)),
                                                          dict(c.parts) if c.parts else None)
            k = bound(f, moved, c.dtype, resident, onchip and c.depth == 0)
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
                resident = fus if warm else resident_of((*g.inputs, *g.outputs), dict(g.parts) if g.parts else None)
            fused = bound(flops, fus, g.dtype, resident, onchip)
            kernels.append(fused)
            time_fus = fused.time_s
        if flops is None or unf is None or fus is None or missing:
            unknown += 1
        if unf is not None and fus is not None:
            b_unf += unf
            b_fus += fus
        t_unf += time_unf or 0.0
        t_fus += time_fus or 0.0
        rows.append(GroupNumbers(g.id, g.nodes, g.anchor, flops, unf, fus, time_unf, time_fus, g.inputs, g.outputs))
    totals = FusionTotals(len(rows), b_unf, b_fus, b_unf - b_fus, t_unf, t_fus, t_unf - t_fus, unknown)
    return FusionSection(result.policy, tuple(rows), result.boundaries, totals, result, tuple(kernels))
