"""What the OS says about a machine, as records: pure parsers of captured text and the SIMD unit read from CPU flags.

Everything here is a function of text, flags or a directory tree passed in, so tests can feed it other machines'
``nvidia-smi``, ``system_profiler``, ``/proc/cpuinfo``, ``lscpu`` and ``/sys`` cache listings. Running the tools on
this machine is ``_probe_host``; matching and estimating is ``detect``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "FLOPS_PER_FMA",
    "AppleInfo",
    "CacheLevel",
    "CpuInfo",
    "GpuInfo",
    "Simd",
    "low_precision_arithmetic",
    "parse_cpuinfo",
    "parse_lscpu",
    "parse_nvidia_smi",
    "parse_size",
    "parse_system_profiler",
    "read_sys_caches",
    "simd_from_flags",
]

FLOPS_PER_FMA = 2


def _read(path: str | Path) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


# ---------------------------------------------------------------------------------------------------------------
# Records


@dataclass(frozen=True)
class CacheLevel:
    """One data cache level. ``instances`` counts the copies that serve the CPUs this process may use."""

    name: str  # "L1d", "L2", "L3"
    level: int
    size_bytes: int  # one instance
    instances: int
    shared_by: int  # logical CPUs per instance

    @property
    def total_bytes(self) -> int:
        return self.size_bytes * self.instances


@dataclass(frozen=True)
class Simd:
    """The widest vector unit for float32 and how many FMAs it issues per cycle."""

    isa: str  # "avx512f", "avx2", "avx", "sse2", "neon", "scalar"
    width_bits: int  # register width
    fma: bool
    effective_bits: int  # datapath width per pipe (Zen 4 splits 512-bit ops into two 256-bit halves)
    fma_pipes: int
    pipes_reason: str

    def fp32_flops_per_cycle(self) -> int:
        lanes = self.effective_bits // 32
        return lanes * self.fma_pipes * (FLOPS_PER_FMA if self.fma else 1)


@dataclass(frozen=True)
class CpuInfo:
    model: str
    vendor: str
    family: int | None
    model_number: int | None
    logical_cpus: int
    usable_cpus: int
    threads_per_core: int
    sockets: int | None
    clock_hz: float | None
    clock_source: str
    flags: tuple[str, ...]  # the SIMD-relevant subset
    simd: Simd
    caches: tuple[CacheLevel, ...]
    memory_bytes: int | None
    board: str | None

    @property
    def physical_cores(self) -> int:
        """Cores this process can use: usable logical CPUs over SMT threads per core."""
        return max(1, self.usable_cpus // max(1, self.threads_per_core))


@dataclass(frozen=True)
class GpuInfo:
    name: str
    memory_bytes: int | None
    max_sm_clock_hz: float | None
    source: str  # "nvidia-smi" or "nvml"


@dataclass(frozen=True)
class AppleInfo:
    chip: str
    cores: int | None
    performance_cores: int | None
    efficiency_cores: int | None
    memory_bytes: int | None


# ---------------------------------------------------------------------------------------------------------------
# Parsers (pure functions of captured text, so tests can feed them other machines)

_SIZE = re.compile(r"(?P<n>\d+(?:\.\d+)?)\s*(?P<unit>[KMGT]?)(?:i?B)?", re.IGNORECASE)
_UNIT = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse_size(text: str) -> int | None:
    """``32K``, ``64 KiB``, ``1 MiB``, ``32768K``, ``143771 MiB``, ``32 GB`` (binary, as OS tools mean it)."""
    match = _SIZE.match(text.strip())
    if match is None:
        return None
    return int(float(match["n"]) * _UNIT[match["unit"].upper()])


def _fields(text: str, sep: str = ":") -> list[tuple[str, str]]:
    out = []
    for line in text.splitlines():
        key, found, value = line.partition(sep)
        if found:
            out.append((key.strip(), value.strip()))
    return out


def parse_nvidia_smi(text: str) -> list[GpuInfo]:
    """``name, memory.total, clocks.max.sm`` CSV lines (``NVIDIA H200, 143771 MiB, 1980 MHz``), one per GPU."""
    gpus = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3 or not parts[0]:
            continue
        mhz = re.match(r"(\d+(?:\.\d+)?)\s*MHz", parts[2])
        gpus.append(GpuInfo(parts[0], parse_size(parts[1]), float(mhz[1]) * 1e6 if mhz else None, "nvidia-smi"))
    return gpus


def parse_system_profiler(text: str) -> AppleInfo | None:
    """The ``Chip:``, ``Total Number of Cores:`` and ``Memory:`` lines of ``system_profiler SPHardwareDataType``."""
    values = dict(_fields(text))
    chip = values.get("Chip")
    if not chip:
        return None
    total = values.get("Total Number of Cores", "")
    cores = re.match(r"(\d+)(?:\s*\((\d+) performance and (\d+) efficiency\))?", total)

    def group(i: int) -> int | None:
        return int(cores[i]) if cores and cores[i] else None

    memory = values.get("Memory")
    return AppleInfo(chip, group(1), group(2), group(3), parse_size(memory) if memory else None)


def parse_cpuinfo(text: str) -> dict[str, str]:
    """The first processor's fields of ``/proc/cpuinfo``, plus ``processors`` (the count) and board ``Model``."""
    blocks = [b for b in text.split("\n\n") if b.strip()]
    first = dict(_fields(blocks[0])) if blocks else {}
    count = sum(1 for key, _ in _fields(text) if key == "processor")
    for key, value in _fields(text):  # Raspberry Pi kernels put the board in a trailing block
        if key == "Model" and "Model" not in first:
            first["Model"] = value
    return first | {"processors": str(count)}


