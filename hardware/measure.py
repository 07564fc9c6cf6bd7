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

import json
import math
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

import graphcost
from graphcost.report.escape import terminal_text

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
from .catalog import HardwareError, load_file, to_toml
from .detect import Detection, detect, low_precision_arithmetic
from .spec import HardwareSpec

__all__ = [
    "BandwidthSample", "ComputeSample", "LevelRoof", "Measured", "Skipped", "StderrProgress", "busy_roofs",
    "judge_quiet", "measure", "measured_roofs", "refresh_cache",
]

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
    busy: str | None = None  # why the machine looked busy while measuring (``judge_quiet``); None: quiet
    tries: int = 1  # measurements merged into these roofs (``measured_roofs`` retries a busy one)

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec": self.spec.to_dict(complete=True),
            "threads": self.threads,
            "quick": self.quick,
            "busy": self.busy,
            "tries": self.tries,
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
    ours_in_load: bool = False,
) -> Measured:
    """Run the microbenchmarks and build a ``kind = "measured"`` spec (see the module docstring for the method).

    ``quick`` uses small sizes and two repeats: a valid spec in a second or two, for tests, not for budgeting.
    ``threads`` defaults to every CPU this process may use. Raises ValueError for a bad argument.
    ``ours_in_load``: the load average before this run still holds an earlier measurement's threads (a retry),
    so only the load during it and the spread judge whether the machine was busy (``judge_quiet``).
    """
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be ≥ 1, got {threads}")
    bad = [d for d in dtypes if d not in MEASURABLE]
    if bad:
        raise ValueError(f"cannot measure dtype {bad[0]!r}; measurable: {', '.join(MEASURABLE)}")
    if "float32" not in dtypes:
        raise ValueError("dtypes must include float32: every spec needs a float32 peak")
    load_before = _load1()  # before our own threads raise it
    started = time.monotonic()
    spreads: list[float] = []
    det = detection if detection is not None else detect()
    usable = det.cpu.usable_cpus
    threads = usable if threads is None else threads
    say = progress or (lambda _msg: None)
    min_timing_s, repeats = (5e-4, 2) if quick else (2e-3, 7)
    skipped: list[Skipped] = []

    bandwidth: list[BandwidthSample] = []
    sweep = _sweep(det, quick, threads)
    say(stage(1, f"bandwidth: {len(sweep)} working sets, {_size(sweep[0])} … {_size(sweep[-1])}, {threads} threads"))
    with ThreadPoolExecutor(threads, thread_name_prefix="graphcost-stream") as pool:
        for size in sweep:
            for kernel in ("copy", "read"):
                moved, timed = _numpy_stream(pool, threads, kernel, size)
                passes, best = _best(timed, min_timing_s, repeats, spreads)
                bandwidth.append(BandwidthSample(kernel, "numpy", size, moved, passes, repeats, best))
                per_node, chain, timed = _ort_stream(threads, kernel, size)
                runs, best = _best(timed, min_timing_s, repeats, spreads)
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
    say(stage(2, f"compute: GEMM {', '.join(map(str, QUICK_GEMM if quick else FULL_GEMM))} per dtype "
                 f"({', '.join(dtypes)})"))
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
                        calls, best = _best(timed, min_timing_s, compute_repeats, spreads)
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
    say(stage(3, "compute: float32 Conv 64→64 3×3 on 56×56 in onnxruntime"))
    for batch in (1,) if quick else (1, 4):
        flops, timed = _conv_ort(batch, threads)
        calls, best = _best(timed, min_timing_s, compute_repeats, spreads)
        cin, cout, side, k = CONV
        shape = f"{batch}x{cin}x{side}x{side} * {cout}x{cin}x{k}x{k}"
        compute.append(ComputeSample("conv", "onnxruntime", "float32", shape, flops, calls, compute_repeats, best))
        say(f"float32 Conv {shape}: {compute[-1].flops_per_s / 1e9:.4g} GFLOP/s")

    busy = judge_quiet(threads, load_before, _load1(), time.monotonic() - started, _typical(spreads),
                       ours_in_before=ours_in_load)
    return _assemble(det, threads, quick, bandwidth, compute, skipped, busy)


