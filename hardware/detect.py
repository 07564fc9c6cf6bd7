"""What machine is this? Find its catalog entry, or estimate a conservative spec from what the OS reports.

Sources, each optional (a missing tool or file is a note, never an error; every subprocess has a timeout):

- NVIDIA GPUs: ``nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader``, else NVML
  through ``pynvml`` when it is importable.
- Apple Silicon: ``system_profiler SPHardwareDataType`` (the ``Chip:`` line) on macOS.
- CPUs: ``/proc/cpuinfo`` (model, family, flags), ``lscpu`` (max clock, cores per socket, cache totals),
  ``/sys/devices/system/cpu/cpu*/cache/index*`` (per-instance cache sizes and which CPUs share them),
  ``os.sched_getaffinity`` (the CPUs this process may use), ``/proc/device-tree/model`` (boards such as a
  Raspberry Pi or a Jetson), ``sysctl`` on macOS.

Matching (``match_catalog``) looks for a catalog *model identifier* (a name, an alias, or a description's product
name before its first parenthesis) as a run of whole tokens in the detected string, and accepts it only if every
other token is noise (vendor words, memory sizes and types, ``SXM``)::

    "NVIDIA H200"              -> h200-sxm (alias "h200")
    "NVIDIA H100 PCIe"         -> h100-pcie ("h100" alone is refused: "pcie" is not noise)
    "NVIDIA A100 80GB PCIe"    -> nothing (no entry is the PCIe card)
    "AMD EPYC"                 -> nothing (no model number; never a loose "EPYC" match)

An identifier counts only if it has a token with a digit (``h200``, ``9654``) or is three tokens or more
(``jetson-agx-orin``): code names such as ``genoa`` are not model identifiers. A memory size in the string that
contradicts the entry's description (``80GB`` against "40 GB") refuses the match.

An unmatched CPU gets an *estimate*: ``float32 = physical cores × clock × FP32 lanes × FMA pipes × 2`` with one FMA
pipe unless the microarchitecture is known to have two (AMD Zen 2 and later), and a DRAM bandwidth of one DDR4-2400
channel. Both err low; ``graphcost hardware measure`` replaces them with measured roofs.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import catalog
from .spec import HardwareSpec

__all__ = [
    "AppleInfo",
    "CacheLevel",
    "CpuInfo",
    "Detection",
    "GpuInfo",
    "Match",
    "Simd",
    "detect",
    "estimate_cpu",
    "low_precision_arithmetic",
    "match_catalog",
    "parse_cpuinfo",
    "parse_lscpu",
    "parse_nvidia_smi",
    "parse_size",
    "parse_system_profiler",
    "read_sys_caches",
    "run_tool",
    "simd_from_flags",
    "spec_to_dict",
]

TIMEOUT_S = 5.0
"""Seconds any probing subprocess may take."""

DEFAULT_DRAM_BANDWIDTH = 19.2e9
"""An unmatched CPU's DRAM bandwidth: one DDR4-2400 channel, 2400e6 transfers/s × 8 B (deliberately low)."""

DEFAULT_CLOCK_HZ = 2.0e9
"""The clock assumed when the OS reports none (Apple Silicon exposes no frequency)."""

FLOPS_PER_FMA = 2

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


@dataclass(frozen=True)
class Match:
    """A catalog lookup's outcome: the spec, or None with the reason nothing matched."""

    spec: HardwareSpec | None
    reason: str


@dataclass(frozen=True)
class Detection:
    kind: str  # "gpu", "apple" or "cpu": the device the spec describes, or the one found
    cpu: CpuInfo
    gpus: tuple[GpuInfo, ...]
    apple: AppleInfo | None
    matched: HardwareSpec | None
    how: str
    spec: HardwareSpec  # the match, or a conservative estimate
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "cpu": asdict(self.cpu) | {"physical_cores": self.cpu.physical_cores},
            "gpus": [asdict(g) for g in self.gpus],
            "apple": None if self.apple is None else asdict(self.apple),
            "matched": None if self.matched is None else self.matched.name,
            "how": self.how,
            "spec": spec_to_dict(self.spec),
            "notes": list(self.notes),
        }


