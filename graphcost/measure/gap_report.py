"""Assemble the gap report of one model: bounds from the analyzer, times from onnxruntime and native runners.

See ``graphcost/gap.py`` for how a row is bounded and diagnosed. This module joins the pieces:

1. analyze the model (shapes, costs, ideal fusion groups, liveness) under the binding the run used;
2. bound every ORT unit (the kernels ``graphcost.measure.run_ort`` profiled, mapped back to source nodes);
3. merge ideal groups that an ORT unit spans, bound each merged set as one kernel, and sum its units' times;
4. bound the model per runner, check the budget, and collect the rows measured faster than their bound.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from graphcost.analysis import Analysis
from graphcost.binding import DEFAULT_DIM_VALUE
from graphcost.gap import (
    PROFILER_RESOLUTION_S,
    WALL_RESOLUTION_S,
    ZERO,
    Bounder,
    Budget,
    Diagnosis,
    GapRow,
    Observed,
    SetBound,
    observed_from,
    row,
)
from graphcost.hardware.measure import BUSY_PREFIX
from graphcost.hardware.spec import HardwareSpec
from graphcost.measure.stats import modes, timing
from graphcost.passes.fusion import fuse
from graphcost.passes.liveness import liveness
from graphcost.passes.roofline import applied_residency
from graphcost.report._json import finite as _finite

SCHEMA = "graphcost.gap/1"


@dataclass(frozen=True)
class MemoryCheck:
    measured_bytes: int | None
    source: str
    liveness_peak_bytes: int | None
    min_peak_bytes: int | None
    conservative_peak_bytes: int | None
    arena_bytes: int | None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class GapReport:
    model: str
    hardware: HardwareSpec
    binding: Mapping[str, int]
    residency: str
    provider: str
    models: tuple[GapRow, ...]  # one per runner (onnxruntime first)
    kernels: tuple[GapRow, ...]
    groups: tuple[GapRow, ...]
    floor: SetBound  # the whole model as one kernel
    ideal: SetBound  # Σ ideal fusion groups, each one kernel
    ort_partition: SetBound  # Σ ORT units
    unattributed_s: float  # profiled time of kernels mapped to no source node
    memory: MemoryCheck | None
    budget: Budget | None
    notes: tuple[str, ...]
    folded: tuple[str, ...] = ()  # source nodes ORT removed or folded away (they take no time)
    roofs_busy: str | None = None  # the warning of roofs measured on a busy machine (``hardware.measure``)
    timing_warnings: tuple[str, ...] = ()  # latencies a median does not describe (two modes, a wide spread)

    def node_times(self) -> dict[str, dict[str, Any]]:
        """Per source node: the measured time of the kernel that computes it (shared by every node that kernel
        covers: ORT does not time a node inside a fused kernel separately), or folded away."""
        out: dict[str, dict[str, Any]] = {}
        for r in self.kernels:
            for n in r.nodes:
                out[n] = {"kernel": r.label, "observed_s": r.observed.median_s, "kernel_nodes": len(r.nodes),
                          "kernel_bound_s": r.bound.bound_s}
        for n in self.folded:
            out.setdefault(n, {"kernel": None, "observed_s": 0.0, "kernel_nodes": 0, "kernel_bound_s": 0.0,
                               "folded": True})
        return out

    @property
    def errors(self) -> tuple[GapRow, ...]:
        """Rows measured faster than their bound: accounting errors, said loudly. Never against roofs measured
        on a busy machine: those rows are ``under_busy_roofs`` (load, not the accounting, is the likely cause)."""
        return tuple(r for r in (*self.models, *self.kernels, *self.groups) if r.faster_than_bound)

    @property
    def under_busy_roofs(self) -> tuple[GapRow, ...]:
        """Rows measured faster than a bound whose roofs were measured on a busy machine (too low)."""
        return tuple(r for r in (*self.models, *self.kernels, *self.groups) if r.diagnosis.code == BUSY_ROOFS.code)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "model": self.model, "hardware": self.hardware.to_dict(),
            "binding": dict(self.binding), "residency": self.residency, "provider": self.provider,
            "floor": self.floor.to_dict(), "ideal_fused": self.ideal.to_dict(),
            "ort_partition": self.ort_partition.to_dict(),
            "models": [r.to_dict() for r in self.models], "kernels": [r.to_dict() for r in self.kernels],
            "groups": [r.to_dict() for r in self.groups], "node_times": self.node_times(),
            "unattributed_s": self.unattributed_s,
            "memory": None if self.memory is None else self.memory.to_dict(),
            "budget": None if self.budget is None else self.budget.to_dict(),
            "accounting_errors": [f"{r.level} {r.label}" for r in self.errors], "notes": list(self.notes),
            "roofs_busy": self.roofs_busy,
            "faster_than_busy_roofs": [f"{r.level} {r.label}" for r in self.under_busy_roofs],
            "timing_warnings": list(self.timing_warnings),
        }

    def to_json(self) -> str:
        return json.dumps(_finite(self.to_dict()), indent=2)


@dataclass(frozen=True)
class Prepared:
    """A model analyzed for set bounds under one binding: what ``build`` and ``measure.compare`` start from."""

    graph: Any
    top: tuple[Any, ...]  # top-level NodeCosts
    fusion: Any  # FusionResult under the ideal policy
    memory: Any  # MemoryResult
    binding: Mapping[str, int]
    bounder: Bounder
    residency: str  # the residency applied
    notes: tuple[str, ...]

    @property
    def ideal(self) -> SetBound:
        """Σ over the ideal fusion groups, each bounded as one kernel."""
        total = ZERO
        for g in self.fusion.groups:
            total = total + self.bounder.of(g.nodes)
        return total


def prepare(model: Any, *, hardware: HardwareSpec, dims: Mapping[str, int] | None = None,
            input_shapes: Mapping[str, Sequence[int]] | None = None, input_values: Mapping[str, Any] | None = None,
            residency: str = "warm", capacity: bool = True) -> Prepared:
    """Shapes, costs, ideal fusion groups and liveness of ``model`` with its inputs fixed, and a Bounder.

    ``model`` is a path (analysed through the front door, ``graphcost.analysis.Analysis.of``, with ``dims``,
    ``input_shapes`` and ``input_values``; dims the model no longer has once its input shapes are fixed are left
    out) or an ``Analysis`` already made. Dims the inputs do not fix (value-dependent sizes, Loop trip counts) take
    the static binding's default (``graphcost.binding.DEFAULT_DIM_VALUE``) with a note: the bounds that use them
    are lower bounds of unknown slack.
    """
    a = model if isinstance(model, Analysis) else Analysis.of(
        model, dims=dims, input_shapes={k: list(v) for k, v in (input_shapes or {}).items()} or None,
        input_values=input_values, unknown_dims="ignore")
    graph, costs = a.graph, a.costs
    notes: list[str] = []
    unknown = list(a.binding.defaulted)
    binding = a.binding.as_dict()
    if unknown:
        notes.append(f"dims no shape inference could express in the inputs ({', '.join(unknown[:5])}"
                     f"{' …' if len(unknown) > 5 else ''}) are taken as {DEFAULT_DIM_VALUE}: the bounds that use "
                     "them are lower bounds of unknown slack")
    top = tuple(c for c in costs.nodes if c.depth == 0)
    memory = liveness(graph, binding)
    applied, why = applied_residency(residency, hardware, memory.parameter_bytes + memory.min_peak_bytes,
                                     capacity=capacity)
    if why:
        notes.append(why)
    bounder = Bounder(graph, top, hardware, binding, residency=applied, capacity=capacity)
    return Prepared(graph, top, fuse(graph, costs), memory, binding, bounder, applied, tuple(notes))


def build(path: str, run: Any, *, hardware: HardwareSpec, natives: Sequence[Any] = (),
          budget_ms: float | None = None, sustained_clock: float = 1.0, residency: str = "warm",
          capacity: bool = True, label: str | None = None, input_values: Mapping[str, Any] | None = None) -> GapReport:
    """The gap report of ``path`` from an ``OrtRun`` (and ``NativeRun``s of the same model and inputs);
    ``input_values`` are the constant inputs the run was given (``--input-value``), for the shapes."""
    if not 0 < sustained_clock <= 1:
        raise ValueError(f"--sustained-clock must be in (0, 1], got {sustained_clock:g}")
    p = prepare(path, hardware=hardware, dims=run.binding, input_shapes=run.input_shapes, input_values=input_values,
                residency=residency, capacity=capacity)
    notes = list(p.notes)
    on_gpu = run.provider in ("cuda", "tensorrt")
    if (hardware.kind == "gpu") != on_gpu:
        notes.append(f"the bounds use {hardware.name} ({hardware.kind}) but the run used the {run.provider} "
                     "provider: efficiencies compare different machines")
    if hardware.kind != "measured":
        notes.append("roofs are not measured on this machine (graphcost hardware measure -o roofs.toml, then "
                     "--hardware roofs.toml): a kernel can only be checked against the machine's real limits")
    bounder, memory = p.bounder, p.memory

    kernels, unit_bounds, unit_times, unattributed = _kernel_rows(run, bounder, notes)
    groups = _group_rows(run, bounder, p.fusion, unit_bounds, unit_times)
    ideal = p.ideal
    ort_partition = sum(unit_bounds.values(), ZERO)
    floor = bounder.of(c.name for c in p.top)
    model_bound = ideal if _lt(ideal.bound_s, ort_partition.bound_s) else ort_partition
    models = [row("model", "whole model", f"onnxruntime/{run.provider}", model_bound,
                  observed_from(run.latency, WALL_RESOLUTION_S), nodes=())]
    for native in natives:
        models.append(row("model", "whole model", f"{native.framework}/{native.mode}/{native.device}", model_bound,
                          observed_from(native.latency, WALL_RESOLUTION_S)))
    budget = None
    if budget_ms is not None:
        floor_s = model_bound.sustained(sustained_clock)
        budget = Budget(budget_ms / 1e3, sustained_clock, float(run.latency.p99), floor_s)
    mem = MemoryCheck(run.memory_peak_bytes, run.memory_source, memory.peak_activation_bytes, memory.min_peak_bytes,
                      memory.conservative_peak_bytes, None if memory.arena is None else memory.arena.bytes)
    busy = busy_roofs(hardware)
    if busy:  # low roofs make honest kernels look faster than their bound: not an accounting verdict
        models, kernels, groups = (_busy_verdict(rows) for rows in (models, kernels, groups))
    return GapReport(label or path, hardware, p.binding, p.residency, run.provider, tuple(models), tuple(kernels),
                     tuple(groups), floor, ideal, ort_partition, unattributed, mem, budget, tuple(notes),
                     tuple(run.mapping.uncovered) if run.mapping is not None else (), busy,
                     timing_warnings(run, natives))


BUSY_ROOFS = Diagnosis(
    "busy-roofs", "faster than a bound whose roofs were measured on a busy machine: the roofs are too low, and "
    "load, not the accounting, is the likely cause",
    ("measure the roofs on an idle machine (graphcost hardware measure --refresh, or -o roofs.toml and "
     "--hardware roofs.toml) and run again; a row still faster than its bound then is an accounting error",))
"""The verdict a row gets instead of ``accounting`` against busy roofs: it never makes the gap command exit 1."""


def busy_roofs(hardware: HardwareSpec) -> str | None:
    """The busy-machine warning ``hardware``'s sources carry (``graphcost.hardware.measure``), or None."""
    return next((s for s in hardware.sources if s.startswith(BUSY_PREFIX)), None)


