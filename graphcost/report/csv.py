"""CSV: one row per node, in graph order (body nodes after their parent, with depth > 0)."""

from __future__ import annotations

import csv
import io

from graphcost.report.model import Report, TensorInfo

COLUMNS = (
    "name", "op_type", "domain", "kind", "dtype", "flops", "macs", "bytes_read", "bytes_written", "dram_bytes",
    "intensity", "compute_time_s", "memory_time_s", "roofline_time_s", "bound", "fusion_group", "depth", "parent",
    "multiplier", "unknown_reason", "input_shapes", "output_shapes",
)


def _shapes(ts: tuple[TensorInfo, ...]) -> str:
    return ";".join("?" if t.shape is None else "x".join(str(d) for d in t.shape) for t in ts)


def render_csv(report: Report) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for n in report.nodes:
        d = n.to_dict()
        row = [("" if d[c] is None else d[c]) for c in COLUMNS[:-2]]
        row += [_shapes(n.inputs), _shapes(n.outputs)]
        w.writerow(row)
    return buf.getvalue()
