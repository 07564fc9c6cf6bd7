"""No kernel, fusion group or model runs faster than its bound against this machine's measured roofs.

    .venv/bin/python bench/bench_no_kernel_beats_roofs.py                 # the reference models, 3 rounds
    .venv/bin/python bench/bench_no_kernel_beats_roofs.py --rounds 5 --band 0.10
    .venv/bin/python bench/bench_no_kernel_beats_roofs.py path/to/model.onnx:batch=2,seq=16

The acceptance of the gap report (docs/gap.md): against roofs *measured* on the same machine, a kernel faster than
its bound means a cost rule, a shape or a residency is wrong. It compares two measurements, so it is a benchmark,
not a test: roofs measured while other work holds the CPUs come out low, and a kernel timed a moment later on a
quieter machine then looks faster than its bound. ``tests/test_gap.py`` checks the deterministic half (the report
flags exactly the rows whose synthetic time is below the bound by more than the noise band).

Method, so that machine load cannot fake an error:

- **Interleaved.** Each of ``--rounds`` rounds measures the roofs (a full ``graphcost hardware measure``, about
  20-40 s) and then times every model in onnxruntime. A burst of outside load hits roofs and kernels alike.
- **Best of each.** The roofs used are the best over the rounds (each peak, DRAM and every cache level: a roof is the
  most the machine did); each row's time is its best median over the rounds (the least disturbed run).
- **Stated noise band.** A row fails when ``best median + resolution + band × bound < bound``: resolution is 1 µs
  per profiled kernel (ORT writes whole microseconds) and ``--band`` defaults to graphcost's own ``RELATIVE_NOISE``
  (5 %, clock drift between the roof microbenchmarks and the run).

Printed: the roofs of every round and their best, then per model the smallest ratio (best median ÷ bound) and each
row that fails. Exit 1 when one does. Run it on a quiet machine; the load average is printed before and after.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from graphcost.gap import RELATIVE_NOISE
from graphcost.hardware.spec import HardwareSpec

ROOT = Path(__file__).resolve().parents[1]


def reference_models() -> list[tuple[Path, dict[str, int]]]:
    """The shipped models and the reference zoo, at the dims the gap tests use."""
    out = [(ROOT / "models" / "tiny_cnn.onnx", {"batch": 2}),
           (ROOT / "models" / "tiny_transformer.onnx", {"batch": 2, "seq": 16})]
    for p in sorted((ROOT / "models" / "zoo").glob("*.onnx")):
        out.append((p, {"batch": 2, "seq": 16} if "transformer" in p.name else {"batch": 2}))
    return out


def parse_model(arg: str) -> tuple[Path, dict[str, int]]:
    """``PATH`` or ``PATH:dim=value,dim=value``."""
    path, _, dims = arg.partition(":")
    binding = {}
    for item in filter(None, dims.split(",")):
        name, _, value = item.partition("=")
        binding[name] = int(value)
    return Path(path), binding


def binding_for(path: Path, dims: dict[str, int]) -> dict[str, int]:
    """The dims the model's inputs use: the given ones, the others bound to 2."""
    from graphcost.load import load

    graph = load(str(path)).graph()
    names = {str(d) for t in graph.input_names for d in (getattr(graph.tensor(t), "shape", None) or ())
             if not isinstance(d, int)}
    return {k: v for k, v in dims.items() if k in names} | {d: 2 for d in names - set(dims)}


def best_roofs(specs: Sequence[HardwareSpec]) -> HardwareSpec:
    """The best of several measurements of one machine: each peak, DRAM and cache level at its highest.

    A level is never slower than a bigger one (as ``graphcost hardware measure`` decides them); when the rounds
    found different cache levels (they should not: the levels come from the detected caches), the levels of the
    round with the highest float32 peak are kept.
    """
    first = specs[0]
    peaks = {d: max(s.peak_flops[d] for s in specs if d in s.peak_flops) for s in specs for d in s.peak_flops}
    dram = max(s.memory_bandwidth for s in specs)
    capacities = {tuple(cap for cap, _ in s.cache_levels) for s in specs}
    if len(capacities) == 1:
        levels = [(cap, max(s.cache_levels[i][1] for s in specs)) for i, (cap, _) in enumerate(first.cache_levels)]
    else:
        levels = list(max(specs, key=lambda s: s.peak_flops["float32"]).cache_levels)
    below = dram
    for i in range(len(levels) - 1, -1, -1):  # biggest first: a smaller level is at least as fast as a bigger one
        below = max(levels[i][1], below)
        levels[i] = (levels[i][0], below)
    onchip = levels[-1] if levels else (first.onchip_bytes, first.onchip_bandwidth)
    return dataclasses.replace(
        first, peak_flops=peaks, memory_bandwidth=dram, cache_levels=tuple(levels), onchip_bytes=onchip[0],
        onchip_bandwidth=onchip[1],
        sources=(*first.sources, f"best of {len(specs)} interleaved measurements (bench/{Path(__file__).name})"))


