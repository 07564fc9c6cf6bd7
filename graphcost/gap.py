"""The gap report: measured time next to the bound, per model, ORT kernel and fusion group, with a diagnosis.

Bounds here are the bounds of *sets of nodes* executed as one kernel: FLOPs = the sum over the set, bytes = the
set's compulsory traffic (each storage read from outside the set once, each tensor the set writes that is read
outside it, or is a graph output, once: ``passes/_storage.py``, the convention fusion groups use too), timed
with the capacity-aware memory time of ``passes/roofline.py`` and ``residency`` (``"warm"`` by default: a
benchmark loop re-runs a model whose footprint may sit on chip).

Rows:
- **kernel** — one unit of ORT's optimized graph (kernels linked by minted tensors, ``graphcost.measure.fusion_ort``)
  and the source nodes it computes; observed = the median over profiled runs of the unit's kernel times.
  A layout/dtype conversion unit computes no source node: its bound moves its tensor in and out once.
- **group** — an ideal fusion group (``passes/fusion.py``), merged with any other group an ORT unit spans;
  bound = the merged set as one kernel, observed = the sum of its units. Efficiency below the kernel rows'
  says ORT left fusion on the table there.
- **model** — per runner: observed = the latency median (p99 for the budget); bound = the smaller of the
  ideal groups' and ORT's units' summed bounds (the fastest partition either knows), with the one-kernel floor
  (the whole model as one set) beside it.

Diagnosis from ratio = observed ÷ bound (``efficiency`` = bound ÷ observed), thresholds in ``BANDS``:
below 1 beyond noise — the accounting (or the timer) is wrong; up to 1.5 — at the roof; up to 8 — bytes the
accounting does not see (re-reads, spills, layout copies); up to 20 — kernel inefficiency; 20 and more —
overhead (launch, dispatch, allocation, Python). Noise = the timer's resolution + ``RELATIVE_NOISE`` × bound.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from graphcost._dims import Dim, evaluate
from graphcost.budget import Budget as Budget  # moved: graphcost/budget.py; kept importable from here
from graphcost.graph import Graph, TensorKind
from graphcost.hardware.spec import HardwareSpec
from graphcost.passes._storage import Storage
from graphcost.passes.costs import NodeCost, tensor_bytes
from graphcost.passes.roofline import Bound, kernel_bound

Number = int | float

PROFILER_RESOLUTION_S = 1e-6
"""ORT's profiler writes kernel durations in whole microseconds."""
WALL_RESOLUTION_S = 1e-6
"""perf_counter around a session.run or a framework call: well under a microsecond, plus call jitter."""
RELATIVE_NOISE = 0.05
"""Clock and scheduling drift between the roof microbenchmarks and the measured run."""


@dataclass(frozen=True)
class Band:
    code: str
    upto: float  # ratio (observed ÷ bound) below which this band applies
    verdict: str
    next_steps: tuple[str, ...]


BANDS: tuple[Band, ...] = (
    Band("at-roof", 1.5, "at the roof: the kernel is as fast as its bytes or FLOPs allow",
         ("stop tuning this kernel; only less work helps: fuse it with its neighbours, lower the precision, "
          "or change the algorithm",)),
    Band("bytes-not-counted", 8.0, "a few times the bound: it moves bytes the accounting does not count",
         ("look for re-reads (tiling that does not fit the cache), spills, layout conversions and dtype casts "
          "around it",
          "compare against an ORT level or a runner that fuses it; check the kernel's measured traffic with a "
          "profiler's memory counters")),
    Band("inefficient", 20.0, "far from the roof but not overhead-bound: the kernel itself is slow",
         ("check that all threads work (intra-op threads, parallel dims large enough) and that the kernel "
          "vectorizes",
          "try another implementation of the op (a library kernel, another execution provider, another layout)")),
    Band("overhead", float("inf"), "20× or more over the bound: overhead dominates (launch, dispatch, "
         "allocation, Python)",
         ("give each call more work: a larger batch, fused ops, fewer tiny kernels",
          "remove per-call costs: CUDA graphs / torch.compile / jax.jit / tf.function, I/O binding, no host "
          "syncs or allocations in the loop")),
)
ACCOUNTING = Band("accounting", 1.0, "MEASURED FASTER THAN THE BOUND: the accounting or the timer is wrong",
                  ("treat it as a bug: check the FLOP/byte rules of these nodes, the shapes the bound used "
                   "(dims bound to the measured inputs?), the hardware roofs (measured with graphcost hardware "
                   "measure?), and the residency of the bytes",
                   "check the timer: warm-up discarded, the device synchronized before reading the clock"))


@dataclass(frozen=True)
class Diagnosis:
    code: str
    verdict: str
    next_steps: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "verdict": self.verdict, "next_steps": list(self.next_steps)}


