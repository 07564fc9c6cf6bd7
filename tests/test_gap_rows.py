"""Readable rows: gap group rows name their nodes, fusion output keeps node names as the model spells them
(escaped for terminals, never trimmed), and ``fusion --format csv`` writes spreadsheet-safe rows like analyze's."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import onnx
import onnx.parser
import pytest
from clihelp import run_cli

from graphcost.hardware.spec import HardwareSpec
from graphcost.measure import gap_report, run_ort
from graphcost.report import gap_text
from graphcost.report.csv import FUSION_COLUMNS, FUSION_ORT_COLUMNS

CONV = "/encoder/layers.0/self_attn/conv_proj/Conv"  # longer than any old 26-character column
RELU = "/encoder/layers.0/act\x1b[31m"  # an ESC in a name: escaped on a terminal, kept in files
FORMULA = "=HYPERLINK(\"http://x\")"  # a name a spreadsheet would run as a formula

MODEL = """<ir_version: 8, opset_import: ["" : 17]>
g (float[1,8,16,16] x, float[8,8,3,3] w) => (z) {
    c = Conv <pads = [1, 1, 1, 1]> (x, w)
    y = Relu(c)
    z = Sigmoid(y)
}"""


def _model(tmp_path: Path, names: tuple[str, ...] = (CONV, RELU, FORMULA)) -> str:
    m = onnx.parser.parse_model(MODEL)
    for node, name in zip(m.graph.node, names, strict=True):
        node.name = name
    path = tmp_path / "named.onnx"
    onnx.save(m, str(path))
    return str(path)


def test_group_label_names_the_first_nodes_and_counts_the_rest() -> None:
    nodes = ["Conv_12", "Relu_13", "Add_14", "Mul_15"]
    assert gap_report.group_label(["g3"], nodes) == "g3 Conv_12+Relu_13 (+2)"  # 2 named, 4 − 2 counted
    assert gap_report.group_label(["g0", "g1"], nodes[:2]) == "g0+g1 Conv_12+Relu_13"  # merged groups, none more
    assert gap_report.group_label(["g5"], ["Gemm_0"]) == "g5 Gemm_0"
    assert gap_report.group_label(["g6"], []) == "g6"


def test_gap_group_rows_name_their_nodes(tmp_path: Path) -> None:
    path = _model(tmp_path)
    run = run_ort(path, warmup=1, repeats=2)
    r = gap_report.build(path, run, hardware=HardwareSpec("t", {"float32": 1e12}, 10e9))
    assert r.groups
    for g in r.groups:  # each label: its group ids, then its first two node names as the model spells them
        ids, _, rest = g.label.partition(" ")
        assert ids.startswith("g") and rest.startswith("+".join(g.nodes[:2]))
    assert any(CONV in g.label for g in r.groups)
    text = gap_text.render(r)
    assert "\x1b" not in text  # on the terminal the ESC is shown as an escape, never sent
    shown = [line for line in text.splitlines() if line.lstrip().startswith("g0")]
    assert shown and "/encoder/layers.0/self_attn/" in shown[0]


def test_fusion_text_keeps_node_names_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "fusion", _model(tmp_path, (CONV + "\x1b[31m", RELU, FORMULA)))
    assert code == 0, err
    # the one group's first node, whole with its leading "/" (the old 34-column cell kept "conv_proj/Conv…"),
    # its ESC escaped, not rewritten; then the 2 other nodes counted
    assert CONV + "\\x1b[31m (+2)" in out and "\x1b" not in out


def test_fusion_csv_rows_are_exact_and_spreadsheet_safe(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _model(tmp_path, (FORMULA, RELU, CONV))  # the formula-like name first: it is a group's first node
    code, out, err = run_cli(capsys, "fusion", path, "--format", "csv")
    assert code == 0, err
    rows = list(csv.reader(io.StringIO(out)))
    assert tuple(rows[0]) == FUSION_COLUMNS
    body = [dict(zip(rows[0], row, strict=True)) for row in rows[1:]]
    code, out, _ = run_cli(capsys, "fusion", path, "--format", "json")
    groups = json.loads(out)["fusion"]["groups"]
    assert [b["group"] for b in body] == [g["id"] for g in groups]  # one row per group, in order
    for b, g in zip(body, groups, strict=True):
        assert json.loads(b["node_names"]) == g["nodes"]  # a JSON list: every name reads back exactly
        assert int(b["nodes"]) == len(g["nodes"])
        assert float(b["bytes_fused"]) == g["bytes_fused"] and float(b["time_fused_s"]) == g["time_fused_s"]
    first = next(b for b in body if json.loads(b["node_names"])[0] == FORMULA)
    assert first["first_node"] == "'" + FORMULA  # a leading ' : the spreadsheet shows it, never runs it
    assert all(not cell.startswith(("=", "+", "-", "@")) for row in rows for cell in row
               if not cell.lstrip("-").replace(".", "", 1).replace("e", "", 1).isdigit())


def test_fusion_csv_against_ort_adds_ort_columns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "fusion", _model(tmp_path), "--against", "ort:basic", "--format", "csv")
    assert code == 0, err
    rows: list[Any] = list(csv.reader(io.StringIO(out)))
    assert tuple(rows[0]) == FUSION_COLUMNS + FUSION_ORT_COLUMNS
    status = rows[0].index("ort_status")
    assert all(row[status] for row in rows[1:])  # every group has ORT's verdict
