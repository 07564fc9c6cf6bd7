"""``graphcost compare``: one workload across every installed framework plus onnxruntime, side by side.

The classic workload is the seed chapter's dense layer (1024→1024 at batch 1, 16, 64, 256): its intensity grows
with the batch, so batch 1 sits far below the ridge point and batch 256 much closer. Any reference architecture of
``graphcost.models.zoo`` works too. For each framework that is installed, the model is built natively (same seed,
same weights in every framework), timed natively (torch eager, jax.jit, tf.function), and the first framework's
model is exported once (dynamic batch) for the onnxruntime rows. Each row's bound is the bound of the exported
graph at that batch (ideal fusion groups, warm residency: see ``graphcost/gap.py``), so every runner is held to
the same roof. A framework that is not installed is skipped with a note.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from graphcost import measure
from graphcost.export import export_native
from graphcost.gap import WALL_RESOLUTION_S, Diagnosis, SetBound, diagnose
from graphcost.hardware.spec import HardwareSpec
from graphcost.load import load
from graphcost.measure.gap_report import BUSY_ROOFS, busy_roofs, prepare
from graphcost.measure.stats import modes
from graphcost.models import zoo
from graphcost.report.escape import terminal_text
from graphcost.report.units import si

DENSE_BATCHES = (1, 16, 64, 256)
RUNNERS = ("torch", "jax", "tf", "onnxruntime")
EXTRA = {"torch": "torch", "jax": "jax", "tf": "tf"}


@dataclass(frozen=True)
class CompareRow:
    runner: str
    shape: str
    batch: int
    bound: SetBound
    median_s: float
    spread_s: float  # ± : half the p90 − p10 range would hide outliers; this is p90 − min
    p99_s: float
    diagnosis: Diagnosis
    threads: int | None = None  # intra-op threads the runner used (None: its default)
    modes: str | None = None  # the latency's two modes or wide spread (``measure.stats.modes``), described

    @property
    def efficiency(self) -> float | None:
        b = self.bound.bound_s
        return None if b is None or not self.median_s > 0 else b / self.median_s

    @property
    def peak_fraction(self) -> float | None:
        """Achieved FLOP/s ÷ peak compute: the seed table's "effic."; capped by the roof at low intensity."""
        c = self.bound.compute_s
        return None if c is None or not self.median_s > 0 else c / self.median_s

    @property
    def roof_fraction(self) -> float | None:
        """The most of peak compute the roof allows at this intensity (compute time ÷ bound time)."""
        c, b = self.bound.compute_s, self.bound.bound_s
        return None if c is None or not b else c / b

    @property
    def flops_per_s(self) -> float | None:
        return None if self.bound.flops is None or not self.median_s > 0 else self.bound.flops / self.median_s

    @property
    def bytes_per_s(self) -> float | None:
        return None if self.bound.bytes is None or not self.median_s > 0 else self.bound.bytes / self.median_s

    def to_dict(self) -> dict[str, Any]:
        return {"runner": self.runner, "shape": self.shape, "batch": self.batch, "bound": self.bound.to_dict(),
                "median_s": self.median_s, "spread_s": self.spread_s, "p99_s": self.p99_s,
                "efficiency": self.efficiency, "peak_fraction": self.peak_fraction,
                "roof_fraction": self.roof_fraction, "flops_per_s": self.flops_per_s, "bytes_per_s": self.bytes_per_s,
                "diagnosis": self.diagnosis.to_dict(), "threads": self.threads, "modes": self.modes}


@dataclass(frozen=True)
class Comparison:
    arch: str
    hardware: HardwareSpec
    rows: tuple[CompareRow, ...]
    skipped: tuple[str, ...]  # "jax: not installed (pip install 'graphcost[jax]')"
    exported_from: str | None
    roofs_busy: str | None = None  # the warning of roofs measured on a busy machine (``hardware.measure``)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": "graphcost.compare/1", "arch": self.arch, "hardware": self.hardware.to_dict(),
                "exported_from": self.exported_from, "rows": [r.to_dict() for r in self.rows],
                "skipped": list(self.skipped), "roofs_busy": self.roofs_busy}


def shape_label(arch: str, batch: int, features: int, seq: int) -> str:
    if arch == "dense":
        return f"{batch}×{features}→{features}"
    if arch == "transformer":
        return f"{arch} {batch}×{seq}×64"
    return f"{arch} b={batch}"


