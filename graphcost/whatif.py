"""Static what-ifs on a report: the chapter's fifteen-minute budget as flags on ``analyze``.

``what_if(report, options)`` is a pure function of a finished :class:`~graphcost.report.model.Report`; it never
re-analyzes the model. It answers, per flag:

* **budget** (``--budget-ms``, or ``--fps`` for the whole frame: slice = 1000/fps ms; ``--sustained-clock``,
  ``--p99-factor``): the floor at sustained clocks (Σ over top-level nodes of max(compute ÷ clock, memory)) is a
  **VETO** when it alone exceeds the slice; otherwise p99 = floor × p99 factor at the bench clock goes through the
  one budget rule (``graphcost/budget.py``: p99 ÷ sustained clock against the slice) → fits / misses + speed-up;
* **power** (``--power-envelope W``, else the spec's ``sustained_power_w``): energy floor (DRAM bytes × J/B) ×
  rate (``--fps``) in W against the envelope;
* **% of peak**, per node and overall: compute time ÷ bound time (achieved FLOP/s ÷ peak FLOP/s at the bound);
* **precision** (``--weights``, ``--activations``): weights are the tensors in a weight slot of
  MatMul/Gemm/Conv (and their quantized forms) that no graph input feeds (initializers, Constants, and the
  DequantizeLinear/Cast/Transpose/Reshape chains that carry them); activations are every other float or 8-bit
  tensor (index tensors never change). Each node's bytes read (written) scale by its input (output) tensors'
  new size ÷ old size — exact where the rule charges whole tensors — its memory time and DRAM bytes by its
  bytes' ratio, and its compute time uses the peak of its first input's new dtype (``HardwareSpec.peak_for``);
* **sweep** (``--sweep batch=1,2,4,…``): the report's exact total formulas bound at each value (FLOPs ÷ peak of
  the dtype doing most FLOPs, bytes ÷ DRAM bandwidth), where the model crosses the ridge point, and the exact
  crossing when the formulas are polynomials of degree ≤ 2 in the dim;
* **fusion** (``--repeat N``): per fusion group, bytes saved (unfused − fused), as traversals of the group's
  largest tensor, as DRAM time (bytes ÷ bandwidth), per block and × N blocks.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from graphcost._dims import as_expr, evaluate, free_names, parse_dim, parse_formula, symbol
from graphcost._sym import sympy
from graphcost.budget import Budget, frame_slice_s
from graphcost.passes.roofline import Bound, kernel_bound

Number = int | float

DTYPES: Mapping[str, str] = {
    "fp32": "float32", "float32": "float32", "fp16": "float16", "float16": "float16", "bf16": "bfloat16",
    "bfloat16": "bfloat16", "fp8": "float8_e4m3fn", "int8": "int8", "uint8": "uint8", "int4": "int4",
    "uint4": "uint4",
}
"""What ``--weights`` / ``--activations`` accept, as the dtype names the hardware specs use."""

ITEM_BYTES: Mapping[str, float] = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1,
    "int8": 1, "uint8": 1, "int4": 0.5, "uint4": 0.5,
}
"""Bytes per element of the dtypes a precision what-if may change; other dtypes (int64 indices, bool) never do."""

WEIGHT_SLOTS: Mapping[str, tuple[int, ...]] = {
    "MatMul": (0, 1), "Gemm": (0, 1), "Conv": (1,), "ConvTranspose": (1,), "QLinearMatMul": (0, 3),
    "QLinearConv": (3,), "MatMulInteger": (0, 1), "ConvInteger": (1,),
}
"""Input slots of a weight; a tensor there is a weight when no graph input feeds it."""

WEIGHT_CARRIERS = frozenset({"DequantizeLinear", "Cast", "Transpose", "Reshape", "Identity", "Constant"})
"""Ops through which a weight reaches its MatMul/Conv unchanged in meaning (QDQ models, transposed weights)."""

MAX_SWEEP_VALUES = 64
MAX_FUSION_ROWS = 10
MAX_NODE_ROWS = 10


# ------------------------------------------------------------------------------------------------- options
@dataclass(frozen=True)
class Options:
    """The what-if flags, parsed; ``active`` when any is given."""

    budget_ms: float | None = None
    fps: float | None = None
    sustained_clock: float = 1.0
    p99_factor: float = 1.0
    power_envelope_w: float | None = None
    weights: str | None = None
    activations: str | None = None
    sweep: tuple[str, tuple[int, ...]] | None = None
    repeat: int | None = None

    @property
    def active(self) -> bool:
        return self != Options()


def _positive(flag: str) -> Any:
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not (v > 0 and math.isfinite(v)):
            raise argparse.ArgumentTypeError(f"{text!r}: must be > 0")
        return v
    parse.__name__ = flag
    return parse


def _fraction(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < v <= 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be in (0, 1], e.g. 0.72")
    return v


def _factor(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (v >= 1 and math.isfinite(v)):
        raise argparse.ArgumentTypeError(f"{text!r}: must be ≥ 1 (p99 is at least the mean)")
    return v


def _dtype(text: str) -> str:
    key = text.strip().lower()
    if key not in DTYPES:
        raise argparse.ArgumentTypeError(f"{text!r}: expected one of {', '.join(sorted(DTYPES))}")
    return DTYPES[key]


def parse_sweep(text: str) -> tuple[str, tuple[int, ...]]:
    """``batch=1,2,4`` → ("batch", (1, 2, 4)); values whole numbers ≥ 1, at most ``MAX_SWEEP_VALUES``."""
    name, sep, values = text.partition("=")
    if not sep or not name.strip() or not values.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: expected DIM=V1,V2,…, e.g. batch=1,2,4,8")
    parts = [p.strip() for p in values.split(",")]
    if len(parts) > MAX_SWEEP_VALUES:
        raise argparse.ArgumentTypeError(f"{text!r}: at most {MAX_SWEEP_VALUES} values")
    out: list[int] = []
    for p in parts:
        if not p.isdigit() or len(p) > 12 or int(p) < 1:
            raise argparse.ArgumentTypeError(f"{text!r}: {p!r} is not a whole number ≥ 1")
        out.append(int(p))
    return name.strip(), tuple(sorted(set(out)))


def _whole(text: str) -> int:
    if not text.strip().isdigit() or len(text.strip()) > 9 or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be a whole number ≥ 1")
    return int(text)


def add_flags(p: argparse.ArgumentParser) -> None:
    """The what-if flags of ``analyze`` (one definition; :func:`options_from` reads them back)."""
    g = p.add_argument_group("what-ifs (docs/budgets.md)")
    g.add_argument("--budget-ms", type=_positive("--budget-ms"), metavar="MS",
                   help="the model's slice of the latency budget: fits / misses / VETO (the floor alone exceeds it)")
    g.add_argument("--fps", type=_positive("--fps"), metavar="F",
                   help="frame rate: the rate for power, and the slice (1000/F ms) when --budget-ms is not given")
    g.add_argument("--sustained-clock", type=_fraction, default=1.0, metavar="F",
                   help="sustained compute clock as a fraction of the peak clock (e.g. 0.72); default 1")
    g.add_argument("--p99-factor", type=_factor, default=1.0, metavar="K",
                   help="p99 latency as K × the mean (e.g. 1.35); default 1")
    g.add_argument("--power-envelope", type=_positive("--power-envelope"), metavar="W",
                   help="sustained power envelope in W (default: the spec's sustained_power_w, if any)")
    g.add_argument("--weights", type=_dtype, metavar="DTYPE",
                   help="re-cost weights (MatMul/Gemm/Conv initializers) in DTYPE: fp32, fp16, bf16, fp8, int8, int4")
    g.add_argument("--activations", type=_dtype, metavar="DTYPE",
                   help="re-cost activations (every other float tensor) in DTYPE; sets the compute peak")
    g.add_argument("--sweep", type=parse_sweep, metavar="DIM=V1,V2,…",
                   help="bind the exact formulas at each value, e.g. batch=1,2,4,8,16,32,64,128,256: where the "
                        "model crosses the ridge point")
    g.add_argument("--repeat", type=_whole, metavar="N",
                   help="the graph is one of N identical blocks: fusion savings per block and × N")


def options_from(args: argparse.Namespace) -> Options:
    """The :class:`Options` the parsed flags say (defaults where a command lacks a flag)."""
    return Options(budget_ms=getattr(args, "budget_ms", None), fps=getattr(args, "fps", None),
                   sustained_clock=getattr(args, "sustained_clock", 1.0),
                   p99_factor=getattr(args, "p99_factor", 1.0),
                   power_envelope_w=getattr(args, "power_envelope", None), weights=getattr(args, "weights", None),
                   activations=getattr(args, "activations", None), sweep=getattr(args, "sweep", None),
                   repeat=getattr(args, "repeat", None))


def apply_args(report: Any, args: argparse.Namespace) -> Any:
    """``report`` with its ``whatif`` section when any what-if flag was given (the CLI's one call)."""
    options = options_from(args)
    if not options.active:
        return report
    return replace(report, whatif=what_if(report, options))


# ------------------------------------------------------------------------------------------------- results
@dataclass(frozen=True)
class NodePeak:
    """One top-level node under the what-if: its bound and the share of the peak it reaches there."""

    name: str
    op_type: str
    peak_dtype: str
    flops: Number | None
    bytes: Number | None
    intensity: float | None
    compute_time_s: float | None
    memory_time_s: float | None
    bound_time_s: float | None
    bound: str | None
    peak_fraction: float | None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Floor:
    """The model's floor under the what-if (Σ over top-level nodes, as the report's totals)."""

    flops: Number
    bytes: Number
    dram_bytes: Number
    compute_time_s: float
    memory_time_s: float
    floor_s: float
    floor_sustained_s: float
    sustained_clock: float
    bound: str
    peak_fraction: float | None
    energy_j: float

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Precision:
    weights: str | None
    activations: str | None
    weight_tensors: int
    bytes_before: Number
    bytes_after: Number
    floor_before_s: float
    floor_after_s: float

    @property
    def speedup(self) -> float | None:
        return self.floor_before_s / self.floor_after_s if self.floor_after_s > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "speedup": self.speedup}


