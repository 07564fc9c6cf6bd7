"""Whole-model latency in the native frameworks: torch (eager or ``torch.compile``), JAX (``jax.jit``) and
TensorFlow (``tf.function``). No per-node times: these are the numbers ORT's latency is compared with.

Common protocol: the numpy inputs become framework tensors on the device **once**, before any timing; then
``warmup`` untimed calls (compilation and tracing happen there), then ``repeats`` calls each timed with
``time.perf_counter`` and made complete before the clock stops:

- torch: under ``torch.inference_mode()``; on CUDA ``torch.cuda.synchronize`` before starting the clock and
  before stopping it; on the CPU the call returns when the work is done.
- JAX: ``jax.block_until_ready`` on the outputs (dispatch is asynchronous on every backend).
- TF: ``tf.test.experimental.sync_devices()`` after the call on a GPU/TPU or when eager execution is
  asynchronous (no device→host copy in the timed region); on the CPU with synchronous execution (TF's
  default) the call returns when its outputs are computed, and no barrier is added.

``memory`` holds the framework allocator's own telemetry where it exists (peaks reset after the warm-up, so
they cover the timed calls; they include weights and inputs living on the device): torch CUDA
``max_memory_allocated``/``max_memory_reserved``, JAX ``memory_stats()["peak_bytes_in_use"]``, TF
``get_memory_info(device)["peak"]``. CPU allocators report nothing, and the mapping is then empty.

The frameworks are imported only inside these functions; a missing one raises :class:`FrameworkMissing`.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from graphcost.measure.stats import Timing, timing

EXTRAS = {"torch": "torch", "jax": "jax", "tf": "tf"}
"""Framework → the graphcost pip extra that installs it."""
_MODULES = {"torch": "torch", "jax": "jax", "tf": "tensorflow"}
_DISTRIBUTIONS = {"torch": ("torch",), "jax": ("jax",),
                  "tf": ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-macos", "tf-nightly")}


class FrameworkMissing(ImportError):
    """A native runner's framework is not installed; the message names the pip extra."""


@dataclass(frozen=True)
class NativeRun:
    framework: str  # "torch" | "jax" | "tf"
    mode: str  # "eager" | "compile" | "jit" | "tf.function"
    device: str  # "cpu" | "cuda:0" | ...
    version: str
    latency: Timing
    memory: Mapping[str, int]
    notes: tuple[str, ...]
    threads: int | None = None  # intra-op threads used: torch's, tf's when set (None: the framework's default)

    def to_dict(self) -> dict[str, Any]:
        return {"framework": self.framework, "mode": self.mode, "device": self.device, "version": self.version,
                "latency": self.latency.to_dict(), "memory": dict(self.memory), "notes": list(self.notes),
                "threads": self.threads}


def installed_frameworks() -> dict[str, str | None]:
    """Version of each framework that is installed (None if not), found without importing any of them."""
    out: dict[str, str | None] = {}
    for fw, module in _MODULES.items():
        version = None
        if importlib.util.find_spec(module) is not None:
            for dist in _DISTRIBUTIONS[fw]:
                try:
                    version = importlib.metadata.version(dist)
                    break
                except importlib.metadata.PackageNotFoundError:
                    continue
            version = version or "unknown"
        out[fw] = version
    return out


def _require(framework: str) -> None:
    if importlib.util.find_spec(_MODULES[framework]) is None:
        raise FrameworkMissing(f"{_MODULES[framework]} is not installed: pip install 'graphcost[{EXTRAS[framework]}]'")


def _check_counts(warmup: int, repeats: int) -> None:
    if not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an integer ≥ 0, got {warmup!r}")
    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an integer ≥ 1, got {repeats!r}")


def _timed(call: Callable[[], Any], before: Callable[[], None], after: Callable[[Any], None],
           warmup: int, repeats: int) -> Timing:
    """``warmup`` untimed calls, then ``repeats`` calls each between ``before()`` and ``after(outputs)``."""
    for _ in range(warmup):
        after(call())
    clock = time.perf_counter
    samples: list[float] = []
    for _ in range(repeats):
        before()
        t0 = clock()
        out = call()
        after(out)
        samples.append(clock() - t0)
    return timing(samples)


