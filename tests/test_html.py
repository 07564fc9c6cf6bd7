"""The HTML reports: well-formed, offline, escaped, with the charts; and (heavy) what Chromium makes of them.

The fast tests parse the page with ``html.parser`` and look at what it references. The heavy tests open the
pages from ``file://`` in headless Debian Chromium (``apt-get install chromium``; skipped when absent): a
screenshot that is neither tiny nor one flat colour, no console message at all from the page (an uncaught
error, or a fetch refused by the page's Content-Security-Policy, would show there), the charts in the DOM,
and the sort script reordering the audit table.
"""

from __future__ import annotations

import dataclasses
import html.parser
import math
import re
import shutil
import struct
import subprocess
import tempfile
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import onnx
import onnx.parser
import pytest

import graphcost
from graphcost.audit.rows import make_row, partial_reason, summarize_report
from graphcost.passes.liveness import CurvePoint
from graphcost.report.html import MAX_CURVE_POINTS, MAX_POINTS, render_html
from graphcost.report.html_audit import render_audit_html

ROOT = Path(__file__).resolve().parents[1]
TINY_CNN = ROOT / "models" / "tiny_cnn.onnx"
TINY_TRANSFORMER = ROOT / "models" / "tiny_transformer.onnx"
HOSTILE = "<script>alert(1)</script>"
# Attributes through which a page could fetch something.
FETCH_ATTRS = {"src", "href", "xlink:href", "action", "formaction", "data", "poster", "srcset", "background"}


class Page(html.parser.HTMLParser):
    """Every tag, every fetching attribute's value, and the text of each <script>."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.refs: list[str] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.refs += [v or "" for k, v in attrs if k in FETCH_ATTRS]
        self._in_script = tag == "script"
        if tag == "script":
            self.scripts.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts[-1] += data


def parse(doc: str) -> Page:
    p = Page()
    p.feed(doc)
    p.close()
    return p


def assert_offline(doc: str) -> Page:
    p = parse(doc)
    assert all(r.startswith("#") for r in p.refs), p.refs  # in-page anchors only
    for fetcher in ("url(", "@import", "<link", "<img", "<iframe", "<object", "<embed", "http://", "https://"):
        assert fetcher not in doc, fetcher
    assert "default-src 'none'" in doc  # the CSP: the browser itself refuses any fetch
    assert len(p.scripts) == 1 and "fetch" not in p.scripts[0] and "XMLHttpRequest" not in p.scripts[0]
    return p


def hostile_model() -> onnx.ModelProto:
    """MatMul → Relu → Add, nodes named to break out of HTML if a renderer forgot to escape."""
    m = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[B, 64] x, float[64, 32] w, float[32] b) => (float[B, 32] y) {
            h = MatMul(x, w)
            r = Relu(h)
            y = Add(r, b)
        }
    """)
    names = (HOSTILE, "a&b <i>", "quote\"'")
    for node, name in zip(m.graph.node, names, strict=True):
        node.name = name
    m.producer_name = "<b>bold</b>"
    return m


@pytest.fixture(scope="module")
def tiny_report() -> graphcost.Report:
    return graphcost.analyze(str(TINY_TRANSFORMER))


# --------------------------------------------------------------------------- the model report
def test_page_is_well_formed_and_offline(tiny_report: graphcost.Report) -> None:
    doc = render_html(tiny_report)
    p = assert_offline(doc)
    assert doc.startswith("<!DOCTYPE html>")
    assert p.tags.count("svg") == 2  # the roofline and the memory curve
    for anchor in ("roofline", "summary", "ops", "top", "fusion", "memory", "warnings"):
        assert f'id="{anchor}"' in doc


def test_node_names_are_escaped() -> None:
    doc = render_html(graphcost.analyze(hostile_model(), dims={"B": 4}, fusion=False))
    p = assert_offline(doc)
    assert HOSTILE not in doc and "<b>bold</b>" not in doc and "a&b <i>" not in doc
    assert html.escape(HOSTILE) in doc  # shown, as text
    assert "a&amp;b &lt;i&gt;" in doc and "quote&quot;&#x27;" in doc
    assert p.tags.count("script") == 1 and "i" not in p.tags and "b" not in p.tags