def spec_to_dict(spec: HardwareSpec) -> dict[str, Any]:
    """A spec as JSON-ready values (the ``spec`` member of ``--format json``)."""
    out: dict[str, Any] = {
        "name": spec.name, "kind": spec.kind, "description": spec.description,
        "peak_flops": dict(spec.peak_flops), "memory_bandwidth": spec.memory_bandwidth,
        "onchip_bytes": spec.onchip_bytes, "onchip_bandwidth": spec.onchip_bandwidth,
        "cache_levels": [list(level) for level in spec.cache_levels],
        "energy_per_byte": spec.energy_per_byte, "sustained_power_w": spec.sustained_power_w,
        "sources": list(spec.sources),
    }  # fmt: skip
    return out


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


# ---------------------------------------------------------------------------------------------------------------
# Catalog matching

_NOISE = {
    "amd", "intel", "nvidia", "apple", "tesla", "geforce", "corporation", "processor", "cpu", "gpu", "chip",
    "graphics", "developer", "kit", "module", "r", "tm",
}  # fmt: skip
_NOISE_TOKEN = re.compile(r"\d+gb|hbm\d*e?|gddr\d+x?|sxm\d*")
_CLEAN = (
    re.compile(r"\((?:r|tm)\)"), re.compile(r"\b\d+-core\s+processor\b"), re.compile(r"\s+w/.*$"),
    re.compile(r"\bwith radeon.*$"), re.compile(r"@.*$"), re.compile(r"\brev\s+[\d.]+"),
    re.compile(r"\bmodel\s+[a-z]\b"),
)  # fmt: skip


_PREFERENCE = ("name", "alias", "description")


def _tokens(text: str) -> list[str]:
    text = text.lower()
    for pattern in _CLEAN:
        text = pattern.sub(" ", text)
    return [t for t in re.split(r"[^a-z0-9]+", text.replace("+", "plus")) if t]


def _identifiers(spec: HardwareSpec) -> list[tuple[str, str]]:
    """(identifier, how it names the spec): the name, each alias, and the description's product name."""
    out = [(spec.name, "name")] + [(alias, "alias") for alias in catalog.aliases_of(spec.name)]
    product = re.split(r"[(,]", spec.description, maxsplit=1)[0].strip()
    if product:
        out.append((product, "description"))
    return [(ident, by) for ident, by in out if _is_model_identifier(_tokens(ident))]


def _is_model_identifier(tokens: Sequence[str]) -> bool:
    return any(ch.isdigit() for t in tokens for ch in t) or len(tokens) >= 3


def _find(needle: Sequence[str], hay: Sequence[str]) -> int | None:
    for start in range(len(hay) - len(needle) + 1):
        if list(hay[start : start + len(needle)]) == list(needle):
            return start
    return None


def match_catalog(text: str) -> Match:
    """The catalog entry whose model identifier ``text`` contains, with nothing but noise beside it."""
    hay = _tokens(text)
    found: list[tuple[int, HardwareSpec, str, str]] = []
    for spec in catalog.list_specs():
        stated_gb = set(re.findall(r"(\d+)\s*gb", " ".join([spec.name, spec.description]).lower()))
        for ident, by in _identifiers(spec):
            needle = _tokens(ident)
            start = _find(needle, hay)
            if start is None:
                continue
            rest = hay[:start] + hay[start + len(needle) :]
            if all(t in _NOISE or _NOISE_TOKEN.fullmatch(t) for t in rest) and not any(
                t.endswith("gb") and stated_gb and t[:-2] not in stated_gb for t in rest
            ):
                found.append((len(needle), spec, ident, by))
    if not found:
        return Match(None, "matched no catalog entry (no model identifier with only noise beside it)")
    best = max(n for n, *_ in found)
    top: dict[str, tuple[HardwareSpec, str, str]] = {}
    for _, spec, ident, by in sorted((f for f in found if f[0] == best), key=lambda f: _PREFERENCE.index(f[3])):
        top.setdefault(spec.name, (spec, ident, by))  # report a spec's own name before an alias or description
    if len(top) > 1:
        return Match(None, f"is ambiguous between catalog entries {', '.join(sorted(top))}")
    spec, ident, by = next(iter(top.values()))
    via = f"by {by} {ident!r}" if by != "name" else "by name"
    return Match(spec, f"matched catalog {spec.name!r} {via}")


# ---------------------------------------------------------------------------------------------------------------
# The estimate