def _busy_verdict(rows: Sequence[GapRow]) -> list[GapRow]:
    return [replace(r, diagnosis=BUSY_ROOFS) if r.faster_than_bound else r for r in rows]


def timing_warnings(run: Any, natives: Sequence[Any] = ()) -> tuple[str, ...]:
    """One warning per runner whose latency samples have two modes or spread too wide for a median
    (``graphcost.measure.stats.modes``), with the threads it used."""
    out = []
    runners = [(f"onnxruntime/{run.provider}", run.latency, run.intra_op_threads or None)]
    runners += [(f"{n.framework}/{n.mode}/{n.device}", n.latency, n.threads) for n in natives]
    for name, latency, threads in runners:
        found = modes(latency)
        if found is None:
            continue
        used = f"{threads} threads" if threads else "the framework's default threads"
        out.append(f"{name} latency is {found.describe()} ({used}): the median is not a typical run; other "
                   "work or contended threads are the usual cause — rerun on an idle machine or with fewer threads")
    return tuple(out)


def _lt(a: float | None, b: float | None) -> bool:
    return a is not None and (b is None or a < b)


def _kernel_rows(run: Any, bounder: Bounder, notes: list[str]
                 ) -> tuple[list[GapRow], dict[int, SetBound], dict[int, tuple[float, ...]], float]:
    """One row per ORT unit; its bound and its observed time (the sum of its kernels, per profiled run)."""
    mapping = run.mapping
    by_unit: dict[int, list[Any]] = {}
    unattributed = 0.0
    for k in run.kernels:
        if k.unit is None:
            unattributed += float(k.timing.median)
            continue
        by_unit.setdefault(k.unit, []).append(k)
    if unattributed:
        notes.append(f"{unattributed * 1e6:.1f} µs of kernel time maps to no source node (not bounded)")
    rows: list[GapRow] = []
    bounds: dict[int, SetBound] = {}
    times: dict[int, tuple[float, ...]] = {}
    for unit_index, ks in sorted(by_unit.items()):
        unit = mapping.units[unit_index]
        if unit.covers:
            bound = bounder.of(unit.covers)
        elif unit.conversion_of:
            bound = bounder.of_conversion(unit.conversion_of)
        else:
            continue
        times[unit_index] = _per_run_sum([k.timing.samples for k in ks])
        obs = _observed(times[unit_index], PROFILER_RESOLUTION_S * len(ks))
        bounds[unit_index] = bound
        label = " + ".join(_kernel_label(k) for k in ks)
        if unit.conversion_of:
            label += f" (converts {unit.conversion_of})"
        rows.append(row("kernel", label, f"onnxruntime/{run.provider}", bound, obs, nodes=unit.covers,
                        kernels=[k.name for k in ks]))
    rows.sort(key=lambda r: -r.observed.median_s)
    return rows, bounds, times, unattributed


