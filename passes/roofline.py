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

Totals of times are sums over top-level nodes; ``totals.bound`` compares the summed compute and
memory times. The energy floor is DRAM bytes × energy per byte (on-chip traffic is not charged).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from graphcost._dims import Dim, evaluate, to_text
from graphcost.graph import Graph, TensorKind
from graphcost.hardware.spec import HardwareSpec
from graphcost.passes.costs import CostResult, NodeCost, tensor_bytes

Number = int | float


@dataclass(frozen=True, slots=True)
class NodeBound:
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


def _num(value: Dim | None, binding: Mapping[str, int]) -> Number | None:
    """The value of a count under ``binding``; ValueError (one line naming the dim or the formula) when the
    binding leaves a dim out or the formula has no real value under it."""
    if value is None:
        return None
    try:
        return evaluate(value, binding)
    except KeyError as e:
        raise ValueError(f"dim {e.args[0]!r} is not bound (roofline needs every dim of the counts)") from None
    except (TypeError, ValueError, ArithmeticError):  # sympy: "Cannot convert complex to float" (1/0 is zoo)
        raise ValueError(f"count {to_text(value)!r} has no real value under the binding "
                         "(it divides by zero or goes imaginary)") from None


def _onchip_bytes(graph: Graph | None, cost: NodeCost, binding: Mapping[str, int]) -> Number:
    """Activation bytes of a node that may stay on chip (produced and consumed inside the graph)."""
    if graph is None:
        return 0
    total: Number = 0
    outputs = set(graph.output_names)
    seen: set[str] = set()
    for ref in (*cost.inputs, *cost.outputs):
        if ref.name in seen or ref.name in outputs:
            continue
        seen.add(ref.name)
        t = graph.tensor(ref.name)
        if t is None or t.kind != TensorKind.ACTIVATION:
            continue
        b = tensor_bytes(t)
        if b is not None:
            total += _num(b, binding) or 0
    return total


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


def memory_time(hw: HardwareSpec, moved: Number, dram: Number) -> float:
    """Seconds to move ``moved`` bytes of which ``dram`` must come from DRAM (see the module docstring)."""
    t = dram / hw.memory_bandwidth
    inner = 0
    for capacity, bandwidth in hw.levels():
        t = max(t, max(0, moved - inner) / bandwidth)  # bytes the faster levels cannot hold pass this one
        inner = capacity
    return t


def split_dram(hw: HardwareSpec, moved: Number, resident: Number, *, capacity: bool = True) -> Number:
    """DRAM bytes of a working set of ``moved`` bytes, ``resident`` of which may already be on chip."""
    levels = hw.levels() if capacity else ()
    if not levels or moved > levels[-1][0]:
        return moved
    return moved - min(resident, moved)


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
    rows: list[NodeBound] = []
    t_flops: Number = 0
    t_macs: Number = 0
    t_read: Number = 0
    t_written: Number = 0
    t_dram: Number = 0
    t_compute = 0.0
    t_memory = 0.0
    t_roof = 0.0
    unknown = 0
    for c in costs.nodes:
        flops = _num(c.flops, binding)
        macs = _num(c.macs, binding)
        b_read = _num(c.bytes_read, binding)
        b_written = _num(c.bytes_written, binding)
        peak, peak_dtype = hw.peak_for(c.dtype)
        compute = None if flops is None else flops / peak
        moved = None if b_read is None or b_written is None else b_read + b_written
        dram: Number | None = moved
        memory = None
        if moved is not None:
            if use_onchip and c.depth == 0:
                resident = moved if residency == "warm" else _onchip_bytes(graph, c, binding)
                dram = split_dram(hw, moved, resident)
                memory = memory_time(hw, moved, dram)
            else:
                memory = moved / hw.memory_bandwidth
        intensity = None if flops is None or not moved else flops / moved
        if compute is None and memory is None:
            roof, bound = None, None
        elif compute is None:
            roof, bound = memory, "memory"
        elif memory is None:
            roof, bound = compute, "compute"
        else:
            roof = max(compute, memory)
            bound = "compute" if compute >= memory else "memory"
        rows.append(NodeBound(c.name, flops, macs, b_read, b_written, dram, intensity, peak_dtype, compute, memory,
                              roof, bound))
        if c.depth != 0:
            continue
        if flops is None:
            unknown += 1
        t_flops += flops or 0
        t_macs += macs or 0
        t_read += b_read or 0
        t_written += b_written or 0
        t_dram += dram or 0
        t_compute += compute or 0.0
        t_memory += memory or 0.0
        t_roof += roof or 0.0
    total_bytes = t_read + t_written
    totals = Totals(
        flops=t_flops, macs=t_macs, bytes_read=t_read, bytes_written=t_written, bytes=total_bytes,
        dram_bytes=t_dram, intensity=(t_flops / total_bytes) if total_bytes else None,
        compute_time_s=t_compute, memory_time_s=t_memory, roofline_time_s=t_roof,
        bound="compute" if t_compute >= t_memory else "memory",
        energy_floor_j=t_dram * hw.energy_per_byte, unknown_nodes=unknown,
        nodes=sum(1 for c in costs.nodes if c.depth == 0))
    return Bounds(tuple(rows), totals)
