"""Cache levels for ``measure``: their capacities under T threads, the working-set sweep that covers them, and each
level's bandwidth roof from the streaming samples (the method is in ``measure``'s module docstring, "Levels").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .detect import Detection

__all__ = ["KIB", "MIB", "BandwidthSample", "LevelRoof"]

KIB = 2**10
MIB = 2**20
FULL_SIZES = (16 * KIB, 32 * KIB, 64 * KIB, 256 * KIB, 1 * MIB, 4 * MIB, 16 * MIB, 64 * MIB, 256 * MIB)
QUICK_SIZES = (16 * KIB, 256 * KIB, 4 * MIB)
QUICK_LARGEST = 64 * MIB
"""The quick sweep adds one working set past the last-level cache, at most this big."""
MEMORY_FRACTION = 8
"""The largest working set is at most 1/8 of available memory (each runner holds it, onnxruntime more)."""


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
class LevelRoof:
    name: str  # "L1d", "L2", "L3", "DRAM"
    capacity: int | None  # bytes over the threads' instances; None for DRAM
    bandwidth: float
    decided_by: str  # which sample, or "raised to <level>"


# ---------------------------------------------------------------------------------------------------------------
# The working-set sweep


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