# --------------------------------------------------------------------------- torch
def time_torch(forward: Callable[..., Any], inputs: Sequence[np.ndarray], *, compile: bool = False,
               device: str = "cpu", warmup: int = 10, repeats: int = 50, threads: int | None = None) -> NativeRun:
    """Latency of ``forward(*tensors)`` in torch, eager or through ``torch.compile`` (compiled during warm-up)."""
    _require("torch")
    _check_counts(warmup, repeats)
    import torch

    dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r}: this torch build has no usable CUDA (torch {torch.__version__})")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
    if isinstance(forward, torch.nn.Module):
        where = {p.device for p in forward.parameters()} | {b.device for b in forward.buffers()}
        if where and where != {dev}:
            raise ValueError(f"forward's parameters are on {', '.join(sorted(map(str, where)))}, the inputs go "
                             f"to {device}: move the module first (module.to({device!r}))")
    notes: list[str] = ["torch.inference_mode()"]
    if isinstance(forward, torch.nn.Module) and forward.training:
        notes.append("module is in training mode (dropout/batchnorm behave as in training); call .eval() first")
    old_threads = torch.get_num_threads()
    if threads is not None:
        if threads < 1:
            raise ValueError(f"threads must be at least 1 (or None for torch's default), got {threads}")
        torch.set_num_threads(threads)
    try:
        tensors = [torch.from_numpy(np.ascontiguousarray(a)).to(dev) for a in inputs]
        fn: Callable[..., Any] = torch.compile(forward) if compile else forward
        if compile:
            notes.append(f"torch.compile (default backend) compiled during the {warmup} warm-up call(s)"
                         if warmup else "warmup=0: the first timed call includes torch.compile's compilation")
        if dev.type == "cuda":
            def sync(_: Any = None) -> None:
                torch.cuda.synchronize(dev)
            notes.append("torch.cuda.synchronize before and after each timed call")
        else:
            def sync(_: Any = None) -> None:
                return None
        memory: dict[str, int] = {}
        with torch.inference_mode():
            def call() -> Any:
                return fn(*tensors)

            for _ in range(warmup):
                call()
            sync()
            if dev.type == "cuda":
                torch.cuda.reset_peak_memory_stats(dev)
            latency = _timed(call, sync, sync, 0, repeats)
            if dev.type == "cuda":
                memory = {"max_memory_allocated": int(torch.cuda.max_memory_allocated(dev)),
                          "max_memory_reserved": int(torch.cuda.max_memory_reserved(dev))}
        used = torch.get_num_threads()
    finally:
        torch.set_num_threads(old_threads)
    return NativeRun("torch", "compile" if compile else "eager", str(dev), str(torch.__version__), latency,
                     memory, tuple(notes), used if dev.type == "cpu" else None)


# --------------------------------------------------------------------------- JAX
def time_jax(forward: Callable[..., Any], inputs: Sequence[np.ndarray], *, warmup: int = 10, repeats: int = 50,
             device: str | None = None) -> NativeRun:
    """Latency of ``jax.jit(forward)(*arrays)``; compiled on the first warm-up call."""
    _require("jax")
    _check_counts(warmup, repeats)
    import jax

    dev = _jax_device(jax, device)
    args = [jax.device_put(np.asarray(a), dev) for a in inputs]
    jax.block_until_ready(args)
    fn = jax.jit(forward)
    notes = ["jax.jit; compiled during the first warm-up call" if warmup else
             "warmup=0: the first timed call includes jax.jit's compilation",
             "jax.block_until_ready on the outputs of each timed call"]

    def call() -> Any:
        return fn(*args)

    for _ in range(warmup):
        jax.block_until_ready(call())
    latency = _timed(call, lambda: None, jax.block_until_ready, 0, repeats)
    memory: dict[str, int] = {}
    stats = dev.memory_stats()
    if stats and "peak_bytes_in_use" in stats:
        memory["peak_bytes_in_use"] = int(stats["peak_bytes_in_use"])
        notes.append("peak_bytes_in_use is the device allocator's peak since the process started (JAX cannot "
                     "reset it)")
    label = "cpu" if dev.platform == "cpu" else f"{'cuda' if dev.platform == 'gpu' else dev.platform}:{dev.id}"
    if dev.platform != "cpu":
        notes.append(f"device kind: {dev.device_kind}")
    return NativeRun("jax", "jit", label, str(jax.__version__), latency, memory, tuple(notes))


