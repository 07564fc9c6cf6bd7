"""HTML for an audit: one sortable row per model, each with a mini roofline of the model's single point.

Rows are ``results.jsonl`` rows (``graphcost.audit/1``, docs/audit.md), read tolerantly: a missing key or
a value of the wrong type shows as "?" rather than failing the page, since the row schema may grow.

Roofs per row, first found: ``row["hardware"]`` or ``row["analysis"]["hardware"]`` (the report's
``hardware`` JSON: ``peak_flops``, ``memory_bandwidth``), else the ``hardware`` argument (the audit's
device), else roofs inferred from the row's own totals (FLOPs / compute time, DRAM bytes / memory time),
which is exact for a single-dtype model without on-chip memory and says so in the tooltip.
The model's point is (FLOPs / bytes, FLOPs / bound time), bound time being the Σ of per-node bounds.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

from graphcost.hardware.spec import HardwareSpec
from graphcost.report.html import Point, esc, num_td, page, roofline_svg, sort_key, table
from graphcost.report.units import bytes_, seconds, si

INFERRED = "effective"
"""The one compute roof's name when roofs are inferred from a row's totals."""

Roofs = tuple[Mapping[str, float], float, str]
"""(peak FLOP/s per dtype, DRAM bytes/s, where they came from)."""


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _get(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, Mapping):
            return None
        d = d.get(k)
    return d


def _roofs_from(hw: Any) -> Roofs | None:
    if isinstance(hw, HardwareSpec):
        return dict(hw.peak_flops), hw.memory_bandwidth, hw.name
    peaks, bw = _get(hw, "peak_flops"), _num(_get(hw, "memory_bandwidth"))
    if not isinstance(peaks, Mapping) or not bw or bw <= 0:
        return None
    clean = {str(k): v for k, v in ((k, _num(v)) for k, v in peaks.items()) if v and v > 0}
    return (clean, bw, str(_get(hw, "name") or "device")) if clean else None


def _roofs(row: Mapping[str, Any], default: Roofs | None) -> Roofs | None:
    for hw in (row.get("hardware"), _get(row, "analysis", "hardware")):
        found = _roofs_from(hw)
        if found:
            return found
    if default:
        return default
    t = _get(row, "analysis", "totals")
    flops, tc = _num(_get(t, "flops")), _num(_get(t, "compute_time_s"))
    moved, tm = _num(_get(t, "dram_bytes")) or _num(_get(t, "bytes")), _num(_get(t, "memory_time_s"))
    if flops and tc and moved and tm and min(flops, tc, moved, tm) > 0:
        return {INFERRED: flops / tc}, moved / tm, "roofs inferred from the model's totals"
    return None


def _mini(row: Mapping[str, Any], roofs: Roofs | None) -> tuple[str, float | None]:
    """The mini roofline cell's SVG (or a dash) and its sort key (the model's intensity)."""
    t = _get(row, "analysis", "totals")
    flops, moved, time_s = _num(_get(t, "flops")), _num(_get(t, "bytes")), _num(_get(t, "roofline_time_s"))
    if roofs is None or not flops or not moved or not time_s or min(flops, moved, time_s) <= 0:
        return "—", None
    peaks, bw, source = roofs
    bound = str(_get(t, "bound") or "memory")
    label = (f"{row.get('path', '?')}: {si(flops, 'FLOP')}, {bytes_(moved)}, {flops / moved:.3g} FLOP/B, "
             f"{seconds(time_s)} {bound}-bound on {source}")
    svg = roofline_svg(peaks, bw, [Point(flops / moved, flops / time_s, time_s, label, bound)],
                       width=170, height=96, mini=True, title=label)
    roof = min(max(peaks.values()), bw * flops / moved)  # the attainable roof at the model's intensity
    note = f"{flops / moved:.3g} FLOP/B · {si(flops / time_s, 'FLOP/s')} ({flops / time_s / roof:.0%} of roof)"
    return f'{svg}<div class="note nw">{esc(note)}</div>', flops / moved


def _display_paths(rows: Sequence[Mapping[str, Any]]) -> tuple[str, list[str]]:
    """The folder all paths share, and each path below it (the full path stays in the cell's title)."""
    paths = [str(r.get("path") or "?") for r in rows]
    try:
        root = os.path.commonpath(paths) if len(paths) > 1 else os.path.dirname(paths[0]) if paths else ""
    except ValueError:
        root = ""
    if not root or root == os.sep:
        return "", paths
    return root, [os.path.relpath(p, root) if p != "?" else p for p in paths]


def _row(row: Mapping[str, Any], shown: str, roofs: Roofs | None) -> str:
    status = str(row.get("status") or "?")
    reason = row.get("reason")
    a = row.get("analysis")
    t = _get(a, "totals")
    flops, moved, time_s = _num(_get(t, "flops")), _num(_get(t, "bytes")), _num(_get(t, "roofline_time_s"))
    peak = _num(_get(a, "memory", "peak_activation_bytes"))
    unknown = _num(_get(t, "unknown_nodes"))
    ops = _get(a, "no_rule_ops") or _get(a, "coverage", "unknown_ops") or {}
    op_text = ", ".join(f"{k} ×{v}" for k, v in sorted(ops.items())) if isinstance(ops, Mapping) else ""
    cls = "bad" if status != "ok" else "partial" if reason else "ok"
    svg, key = _mini(row, roofs)
    unknown_text = "?" if unknown is None else f"{int(unknown)}" + (f" ({op_text})" if op_text else "")
    return (f'<td class=mono title="{esc(row.get("path") or "?")}">{esc(shown)}</td>'
            f'<td class="{cls}">{esc(status)}</td><td>{esc(reason or "")}</td>'
            f"{num_td(flops, si(flops))}{num_td(moved, bytes_(moved))}{num_td(time_s, seconds(time_s))}"
            f'{num_td(peak, bytes_(peak))}{num_td(unknown, unknown_text)}<td data-v="{sort_key(key)}">{svg}</td>')


def render_audit_html(rows: Sequence[Mapping[str, Any]], *, hardware: HardwareSpec | Mapping[str, Any] | None = None,
                      title: str = "graphcost audit") -> str:
    """One self-contained page for an audit's rows; ``hardware`` is the audit's device, used for rows that
    do not carry their own roofs. Click a column header to sort."""
    rows = [r for r in rows if isinstance(r, Mapping)]
    default = _roofs_from(hardware) if hardware is not None else None
    root, shown = _display_paths(rows)
    counts: dict[str, int] = {}
    for r in rows:
        counts[str(r.get("status") or "?")] = counts.get(str(r.get("status") or "?"), 0) + 1
    partial = sum(1 for r in rows if r.get("status") == "ok" and r.get("reason"))
    status_line = ", ".join(f"{n} {s}" for s, n in sorted(counts.items(), key=lambda kv: (kv[0] != "ok", kv[0])))
    head = [f"{len(rows)} models: {status_line or 'none'}" + (f" ({partial} partly costed)" if partial else "")]
    if root:
        head.append(f"paths below {root}")
    if default:
        peaks = ", ".join(f"{k} {si(v, 'FLOP/s')}" for k, v in default[0].items())
        head.append(f"hardware {default[2]}: {peaks}; DRAM {si(default[1], 'B/s')}")
    roofs = [_roofs(r, default) for r in rows]
    inferred = sum(1 for x in roofs if x is not None and x[0].keys() == {INFERRED})
    if inferred:
        head.append(f"rows without device roofs: {inferred} (their mini rooflines use roofs inferred from the "
                    "row's totals: FLOPs / compute time, DRAM bytes / memory time)")
    body_rows = [_row(r, s, x) for r, s, x in zip(rows, shown, roofs, strict=True)]
    body = (f"<h1>{esc(title)}</h1>" + "".join(f'<p class="meta">{esc(x)}</p>' for x in head)
            + '<p class="note">Click a column header to sort. Each mini roofline shows the model as one point '
            "(FLOPs / bytes, FLOPs / bound time) under its device's compute and DRAM roofs, ridge points in red; "
            "hover it for the numbers.</p>"
            + table(("model", "status", "reason", "FLOPs", "bytes", "bound time", "peak memory", "unknown nodes",
                     "roofline"), body_rows, numeric=(3, 4, 5, 6, 7), cls="audit")
            + '<p class="note">Generated by graphcost. This file is self-contained: it loads nothing from the '
            "network.</p>")
    return page(title, body)


__all__ = ["render_audit_html"]
