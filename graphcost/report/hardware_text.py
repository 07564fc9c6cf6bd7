"""The text of ``graphcost hardware detect`` (what this machine is) and ``hardware measure`` (its measured
roofs); the CLI escapes every line on the way out (``report/escape.py``)."""

from __future__ import annotations

from typing import Any

from graphcost.report.units import bytes_


def _size(n: int | None) -> str:
    return "?" if n is None else bytes_(n)


def found_lines(found: Any) -> list[str]:
    """``hardware detect``'s text: what was found (CPU, caches, GPUs) and how it matched the catalog."""
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


def measured_lines(result: Any) -> list[str]:
    """``hardware measure``'s text: bandwidth per working set, compute per dtype, and the roofs."""
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
