"""Human units, used only by reports (the analysis keeps SI base units)."""

from __future__ import annotations


def si(value: float | int | None, unit: str = "", digits: int = 3) -> str:
    """3.2e9 → '3.20 G' + unit."""
    if value is None:
        return "?"
    v = float(value)
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= factor:
            return f"{v / factor:.{digits - 1}f} {prefix}{unit}"
    if v == int(v):
        return f"{int(v)} {unit}".rstrip()
    return f"{v:.{digits}g} {unit}".rstrip()


def seconds(value: float | None) -> str:
    if value is None:
        return "?"
    if value >= 1:
        return f"{value:.3f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.3f} ms"
    if value >= 1e-6:
        return f"{value * 1e6:.1f} µs"
    return f"{value * 1e9:.1f} ns"


def bytes_(value: float | int | None) -> str:
    if value is None:
        return "?"
    v = float(value)
    for factor, prefix in ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if v >= factor:
            return f"{v / factor:.2f} {prefix}"
    return f"{int(v)} B"