def estimate_cpu(cpu: CpuInfo) -> HardwareSpec:
    """A conservative spec for an unmatched CPU (formulas in ``sources``)."""
    clock = cpu.clock_hz or DEFAULT_CLOCK_HZ
    per_cycle = cpu.simd.fp32_flops_per_cycle()
    fp32 = cpu.physical_cores * clock * per_cycle
    llc = max(cpu.caches, key=lambda c: c.level, default=None)
    slug = "-".join(_tokens(cpu.board or cpu.model)) or "cpu"
    clock_note = cpu.clock_source if cpu.clock_hz else f"not reported; {DEFAULT_CLOCK_HZ:g} Hz assumed"
    return HardwareSpec(
        name=f"estimate-{slug}",
        peak_flops={"float32": fp32, "float64": fp32 / 2},
        memory_bandwidth=DEFAULT_DRAM_BANDWIDTH,
        onchip_bytes=None if llc is None else llc.total_bytes,
        kind="cpu",
        description=f"estimate: {cpu.model}, {cpu.physical_cores} cores, {cpu.simd.isa}",
        sources=(
            f"estimate: float32 = {cpu.physical_cores} cores × {clock:.4g} Hz × {cpu.simd.effective_bits // 32} "
            f"FP32 lanes × {cpu.simd.fma_pipes} FMA pipes × {FLOPS_PER_FMA if cpu.simd.fma else 1} FLOP/lane "
            f"= {fp32:.4g} FLOP/s",
            "estimate: float64 = float32 / 2 (half the lanes)",
            f"clock: {clock_note}; FMA pipes: {cpu.simd.pipes_reason}",
            f"estimate: memory_bandwidth = {DEFAULT_DRAM_BANDWIDTH:g} B/s, one DDR4-2400 channel "
            "(2400e6 T/s × 8 B), a deliberately low default",
            *([f"detected: onchip_bytes = {llc.name} {llc.size_bytes} B × {llc.instances}"] if llc else []),
            "`graphcost hardware measure` replaces these with measured roofs",
        ),
    )


# ---------------------------------------------------------------------------------------------------------------
# Probing this machine


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


def _cpu(run: Runner) -> CpuInfo:
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


def _gpus(run: Runner) -> tuple[list[GpuInfo], str | None]:
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


def detect(*, run: Runner = run_tool) -> Detection:
    """Probe this machine and match it against the catalog (GPU first, then Apple chip, then CPU)."""
    cpu = _cpu(run)
    notes: list[str] = []
    if cpu.usable_cpus < cpu.logical_cpus:
        notes.append(f"this process may use {cpu.usable_cpus} of {cpu.logical_cpus} CPUs (affinity)")
    gpus, gpu_note = _gpus(run)
    notes += [gpu_note] if gpu_note else []
    apple = None
    if platform.system() == "Darwin":
        apple = parse_system_profiler(run(["system_profiler", "SPHardwareDataType"]) or "")

    if gpus:
        first = gpus[0]
        if len(gpus) > 1:
            names = sorted({g.name for g in gpus})
            notes.append(f"{len(gpus)} GPUs ({', '.join(names)}); the spec is for one: {first.name}")
        match = match_catalog(first.name)
        how = f"{first.source} name {first.name!r} {match.reason}"
        if match.spec is not None:
            return Detection("gpu", cpu, tuple(gpus), apple, match.spec, how, match.spec, tuple(notes))
        notes.append("the GPU has no catalog entry: the spec is the host CPU's estimate; start a GPU spec from "
                     "`graphcost hardware show h100` and catalog.to_toml")
        return Detection("gpu", cpu, tuple(gpus), apple, None, how + "; spec estimated for the host CPU",
                         estimate_cpu(cpu), tuple(notes))
    if apple is not None:
        match = match_catalog(apple.chip)
        how = f"system_profiler chip {apple.chip!r} {match.reason}"
        if match.spec is not None:
            return Detection("apple", cpu, (), apple, match.spec, how, match.spec, tuple(notes))
        return Detection("apple", cpu, (), apple, None, how + "; spec estimated for the CPU cores",
                         estimate_cpu(cpu), tuple(notes))
    reasons = []
    for label, text in (("board", cpu.board), ("CPU model", cpu.model)):
        if not text:
            continue
        match = match_catalog(text)
        if match.spec is not None:
            how = f"{label} {text!r} {match.reason}"
            return Detection("cpu", cpu, (), None, match.spec, how, match.spec, tuple(notes))
        reasons.append(f"{label} {text!r} {match.reason}")
    how = "; ".join(reasons) + "; spec estimated from the CPU's cores, clock and SIMD width"
    return Detection("cpu", cpu, (), None, None, how, estimate_cpu(cpu), tuple(notes))
