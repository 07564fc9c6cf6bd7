"""What a command imports at start-up, pinned by module name (never by time: the machine's load is no test's
business). Each check runs a fresh interpreter and prints which of the watched modules ended up in
``sys.modules``; the lazy imports are in ``graphcost/__init__.py`` (``__getattr__``) and each command's ``run``
(``graphcost/cli/__init__.py`` lists what they cost)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

HEAVY = ("torch", "tensorflow", "jax", "onnxruntime", "onnx_ir", "onnxscript", "sympy", "networkx", "dask")
"""Never needed to cost a small, fully static model."""


def _imported(code: str, watched: tuple[str, ...], tmp_path: Path) -> list[str]:
    """The ``watched`` modules that ``code`` (run in a fresh interpreter, stdout discarded) left imported."""
    probe = (f"import sys, io, contextlib\nbuf = io.StringIO()\nwith contextlib.redirect_stdout(buf):\n"
             f"    {code}\nprint('@@' + __import__('json').dumps(sorted(m for m in {watched!r} if m in sys.modules)))")
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr
    return list(json.loads(run.stdout.rsplit("@@", 1)[1]))


def _three_nodes(tmp_path: Path) -> Path:
    path = tmp_path / "three.onnx"
    onnx.save(onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        three (float[1, 16] x) => (float[1, 16] y) {
            a = Relu(x)
            b = Sigmoid(a)
            y = Add(a, b)
        }
    """), str(path))
    return path


def test_analyze_of_a_small_static_model_imports_no_heavy_dependency(tmp_path: Path) -> None:
    model = _three_nodes(tmp_path)
    code = f"from graphcost.cli import main; assert main(['analyze', {str(model)!r}, '--format', 'json']) == 0"
    assert _imported(code, HEAVY, tmp_path) == []


def test_analyze_imports_no_other_command(tmp_path: Path) -> None:
    model = _three_nodes(tmp_path)
    # graphcost.oneshot is not listed: graphcost.api.analyze asks it whether the model is a framework object
    others = ("graphcost.measure", "graphcost.audit.run", "graphcost.export", "graphcost.fold", "graphcost.diff",
              "graphcost.llm", "graphcost.hardware.measure", "graphcost.report.html", "graphcost.measure.gap_report")
    code = f"from graphcost.cli import main; assert main(['analyze', {str(model)!r}, '--format', 'json']) == 0"
    assert _imported(code, others, tmp_path) == []


@pytest.mark.parametrize("code", [
    "import graphcost",
    "from graphcost.cli import main; main(['--version'])",
    "from graphcost.cli import main; main(['hardware', 'list'])",
    "from graphcost.cli import main\n    try:\n        main(['--help'])\n    except SystemExit:\n        pass",
])
def test_commands_without_a_model_load_neither_onnx_nor_the_pipeline(code: str, tmp_path: Path) -> None:
    # only the named command's flags are registered (graphcost/cli/__init__.py build_parser): analyze's what-if
    # flags (graphcost.whatif, which imports the roofline and onnx) and explain's tool list stay unloaded
    pipeline = ("onnx", "numpy", "graphcost.graph", "graphcost.whatif", "graphcost.conventions", "graphcost.api",
                "graphcost.analysis", "graphcost.passes.shapes", "graphcost.passes.fusion", *HEAVY)
    assert _imported(code, pipeline, tmp_path) == []


def test_the_public_names_load_on_first_use(tmp_path: Path) -> None:
    code = "import graphcost; graphcost.analyze; assert callable(graphcost.gap) and graphcost.gap.Budget"
    assert _imported(code, ("graphcost.api", "graphcost.gap"), tmp_path) == ["graphcost.api", "graphcost.gap"]


def test_graphcost_gap_is_callable_whichever_import_comes_first() -> None:
    code = ("import graphcost.gap, graphcost.measure.gap_report, graphcost; import sys; "
            "print(callable(graphcost.gap), graphcost.gap is sys.modules['graphcost.gap'])")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    assert run.stdout.split() == ["True", "True"]


def test_graphcost_load_is_the_function_whichever_import_comes_first() -> None:
    # The CLI imports the graphcost.load module before any public name is read; the import system then binds
    # the package attribute to the module, and `graphcost.load(path)` failed with "'module' object is not
    # callable" (a heavy specialize test hit it when run alone).
    code = ("import graphcost.load, graphcost, sys; from graphcost.load import load; "
            "print(graphcost.load is load, sys.modules['graphcost.load'].Model is graphcost.Model)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    assert run.stdout.split() == ["True", "True"]
