"""Model and file text cannot become a spreadsheet formula or a terminal escape sequence (report/escape.py).

The hostile inputs are built here: a chain of Relu nodes whose names start with formula characters or carry
ESC/BEL/CR/LF and rich markup, a custom op whose type and domain start with ``=``, a producer carrying a
window-title sequence, a hardware TOML whose name carries one, and model files whose names carry ESC and LF.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import onnx
import onnx.helper as oh
import pytest
from clihelp import run_cli
from onnx import TensorProto

from graphcost.audit.progress import Progress
from graphcost.report import gap_text
from graphcost.report.csv import _cell
from graphcost.report.escape import csv_cell, terminal_text

FORMULA_NAMES = ['=HYPERLINK("http://evil.example","x")', "+1", "-1+1", "@SUM(A1)", "\t=1+1", "\r=1+1"]
CONTROL_NAMES = ["title\x1b]0;pwned\x07end", "clear\x1b[2Jend", "over\rwrite", "split\nline", "row\r=1+1",
                 "[bold]markup"]
EVIL_OP, EVIL_DOMAIN = "=cmd|' /C calc'!A0", "=evil"
PRODUCER = "=producer\x1b]0;pwned\x07"
FORMULA_START = set("=+-@\t\r\n")
RAW_CONTROLS = ("\x1b", "\x07", "\r")


def evil_model(path: Path) -> Path:
    """x → one Relu per hostile name → the custom op → y."""
    nodes, prev = [], "x"
    for i, name in enumerate(FORMULA_NAMES + CONTROL_NAMES):
        nodes.append(oh.make_node("Relu", [prev], [f"t{i}"], name=name))
        prev = f"t{i}"
    nodes.append(oh.make_node(EVIL_OP, [prev], ["y"], name="custom\x1b[31m", domain=EVIL_DOMAIN))
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = oh.make_model(graph, producer_name=PRODUCER,
                          opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid(EVIL_DOMAIN, 1)])
    onnx.save(model, path)
    return path


def assert_terminal_safe(text: str) -> None:
    for c in RAW_CONTROLS:
        assert c not in text, f"raw {c!r} reaches the terminal"


# --------------------------------------------------------------------------- the two rules
@pytest.mark.parametrize(("text", "expected"), [
    ("=1+1", "'=1+1"), ("+1", "'+1"), ("-1", "'-1"), ("@SUM(A1)", "'@SUM(A1)"), ("\t=1", "'\t=1"),
    ("\r=1", "'\r=1"), ("\n=1", "'\n=1"),
    ("\uff1d1", "'\uff1d1"), ("\uff0b1", "'\uff0b1"), ("\uff0d1", "'\uff0d1"), ("\uff20x", "'\uff20x"),
    ("Relu", "Relu"), ("", ""), ("a=1", "a=1"), (" =1", " =1"), ("'=1", "'=1"), ("1x3", "1x3"),
])
def test_csv_cell(text: str, expected: str) -> None:
    assert csv_cell(text) == expected
    assert csv_cell(csv_cell(text)) == expected  # idempotent: the quote itself is safe


def test_csv_numbers_stay_numbers() -> None:
    # A number the analysis writes is a number: a negative count is not quoted, the same text as a string is.
    assert _cell(-1) == -1
    assert _cell(-2.5e-9) == -2.5e-9
    assert _cell(None) == ""
    assert _cell("-1") == "'-1"


@pytest.mark.parametrize(("text", "expected"), [
    ("\x1b]0;pwned\x07", "\\x1b]0;pwned\\x07"),  # the window-title sequence, both ends shown
    ("\x1b[2J", "\\x1b[2J"),
    ("a\rb", "a\\rb"), ("a\nb", "a\\nb"), ("a\tb", "a\\tb"), ("\x00", "\\x00"), ("\x1f", "\\x1f"),
    ("\x7f", "\\x7f"), ("\x80", "\\x80"), ("\x9b2J", "\\x9b2J"), ("\x9f", "\\x9f"),  # DEL, C1 (0x9b: CSI)
    ("\u202eabc", "\\u202eabc"), ("\u202a", "\\u202a"), ("\u2066x\u2069", "\\u2066x\\u2069"),  # bidi
    ("\u2028", "\\u2028"), ("\u2029", "\\u2029"),
    ("model\udcff.onnx", "model\\udcff.onnx"),  # a non-UTF-8 byte kept by surrogateescape
    ("plain/name:0", "plain/name:0"), ("é中文Ωµ→", "é中文Ωµ→"), ("\xa0", "\xa0"), ("C:\\m\\x.onnx", "C:\\m\\x.onnx"),
    ("[bold]x", "[bold]x"), ("", ""),
])
def test_terminal_text(text: str, expected: str) -> None:
    assert terminal_text(text) == expected
    assert terminal_text(expected) == expected  # idempotent
    terminal_text(text).encode("utf-8")  # never a lone surrogate left: always encodable (strict)


def test_terminal_text_escapes_every_control() -> None:
    controls = [chr(i) for i in (*range(0x20), *range(0x7F, 0xA0))] + [chr(i) for i in range(0x202A, 0x202F)]
    controls += [chr(i) for i in range(0x2066, 0x206A)]
    for c in controls:
        assert terminal_text(c) == ascii(c)[1:-1] and terminal_text(c).isascii() and terminal_text(c).isprintable()
    assert all(terminal_text(chr(i)) == chr(i) for i in range(0x20, 0x7F))  # printable ASCII untouched


# --------------------------------------------------------------------------- analyze
def test_analyze_csv_neutralizes_formulas(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "analyze", str(evil_model(tmp_path / "m.onnx")), "--format", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    names = [r["name"] for r in rows]
    for name in FORMULA_NAMES:
        assert "'" + name in names
    custom = rows[-1]
    assert custom["op_type"] == "'" + EVIL_OP and custom["domain"] == "'" + EVIL_DOMAIN
    for row in rows:
        for column, cell in row.items():
            assert cell[:1] not in FORMULA_START, f"{column}={cell!r} starts a formula"
    assert rows[0]["flops"] == "4"  # numbers as numbers: Relu on [batch=1, 4], 1 FLOP per element
    # A bare CR is quoted with its cell, so no reader starts a new row (beginning "=1+1") inside a name.
    assert len(rows) == len(FORMULA_NAMES) + len(CONTROL_NAMES) + 1
    assert "row\r=1+1" in names and "over\rwrite" in names and "split\nline" in names
    assert '"row\r=1+1",Relu,' in out


def test_analyze_text_shows_controls(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "analyze", str(evil_model(tmp_path / "m.onnx")), "--top", "20")
    assert code == 0
    assert_terminal_safe(out + err)
    for name in CONTROL_NAMES:
        assert terminal_text(name) in out  # each name on one line, its controls as escapes
    assert "[bold]markup" in out  # rich markup is not interpreted
    assert terminal_text(PRODUCER) in out
    assert f"{EVIL_DOMAIN}::{EVIL_OP}" in out


def test_analyze_hardware_name_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hw = tmp_path / "board.toml"
    hw.write_text('name = "board\\u001b]0;pwned\\u0007\\r\\n[red]x"\nmemory_bandwidth = 34e9\n'
                  "[peak_flops]\nfloat32 = 1.2e12\n")
    model = str(evil_model(tmp_path / "m.onnx"))
    for command in ("analyze", "fusion"):
        code, out, err = run_cli(capsys, command, model, "--hardware", str(hw))
        assert code == 0, err
        assert_terminal_safe(out + err)
        assert "hardware board\\x1b]0;pwned\\x07\\r\\n[red]x" in out


def test_fusion_text_shows_controls(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "fusion", str(evil_model(tmp_path / "m.onnx")))
    assert code == 0, err
    assert_terminal_safe(out + err)
    assert "custom\\x1b[31m" in out  # the custom node's group and boundary name it, escaped
    assert "e.g. [bold]markup → custom\\x1b[31m: " in out  # the one boundary, names on one line


def test_diff_text_shows_controls(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = evil_model(tmp_path / "a.onnx")
    b = tmp_path / "b.onnx"
    b.write_bytes(Path(a).read_bytes())
    m = onnx.load(str(b))
    del m.graph.node[6]  # drop "title\x1b]0;pwned\x07end" (t5 → t6); its consumer now reads t5
    m.graph.node[6].input[0] = "t5"
    onnx.save(m, str(b))
    code, out, err = run_cli(capsys, "diff", str(a), str(b))
    assert code == 0, err
    assert_terminal_safe(out + err)
    assert "  - title\\x1b]0;pwned\\x07end [Relu]" in out.splitlines()


def test_cli_error_line_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "gone\x1b[2J\r\nx.onnx"
    code, out, err = run_cli(capsys, "analyze", str(missing))
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.endswith("\n")
    assert_terminal_safe(err)
    assert "gone\\x1b[2J\\r\\nx.onnx" in err


def test_gap_labels_escaped_before_cut() -> None:
    assert gap_text._cut("k\x1b[2J", 44) == "k\\x1b[2J"
    assert len(gap_text._cut("\n" * 30, 10)) == 10  # the column width counts the escapes, not the raw chars


# --------------------------------------------------------------------------- audit
def test_progress_line_is_one_line() -> None:
    buf = io.StringIO()
    with Progress(2, stream=buf, force_plain=True) as p:
        p.advance({"path": "/z/a\x1b]0;pwned\x07\r\nb.onnx", "status": "ok", "reason": None}, {"elapsed_s": 0.5})
        p.advance({"path": "/z/c.onnx", "status": "error", "reason": "bad\nnode \x1b[2J"}, None)
        p.note("note\rover")
    lines = buf.getvalue().splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("[1/2] ok ") and "/z/a\\x1b]0;pwned\\x07\\r\\nb.onnx" in lines[0]
    assert lines[1].startswith("[2/2] error ") and "(bad\\nnode \\x1b[2J)" in lines[1]
    assert lines[2] == "note\\rover"
    assert_terminal_safe(buf.getvalue())


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_rich_progress_prints_failures_escaped() -> None:
    # On a terminal the bar is rich's (its own escapes are expected); a failed model's line must not add any.
    tty = _Terminal()
    with Progress(1, stream=tty) as p:
        assert not p.plain
        p.advance({"path": "/z/a\x1b]0;pwned\x07\nb.onnx", "status": "error", "reason": "[bold]bad\x1b[2J"}, None)
    text = tty.getvalue()
    assert "\x1b]0;pwned" not in text and "\x1b[2J" not in text and "\x07" not in text
    assert "error: /z/a\\x1b]0;pwned\\x07\\nb.onnx: [bold]bad\\x1b[2J" in text


def test_audit_progress_and_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    zoo = tmp_path / "zoo"
    zoo.mkdir()
    evil_model(zoo / "title\x1b]0;pwned\x07\r\nname.onnx")
    evil_model(zoo / "plain.onnx")
    code, out, err = run_cli(capsys, "audit", str(zoo), "--out", str(tmp_path / "out"))
    assert code == 0, err
    assert_terminal_safe(err)
    progress = [line for line in err.splitlines() if line.startswith("[")]
    assert len(progress) == 2 and len(err.splitlines()) == 2  # one line per model, nothing split
    assert any("title\\x1b]0;pwned\\x07\\r\\nname.onnx" in line for line in progress)
    summary = out.split("\nresults in ")[0]  # the last line names --out, which this test chose
    assert_terminal_safe(summary)
    assert "title\\x1b]0;pwned\\x07\\r\\nname.onnx" in summary
    assert f"{EVIL_DOMAIN}::{EVIL_OP}" in summary  # ops without rules, by name


def test_audit_summary_csv_neutralizes_formulas(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    zoo = tmp_path / "zoo"
    zoo.mkdir()
    evil_model(zoo / "m.onnx")
    code, _, err = run_cli(capsys, "audit", str(zoo), "--out", str(tmp_path / "out"))
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO((tmp_path / "out" / "summary.csv").read_text())))
    assert len(rows) == 1
    assert rows[0]["producer"] == "'" + PRODUCER
    for column, cell in rows[0].items():
        assert cell[:1] not in FORMULA_START, f"{column}={cell!r} starts a formula"
