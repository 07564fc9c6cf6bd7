"""The zoo at a glance: counts, totals, the models to look at first, and the cost rules worth writing next.

Built from rows only (never from timings), so it is as deterministic as they are; ``summary.json`` is
this dict, and the text rendering is what ``graphcost audit`` prints at the end. In that text every path,
reason and op name passes ``terminal_text`` (``report/escape.py``): control characters, bidi overrides and
the surrogates of non-UTF-8 file names are shown as escapes, never sent to the terminal.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from graphcost.audit.rows import STATUSES
from graphcost.report.escape import terminal_text
from graphcost.report.units import bytes_, seconds, si

SUMMARY_SCHEMA = "graphcost.audit-summary/1"
TOTAL_KEYS = ("flops", "macs", "bytes", "dram_bytes", "roofline_time_s", "energy_floor_j", "unknown_nodes")


def _top(entries: list[tuple[str, Any]], n: int) -> list[dict[str, Any]]:
    entries = [e for e in entries if e[1] is not None and e[1] > 0]
    entries.sort(key=lambda e: (-e[1], e[0]))
    return [{"path": p, "value": v} for p, v in entries[:n]]


def summarize(rows: Iterable[Mapping[str, Any]], top: int = 10) -> dict[str, Any]:
    rows = sorted(rows, key=lambda r: r["path"])
    counts = dict.fromkeys(STATUSES, 0)
    totals: dict[str, float] = dict.fromkeys(TOTAL_KEYS, 0)
    params = 0
    by_time, by_mem, by_unknown = [], [], []
    no_rule: dict[str, dict[str, int]] = {}
    failures = []
    partial = 0
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
        a = r.get("analysis")
        if r["status"] != "ok" or not a:
            failures.append({"path": r["path"], "status": r["status"], "reason": r.get("reason")})
            continue
        t = a["totals"]
        for k in TOTAL_KEYS:
            totals[k] += t.get(k) or 0
        params += a["model"].get("parameter_count") or 0
        partial += bool(t.get("unknown_nodes"))
        by_time.append((r["path"], t.get("roofline_time_s")))
        by_mem.append((r["path"], (a.get("memory") or {}).get("peak_activation_bytes")))
        by_unknown.append((r["path"], t.get("unknown_nodes")))
        for op, n in a.get("no_rule_ops", {}).items():
            entry = no_rule.setdefault(op, {"models": 0, "nodes": 0})
            entry["models"] += 1
            entry["nodes"] += n
    ops: list[dict[str, Any]] = [{"op": op, **v} for op, v in no_rule.items()]
    ops.sort(key=lambda e: (-e["models"], -e["nodes"], e["op"]))
    return {
        "schema": SUMMARY_SCHEMA,
        "models": len(rows),
        "ok": counts["ok"],
        "failed": len(rows) - counts["ok"] - counts.get("skipped", 0),
        "skipped": counts.get("skipped", 0),  # not a model (a FIFO, a device, a folder named .onnx): not a failure
        "partial": partial,
        "status_counts": counts,
        "totals": {**totals, "parameter_count": params},
        "top_by_roofline_time_s": _top(by_time, top),
        "top_by_peak_activation_bytes": _top(by_mem, top),
        "top_by_unknown_nodes": _top(by_unknown, top),
        "ops_without_rules": ops,
        "failures": failures,
    }


def _show(text: str) -> str:
    """A path, reason or op name for a terminal: control characters and the surrogates of bytes that are not
    UTF-8 (kept by the OS in file names) shown as escapes."""
    return terminal_text(text)


def render_text(s: Mapping[str, Any], *, wall_s: float | None = None, analyze_s: float | None = None,
                analyzed: int | None = None) -> str:
    lines = []
    counts = ", ".join(f"{k} {v}" for k, v in s["status_counts"].items() if v)
    skipped = s.get("skipped", 0)
    lines.append(f"Audit: {s['models']} models — {s['ok']} ok ({s['partial']} partly costed), "
                 f"{s['failed']} failed" + (f", {skipped} skipped" if skipped else "")
                 + (f" [{counts}]" if s["failed"] or skipped else ""))
    if wall_s is not None and analyze_s is not None and analyzed is not None:
        rate = f", {analyzed / analyze_s:.2f} models/s" if analyze_s > 0 and analyzed else ""
        lines.append(f"  analyzed {analyzed} this run in {analyze_s:.2f} s{rate} "
                     f"(audit {wall_s:.2f} s with discovery, hashing, start-up, summary)")
    t = s["totals"]
    lines.append(f"  totals over ok models: {si(t['flops'], 'FLOP')}, {si(t['macs'], 'MAC')}, "
                 f"{bytes_(t['bytes'])} moved, bound time {seconds(t['roofline_time_s'])}, "
                 f"{t['parameter_count']:,} parameters, {int(t['unknown_nodes'])} nodes without cost")
    for title, key, fmt in (("by bound time", "top_by_roofline_time_s", seconds),
                            ("by peak activation memory", "top_by_peak_activation_bytes", bytes_),
                            ("by nodes without cost", "top_by_unknown_nodes", lambda v: f"{int(v)} nodes")):
        if s[key]:
            lines.append(f"\nTop models {title}:")
            lines.extend(f"  {fmt(e['value']):>12}  {_show(e['path'])}" for e in s[key])
    if s["ops_without_rules"]:
        lines.append("\nOps without cost rules (rules worth writing next):")
        lines.append(f"  {'models':>6} {'nodes':>7}  op")
        lines.extend(f"  {e['models']:>6} {e['nodes']:>7}  {_show(e['op'])}" for e in s["ops_without_rules"])
    if s["failures"]:
        lines.append("\nFailed models:")
        lines.extend(f"  {e['status']:<8} {_show(e['path'])}: {_show(str(e['reason']))}" for e in s["failures"])
    return "\n".join(lines) + "\n"
