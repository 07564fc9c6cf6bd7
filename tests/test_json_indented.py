"""The JSON writer (``report/_json.py``) writes the bytes ``json.dumps`` writes, without it: indented (the
pure-Python encoder's layout, rebuilt from C encoder calls) and compact, for every shipped model and for
values built to find the seams (inf, nan, -0.0, 1 next to 1.0, None, empty containers, keys that are not
strings, non-ASCII and control characters, the characters the writer itself splits text on)."""

from __future__ import annotations

import dataclasses
import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

import graphcost
from graphcost.report import _json as report_json
from graphcost.report.model import NodeReport, Report, TensorInfo

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted([*ROOT.glob("models/*.onnx"), *ROOT.glob("models/zoo/*.onnx")])


def _reference(value: Any, indent: int | None) -> str:
    """The writer as it was: ``json.dumps`` of the whole dict, inf and nan outside ``nodes`` as null."""
    return json.dumps(report_json.finite(value), indent=indent, separators=None if indent else (",", ":"))


def _check(report: Report) -> None:
    d = report.to_dict()
    assert report.to_json(indent=2) == _reference(d, 2)
    assert report.to_json(indent=4) == _reference(d, 4)
    assert report.to_json(indent=0) == _reference(d, None)  # 0: the compact writer at any size


def test_shipped_models_are_written_as_json_dumps_writes_them() -> None:
    assert len(SHIPPED) >= 11  # tiny_cnn, tiny_transformer and the zoo's nine
    for path in SHIPPED:
        report = graphcost.analyze(path)  # fusion, memory and batchnorm sections on (the defaults)
        assert report.fusion is not None and report.memory is not None and report.batchnorm is not None
        _check(report)


def _odd_graph(tmp_path: Path) -> Path:
    """x[N, 4] → Relu → Add(·, c) → y, names with quotes, backslashes, non-ASCII, control characters and the
    writer's own split characters (NUL, SOH), and a named dim so that shapes hold strings."""
    import onnx
    from onnx import TensorProto, helper

    odd = 'é "q"\\\n\x00\x01]}%s\u2028'
    nodes = [helper.make_node("Relu", ["x"], [f"r{odd}"], name=f"relu{odd}"),
             helper.make_node("Add", [f"r{odd}", "c"], ["y"], name="add√")]
    graph = helper.make_graph(
        nodes, f"g{odd}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        initializer=[helper.make_tensor("c", TensorProto.FLOAT, [4], [1.0, 2.0, 3.0, 4.0])])
    path = tmp_path / "odd.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_odd_names_non_finite_numbers_and_mixed_types_are_written_as_json_dumps_writes_them(
        tmp_path: Path) -> None:
    report = graphcost.analyze(_odd_graph(tmp_path))
    _check(report)
    a, b = report.nodes
    rows = (
        a,
        dataclasses.replace(b, flops=math.inf, compute_time_s=math.nan, intensity=-math.inf),  # counts: Infinity
        dataclasses.replace(a, flops=2.0, macs=1.0, compute_time_s=-0.0, memory_time_s=0.0),  # 2.0 after 2
        dataclasses.replace(b, flops=None, kind=None, note="", unknown_reason="why", multiplier="trips_loop"),
        dataclasses.replace(a, bytes_as_written=128, depth=1, parent="p", note="n", intensity=1),  # int time
        dataclasses.replace(a, inputs=(), outputs=(TensorInfo("s", (), "float32"), TensorInfo("u", None, "?"))),
    )
    odd = dataclasses.replace(report, nodes=rows, totals=dataclasses.replace(report.totals, intensity=math.inf))
    _check(odd)  # totals.intensity inf: null; a row's inf flops: Infinity (finite leaves "nodes" alone)
    assert '"flops": Infinity' in odd.to_json(indent=2) and '"intensity": null' in odd.to_json(indent=2)