def compare(arch: str = "dense", *, hardware: HardwareSpec, batches: Sequence[int] = DENSE_BATCHES,
            frameworks: Sequence[str] = RUNNERS, features: int = 1024, seq: int = 16, warmup: int = 10,
            repeats: int = 50, threads: int | None = None, workdir: str | Path,
            progress: Callable[[str], None] | None = None) -> Comparison:
    """Time ``arch`` at each batch in each installed framework and in onnxruntime; see the module docstring."""
    say = progress or (lambda _msg: None)
    have = measure.installed_frameworks()
    skipped: list[str] = []
    natives = []
    for fw in ("torch", "jax", "tf"):
        if fw not in frameworks:
            continue
        if have.get(fw) is None:
            skipped.append(f"{fw}: not installed (pip install 'graphcost[{EXTRA[fw]}]')")
        else:
            natives.append(fw)
    onnx_path: Path | None = None
    exported_from = None
    rows: list[CompareRow] = []
    bounds: dict[int, SetBound] = {}
    for batch in batches:
        label = shape_label(arch, batch, features, seq)
        for fw in natives:
            say(f"{fw} {label}")
            model = zoo.build_native(fw, arch, batch=batch, seq=seq, features=features)
            if onnx_path is None and "onnxruntime" in frameworks:
                onnx_path = Path(workdir) / f"{fw}_{arch}.onnx"
                export_native(model, onnx_path)
                exported_from = fw
            timed = _time_native(fw, model, warmup=warmup, repeats=repeats, threads=threads)
            bound = _bound(onnx_path, model, batch, seq, hardware, bounds)
            rows.append(_row(fw, label, batch, bound, timed.latency, timed.threads))
        if "onnxruntime" in frameworks:
            if onnx_path is None:
                note = "onnxruntime: no framework installed to build and export the model from"
                if note not in skipped:
                    skipped.append(note)
                continue
            say(f"onnxruntime {label}")
            binding = {"batch": batch, **({"seq": seq} if arch == "transformer" else {})}
            run = measure.run_ort(onnx_path, binding=binding, threads=threads, warmup=warmup, repeats=repeats,
                          profile=False)
            bound = _bound(onnx_path, None, batch, seq, hardware, bounds)
            rows.append(_row("onnxruntime", label, batch, bound, run.latency, run.intra_op_threads or None))
    rows, busy = busy_verdicts(rows, hardware)
    return Comparison(arch, hardware, tuple(rows), tuple(skipped), exported_from, busy)


def busy_verdicts(rows: Sequence[CompareRow], hardware: HardwareSpec) -> tuple[list[CompareRow], str | None]:
    """Against roofs measured on a busy machine (too low), a row faster than its bound gets ``busy-roofs``, not
    ``accounting``: load is the likely cause, and ``graphcost compare`` does not exit 1 for it. Returns the rows
    and the busy warning (None: the roofs were not measured busy)."""
    busy = busy_roofs(hardware)
    if not busy:
        return list(rows), None
    return [replace(r, diagnosis=BUSY_ROOFS) if r.diagnosis.code == "accounting" else r for r in rows], busy


def _time_native(fw: str, model: Any, *, warmup: int, repeats: int, threads: int | None) -> Any:
    inputs = list(model.inputs.values())
    if fw == "torch":
        return measure.time_torch(model.forward, inputs, warmup=warmup, repeats=repeats, threads=threads)
    if fw == "jax":
        return measure.time_jax(model.forward, inputs, warmup=warmup, repeats=repeats)
    return measure.time_tf(model.forward, inputs, warmup=warmup, repeats=repeats)


def _bound(onnx_path: Path | None, model: Any, batch: int, seq: int, hw: HardwareSpec,
           cache: dict[int, SetBound]) -> SetBound:
    """The model bound at ``batch``: the exported graph's ideal fusion groups, each one kernel, warm residency."""
    if batch in cache:
        return cache[batch]
    if onnx_path is None:
        raise ValueError("compare needs onnxruntime among the runners to bound the model (the bound is computed on "
                         "the exported graph)")
    graph = load(onnx_path).graph()
    names = {str(d) for t in graph.input_names for d in (getattr(graph.tensor(t), "shape", None) or ())
             if not isinstance(d, int)}
    binding = {d: (seq if d == "seq" else batch) for d in names}
    total = prepare(str(onnx_path), hardware=hw, dims=binding).ideal
    cache[batch] = total
    return total


def _row(runner: str, shape: str, batch: int, bound: SetBound, latency: Any,
         threads: int | None = None) -> CompareRow:
    found = modes(latency)
    return CompareRow(runner, shape, batch, bound, float(latency.median), float(latency.spread),
                      float(latency.p99), diagnose(float(latency.median), bound.bound_s, WALL_RESOLUTION_S),
                      threads, None if found is None else found.describe())