def _kernel_label(k: Any) -> str:
    dom = {"": "", "ai.onnx": "", "com.microsoft": "ms.", "com.microsoft.nchwc": "nchwc."}.get(k.domain,
                                                                                             f"{k.domain}.")
    return f"{dom}{k.op_type} {k.name}"


def _per_run_sum(samples: Sequence[Sequence[float]]) -> tuple[float, ...]:
    """Several kernels' times added run by run (the runs all kernels have)."""
    runs = min(len(s) for s in samples)
    return tuple(sum(s[i] for s in samples) for i in range(runs))


def _observed(samples: Sequence[float], resolution: float) -> Observed:
    return observed_from(timing(samples), resolution)


GROUP_NAMES_SHOWN = 2
"""Node names a group row's label spells out; the rest are counted: ``g3 Conv_12+Relu_13 (+2)``."""


def group_label(ids: Sequence[str], nodes: Sequence[str]) -> str:
    """``g3 Conv_12+Relu_13 (+2)``: the group ids, then the first node names as the model spells them (the
    renderers escape them for terminals), then how many nodes more."""
    shown = "+".join(nodes[:GROUP_NAMES_SHOWN])
    more = f" (+{len(nodes) - GROUP_NAMES_SHOWN})" if len(nodes) > GROUP_NAMES_SHOWN else ""
    return f"{'+'.join(ids)} {shown}{more}" if nodes else "+".join(ids)