def _assemble(det: Detection, threads: int, quick: bool, bandwidth: Sequence[BandwidthSample],
              compute: Sequence[ComputeSample], skipped: Sequence[Skipped], busy: str | None,
              tries: int = 1) -> Measured:
    """The levels and the spec of a set of samples (one measurement's, or the best of several)."""
    min_timing_s, repeats = (5e-4, 2) if quick else (2e-3, 7)
    levels = _levels(bandwidth, _capacities(det, threads))
    spec = _spec(det, threads, quick, bandwidth, compute, levels, skipped, min_timing_s, repeats, busy, tries)
    return Measured(spec, threads, quick, tuple(bandwidth), tuple(compute), levels, tuple(skipped), det, busy, tries)


def _spec(det: Detection, threads: int, quick: bool, bandwidth: Sequence[BandwidthSample],
          compute: Sequence[ComputeSample], levels: Sequence[LevelRoof], skipped: Sequence[Skipped],
          min_timing_s: float, repeats: int, busy: str | None = None, tries: int = 1) -> HardwareSpec:
    import onnxruntime as ort

    peaks: dict[str, float] = {}
    sources = [
        f"measured {time.strftime('%Y-%m-%d')} by graphcost hardware measure{' --quick' if quick else ''}: "
        f"{threads} threads, numpy {np.__version__}, onnxruntime {ort.__version__}",
        "convention: bandwidth = (bytes read + bytes written) per pass / time, so a copy of N bytes moves 2N; "
        f"working set = those bytes; each figure the best of {repeats} timings of ≥ {min_timing_s * 1e3:g} ms",
    ]
    if busy:
        sources.append(_warning_text(busy, tries))
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


# ---------------------------------------------------------------------------------------------------------------
# Busy or quiet: roofs measured while other work shares the CPUs are low, and must not be kept

BUSY_LOAD_FRACTION = 0.5
"""Other runnable tasks above this fraction of the measuring threads make the machine busy."""
SPREAD_LIMIT = 1.3
"""A typical benchmark (the median over all) whose median repeat is this much slower than its best ran with
other work on its CPUs: on a quiet machine repeats of ≥ 2 ms agree within a few percent."""
LOAD_WINDOW_S = 60.0
"""The 1-minute load average is an exponential average with this time constant."""
MIN_WINDOW_S = 10.0
"""Below this a measurement moves the load average too little to tell our threads from others'."""
MAX_TRIES = 3
"""Measurements ``measured_roofs`` makes at most before it gives up on a quiet machine."""
CACHE_MAX_AGE_S = 30 * 86400.0
"""Cached roofs older than this are measured again (a BIOS, kernel or power setting may have changed)."""
BUSY_PREFIX = "warning: the machine was busy"
"""How a busy measurement's warning starts in ``HardwareSpec.sources`` (``busy_roofs`` looks for it)."""
_CACHE_HEADER = "# graphcost roofs cache "


def stage(k: int, text: str, total: int = 3) -> str:
    """A progress message that starts a stage: ``[k/total] text`` (``StderrProgress`` shows every one)."""
    return f"[{k}/{total}] {text}"


