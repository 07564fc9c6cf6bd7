"""Measure this machine's roofs: streaming bandwidth per working-set size, and GEMM/Conv peaks per dtype.

The numbers are *roofs*: the bound says no node runs faster, so each one is the best any runner reached, with all
the CPUs this process may use, never a typical value.

Bandwidth
    Two kernels over working sets swept from 16 KiB to past 4× the last-level cache (capped at 1/8 of available
    memory): *copy* (read + write) and *read* (a max-reduction, read only). Bytes are counted like a node's bytes:
    read + written per pass, so a copy of N bytes moves 2N and its working set is 2N. Two runners, best taken:

    - numpy, one thread per CPU, each streaming its own chunk (numpy releases the GIL); the threads start on a
      barrier and the timing runs from the first start to the last finish;
    - onnxruntime (the runner the bound is compared against), intra-op threads = CPUs: a chain of K ``Relu`` nodes
      (copy) or K ``ReduceMax`` nodes over one input (read), K chosen so small sizes are not all dispatch cost.

    Passes per timing are calibrated so a timing lasts at least ``min_timing_s``; the best of ``repeats`` counts.

Levels
    A level's capacity is its per-instance size × the instances the threads can run under (threads split the work,
    each holding 1/T of the working set; a level no bigger than the one below it adds that one's capacity, as in a
    victim cache). Level i's bandwidth is the best over working sets in (capacity of level i-1, capacity of level i],
    raised to the next bigger level's when lower (a working set that fits a faster level is never slower than a
    bigger one). DRAM is the best over working sets beyond the last level: every working set the bound charges at
    DRAM bandwidth, including those only a little larger than the cache.

Compute
    A large square GEMM per dtype, 2 FLOPs per multiply-accumulate, with numpy (BLAS, its default all-CPU threads)
    and onnxruntime ``MatMul`` (the right operand an initializer, as a model's weight is); float32 also a 64→64 3×3
    Conv on 56×56 in onnxruntime, so the roof holds for MLAS conv kernels. float16 and bfloat16 are measured only
    when the CPU has arithmetic for them (``detect.low_precision_arithmetic``); otherwise skipped, with the reason.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ._bench_kernels import (
    CONV,
    _best,
    _Blas,
    _conv_ort,
    _gemm_runners,
    _numpy_stream,
    _ort_stream,
)
from ._cache_levels import BandwidthSample, LevelRoof, _size, _sweep
from ._cache_levels import _capacities as _capacities  # tests check capacities and levels through this module
from ._cache_levels import _levels as _levels
from .detect import Detection, detect, low_precision_arithmetic, spec_to_dict
from .spec import HardwareSpec

__all__ = ["BandwidthSample", "ComputeSample", "LevelRoof", "Measured", "Skipped", "measure"]

FULL_GEMM = (512, 1024, 2048)
QUICK_GEMM = (128, 256)
MEASURABLE = ("float32", "float64", "float16", "bfloat16")


@dataclass(frozen=True)
class ComputeSample:
    kernel: str  # "gemm" or "conv"
    runner: str
    dtype: str
    shape: str
    flops: int  # per call
    calls: int  # per timing
    repeats: int
    best_s: float

    @property
    def flops_per_s(self) -> float:
        return self.flops * self.calls / self.best_s


@dataclass(frozen=True)
class Skipped:
    what: str
    reason: str


@dataclass(frozen=True)
class Measured:
    spec: HardwareSpec
    threads: int
    quick: bool
    bandwidth: tuple[BandwidthSample, ...]
    compute: tuple[ComputeSample, ...]
    levels: tuple[LevelRoof, ...]  # cache levels smallest first, then DRAM
    skipped: tuple[Skipped, ...]
    detection: Detection

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec": spec_to_dict(self.spec),
            "threads": self.threads,
            "quick": self.quick,
            "bandwidth": [asdict(s) | {"bytes_per_s": s.bytes_per_s} for s in self.bandwidth],
            "compute": [asdict(s) | {"flops_per_s": s.flops_per_s} for s in self.compute],
            "levels": [asdict(level) for level in self.levels],
            "skipped": [asdict(s) for s in self.skipped],
            "detection": self.detection.to_dict(),
        }


Progress = Callable[[str], None]


def _one_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:200] if text else type(e).__name__


# ---------------------------------------------------------------------------------------------------------------
# The measurement


def measure(
    *,
    quick: bool = False,
    threads: int | None = None,
    dtypes: Sequence[str] = ("float32", "float64"),
    progress: Progress | None = None,
    detection: Detection | None = None,
) -> Measured:
    """Run the microbenchmarks and build a ``kind = "measured"`` spec (see the module docstring for the method).

    ``quick`` uses small sizes and two repeats: a valid spec in a second or two, for tests, not for budgeting.
    ``threads`` defaults to every CPU this process may use. Raises ValueError for a bad argument.
    """
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be ≥ 1, got {threads}")
    bad = [d for d in dtypes if d not in MEASURABLE]
    if bad:
        raise ValueError(f"cannot measure dtype {bad[0]!r}; measurable: {', '.join(MEASURABLE)}")
    if "float32" not in dtypes:
        raise ValueError("dtypes must include float32: every spec needs a float32 peak")
    load_before = _load1()  # before our own threads raise it
    det = detection if detection is not None else detect()
    usable = det.cpu.usable_cpus
    threads = usable if threads is None else threads
    say = progress or (lambda _msg: None)
    min_timing_s, repeats = (5e-4, 2) if quick else (2e-3, 7)
    skipped: list[Skipped] = []

    bandwidth: list[BandwidthSample] = []
    with ThreadPoolExecutor(threads, thread_name_prefix="graphcost-stream") as pool:
        for size in _sweep(det, quick, threads):
            for kernel in ("copy", "read"):
                moved, timed = _numpy_stream(pool, threads, kernel, size)
                passes, best = _best(timed, min_timing_s, repeats)
                bandwidth.append(BandwidthSample(kernel, "numpy", size, moved, passes, repeats, best))
                per_node, chain, timed = _ort_stream(threads, kernel, size)
                runs, best = _best(timed, min_timing_s, repeats)
                bandwidth.append(BandwidthSample(kernel, "onnxruntime", size, per_node, runs * chain, repeats, best))
            rates = {k: max(s.bytes_per_s for s in bandwidth if s.nominal == size and s.kernel == k)
                     for k in ("copy", "read")}  # fmt: skip
            say(f"bandwidth {_size(size)}: copy {rates['copy'] / 1e9:.4g} GB/s, read {rates['read'] / 1e9:.4g} GB/s")

    compute: list[ComputeSample] = []
    compute_repeats = 2 if quick else 5
    arithmetic = low_precision_arithmetic(det.cpu.flags)
    blas = _Blas()
    blas_default = blas.get() if blas.get is not None else None
    if blas.set is None and threads != usable:
        skipped.append(Skipped("numpy GEMM", f"numpy's BLAS thread count cannot be set here; only onnxruntime runs "
                                             f"with {threads} threads"))
    pool = ThreadPoolExecutor(threads, thread_name_prefix="graphcost-gemm")
    try:
        for dtype in dtypes:
            if dtype in arithmetic and arithmetic[dtype] is None:
                skipped.append(Skipped(dtype, f"this CPU has no {dtype} arithmetic (no flag for it); {dtype} nodes "
                                              "use the float32 roof"))
                continue
            if dtype == "bfloat16":
                skipped.append(Skipped(dtype, f"CPU flag {arithmetic[dtype]} found, but no runner: numpy has no "
                                              "bfloat16 dtype and onnxruntime's CPU MatMul no bfloat16 kernel"))
                continue
            for n in QUICK_GEMM if quick else FULL_GEMM:
                for runner, build in _gemm_runners(dtype, n, threads, usable, blas, pool):
                    try:
                        flops, timed = build()
                        calls, best = _best(timed, min_timing_s, compute_repeats)
                    except Exception as e:  # a runner without a kernel for the dtype is a skip, with its message
                        skipped.append(Skipped(f"{runner} {dtype} GEMM {n}", _one_line(e)))
                        continue
                    sample = ComputeSample("gemm", runner, dtype, f"{n}x{n}x{n}", flops, calls, compute_repeats, best)
                    compute.append(sample)
                    say(f"{dtype} GEMM {n} {runner}: {sample.flops_per_s / 1e9:.4g} GFLOP/s")
    finally:
        pool.shutdown()
        if blas.set is not None and blas_default is not None:
            blas.set(blas_default)
    for batch in (1,) if quick else (1, 4):
        flops, timed = _conv_ort(batch, threads)
        calls, best = _best(timed, min_timing_s, compute_repeats)
        cin, cout, side, k = CONV
        shape = f"{batch}x{cin}x{side}x{side} * {cout}x{cin}x{k}x{k}"
        compute.append(ComputeSample("conv", "onnxruntime", "float32", shape, flops, calls, compute_repeats, best))
        say(f"float32 Conv {shape}: {compute[-1].flops_per_s / 1e9:.4g} GFLOP/s")

    capacities = _capacities(det, threads)
    levels = _levels(bandwidth, capacities)
    spec = _spec(det, threads, quick, bandwidth, compute, levels, skipped, min_timing_s, repeats, load_before)
    return Measured(spec, threads, quick, tuple(bandwidth), tuple(compute), levels, tuple(skipped), det)


def _spec(det: Detection, threads: int, quick: bool, bandwidth: Sequence[BandwidthSample],
          compute: Sequence[ComputeSample], levels: Sequence[LevelRoof], skipped: Sequence[Skipped],
          min_timing_s: float, repeats: int, load_before: float | None = None) -> HardwareSpec:
    import onnxruntime as ort

    peaks: dict[str, float] = {}
    sources = [
        f"measured {time.strftime('%Y-%m-%d')} by graphcost hardware measure{' --quick' if quick else ''}: "
        f"{threads} threads, numpy {np.__version__}, onnxruntime {ort.__version__}",
        "convention: bandwidth = (bytes read + bytes written) per pass / time, so a copy of N bytes moves 2N; "
        f"working set = those bytes; each figure the best of {repeats} timings of ≥ {min_timing_s * 1e3:g} ms",
    ]
    busy = busy_warning(threads, load_before)
    if busy:
        sources.append(busy)
    for kernel, runner in sorted({(s.kernel, s.runner) for s in bandwidth}):
        rows = [s for s in bandwidth if (s.kernel, s.runner) == (kernel, runner)]
        listed = ", ".join(f"{_size(s.working_set)} {s.bytes_per_s / 1e9:.4g}" for s in rows)
        sources.append(f"bandwidth {kernel} {runner} (GB/s): {listed}")
    by_name = {c.name: c for c in det.cpu.caches}
    for level in levels[:-1]:
        cache = by_name[level.name]
        parts = f"{_size(cache.size_bytes)} × {min(cache.instances, threads)} instances"
        sources.append(f"cache_levels {level.name} {_size(level.capacity or 0)} ({parts}): {level.decided_by}")
    sources.append(f"memory_bandwidth: {levels[-1].decided_by} (best beyond the last cache level)")
    for dtype in sorted({s.dtype for s in compute}):
        runs = [s for s in compute if s.dtype == dtype]
        peaks[dtype] = max(s.flops_per_s for s in runs)
        listed = ", ".join(f"{s.runner} {s.kernel} {s.shape} {s.flops_per_s / 1e9:.4g}" for s in runs)
        sources.append(f"peak_flops.{dtype}: best of (GFLOP/s, 2 FLOPs per MAC): {listed}")
    sources += [f"skipped: {s.what}: {s.reason}" for s in skipped]
    if "float32" not in peaks:
        raise RuntimeError("no float32 GEMM or Conv could be measured: " + "; ".join(sources[-3:]))
    cache_levels = tuple((level.capacity or 0, level.bandwidth) for level in levels[:-1])
    slug = "-".join(t for t in "".join(c if c.isalnum() else " " for c in det.cpu.model.lower()).split()) or "cpu"
    spec = HardwareSpec(
        name=f"measured-{slug}",
        peak_flops=peaks,
        memory_bandwidth=levels[-1].bandwidth,
        kind="measured",
        description=f"measured roofs of {det.cpu.model}, {threads} threads{' (quick run)' if quick else ''}",
        sources=tuple(sources),
    )
    if cache_levels:
        spec = replace(spec, cache_levels=cache_levels, onchip_bytes=cache_levels[-1][0],
                       onchip_bandwidth=cache_levels[-1][1])
    return spec


def cache_path() -> Path:
    """Where ``--hardware measured`` keeps this machine's roofs: one file per host and CPU model."""
    import hashlib
    import platform

    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "graphcost"
    det = detect()
    key = f"{platform.node()}|{det.cpu.model}|{det.cpu.usable_cpus}|{platform.machine()}"
    return base / f"roofs-{hashlib.sha256(key.encode()).hexdigest()[:16]}.toml"


def measured_roofs(*, refresh: bool = False, progress: Progress | None = None,
                   quick: bool = False) -> tuple[HardwareSpec, Path, bool]:
    """This machine's measured roofs, from the cache or measured now (a full run, about a minute).

    Returns the spec, the cache file and whether it was measured just now. A cache file that no longer parses is
    measured again.
    """
    from graphcost.hardware.catalog import HardwareError, load_file, to_toml

    path = cache_path()
    if not refresh and path.is_file():
        try:
            return load_file(path), path, False
        except HardwareError:
            pass
    spec = measure(progress=progress, quick=quick).spec
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(to_toml(spec), encoding="utf-8")
    os.replace(tmp, path)
    return spec, path, True


def _load1() -> float | None:
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):  # no load average on this platform
        return None


def busy_warning(threads: int, load1: float | None) -> str | None:
    """A warning when other work was using the CPUs as the measurement started (the 1-minute load average
    before our own threads ran): roofs measured then are too low, and an honest measurement would later look
    faster than its bound."""
    if load1 is None or load1 <= 0.5 * threads:
        return None
    return (f"warning: the machine was busy when measuring started (1-minute load average {load1:.2f} on {threads} "
            "threads): these roofs are probably too low; measure again on an idle machine")