def _load() -> str:
    try:
        return "load average " + " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "load average unknown"


def _roofs_line(spec: HardwareSpec) -> str:
    levels = ", ".join(f"{cap >> 10} KiB {bw / 1e9:.1f}" for cap, bw in spec.cache_levels)
    return (f"fp32 {spec.peak_flops['float32'] / 1e9:.1f} GFLOP/s, DRAM {spec.memory_bandwidth / 1e9:.2f} GB/s, "
            f"levels (GB/s) [{levels}]")


def check(path: Path, runs: Sequence[Any], roofs: HardwareSpec, band: float) -> tuple[float, list[str], int]:
    """(smallest best-median ÷ bound, the rows that fail, rows checked) of one model over its rounds' runs."""
    from graphcost.measure import gap_report

    best: dict[tuple[str, str], Any] = {}
    for run in runs:
        report = gap_report.build(str(path), run, hardware=roofs)
        for r in (*report.models, *report.kernels, *report.groups):
            key = (r.level, r.label)
            if key not in best or r.observed.median_s < best[key].observed.median_s:
                best[key] = r
    worst = float("inf")
    failed = []
    for (level, label), r in sorted(best.items()):
        b = r.bound.bound_s
        if not b:
            continue  # unknown, or a view the bound charges nothing
        t = r.observed.median_s
        worst = min(worst, t / b)
        if t + r.observed.resolution_s + band * b < b:
            failed.append(f"{level} {label}: best median {t * 1e6:.1f} µs against a bound of {b * 1e6:.1f} µs "
                          f"({t / b:.2f}×)")
    return worst, failed, len(best)


def main(argv: list[str] | None = None) -> int:
    from graphcost.hardware.measure import measure
    from graphcost.measure import run_ort

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", help="PATH or PATH:dim=value,... (default: the reference models)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved (roofs, then every model) rounds")
    ap.add_argument("--band", type=float, default=RELATIVE_NOISE, help="noise band, a fraction of the bound")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--quick", action="store_true",
                    help="quick roofs (small GEMMs): a smoke run of this script; they are too low to judge by")
    args = ap.parse_args(argv)
    if args.rounds < 1 or not 0 <= args.band < 1:
        ap.error("--rounds must be ≥ 1 and --band in [0, 1)")
    models = [parse_model(m) for m in args.models] or reference_models()
    bindings = [binding_for(p, dims) for p, dims in models]

    print(f"before: {_load()}", file=sys.stderr)
    specs: list[HardwareSpec] = []
    runs: list[list[Any]] = [[] for _ in models]
    for i in range(args.rounds):
        start = time.perf_counter()
        specs.append(measure(quick=args.quick).spec)
        for j, ((path, _), binding) in enumerate(zip(models, bindings, strict=True)):
            runs[j].append(run_ort(path, binding=binding, warmup=args.warmup, repeats=args.repeats))
        print(f"round {i + 1}: {_roofs_line(specs[-1])} ({time.perf_counter() - start:.0f} s)", file=sys.stderr)
    print(f"after: {_load()}", file=sys.stderr)
    roofs = best_roofs(specs)
    print(f"roofs, best of {args.rounds} rounds: {_roofs_line(roofs)}")
    for w in (w for s in specs for w in s.sources if w.startswith("warning: the machine was busy")):
        print(f"  {w}")
    print(f"\nfails when best median + resolution + {args.band:g} × bound < bound")
    failures = 0
    for (path, _), model_runs in zip(models, runs, strict=True):
        worst, failed, rows = check(path, model_runs, roofs, args.band)
        name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        print(f"{name!s:<40} {rows:4d} rows   smallest ratio {worst:6.2f}   {'ok' if not failed else 'FAILS'}")
        for f in failed:
            print(f"    {f}")
        failures += len(failed)
    print(f"{failures} rows faster than their bound beyond the noise band")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
