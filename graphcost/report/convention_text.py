"""Another tool's FLOP count of a report as text: ``analyze --as TOOL`` (the totals) and ``explain --against
TOOL`` (per op type, both counts and the rule between them; the rows add up to both totals exactly). The rules
are ``graphcost/conventions.py``'s; an unknown TOOL is that module's ``ValueError``."""

from __future__ import annotations

import json

from graphcost.conventions import as_convention
from graphcost.report.escape import terminal_text
from graphcost.report.model import Report


def totals(report: Report, name: str, fmt: str = "text") -> str:
    """``analyze --as NAME``: the tool's total (json: its per-op-type rows too)."""
    r = as_convention(report, name)
    if fmt == "json":
        return json.dumps(r.to_dict(), indent=2) + "\n"
    return (f"{r.convention}: {r.total:,} {r.unit}s"
            + (f" ({r.unknown_nodes} nodes unknown, not added)" if r.unknown_nodes else "")
            + f"\ngraphcost: {report.totals.flops:,} FLOPs, {report.totals.macs:,} MACs\n"
            + "".join(f"note: {terminal_text(n)}\n" for n in r.notes))


def table(report: Report, name: str) -> str:
    """``explain --against NAME``: per op type, graphcost's FLOPs, the tool's count and the rule."""
    r = as_convention(report, name)
    rows = r.rows()
    width = max([len("op type")] + [len(terminal_text(x.op_type)) for x in rows])
    lines = [f"graphcost FLOPs (a MAC is 2) against {r.convention} {r.unit}s",
             *(f"note: {terminal_text(n)}" for n in r.notes),
             f"{'op type':<{width}}  {'nodes':>5}  {'graphcost':>17}  {r.convention:>17}  rule"]
    for x in rows:
        rule = "; ".join(x.rules)
        lines.append(f"{terminal_text(x.op_type):<{width}}  {x.count:>5}  {x.graphcost_flops:>17,}  {x.tool:>17,}  "
                     f"{rule}")
    lines.append(f"{'total':<{width}}  {sum(x.count for x in rows):>5}  {r.graphcost_flops:>17,}  {r.total:>17,}")
    return "\n".join(lines) + "\n"