def _typical(spreads: Sequence[float]) -> float | None:
    """The median benchmark's spread: one noisy benchmark does not make a machine busy."""
    if not spreads:
        return None
    ordered = sorted(spreads)
    return ordered[len(ordered) // 2]


def others_running(threads: int, load_before: float, load_after: float, elapsed_s: float) -> float:
    """Runnable tasks other than our ``threads`` during a measurement of ``elapsed_s``, from the 1-minute load
    average around it. Over ``t`` seconds the average moves toward the runnable count ``n``:
    ``after = before·e^(−t/60) + n·(1 − e^(−t/60))``, so ``n = (after − before·e^(−t/60)) / (1 − e^(−t/60))``, and
    the others are ``n − threads`` (our threads are not always runnable, so this errs toward quiet)."""
    decay = math.exp(-elapsed_s / LOAD_WINDOW_S)
    return (load_after - load_before * decay) / (1 - decay) - threads


def judge_quiet(threads: int, load_before: float | None, load_after: float | None, elapsed_s: float,
                spread: float | None, *, ours_in_before: bool = False) -> str | None:
    """Why the machine was busy during a measurement, or None when it was quiet. Three signs, any one enough:
    the load average before it (unless ``ours_in_before``: it then still holds our previous try's threads), the
    other tasks runnable during it (``others_running``, for measurements of ``MIN_WINDOW_S`` or more), and the
    typical run-to-run spread of its benchmarks (``SPREAD_LIMIT``)."""
    limit = BUSY_LOAD_FRACTION * threads
    reasons = []
    if load_before is not None and not ours_in_before and load_before > limit:
        reasons.append(f"1-minute load average {load_before:.2f} on {threads} threads before measuring")
    if load_before is not None and load_after is not None and elapsed_s >= MIN_WINDOW_S:
        others = others_running(threads, load_before, load_after, elapsed_s)
        if others > limit:
            reasons.append(f"about {others:.1f} other runnable tasks while measuring (load average {load_before:.2f}"
                           f" → {load_after:.2f} over {elapsed_s:.0f} s)")
    if spread is not None and spread > SPREAD_LIMIT:
        reasons.append(f"repeats {spread:.2f}× their best (median benchmark; a quiet machine stays within "
                       f"{SPREAD_LIMIT:g}×)")
    return "; ".join(reasons) or None


def _warning_text(reason: str, tries: int = 1) -> str:
    told = f", {tries} tries, best figures kept" if tries > 1 else ""
    return (f"{BUSY_PREFIX} while measuring roofs ({reason}{told}): these roofs are probably too low, so kernels "
            "can look faster than their bound; measure again on an idle machine (graphcost hardware measure "
            "--refresh)")


def busy_warning(threads: int, load1: float | None) -> str | None:
    """The warning for a measurement that started with the 1-minute load average ``load1`` (None: quiet)."""
    reason = judge_quiet(threads, load1, None, 0.0, None)
    return None if reason is None else _warning_text(reason)


def busy_roofs(spec: HardwareSpec) -> str | None:
    """The busy-machine warning a measured spec carries (measured now or read from a file), or None."""
    return next((s for s in spec.sources if s.startswith(BUSY_PREFIX)), None)


def _best_of(tries: Sequence[Measured]) -> Measured:
    """One Measured from several: per benchmark the best any try reached (a roof is the best the machine does)."""
    if len(tries) == 1:
        return tries[0]
    bandwidth: dict[tuple[str, str, int], BandwidthSample] = {}
    for b in (b for m in tries for b in m.bandwidth):
        key = (b.kernel, b.runner, b.nominal)
        if key not in bandwidth or b.bytes_per_s > bandwidth[key].bytes_per_s:
            bandwidth[key] = b
    compute: dict[tuple[str, str, str, str], ComputeSample] = {}
    for c in (c for m in tries for c in m.compute):
        ckey = (c.kernel, c.runner, c.dtype, c.shape)
        if ckey not in compute or c.flops_per_s > compute[ckey].flops_per_s:
            compute[ckey] = c
    last = tries[-1]
    busy = last.busy if all(m.busy for m in tries) else None
    return _assemble(last.detection, last.threads, last.quick, list(bandwidth.values()), list(compute.values()),
                     last.skipped, busy, len(tries))


# ---------------------------------------------------------------------------------------------------------------
# The cache ``--hardware measured`` reads


def cache_path() -> Path:
    """Where ``--hardware measured`` keeps this machine's roofs: one file per host and CPU model."""
    import hashlib
    import platform

    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "graphcost"
    det = detect()
    key = f"{platform.node()}|{det.cpu.model}|{det.cpu.usable_cpus}|{platform.machine()}"
    return base / f"roofs-{hashlib.sha256(key.encode()).hexdigest()[:16]}.toml"


def cache_key() -> dict[str, Any]:
    """What cached roofs depend on: a cache written under another key is stale and measured again."""
    import platform

    import onnxruntime as ort

    det = detect()
    return {"cpu": det.cpu.model, "usable_cpus": det.cpu.usable_cpus, "machine": platform.machine(),
            "numpy": np.__version__, "onnxruntime": ort.__version__, "graphcost": graphcost.__version__}


def _read_cache(path: Path, key: dict[str, Any], now: float) -> tuple[HardwareSpec | None, str]:
    """The cached spec, or None and why it cannot be used (missing, unreadable, stale, expired, busy)."""
    if not path.is_file():
        return None, "no cached roofs yet"
    try:
        first = path.read_text(encoding="utf-8").split("\n", 1)[0]
        meta = json.loads(first[len(_CACHE_HEADER):]) if first.startswith(_CACHE_HEADER) else None
        spec = load_file(path)
    except (OSError, UnicodeDecodeError, ValueError, HardwareError):
        return None, "the cached roofs do not read back"
    if not isinstance(meta, dict) or meta.get("key") != key:
        return None, "the cached roofs were measured with another CPU, core count or library version"
    measured_at = meta.get("measured_at")
    if not isinstance(measured_at, int | float) or not 0 <= now - measured_at <= CACHE_MAX_AGE_S:
        return None, f"the cached roofs are older than {CACHE_MAX_AGE_S / 86400:g} days"
    if busy_roofs(spec):
        return None, "the cached roofs were measured on a busy machine"
    return spec, "cached"


def measured_roofs(*, refresh: bool = False, progress: Progress | None = None,
                   quick: bool = False, tries: int = MAX_TRIES) -> tuple[HardwareSpec, Path, bool]:
    """This machine's measured roofs, from the cache or measured now (a full run, about 35 s a try).

    Returns the spec, the cache file and whether it was measured just now. The cache is used unless ``refresh``,
    missing, unreadable, written under another ``cache_key`` or older than ``CACHE_MAX_AGE_S``; otherwise
    ``refresh_cache`` measures (busy roofs come back with their warning, uncached).
    """
    say = progress or (lambda _msg: None)
    path = cache_path()
    if not refresh:
        cached, why = _read_cache(path, cache_key(), time.time())
        if cached is not None:
            return cached, path, False
        say(f"measuring this machine's roofs ({why}; about 35 s, cached in {path})")
    return refresh_cache(progress=progress, quick=quick, tries=tries)[0].spec, path, True


def refresh_cache(*, progress: Progress | None = None, quick: bool = False,
                  tries: int = MAX_TRIES) -> tuple[Measured, Path, bool]:
    """Measure this machine's roofs and replace the cache with them; returns them, the cache file and whether
    they were cached.

    A measurement the machine was busy for (``judge_quiet``) is repeated, ``tries`` measurements at most; if none
    is quiet the best figures of all are returned with the busy warning in their sources and **not cached**
    (the old cache is removed): the next run measures again rather than trusting low roofs.
    """
    say = progress or (lambda _msg: None)
    path = cache_path()
    done: list[Measured] = []
    for attempt in range(1, max(1, tries) + 1):
        m = measure(progress=progress, quick=quick, ours_in_load=attempt > 1)
        done.append(m)
        if m.busy is None:
            break
        more = f"; measuring again (try {attempt + 1} of {tries})" if attempt < tries else ""
        say(f"warning: the machine is busy ({m.busy}){more}")
    result = done[-1] if done[-1].busy is None else _best_of(done)
    if result.busy is not None:
        say(f"warning: no quiet measurement in {len(done)} tries: using the best figures, not caching them")
        path.unlink(missing_ok=True)
        return result, path, False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    header = _CACHE_HEADER + json.dumps({"key": cache_key(), "measured_at": time.time()})
    tmp.write_text(header + "\n" + to_toml(result.spec), encoding="utf-8")
    os.replace(tmp, path)
    say(f"roofs cached in {path}")
    return result, path, True


class StderrProgress:
    """Progress for a measurement someone is waiting on: on a terminal one line rewritten in place for every
    step; elsewhere (a pipe, a CI log) one line per stage and per warning. ``close`` ends a rewritten line."""

    def __init__(self, stream: Any = None, prefix: str = "graphcost: ") -> None:
        import sys

        self.stream = stream if stream is not None else sys.stderr
        self.prefix = prefix
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.open = False

    def __call__(self, message: str) -> None:
        text = self.prefix + terminal_text(message)
        lasting = message.startswith(("warning", "measuring", "roofs"))  # stays on screen
        if self.tty and not lasting:  # a stage or a step: rewrite the line
            self.stream.write("\r\x1b[2K" + text[:159])
            self.open = True
        elif self.tty or lasting or message.startswith("["):  # a step off a terminal is left out
            self.stream.write(("\r\x1b[2K" if self.open else "") + text + "\n")
            self.open = False
        self.stream.flush()

    def close(self) -> None:
        if self.open:
            self.stream.write("\n")
            self.stream.flush()
            self.open = False


def _load1() -> float | None:
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):  # no load average on this platform
        return None
