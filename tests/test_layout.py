"""The package layout holds: one import name for the reference models, no module loaded by a string, and the
report renderers depend on the report model, never the other way round at run time (issue 12 items 2 and 3;
the import bans themselves are ruff's TID251, configured in pyproject.toml)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _loaded(code: str, watched: tuple[str, ...]) -> list[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(m for m in {watched!r} if m in sys.modules)))"
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert run.returncode == 0, run.stderr
    return list(json.loads(run.stdout))


def test_the_reference_models_have_one_import_name() -> None:
    run = subprocess.run([sys.executable, "-c", "import models"], capture_output=True, text=True, cwd=ROOT,
                         timeout=300)  # the repo root is on sys.path here: `models` would be a second copy
    assert run.returncode == 1
    assert "import the reference models as graphcost.models, not 'models'" in run.stderr
    assert _loaded("import graphcost.models.reference", ("graphcost.models.reference",)) == [
        "graphcost.models.reference"]


def test_no_graphcost_module_is_imported_by_a_string() -> None:
    sources = [p for d in ("graphcost", "passes", "hardware") for p in (ROOT / d).rglob("*.py")]
    by_string = [p.relative_to(ROOT).as_posix() for p in sources
                 if re.search(r"import_module\(\s*[\"']graphcost", p.read_text("utf-8"))]
    assert by_string == []
    assert not (ROOT / "graphcost" / "cli.py").exists()  # the CLI is the package graphcost/cli/, one module each
    assert sorted(p.name for p in (ROOT / "graphcost").glob("_cmd_*.py")) == []


def test_the_renderers_do_not_import_the_report_model() -> None:
    # report/model.py calls them (Report.to_csv, to_text); they import it for their types only
    assert _loaded("import graphcost.report.csv, graphcost.report.text", ("graphcost.report.model",)) == []


def test_the_html_sections_do_not_import_the_page() -> None:
    # report/html.py embeds the what-if and LLM sections; they share its escape through report/html_base.py
    code = "import graphcost.report.whatif_text, graphcost.report.llm_text"
    assert _loaded(code, ("graphcost.report.html",)) == []