def test_roofline_chart_has_roofs_ridges_and_points(tiny_report: graphcost.Report) -> None:
    doc = render_html(tiny_report)
    hw = tiny_report.hardware
    assert "arithmetic intensity (FLOP/B)" in doc and "attainable FLOP/s" in doc
    assert "DRAM roof 50.00 GB/s" in doc
    assert doc.count('class="roof-compute"') == len(hw.peak_flops) == doc.count('class="ridge"')
    # edge-soc: float32 2 TFLOP/s over 50 GB/s → ridge at 2e12 / 50e9 = 40 FLOP/B
    assert "ridge 40 FLOP/B" in doc and "float32 roof 2.00 TFLOP/s" in doc
    groups = tiny_report.fusion.groups
    drawable = [g for g in groups if g.flops and g.bytes_fused and g.time_fused_s]
    assert doc.count('class="pt"') == len(drawable) > 0
    assert f"{len(groups) - len(drawable)} fusion groups with 0 FLOPs" in doc
    g = max(drawable, key=lambda g: g.time_fused_s or 0.0)
    assert f"<title>group {g.id} (" in doc  # tooltip names the group


def test_points_are_nodes_without_fusion() -> None:
    report = graphcost.analyze(hostile_model(), dims={"B": 4}, fusion=False)
    doc = render_html(report)
    assert "Each point is a node" in doc
    # MatMul (2·B·64·32 FLOPs), Relu (B·32) and Add (B·32) all do arithmetic: three points, one tooltip each
    assert doc.count('class="pt"') == 3
    assert f"<title>{html.escape(HOSTILE)} (MatMul): 16.38 kFLOP" in doc  # 2·4·64·32 = 16,384


def test_memory_curve_with_labelled_peak(tiny_report: graphcost.Report) -> None:
    doc = render_html(tiny_report)
    m = tiny_report.memory
    assert 'class="curve"' in doc and 'class="peak"' in doc
    polyline = re.search(r'class="curve" points="([^"]+)"', doc)
    assert polyline is not None and len(polyline.group(1).split()) == len(m.curve)
    assert f"at {html.escape(m.peak_node)} (step {m.peak_step})" in doc


def test_big_report_is_capped(tiny_report: graphcost.Report) -> None:
    """10,000 nodes, groups and steps: at most MAX_POINTS points and MAX_CURVE_POINTS vertices, said so."""
    base = [n for n in tiny_report.nodes if n.depth == 0]
    nodes = tuple(dataclasses.replace(base[i % len(base)], name=f"n{i}") for i in range(10_000))
    curve = tuple(CurvePoint(i, f"n{i}", 1000 + (i * 7919) % 5000) for i in range(10_000))
    fusion = tiny_report.fusion
    groups = tuple(dataclasses.replace(fusion.groups[i % len(fusion.groups)], id=f"g{i}") for i in range(10_000))
    big = dataclasses.replace(
        tiny_report, nodes=nodes, fusion=dataclasses.replace(fusion, groups=groups),
        memory=dataclasses.replace(tiny_report.memory, curve=curve, peak_step=None))
    doc = render_html(big)  # its speed is bench/'s business (bench/run.py), not a test's
    drawable = sum(1 for g in groups if g.flops and g.bytes_fused and g.time_fused_s)
    assert drawable > MAX_POINTS and doc.count('class="pt"') == MAX_POINTS
    assert f"Showing the {MAX_POINTS:,} largest of {drawable:,} fusion groups" in doc
    polyline = re.search(r'class="curve" points="([^"]+)"', doc)
    assert polyline is not None and len(polyline.group(1).split()) <= MAX_CURVE_POINTS
    assert "10,000 steps, drawn as the min and max" in doc
    no_fusion = render_html(dataclasses.replace(big, fusion=None))
    assert no_fusion.count('class="pt"') == MAX_POINTS and "nodes by bound time" in no_fusion
    assert len(doc) < 2_000_000


# --------------------------------------------------------------------------- the audit page
def audit_rows(report: graphcost.Report) -> list[dict[str, Any]]:
    """Three rows as docs/audit.md gives them: ok, error (no analysis), and one missing most keys."""
    job = {"path": "/zoo/tiny_transformer.onnx", "bytes": 1, "sha256": "0" * 64, "external_data": [],
           "settings_key": "s", "key": "k"}
    analysis = summarize_report(report, [])
    return [make_row(job, "ok", partial_reason(analysis), analysis),
            {"path": f"/zoo/{HOSTILE}.onnx", "status": "error", "reason": "not an ONNX model (empty file)",
             "analysis": None},
            {"path": "/zoo/odd.onnx", "status": "ok", "analysis": {"totals": {"flops": "many"}}}]


def test_audit_page(tiny_report: graphcost.Report) -> None:
    rows = audit_rows(tiny_report)
    doc = render_audit_html(rows, hardware=tiny_report.hardware)
    p = assert_offline(doc)
    assert "sortable" in doc and "addEventListener" in p.scripts[0]
    assert p.tags.count("svg") == 1  # one mini roofline: only the first row has numbers
    assert p.tags.count("tr") == 1 + len(rows)
    assert HOSTILE not in doc and html.escape(HOSTILE) in doc
    assert "3 models: 2 ok, 1 error" in doc and "paths below /zoo" in doc
    t = tiny_report.totals
    assert f'data-v="{float(t.flops)!r}"' in doc  # FLOPs sort by number, not by "219.99 k"
    assert f"{t.flops / t.bytes:.3g} FLOP/B" in doc