@dataclass(frozen=True)
class Power:
    energy_j: float
    rate_hz: float | None
    power_w: float | None
    envelope_w: float | None
    envelope_source: str | None
    within: bool | None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class SweepRow:
    value: int
    flops: Number
    bytes: Number
    intensity: float | None
    compute_time_s: float
    memory_time_s: float
    bound_time_s: float
    bound: str

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Sweep:
    dim: str
    peak_dtype: str
    ridge_point: float
    rows: tuple[SweepRow, ...]
    crossing: int | None
    """The first swept value at which the model is compute bound (None: memory bound at every value)."""
    exact_crossing: float | None
    """The dim value where intensity = ridge, when the formulas are polynomials of degree ≤ 2 in it."""

    def to_dict(self) -> dict[str, Any]:
        return {"dim": self.dim, "peak_dtype": self.peak_dtype, "ridge_point": self.ridge_point,
                "rows": [r.to_dict() for r in self.rows], "crossing": self.crossing,
                "exact_crossing": self.exact_crossing}


@dataclass(frozen=True)
class FusionSaving:
    group: str
    nodes: tuple[str, ...]
    bytes_unfused: Number
    bytes_fused: Number
    bytes_saved: Number
    traversal_bytes: Number | None
    """Bytes of the group's largest tensor: ``bytes_saved`` ÷ this = traversals saved."""
    memory_time_saved_s: float
    """bytes_saved ÷ DRAM bandwidth: the chapter's time saved by fusion in a bandwidth-bound region."""
    time_saved_s: float | None
    """The fusion section's own time_unfused − time_fused (per-node max vs the group's max)."""
    repeat: int

    @property
    def traversals_saved(self) -> float | None:
        return self.bytes_saved / self.traversal_bytes if self.traversal_bytes else None

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "nodes": list(self.nodes), "traversals_saved": self.traversals_saved,
                "bytes_saved_total": self.bytes_saved * self.repeat,
                "memory_time_saved_total_s": self.memory_time_saved_s * self.repeat}


