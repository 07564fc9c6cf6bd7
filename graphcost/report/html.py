"""HTML: one self-contained offline page — roofline chart, summary, tables, fusion, live memory, warnings.

Offline by construction: the page names no URL at all. Styles are inline, charts are SVG drawn here in
Python, the only script is a few lines that sort tables, and a Content-Security-Policy meta tag
(``default-src 'none'``) makes the browser refuse any fetch a future edit might add. Every string that
comes from the model (node, tensor, op and file names, reasons, warnings) goes through ``esc``.

Size is bounded for big graphs: the roofline draws at most ``MAX_POINTS`` points (the slowest), the
memory curve at most ``MAX_CURVE_POINTS`` vertices (min and max per bucket, so the peak survives), and
long tables stop at a stated count. The caption or a line under each table says what was left out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from graphcost.passes.roofline import kernel_bound
from graphcost.report import llm_text, whatif_text
from graphcost.report.html_base import COMPUTE_COLOR, MEMORY_COLOR, esc
from graphcost.report.model import Report
from graphcost.report.units import bytes_, seconds, si

MAX_POINTS = 2000
MAX_CURVE_POINTS = 1500
MAX_GROUP_ROWS = 200
MAX_BOUNDARY_ROWS = 300
MAX_WARNINGS = 200
OPEN_ROWS = 30
"""Tables longer than this start collapsed (``<details>``), so the memory curve is not pages away."""


CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1320px;
 padding:16px 24px;color:#1d2330;background:#fff}
h1{font-size:20px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #d8dce3;
 padding-bottom:4px}
.meta{color:#4a5263;margin:2px 0}.note{color:#5d6575;font-size:12.5px;margin:4px 0}
nav a{margin-right:14px;color:#2457a6;text-decoration:none}
table{border-collapse:collapse;margin:6px 0;font-size:13px}
th,td{padding:3px 10px;border-bottom:1px solid #eceef2;text-align:left;vertical-align:top}
th{background:#f4f6f9;position:sticky;top:0}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
table.sortable th{cursor:pointer;user-select:none}table.sortable th:hover{background:#e6ebf3}
table.kv td:first-child{color:#4a5263}td.n,.nw{white-space:nowrap}
code,.mono{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12.5px;overflow-wrap:anywhere}
details{margin:6px 0}summary{cursor:pointer;color:#2457a6;font-weight:600}
figure{margin:8px 0}figcaption{color:#5d6575;font-size:12.5px;max-width:1000px}
svg text{font-family:system-ui,sans-serif}
svg text.halo{paint-order:stroke;stroke:#fff;stroke-width:3px;stroke-linejoin:round}.warn li{margin:2px 0}
.ok{color:#1d7a3a}table.audit td{vertical-align:middle}.bad{color:#b3261e}.partial{color:#9a6700}
"""

SORT_JS = """
document.querySelectorAll("table.sortable th").forEach(function(th){th.addEventListener("click",function(){
var t=th.closest("table"),b=t.tBodies[0],i=th.cellIndex,d=th.dataset.dir==="asc"?"desc":"asc";th.dataset.dir=d;
var key=function(r){var c=r.cells[i],v=c?c.dataset.v:undefined;return v===undefined?(c?c.textContent:""):+v;};
Array.from(b.rows).sort(function(x,y){var p=key(x),q=key(y);return (p<q?-1:p>q?1:0)*(d==="asc"?1:-1);})
.forEach(function(r){b.appendChild(r);});});});
"""

def page(title: str, body: str) -> str:
    """The whole document around ``body``: inline CSS, the sort script, and a CSP that forbids fetches."""
    csp = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{csp}">'
            f'<meta name="viewport" content="width=device-width,initial-scale=1">'
            f"<title>{esc(title)}</title><style>{CSS}</style></head>\n<body>\n{body}\n"
            f"<script>{SORT_JS}</script>\n</body></html>\n")


def sort_key(value: float | int | None) -> str:
    """A cell's ``data-v``: the number, or -Infinity for unknown (first ascending, last descending)."""
    return "-Infinity" if value is None or not math.isfinite(value) else repr(float(value))


