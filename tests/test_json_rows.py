"""Node rows are written by ``report/_json.py Rows``: a batch of rows a key at a time (memoized value texts, or one
C encoder call), then one format string per row. Every row must be the bytes ``json.dumps(row.to_dict(), ...)``
writes, compact or indented at its depth, whatever came before it; and every section item the bytes a fresh
encoder writes."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator

import graphcost
from graphcost.report import _json as report_json
from graphcost.report.model import NodeReport, TensorInfo

X = TensorInfo("x", (1, "batch", 3), "float32")


def _row(name: str, **values: object) -> NodeReport:
    base: dict[str, object] = dict(
        name=name, op_type="Add", domain="ai.onnx", kind="elementwise", dtype="float32", flops=2048, macs=0,
        bytes_read=64, bytes_written=32, dram_bytes=96, intensity=0.5, compute_time_s=1e-9, memory_time_s=2e-9,
        roofline_time_s=2e-9, bound="memory", inputs=(X, X), outputs=(TensorInfo("y", None, "unknown"),))
    return NodeReport(**{**base, **values})  # type: ignore[arg-type]


ROWS = (
    _row("a"),
    _row("b", flops=2048.0, macs=0.0),  # equal to the ints before: written 2048.0, not 2048
    _row("c", compute_time_s=-0.0, memory_time_s=0.0, intensity=1),  # -0.0 == 0.0, yet spelled apart
    _row("d", flops=math.inf, compute_time_s=math.inf, memory_time_s=math.nan),  # counts: Infinity; times: null
    _row('é "q"\\\n', parent="p", depth=1, multiplier="trips_loop", note="", unknown_reason="why",
         fusion_group="g0", bytes_as_written=128),  # escaped name; a formula multiplier; "" note is null
    _row("f", kind=None, bound=None, flops=None, macs=None, dram_bytes=None, intensity=None, note="n",
         has_rule=False),
)


def test_every_row_is_the_text_json_dumps_writes_even_after_equal_values_of_another_type() -> None:
    for unit in (None, "  "):
        rows = report_json.Rows(unit)  # one for all rows, as json_chunks uses it
        for batch in (ROWS, ROWS, ROWS[:2], ROWS[2:]):  # again: the second time every text comes from the memo
            if unit is None:
                expected = [json.dumps(row.to_dict(), separators=(",", ":")) for row in batch]
                assert "".join(rows.chunks(batch)) == ",".join(expected)
            else:  # a row sits at depth 2: the report's "nodes" items
                expected = [json.dumps(row.to_dict(), indent=2).replace("\n", "\n    ") for row in batch]
                assert "".join(rows.chunks(batch)) == ",\n    ".join(expected)


def test_a_section_item_is_the_text_of_a_fresh_strict_encoder_and_non_finite_numbers_are_null() -> None:
    fresh = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
    items = ({"id": "g0", "t": 1.5, "z": -0.0, "nodes": ["a", "é"], "n": None, "ok": True}, [1, 2.0, "x"], "s", 3)
    for item in items:
        assert report_json.dumps_any(item) == fresh.encode(item)
    with_inf = {"id": "g1", "t": math.inf, "rows": [math.nan, 1]}
    assert report_json.dumps_any(with_inf) == '{"id":"g1","t":null,"rows":[null,1]}'  # JSON has no inf


def test_compact_report_is_the_dumps_of_its_dict() -> None:
    report = graphcost.analyze("models/tiny_transformer.onnx")
    compact = "".join(report.json_chunks(indent=0))  # indent 0: the compact writer at any size
    assert compact == report_json.dumps(report.to_dict(), None)
    assert json.loads(compact)["nodes"][0]["name"] == report.nodes[0].name


def test_the_lazy_dict_streams_the_memory_curve_and_holds_the_same_points() -> None:
    """``json_chunks`` writes the memory curve (one point per step: 100k dicts at synthetic-100k) from an
    iterator, never as a list held whole; the points are those of ``to_dict()``."""
    report = graphcost.analyze("models/tiny_transformer.onnx")
    lazy = report.to_dict(nodes=False, lazy=True)["memory"]["curve"]
    assert isinstance(lazy, Iterator)
    eager = report.to_dict()["memory"]["curve"]
    assert isinstance(eager, list) and len(eager) == len(report.memory.curve) > 0
    assert list(lazy) == eager
