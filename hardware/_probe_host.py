"""Probing this machine: run the OS tools and read the files ``detect`` draws on, each optional.

A missing tool or file is an empty answer, never an error, and every subprocess has a timeout (``TIMEOUT_S``). The
text goes through the parsers of ``_probe_text``; the sources are listed in ``detect``'s module docstring.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ._probe_text import (
    CacheLevel,
    CpuInfo,
    GpuInfo,
    _fields,
    _lscpu_caches,
    _read,
    parse_cpuinfo,
    parse_lscpu,
    parse_nvidia_smi,
    parse_size,
    read_sys_caches,
    simd_from_flags,
)

__all__ = ["TIMEOUT_S", "Runner", "probe_cpu", "probe_gpus", "run_tool"]

TIMEOUT_S = 5.0
"""Seconds any probing subprocess may take."""

# Flags worth showing: the ones that decide vector width and low-precision arithmetic.
_SIMD_FLAGS = (
    "sse2", "avx", "avx2", "fma", "fma4", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
    "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8", "asimd", "asimdhp", "asimddp", "fphp", "sve",
    "sve2", "bf16", "i8mm",
)  # fmt: skip

Runner = Callable[[Sequence[str]], "str | None"]


def run_tool(argv: Sequence[str]) -> str | None:
    """A tool's stdout, or None when it is missing, fails or outlives ``TIMEOUT_S``."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.strip().isdigit() else None


def _sysctl(run: Runner, key: str) -> str | None:
    out = run(["sysctl", "-n", key])
    return out.strip() if out and out.strip() else None


def _clock(cpuinfo: Mapping[str, str], lscpu: Mapping[str, str], run: Runner) -> tuple[float | None, str]:
    """The highest clock the OS reports, and where it came from."""
    max_khz = _int(_read("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"))
    if max_khz:
        return max_khz * 1e3, "cpufreq cpuinfo_max_freq"
    for key, label in (("CPU max MHz", "lscpu CPU max MHz"), ("cpu MHz", "/proc/cpuinfo cpu MHz (current clock)")):
        raw = lscpu.get(key) if key.startswith("CPU") else cpuinfo.get(key)
        try:
            if raw:
                return float(raw) * 1e6, label
        except ValueError:
            pass
    hz = _int(_sysctl(run, "hw.cpufrequency_max")) if platform.system() == "Darwin" else None
    return (float(hz), "sysctl hw.cpufrequency_max") if hz else (None, "not reported")


def _darwin_cpu(run: Runner) -> tuple[dict[str, str], list[str], tuple[CacheLevel, ...], int | None]:
    """macOS: brand string, flags and caches from sysctl (Apple Silicon reports no clock)."""
    info = {"model name": _sysctl(run, "machdep.cpu.brand_string") or platform.processor()}
    cores = _int(_sysctl(run, "hw.physicalcpu")) or 1
    if platform.machine() == "arm64":
        flags = ["asimd"]
        flags += ["fphp"] if _sysctl(run, "hw.optional.arm.FEAT_FP16") == "1" else []
        flags += ["bf16"] if _sysctl(run, "hw.optional.arm.FEAT_BF16") == "1" else []
    else:
        raw = " ".join(filter(None, (_sysctl(run, "machdep.cpu.features"), _sysctl(run, "machdep.cpu.leaf7_features"))))
        flags = [f.lower() for f in raw.split()]
    caches = []
    keys = ((1, "hw.l1dcachesize", True), (2, "hw.l2cachesize", False), (3, "hw.l3cachesize", False))
    for level, key, per_core in keys:
        size = _int(_sysctl(run, key))
        if size:
            name = "L1d" if level == 1 else f"L{level}"
            caches.append(CacheLevel(name, level, size, cores if per_core else 1, 1 if per_core else cores))
    return info, flags, tuple(caches), _int(_sysctl(run, "hw.memsize"))


def probe_cpu(run: Runner) -> CpuInfo:
    usable = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    info = parse_cpuinfo(_read("/proc/cpuinfo") or "")
    lscpu = parse_lscpu(run(["lscpu"]) or "")
    flags = (info.get("flags") or info.get("Features") or lscpu.get("Flags", "")).split()
    caches = read_sys_caches(Path("/sys/devices/system/cpu"), usable) or _lscpu_caches(lscpu)
    meminfo = dict(_fields(_read("/proc/meminfo") or ""))
    memory = parse_size(meminfo["MemTotal"].replace("kB", "K")) if "MemTotal" in meminfo else None
    if platform.system() == "Darwin":
        info, flags, caches, memory = _darwin_cpu(run)
    threads = _int(lscpu.get("Thread(s) per core"))
    if threads is None and _int(info.get("siblings")) and _int(info.get("cpu cores")):
        threads = max(1, (_int(info["siblings"]) or 1) // (_int(info["cpu cores"]) or 1))
    vendor = info.get("vendor_id") or lscpu.get("Vendor ID", "")
    family, model_number = _int(info.get("cpu family")), _int(info.get("model"))
    clock, clock_source = _clock(info, lscpu, run)
    board = (_read("/proc/device-tree/model") or "").strip("\x00\n ") or info.get("Model")
    return CpuInfo(
        model=info.get("model name") or lscpu.get("Model name") or platform.processor() or "unknown CPU",
        vendor=vendor,
        family=family,
        model_number=model_number,
        logical_cpus=os.cpu_count() or len(usable),
        usable_cpus=len(usable),
        threads_per_core=threads or 1,
        sockets=_int(lscpu.get("Socket(s)")),
        clock_hz=clock,
        clock_source=clock_source,
        flags=tuple(f for f in _SIMD_FLAGS if f in set(flags)),
        simd=simd_from_flags(flags, vendor, family, model_number),
        caches=caches,
        memory_bytes=memory,
        board=board or None,
    )


def probe_gpus(run: Runner) -> tuple[list[GpuInfo], str | None]:
    out = run(["nvidia-smi", "--query-gpu=name,memory.total,clocks.max.sm", "--format=csv,noheader"])
    if out:
        return parse_nvidia_smi(out), None
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return [], None
    try:
        pynvml.nvmlInit()
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(handle)
            clock = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM)
            gpus.append(GpuInfo(
                name.decode() if isinstance(name, bytes) else str(name),
                int(pynvml.nvmlDeviceGetMemoryInfo(handle).total), float(clock) * 1e6 if clock else None, "nvml",
            ))  # fmt: skip
        pynvml.nvmlShutdown()
        return gpus, None
    except Exception as e:  # NVML raises its own error types; any failure just means "no GPU found"
        return [], f"NVML failed: {str(e).strip() or type(e).__name__}"
