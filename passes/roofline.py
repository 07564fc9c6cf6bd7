"""Roofline: costs × hardware → per-node and total lower bounds on time, and the energy floor.

Per node: compute time = FLOPs / peak(dtype), memory time = the time its bytes need at the levels they can come
from, bound = the larger. The node's dtype is its first input's; the peak for it follows ``HardwareSpec.peak_for``.

Capacity is one of the limits. A spec may name on-chip levels (``HardwareSpec.levels()``: capacity and bandwidth,
smallest first, e.g. L1, L2, L3). A node's working set is its bytes read + written. Its *resident* bytes are the
ones that may already be on chip: activations produced and consumed inside the graph (``residency="cold"``, one
inference from a cold start: weights, graph inputs and graph outputs cross DRAM), or every byte
(``residency="warm"``, repeated runs of a model whose whole footprint fits the largest level — what a benchmark
loop measures). When the working set fits the largest level, ``dram_bytes`` = bytes − resident bytes; otherwise
every byte is a DRAM byte. Memory time is then a lower bound over the levels, each level a separate limit:

    max( dram_bytes / DRAM bandwidth,
         max over on-chip levels i of  max(0, bytes − capacity of level i−1) / bandwidth of level i )

(all bytes pass the innermost level; only what a faster level cannot hold must come through a slower one).
The limits overlap in time, so they combine with ``max``, never a sum. Specs without on-chip levels bound
everything at DRAM bandwidth. ``dram_bytes`` is reported per node so the level every byte comes from is visible.

One bound: :func:`kernel_bound` is the only place this formula is written. The report's nodes, the fusion
section (unfused: Σ of node bounds; fused: the group as one kernel), the gap's set bounds and the estimates
built on them (batchnorm, what-if, LLM, training, parallel) all call it, so one node has one bound everywhere;
callers that charge every byte at DRAM on purpose pass ``capacity=False``. A :class:`Bound` adds with ``+``.

Totals of times are sums over top-level nodes; ``totals.bound`` compares the summed compute and
memory times. The energy floor is DRAM bytes × energy per byte (on-chip traffic is not charged).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from graphcost._dims import Dim, evaluate, to_text
from graphcost.graph import Graph, TensorKind
from graphcost.hardware.spec import HardwareSpec
from graphcost.ops import Kind, lookup
from graphcost.passes.costs import CostResult, NodeCost, tensor_bytes

Number = int | float


class NodeBound(NamedTuple):
    """One node's counts under the binding and its :func:`kernel_bound`. A NamedTuple, like :class:`Bound`: one is
    built per node, 0.50 µs against a frozen dataclass's 2.51 µs (measured side by side, CPython 3.11)."""

    name: str
    flops: Number | None
    macs: Number | None
    bytes_read: Number | None
    bytes_written: Number | None
    dram_bytes: Number | None
    intensity: float | None
    peak_dtype: str
    compute_time_s: float | None
    memory_time_s: float | None
    roofline_time_s: float | None
    bound: str | None


@dataclass(frozen=True)
class Totals:
    flops: Number
    macs: Number
    bytes_read: Number
    bytes_written: Number
    bytes: Number
    dram_bytes: Number
    intensity: float | None
    compute_time_s: float
    memory_time_s: float
    roofline_time_s: float
    bound: str
    energy_floor_j: float
    unknown_nodes: int
    nodes: int


@dataclass(frozen=True)
class Bounds:
    nodes: tuple[NodeBound, ...]
    totals: Totals


def count_value(value: Dim | None, binding: Mapping[str, int]) -> Number | None:
    """The value of a count under ``binding`` (None stays None); ValueError, one line naming the dim or the
    formula, when the binding leaves a dim out or the formula has no real value under it. Every bound (nodes,
    fusion groups) evaluates its counts here."""
    if value is None:
        return None
    try:
        return evaluate(value, binding)
    except KeyError as e:
        raise ValueError(f"dim {e.args[0]!r} is not bound (pass it in the binding)") from None
    except (TypeError, ValueError, ArithmeticError):  # sympy: "Cannot convert complex to float" (1/0 is zoo)
        raise ValueError(f"count {to_text(value)!r} has no real value under the binding "
                         "(it divides by zero or goes imaginary)") from None


