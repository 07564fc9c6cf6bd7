"""CSV: one row per node, in graph order (body nodes after their parent, with depth > 0).

Every string cell (names, op types, symbolic counts, shapes with dim names) passes ``csv_cell``, so a model
cannot plant a spreadsheet formula (``report/escape.py``); numbers are written as numbers, untouched.
``csv_text`` is the one writer: rows end in ``\\n``, and a cell holding a bare CR is quoted too (the csv module
quotes only the characters of its line terminator), so a CR in a name cannot start a new row in a spreadsheet
— which would otherwise begin with text that was never neutralized.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from graphcost.report.escape import csv_cell

if TYPE_CHECKING:  # types only: report/model.py calls this module (Report.to_csv), so it is never imported here
    from graphcost.report.model import Report, TensorInfo

COLUMNS = (
    "name", "op_type", "domain", "kind", "dtype", "flops", "macs", "bytes_read", "bytes_written", "dram_bytes",
    "intensity", "compute_time_s", "memory_time_s", "roofline_time_s", "bound", "fusion_group", "depth", "parent",
    "multiplier", "unknown_reason", "input_shapes", "output_shapes",
)


def _shapes(ts: tuple[TensorInfo, ...]) -> str:
    return ";".join("?" if t.shape is None else "x".join(str(d) for d in t.shape) for t in ts)


def _cell(value: Any) -> Any:
    """None → empty; a number as it is; anything else (a string, a symbolic count) as spreadsheet-safe text."""
    if value is None:
        return ""
    return value if isinstance(value, int | float) else csv_cell(str(value))


def _quoted_cr_row(cells: list[Any]) -> str:
    """A row with a CR inside a cell: written with a CRLF terminator, so the writer quotes the CR, then ended
    in ``\\n`` like every other row."""
    one = io.StringIO()
    csv.writer(one, lineterminator="\r\n").writerow(cells)
    return one.getvalue()[:-2] + "\n"


def csv_text(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """``header`` then ``rows`` as CSV text, each cell through ``_cell`` (spreadsheet-safe strings)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for row in rows:
        cells = [_cell(v) for v in row]
        if any(isinstance(c, str) and "\r" in c for c in cells):
            buf.write(_quoted_cr_row(cells))
        else:
            w.writerow(cells)
    return buf.getvalue()


def render_csv(report: Report) -> str:
    def rows() -> Iterable[list[Any]]:
        for n in report.nodes:
            d = n.to_dict()
            yield [d[c] for c in COLUMNS[:-2]] + [_shapes(n.inputs), _shapes(n.outputs)]

    return csv_text(COLUMNS, rows())


FUSION_COLUMNS = (
    "group", "nodes", "first_node", "node_names", "anchor", "flops", "bytes_unfused", "bytes_fused", "bytes_saved",
    "time_unfused_s", "time_fused_s",
)
FUSION_ORT_COLUMNS = ("ort_status", "ort_kernels", "bytes_ideal", "bytes_ort", "bytes_left", "time_left_s")


def render_fusion_csv(section: Any, comparison: Any = None) -> str:
    """``graphcost fusion --format csv``: one row per fusion group (``passes.fusion.FusionSection``), with ORT's
    columns when ``comparison`` (``fusion_ort.OrtComparison``) is given. ``node_names`` and ``ort_kernels`` are
    JSON lists, so any name (a comma, a semicolon, a newline in it) reads back exactly as the model spells it."""
    ort = {g.id: g for g in comparison.groups} if comparison is not None else None

    def rows() -> Iterable[list[Any]]:
        for g in section.groups:
            row = [g.id, len(g.nodes), g.nodes[0] if g.nodes else None, json.dumps(list(g.nodes), ensure_ascii=False),
                   g.anchor, g.flops, g.bytes_unfused, g.bytes_fused, g.bytes_saved, g.time_unfused_s, g.time_fused_s]
            if ort is not None:
                o = ort.get(g.id)
                row += ([None] * len(FUSION_ORT_COLUMNS) if o is None else
                        [o.status, json.dumps([k.label for k in o.kernels], ensure_ascii=False), o.bytes_ideal,
                         o.bytes_ort, o.bytes_left, o.time_left_s])
            yield row

    return csv_text(FUSION_COLUMNS + (FUSION_ORT_COLUMNS if ort is not None else ()), rows())
