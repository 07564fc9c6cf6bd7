"""The microbenchmarks ``measure`` runs: numpy and onnxruntime streams, GEMM and Conv runners, and the timing loop.

Each builder returns what one call moves or computes (bytes or FLOPs) and a ``Timed``; ``_best`` calibrates and
repeats it. The runners and why each exists are described in ``measure``'s module docstring.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from ._cache_levels import MIB

__all__ = ["CONV", "FLOPS_PER_MAC", "ORT_CHAIN_BYTES", "ORT_MAX_CHAIN", "Timed"]

FLOPS_PER_MAC = 2
CONV = (64, 64, 56, 3)  # channels in, channels out, height = width, kernel
ORT_CHAIN_BYTES = 8 * MIB
"""Bytes one onnxruntime run should move at least: K = this / per-node bytes, between 1 and ``ORT_MAX_CHAIN``."""
ORT_MAX_CHAIN = 64
_NP_DTYPE = {"float32": np.float32, "float64": np.float64, "float16": np.float16}
_ONNX_DTYPE = {"float32": 1, "float16": 10, "float64": 11}  # onnx.TensorProto enum values

Timed = Callable[[int], float]
"""``timed(passes)``: seconds for that many passes of one benchmark."""


# ---------------------------------------------------------------------------------------------------------------
# Timing


def _best(timed: Timed, min_timing_s: float, repeats: int,
          spreads: list[float] | None = None) -> tuple[int, float]:
    """(passes, best seconds): ``timed(passes)`` is calibrated to last ≥ ``min_timing_s``, best of ``repeats``.

    With ``spreads``, the run-to-run spread of the repeats (median ÷ best, 1.0 when every repeat took the same
    time) is appended to it: ``measure`` judges from these whether other work shared the CPUs.
    """
    timed(1)  # warm-up: first touch of fresh pages, onnxruntime's first-run allocations
    once = timed(1)
    passes = max(1, min(1_000_000, math.ceil(min_timing_s / max(once, 1e-9))))
    times = sorted(timed(passes) for _ in range(repeats))
    if spreads is not None:
        spreads.append(_spread(times))
    return passes, times[0]


def _spread(ordered: Sequence[float]) -> float:
    """Median ÷ best of sorted repeat times (the lower median for an even count: a single slow repeat of two
    is the noise a roof ignores, not a spread)."""
    median = ordered[(len(ordered) - 1) // 2]
    return median / ordered[0] if ordered[0] > 0 else 1.0


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

    # lazy: graphcost.measure is 0.1 s of imports; only a benchmark run needs graphcost's one quiet session maker
    from graphcost.measure import _ort_session

    options = _ort_session.options()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    if not optimize:  # stream chains: nothing to optimise, and nothing may be removed
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return _ort_session.session(model.SerializeToString(), options)


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