def test_rows_across_batches_keep_each_value_type(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A key's values are memoized per type; 0.0 and -0.0 (equal keys) and 1 and 1.0 cross batch edges."""
    report = graphcost.analyze(_odd_graph(tmp_path))
    a = report.nodes[0]
    values: list[Any] = [
        0.0, -0.0, 1.0,  # floats: -0.0 after 0.0 in one batch
        -0.0, 0.0, 2.0,  # and in the next
        1, 2, 0,  # ints equal to floats already written
        1.0, 2.0, None,  # floats equal to ints already written
        1, None, 2,
        math.inf, 0.0, 1,  # a mix with inf: value by value
        math.nan, None, -0.0,
    ]
    rows = tuple(dataclasses.replace(a, name=f"n{i}", flops=v, compute_time_s=v, memory_time_s=v,
                                     multiplier=v if isinstance(v, int) else 1) for i, v in enumerate(values))
    monkeypatch.setattr(report_json.Rows, "BATCH", 3)  # a batch per line above
    _check(dataclasses.replace(report, nodes=rows))


def test_row_keys_are_the_to_dict_keys_in_order(tmp_path: Path) -> None:
    row = graphcost.analyze(_odd_graph(tmp_path)).nodes[0]
    assert [*report_json.ROW_KEYS, "inputs", "outputs"] == list(row.to_dict())
    assert list(dataclasses.replace(row, bytes_as_written=1).to_dict())[-1] == "bytes_as_written"
    assert report_json.TIMES <= set(report_json.ROW_KEYS)


STRINGS = ["", "a", "é", '"', "\\", "]", "}", ",", "\x00", "\x01", "]\x00[", "},\x00{", "%s", "%", "\n", "\u2028",
           "nodes"]
SCALARS: list[Any] = [None, True, False, 0, -1, 1, 2**70, 0.0, -0.0, 1.0, 1e300, 2.5e-9, math.inf, -math.inf,
                      math.nan, *STRINGS]


def _random_value(rng: random.Random, depth: int) -> Any:
    """A JSON-like value: scalars, lists, tuples, dicts (str keys, sometimes int keys or "nodes"), and lists of
    dicts with the same keys (the writer's tables), nested up to ``depth``."""
    pick = rng.random()
    if depth == 0 or pick < 0.35:
        return rng.choice(SCALARS)
    if pick < 0.5:
        return [rng.choice(SCALARS) for _ in range(rng.randrange(4))]
    if pick < 0.6:
        return tuple(_random_value(rng, depth - 1) for _ in range(rng.randrange(3)))
    if pick < 0.8:
        keys = rng.sample([*STRINGS, "k", "id", 7], rng.randrange(5))
        return {k: _random_value(rng, depth - 1) for k in keys}
    keys = rng.sample(["a", "b", "nodes", "%d", "é"], rng.randrange(1, 4))
    return [{k: _random_value(rng, depth - 1) for k in keys} for _ in range(rng.randrange(1, 4))]


def test_indented_values_at_any_depth_are_the_json_dumps_text() -> None:
    rng = random.Random(20261201)
    for _ in range(3000):
        value = _random_value(rng, 4)
        for unit, level in (("  ", 0), ("  ", 3), ("    ", 1)):
            expected = _reference(value, len(unit)).replace("\n", "\n" + unit * level)
            assert report_json.Indented(unit).text(value, level) == expected, value


def test_tables_flat_containers_and_their_fallbacks() -> None:
    w = report_json.Indented("  ")
    cases: list[Any] = [
        [{"id": "g0", "nodes": ["a", "b"], "t": 1.5}, {"id": "g1", "nodes": [], "t": math.inf}],  # table, inf
        [{"a": [1, 2]}, {"a": []}, {"a": [3]}],  # a column of lists, an empty one inside
        [{"a": []}],  # all empty
        [{"a": 1}, {"b": 2}],  # different keys: not a table
        [{"a": 1}, {}],  # an empty dict
        [{"nodes": [math.inf, 1.0]}, {"nodes": [math.nan, 2.0]}],  # "nodes": finite leaves inf alone
        {"x": (math.inf, [math.inf]), 1: "int key", "nodes": {"t": math.inf}},  # tuples too; an int key
        [[1, 2], [], [[]]],
    ]
    for value in cases:
        assert w.text(value, 0) == _reference(value, 2), value


def test_a_type_without_a_json_form_is_still_a_type_error() -> None:
    with pytest.raises(TypeError):
        report_json.Indented("  ").text({"a": [object()]}, 0)
    with pytest.raises(TypeError):
        json.dumps({"a": [object()]}, indent=2)


def test_compact_items_go_in_batches_and_a_batch_with_inf_is_written_item_by_item(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report_json, "BATCH", 2)
    rows = [{"i": i, "t": math.inf if i == 3 else i / 4} for i in range(7)]  # the batch (2, 3) holds inf
    text = "[" + "".join(report_json.items(iter(rows))) + "]"
    assert text == json.dumps(report_json.finite(rows), separators=(",", ":"))
    assert "".join(report_json.items(iter([]))) == ""


def test_a_row_is_the_same_text_written_alone_or_in_a_batch(tmp_path: Path) -> None:
    row: NodeReport = graphcost.analyze(_odd_graph(tmp_path)).nodes[0]
    assert "".join(report_json.Rows(None).chunks([row])) == json.dumps(row.to_dict(), separators=(",", ":"))
    assert "".join(report_json.Rows("  ").chunks([row])) == json.dumps(row.to_dict(), indent=2).replace(
        "\n", "\n    ")