@dataclass(frozen=True)
class WhatIf:
    """Everything the what-if flags asked, for one report. Frozen; ``to_dict`` is the JSON ``whatif`` object."""

    options: Options
    hardware: str
    memory_bandwidth: float
    ridge_point: float
    peak_dtype: str
    floor: Floor
    nodes: tuple[NodePeak, ...]
    slice_s: float | None = None
    budget: Budget | None = None
    power: Power | None = None
    precision: Precision | None = None
    sweep: Sweep | None = None
    fusion: tuple[FusionSaving, ...] = ()
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        o = self.options
        return {
            "options": {"budget_ms": o.budget_ms, "fps": o.fps, "sustained_clock": o.sustained_clock,
                        "p99_factor": o.p99_factor, "power_envelope_w": o.power_envelope_w, "weights": o.weights,
                        "activations": o.activations,
                        "sweep": None if o.sweep is None else {"dim": o.sweep[0], "values": list(o.sweep[1])},
                        "repeat": o.repeat},
            "hardware": self.hardware, "memory_bandwidth": self.memory_bandwidth, "ridge_point": self.ridge_point,
            "peak_dtype": self.peak_dtype, "floor": self.floor.to_dict(),
            "nodes": [n.to_dict() for n in self.nodes], "slice_s": self.slice_s,
            "budget": None if self.budget is None else self.budget.to_dict(),
            "power": None if self.power is None else self.power.to_dict(),
            "precision": None if self.precision is None else self.precision.to_dict(),
            "sweep": None if self.sweep is None else self.sweep.to_dict(),
            "fusion": [f.to_dict() for f in self.fusion], "notes": list(self.notes),
        }


