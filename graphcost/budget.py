"""The latency budget rule (the seed chapter's): budget against p99 at sustained clocks; the floor is a veto.

One rule, used by every command that checks a budget: ``gap`` / ``bench --gap`` (a measured p99), ``analyze
--budget-ms`` (the static floor × a p99 factor, ``graphcost/whatif.py``) and ``graphcost budget`` (a model
measured elsewhere: the chapter's Problem 4 has no model file)::

    p99_sustained = p99 ÷ sustained_clock        the clock drops, the whole tail stretches
    VETO          when floor_sustained > slice   no kernel work can fit it
    fits          when p99_sustained ≤ slice
    misses        otherwise; speed-up needed = p99_sustained ÷ slice

``floor_sustained`` is the roofline bound at sustained clocks (compute time ÷ clock, memory time unchanged);
without one (a measured model with no bound) there is no veto.

Python API::

    from graphcost.budget import measured
    b = measured(mean_s=9.5e-3, p99_factor=1.35, sustained_clock=0.72, budget_s=12e-3)
    b.fits, b.speedup_needed, b.verdict      # False, 1.484, 'misses: ... needs 1.48× ...'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def frame_slice_s(fps: float) -> float:
    """The whole frame at ``fps`` frames per second, in seconds (30 fps → 33.3 ms)."""
    if not fps > 0:
        raise ValueError(f"fps {fps:g}: must be > 0")
    return 1.0 / fps


@dataclass(frozen=True)
class Budget:
    """A latency budget checked against p99 at sustained clocks (the seed chapter's rule)."""

    budget_s: float
    sustained_clock: float
    p99_s: float
    floor_s: float | None

    @property
    def p99_sustained_s(self) -> float:
        return self.p99_s / self.sustained_clock  # the clock drops, the time stretches

    @property
    def veto(self) -> bool:
        """The bound alone exceeds the slice: no kernel work can fit it."""
        return self.floor_s is not None and self.floor_s > self.budget_s

    @property
    def fits(self) -> bool:
        return not self.veto and self.p99_sustained_s <= self.budget_s

    @property
    def speedup_needed(self) -> float:
        return max(1.0, self.p99_sustained_s / self.budget_s)

    @property
    def verdict(self) -> str:
        if self.veto:
            assert self.floor_s is not None
            return (f"VETO: the floor already exceeds the slice ({self.floor_s * 1e3:.3g} ms bound at sustained "
                    f"clocks > {self.budget_s * 1e3:.3g} ms): change the model, the input size or the precision; "
                    "no kernel work will fit it")
        if self.fits:
            return (f"fits: p99 at sustained clocks {self.p99_sustained_s * 1e3:.3g} ms ≤ "
                    f"{self.budget_s * 1e3:.3g} ms budget")
        return (f"misses: p99 at sustained clocks {self.p99_sustained_s * 1e3:.3g} ms > "
                f"{self.budget_s * 1e3:.3g} ms budget; needs {self.speedup_needed:.2f}× "
                "(the floor allows it: optimization can fit it)")

    def to_dict(self) -> dict[str, Any]:
        return {"budget_s": self.budget_s, "sustained_clock": self.sustained_clock, "p99_s": self.p99_s,
                "p99_sustained_s": self.p99_sustained_s, "floor_sustained_s": self.floor_s, "fits": self.fits,
                "veto": self.veto, "speedup_needed": self.speedup_needed, "verdict": self.verdict}


def measured(*, mean_s: float | None = None, p99_factor: float = 1.0, p99_s: float | None = None,
             sustained_clock: float = 1.0, budget_s: float, floor_s: float | None = None) -> Budget:
    """The budget check of a model measured elsewhere: p99 = ``p99_s``, or ``mean_s`` × ``p99_factor``.

    ``sustained_clock`` is the clock the model settles at as a fraction of the clock it was measured at (0.72);
    ``floor_s``, when known, is its roofline bound at sustained clocks (a veto when above the budget). Raises
    ValueError naming the parameter for a value out of range.
    """
    if (mean_s is None) == (p99_s is None):
        raise ValueError("give the measured mean (with a p99 factor) or the measured p99, not both")
    for name, value in (("mean", mean_s), ("p99", p99_s), ("budget", budget_s)):
        if value is not None and not value > 0:
            raise ValueError(f"{name} {value:g}: must be > 0")
    if not p99_factor >= 1:
        raise ValueError(f"p99 factor {p99_factor:g}: must be ≥ 1 (p99 is at least the mean)")
    if not 0 < sustained_clock <= 1:
        raise ValueError(f"sustained clock {sustained_clock:g}: must be in (0, 1] (e.g. 0.72)")
    if floor_s is not None and not floor_s >= 0:
        raise ValueError(f"floor {floor_s:g}: must be ≥ 0")
    p99 = p99_s if p99_s is not None else mean_s * p99_factor  # type: ignore[operator]
    return Budget(budget_s, sustained_clock, p99, floor_s)


__all__ = ["Budget", "frame_slice_s", "measured"]
