"""The process entry point: ``graphcost`` and ``python -m graphcost`` run :func:`graphcost.cli.entry`, which exits
with :func:`graphcost.cli.main`'s code and leaves the run's objects frozen for the interpreter's finalization."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent

_PROBE = """
import gc, sys
sys.argv = ["graphcost", *sys.argv[1:]]
from graphcost.cli import entry
try:
    entry()
except SystemExit as e:
    print("exit", e.code, gc.isenabled(), gc.get_freeze_count() > 0)
"""


def _probe(*argv: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, check=True)
    return out.stdout.split("exit ")[-1].split()


def test_console_script_is_entry() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"graphcost": "graphcost.cli:entry"}


def test_entry_exits_with_main_code_collector_off_objects_frozen() -> None:
    assert _probe("--version") == ["0", "False", "True"]
    assert _probe("analyze", str(ROOT / "no-such-model.onnx")) == ["2", "False", "True"]


def test_python_dash_m_exit_codes(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    run = subprocess.run([sys.executable, "-m", "graphcost", "analyze", str(bad)], capture_output=True, text=True,
                         check=False)
    assert run.returncode == 2
    assert len(run.stderr.strip().splitlines()) == 1
    ok = subprocess.run([sys.executable, "-m", "graphcost", "analyze", str(ROOT / "models" / "tiny_cnn.onnx"),
                         "--format", "json", "-o", str(tmp_path / "r.json")], capture_output=True, check=False)
    assert ok.returncode == 0
    assert (tmp_path / "r.json").stat().st_size > 0
