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

import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from .detect import Detection, detect, low_precision_arithmetic, spec_to_dict
from .spec import HardwareSpec

__all__ = ["BandwidthSample", "ComputeSample", "LevelRoof", "Measured", "Skipped", "measure"]

KIB = 2**10
MIB = 2**20
FLOPS_PER_MAC = 2
FULL_SIZES = (16 * KIB, 32 * KIB, 64 * KIB, 256 * KIB, 1 * MIB, 4 * MIB, 16 * MIB, 64 * MIB, 256 * MIB)
QUICK_SIZES = (16 * KIB, 256 * KIB, 4 * MIB)
QUICK_LARGEST = 64 * MIB
"""The quick sweep adds one working set past the last-level cache, at most this big."""
FULL_GEMM = (512, 1024, 2048)
QUICK_GEMM = (128, 256)
CONV = (64, 64, 56, 3)  # channels in, channels out, height = width, kernel
MEMORY_FRACTION = 8
"""The largest working set is at most 1/8 of available memory (each runner holds it, onnxruntime more)."""
ORT_CHAIN_BYTES = 8 * MIB
"""Bytes one onnxruntime run should move at least: K = this / per-node bytes, between 1 and ``ORT_MAX_CHAIN``."""
ORT_MAX_CHAIN = 64
MEASURABLE = ("float32", "float64", "float16", "bfloat16")
_NP_DTYPE = {"float32": np.float32, "float64": np.float64, "float16": np.float16}
_ONNX_DTYPE = {"float32": 1, "float16": 10, "float64": 11}  # onnx.TensorProto enum values


@dataclass(frozen=True)
class BandwidthSample:
    kernel: str  # "copy" (read + write) or "read"
    runner: str  # "numpy" or "onnxruntime"
    nominal: int  # the sweep's working set
    working_set: int  # bytes read + written per pass, as run
    passes: int  # per timing
    repeats: int
    best_s: float

    @property
    def bytes_per_s(self) -> float:
        return self.working_set * self.passes / self.best_s


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
class LevelRoof:
    name: str  # "L1d", "L2", "L3", "DRAM"
    capacity: int | None  # bytes over the threads' instances; None for DRAM
    bandwidth: float
    decided_by: str  # which sample, or "raised to <level>"


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
Timed = Callable[[int], float]
"""``timed(passes)``: seconds for that many passes of one benchmark."""


# ---------------------------------------------------------------------------------------------------------------
# Timing


def _best(timed: Timed, min_timing_s: float, repeats: int) -> tuple[int, float]:
    """(passes, best seconds): ``timed(passes)`` is calibrated to last ≥ ``min_timing_s``, best of ``repeats``."""
    timed(1)  # warm-up: first touch of fresh pages, onnxruntime's first-run allocations
    once = timed(1)
    passes = max(1, min(1_000_000, math.ceil(min_timing_s / max(once, 1e-9))))
    return passes, min(timed(passes) for _ in range(repeats))


