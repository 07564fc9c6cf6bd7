"""Text of ``graphcost train``: the step's FLOPs and time, memory, the checkpointing table, the parallel split.

Works on the report dict of ``graphcost.cli.train.build`` (the same dict the JSON prints). Names from the model
go through ``terminal_text`` (no raw escape or control characters reach the terminal).
"""

from __future__ import annotations

from typing import Any

from graphcost.report.escape import terminal_text


def _flops(x: float | None) -> str:
    return "unknown" if x is None else f"{x / 1e9:,.3f} GFLOP"


def _bytes(x: float | None) -> str:
    if x is None:
        return "unknown"
    return f"{x / 2**20:,.2f} MiB" if x < 2**30 else f"{x / 2**30:,.2f} GiB"


def _time(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x * 1e3:,.3f} ms" if x >= 1e-4 else f"{x * 1e6:,.2f} µs"


def render(report: dict[str, Any]) -> str:
    t = report["training"]
    model = terminal_text(report["model"] or "<model>")
    lines = [f"graphcost train: {model}  (hardware {terminal_text(t['hardware'])})",
             "", "training step (forward + backward)"]
    cat = t["flops_by_category"]
    lines += [f"  forward FLOPs     {_flops(t['forward_flops'])}",
              f"  backward FLOPs    {_flops(t['backward_flops'])}",
              f"  step FLOPs        {_flops(t['training_flops'])}  (dense products {_flops(cat['dense'])}, "
              f"attention products {_flops(cat['attention'])}, other {_flops(cat['other'])})",
              f"  bytes             forward {_bytes(t['forward_bytes'])}, backward {_bytes(t['backward_bytes'])}"]
    if t.get("six_n_t") is not None:
        lines.append(f"  6·N·T             {_flops(t['six_n_t'])}  (N = {t['non_embedding_parameters']:,} block "
                     f"parameters, T = {t['tokens']:,} tokens)")
    b = t.get("bound")
    if b:
        lines.append(f"  bound             {_time(b['step_time_s'])}  (forward {_time(b['forward_time_s'])}, "
                     f"backward {_time(b['backward_time_s'])})")
    if t["unknown"]:
        shown = ", ".join(terminal_text(f"{u['node']} ({u['op_type']})") for u in t["unknown"][:5])
        lines.append(f"  unknown backward  {len(t['unknown'])} nodes, not counted: {shown}")
    m = t["memory"]
    lines += ["", f"memory (checkpoint {terminal_text(m['checkpoint'])})",
              f"  parameters        {_bytes(m['parameters'])}",
              f"  gradients         {_bytes(m['gradients'])}",
              f"  optimizer state   {_bytes(m['optimizer_state'])}",
              f"  activations kept  {_bytes(m['activations_kept'])}  "
              f"(peak with recompute {_bytes(m['peak_activations'])})",
              f"  total             {_bytes(m['total'])}"]
    blocks = t["blocks"]
    lines += ["", f"blocks: {blocks['count']} ({terminal_text(blocks['rule'])})", "",
              "checkpointing trade-off",
              f"  {'policy':<22} {'segments':>8} {'kept':>12} {'peak act.':>12} {'peak memory':>12} "
              f"{'recompute':>16} {'time added':>12} {'step':>12}"]
    for r in t["checkpointing"]:
        lines.append(f"  {terminal_text(r['policy'])[:22]:<22} {r['segments']:>8} {_bytes(r['kept_bytes']):>12} "
                     f"{_bytes(r['peak_activation_bytes']):>12} {_bytes(r['peak_memory_bytes']):>12} "
                     f"{_flops(r['recompute_flops']):>16} {_time(r['time_added_s']):>12} {_time(r['step_time_s']):>12}")
    p = report.get("parallel")
    if p:
        d = p["per_device"]
        lines += ["", f"parallel: TP {p['tensor_parallel']} × PP {p['pipeline_parallel']} × DP {p['data_parallel']} "
                      f"= {p['devices']} devices, {p['micro_batches']} micro-batches, ZeRO {p['zero']} "
                      f"(cluster {terminal_text(p['cluster'])})",
                  f"  per device        {_flops(d['flops'])}, {_bytes(d['bytes'])} moved",
                  f"  memory            {_bytes(d['memory'])} (parameters {_bytes(d['parameters'])}, gradients "
                  f"{_bytes(d['gradients'])}, optimizer {_bytes(d['optimizer_state'])}, activations "
                  f"{_bytes(d['activations'])})",
                  f"  bubble            {p['bubble']:.1%}",
                  f"  step              {_time(p['step_time_s'])} (compute {_time(p['compute_time_s'])})"]
        for c in p["collectives"]:
            lines.append(f"  {terminal_text(c['kind'])} ×{c['count']}: {terminal_text(c['purpose'])}; "
                         f"{c['elements']:,} elements each, {_bytes(c['moved_bytes'])} sent per device on "
                         f"{terminal_text(c['link'])}, {_time(c['time_s'])}")
        if p["layers"]:
            lines += ["", f"  {'block':<12} {'compute':>12} {'memory':>12} {'comm':>12}  bound"]
            for x in p["layers"]:
                lines.append(f"  {terminal_text(x['block'])[:12]:<12} {_time(x['compute_time_s']):>12} "
                             f"{_time(x['memory_time_s']):>12} {_time(x['communication_time_s']):>12}  {x['bound']}")
        lines += ["", *(f"  assumes: {a}" for a in p["assumptions"])]
    return "\n".join(lines) + "\n"


__all__ = ["render"]
