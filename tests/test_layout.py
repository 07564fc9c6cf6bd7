"""The package layout holds: one import name for the reference models, no module loaded by a string, and the
report renderers depend on the report model, never the other way round at run time (issue 12 items 2 and 3;
the import bans themselves are ruff's TID251, configured in pyproject.toml), and an import of our own code inside
a function says why it waits for its caller."""

from __future__ import annotations

import ast
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


OURS = ("graphcost", "passes", "hardware")
"""Top-level names of our own code: ``passes/`` and ``hardware/`` install as ``graphcost.passes`` and
``graphcost.hardware``, but a module there may also import them by a relative name."""


def _is_ours(imp: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(imp, ast.ImportFrom):
        return imp.level > 0 or (imp.module or "").split(".")[0] in OURS
    return any(alias.name.split(".")[0] in OURS for alias in imp.names)


def _function_bodies(node: ast.AST, in_function: bool = False) -> list[list[ast.stmt]]:
    """Every statement list that runs inside a function (its body, and the branches and handlers within)."""
    bodies = [v for _, v in ast.iter_fields(node) if in_function and isinstance(v, list)]
    for child in ast.iter_child_nodes(node):
        bodies += _function_bodies(child, in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef))
    return bodies


def _unmarked_local_imports(root: Path) -> list[str]:
    """``path:line`` of each import of our code inside a function with no ``lazy:`` comment: on its own lines,
    on the lines of the imports just before it in the same body (its import block, blank lines allowed), or in
    the comment lines directly above that block."""
    found: list[str] = []
    for path in sorted(p for d in OURS for p in (root / d).rglob("*.py")):
        lines = path.read_text("utf-8").splitlines()
        for body in _function_bodies(ast.parse("\n".join(lines))):
            for i, stmt in enumerate(body):
                if not (isinstance(stmt, ast.Import | ast.ImportFrom) and _is_ours(stmt)):
                    continue
                first = i
                while first > 0 and isinstance(body[first - 1], ast.Import | ast.ImportFrom):
                    first -= 1  # the block: the imports just before it, as isort groups them
                top = body[first].lineno - 1  # 0-based index of the block's first line
                while top > 0 and lines[top - 1].lstrip().startswith("#"):
                    top -= 1  # the comment lines directly above the block
                if not any("lazy:" in line for line in lines[top:stmt.end_lineno]):
                    found.append(f"{path.relative_to(root).as_posix()}:{stmt.lineno}")
    return sorted(found)


def test_every_function_local_import_of_our_code_says_why() -> None:
    # issue 12: hoisted to the module top unless a "# lazy: <what> costs <N> s; only <who> needs it" comment (the
    # cumulative time of `python -X importtime`) or "# lazy: import cycle: ..." says why it waits for its caller
    assert _unmarked_local_imports(ROOT) == []


def test_the_local_import_check_reads_relative_imports_and_block_comments(tmp_path: Path) -> None:
    (tmp_path / "hardware").mkdir()
    (tmp_path / "hardware" / "m.py").write_text(
        "import json\n"                      # 1: module level: never flagged
        "from .spec import S\n"              # 2: module level, relative: never flagged
        "def f():\n"                         # 3
        "    from .catalog import load\n"    # 4: relative, no comment: flagged
        "def g():\n"                         # 5
        "    # lazy: 0.1 s of imports\n"     # 6: the comment above the block...
        "    import os\n"                    # 7
        "\n"                                 # 8
        "    import graphcost.api\n"         # 9: ...covers the whole block
        "def h():\n"                         # 10
        "    x = 1\n"                        # 11: a statement ends the block...
        "    import graphcost.api\n"         # 12: ...so this one is flagged
        "    import numpy\n",                # 13: not our code: never flagged
        "utf-8")
    assert _unmarked_local_imports(tmp_path) == ["hardware/m.py:12", "hardware/m.py:4"]