# ------------------------------------------------------------------------------------------------- the what-if
def what_if(report: Any, options: Options) -> WhatIf:
    """The what-ifs ``options`` ask of ``report`` (see the module docstring). ValueError, one line naming the
    flag, when a flag does not apply to this model (a sweep over a dim it lacks, a sweep with a precision)."""
    if options.sweep is not None and (options.weights or options.activations):
        raise ValueError("--sweep binds the report's formulas, which hold the model's own dtypes: run the sweep "
                         "without --weights/--activations")
    if options.repeat is not None and report.fusion is None:
        raise ValueError("--repeat shows fusion savings: it needs the fusion pass (drop --no-fusion)")
    hw = report.hardware
    top = [n for n in report.nodes if n.depth == 0]
    retype = _retyping(report, top, options)
    rows = [_node(n, hw, retype, report.binding) for n in top]
    base = [_node(n, hw, {}, report.binding) for n in top] if retype else rows
    floor = _floor(rows, top, hw, retype, options.sustained_clock)
    heavy = _heaviest_dtype(rows)
    peak_dtype = hw.peak_for(heavy)[1]
    ridge = hw.ridge_point(heavy)
    notes: list[str] = []
    slice_s = budget = None
    if options.budget_ms is not None:
        slice_s = options.budget_ms / 1e3
    elif options.fps is not None:
        slice_s = frame_slice_s(options.fps)
    if slice_s is not None:
        budget = Budget(slice_s, options.sustained_clock, floor.floor_s * options.p99_factor,
                        floor.floor_sustained_s)
    power = _power(floor.energy_j, hw, options)
    precision = None
    if options.weights or options.activations:
        before = _floor(base, top, hw, {}, 1.0)
        after = _floor(rows, top, hw, retype, 1.0)
        n_weights = sum(1 for kind in _classes(report, top).values() if kind == "weight")
        precision = Precision(options.weights, options.activations, n_weights, before.bytes, after.bytes,
                              before.floor_s, after.floor_s)
        if options.weights and not n_weights:
            notes.append("--weights: the model has no MatMul/Gemm/Conv weight initializers; nothing changed")
    sweep = _sweep(report, options.sweep, heavy) if options.sweep is not None else None
    fusion = _fusion(report, options.repeat) if options.repeat is not None else ()
    ranked = sorted((r for r in rows if r.bound_time_s is not None), key=lambda r: -(r.bound_time_s or 0.0))
    return WhatIf(options, hw.name, hw.memory_bandwidth, ridge, peak_dtype, floor, tuple(ranked), slice_s, budget,
                  power, precision, sweep, fusion, tuple(notes))


