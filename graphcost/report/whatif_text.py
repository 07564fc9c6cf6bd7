"""The what-if section as text (after the report) and as HTML (with a bound-vs-dim chart for a sweep).

Node and group names come from the model file: text goes through ``terminal_text``, HTML through ``esc``.
"""

from __future__ import annotations

import math
from typing import Any

from graphcost.report.escape import terminal_text as _t
from graphcost.report.html_base import COMPUTE_COLOR, MEMORY_COLOR, esc
from graphcost.report.units import bytes_, seconds, si


def _ms(s: float | None) -> str:
    return "?" if s is None else f"{s * 1e3:.3f} ms"


def _pct(x: float | None) -> str:
    return "?" if x is None else f"{x:.2%}"


def lines(w: Any) -> list[str]:
    """The what-if as plain lines (shared by the text and HTML renderers)."""
    f = w.floor
    out = [f"What-ifs on {w.hardware}: ridge {w.ridge_point:.1f} FLOP/B ({w.peak_dtype} peak ÷ DRAM "
           f"{si(w.memory_bandwidth, 'B/s')})"]
    if w.precision is not None:
        p = w.precision
        what = ", ".join(x for x in (f"weights {p.weights}" if p.weights else "",
                                     f"activations {p.activations}" if p.activations else "") if x)
        plural = "" if p.weight_tensors == 1 else "s"
        out.append(f"  precision: {what} ({p.weight_tensors} weight tensor{plural}): bytes {p.bytes_before:,.0f} → "
                   f"{p.bytes_after:,.0f}; floor {seconds(p.floor_before_s)} → {seconds(p.floor_after_s)}"
                   + (f" ({p.speedup:.2f}× faster)" if p.speedup else ""))
    out.append(f"  floor: {seconds(f.floor_s)} (Σ per node max(compute, memory); {f.bound}-bound overall; "
               f"compute {seconds(f.compute_time_s)}, memory {seconds(f.memory_time_s)})")
    out.append(f"  % of peak: {_pct(f.peak_fraction)} overall (compute time ÷ bound time; "
               f"{si(f.flops, 'FLOP')}, {f.bytes:,.0f} B)")
    if f.sustained_clock != 1:
        out.append(f"  at sustained clock ×{f.sustained_clock:g}: floor {seconds(f.floor_sustained_s)} "
                   "(compute ÷ clock, memory unchanged)")
    if w.budget is not None:
        b = w.budget
        out.append(f"  budget: slice {_ms(w.slice_s)}"
                   + (f" (1000/{w.options.fps:g} fps)" if w.options.budget_ms is None else "")
                   + f"; floor at sustained clocks {_ms(f.floor_sustained_s)}; p99 = floor × "
                   f"{w.options.p99_factor:g} ÷ clock {w.options.sustained_clock:g} = {_ms(b.p99_sustained_s)}")
        out.append(f"  {b.verdict}")
    if w.power is not None:
        p = w.power
        text = f"  energy floor {p.energy_j * 1e3:.3f} mJ per inference"
        if p.power_w is not None:
            text += f" × {p.rate_hz:g}/s = {p.power_w:.3g} W"
        if p.envelope_w is not None:
            verdict = "" if p.within is None else (" — within it" if p.within else " — EXCEEDS it")
            text += f"; envelope {p.envelope_w:g} W ({_t(p.envelope_source or '')}){verdict}"
        out.append(text)
    if w.sweep is not None:
        s = w.sweep
        out.append(f"  sweep {_t(s.dim)} (the exact formulas; {s.peak_dtype} peak, every byte at DRAM bandwidth; "
                   f"ridge {s.ridge_point:.1f} FLOP/B):")
        out.append(f"    {_t(s.dim):>8} {'FLOPs':>12} {'bytes':>12} {'FLOP/B':>9} {'compute':>11} {'memory':>11} "
                   f"{'bound':>11}  by")
        for r in s.rows:
            out.append(f"    {r.value:>8} {si(r.flops):>12} {bytes_(r.bytes):>12} "
                       f"{'?' if r.intensity is None else f'{r.intensity:.2f}':>9} {seconds(r.compute_time_s):>11} "
                       f"{seconds(r.memory_time_s):>11} {seconds(r.bound_time_s):>11}  {r.bound}")
        if s.crossing is None:
            out.append(f"    memory bound at every value swept: the ridge needs more {_t(s.dim)}"
                       + (f" (≈ {s.exact_crossing:.1f})" if s.exact_crossing else ""))
        else:
            out.append(f"    crosses the ridge at {_t(s.dim)} = {s.crossing} (first compute-bound value)"
                       + (f"; exactly at {_t(s.dim)} ≈ {s.exact_crossing:.2f}" if s.exact_crossing else ""))
    for g in w.fusion:
        trav = f" = {g.traversals_saved:.2f} × {g.traversal_bytes:,.0f} B" if g.traversals_saved else ""
        out.append(f"  fusion {_t(g.group)} ({len(g.nodes)} nodes): {g.bytes_unfused:,.0f} → {g.bytes_fused:,.0f} B, "
                   f"saves {g.bytes_saved:,.0f} B{trav}; at DRAM bandwidth {seconds(g.memory_time_saved_s)} per "
                   f"block" + (f", × {g.repeat} blocks: {g.bytes_saved * g.repeat:,.0f} B, "
                               f"{seconds(g.memory_time_saved_s * g.repeat)}" if g.repeat != 1 else ""))
    for n in w.notes:
        out.append(f"  note: {n}")
    return out


