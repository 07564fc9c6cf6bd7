"""The report's streamed JSON writes a lazy section (iterators of rows) as the bytes ``json.dumps`` would."""

from __future__ import annotations

import json
import math

from graphcost.report import _json as report_json


def test_stream_of_a_lazy_section_is_the_dumps_of_the_whole() -> None:
    rows = [{"id": "g0", "t": 1.5, "nodes": ["a"]}, {"id": "g1", "t": math.inf, "nodes": []}]
    whole = {"policy": "ideal", "groups": rows, "boundaries": [], "totals": {"x": -math.inf, "n": 2}}
    lazy = {**whole, "groups": iter(rows), "boundaries": iter([])}
    text = "".join(report_json.stream(lazy))
    # the old writer: the whole dict, non-finite numbers as null
    assert text == json.dumps(report_json.finite(whole), separators=(",", ":"))
    assert json.loads(text)["groups"][1]["t"] is None  # inf has no JSON spelling: null
