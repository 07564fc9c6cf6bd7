"""The LLM view as plain text: weights and KV cache, the prefill floor, the decode tokens/s sweep, the batch at
which decode turns compute bound, and whether it all fits. Every line passes ``terminal_text``."""

from __future__ import annotations

from typing import Any

from graphcost.report.escape import terminal_text
from graphcost.report.html_base import esc
from graphcost.report.units import bytes_, seconds, si


def render_llm(section: Any, *, model: str = "", hardware: str = "") -> str:
    """``section``: a ``graphcost.llm.LLMSection``."""
    s = section
    d = s.dims
    lines = [f"graphcost llm: {model}" if model else "graphcost llm",
             f"hardware {hardware}: DRAM {si(s.memory_bandwidth, 'B/s')} (at {s.bandwidth_efficiency:.0%} "
             f"efficiency), peak {si(s.peak_flops, 'FLOP/s')} ({s.peak_dtype})",
             f"dims     batch={d.batch or '-'} sequence={d.sequence or '-'} past={d.past} total={d.total or '-'}"
             + "".join(f" {k}={v} (from {w})" for k, (v, w) in d.cache.items())
             + (f" (others at their static value: {', '.join(d.other)})" if d.other else ""),
             f"weights  {s.weights_bytes:,} B ({bytes_(s.weights_bytes)})"
             + (f", of which block scales / zero points {s.quantization_bytes:,} B" if s.quantization_bytes else ""),
             f"KV cache {s.kv_cache_bytes_per_token:,} B per token ({len(s.kv_inputs)} past inputs); a decode "
             f"step's bytes grow {s.kv_traffic_bytes_per_token:,.0f} B per cached token as costed",
             ""]
    p = s.prefill
    lines += [f"prefill  {p.tokens} tokens × batch {p.batch}: {si(p.flops, 'FLOP')}, {bytes_(p.bytes)}, "
              f"{p.bound} bound, {seconds(p.time_s)} ({p.tokens_per_s:,.0f} tokens/s)", "",
              "decode   context   bytes/step     FLOPs/step     bound     time/token    tokens/s ceiling"]
    for x in s.decode:
        lines.append(f"         {x.tokens:>7}   {bytes_(x.bytes):>11}   {si(x.flops, 'FLOP'):>12}   {x.bound:<8}"
                     f"  {seconds(x.time_s):>11}   {x.tokens_per_s:,.1f}")
    cb = s.compute_bound_batch
    lines.append("")
    lines.append(f"decode turns compute bound at batch {cb} (context {s.decode[0].tokens})" if cb is not None
                 else "decode stays memory bound at every batch searched")
    m = s.memory
    verdict = "capacity unknown (pass --memory-bytes)" if m.fits is None else (
        f"{'fits' if m.fits else 'DOES NOT FIT'} in {bytes_(m.capacity_bytes)}")
    lines.append(f"memory   weights {bytes_(m.weights_bytes)} + KV at {m.context} tokens {bytes_(m.kv_cache_bytes)} "
                 f"+ activation peak {bytes_(m.activation_peak_bytes)} = {bytes_(m.needed_bytes)}: {verdict}")
    return "\n".join(terminal_text(line) for line in lines) + "\n"


# ------------------------------------------------------------------------------------------------------- HTML
def tokens_svg(section: Any, width: int = 640, height: int = 260) -> str:
    """Decode tokens/s ceiling against context (log-scaled context axis when the sweep spans a decade)."""
    import math

    pts = [(int(d.tokens), float(d.tokens_per_s)) for d in section.decode if math.isfinite(d.tokens_per_s)]
    if not pts:
        return ""
    ml, mr, mt, mb = (70, 20, 16, 44)
    pw, ph = width - ml - mr, height - mt - mb
    xs = [max(x, 1) for x, _ in pts]
    log = len(xs) > 1 and max(xs) / min(xs) >= 10
    lo, hi = (math.log10(min(xs)), math.log10(max(xs))) if log else (min(xs), max(xs))
    span = (hi - lo) or 1.0
    ytop = max(y for _, y in pts) * 1.15 or 1.0

    def X(x: float) -> float:
        v = math.log10(max(x, 1)) if log else x
        return ml + (v - lo) / span * pw if len(pts) > 1 else ml + pw / 2

    def Y(y: float) -> float:
        return mt + ph - y / ytop * ph

    out = [f'<svg class="tokens" role="img" viewBox="0 0 {width} {height}" width="{width}" height="{height}">'
           f'<rect x="{ml}" y="{mt}" width="{pw}" height="{ph}" fill="#fbfcfe" stroke="#c9ced8"/>']
    for i in range(5):
        y = ytop * i / 4
        out.append(f'<line x1="{ml}" y1="{Y(y):.1f}" x2="{ml + pw}" y2="{Y(y):.1f}" stroke="#eceef2"/>'
                   f'<text x="{ml - 6}" y="{Y(y) + 4:.1f}" font-size="11" text-anchor="end">{y:.3g}</text>')
    for x, _ in pts:
        out.append(f'<text x="{X(x):.1f}" y="{mt + ph + 16}" font-size="11" text-anchor="middle">{x}</text>')
    out.append(f'<text x="{ml + pw / 2}" y="{height - 6}" font-size="12" text-anchor="middle">context (tokens in the '
               f'KV cache){" — log scale" if log else ""}</text><text transform="translate(14 {mt + ph / 2}) '
               f'rotate(-90)" font-size="12" text-anchor="middle">tokens/s ceiling</text>')
    line = " ".join(f"{X(x):.1f},{Y(y):.1f}" for x, y in pts)
    out.append(f'<polyline points="{line}" fill="none" stroke="#1f5fbf" stroke-width="1.5"/>')
    for x, y in pts:
        label = f"context {x}: {y:,.1f} tokens/s"
        out.append(f'<circle cx="{X(x):.1f}" cy="{Y(y):.1f}" r="4" fill="#1f5fbf"><title>{esc(label)}</title>'
                   "</circle>")
    out.append("</svg>")
    return "".join(out)


def render_html_section(section: Any) -> str:
    """The LLM view for the HTML report: the text summary as a table and the tokens/s-vs-context chart."""
    s = section
    rows = [("weights", f"{s.weights_bytes:,} B ({bytes_(s.weights_bytes)})"),
            ("of which block scales / zero points", f"{s.quantization_bytes:,} B"),
            ("KV cache per token", f"{s.kv_cache_bytes_per_token:,} B"),
            ("prefill", f"{s.prefill.tokens} tokens: {seconds(s.prefill.time_s)}, {s.prefill.bound} bound"),
            ("decode compute bound from batch", "never (searched)" if s.compute_bound_batch is None
             else str(s.compute_bound_batch))]
    rows += [(f"decode at context {d.tokens}", f"{d.tokens_per_s:,.1f} tokens/s ({seconds(d.time_s)}/token, "
              f"{d.bound} bound)") for d in s.decode]
    table = ('<table class="kv">' + "".join(f"<tr><td>{esc(k)}</td><td class=n>{esc(v)}</td></tr>" for k, v in rows)
             + "</table>")
    cap = (f"Decode tokens/s ceiling per context at {s.bandwidth_efficiency:.0%} of peak bandwidth "
           f"({si(s.memory_bandwidth, 'B/s')}); batch {s.decode[0].batch}.")
    return (f'<h2 id="llm">LLM: prefill and decode</h2>{table}<figure>{tokens_svg(s)}'
            f"<figcaption>{esc(cap)}</figcaption></figure>")
