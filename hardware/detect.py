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

The records and the parsers of captured text live in ``_probe_text``, running the tools on this machine in
``_probe_host``; their public names are re-exported here.
"""

from __future__ import annotations

import platform
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from . import catalog
from ._probe_host import TIMEOUT_S as TIMEOUT_S
from ._probe_host import Runner, probe_cpu, probe_gpus, run_tool
from ._probe_text import (
    FLOPS_PER_FMA,
    AppleInfo,
    CacheLevel,
    CpuInfo,
    GpuInfo,
    Simd,
    low_precision_arithmetic,
    parse_cpuinfo,
    parse_lscpu,
    parse_nvidia_smi,
    parse_size,
    parse_system_profiler,
    read_sys_caches,
    simd_from_flags,
)
from ._probe_text import _lscpu_caches as _lscpu_caches  # tests check the lscpu fallback through this module
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
]

DEFAULT_DRAM_BANDWIDTH = 19.2e9
"""An unmatched CPU's DRAM bandwidth: one DDR4-2400 channel, 2400e6 transfers/s × 8 B (deliberately low)."""

DEFAULT_CLOCK_HZ = 2.0e9
"""The clock assumed when the OS reports none (Apple Silicon exposes no frequency)."""


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
            "spec": self.spec.to_dict(complete=True),
            "notes": list(self.notes),
        }


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


def detect(*, run: Runner = run_tool) -> Detection:
    """Probe this machine and match it against the catalog (GPU first, then Apple chip, then CPU)."""
    cpu = probe_cpu(run)
    notes: list[str] = []
    if cpu.usable_cpus < cpu.logical_cpus:
        notes.append(f"this process may use {cpu.usable_cpus} of {cpu.logical_cpus} CPUs (affinity)")
    gpus, gpu_note = probe_gpus(run)
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
