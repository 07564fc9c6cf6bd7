"""A run (bench, gap, fold) that fails because input dims only took 1 names those dims in one line (issue 10, item 6).

The static check (``binding.defaults_break``) refuses what onnx's strict inference sees at 1; this covers what only
the run shows: a Gather of index 1 along a dim ``n`` is a valid graph at every ``n`` but reads out of bounds at n=1.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import onnx.parser
import pytest
from clihelp import run_cli

import graphcost
from graphcost.binding import UnboundDims

GATHER_ONE = """<ir_version: 8, opset_import: ["" : 17]>
agraph (float[1,n] x) => (float[1,1] y) {
  i = Constant<value = int64[1] {1}>()
  y = Gather<axis = 1>(x, i)
}"""


@pytest.fixture()
def model(tmp_path: Path) -> Path:
    path = tmp_path / "gather_one.onnx"
    onnx.save(onnx.parser.parse_model(GATHER_ONE), path)
    return path


@pytest.mark.parametrize("command", ["bench", "gap"])
def test_a_run_that_fails_at_the_default_names_the_dims(command: str, model: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, command, str(model), "--warmup", "0", "--repeats", "1", "--hardware", "edge-soc")
    assert code == 2 and not out
    assert len(err.strip().splitlines()) == 1, err
    assert "dim n is not bound; pass --dim n=N" in err and "at n=1" in err and "out of data bounds" in err, err


def test_the_same_run_with_the_dim_bound_works(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "bench", str(model), "--warmup", "0", "--repeats", "1", "--dim", "n=4")
    assert code == 0, err


def test_fold_names_the_dims_and_writes_nothing(model: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    before = model.read_bytes()
    out_path = tmp_path / "folded.onnx"
    code, _, err = run_cli(capsys, "fold", str(model), "-o", str(out_path))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "pass --dim n=N" in err, err
    assert not out_path.exists() and model.read_bytes() == before


def test_api_gap_raises_unbound_dims(model: Path) -> None:
    with pytest.raises(UnboundDims) as e:
        graphcost.gap(str(model), hardware="edge-soc", warmup=0, repeats=1)
    assert e.value.names == ("n",) and "n=1" in e.value.why


def test_a_failure_with_every_dim_bound_stays_the_runs_own(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # n=1 given by the user: nothing was defaulted, so the error is onnxruntime's, not a request to bind n
    code, _, err = run_cli(capsys, "bench", str(model), "--warmup", "0", "--repeats", "1", "--dim", "n=1")
    assert code == 2 and "out of data bounds" in err and "pass --dim" not in err, err