class _OnChip:
    """Activation bytes of a node that may stay on chip (produced and consumed inside the graph). A view's
    output is what its storage is (``passes/_storage.py``): a Reshape of a graph input is not on chip.

    Each tensor's share is worked out once (it is the same for its producer and every consumer), and the graph's
    outputs are a set made once, not per node: cold roofline on a100-sxm-40gb (on-chip levels), synthetic-10k
    0.58× and Faster R-CNN 0.57× the time of before (measured side by side, with the rest of this pass's changes)."""

    def __init__(self, graph: Graph, binding: Mapping[str, int]) -> None:
        self.graph, self.binding = graph, binding
        self.outputs = set(graph.output_names)
        self.shares: dict[str, Number | None] = {}

    def __call__(self, cost: NodeCost) -> Number:
        total: Number = 0
        shares = self.shares
        seen: set[str] = set()
        parts = dict(cost.parts) if cost.parts else None
        for ref in (*cost.inputs, *cost.outputs):
            name = ref.name
            if name in seen:
                continue
            seen.add(name)
            share = shares[name] if name in shares else self._share(name)
            if share is not None:
                if parts is not None and name in parts:  # read in part: only that part comes from chip
                    share = min(share, count_value(parts[name], self.binding) or 0)
                total += share
        return total

    def _share(self, name: str) -> Number | None:
        """The tensor's bytes under the binding when it may stay on chip, else None."""
        graph, outputs = self.graph, self.outputs
        share: Number | None = None
        t = graph.tensor(name)
        if name not in outputs and t is not None and t.kind == TensorKind.ACTIVATION:
            root = _storage_root(graph, name)
            owner = t if root == name else graph.tensor(root)
            if owner is not None and owner.kind == TensorKind.ACTIVATION and root not in outputs:
                b = tensor_bytes(t)
                if b is not None:
                    share = count_value(b, self.binding) or 0
        self.shares[name] = share
        return share


def _storage_root(graph: Graph, name: str) -> str:
    """The tensor owning ``name``'s storage: views (registry kind VIEW: Reshape, Squeeze, Identity…) alias
    their first input."""
    for _ in range(10_000):
        node = graph.producer(name)
        if node is None or not node.inputs or not node.inputs[0]:
            return name
        entry = lookup(node.domain, node.op_type)
        if entry is None or entry.kind != Kind.VIEW:
            return name
        name = node.inputs[0]
    return name


RESIDENCIES = ("cold", "warm")


def applied_residency(asked: str, hw: HardwareSpec, footprint: Number, *, capacity: bool = True
                      ) -> tuple[str, str | None]:
    """The residency the bounds can use, and why not when warm was asked and cannot apply.

    Warm only when the spec has on-chip levels and ``footprint`` (weights + the smallest possible activation
    peak) fits the largest of them; otherwise cold, with the reason when warm was asked for.
    """
    if asked not in RESIDENCIES:
        raise ValueError(f"residency must be one of {', '.join(RESIDENCIES)}, got {asked!r}")
    levels = hw.levels() if capacity else ()
    if asked == "cold" or not levels:
        return "cold", None
    if footprint > levels[-1][0]:
        return "cold", (f"residency warm: the model's footprint ({footprint:,} B of weights and activations) exceeds "
                        f"the largest on-chip level ({levels[-1][0]:,} B); bounds use cold residency")
    return "warm", None


def memory_time(hw: HardwareSpec, moved: Number, dram: Number, *, efficiency: float = 1.0) -> float:
    """Seconds to move ``moved`` bytes of which ``dram`` must come from DRAM (see the module docstring);
    ``efficiency`` scales the DRAM bandwidth (1.0: the spec's figure)."""
    return _memory(hw.levels(), _dram_bandwidth(hw, efficiency), moved, dram)


def _memory(levels: tuple[tuple[int, float], ...], bandwidth: float, moved: Number, dram: Number) -> float:
    t = dram / bandwidth
    inner = 0
    for capacity, level_bandwidth in levels:
        t = max(t, max(0, moved - inner) / level_bandwidth)  # bytes the faster levels cannot hold pass this one
        inner = capacity
    return t


def _dram_bandwidth(hw: HardwareSpec, efficiency: float) -> float:
    # the spec's figure itself at 1.0, so that the division is the one it always was (int specs stay exact)
    return hw.memory_bandwidth if efficiency == 1.0 else hw.memory_bandwidth * efficiency