def _numpy_stream(pool: ThreadPoolExecutor, threads: int, kernel: str, working_set: int) -> tuple[int, Timed]:
    """Each thread streams its own chunk; the timing runs from the first thread's start to the last one's end."""
    per_thread = working_set // threads
    n = max(16, per_thread // (2 if kernel == "copy" else 1) // 4)
    chunks = [(np.ones(n, np.float32), np.empty(n, np.float32) if kernel == "copy" else None) for _ in range(threads)]

    def timed(passes: int) -> float:
        barrier = threading.Barrier(threads, timeout=120)

        def work(i: int) -> tuple[float, float]:
            src, dst = chunks[i]
            barrier.wait()
            start = time.perf_counter()
            if dst is not None:
                for _ in range(passes):
                    np.copyto(dst, src)
            else:
                for _ in range(passes):
                    src.max()
            return start, time.perf_counter()

        spans = list(pool.map(work, range(threads)))
        return max(end for _, end in spans) - min(start for start, _ in spans)

    return threads * n * 4 * (2 if kernel == "copy" else 1), timed


def _session(model: Any, threads: int, optimize: bool) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    if not optimize:  # stream chains: nothing to optimise, and nothing may be removed
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _runner(session: Any, feeds: dict[str, np.ndarray]) -> Timed:
    """Timed repeated runs with inputs and outputs bound once (no per-run allocation or copy)."""
    import onnxruntime as ort

    binding = session.io_binding()
    for name, array in feeds.items():
        binding.bind_cpu_input(name, array)
    for out in session.get_outputs():
        binding.bind_output(out.name, "cpu")
    session.run_with_iobinding(binding)
    for out, value in zip(session.get_outputs(), binding.get_outputs(), strict=True):
        array = np.empty(value.shape(), dtype=value.numpy().dtype)
        binding.bind_ortvalue_output(out.name, ort.OrtValue.ortvalue_from_numpy(array))

    def timed(calls: int) -> float:
        start = time.perf_counter()
        for _ in range(calls):
            session.run_with_iobinding(binding)
        return time.perf_counter() - start

    return timed


def _model(nodes: list[Any], inputs: list[Any], outputs: list[Any], initializers: Sequence[Any] = ()) -> Any:
    from onnx import helper

    graph = helper.make_graph(nodes, "probe", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _ort_stream(threads: int, kernel: str, working_set: int) -> tuple[int, int, Timed]:
    """(per-node bytes, nodes per run, timed): K Relu nodes in a chain, or K ReduceMax nodes reading one input."""
    from onnx import TensorProto, helper

    n = max(16, working_set // (2 if kernel == "copy" else 1) // 4)
    per_node = n * 4 * (2 if kernel == "copy" else 1)
    chain = max(1, min(ORT_MAX_CHAIN, ORT_CHAIN_BYTES // per_node))
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [n])
    if kernel == "copy":
        nodes = [helper.make_node("Relu", ["X" if k == 0 else f"t{k - 1}"], [f"t{k}"]) for k in range(chain)]
        outputs = [helper.make_tensor_value_info(f"t{chain - 1}", TensorProto.FLOAT, [n])]
    else:
        nodes = [helper.make_node("ReduceMax", ["X"], [f"r{k}"], keepdims=0) for k in range(chain)]
        outputs = [helper.make_tensor_value_info(f"r{k}", TensorProto.FLOAT, []) for k in range(chain)]
    session = _session(_model(nodes, [x], outputs), threads, optimize=False)
    return per_node, chain, _runner(session, {"X": np.random.default_rng(0).random(n, dtype=np.float32)})


def _sweep(detection: Detection, quick: bool, threads: int) -> list[int]:
    """Working sets: the fixed sweep, one per cache band that has none, and past 4× the LLC, within memory."""
    capacities = [cap for _, cap in _capacities(detection, threads)]
    llc = capacities[-1] if capacities else 32 * MIB
    available = _available_memory() or detection.cpu.memory_bytes or 4 * 2**30
    limit = available // MEMORY_FRACTION
    if quick:
        sizes = set(QUICK_SIZES) | {min(QUICK_LARGEST, 2 ** math.ceil(math.log2(2 * llc)))}
    else:
        sizes = set(FULL_SIZES) | {2 ** math.ceil(math.log2(4 * llc)), 2 ** math.ceil(math.log2(8 * llc))}
        lower = 0
        for cap in capacities:
            if not any(lower < s <= cap for s in sizes):
                sizes.add(cap)
            lower = cap
    return sorted(s for s in sizes if s <= limit) or [min(sizes)]


def _available_memory() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * KIB
    except (OSError, ValueError, IndexError):
        pass
    return None


# ---------------------------------------------------------------------------------------------------------------
# Levels


def _capacities(detection: Detection, threads: int) -> list[tuple[str, int]]:
    """Each data cache level's capacity over the instances the threads may run under, strictly growing."""
    out: list[tuple[str, int]] = []
    for cache in sorted(detection.cpu.caches, key=lambda c: c.level):
        cap = cache.size_bytes * max(1, min(cache.instances, threads))
        if out and cap <= out[-1][1]:
            cap += out[-1][1]  # not bigger than the level below: count both, as a victim cache holds both
        out.append((cache.name, cap))
    return out


def _describe_sample(s: BandwidthSample) -> str:
    return f"{s.kernel} {s.runner} at {_size(s.working_set)}: {s.bytes_per_s / 1e9:.4g} GB/s"


def _levels(samples: Sequence[BandwidthSample], capacities: Sequence[tuple[str, int]]) -> tuple[LevelRoof, ...]:
    def best(lo: int, hi: float) -> BandwidthSample | None:
        inside = [s for s in samples if lo < s.working_set <= hi]
        return max(inside, key=lambda s: s.bytes_per_s, default=None)

    llc = capacities[-1][1] if capacities else 0
    dram_sample = best(llc, math.inf) if capacities else None
    if dram_sample is not None:
        dram = LevelRoof("DRAM", None, dram_sample.bytes_per_s, _describe_sample(dram_sample))
    else:  # nothing beyond the cache (or no cache known): the largest working set, an overestimate of DRAM
        largest = max(s.working_set for s in samples)
        top = max((s for s in samples if s.working_set == largest), key=lambda s: s.bytes_per_s)
        dram = LevelRoof("DRAM", None, top.bytes_per_s,
                         _describe_sample(top) + " (no working set beyond the last cache: an overestimate)")
    levels = [dram]
    bounds = [0] + [cap for _, cap in capacities]
    for i in reversed(range(len(capacities))):
        name, cap = capacities[i]
        own = best(bounds[i], cap)
        above = levels[0]
        if own is None or own.bytes_per_s < above.bandwidth:
            why = "no working set in its band" if own is None else f"measured {own.bytes_per_s / 1e9:.4g} GB/s"
            levels.insert(0, LevelRoof(name, cap, above.bandwidth, f"raised to {above.name} ({why})"))
        else:
            levels.insert(0, LevelRoof(name, cap, own.bytes_per_s, _describe_sample(own)))
    return tuple(levels)


def _size(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", MIB), ("KiB", KIB)):
        if n >= scale:
            return f"{n / scale:.4g} {unit}"
    return f"{n} B"


# ---------------------------------------------------------------------------------------------------------------
# Compute


class _Blas:
    """numpy's OpenBLAS thread count, set through ctypes (None where the library or its symbols are not found)."""

    _SET = ("openblas_set_num_threads", "openblas_set_num_threads64_", "scipy_openblas_set_num_threads64_",
            "scipy_openblas_set_num_threads")  # fmt: skip

    def __init__(self) -> None:
        self.set: Callable[[int], Any] | None = None
        self.get: Callable[[], int] | None = None
        try:
            import ctypes
            import re

            maps = Path("/proc/self/maps").read_text()
            for path in sorted(set(re.findall(r"\S*openblas\S*\.so\S*", maps))):
                lib = ctypes.CDLL(path)
                for name in self._SET:
                    if hasattr(lib, name) and hasattr(lib, name.replace("set_", "get_")):
                        self.set, self.get = getattr(lib, name), getattr(lib, name.replace("set_", "get_"))
                        return
        except (OSError, ValueError):
            pass


def _gemm_numpy(dtype: str, n: int, pool: ThreadPoolExecutor | None, threads: int) -> tuple[int, Timed]:
    """numpy matmul: one call (BLAS threads), or with ``pool`` one call per thread on a block of rows."""
    rng = np.random.default_rng(0)
    a, b = (rng.random((n, n)).astype(_NP_DTYPE[dtype]) for _ in range(2))
    out = np.empty((n, n), _NP_DTYPE[dtype])
    edges = np.linspace(0, n, threads + 1).astype(int)

    def block(i: int) -> None:
        np.matmul(a[edges[i] : edges[i + 1]], b, out=out[edges[i] : edges[i + 1]])

    def timed(calls: int) -> float:
        start = time.perf_counter()
        for _ in range(calls):
            if pool is None:
                np.matmul(a, b, out=out)
            else:
                list(pool.map(block, range(threads)))
        return time.perf_counter() - start

    return FLOPS_PER_MAC * n**3, timed  # n³ multiply-accumulates


def _gemm_ort(dtype: str, n: int, threads: int) -> tuple[int, Timed]:
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(0)
    a, b = (rng.random((n, n)).astype(_NP_DTYPE[dtype]) for _ in range(2))
    model = _model(
        [helper.make_node("MatMul", ["A", "B"], ["Y"])],
        [helper.make_tensor_value_info("A", _ONNX_DTYPE[dtype], [n, n])],
        [helper.make_tensor_value_info("Y", _ONNX_DTYPE[dtype], [n, n])],
        [numpy_helper.from_array(b, "B")],
    )
    return FLOPS_PER_MAC * n**3, _runner(_session(model, threads, optimize=True), {"A": a})


def _conv_ort(batch: int, threads: int) -> tuple[int, Timed]:
    from onnx import helper, numpy_helper

    cin, cout, side, k = CONV
    rng = np.random.default_rng(0)
    weight = rng.random((cout, cin, k, k), dtype=np.float32)
    model = _model(
        [helper.make_node("Conv", ["X", "W"], ["Y"], pads=[k // 2] * 4)],
        [helper.make_tensor_value_info("X", 1, [batch, cin, side, side])],
        [helper.make_tensor_value_info("Y", 1, [batch, cout, side, side])],
        [numpy_helper.from_array(weight, "W")],
    )
    flops = FLOPS_PER_MAC * batch * cout * side * side * cin * k * k  # one MAC per output × input channel × tap
    feeds = {"X": rng.random((batch, cin, side, side), dtype=np.float32)}
    return flops, _runner(_session(model, threads, optimize=True), feeds)


def _gemm_runners(
    dtype: str, n: int, threads: int, usable: int, blas: _Blas, pool: ThreadPoolExecutor
) -> list[tuple[str, Callable[[], tuple[int, Timed]]]]:
    """numpy with BLAS threads; numpy with one BLAS thread per pool thread on a row block; onnxruntime MatMul.

    The row-block form exists because a multi-threaded BLAS wakes its threads badly on a busy machine (at n = 128
    OpenBLAS can be 100× slower with 2 threads than with 1), and a roof is the best the machine does.
    """
    out: list[tuple[str, Callable[[], tuple[int, Timed]]]] = []
    if dtype != "float16":  # numpy's float16 matmul is not BLAS
        if blas.set is not None or threads == usable:

            def whole() -> tuple[int, Timed]:
                if blas.set is not None:
                    blas.set(threads)
                return _gemm_numpy(dtype, n, None, threads)

            out.append(("numpy", whole))
        if blas.set is not None and threads > 1:

            def split() -> tuple[int, Timed]:
                if blas.set is not None:
                    blas.set(1)
                return _gemm_numpy(dtype, n, pool, threads)

            out.append((f"numpy-rows×{threads}", split))
    out.append(("onnxruntime", lambda: _gemm_ort(dtype, n, threads)))
    return out


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
