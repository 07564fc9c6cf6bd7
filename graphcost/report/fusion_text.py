"""``graphcost fusion``'s text report: the ideal fusion groups with their bytes and times, the boundaries by
reason, and with ``--against ort`` onnxruntime's kernels group by group.

Node names are shown whole, as the model spells them, escaped (``report/escape.py``; never trimmed or rewritten,
they are each table's last column), and every line again on the way out, so no control character from the model
reaches the terminal.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from graphcost.binding import DEFAULT_DIM_VALUE
from graphcost.hardware.spec import HardwareSpec
from graphcost.measure.fusion_ort import STATUS_TEXT, OrtComparison
from graphcost.ops import Kind, lookup
from graphcost.passes.fusion import CODE_TEXT, FusionSection
from graphcost.report.escape import terminal_text
from graphcost.report.units import bytes_, seconds


def _name(name: str) -> str:
    """A node name as the model spells it, whole (``/h.0/mlp/c_fc/Gemm``), control characters shown as escapes
    (``report/escape.py``): never trimmed or rewritten, so it can be searched for in the model. Names are the
    last column of a table, so no width cuts them."""
    return terminal_text(name)


def _label(nodes: tuple[str, ...], infos: Mapping[str, Any]) -> str:
    """The group's first kernel node, whole, and how many kernel nodes more: ``/h.0/mlp/c_fc/Gemm (+2)``."""
    shown = [n for n in nodes if infos[n].kernel] or list(nodes)
    return _name(shown[0]) + (f" (+{len(shown) - 1})" if len(shown) > 1 else "")


def _cell(text: str, width: int) -> str:
    text = terminal_text(text)
    return text if len(text) <= width else text[:width - 1] + "…"