def split_dram(hw: HardwareSpec, moved: Number, resident: Number, *, capacity: bool = True) -> Number:
    """DRAM bytes of a working set of ``moved`` bytes, ``resident`` of which may already be on chip."""
    return _split(hw.levels() if capacity else (), moved, resident)


def _split(levels: tuple[tuple[int, float], ...], moved: Number, resident: Number) -> Number:
    if not levels or moved > levels[-1][0]:
        return moved
    return moved - min(resident, moved)


def _add(a: Number | float | None, b: Number | float | None) -> Number | float | None:
    return None if a is None or b is None else a + b


class Bound(NamedTuple):
    """The roofline bound of one kernel, or of kernels run one after another (their sum with ``+``).

    ``bytes`` is the working set moved, ``dram_bytes`` the part that must cross DRAM. For one kernel
    ``time_s`` = max(compute_s, memory_s) (the known one when the other is unknown); a sum adds every field,
    so ``time_s`` of a sum is the sequential bound Σ max(...), never max(Σ, Σ). None is unknown and stays
    unknown under ``+`` (:meth:`known` reads it as 0 where the caller counts unknowns apart).

    Frozen as a NamedTuple rather than a frozen dataclass: one is built per node in ``roofline`` and again in
    the fusion section, and a NamedTuple builds in 0.45 µs against 1.46 µs (measured, CPython 3.11; 100k
    nodes × 2). ``+`` is the field-wise sum defined here, not tuple concatenation.
    """

    flops: Number | None
    bytes: Number | None
    dram_bytes: Number | None
    compute_s: float | None
    memory_s: float | None
    time_s: float | None

    @staticmethod
    def zero() -> Bound:
        return Bound(0, 0, 0, 0.0, 0.0, 0.0)

    @staticmethod
    def of(flops: Number | None, moved: Number | None, dram: Number | None, compute: float | None,
           memory: float | None) -> Bound:
        """One kernel from its two times: ``time_s`` = the larger (ties: compute)."""
        if compute is None:
            time = memory
        elif memory is None or not memory > compute:
            time = compute
        else:
            time = memory
        return Bound(flops, moved, dram, compute, memory, time)

    def __add__(self, other: Bound) -> Bound:  # type: ignore[override]
        return Bound(_add(self.flops, other.flops), _add(self.bytes, other.bytes),  # type: ignore[arg-type]
                     _add(self.dram_bytes, other.dram_bytes), _add(self.compute_s, other.compute_s),  # type: ignore[arg-type]
                     _add(self.memory_s, other.memory_s), _add(self.time_s, other.time_s))  # type: ignore[arg-type]

    def known(self) -> Bound:
        """Unknown fields read as 0 (counts) or 0.0 (seconds): for totals that count unknown kernels apart."""
        return Bound(self.flops or 0, self.bytes or 0, self.dram_bytes or 0, self.compute_s or 0.0,
                     self.memory_s or 0.0, self.time_s or 0.0)

    @property
    def bound(self) -> str | None:
        """"compute" when compute time ≥ memory time, else "memory" (the known one when one is unknown)."""
        if self.compute_s is None and self.memory_s is None:
            return None
        if self.memory_s is None:
            return "compute"
        if self.compute_s is None:
            return "memory"
        return "compute" if self.compute_s >= self.memory_s else "memory"


def kernel_bound(flops: Number | None, moved: Number | None, hw: HardwareSpec, *, dtype: str,
                 resident: Number = 0, capacity: bool = True, efficiency: float = 1.0) -> Bound:
    """THE roofline bound of one kernel; every time graphcost reports comes from here.

    ``flops`` at the peak of ``dtype`` (``HardwareSpec.peak_for``); ``moved`` bytes read + written, of which
    ``resident`` may already be on chip (activations for a cold start, every byte when warm, 0 when the caller
    knows none). ``capacity=True`` applies the spec's on-chip levels (``split_dram``, ``memory_time``: a
    working set over the largest level crosses DRAM whole); ``capacity=False`` charges every byte at DRAM
    bandwidth — a deliberate model for callers that say so (LLM decode, per-device training estimates).
    ``efficiency`` scales the DRAM bandwidth. Unknown counts (None) give unknown times.
    """
    compute = None if flops is None else flops / hw.peak(dtype)
    if moved is None:
        return Bound.of(flops, None, None, compute, None)
    levels = hw.levels() if capacity else ()
    dram = _split(levels, moved, resident)
    return Bound.of(flops, moved, dram, compute, _memory(levels, _dram_bandwidth(hw, efficiency), moved, dram))