def num_td(value: float | int | None, text: str) -> str:
    """A right-aligned cell that sorts by the number, not by its text."""
    return f'<td class="n" data-v="{sort_key(value)}">{esc(text)}</td>'


def table(headers: Sequence[str], rows: Iterable[str], *, numeric: Iterable[int] = (), sortable: bool = True,
          cls: str = "") -> str:
    nums = set(numeric)
    head = "".join(f'<th{" class=n" if i in nums else ""}>{esc(h)}</th>' for i, h in enumerate(headers))
    classes = " ".join(c for c in ("sortable" if sortable else "", cls) if c)
    return (f'<table class="{classes}"><thead><tr>{head}</tr></thead><tbody>'
            + "".join(f"<tr>{r}</tr>" for r in rows) + "</tbody></table>")


# ----------------------------------------------------------------------------------------------- roofline chart
@dataclass(frozen=True)
class Point:
    """One kernel (or model) on the roofline: x = FLOP/B, y = FLOP/s, sized by its bound time."""

    intensity: float
    perf: float
    time_s: float
    label: str
    bound: str  # "memory" | "compute"


def _log_range(values: Sequence[float], pad: float) -> tuple[float, float]:
    """log10 bounds around ``values``, widened by the factor ``pad`` each side."""
    return math.log10(min(values) / pad), math.log10(max(values) * pad)


