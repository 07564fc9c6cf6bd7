"""``graphcost hardware detect`` and ``graphcost hardware measure``: the spec of the machine graphcost runs on.

``detect`` finds the catalog entry (or a conservative estimate) from what the OS reports; ``measure`` runs
microbenchmarks and writes measured roofs. Both print text or JSON and, with ``-o FILE.toml``, write the spec as a
file that ``--hardware FILE.toml`` reads. See docs/hardware-probe.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from graphcost.report.escape import terminal_text

PROBE_COMMANDS = ("detect", "measure")


def register(subparsers: Any, hardware_flags: Callable[[argparse.ArgumentParser], None]) -> None:
    d = subparsers.add_parser(
        "detect", help="identify this machine: its catalog entry, or a conservative estimate",
        description="Identify this machine (nvidia-smi/NVML, system_profiler, /proc/cpuinfo, lscpu, /sys caches) and "
                    "match it against the catalog; an unmatched CPU gets a conservative estimate.")
    d.add_argument("--format", choices=("text", "json"), default="text", help="text (default) or json")
    d.add_argument("--output", "-o", metavar="FILE.toml", help="write the detected or estimated spec as TOML")
    m = subparsers.add_parser(
        "measure", help="measure this machine's roofs (bandwidth per cache level, GEMM/Conv peaks)",
        description="Measure streaming bandwidth over working sets from 16 KiB to past the last-level cache and "
                    "GEMM/Conv FLOP/s per dtype with numpy and onnxruntime, using every CPU; the best figures "
                    "become a spec (roofs: nothing should run faster).")
    m.add_argument("--output", "-o", metavar="FILE.toml", help="write the measured spec as TOML")
    m.add_argument("--quick", action="store_true", help="small sizes, two repeats: seconds, not for budgeting")
    m.add_argument("--threads", type=int, metavar="N", help="threads to use (default: every CPU this process may use)")
    m.add_argument("--format", choices=("text", "json"), default="text", help="text (default) or json")
    m.add_argument("--refresh", action="store_true",
                   help="measure again and replace the cached roofs `--hardware measured` uses (kept only when "
                        "the machine was quiet; busy measurements are retried, at most 3 tries)")


def run(args: argparse.Namespace) -> int:
    if args.hw_command == "detect":
        return _detect(args)
    return _measure(args)


def _write_spec(spec: Any, output: str) -> None:
    from graphcost.cli import CliError, write_output
    from graphcost.hardware import catalog

    path = Path(output)
    write_output(output, catalog.to_toml(spec))  # atomic: a failed write leaves the old spec whole
    try:
        catalog.load_file(path)  # what we write must read back
    except catalog.HardwareError as e:
        raise CliError(f"--output {output}: the written spec does not read back ({e})") from None


def _guard(output: str | None) -> None:
    """``-o`` must be a plain file (not a directory, FIFO or device); these commands read no input file."""
    from graphcost._outpath import guard

    guard(output)


def _detect(args: argparse.Namespace) -> int:
    from graphcost.hardware import catalog
    from graphcost.hardware.detect import detect

    _guard(args.output)
    found = detect()
    if args.output:
        _write_spec(found.spec, args.output)
    if args.format == "json":
        sys.stdout.write(json.dumps(found.to_dict(), indent=2) + "\n")
        return 0
    lines = _found_lines(found)
    lines += ["", catalog.describe(found.spec)]
    if args.output:
        lines.append(f"wrote {args.output} (use: graphcost analyze MODEL --hardware {args.output})")
    sys.stdout.write("\n".join(terminal_text(line) for line in lines) + "\n")
    return 0


def _size(n: int | None) -> str:
    from graphcost.report.units import bytes_

    return "?" if n is None else bytes_(n)


def _found_lines(found: Any) -> list[str]:
    cpu = found.cpu
    simd = cpu.simd
    family = f", family {cpu.family} model {cpu.model_number}" if cpu.family is not None else ""
    clock = f"{cpu.clock_hz / 1e9:.4g} GHz ({cpu.clock_source})" if cpu.clock_hz else "not reported"
    caches = ", ".join(f"{c.name} {_size(c.size_bytes)} × {c.instances}" for c in cpu.caches) or "not reported"
    lines = [
        f"detected: {found.kind}",
        f"  CPU       {cpu.model} ({cpu.vendor or 'vendor unknown'}{family})",
        f"  cores     {cpu.physical_cores} ({cpu.usable_cpus} usable of {cpu.logical_cpus} logical CPUs, "
        f"{cpu.threads_per_core} thread(s) per core, {cpu.sockets or '?'} socket(s))",
        f"  clock     {clock}",
        f"  SIMD      {simd.isa} {simd.width_bits}-bit{', FMA' if simd.fma else ''}; {simd.pipes_reason}: "
        f"{simd.fp32_flops_per_cycle()} FP32 FLOP/cycle/core",
        f"  flags     {' '.join(cpu.flags) or '-'}",
        f"  caches    {caches}",
        f"  memory    {_size(cpu.memory_bytes)}",
    ]
    if cpu.board:
        lines.append(f"  board     {cpu.board}")
    for gpu in found.gpus:
        clock_text = f", {gpu.max_sm_clock_hz / 1e6:.0f} MHz max SM clock" if gpu.max_sm_clock_hz else ""
        lines.append(f"  GPU       {gpu.name}, {_size(gpu.memory_bytes)}{clock_text} ({gpu.source})")
    if found.apple is not None:
        a = found.apple
        lines.append(f"  Apple     {a.chip}, {a.cores or '?'} cores, {_size(a.memory_bytes)}")
    lines.append(f"match: {found.how}")
    lines += [f"note: {note}" for note in found.notes]
    return lines


def _measure(args: argparse.Namespace) -> int:
    from graphcost.cli import CliError
    from graphcost.hardware.measure import measure

    if args.threads is not None and args.threads < 1:
        raise CliError(f"--threads {args.threads}: must be ≥ 1")
    _guard(args.output)  # before a minute of measuring
    if args.refresh and args.threads is not None:
        raise CliError("--refresh measures the cached roofs with every CPU; leave out --threads")

    def progress(message: str) -> None:
        print(f"  {terminal_text(message)}", file=sys.stderr, flush=True)

    try:
        result = _refreshed(args.quick, progress) if args.refresh else measure(
            quick=args.quick, threads=args.threads, progress=progress)
    except ValueError as e:
        raise CliError(str(e).splitlines()[0]) from None
    if args.output:
        _write_spec(result.spec, args.output)
    if args.format == "json":
        sys.stdout.write(json.dumps(result.to_dict(), indent=2) + "\n")
        return 0
    warnings = [s for s in result.spec.sources if s.startswith("warning:")]
    lines = [*warnings, *([""] if warnings else []), *_measured_lines(result)]  # a busy machine's warning first
    if args.output:
        lines.append(f"wrote {args.output} (use: graphcost analyze MODEL --hardware {args.output})")
    sys.stdout.write("\n".join(terminal_text(line) for line in lines) + "\n")
    return 0


def _refreshed(quick: bool, progress: Callable[[str], None]) -> Any:
    """``--refresh``: the cache ``--hardware measured`` reads, measured again (busy roofs are not kept)."""
    from graphcost.hardware.measure import refresh_cache

    return refresh_cache(progress=progress, quick=quick)[0]


def _measured_lines(result: Any) -> list[str]:
    spec = result.spec
    lines = [f"{spec.name}: {result.threads} threads{' (quick run)' if result.quick else ''}", "",
             "bandwidth, GB/s (bytes read + written per pass; best runner named)",
             f"  {'working set':>11}  {'copy':>8} {'':<12} {'read':>8}"]
    for size in sorted({s.nominal for s in result.bandwidth}):
        cells = []
        for kernel in ("copy", "read"):
            top = max((s for s in result.bandwidth if s.nominal == size and s.kernel == kernel),
                      key=lambda s: s.bytes_per_s)
            cells.append(f"{top.bytes_per_s / 1e9:>8.4g} {top.runner:<12}")
        lines.append(f"  {_size(size):>11}  {' '.join(cells)}".rstrip())
    lines += ["", "compute, GFLOP/s (2 FLOPs per MAC)"]
    for key in sorted({(s.dtype, s.kernel, s.flops, s.shape) for s in result.compute}):
        runs = [s for s in result.compute if (s.dtype, s.kernel, s.flops, s.shape) == key]
        listed = "  ".join(f"{s.runner} {s.flops_per_s / 1e9:.4g}" for s in runs)
        lines.append(f"  {key[0]:<8} {key[1]:<4} {key[3]:<26} {listed}")
    lines += ["", "roofs (each the best measured; a level is never slower than a bigger one)"]
    for level in result.levels:
        cap = _size(level.capacity) if level.capacity is not None else ""
        lines.append(f"  {level.name:<5} {cap:>10}  {level.bandwidth / 1e9:>8.4g} GB/s  {level.decided_by}")
    for dtype, peak in sorted(spec.peak_flops.items()):
        lines.append(f"  {dtype:<8} {peak / 1e9:>9.4g} GFLOP/s  ridge {spec.ridge_point(dtype):.3g} FLOP/B (DRAM)")
    lines += [f"skipped: {s.what}: {s.reason}" for s in result.skipped]
    return lines
