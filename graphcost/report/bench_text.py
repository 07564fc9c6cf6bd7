"""``graphcost bench``'s report without ``--gap``: an onnxruntime run (``measure.ort.OrtRun``) and the native
runs beside it, as text or JSON (``--gap`` is ``report/gap_text.py``'s)."""

from __future__ import annotations

import json
from typing import Any

from graphcost.report.units import bytes_, seconds


def render(run: Any, natives: list[Any], label: str) -> str:
    """``graphcost bench``'s text: latency per runner, measured memory, the slowest kernels, notes."""
    lat = run.latency
    shapes = ", ".join(f"{k}={'x'.join(map(str, v))}" for k, v in run.input_shapes.items())
    out = [f"bench: {label}  ({shapes}; ORT {run.ort_version}, {run.provider}, level {run.level}, "
           f"{run.intra_op_threads or 'default'} threads, {run.warmup} warm-up + {run.repeats} runs)",
           f"  {'runner':<24} {'median':>10} {'p90':>10} {'p99':>10} {'min':>10} {'spread':>10}"]
    rows = [(f"onnxruntime/{run.provider}", lat)] + [(f"{n.framework}/{n.mode}/{n.device}", n.latency)
                                                     for n in natives]
    for name, t in rows:
        out.append(f"  {name:<24} {seconds(t.median):>10} {seconds(t.p90):>10} {seconds(t.p99):>10} "
                   f"{seconds(t.min):>10} {seconds(t.spread):>10}")
    out.append(f"  measured memory: {bytes_(run.memory_peak_bytes) if run.memory_peak_bytes is not None else 'n/a'}"
               f" ({run.memory_source})")
    kernels = sorted(run.kernels, key=lambda k: -k.timing.median)
    out.append(f"  kernels (profiled, slowest first): {len(kernels)}")
    for k in kernels[:10]:
        covers = ", ".join(k.covers[:3]) + (f" +{len(k.covers) - 3}" if len(k.covers) > 3 else "")
        out.append(f"    {k.op_type + ' ' + k.name:<48.48} {seconds(k.timing.median):>10}  covers {covers or '-'}")
    for n in natives:
        for note in n.notes:
            out.append(f"  note ({n.framework}): {note}")
    for w in run.warnings:
        out.append(f"  warning: {w}")
    return "\n".join(out) + "\n"


def render_json(run: Any, natives: list[Any], label: str) -> str:
    """``graphcost bench --format json`` (schema ``graphcost.bench/1``)."""
    d = {
        "schema": "graphcost.bench/1", "model": label, "provider": run.provider, "level": run.level,
        "threads": run.intra_op_threads, "warmup": run.warmup, "repeats": run.repeats,
        "binding": dict(run.binding), "input_shapes": {k: list(v) for k, v in run.input_shapes.items()},
        "latency": run.latency.to_dict(), "ort_version": run.ort_version,
        "memory": {"peak_bytes": run.memory_peak_bytes, "source": run.memory_source},
        "kernels": [{"name": k.name, "op_type": k.op_type, "domain": k.domain, "provider": k.provider,
                     "covers": list(k.covers), "timing": k.timing.to_dict()} for k in run.kernels],
        "native": [{"framework": n.framework, "mode": n.mode, "device": n.device, "version": n.version,
                    "latency": n.latency.to_dict(), "memory": dict(n.memory), "notes": list(n.notes)}
                   for n in natives],
        "warnings": list(run.warnings),
    }
    return json.dumps(d, indent=2) + "\n"
