"""HardwareSpec: the roofs a bound is computed against.

Units are SI throughout: ops/s, bytes/s, bytes, joules per byte, watts. Conversions to TFLOP/s or
GB/s happen only in reports.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

DEFAULT_ENERGY_PER_BYTE = 160e-12
"""Joules per DRAM byte when a spec gives none: 160 pJ/B, the textbook off-chip figure."""

TEXTBOOK_COMPUTE_EFFICIENCY = 0.6
TEXTBOOK_BANDWIDTH_EFFICIENCY = 0.7
"""Placeholder derating: sustained kernels reach about 0.6 of peak compute and 0.7 of peak bandwidth."""

# When a spec has no peak for a node's dtype, the dtype whose peak is used instead, in order.
_FALLBACK: dict[str, tuple[str, ...]] = {
    "float64": ("float64", "float32"),
    "float32": ("float32",),
    "float16": ("float16", "bfloat16", "float32"),
    "bfloat16": ("bfloat16", "float16", "float32"),
    "float8_e4m3fn": ("float8", "int8", "float16", "float32"),
    "float8_e5m2": ("float8", "int8", "float16", "float32"),
    "int8": ("int8", "float16", "float32"),
    "uint8": ("int8", "float16", "float32"),
    "int4": ("int4", "int8", "float16", "float32"),
    "uint4": ("int4", "int8", "float16", "float32"),
}


@dataclass(frozen=True)
class HardwareSpec:
    """One device's roofs. ``peak_flops`` maps numpy-style dtype names to ops/s; a bare number is the float32
    peak (``HardwareSpec("M3 Pro", peak_flops=7.4e12, memory_bandwidth=150e9)``), which the other float dtypes
    then fall back to (``peak_for``)."""

    name: str
    peak_flops: Mapping[str, float]
    memory_bandwidth: float
    onchip_bytes: int | None = None
    onchip_bandwidth: float | None = None
    energy_per_byte: float = DEFAULT_ENERGY_PER_BYTE
    sustained_power_w: float | None = None
    kind: str = "custom"
    description: str = ""
    sources: tuple[str, ...] = ()
    derating: tuple[float, float] | None = field(default=None)
    """(compute, bandwidth) efficiency factors already applied to the peaks, or None for raw peaks."""
    cache_levels: tuple[tuple[int, float], ...] = ()
    """On-chip memory levels as (capacity bytes, bandwidth B/s), smallest first (L1, L2, L3 on a CPU). Optional:
    without it the one level ``onchip_bytes``/``onchip_bandwidth`` describes is used; with it, that pair, when
    given, is the largest level."""
    memory_bytes: int | None = None
    """Device memory capacity in bytes (DRAM, or the memory an accelerator's weights live in); optional, used by
    checks of whether a model fits (``graphcost llm``)."""
    _levels: tuple[tuple[int, float], ...] = field(init=False, repr=False, compare=False, default=())
    _peaks: dict[str, float] = field(init=False, repr=False, compare=False, default_factory=dict)

    def __post_init__(self) -> None:
        peaks: object = self.peak_flops
        if isinstance(peaks, (int, float)) and not isinstance(peaks, bool):  # one number: the fp32 peak
            object.__setattr__(self, "peak_flops", {"float32": float(peaks)})
        elif not isinstance(peaks, Mapping):
            raise ValueError(f"hardware {self.name!r}: peak_flops must be ops/s (the float32 peak) or a mapping "
                             f"dtype → ops/s, e.g. {{'float32': 7.4e12}}; got a {type(peaks).__name__}")
        if not self.peak_flops:
            raise ValueError(f"hardware {self.name!r}: no peak_flops given")
        for dtype, value in self.peak_flops.items():
            if not value > 0:
                raise ValueError(f"hardware {self.name!r}: peak_flops[{dtype}] must be > 0, got {value}")
        if not self.memory_bandwidth > 0:
            raise ValueError(f"hardware {self.name!r}: memory_bandwidth must be > 0")
        object.__setattr__(self, "peak_flops", MappingProxyType(dict(self.peak_flops)))
        levels = tuple((int(cap), float(bw)) for cap, bw in self.cache_levels)
        for i, (cap, bw) in enumerate(levels):
            if cap <= 0 or not bw > 0:
                raise ValueError(f"hardware {self.name!r}: cache_levels[{i}] needs capacity > 0 and bandwidth > 0")
            if i and cap <= levels[i - 1][0]:
                raise ValueError(f"hardware {self.name!r}: cache_levels must grow in capacity, smallest first")
        object.__setattr__(self, "cache_levels", levels)
        if self.memory_bytes is not None and not self.memory_bytes > 0:
            raise ValueError(f"hardware {self.name!r}: memory_bytes must be > 0, got {self.memory_bytes}")
        # What every bound reads, worked out once (the spec is frozen, its peaks a read-only copy): the roofline's
        # kernel_bound runs ~2.7 times a node (270k calls at synthetic-100k), and asking levels() and peak_for()
        # anew took 1.88 µs a call on edge-soc against 1.52 µs with them read once (measured side by side).
        object.__setattr__(self, "_levels", self._on_chip_levels())
        object.__setattr__(self, "_peaks", {})

    def _on_chip_levels(self) -> tuple[tuple[int, float], ...]:
        out = list(self.cache_levels)
        if self.onchip_bytes and self.onchip_bandwidth and (not out or self.onchip_bytes > out[-1][0]):
            out.append((self.onchip_bytes, self.onchip_bandwidth))
        return tuple(out)

    def levels(self) -> tuple[tuple[int, float], ...]:
        """On-chip levels with a bandwidth, smallest first: ``cache_levels`` plus the ``onchip_*`` pair when it is
        larger than all of them. Empty when the spec knows no on-chip bandwidth (bounds are then DRAM-only)."""
        return self._levels

    def peak(self, dtype: str) -> float:
        """Peak ops/s for a compute dtype (:meth:`peak_for`'s figure), remembered per dtype."""
        peaks = self._peaks
        value = peaks.get(dtype)
        if value is None:
            value = peaks[dtype] = self.peak_for(dtype)[0]
        return value

    def peak_for(self, dtype: str) -> tuple[float, str]:
        """Peak ops/s for a compute dtype and the dtype whose peak it is.

        Integer index types (int64, int32, bool) and unknown dtypes use the float32 peak, or the
        first peak the spec lists.
        """
        for candidate in _FALLBACK.get(dtype, (dtype, "float32")):
            if candidate in self.peak_flops:
                return self.peak_flops[candidate], candidate
        first = next(iter(self.peak_flops))
        return self.peak_flops[first], first

    def ridge_point(self, dtype: str = "float32") -> float:
        """Arithmetic intensity (ops/B) at which compute and DRAM bandwidth roofs meet."""
        return self.peak_for(dtype)[0] / self.memory_bandwidth

    def to_dict(self, *, complete: bool = False) -> dict[str, Any]:
        """The spec as JSON-ready values; the one place a spec becomes a dict.

        Default: the roofs a report states (the ``hardware`` object of analyze, gap, compare and audit
        reports), with the ridge point of every peak and no descriptive fields. ``complete=True``: every
        field, in the form :meth:`from_dict` reads back (audit tasks cross processes this way;
        ``catalog.to_toml`` writes these values).
        """
        if not complete:
            return {
                "name": self.name,
                "peak_flops": dict(self.peak_flops),
                "memory_bandwidth": self.memory_bandwidth,
                "ridge_point": {k: v / self.memory_bandwidth for k, v in self.peak_flops.items()},
                "onchip_bytes": self.onchip_bytes,
                "onchip_bandwidth": self.onchip_bandwidth,
                "cache_levels": [{"bytes": cap, "bandwidth": bw} for cap, bw in self.cache_levels],
                "energy_per_byte": self.energy_per_byte,
                "derating": None if self.derating is None else {"compute": self.derating[0],
                                                                 "bandwidth": self.derating[1]},
            }
        return {
            "name": self.name, "peak_flops": dict(self.peak_flops), "memory_bandwidth": self.memory_bandwidth,
            "onchip_bytes": self.onchip_bytes, "onchip_bandwidth": self.onchip_bandwidth,
            "energy_per_byte": self.energy_per_byte, "sustained_power_w": self.sustained_power_w, "kind": self.kind,
            "description": self.description, "sources": list(self.sources),
            "derating": None if self.derating is None else list(self.derating),
            "cache_levels": [[cap, bw] for cap, bw in self.cache_levels], "memory_bytes": self.memory_bytes,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> HardwareSpec:
        """The spec :meth:`to_dict` (``complete=True``) wrote; JSON's lists read back as tuples."""
        fields = dict(d)
        fields["sources"] = tuple(fields.get("sources") or ())
        if fields.get("derating") is not None:
            fields["derating"] = tuple(fields["derating"])
        fields["cache_levels"] = tuple((int(cap), float(bw)) for cap, bw in fields.get("cache_levels") or ())
        return cls(**fields)

    def derated(
        self,
        compute: float = TEXTBOOK_COMPUTE_EFFICIENCY,
        bandwidth: float = TEXTBOOK_BANDWIDTH_EFFICIENCY,
    ) -> HardwareSpec:
        """The same device at sustained rather than peak roofs (named option ``--derate``)."""
        if not (0 < compute <= 1 and 0 < bandwidth <= 1):
            raise ValueError("derating factors must be in (0, 1]")
        return replace(
            self,
            name=f"{self.name} (derated {compute:g}/{bandwidth:g})",
            peak_flops={k: v * compute for k, v in self.peak_flops.items()},
            memory_bandwidth=self.memory_bandwidth * bandwidth,
            onchip_bandwidth=None if self.onchip_bandwidth is None else self.onchip_bandwidth * bandwidth,
            cache_levels=tuple((cap, bw * bandwidth) for cap, bw in self.cache_levels),
            derating=(compute, bandwidth),
        )