def _power(energy_j: float, hw: Any, options: Options) -> Power | None:
    envelope, source = options.power_envelope_w, "--power-envelope"
    if envelope is None and getattr(hw, "sustained_power_w", None):
        envelope, source = float(hw.sustained_power_w), f"{hw.name} sustained_power_w"
    if options.fps is None and envelope is None:
        return None
    rate = options.fps
    watts = None if rate is None else energy_j * rate  # joules per inference × inferences per second
    within = None if watts is None or envelope is None else watts <= envelope
    return Power(energy_j, rate, watts, envelope, source if envelope is not None else None, within)


# --------------------------------------------------------------------------------------------- per-node numbers
def _classes(report: Any, top: Sequence[Any]) -> dict[str, str]:
    """tensor name → "weight" | "activation" for every re-typable tensor of the top-level nodes."""
    producers = {o.name: n for n in top for o in n.outputs}
    graph_inputs = {t.name for t in report.model.inputs}
    weights: set[str] = set()
    for n in top:
        for slot in WEIGHT_SLOTS.get(n.op_type, ()) if n.domain in ("ai.onnx", "") else ():
            if slot < len(n.inputs):
                weights |= _weight_chain(n.inputs[slot].name, producers, graph_inputs)
    out: dict[str, str] = {}
    for n in top:
        for t in (*n.inputs, *n.outputs):
            if t.dtype in ITEM_BYTES:
                out[t.name] = "weight" if t.name in weights else "activation"
    return out


def _weight_chain(name: str, producers: Mapping[str, Any], graph_inputs: set[str]) -> set[str]:
    """The tensors from ``name`` back to the initializer it carries, or nothing when a graph input feeds it."""
    chain: set[str] = set()
    while name not in chain:
        chain.add(name)
        if name in graph_inputs:
            return set()
        prod = producers.get(name)
        if prod is None:
            return chain  # an initializer
        if prod.op_type not in WEIGHT_CARRIERS:
            return set()
        if not prod.inputs:
            return chain  # a Constant
        name = prod.inputs[0].name
    return set()


def _retyping(report: Any, top: Sequence[Any], options: Options) -> dict[str, str]:
    """tensor name → its new dtype under the precision what-if (only the tensors that change)."""
    if not (options.weights or options.activations):
        return {}
    classes = _classes(report, top)
    dtypes = {t.name: t.dtype for n in top for t in (*n.inputs, *n.outputs)}
    out: dict[str, str] = {}
    for name, kind in classes.items():
        new = options.weights if kind == "weight" else options.activations
        if new is not None and new != dtypes[name]:
            out[name] = new
    return out


def _numel(shape: Sequence[int | str] | None, binding: Mapping[str, int]) -> Number | None:
    if shape is None:
        return None
    total: Number = 1
    for d in shape:
        size: Number
        if isinstance(d, str):
            try:
                size = evaluate(parse_dim(d), binding)
            except (KeyError, TypeError, ValueError, ArithmeticError):
                return None
        else:
            size = d
        total *= size
    return total


def _ratio(tensors: Sequence[Any], retype: Mapping[str, str], binding: Mapping[str, int]) -> float:
    """Σ new bytes ÷ Σ old bytes over ``tensors`` (1 when none changes or sizes are unknown)."""
    old = new = 0.0
    for t in tensors:
        if t.dtype not in ITEM_BYTES:
            continue
        n = _numel(t.shape, binding)
        if n is None:
            return 1.0
        old += n * ITEM_BYTES[t.dtype]
        new += n * ITEM_BYTES[retype.get(t.name, t.dtype)]
    return new / old if old else 1.0