def parse_lscpu(text: str) -> dict[str, str]:
    return dict(_fields(text))


def read_sys_caches(root: Path, cpus: Sequence[int]) -> tuple[CacheLevel, ...]:
    """Data and unified caches from ``root/cpuN/cache/index*``, counting the instances that serve ``cpus``."""
    seen: dict[tuple[int, str], tuple[int, set[str], int]] = {}  # (level, type) -> (size, shared sets, sharers)
    for cpu in cpus:
        for index in sorted((root / f"cpu{cpu}" / "cache").glob("index*")):
            kind = (_read(index / "type") or "").strip()
            level_text = (_read(index / "level") or "").strip()
            size = parse_size(_read(index / "size") or "")
            if kind == "Instruction" or not level_text.isdigit() or not size:
                continue
            shared = (_read(index / "shared_cpu_list") or str(cpu)).strip()
            key = (int(level_text), kind)
            old = seen.get(key, (size, set(), 1))
            seen[key] = (size, old[1] | {shared}, max(old[2], len(_cpu_list(shared))))
    levels = []
    for (level, kind), (size, sets, sharers) in sorted(seen.items()):
        name = f"L{level}d" if kind == "Data" else f"L{level}"
        levels.append(CacheLevel(name, level, size, len(sets), sharers))
    return tuple(levels)


def _cpu_list(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        if lo.isdigit():
            out.extend(range(int(lo), int(hi if hi.isdigit() else lo) + 1))
    return out


def _lscpu_caches(values: Mapping[str, str]) -> tuple[CacheLevel, ...]:
    """Fallback without /sys: ``L1d cache: 64 KiB (2 instances)`` is the total over all instances."""
    levels = []
    for level, (key, name) in enumerate((("L1d cache", "L1d"), ("L2 cache", "L2"), ("L3 cache", "L3")), start=1):
        raw = values.get(key)
        total = parse_size(raw) if raw else None
        if not raw or not total:
            continue
        count = re.search(r"\((\d+) instances?\)", raw)
        instances = int(count[1]) if count else 1
        levels.append(CacheLevel(name, level, total // instances, instances, 0))
    return tuple(levels)


def simd_from_flags(flags: Sequence[str], vendor: str = "", family: int | None = None,
                    model: int | None = None) -> Simd:
    """The float32 vector unit from CPU flags; FMA pipes are 1 unless the core is known to have 2."""
    have = set(flags)
    if "avx512f" in have:
        isa, width = "avx512f", 512
    elif "avx2" in have or "avx" in have:
        isa, width = ("avx2" if "avx2" in have else "avx"), 256
    elif "sse2" in have:
        isa, width = "sse2", 128
    elif "asimd" in have or "neon" in have:
        isa, width = "neon", 128
    else:
        isa, width = "scalar", 32
    fma = bool(have & {"fma", "fma4"}) or isa == "neon"  # every ARMv8 NEON unit has fused multiply-add
    effective, pipes, reason = width, 1, "1 FMA pipe assumed (not known for this core)"
    if vendor == "AuthenticAMD" and family is not None and family >= 0x17 and fma:
        zen1 = family == 0x17 and (model or 0) < 0x30
        effective = min(width, 128 if zen1 else 256)
        pipes = 2
        reason = f"AMD family {family:#x}: 2 FMA pipes × {effective} bit (Zen{'' if zen1 else ' 2 or later'})"
    return Simd(isa, width, fma, effective, pipes, reason)


def low_precision_arithmetic(flags: Sequence[str]) -> dict[str, str | None]:
    """For float16 and bfloat16: the flag that gives the machine arithmetic in that dtype, or None."""
    have = set(flags)
    fp16 = next((f for f in ("avx512_fp16", "amx_fp16", "asimdhp", "fphp") if f in have), None)
    bf16 = next((f for f in ("amx_bf16", "avx512_bf16", "bf16") if f in have), None)
    return {"float16": fp16, "bfloat16": bf16}