def render_text(model: str, hw: HardwareSpec, section: FusionSection, comparison: OrtComparison | None,
                defaulted: list[str]) -> str:
    """``graphcost fusion``'s text: the groups, the boundaries by reason and the totals; with a comparison, ORT's
    kernels group by group and where it fused less than ideal."""
    infos = section.result.infos
    t = section.totals
    lines = [f"graphcost fusion — {model}",
             f"  policy {section.policy} · {t.groups} groups from {len(infos)} nodes · "
             f"{len(section.boundaries)} boundaries",
             f"  hardware {hw.name}: DRAM {hw.memory_bandwidth / 1e9:.2f} GB/s; a kernel's time is "
             "max(FLOPs / peak, bytes at the levels they can come from) (passes/roofline.kernel_bound)"]
    if defaulted:
        lines.append(f"  unbound dims set to {DEFAULT_DIM_VALUE}: {', '.join(defaulted)} (bind them with --dim "
                     "NAME=VALUE)")
    lines.append("")
    if comparison is None:
        lines.append(f"{'group':<6} {'unfused':>11} {'fused':>11} {'saved':>11} {'time unfused':>13} "
                     f"{'time fused':>11}  nodes")
        for g in section.groups:
            if not any(infos[n].kernel for n in g.nodes):
                continue
            lines.append(f"{g.id:<6} {bytes_(g.bytes_unfused):>11} {bytes_(g.bytes_fused):>11} "
                         f"{bytes_(g.bytes_saved):>11} {seconds(g.time_unfused_s):>13} {seconds(g.time_fused_s):>11}  "
                         f"{_label(g.nodes, infos)}")
        lines += ["", "Boundaries by reason"]
        counts = Counter(b.code for b in section.boundaries)
        for code, n in counts.most_common():
            example = next(b for b in section.boundaries if b.code == code)
            lines.append(f"  {CODE_TEXT.get(code, code):<34} {n:>5}   e.g. {_name(example.producer)} → "
                         f"{_name(example.consumer)}: {_cell(example.reason, 160)}")
        lines += ["", "Totals",
                  f"  bytes   unfused {bytes_(t.bytes_unfused)} · fused {bytes_(t.bytes_fused)} · "
                  f"saved {bytes_(t.bytes_saved)}",
                  f"  time    unfused {seconds(t.time_unfused_s)} · fused {seconds(t.time_fused_s)} · "
                  f"saved {seconds(t.time_saved_s)}"]
        if t.unknown_groups:
            lines.append(f"  {t.unknown_groups} group(s) have unknown counts and are left out of the byte totals")
        return _joined(lines)

    c = comparison
    ct = c.totals
    lines[0] += f" against onnxruntime {c.version} (level {c.level}, CPU EP)"
    if c.level == "all":
        lines.insert(1, "  (level all includes NCHWc layouts chosen for this machine's CPU)")
    width = max(len(t) for t in STATUS_TEXT.values())
    lines.append(f"{'group':<6} {'ideal':>10} {'ORT':>10} {'left':>10} {'µs left':>8}  {'status':<{width}}  "
                 "ideal group ⇐ ORT kernels")
    hidden = 0
    for g in c.groups:
        if g.status == "no kernel":
            hidden += 1
            continue
        kernels = ", ".join(dict.fromkeys(k.label for k in _kernels(g.kernels))) or "—"
        us = "?" if g.time_left_s is None else f"{g.time_left_s * 1e6:.1f}".replace("-0.0", "0.0")
        lines.append(f"{g.id:<6} {bytes_(g.bytes_ideal):>10} {bytes_(g.bytes_ort):>10} {_signed(g.bytes_left):>10} "
                     f"{us:>8}  {STATUS_TEXT[g.status]:<{width}}  {_label(g.nodes, infos)} ⇐ {kernels}")
    if hidden:
        lines.append(f"({hidden} groups of views and constants only, no kernel, are not shown)")
    worse = sorted((g for g in c.groups if g.status in ("less", "less+more") and g.bytes_left),
                   key=lambda g: -(g.bytes_left or 0))
    if worse:
        lines += ["", "Where ORT fused less than ideal (largest first)"]
        for g in worse[:10]:
            kernels = ", ".join(k.label for k in _kernels(g.kernels))
            lines.append(f"  {g.id} {_label(g.nodes, infos)}: ORT runs {_cell(kernels, 110)} — "
                         f"{bytes_(g.bytes_left)}, {seconds(g.time_left_s)} left on the table")
        if len(worse) > 10:
            lines.append(f"  … and {len(worse) - 10} more groups")
    folded = [g for g in c.groups if g.status == "folded"]
    lines += ["", "Totals",
              f"  bytes   unfused {bytes_(ct.bytes_unfused)} · ideal {bytes_(ct.bytes_ideal)} · "
              f"ORT {bytes_(ct.bytes_ort)} · left {_signed(ct.bytes_left)} (= Σ of the per-group left)",
              f"  time    left {seconds(abs(ct.time_left_s))}{' (ORT below ideal)' if ct.time_left_s < 0 else ''} "
              f"at {hw.memory_bandwidth / 1e9:.2f} GB/s",
              f"  groups  {ct.groups_less} where ORT fused less, {ct.groups_more} where it fused across an ideal "
              f"boundary, {len(folded)} it folded away; {c.ort_kernels} ORT kernels"]
    if c.overlaps:
        lines.append(f"  note: {len(c.overlaps)} source node(s) mapped to two ORT kernels (kept in the first)")
    return _joined(lines)


def _joined(lines: list[str]) -> str:
    """One output line per entry: a newline or ESC inside a name is shown as an escape, never acted on."""
    return "\n".join(terminal_text(line) for line in lines) + "\n"


def _kernels(kernels: Any) -> list[Any]:
    """ORT's kernels without its views (Reshape, Flatten...), unless there is nothing else."""
    real = [k for k in kernels if (e := lookup(k.domain or "ai.onnx", k.op_type)) is None or e.kind != Kind.VIEW]
    return real or list(kernels)


def _signed(value: int | float | None) -> str:
    if value is None:
        return "?"
    return ("−" if value < 0 else "") + bytes_(abs(value))