def sum_bounds(bounds: Iterable[Bound]) -> Bound:
    """Σ of bounds, equal to folding ``+`` from :meth:`Bound.zero` (the same order, the same floats) without a
    record per step."""
    f: Number | None = 0
    m: Number | None = 0
    d: Number | None = 0
    c: float | None = 0.0
    mem: float | None = 0.0
    t: float | None = 0.0
    for b in bounds:
        f, m, d = _add(f, b.flops), _add(m, b.bytes), _add(d, b.dram_bytes)
        c, mem, t = _add(c, b.compute_s), _add(mem, b.memory_s), _add(t, b.time_s)  # type: ignore[assignment]
    return Bound(f, m, d, c, mem, t)


def roofline(
    costs: CostResult,
    hw: HardwareSpec,
    binding: Mapping[str, int],
    *,
    graph: Graph | None = None,
    capacity: bool = True,
    residency: str = "cold",
) -> Bounds:
    """Bounds for every node; totals over top-level nodes. ``binding`` must bind every free dim."""
    if residency not in RESIDENCIES:
        raise ValueError(f"residency must be one of {', '.join(RESIDENCIES)}, got {residency!r}")
    use_onchip = bool(capacity and hw.levels() and (graph is not None or residency == "warm"))
    onchip_bytes = _OnChip(graph, binding) if use_onchip and residency == "cold" and graph is not None else None
    rows: list[NodeBound] = []
    peak_dtypes: dict[str, str] = {}
    top: list[Bound] = []
    t_macs: Number = 0
    t_read: Number = 0
    t_written: Number = 0
    unknown = 0
    for c in costs.nodes:
        # a count that is already an int is its own value (count_value's first case), without the call
        flops, macs, b_read, b_written = c.flops, c.macs, c.bytes_read, c.bytes_written
        if flops.__class__ is not int:
            flops = count_value(flops, binding)
        if macs.__class__ is not int:
            macs = count_value(macs, binding)
        if b_read.__class__ is not int:
            b_read = count_value(b_read, binding)
        if b_written.__class__ is not int:
            b_written = count_value(b_written, binding)
        peak_dtype = peak_dtypes.get(c.dtype)
        if peak_dtype is None:
            peak_dtype = peak_dtypes[c.dtype] = hw.peak_for(c.dtype)[1]
        moved = None if b_read is None or b_written is None else b_read + b_written
        onchip = use_onchip and c.depth == 0
        resident: Number = 0
        if onchip and moved is not None:
            resident = moved if residency == "warm" else onchip_bytes(c) if onchip_bytes is not None else 0
        k = kernel_bound(flops, moved, hw, dtype=c.dtype, resident=resident, capacity=onchip)
        intensity = None if flops is None or not moved else flops / moved
        rows.append(NodeBound(c.name, flops, macs, b_read, b_written, k.dram_bytes, intensity, peak_dtype,
                              k.compute_s, k.memory_s, k.time_s, k.bound))
        if c.depth != 0:
            continue
        if flops is None:
            unknown += 1
        top.append(k.known())
        t_macs += macs or 0
        t_read += b_read or 0
        t_written += b_written or 0
    total = sum_bounds(top)
    t_flops, t_dram, t_compute, t_memory, t_roof = total.flops or 0, total.dram_bytes or 0, \
        total.compute_s or 0.0, total.memory_s or 0.0, total.time_s or 0.0
    total_bytes = t_read + t_written
    totals = Totals(
        flops=t_flops, macs=t_macs, bytes_read=t_read, bytes_written=t_written, bytes=total_bytes,
        dram_bytes=t_dram, intensity=(t_flops / total_bytes) if total_bytes else None,
        compute_time_s=t_compute, memory_time_s=t_memory, roofline_time_s=t_roof,
        bound=total.bound or "compute",
        energy_floor_j=t_dram * hw.energy_per_byte, unknown_nodes=unknown, nodes=len(top))
    return Bounds(tuple(rows), totals)