def _group_rows(run: Any, bounder: Bounder, fusion: Any, unit_bounds: Mapping[int, SetBound],
                unit_times: Mapping[int, tuple[float, ...]]) -> list[GapRow]:
    """Ideal groups merged where an ORT unit spans several; each merged set bounded as one kernel."""
    groups = fusion.groups
    parent = list(range(len(groups)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    index = {n: i for i, g in enumerate(groups) for n in g.nodes}
    unit_home: dict[int, int] = {}
    for u in unit_times:
        unit = run.mapping.units[u]
        homes = [index[n] for n in unit.covers if n in index]
        if not homes and unit.conversion_of:
            prod = bounder.graph.producer(unit.conversion_of)
            homes = [index[prod.name]] if prod is not None and prod.name in index else []
        for h in homes[1:]:
            parent[find(h)] = find(homes[0])
        if homes:
            unit_home[u] = homes[0]
    members: dict[int, list[int]] = {}
    for i in range(len(groups)):
        members.setdefault(find(i), []).append(i)
    units_of: dict[int, list[int]] = {}
    for u, h in unit_home.items():
        units_of.setdefault(find(h), []).append(u)
    rows: list[GapRow] = []
    for root, gs in members.items():
        us = units_of.get(root)
        if not us:
            continue  # nothing measured: ORT folded these nodes away
        nodes = [n for i in gs for n in groups[i].nodes]
        bound = bounder.of(nodes)
        for u in us:  # conversions ORT added on top of the set's own traffic
            if not run.mapping.units[u].covers:
                bound = bound + unit_bounds[u]
        kernels = [k for k in run.kernels if k.unit in us]
        obs = _observed(_per_run_sum([unit_times[u] for u in us]), PROFILER_RESOLUTION_S * len(kernels))
        label = group_label([groups[i].id for i in gs], nodes)
        rows.append(row("group", label, f"onnxruntime/{run.provider}", bound, obs, nodes=nodes,
                        kernels=[k.name for k in kernels]))
    rows.sort(key=lambda r: -r.observed.median_s)
    return rows
