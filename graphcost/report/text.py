"""Text: summary, top nodes by bound time, per-op-type table, warnings (rich tables, plain text out).

Model- and file-derived text (path, producer, names, op types, dims, hardware name, warnings) reaches the
console only through ``_t`` (``report/escape.terminal_text``: control characters shown as escapes), and the
console has markup off, so a name such as ``[bold]`` prints as it is.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from graphcost.report.escape import terminal_text as _t

if TYPE_CHECKING:  # types only: report/model.py calls this module (Report.to_text), so it is never imported here
    from graphcost.report.model import Report
from graphcost.report.units import bytes_, seconds, si

MAX_WARNINGS = 20


def render_text(report: Report, *, top: int = 10, width: int = 120) -> str:
    buf = io.StringIO()
    con = Console(file=buf, width=width, force_terminal=False, color_system=None, highlight=False,
                  markup=False, emoji=False)
    m, t = report.model, report.totals
    con.print(_t(f"graphcost — {m.path or '<in-memory model>'}"))
    for line in report.header_lines(aligned=True):
        con.print(_t(f"  {line}"))
    con.print()
    summary = Table(title="Summary", show_header=False, box=None, pad_edge=False)
    summary.add_column(justify="left")
    summary.add_column(justify="right")
    summary.add_row("FLOPs", f"{t.flops:,} ({si(t.flops, 'FLOP')})")
    summary.add_row("MACs", f"{t.macs:,}")
    summary.add_row("bytes (read + written)", f"{t.bytes:,} ({bytes_(t.bytes)})")
    if t.dram_bytes != t.bytes:
        summary.add_row("  of which DRAM", f"{t.dram_bytes:,} ({bytes_(t.dram_bytes)})")
    summary.add_row("intensity", "?" if t.intensity is None else f"{t.intensity:.2f} FLOP/B")
    summary.add_row("compute time", seconds(t.compute_time_s))
    summary.add_row("memory time", seconds(t.memory_time_s))
    summary.add_row("roofline bound (Σ per node)", f"{seconds(t.roofline_time_s)} ({t.bound}-bound overall)")
    summary.add_row("energy floor", f"{t.energy_floor_j * 1e3:.3f} mJ")
    cov = report.coverage
    summary.add_row("coverage", f"{cov.node_share:.1%} of nodes, {cov.byte_share:.1%} of bytes have a rule")
    summary.add_row("unknown nodes", str(t.unknown_nodes))
    con.print(summary)
    for key, formula in t.formulas.items():
        con.print(_t(f"  {key} = {formula}"))
    con.print()

    tops = Table(title=f"Top {top} nodes by bound time")
    for col, j in (("node", "left"), ("op", "left"), ("FLOPs", "right"), ("bytes", "right"),
                   ("FLOP/B", "right"), ("bound", "right"), ("by", "left"), ("share", "right")):
        tops.add_column(col, justify=j)  # type: ignore[arg-type]
    for n in report.top(top):
        share = (n.roofline_time_s or 0.0) / t.roofline_time_s if t.roofline_time_s else 0.0
        tops.add_row(_short(_t(n.name)), _t(n.op_type), si(n.flops), bytes_(n.bytes),
                     "?" if n.intensity is None else f"{n.intensity:.1f}", seconds(n.roofline_time_s),
                     n.bound or "?", f"{share:.1%}")
    con.print(tops)
    con.print()

    ops = Table(title="By op type")
    for col, j in (("op", "left"), ("count", "right"), ("FLOPs", "right"), ("bytes", "right"),
                   ("bound", "right"), ("share", "right")):
        ops.add_column(col, justify=j)  # type: ignore[arg-type]
    for r in report.by_op_type():
        name = r.op_type if r.domain == "ai.onnx" else f"{r.domain}::{r.op_type}"
        ops.add_row(_t(name), str(r.count), "unknown" if r.flops is None else si(r.flops), bytes_(r.bytes),
                    seconds(r.roofline_time_s), f"{r.share_time:.1%}")
    con.print(ops)
    _passes(con, report)
    if report.warnings:
        con.print()
        con.print(f"Warnings ({len(report.warnings)}):")
        for w in report.warnings[:MAX_WARNINGS]:
            con.print(_t(f"  - {w.node + ': ' if w.node else ''}{w.message}"))
        if len(report.warnings) > MAX_WARNINGS:
            con.print(f"  … {len(report.warnings) - MAX_WARNINGS} more (use --format json for all)")
    return buf.getvalue()


def _passes(con: Console, report: Report) -> None:
    """One block per later pass: fusion, memory, batchnorm folding."""
    f, m, b = report.fusion, report.memory, report.batchnorm
    if f is not None:
        t = f.totals
        con.print()
        con.print(f"Fusion ({_t(f.policy)} policy): {t.groups} groups, {len(f.boundaries)} boundaries")
        con.print(f"  bytes {bytes_(t.bytes_unfused)} unfused → {bytes_(t.bytes_fused)} fused "
                  f"(saves {bytes_(t.bytes_saved)}); bound {seconds(t.time_unfused_s)} → {seconds(t.time_fused_s)}")
    if m is not None:
        con.print()
        con.print(f"Memory: weights {bytes_(m.parameter_bytes)}; activation peak {bytes_(m.peak_activation_bytes)}"
                  f" at {_t(m.peak_node or '-')}")
        con.print(f"  bounds: largest single step {bytes_(m.min_peak_bytes)} ≤ peak ≤ no reuse "
                  f"{bytes_(m.conservative_peak_bytes)}")
        if m.arena is not None:
            con.print(f"  arena ({m.arena.alignment} B aligned): {bytes_(m.arena.bytes)}")
        if m.reorder is not None and m.reorder.peak_activation_bytes < m.peak_activation_bytes:
            con.print(f"  a memory-aware order ({_t(m.reorder.method)}) lowers the peak to "
                      f"{bytes_(m.reorder.peak_activation_bytes)}")
        if m.top_tensors:
            top = ", ".join(f"{x.name} {bytes_(x.bytes)}" for x in m.top_tensors[:5])
            con.print(_t(f"  largest at the peak: {top}"))
        if m.training is not None:
            tr = m.training
            con.print(f"  training: {bytes_(tr.total)} = weights {bytes_(tr.parameters)} + gradients "
                      f"{bytes_(tr.gradients)} + optimizer state {bytes_(tr.optimizer_state)} + activations "
                      f"{bytes_(tr.activations_peak)}")
    if b is not None and (b.foldable or b.refused):
        con.print()
        con.print(f"BatchNorm folding: {len(b.foldable)} foldable, {len(b.refused)} refused — saves "
                  f"{bytes_(b.bytes_saved)}, {si(b.flops_saved, 'FLOP')}, {seconds(b.time_saved_s)}")
        for r in b.refused[:10]:
            con.print(_t(f"  refused {r.batchnorm}: {r.reason}"))


def _short(name: str, limit: int = 48) -> str:
    return name if len(name) <= limit else "…" + name[-(limit - 1):]