def _jax_device(jax: Any, device: str | None) -> Any:
    """``None`` → JAX's default device; else ``platform`` or ``platform:index`` (``cuda`` means ``gpu``)."""
    if device is None:
        return jax.devices()[0]
    platform, _, index = device.partition(":")
    platform = {"cuda": "gpu"}.get(platform, platform)
    try:
        devices = jax.devices(platform)
    except RuntimeError:
        devices = []
    k = int(index) if index.isdigit() else 0
    if k >= len(devices):
        have = ", ".join(f"{d.platform}:{d.id}" for d in jax.devices())
        raise ValueError(f"device {device!r} is not available to JAX (available: {have})")
    return devices[k]


# --------------------------------------------------------------------------- TensorFlow
def time_tf(forward: Callable[..., Any], inputs: Sequence[np.ndarray], *, warmup: int = 10, repeats: int = 50,
            device: str | None = None) -> NativeRun:
    """Latency of ``tf.function(forward)(*tensors)`` (``forward`` as is if it already is a tf.function)."""
    _require("tf")
    _check_counts(warmup, repeats)
    import tensorflow as tf

    spec = _tf_device(tf, device)
    is_function = isinstance(forward, tf.types.experimental.PolymorphicFunction)
    fn = forward if is_function else tf.function(forward)
    notes = ["forward is already a tf.function" if is_function else "wrapped in tf.function",
             f"traced during the {warmup} warm-up call(s)" if warmup else
             "warmup=0: the first timed call includes tracing"]
    kind = spec.split(":")[-2].upper()  # "/device:GPU:0" → GPU
    barrier = kind != "CPU" or not tf.config.experimental.get_synchronous_execution()
    if barrier:
        notes.append("tf.test.experimental.sync_devices() after each timed call")
    else:
        notes.append("CPU with synchronous execution: each call returns when its outputs are computed")

    def after(_: Any) -> None:
        if barrier:
            tf.test.experimental.sync_devices()

    memory: dict[str, int] = {}
    with tf.device(spec):
        tensors = [tf.identity(tf.constant(np.asarray(a))) for a in inputs]

        def call() -> Any:
            return fn(*tensors)

        for _ in range(warmup):
            after(call())
        reset = _tf_try(lambda: tf.config.experimental.reset_memory_stats(spec))
        latency = _timed(call, lambda: None, after, 0, repeats)
        info = _tf_try(lambda: tf.config.experimental.get_memory_info(spec)) if reset is not _FAILED else _FAILED
        if isinstance(info, Mapping) and "peak" in info:
            memory["peak"] = int(info["peak"])
    label = spec.removeprefix("/device:").lower().replace("gpu", "cuda") if kind == "GPU" else "cpu"
    threads = tf.config.threading.get_intra_op_parallelism_threads() or None  # 0: TF's default pool
    return NativeRun("tf", "tf.function", label, str(tf.__version__), latency, memory, tuple(notes), threads)


_FAILED = object()


def _tf_try(fn: Callable[[], Any]) -> Any:
    """TF raises ValueError where a device keeps no allocator statistics (the CPU)."""
    try:
        return fn()
    except (ValueError, RuntimeError):
        return _FAILED


def _tf_device(tf: Any, device: str | None) -> str:
    """A TF device string: ``None`` → the first GPU if any, else the CPU; ``cuda:0``/``gpu:0``/``cpu`` accepted."""
    logical = [d.name for d in tf.config.list_logical_devices()]
    if device is None:
        gpus = [n for n in logical if ":GPU:" in n]
        return gpus[0] if gpus else next((n for n in logical if ":CPU:" in n), "/device:CPU:0")
    platform, _, index = device.partition(":")
    kind = {"cuda": "GPU", "gpu": "GPU", "cpu": "CPU", "tpu": "TPU"}.get(platform.lower(), platform.upper())
    name = f"/device:{kind}:{index or 0}"
    if name not in logical:
        raise ValueError(f"device {device!r} is not available to TensorFlow (available: {', '.join(logical)})")
    return name


__all__ = ["EXTRAS", "FrameworkMissing", "NativeRun", "installed_frameworks", "time_jax", "time_tf", "time_torch"]