def diagnose(observed_s: float, bound_s: float | None, resolution_s: float) -> Diagnosis:
    """The band of ``observed ÷ bound``; an unknown bound gives code ``unknown``."""
    if bound_s is None:
        return Diagnosis("unknown", "no bound: a node in it has no cost rule or an unknown shape",
                         ("see the analyze report's unknown nodes",))
    if not bound_s > 0:  # views and metadata ops move nothing: any time they take is overhead
        band = BANDS[-1]
        return Diagnosis(band.code, band.verdict, band.next_steps)
    if faster_than_bound(observed_s, bound_s, resolution_s):
        return Diagnosis(ACCOUNTING.code, ACCOUNTING.verdict, ACCOUNTING.next_steps)
    ratio = observed_s / bound_s
    band = next(b for b in BANDS if ratio < b.upto)
    return Diagnosis(band.code, band.verdict, band.next_steps)


def faster_than_bound(observed_s: float, bound_s: float, resolution_s: float) -> bool:
    """Faster than the bound beyond timer noise (resolution + RELATIVE_NOISE of the bound)."""
    return observed_s + resolution_s + RELATIVE_NOISE * bound_s < bound_s


@dataclass(frozen=True)
class SetBound:
    """The bound of a set of nodes run as one kernel."""

    flops: Number | None
    bytes: Number | None
    dram_bytes: Number | None
    compute_s: float | None
    memory_s: float | None
    dtype: str

    @property
    def bound_s(self) -> float | None:
        if self.compute_s is None or self.memory_s is None:
            return None
        return Bound.of(self.flops, self.bytes, self.dram_bytes, self.compute_s, self.memory_s).time_s

    @property
    def bound(self) -> str | None:
        if self.compute_s is None or self.memory_s is None:
            return None
        return "compute" if self.compute_s >= self.memory_s else "memory"

    @property
    def intensity(self) -> float | None:
        return None if self.flops is None or not self.bytes else self.flops / self.bytes

    def sustained(self, clock: float) -> float | None:
        """The bound when the compute clock runs at ``clock`` × the clock the roofs were measured at."""
        if self.compute_s is None or self.memory_s is None:
            return None
        return max(self.compute_s / clock, self.memory_s)

    def __add__(self, other: SetBound) -> SetBound:
        def add(a: Number | None, b: Number | None) -> Number | None:
            return None if a is None or b is None else a + b

        return SetBound(add(self.flops, other.flops), add(self.bytes, other.bytes),
                        add(self.dram_bytes, other.dram_bytes),
                        add(self.compute_s, other.compute_s), add(self.memory_s, other.memory_s),  # type: ignore[arg-type]
                        self.dtype)

    def to_dict(self) -> dict[str, Any]:
        return {"flops": self.flops, "bytes": self.bytes, "dram_bytes": self.dram_bytes,
                "intensity": self.intensity, "compute_time_s": self.compute_s, "memory_time_s": self.memory_s,
                "bound_time_s": self.bound_s, "bound": self.bound, "dtype": self.dtype}


ZERO = SetBound(0, 0, 0, 0.0, 0.0, "float32")


class Bounder:
    """Set bounds over one analyzed graph (shapes inferred, costs counted) under one binding and device."""

    def __init__(self, graph: Graph, costs: Iterable[NodeCost], hw: HardwareSpec, binding: Mapping[str, int],
                 *, residency: str = "warm", capacity: bool = True) -> None:
        self.graph = graph
        rows = tuple(costs)
        self.costs = {c.name: c for c in rows if c.depth == 0}
        self.hw = hw
        self.binding = dict(binding)
        self.residency = residency
        self.capacity = capacity
        self._outputs = set(graph.output_names)
        self._bytes: dict[str, Number | None] = {}
        self.storage = Storage.of(graph, rows)

    def tensor_bytes(self, name: str) -> Number | None:
        if name not in self._bytes:
            b: Dim | None = tensor_bytes(self.graph.tensor(name))
            self._bytes[name] = None if b is None else evaluate(b, self.binding)
        return self._bytes[name]

    def _resident(self, name: str) -> bool:
        if self.residency == "warm":
            return True
        t = self.graph.tensor(name)
        return t is not None and t.kind == TensorKind.ACTIVATION and name not in self._outputs

    def of(self, nodes: Iterable[str]) -> SetBound:
        """The bound of ``nodes`` (top-level node names) as one kernel: Σ of their FLOPs at the peak of the
        heaviest member's dtype, and the set's crossing (``passes/_storage.py``: the one set-traffic convention,
        which a fusion group's ``bytes_fused`` is too)."""
        members = [self.costs[n] for n in nodes if n in self.costs]
        inside = {c.name for c in members}
        flops: Number | None = 0
        heaviest: tuple[Number, str] = (-1, "float32")
        for c in members:
            f = None if c.flops is None else evaluate(c.flops, self.binding)
            flops = None if f is None or flops is None else flops + f
            if f is not None and f > heaviest[0]:
                heaviest = (f, c.dtype)
        crossing = self.storage.crossing(inside)
        # each entry at the bytes the crossing charges (a Gather's rows, not its table), resident or not as its
        # storage is: a view of x is x in DRAM
        moves = [(self.storage.base_of(t), self._at(b)) for t, _, b in crossing.reads]
        moves += [(t, self._at(b)) for t, _, b in crossing.writes]
        return self._bound(flops, moves, heaviest[1] if members else "float32")

    def of_conversion(self, tensor: str) -> SetBound:
        """A layout/dtype conversion of ``tensor``: read it once, write it once."""
        b = self.tensor_bytes(tensor)
        return self._bound(0, [(tensor, b), (tensor, b)], "float32")

    def _at(self, b: Dim | None) -> Number | None:
        return None if b is None else evaluate(b, self.binding)

    def _bound(self, flops: Number | None, moves: Iterable[tuple[str, Number | None]], dtype: str) -> SetBound:
        """The bound of a kernel doing ``flops`` and moving each (storage, bytes) of ``moves``."""
        moved: Number | None = 0
        resident: Number = 0
        for name, b in moves:
            if b is None or moved is None:
                moved = None
                continue
            moved += b
            if self._resident(name):
                resident += b
        k = kernel_bound(flops, moved, self.hw, dtype=dtype, resident=resident, capacity=self.capacity)
        return SetBound(flops, k.bytes, k.dram_bytes, k.compute_s, k.memory_s, dtype)


