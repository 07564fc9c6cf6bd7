"""Summary statistics of timed repeats.

All times are seconds. Percentiles use **linear interpolation between closest ranks** (numpy's default,
Hyndman & Fan type 7): the q-quantile of n sorted samples x₀ ≤ … ≤ xₙ₋₁ sits at position h = q·(n − 1),
and is x⌊h⌋ + (h − ⌊h⌋)·(x⌊h⌋₊₁ − x⌊h⌋). For 1, 2, …, 100 that gives median 50.5, p90 90.1, p99 99.01.
``stdev`` is the sample standard deviation (n − 1 in the denominator); ``mad`` is the median absolute
deviation from the median, unscaled. An empty ``Timing`` stands for "not measured": its count is 0 and its
statistics are NaN (``to_dict`` then carries only the count).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from graphcost.report.units import seconds


def _quantile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (type 7) on already sorted values."""
    if not ordered:
        return math.nan
    h = q * (len(ordered) - 1)
    lo = math.floor(h)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (h - lo) * (ordered[hi] - ordered[lo])


@dataclass(frozen=True)
class Timing:
    """Durations of timed repeats, in seconds, in run order."""

    samples: tuple[float, ...]

    @property
    def count(self) -> int:
        return len(self.samples)

    @property
    def _sorted(self) -> list[float]:
        return sorted(self.samples)

    @property
    def median(self) -> float:
        return _quantile(self._sorted, 0.5)

    @property
    def p90(self) -> float:
        return _quantile(self._sorted, 0.9)

    @property
    def p99(self) -> float:
        return _quantile(self._sorted, 0.99)

    @property
    def min(self) -> float:
        return min(self.samples) if self.samples else math.nan

    @property
    def max(self) -> float:
        return max(self.samples) if self.samples else math.nan

    @property
    def mean(self) -> float:
        return math.fsum(self.samples) / len(self.samples) if self.samples else math.nan

    @property
    def stdev(self) -> float:
        """Sample standard deviation; 0.0 for one sample."""
        n = len(self.samples)
        if n == 0:
            return math.nan
        if n == 1:
            return 0.0
        mean = self.mean
        return math.sqrt(math.fsum((x - mean) ** 2 for x in self.samples) / (n - 1))

    @property
    def mad(self) -> float:
        """Median absolute deviation from the median (unscaled)."""
        if not self.samples:
            return math.nan
        med = self.median
        return _quantile(sorted(abs(x - med) for x in self.samples), 0.5)

    @property
    def spread(self) -> float:
        """p90 − min: how far the slow tail sits above the best run."""
        return self.p90 - self.min

    def to_dict(self, samples: bool = False) -> dict[str, Any]:
        """The statistics (floats, seconds) and the count; the raw samples too, as a list, when asked."""
        out: dict[str, Any] = {"count": self.count}
        if self.samples:
            out.update(median=self.median, p90=self.p90, p99=self.p99, min=self.min, max=self.max,
                       mean=self.mean, stdev=self.stdev, mad=self.mad, spread=self.spread)
        if samples:
            out["samples"] = list(self.samples)
        return out


BIMODAL_GAP = 3.0
"""Sorted samples with a step of this ratio between neighbours, and enough samples on each side, form two modes:
on 2 busy cores torch eager swung between 0.6 ms and 24 ms runs, a 40× step."""
MIN_MODE_FRACTION = 0.1
"""Each side of the step holds at least this share of the samples (and at least 2): a lone slow run is a tail."""
UNSTABLE_RATIO = 4.0
"""p90 ÷ p10 beyond this without one clear step: the runs spread over a range too wide for a median to mean much."""


@dataclass(frozen=True)
class Modes:
    """Why a Timing's median does not describe its runs: two modes, or a spread too wide to trust."""

    kind: str  # "bimodal" or "unstable"
    low_s: float  # bimodal: the lower mode's median; unstable: p10
    high_s: float  # bimodal: the upper mode's median; unstable: p90
    low_count: int  # bimodal: runs in the lower mode; unstable: all runs
    high_count: int  # bimodal: runs in the upper mode; unstable: 0

    def describe(self) -> str:
        if self.kind == "bimodal":
            return (f"bimodal: {self.low_count} runs near {seconds(self.low_s)}, {self.high_count} near "
                    f"{seconds(self.high_s)}")
        return (f"unstable: p10 {seconds(self.low_s)}, p90 {seconds(self.high_s)} "
                f"({self.high_s / self.low_s:.1f}× apart over {self.low_count} runs)")

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def modes(t: Timing) -> Modes | None:
    """Two modes or an unstable spread in ``t``'s samples (None: one mode a median describes). Needs ≥ 6 samples.

    Bimodal: in the sorted samples x₀ ≤ … ≤ xₙ₋₁ the largest step ratio xᵢ₊₁ / xᵢ is ≥ ``BIMODAL_GAP`` with at
    least max(2, ⌈``MIN_MODE_FRACTION``·n⌉) samples on each side. Unstable: no such step, but p90 / p10 ≥
    ``UNSTABLE_RATIO``.
    """
    ordered = t._sorted
    n = len(ordered)
    if n < 6 or not ordered[0] > 0:
        return None
    need = max(2, math.ceil(MIN_MODE_FRACTION * n))
    steps = [(ordered[i + 1] / ordered[i], i) for i in range(need - 1, n - need)]  # i: last index of the lower side
    ratio, cut = max(steps)
    if ratio >= BIMODAL_GAP:
        low, high = ordered[: cut + 1], ordered[cut + 1 :]
        return Modes("bimodal", _quantile(low, 0.5), _quantile(high, 0.5), len(low), len(high))
    p10, p90 = _quantile(ordered, 0.1), _quantile(ordered, 0.9)
    if p90 / p10 >= UNSTABLE_RATIO:
        return Modes("unstable", p10, p90, n, 0)
    return None


def timing(samples: Iterable[float]) -> Timing:
    """A :class:`Timing` of durations in seconds (finite, non-negative); empty means "not measured"."""
    values = tuple(float(s) for s in samples)
    for i, s in enumerate(values):
        if not math.isfinite(s) or s < 0:
            raise ValueError(f"timing sample {i} is {s!r}: durations must be finite and non-negative seconds")
    return Timing(values)


__all__ = ["BIMODAL_GAP", "Modes", "Timing", "modes", "timing"]
