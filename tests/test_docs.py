"""The docs say what the code does: generated tables are current, the README's commands are real."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ops_table_is_current() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "docs" / "gen_ops.py"), "--check"], cwd=ROOT)
    assert proc.returncode == 0, "docs/ops.md is stale: run python docs/gen_ops.py"


def test_readme_starts_with_setup_and_test_commands() -> None:
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)```", text, flags=re.S)
    assert "graphcost analyze models/" in blocks[0]
    assert blocks[1].strip() == ".venv/bin/python -m pytest"
    ci = (ROOT / ".ci" / "run").read_text()
    assert ".venv/bin/python -m pytest -q" in ci  # the README's test command (quiet)
    shipped = re.search(r"graphcost analyze (models/\S+\.onnx)", blocks[0])
    assert shipped and (ROOT / shipped.group(1)).is_file()


def test_public_api_surface() -> None:
    import graphcost

    assert sorted(graphcost.__all__) == sorted([
        "HardwareSpec", "Kind", "LoadError", "Model", "NodeView", "Report", "Unknown", "Work", "__version__",
        "analyze", "gap", "load", "rule"])