def render(c: Comparison, *, bar_width: int = 20) -> str:
    """The side-by-side table: one row per runner and shape."""
    hw = c.hardware
    head = (f"{'framework':<12} {'shape':<16} {'FLOPs':>13} {'MB moved':>9} {'AI':>6} {'ms(med)':>9} {'±ms':>7} "
            f"{'effic.':>7} {'%peak':>6}  {'roofline':<{bar_width + 2}} {'GFLOP/s':>8} {'GB/s':>8} {'bound':>7}")
    ridge = hw.ridge_point("float32")
    out = [f"compare {c.arch} on {hw.name} (fp32 peak {si(hw.peak_for('float32')[0], 'FLOP/s')}, DRAM "
           f"{si(hw.memory_bandwidth, 'B/s')}, ridge {ridge:.3g} FLOP/B)"]
    if c.roofs_busy:  # first: it changes how every efficiency below reads
        out.append("WARNING: " + c.roofs_busy.removeprefix("warning: "))
        if any(r.diagnosis.code == BUSY_ROOFS.code for r in c.rows):
            out.append("rows marked ‼ ran faster than their bound against these low roofs: load is the likely "
                       "cause, not the accounting (no accounting error is reported)")
    unsteady = [r for r in c.rows if r.modes]
    out += [f"warning: {r.runner} {r.shape} latency is {r.modes} "
            f"({f'{r.threads} threads' if r.threads else 'default threads'}): its median is not a typical run"
            for r in unsteady]
    out += ["─" * len(head), head, "─" * len(head)]
    order = {name: i for i, name in enumerate(RUNNERS)}
    rows = sorted(c.rows, key=lambda r: (order.get(r.runner, len(order)), r.batch))
    for i, r in enumerate(rows):
        if i and r.runner != rows[i - 1].runner:
            out.append("")
        eff = r.efficiency
        bar = _bar(r.peak_fraction, r.roof_fraction, bar_width)
        flag = {"accounting": "  ‼ faster than the bound", BUSY_ROOFS.code: "  ‼ faster than busy roofs"}.get(
            r.diagnosis.code, "") + ("  ~ " + r.modes.split(":")[0] if r.modes else "")
        out.append(f"{r.runner:<12} {r.shape:<16.16} {_int(r.bound.flops):>13} {_mb(r.bound.bytes):>9} "
                   f"{_f(r.bound.intensity, 1):>6} {r.median_s * 1e3:>9.3f} {r.spread_s * 1e3:>7.3f} "
                   f"{'?' if eff is None else f'{100 * eff:.1f}%':>7} {_pct(r.peak_fraction):>6}  {bar} "
                   f"{_f(None if r.flops_per_s is None else r.flops_per_s / 1e9, 1):>8} "
                   f"{_f(None if r.bytes_per_s is None else r.bytes_per_s / 1e9, 1):>8} "
                   f"{r.bound.bound or '?':>7}{flag}")
    out.append("─" * len(head))
    out.append("effic. = bound ÷ measured median (how close to its own roof); %peak = achieved FLOP/s ÷ peak "
               "compute; bar: █ achieved %peak, │ the roof at this intensity; ± = p90 − min")
    out.append("bytes: each input and output once (docs/conventions.md); bounds at "
               f"{'warm' if hw.levels() else 'cold'} residency (docs/gap.md)")
    if any(r.diagnosis.code == "accounting" for r in c.rows):
        out.append("‼ a row measured faster than its bound: the accounting or the roofs are wrong (are the roofs "
                   "measured on this machine? graphcost hardware measure)")
    out += [f"skipped {s}" for s in c.skipped]
    if c.exported_from:
        out.append(f"onnxruntime runs the model exported from {c.exported_from}")
    return "\n".join(terminal_text(line) for line in out) + "\n"  # runner and device names may come from files


def _bar(achieved: float | None, roof: float | None, width: int) -> str:
    """Fraction of peak compute achieved (█) and where the roof caps it at this intensity (│)."""
    cells = ["░"] * width
    if achieved is not None:
        for i in range(max(0, min(width, round(achieved * width)))):
            cells[i] = "█"
    if roof is not None and roof < 1:
        cells[max(0, min(width - 1, round(roof * width)))] = "│"
    return "[" + "".join(cells) + "]"


def _pct(v: float | None) -> str:
    return "?" if v is None else f"{100 * v:.1f}%"


def _int(v: float | None) -> str:
    return "?" if v is None else f"{int(v):,}"


def _mb(v: float | None) -> str:
    return "?" if v is None else f"{v / 1e6:.1f}"


def _f(v: float | None, digits: int) -> str:
    return "?" if v is None else f"{v:.{digits}f}"