def _node(n: Any, hw: Any, retype: Mapping[str, str], binding: Mapping[str, int]) -> NodePeak:
    changed = retype and any(t.name in retype for t in (*n.inputs, *n.outputs))
    read, written, memory = n.bytes_read, n.bytes_written, n.memory_time_s
    dtype = n.dtype
    if changed:
        if read is not None:
            read = read * _ratio(n.inputs, retype, binding)
        if written is not None:
            written = written * _ratio(n.outputs, retype, binding)
        if memory is not None and n.bytes:
            memory = memory * ((read or 0) + (written or 0)) / n.bytes
        if n.inputs and n.inputs[0].name in retype:
            dtype = retype[n.inputs[0].name]
    peak_dtype = hw.peak_for(dtype)[1]
    compute = kernel_bound(n.flops, None, hw, dtype=dtype).compute_s  # FLOPs at the (new) dtype's peak
    moved = None if read is None or written is None else read + written
    # the memory time is the report's (its levels and residency), scaled by the bytes' ratio when retyped
    k = Bound.of(n.flops, moved, None, compute, memory)
    bound_s, bound = k.time_s, k.bound
    fraction = None if compute is None or not bound_s else compute / bound_s
    intensity = None if n.flops is None or not moved else n.flops / moved
    return NodePeak(n.name, n.op_type, peak_dtype, n.flops, moved, intensity, compute, memory, bound_s, bound,
                    fraction)


def _floor(rows: Sequence[NodePeak], top: Sequence[Any], hw: Any, retype: Mapping[str, str],
           clock: float) -> Floor:
    flops: Number = 0
    moved: Number = 0
    dram: float = 0.0
    compute = memory = floor = sustained = 0.0
    for r, n in zip(rows, top, strict=True):
        flops += r.flops or 0
        moved += r.bytes or 0
        if n.dram_bytes is not None:
            dram += n.dram_bytes * ((r.bytes or 0) / n.bytes if n.bytes else 1.0)
        c, m = r.compute_time_s or 0.0, r.memory_time_s or 0.0
        compute += c
        memory += m
        floor += max(c, m)
        sustained += max(c / clock, m)  # the compute clock drops; memory time does not move with it
    fraction = compute / floor if floor else None
    return Floor(flops, moved, dram, compute, memory, floor, sustained, clock,
                 "compute" if compute >= memory else "memory", fraction, dram * hw.energy_per_byte)


def _heaviest_dtype(rows: Sequence[NodePeak]) -> str:
    best: tuple[Number, str] = (-1, "float32")
    for r in rows:
        if r.flops is not None and r.flops > best[0]:
            best = (r.flops, r.peak_dtype)
    return best[1]


# ------------------------------------------------------------------------------------------------- sweep
def _sweep(report: Any, sweep: tuple[str, tuple[int, ...]], dtype: str) -> Sweep:
    dim, values = sweep
    formulas = report.totals.formulas
    if not formulas:
        raise ValueError(f"--sweep {dim}: the model's counts do not depend on any dim (all shapes are static)")
    try:
        exprs = {k: parse_formula(formulas[k]) for k in ("flops", "bytes") if k in formulas}
    except ValueError as e:
        raise ValueError(f"--sweep {dim}: the total formulas cannot be read back ({e})") from None
    if len(exprs) < 2:
        raise ValueError(f"--sweep {dim}: the report has no formula for total FLOPs and bytes")
    names = set().union(*(free_names(e) for e in exprs.values()))
    if dim not in names:
        shown = ", ".join(sorted(n for n in names if n in report.binding)) or "none"
        raise ValueError(f"--sweep {dim}: the model's totals do not depend on a dim named {dim!r} (they depend on: "
                         f"{shown})")
    unknown = sorted(n for n in names if n != dim and n not in report.binding)
    if unknown:
        raise ValueError(f"--sweep {dim}: the total formulas name dims the binding lacks ({', '.join(unknown[:3])})")
    hw = report.hardware
    peak_dtype = hw.peak_for(dtype)[1]
    ridge = hw.ridge_point(dtype)
    rows = []
    for v in values:
        binding = {**report.binding, dim: v}
        f, b = evaluate(exprs["flops"], binding), evaluate(exprs["bytes"], binding)
        # the totals' formulas know no residency: every byte at DRAM bandwidth, on purpose (capacity=False)
        k = kernel_bound(f, b, hw, dtype=dtype, capacity=False)
        rows.append(SweepRow(v, f, b, f / b if b else None, k.compute_s, k.memory_s, k.time_s, k.bound))
    crossing = next((r.value for r in rows if r.bound == "compute"), None)
    others = {symbol(k): v for k, v in report.binding.items() if k != dim}
    exact = _exact_crossing(exprs["flops"], exprs["bytes"], symbol(dim), others, ridge)
    return Sweep(dim, peak_dtype, ridge, tuple(rows), crossing, exact)