def node_rows(w: Any, limit: int = 10) -> list[str]:
    rows = [f"    {'node':<28} {'op':<16} {'FLOP/B':>9} {'bound':>11} {'by':<8} {'% peak':>8}"]
    for n in w.nodes[:limit]:
        name = _t(n.name)
        name = name if len(name) <= 28 else name[:27] + "…"
        rows.append(f"    {name:<28} {_t(n.op_type)[:16]:<16} "
                    f"{'?' if n.intensity is None else f'{n.intensity:.2f}':>9} {seconds(n.bound_time_s):>11} "
                    f"{n.bound or '?':<8} {_pct(n.peak_fraction):>8}")
    return rows


def render_whatif(w: Any) -> str:
    """The what-if section of ``analyze``'s text report."""
    out = ["", *lines(w), "  slowest nodes under the what-if (% of peak = compute time ÷ bound time):",
           *node_rows(w)]
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------------------------------ HTML
def render_html_section(w: Any) -> str:
    body = "".join(f'<p class="meta">{esc(x.strip())}</p>' for x in lines(w)[1:])
    nodes = "<pre class=mono>" + esc("\n".join(node_rows(w))) + "</pre>"
    chart = ""
    if w.sweep is not None and len(w.sweep.rows) >= 2:
        chart = (f"<figure>{sweep_svg(w.sweep)}<figcaption>Bound time vs {esc(w.sweep.dim)} (log–log): compute "
                 "and memory floors from the exact formulas; the bound is the larger; the marker is where the "
                 "model crosses the ridge point.</figcaption></figure>")
    return (f'<h2 id="whatif">What-ifs</h2><p class="meta">{esc(lines(w)[0])}</p>{body}{chart}'
            f"<details><summary>Nodes under the what-if</summary>{nodes}</details>")


def sweep_svg(s: Any, width: int = 900, height: int = 320) -> str:
    """Compute, memory and bound time against the swept dim, log–log, with the crossing marked."""
    xs = [float(r.value) for r in s.rows]
    ys = [v for r in s.rows for v in (r.compute_time_s, r.memory_time_s) if v > 0]
    if not ys:
        return ""
    x0, x1 = math.log10(min(xs)), math.log10(max(xs)) + 1e-9
    y0, y1 = math.log10(min(ys) / 1.5), math.log10(max(ys) * 1.5)
    left, right, top, bottom = 70, 20, 20, 40

    def X(v: float) -> float:
        return left + (math.log10(v) - x0) / (x1 - x0) * (width - left - right)

    def Y(v: float) -> float:
        return top + (y1 - math.log10(max(v, 10 ** y0))) / (y1 - y0) * (height - top - bottom)

    def path(values: list[float], color: str, dash: str = "") -> str:
        pts = " ".join(f"{X(x):.1f},{Y(y):.1f}" for x, y in zip(xs, values, strict=True))
        return (f'<polyline fill="none" stroke="{color}" stroke-width="2"{dash} points="{pts}"/>')

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img">',
           f'<rect x="{left}" y="{top}" width="{width - left - right}" height="{height - top - bottom}" '
           'fill="none" stroke="#ccc"/>',
           path([r.compute_time_s for r in s.rows], COMPUTE_COLOR, ' stroke-dasharray="4 3"'),
           path([r.memory_time_s for r in s.rows], MEMORY_COLOR, ' stroke-dasharray="4 3"'),
           path([r.bound_time_s for r in s.rows], "#222")]
    for r in s.rows:
        out.append(f'<circle cx="{X(r.value):.1f}" cy="{Y(r.bound_time_s):.1f}" r="3" '
                   f'fill="{COMPUTE_COLOR if r.bound == "compute" else MEMORY_COLOR}"><title>{esc(s.dim)}={r.value}: '
                   f"{esc(seconds(r.bound_time_s))} ({r.bound})</title></circle>")
        out.append(f'<text x="{X(r.value):.1f}" y="{height - bottom + 14}" font-size="11" '
                   f'text-anchor="middle">{r.value}</text>')
    cross = s.exact_crossing or s.crossing
    if cross and min(xs) <= cross <= max(xs):
        out.append(f'<line x1="{X(cross):.1f}" y1="{top}" x2="{X(cross):.1f}" y2="{height - bottom}" '
                   'stroke="#888" stroke-dasharray="2 2"/>'
                   f'<text x="{X(cross) + 4:.1f}" y="{top + 12}" font-size="11">ridge at {esc(s.dim)} ≈ '
                   f"{cross:.3g}</text>")
    for label, v in ((seconds(10 ** y0), 10 ** y0), (seconds(10 ** y1), 10 ** y1)):
        out.append(f'<text x="{left - 4}" y="{Y(v) + 4:.1f}" font-size="11" text-anchor="end">{esc(label)}</text>')
    out.append(f'<text x="{(left + width - right) / 2:.0f}" y="{height - 6}" font-size="12" '
               f'text-anchor="middle">{esc(s.dim)}</text>')
    out.append(f'<text x="{width - right - 4}" y="{top + 14}" font-size="11" text-anchor="end">'
               f'<tspan fill="{MEMORY_COLOR}">memory</tspan> · <tspan fill="{COMPUTE_COLOR}">compute</tspan> · '
               "bound</text></svg>")
    return "".join(out)


__all__ = ["lines", "render_html_section", "render_whatif", "sweep_svg"]
