"""The gap report as plain text: model rows per runner, the slowest kernels and groups, what each diagnosis
means and what to do next, memory and budget. Warnings that change how the numbers read (roofs measured on a
busy machine, latencies with two modes) come right under the title; accounting errors next, in capitals.

Every line passes ``terminal_text`` (``report/escape.py``) on the way out, and labels before they are cut to
a column, so a node, kernel or hardware name cannot send control characters to the terminal."""

from __future__ import annotations

from typing import Any

from graphcost.report.escape import terminal_text
from graphcost.report.units import bytes_, seconds


def _pct(x: float | None) -> str:
    return "?" if x is None else f"{100 * x:.1f}%"


def _ratio(x: float | None) -> str:
    return "?" if x is None else f"{x:.2f}×"


def _cut(text: str, width: int) -> str:
    text = terminal_text(text)  # before measuring: the escapes are what the column shows
    return text if len(text) <= width else text[: width - 1] + "…"


def render(report: Any, *, top: int = 10) -> str:
    """``report``: a ``graphcost.measure.gap_report.GapReport``."""
    hw = report.hardware
    binding = ", ".join(f"{k}={v}" for k, v in report.binding.items()) or "static shapes"
    out = [f"gap report: {report.model}",
           f"  hardware {hw.name}; residency {report.residency}; {binding}",
           f"  bounds: one-kernel floor {seconds(report.floor.bound_s)} · ideal fusion {seconds(report.ideal.bound_s)}"
           f" · ORT's partition {seconds(report.ort_partition.bound_s)}"]
    out[1:1] = _warnings(report)  # a busy machine's warning first: it changes how every number below reads
    errors = report.errors
    if errors:
        out.append("")
        out.append(f"ACCOUNTING ERROR: {len(errors)} row(s) measured faster than their bound beyond timer noise —"
                   " the accounting or the timer is wrong:")
        out += [f"  {r.level} {_cut(r.label, 60)}: {seconds(r.observed.median_s)} < bound "
                f"{seconds(r.bound.bound_s)}" for r in errors]
    out += ["", "model"]
    head = (f"  {'runner':<26} {'median':>10} {'p99':>10} {'bound':>10} {'effic.':>7} {'%peak':>6} {'ratio':>8} "
            f"{'GFLOP/s':>8} {'GB/s':>8} {'bound by':>8}  diagnosis")
    out.append(head)
    for r in report.models:
        out.append(f"  {_cut(r.runner, 26):<26} {seconds(r.observed.median_s):>10} {seconds(r.observed.p99_s):>10} "
                   f"{seconds(r.bound.bound_s):>10} {_pct(r.efficiency):>7} {_pct(r.peak_fraction):>6} "
                   f"{_ratio(r.ratio):>8} {_g(r.achieved_flops_per_s):>8} {_g(r.achieved_bytes_per_s):>8} "
                   f"{r.bound.bound or '?':>8}  {r.diagnosis.code}")
    out.append("  effic. = bound ÷ measured; %peak = achieved FLOP/s ÷ peak compute (low when memory-bound, "
               "even at the roof)")
    for title, rows in (("kernels (ORT units, slowest first)", report.kernels),
                        ("fusion groups (ideal groups ORT's kernels span, slowest first)", report.groups)):
        out += ["", f"{title}: {len(rows)}"]
        out.append(f"  {'':<44} {'median':>10} {'bound':>10} {'effic.':>7} {'ratio':>8} {'bound by':>8}  diagnosis")
        for r in rows[:top]:
            out.append(f"  {_cut(r.label, 44):<44} {seconds(r.observed.median_s):>10} {seconds(r.bound.bound_s):>10} "
                       f"{_pct(r.efficiency):>7} {_ratio(r.ratio):>8} {r.bound.bound or '?':>8}  {r.diagnosis.code}")
        if len(rows) > top:
            out.append(f"  … {len(rows) - top} more (--top N, or --format json)")
    if report.unattributed_s:
        out.append(f"  unattributed kernel time: {seconds(report.unattributed_s)}")
    seen: dict[str, Any] = {}
    for r in (*report.models, *report.kernels, *report.groups):
        seen.setdefault(r.diagnosis.code, r.diagnosis)
    out += ["", "what the diagnoses mean"]
    for code, d in seen.items():
        out.append(f"  {code}: {d.verdict}")
        out += [f"    - {step}" for step in d.next_steps]
    m = report.memory
    if m is not None:
        out += ["", "memory"]
        out.append(f"  measured: {bytes_(m.measured_bytes) if m.measured_bytes is not None else 'not available'}"
                   f" ({m.source})")
        out.append(f"  liveness: peak {bytes_(m.liveness_peak_bytes)} (bounds {bytes_(m.min_peak_bytes)} … "
                   f"{bytes_(m.conservative_peak_bytes)}), arena {bytes_(m.arena_bytes)}")
        if m.measured_bytes is not None and m.min_peak_bytes is not None and m.measured_bytes < m.min_peak_bytes:
            out.append("  (below the liveness minimum: ORT's arena excludes the caller's input buffers and runs "
                       "some ops in place, which the liveness model, one buffer per tensor, does not)")
    if report.budget is not None:
        b = report.budget
        out += ["", f"budget {seconds(b.budget_s)} (p99, sustained clock ×{b.sustained_clock:g})", f"  {b.verdict}"]
    if report.notes:
        out += [""] + [f"note: {n}" for n in report.notes]
    return "\n".join(terminal_text(line) for line in out) + "\n"


def _warnings(report: Any) -> list[str]:
    """The busy-roofs warning (and the rows it excuses from the accounting verdict) and the timing warnings."""
    out: list[str] = []
    if report.roofs_busy:
        out.append("  WARNING: " + report.roofs_busy.removeprefix("warning: "))
        rows = report.under_busy_roofs
        if rows:
            out.append(f"  {len(rows)} row(s) measured faster than their bound against these roofs — load is the "
                       "likely cause, not the accounting (no accounting error is reported):")
            out += [f"    {r.level} {_cut(r.label, 60)}: {seconds(r.observed.median_s)} < bound "
                    f"{seconds(r.bound.bound_s)}" for r in rows]
    out += [f"  warning: {w}" for w in report.timing_warnings]
    return out


def _g(x: float | None) -> str:
    return "?" if x is None else f"{x / 1e9:.2f}"