def _tick(decade: int) -> str:
    """10**decade as a short axis label: 0.01, 1, 100, 10k, 1G."""
    if decade < 0:
        return f"{10.0**decade:.{-decade}f}"
    prefix = ("", "k", "M", "G", "T", "P", "E")[min(decade // 3, 6)]
    return f"{10 ** (decade - 3 * min(decade // 3, 6))}{prefix}"


def roofline_svg(peaks: Mapping[str, float], bandwidth: float, points: Sequence[Point], *,
                 width: int = 900, height: int = 460, mini: bool = False, title: str = "") -> str:
    """A log-log roofline: one compute roof per dtype from its ridge point on, the DRAM roof up to the
    highest ridge, each ridge marked, and the points (largest first, so small ones stay clickable)."""
    ridges = {k: p / bandwidth for k, p in peaks.items()}
    xs = [p.intensity for p in points] + [min(ridges.values()) / 100, max(ridges.values()) * 20]
    x0, x1 = _log_range(xs, 1.5)
    ys = [p.perf for p in points] + [bandwidth * 10.0**x0, max(peaks.values())]
    y0, y1 = _log_range(ys, 1.25 if mini else 2.5)
    ml, mr, mt, mb = (8, 6, 6, 8) if mini else (74, 20, 16, 50)
    pw, ph = width - ml - mr, height - mt - mb

    def X(v: float) -> float:
        return ml + (math.log10(v) - x0) / (x1 - x0) * pw

    def Y(v: float) -> float:
        return mt + ph - (math.log10(v) - y0) / (y1 - y0) * ph

    out = [f'<svg class="roofline" role="img" viewBox="0 0 {width} {height}" width="{width}" height="{height}">']
    if title:
        out.append(f"<title>{esc(title)}</title>")
    out.append(f'<rect x="{ml}" y="{mt}" width="{pw}" height="{ph}" fill="#fbfcfe" stroke="#c9ced8"/>')
    if not mini:
        for d in range(math.ceil(x0), math.floor(x1) + 1):
            x = X(10.0**d)
            out.append(f'<line x1="{x:.1f}" y1="{mt}" x2="{x:.1f}" y2="{mt + ph}" stroke="#eceef2"/>'
                       f'<text x="{x:.1f}" y="{mt + ph + 16}" font-size="11" text-anchor="middle">'
                       f"{_tick(d)}</text>")
        for d in range(math.ceil(y0), math.floor(y1) + 1):
            y = Y(10.0**d)
            out.append(f'<line x1="{ml}" y1="{y:.1f}" x2="{ml + pw}" y2="{y:.1f}" stroke="#eceef2"/>'
                       f'<text x="{ml - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end">'
                       f"{_tick(d)}</text>")
        out.append(f'<text x="{ml + pw / 2}" y="{height - 8}" font-size="12" text-anchor="middle">'
                   f"arithmetic intensity (FLOP/B)</text>"
                   f'<text transform="translate(14 {mt + ph / 2}) rotate(-90)" font-size="12" '
                   f'text-anchor="middle">attainable FLOP/s</text>')
    top_ridge = max(ridges.values())
    xa, xb = 10.0**x0, top_ridge
    out.append(f'<line class="roof-dram" x1="{X(xa):.1f}" y1="{Y(bandwidth * xa):.1f}" x2="{X(xb):.1f}" '
               f'y2="{Y(bandwidth * xb):.1f}" stroke="#39404d" stroke-width="{1.2 if mini else 2}"/>')
    if not mini:
        xl = 10.0 ** (x0 + 0.25 * (math.log10(top_ridge) - x0))
        ang = math.degrees(math.atan2(Y(bandwidth * xb) - Y(bandwidth * xa), X(xb) - X(xa)))
        out.append(f'<text class="roof-label halo" transform="translate({X(xl):.1f} {Y(bandwidth * xl):.1f}) '
                   f'rotate({ang:.1f})" y="-16" font-size="12" fill="#39404d">DRAM roof '
                   f"{esc(si(bandwidth, 'B/s'))}</text>")
    for dtype, peak in sorted(peaks.items(), key=lambda kv: kv[1]):
        r = ridges[dtype]
        out.append(f'<line class="roof-compute" x1="{X(r):.1f}" y1="{Y(peak):.1f}" x2="{ml + pw}" '
                   f'y2="{Y(peak):.1f}" stroke="#39404d" stroke-width="{1.2 if mini else 2}"/>'
                   f'<circle class="ridge" cx="{X(r):.1f}" cy="{Y(peak):.1f}" r="{2.5 if mini else 4}" '
                   f'fill="#b3261e"><title>ridge point {esc(dtype)}: {r:.3g} FLOP/B</title></circle>')
        if not mini:
            out.append(f'<line x1="{X(r):.1f}" y1="{Y(peak):.1f}" x2="{X(r):.1f}" y2="{mt + ph}" '
                       f'stroke="#b3261e" stroke-dasharray="3 3" stroke-width="0.8"/>'
                       f'<text class="ridge-label halo" x="{X(r) - 7:.1f}" y="{Y(peak) - 6:.1f}" font-size="11" '
                       f'text-anchor="end" fill="#b3261e">ridge {r:.3g} FLOP/B</text>'
                       f'<text class="roof-label halo" x="{ml + pw - 6}" y="{Y(peak) - 6:.1f}" font-size="12" '
                       f'text-anchor="end" fill="#39404d">{esc(dtype)} roof {esc(si(peak, "FLOP/s"))}</text>')
    tmax = max((p.time_s for p in points), default=0.0) or 1.0
    for p in sorted(points, key=lambda p: -p.time_s):
        rad = 3.5 if mini else 2.0 + 11.0 * math.sqrt(p.time_s / tmax)
        color = COMPUTE_COLOR if p.bound == "compute" else MEMORY_COLOR
        out.append(f'<circle class="pt" cx="{X(p.intensity):.1f}" cy="{Y(p.perf):.1f}" r="{rad:.1f}" '
                   f'fill="{color}" fill-opacity="0.55" stroke="{color}"><title>{esc(p.label)}</title></circle>')
    if not mini:
        lx = ml + 12
        out.append(f'<g font-size="11"><circle cx="{lx}" cy="{mt + 14}" r="5" fill="{MEMORY_COLOR}" '
                   f'fill-opacity="0.55"/><text x="{lx + 9}" y="{mt + 18}">memory-bound</text>'
                   f'<circle cx="{lx}" cy="{mt + 30}" r="5" fill="{COMPUTE_COLOR}" fill-opacity="0.55"/>'
                   f'<text x="{lx + 9}" y="{mt + 34}">compute-bound</text>'
                   f'<text x="{lx - 5}" y="{mt + 50}">area ∝ bound time</text></g>')
    out.append("</svg>")
    return "".join(out)


def _points(report: Report) -> tuple[list[Point], int, str]:
    """Fusion groups (fused bytes and time) or, without a fusion section, top-level nodes; the points
    that can be drawn, how many could not (0 FLOPs or unknown numbers), and what a point is."""
    hw = report.hardware
    dtypes = {n.name: n.dtype for n in report.nodes}
    pts: list[Point] = []
    skipped = 0
    if report.fusion is not None:
        kernels = report.fusion.kernels
        for i, g in enumerate(report.fusion.groups):
            f, b, t = g.flops, g.bytes_fused, g.time_fused_s
            if not f or not b or not t or f <= 0 or b <= 0 or t <= 0:
                skipped += 1
                continue
            bound = kernels[i].bound if i < len(kernels) else None  # the group's kernel_bound, as fusion timed it
            if bound is None:
                dtype = dtypes.get(g.anchor or (g.nodes[0] if g.nodes else ""), "float32")
                bound = kernel_bound(f, b, hw, dtype=dtype, capacity=False).bound or "memory"
            label = (f"group {g.id} ({len(g.nodes)} node{'s' if len(g.nodes) != 1 else ''}, anchor "
                     f"{g.anchor or '-'}): {si(f, 'FLOP')}, {bytes_(b)} fused, {f / b:.3g} FLOP/B, "
                     f"{seconds(t)} {bound}-bound")
            pts.append(Point(f / b, f / t, t, label, bound))
        return pts, skipped, "fusion group"
    for n in report.nodes:
        if n.depth != 0:
            continue
        f, b, t = n.flops, n.bytes, n.roofline_time_s
        if not f or not b or not t or f <= 0 or b <= 0 or t <= 0:
            skipped += 1
            continue
        label = (f"{n.name} ({n.op_type}): {si(f, 'FLOP')}, {bytes_(b)}, {f / b:.3g} FLOP/B, "
                 f"{seconds(t)} {n.bound}-bound")
        pts.append(Point(f / b, f / t, t, label, n.bound or "memory"))
    return pts, skipped, "node"


def _roofline_section(report: Report) -> str:
    pts, skipped, what = _points(report)
    total = len(pts)
    pts = sorted(pts, key=lambda p: -p.time_s)[:MAX_POINTS]
    hw = report.hardware
    cap = [f"Each point is a {what} at (FLOPs / bytes{' fused' if what != 'node' else ''}, FLOPs / bound time) "
           f"on {esc(hw.name)}; hover a point for its name and numbers."]
    if total > MAX_POINTS:
        cap.append(f"Showing the {MAX_POINTS:,} largest of {total:,} {what}s by bound time.")
    if skipped:
        cap.append(f"{skipped:,} {what}s with 0 FLOPs or unknown numbers have no place on a log scale and are "
                   "not drawn.")
    svg = roofline_svg(hw.peak_flops, hw.memory_bandwidth, pts, title=f"roofline of {report.model.path or 'model'}")
    return (f'<h2 id="roofline">Roofline</h2><figure>{svg}<figcaption>{" ".join(cap)}</figcaption></figure>')


# ----------------------------------------------------------------------------------------------- memory curve
def _nice(span: float) -> float:
    """A 1-2-5 step giving about five ticks over ``span``."""
    raw = span / 5 or 1.0
    mag = 10.0 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)


def _bucket(n: int, limit: int) -> int:
    """Steps per bucket when ``n`` steps are drawn as two vertices (min, max) per bucket."""
    return math.ceil(n / (limit // 2))


def _downsample(curve: Sequence[Any], limit: int) -> list[tuple[int, int]]:
    """(step, bytes) vertices: all of them, or the min and max of each bucket in step order."""
    pts = [(int(p.step), int(p.live_bytes)) for p in curve]
    if len(pts) <= limit:
        return pts
    size = _bucket(len(pts), limit)
    out: list[tuple[int, int]] = []
    for i in range(0, len(pts), size):
        chunk = pts[i:i + size]
        lo, hi = min(chunk, key=lambda p: p[1]), max(chunk, key=lambda p: p[1])
        out.extend(sorted({lo, hi}))
    return out


def memory_svg(memory: Any, width: int = 900, height: int = 300) -> str:
    pts = _downsample(memory.curve, MAX_CURVE_POINTS)
    ml, mr, mt, mb = (80, 20, 16, 44)
    pw, ph = width - ml - mr, height - mt - mb
    smax = max(p[0] for p in pts) or 1
    bmax = max(max(p[1] for p in pts), memory.peak_activation_bytes, 1)
    unit, uname = next(((f, n) for f, n in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"), (1, "B"))
                        if bmax >= f), (1, "B"))
    ystep = _nice(bmax / unit) * unit
    ytop = math.ceil(bmax * 1.08 / ystep) * ystep

    def X(s: float) -> float:
        return ml + s / smax * pw

    def Y(b: float) -> float:
        return mt + ph - b / ytop * ph

    out = [f'<svg class="memory" role="img" viewBox="0 0 {width} {height}" width="{width}" height="{height}">'
           f'<rect x="{ml}" y="{mt}" width="{pw}" height="{ph}" fill="#fbfcfe" stroke="#c9ced8"/>']
    v = 0.0
    while v <= ytop + 1e-9:
        out.append(f'<line x1="{ml}" y1="{Y(v):.1f}" x2="{ml + pw}" y2="{Y(v):.1f}" stroke="#eceef2"/>'
                   f'<text x="{ml - 6}" y="{Y(v) + 4:.1f}" font-size="11" text-anchor="end">'
                   f"{f'{v / unit:g} {uname}' if v else '0'}</text>")
        v += ystep
    xstep = max(1, int(_nice(smax)))
    for s in range(0, smax + 1, xstep):
        out.append(f'<text x="{X(s):.1f}" y="{mt + ph + 16}" font-size="11" text-anchor="middle">{s}</text>')
    out.append(f'<text x="{ml + pw / 2}" y="{height - 6}" font-size="12" text-anchor="middle">step in the '
               f'schedule</text><text transform="translate(14 {mt + ph / 2}) rotate(-90)" font-size="12" '
               f'text-anchor="middle">live activation bytes</text>')
    line = " ".join(f"{X(s):.1f},{Y(b):.1f}" for s, b in pts)
    area = f"{X(pts[0][0]):.1f},{Y(0):.1f} {line} {X(pts[-1][0]):.1f},{Y(0):.1f}"
    out.append(f'<polygon points="{area}" fill="{MEMORY_COLOR}" fill-opacity="0.12"/>'
               f'<polyline class="curve" points="{line}" fill="none" stroke="{MEMORY_COLOR}" stroke-width="1.5"/>')
    lb = memory.min_peak_bytes
    if lb:
        out.append(f'<line x1="{ml}" y1="{Y(lb):.1f}" x2="{ml + pw}" y2="{Y(lb):.1f}" stroke="#7a8291" '
                   f'stroke-dasharray="5 4"/><text x="{ml + pw - 6}" y="{Y(lb) + 14:.1f}" font-size="11" '
                   f'class="halo" text-anchor="end" fill="#5d6575">lower bound: largest single step '
                   f"{esc(bytes_(lb))}</text>")
    if memory.peak_step is not None:
        px, py = X(memory.peak_step), Y(memory.peak_activation_bytes)
        right = px > ml + pw * 0.6
        label = f"peak {bytes_(memory.peak_activation_bytes)} at {memory.peak_node or '-'} (step {memory.peak_step})"
        out.append(f'<circle class="peak" cx="{px:.1f}" cy="{py:.1f}" r="5" fill="#b3261e"><title>{esc(label)}'
                   f'</title></circle><text class="peak-label halo" x="{px + (-9 if right else 9):.1f}" '
                   f'y="{max(py - 6, mt + 12):.1f}" font-size="12" fill="#b3261e" '
                   f'text-anchor="{"end" if right else "start"}">{esc(label)}</text>')
    out.append("</svg>")
    return "".join(out)


# ----------------------------------------------------------------------------------------------- sections
def _kv(rows: Iterable[tuple[str, str]]) -> str:
    return ('<table class="kv">' + "".join(f"<tr><td>{esc(k)}</td><td class=n>{esc(v)}</td></tr>" for k, v in rows)
            + "</table>")


def _header(report: Report) -> str:
    m = report.model
    lines = report.header_lines()
    nav = "".join(f'<a href="#{a}">{t}</a>' for a, t in (
        ("roofline", "roofline"), ("summary", "summary"), ("ops", "op types"), ("top", "top nodes"),
        ("fusion", "fusion"), ("memory", "memory"), ("warnings", "warnings")))
    return (f"<h1>graphcost — <span class=mono>{esc(m.path or '<in-memory model>')}</span></h1>"
            + "".join(f'<p class="meta">{esc(x)}</p>' for x in lines) + f"<nav>{nav}</nav>")


def _summary(report: Report) -> str:
    t, cov = report.totals, report.coverage
    rows = [("FLOPs", f"{t.flops:,} ({si(t.flops, 'FLOP')})"), ("MACs", f"{t.macs:,}"),
            ("bytes (read + written)", f"{t.bytes:,} ({bytes_(t.bytes)})")]
    if t.dram_bytes != t.bytes:
        rows.append(("  of which DRAM", f"{t.dram_bytes:,} ({bytes_(t.dram_bytes)})"))
    rows += [("intensity", "?" if t.intensity is None else f"{t.intensity:.2f} FLOP/B"),
             ("compute time", seconds(t.compute_time_s)), ("memory time", seconds(t.memory_time_s)),
             ("roofline bound (Σ per node)", f"{seconds(t.roofline_time_s)} ({t.bound}-bound overall)"),
             ("energy floor", f"{t.energy_floor_j * 1e3:.3f} mJ"),
             ("coverage", f"{cov.node_share:.1%} of nodes, {cov.byte_share:.1%} of bytes have a rule"),
             ("unknown nodes", str(t.unknown_nodes))]
    formulas = "".join(f'<p class="note mono">{esc(k)} = {esc(v)}</p>' for k, v in t.formulas.items())
    return f'<h2 id="summary">Summary</h2>{_kv(rows)}{formulas}'


def _ops(report: Report) -> str:
    rows = []
    for r in report.by_op_type():
        name = r.op_type if r.domain == "ai.onnx" else f"{r.domain}::{r.op_type}"
        rows.append(f"<td>{esc(name)}</td>{num_td(r.count, str(r.count))}"
                    f"{num_td(r.flops, 'unknown' if r.flops is None else si(r.flops))}"
                    f"{num_td(r.bytes, bytes_(r.bytes))}{num_td(r.roofline_time_s, seconds(r.roofline_time_s))}"
                    f"{num_td(r.share_time, f'{r.share_time:.1%}')}")
    return ('<h2 id="ops">By op type</h2>'
            + table(("op", "count", "FLOPs", "bytes", "bound", "share"), rows, numeric=range(1, 6)))


def _top(report: Report, top: int) -> str:
    total = report.totals.roofline_time_s
    rows = []
    for n in report.top(top):
        share = (n.roofline_time_s or 0.0) / total if total else 0.0
        rows.append(f"<td class=mono>{esc(n.name)}</td><td>{esc(n.op_type)}</td>{num_td(n.flops, si(n.flops))}"
                    f"{num_td(n.bytes, bytes_(n.bytes))}"
                    f"{num_td(n.intensity, '?' if n.intensity is None else f'{n.intensity:.1f}')}"
                    f"{num_td(n.roofline_time_s, seconds(n.roofline_time_s))}<td>{esc(n.bound or '?')}</td>"
                    f"{num_td(share, f'{share:.1%}')}<td class=mono>{esc(n.fusion_group or '')}</td>")
    return (f'<h2 id="top">Top {top} nodes by bound time</h2>'
            + table(("node", "op", "FLOPs", "bytes", "FLOP/B", "bound", "by", "share", "fusion group"), rows,
                    numeric=(2, 3, 4, 5, 7)))


def _names(names: Sequence[str], limit: int = 6) -> str:
    shown = ", ".join(names[:limit]) + (f", … +{len(names) - limit} more" if len(names) > limit else "")
    return f'<td class=mono title="{esc(chr(10).join(names[:200]))}">{esc(shown)}</td>'


def _fusion(report: Report) -> str:
    f = report.fusion
    if f is None:
        return '<h2 id="fusion">Fusion</h2><p class="note">No fusion section (analysis ran without fusion).</p>'
    t = f.totals
    head = (f'<h2 id="fusion">Fusion ({esc(f.policy)} policy): {t.groups} groups, {len(f.boundaries)} boundaries'
            f'</h2><p class="meta">bytes {esc(bytes_(t.bytes_unfused))} unfused → {esc(bytes_(t.bytes_fused))} fused '
            f"(saves {esc(bytes_(t.bytes_saved))}); bound {esc(seconds(t.time_unfused_s))} → "
            f"{esc(seconds(t.time_fused_s))}</p>")
    groups = sorted(f.groups, key=lambda g: -(g.time_fused_s or 0.0))
    rows = []
    for g in groups[:MAX_GROUP_ROWS]:
        saved = None if g.bytes_unfused is None or g.bytes_fused is None else g.bytes_unfused - g.bytes_fused
        rows.append(f"<td class=mono>{esc(g.id)}</td>{num_td(len(g.nodes), str(len(g.nodes)))}{_names(g.nodes)}"
                    f"<td class=mono>{esc(g.anchor or '-')}</td>{num_td(g.flops, si(g.flops))}"
                    f"{num_td(g.bytes_unfused, bytes_(g.bytes_unfused))}{num_td(g.bytes_fused, bytes_(g.bytes_fused))}"
                    f"{num_td(saved, bytes_(saved))}{num_td(g.time_unfused_s, seconds(g.time_unfused_s))}"
                    f"{num_td(g.time_fused_s, seconds(g.time_fused_s))}")
    more = (f'<p class="note">Showing the {MAX_GROUP_ROWS} slowest of {len(groups):,} groups (fused bound time).</p>'
            if len(groups) > MAX_GROUP_ROWS else "")
    gtable = table(("group", "n", "nodes", "anchor", "FLOPs", "bytes unfused", "bytes fused", "saved",
                    "time unfused", "time fused"), rows, numeric=(1, 4, 5, 6, 7, 8, 9))
    codes: dict[str, list[Any]] = {}
    for b in f.boundaries:
        codes.setdefault(b.code, []).append(b)
    crows = [f"<td class='mono nw'>{esc(c)}</td>{num_td(len(bs), str(len(bs)))}<td>{esc(bs[0].reason)}</td>"
             for c, bs in sorted(codes.items(), key=lambda kv: -len(kv[1]))]
    brows = [f"<td class=mono>{esc(b.producer)}</td><td class=mono>{esc(b.consumer)}</td>"
             f"<td class=mono>{esc(b.tensor)}</td><td>{esc(b.reason)}</td><td class='mono nw'>{esc(b.code)}</td>"
             for b in f.boundaries[:MAX_BOUNDARY_ROWS]]
    bmore = (f'<p class="note">Showing the first {MAX_BOUNDARY_ROWS} of {len(f.boundaries):,} boundaries '
             "(use --format json for all).</p>" if len(f.boundaries) > MAX_BOUNDARY_ROWS else "")
    btable = table(("producer", "consumer", "tensor", "reason", "code"), brows)
    return (head + "<h3>Why edges were not fused</h3>"
            + table(("code", "edges", "reason (first)"), crows, numeric=(1,))
            + f"<details{' open' if len(groups) <= OPEN_ROWS else ''}><summary>Groups ({len(groups):,}, slowest "
            f"first)</summary>{gtable}{more}</details>"
            + f"<details{' open' if len(f.boundaries) <= OPEN_ROWS else ''}><summary>Boundaries "
            f"({len(f.boundaries):,}): producer → consumer, the tensor written and read back, and why</summary>"
            f"{btable}{bmore}</details>")


def _memory(report: Report) -> str:
    m = report.memory
    if m is None:
        return '<h2 id="memory">Memory</h2><p class="note">No memory section (analysis ran without liveness).</p>'
    lines = [f"weights {bytes_(m.parameter_bytes)}; activation peak {bytes_(m.peak_activation_bytes)} at "
             f"{m.peak_node or '-'}",
             f"bounds: largest single step {bytes_(m.min_peak_bytes)} ≤ peak ≤ no reuse "
             f"{bytes_(m.conservative_peak_bytes)}"]
    if m.arena is not None:
        lines.append(f"arena ({m.arena.alignment} B aligned): {bytes_(m.arena.bytes)}")
    if m.reorder is not None and m.reorder.peak_activation_bytes < m.peak_activation_bytes:
        lines.append(f"a memory-aware order ({m.reorder.method}) lowers the peak to "
                     f"{bytes_(m.reorder.peak_activation_bytes)}")
    if m.training is not None:
        tr = m.training
        lines.append(f"training: {bytes_(tr.total)} = weights {bytes_(tr.parameters)} + gradients "
                     f"{bytes_(tr.gradients)} + optimizer state {bytes_(tr.optimizer_state)} + activations "
                     f"{bytes_(tr.activations_peak)}")
    body = "".join(f'<p class="meta">{esc(x)}</p>' for x in lines)
    if m.curve:
        cap = "Live activation bytes after each step of the schedule; the peak is marked."
        if len(m.curve) > MAX_CURVE_POINTS:
            cap += (f" {len(m.curve):,} steps, drawn as the min and max of every "
                    f"{_bucket(len(m.curve), MAX_CURVE_POINTS)} steps.")
        body += f"<figure>{memory_svg(m)}<figcaption>{cap}</figcaption></figure>"
    if m.top_tensors:
        rows = [f"<td class=mono>{esc(x.name)}</td>{num_td(x.bytes, bytes_(x.bytes))}"
                f"<td class=mono>{esc(x.producer or '(graph input)')}</td>" for x in m.top_tensors]
        body += "<h3>Largest tensors live at the peak</h3>" + table(("tensor", "bytes", "producer"), rows, numeric=(1,))
    return f'<h2 id="memory">Memory</h2>{body}'


def _batchnorm(report: Report) -> str:
    b = report.batchnorm
    if b is None or not (b.foldable or b.refused):
        return ""
    items = "".join(f"<li><span class=mono>{esc(r.batchnorm)}</span>: {esc(r.reason)}</li>" for r in b.refused[:50])
    return (f'<h2 id="batchnorm">BatchNorm folding</h2><p class="meta">{len(b.foldable)} foldable, '
            f"{len(b.refused)} refused — saves {esc(bytes_(b.bytes_saved))}, {esc(si(b.flops_saved, 'FLOP'))}, "
            f"{esc(seconds(b.time_saved_s))}</p>" + (f'<ul class="warn">{items}</ul>' if items else ""))


def _warnings(report: Report) -> str:
    ws = report.warnings
    if not ws:
        return '<h2 id="warnings">Warnings</h2><p class="note">None.</p>'
    items = "".join(f"<li>{'<span class=mono>' + esc(w.node) + '</span>: ' if w.node else ''}{esc(w.message)}</li>"
                    for w in ws[:MAX_WARNINGS])
    more = (f'<p class="note">… {len(ws) - MAX_WARNINGS:,} more (use --format json for all).</p>'
            if len(ws) > MAX_WARNINGS else "")
    return f'<h2 id="warnings">Warnings ({len(ws)})</h2><ul class="warn">{items}</ul>{more}'


def _whatif(report: Report) -> str:
    w = getattr(report, "whatif", None)
    if w is None:
        return ""
    return whatif_text.render_html_section(w)  # what-ifs with the bound-vs-dim chart


def _llm(report: Report) -> str:
    s = getattr(report, "llm", None)
    if s is None:
        return ""
    return llm_text.render_html_section(s)  # the LLM view with the tokens/s-vs-context chart


def render_html(report: Report, *, top: int = 20) -> str:
    """The report as one self-contained HTML page (no network fetches; open it from disk)."""
    body = "".join((_header(report), _roofline_section(report), _summary(report), _ops(report), _top(report, top),
                    _fusion(report), _memory(report), _batchnorm(report), _whatif(report), _llm(report),
                    _warnings(report),
                    '<p class="note">Generated by graphcost. This file is self-contained: it loads nothing from the '
                    "network.</p>"))
    return page(f"graphcost — {report.model.path or 'model'}", body)


__all__ = ["MAX_POINTS", "Point", "esc", "num_td", "page", "render_html", "roofline_svg", "sort_key", "table"]