@dataclass(frozen=True)
class Observed:
    """A measured time: the statistic used, its spread, and the timer's resolution."""

    median_s: float
    p99_s: float
    min_s: float
    spread_s: float
    samples: int
    resolution_s: float

    def to_dict(self) -> dict[str, Any]:
        return {"median_s": self.median_s, "p99_s": self.p99_s, "min_s": self.min_s, "spread_s": self.spread_s,
                "samples": self.samples, "resolution_s": self.resolution_s}


def observed_from(timing: Any, resolution_s: float) -> Observed:
    """An Observed from a ``graphcost.measure.Timing``."""
    return Observed(float(timing.median), float(timing.p99), float(timing.min), float(timing.spread),
                    len(timing.samples), resolution_s)


@dataclass(frozen=True)
class GapRow:
    level: str  # "model" | "kernel" | "group"
    label: str
    runner: str
    bound: SetBound
    observed: Observed
    nodes: tuple[str, ...] = ()
    kernels: tuple[str, ...] = ()
    diagnosis: Diagnosis = field(default_factory=lambda: Diagnosis("unknown", "", ()))

    @property
    def efficiency(self) -> float | None:
        b = self.bound.bound_s
        return None if b is None or not self.observed.median_s > 0 else b / self.observed.median_s

    @property
    def ratio(self) -> float | None:
        b = self.bound.bound_s
        return None if not b else self.observed.median_s / b

    @property
    def peak_fraction(self) -> float | None:
        """Achieved FLOP/s ÷ peak FLOP/s (the seed's "efficiency"): low for a memory-bound row even at its roof."""
        c = self.bound.compute_s
        return None if c is None or not self.observed.median_s > 0 else c / self.observed.median_s

    @property
    def achieved_flops_per_s(self) -> float | None:
        f = self.bound.flops
        return None if f is None or not self.observed.median_s > 0 else f / self.observed.median_s

    @property
    def achieved_bytes_per_s(self) -> float | None:
        b = self.bound.bytes
        return None if b is None or not self.observed.median_s > 0 else b / self.observed.median_s

    @property
    def faster_than_bound(self) -> bool:
        return self.diagnosis.code == ACCOUNTING.code

    def to_dict(self) -> dict[str, Any]:
        return {"level": self.level, "label": self.label, "runner": self.runner, "nodes": list(self.nodes),
                "kernels": list(self.kernels), "bound": self.bound.to_dict(), "observed": self.observed.to_dict(),
                "efficiency": self.efficiency, "ratio": self.ratio, "peak_fraction": self.peak_fraction,
                "achieved_flops_per_s": self.achieved_flops_per_s,
                "achieved_bytes_per_s": self.achieved_bytes_per_s,
                "faster_than_bound": self.faster_than_bound, "diagnosis": self.diagnosis.to_dict()}


def row(level: str, label: str, runner: str, bound: SetBound, observed: Observed, *,
        nodes: Sequence[str] = (), kernels: Sequence[str] = ()) -> GapRow:
    """A row with its diagnosis."""
    d = diagnose(observed.median_s, bound.bound_s, observed.resolution_s)
    return GapRow(level, label, runner, bound, observed, tuple(nodes), tuple(kernels), d)