def test_audit_page_infers_roofs_and_tolerates_junk(tiny_report: graphcost.Report) -> None:
    rows: list[Mapping[str, Any]] = [*audit_rows(tiny_report), {}, {"analysis": "?", "status": None}]
    doc = render_audit_html(rows)  # no device given: the ok row's roofs come from its totals
    parse(doc)
    assert "rows without device roofs: 1" in doc
    t = tiny_report.totals
    # inferred DRAM roof: DRAM bytes / memory time; every node is memory-bound here, so 100% of it
    assert math.isclose(t.dram_bytes / t.memory_time_s, tiny_report.hardware.memory_bandwidth)
    assert "(100% of roof)" in doc
    assert render_audit_html([]).count("<tr>") == 1  # just the header


# --------------------------------------------------------------------------- heavy: Chromium
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--host-resolver-rules=MAP * ~NOTFOUND")


def chromium(path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("chromium")
    if exe is None:
        pytest.skip("Debian's chromium is not installed (apt-get install -y chromium)")
    with tempfile.TemporaryDirectory(prefix="graphcost-chromium-") as profile:
        return subprocess.run([exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *flags, path.as_uri()],
                              capture_output=True, text=True, timeout=180, check=False)


def png_rows(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and the (filtered) scanlines of a PNG, with struct and zlib only."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height, bpp = 8, b"", 0, 0, 4
    while pos < len(data):
        (n,), kind = struct.unpack(">I", data[pos:pos + 4]), data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            assert depth == 8
            bpp = {0: 1, 2: 3, 4: 2, 6: 4}[color]
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = 1 + width * bpp
    assert len(raw) == stride * height
    return width, height, [raw[i:i + stride] for i in range(0, len(raw), stride)]


def console_lines(stderr: str) -> list[str]:
    """What the page said on its console: uncaught errors, CSP refusals, console.* calls."""
    return [ln for ln in stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln]


def check_page(path: Path, marker: str) -> str:
    shot = path.with_suffix(".png")
    done = chromium(path, f"--screenshot={shot}", "--window-size=1400,2000")
    assert shot.exists(), done.stderr[-2000:]
    data = shot.read_bytes()
    assert len(data) > 20_000
    width, height, lines = png_rows(data)
    assert (width, height) == (1400, 2000)
    # a flat page has (nearly) one distinct scanline; a page of text, tables and charts has hundreds
    assert len(set(lines)) > 200
    dom = chromium(path, "--enable-logging=stderr", "--v=0", "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert console_lines(dom.stderr) == []
    assert marker in dom.stdout
    return dom.stdout


@pytest.mark.heavy
@pytest.mark.parametrize("model", [TINY_TRANSFORMER, TINY_CNN], ids=lambda p: p.stem)
def test_chromium_renders_report(model: Path, tmp_path: Path) -> None:
    page = tmp_path / f"{model.stem}.html"
    page.write_text(render_html(graphcost.analyze(str(model))), encoding="utf-8")
    dom = check_page(page, 'class="roofline"')
    assert 'class="curve"' in dom and 'class="ridge-label halo"' in dom


@pytest.mark.heavy
def test_chromium_renders_audit_and_sorts(tiny_report: graphcost.Report, tmp_path: Path) -> None:
    rows = audit_rows(tiny_report)
    doc = render_audit_html(rows, hardware=tiny_report.hardware)
    page = tmp_path / "audit.html"
    page.write_text(doc, encoding="utf-8")
    check_page(page, 'class="roofline"')
    # Click "FLOPs": ascending puts the unknowns (-Infinity) first; again: descending, numbers first. The sort
    # is stable, so the two unknown rows keep their order.
    probe = ('<script>var t=document.querySelector("table.sortable"),th=t.tHead.rows[0].cells[3],seen=[];'
             'function order(){return Array.from(t.tBodies[0].rows).map(function(r){return r.cells[1].textContent;})'
             '.join(",");}th.click();seen.push(order());th.click();seen.push(order());'
             'document.body.setAttribute("data-order",seen.join(" | "));</script></body>')
    sorted_page = tmp_path / "audit_sorted.html"
    sorted_page.write_text(doc.replace("</body>", probe), encoding="utf-8")
    dom = chromium(sorted_page, "--enable-logging=stderr", "--v=0", "--dump-dom")
    assert console_lines(dom.stderr) == []
    assert 'data-order="error,ok,ok | ok,error,ok"' in dom.stdout