def _exact_crossing(flops: Any, bytes_: Any, sym: Any, others: Mapping[Any, int], ridge: float) -> float | None:
    """The smallest value > 0 of ``sym`` where flops = ridge × bytes and the model turns compute bound, when
    flops − ridge × bytes is a polynomial of degree ≤ 2 in it (closed-form roots: no solver, no hang)."""
    try:
        expr = (as_expr(flops) - sympy.Float(ridge) * as_expr(bytes_)).xreplace(
            {k: sympy.Integer(v) for k, v in others.items()})
        poly = sympy.Poly(sympy.expand(expr), sym)
    except (sympy.PolynomialError, TypeError, ValueError):
        return None
    if poly.degree() < 1 or poly.degree() > 2 or len(poly.free_symbols) != 1:
        return None
    coeffs = [float(c) for c in poly.all_coeffs()]
    if len(coeffs) == 2:
        a, b = coeffs
        roots = [-b / a] if a else []
    else:
        a, b, c = coeffs
        disc = b * b - 4 * a * c
        roots = [] if disc < 0 or not a else [(-b - math.sqrt(disc)) / (2 * a), (-b + math.sqrt(disc)) / (2 * a)]
    poly_f = [float(c) for c in poly.all_coeffs()]

    def value(x: float) -> float:
        out = 0.0
        for c in poly_f:
            out = out * x + c
        return out

    for r in sorted(x for x in roots if x > 0):
        if value(r * 1.01 + 1e-9) > 0:  # compute bound just above it
            return r
    return None


# ------------------------------------------------------------------------------------------------- fusion
def _fusion(report: Any, repeat: int) -> tuple[FusionSaving, ...]:
    sizes: dict[str, Number] = {}
    for n in report.nodes:
        for t in (*n.inputs, *n.outputs):
            if t.name not in sizes and t.dtype in ITEM_BYTES:
                e = _numel(t.shape, report.binding)
                if e is not None:
                    sizes[t.name] = e * ITEM_BYTES[t.dtype]
    outputs = {n.name: [t.name for t in n.outputs] for n in report.nodes if n.depth == 0}
    hw = report.hardware
    rows = []
    for g in report.fusion.groups:
        saved = g.bytes_saved
        if saved is None or saved <= 0:
            continue
        largest = max((sizes[t] for m in g.nodes for t in outputs.get(m, ()) if t in sizes), default=None)
        time_saved = None if g.time_unfused_s is None or g.time_fused_s is None else \
            g.time_unfused_s - g.time_fused_s
        at_dram = kernel_bound(None, saved, hw, dtype="float32", capacity=False).memory_s  # saved bytes at DRAM
        rows.append(FusionSaving(g.id, tuple(g.nodes), g.bytes_unfused, g.bytes_fused, saved, largest,
                                 at_dram or 0.0, time_saved, repeat))
    rows.sort(key=lambda r: -r.bytes_saved)
    return tuple(rows[:MAX_FUSION_ROWS])


__all__ = ["DTYPES", "Floor", "FusionSaving", "NodePeak", "Options", "Power", "Precision", "Sweep", "SweepRow",
           "WhatIf", "add_flags", "apply_args", "options_from", "parse_sweep", "what_if"]
