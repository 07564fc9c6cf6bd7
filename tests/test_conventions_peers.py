"""``--as X`` against X itself: torch's FlopCounterMode, fvcore, ptflops and thop run on the torch reference models
(``models/reference.py``) and on a small LSTM, onnx-tool and onnxsim on their exports, and graphcost's convention
tables run on the exports (legacy exporter, BatchNorm kept so that the BN terms stay in the file). Exact
equality, no tolerance. onnx-tool and onnxsim live in their own venv (``bench/peers_env.sh`` makes
``bench/.venv-peers``; ``GRAPHCOST_PEERS_PYTHON`` overrides), run in a child process (``tests/onnx_peer_counts.py``);
those pairs are skipped, with the reason, when that interpreter is missing.

A pair that does not agree would be listed in ``GAPS`` with its reason, as a strict xfail. The module-hook
counters see how the torch code is written (``F.adaptive_avg_pool2d`` against ``nn.AdaptiveAvgPool2d``, ``x + y``);
the legacy exporter's scoped node names record it (``graphcost/conventions.py`` ``_module_calls``), and ptflops'
total is per sample (the LSTM's seq-first input makes its "batch" the sequence length), so all 16 pairs match.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import subprocess
import warnings
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.heavy

torch = pytest.importorskip("torch")
pytest.importorskip("fvcore")
pytest.importorskip("ptflops")
pytest.importorskip("thop")

from torch import nn  # noqa: E402

import graphcost  # noqa: E402
from graphcost.conventions import as_convention  # noqa: E402
from graphcost.export._torch import export_torch  # noqa: E402
from graphcost.models import reference as R  # noqa: E402

PEERS = ("torch", "fvcore", "ptflops", "thop")
ONNX_PEERS = ("onnx-tool", "onnxsim")
ROOT = Path(__file__).resolve().parent.parent
PEERS_PYTHON = os.environ.get("GRAPHCOST_PEERS_PYTHON", str(ROOT / "bench" / ".venv-peers" / "bin" / "python"))
MODELS = ("resnet18", "mobilenet_v2", "tiny_transformer", "lstm")
GAPS: dict[tuple[str, str], str] = {}  # (model, peer) -> why --as cannot match; none left on these models


class LSTMNet(nn.Module):
    """One LSTM layer (seq-first) and a linear head: the RNN reference."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.LSTM(32, 64)
        self.fc = nn.Linear(64, 10)

    def forward(self, x: Any) -> Any:
        y, _ = self.rnn(x)
        return self.fc(y)


def _model(name: str) -> tuple[Any, tuple[Any, ...], tuple[str, ...]]:
    if name == "lstm":
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            return LSTMNet().eval(), (torch.rand(7, 2, 32),), ("x",)
    args = R.example_inputs(name)
    return getattr(R, name)(), args, ("x",) if name in ("resnet18", "mobilenet_v2") else ("input_ids",)


def _peer(peer: str, model: Any, args: tuple[Any, ...]) -> float:
    quiet = contextlib.ExitStack()
    quiet.enter_context(contextlib.redirect_stdout(io.StringIO()))
    quiet.enter_context(contextlib.redirect_stderr(io.StringIO()))
    quiet.enter_context(warnings.catch_warnings())
    warnings.simplefilter("ignore")
    with quiet, torch.no_grad():
        if peer == "torch":
            from torch.utils.flop_counter import FlopCounterMode

            with FlopCounterMode(display=False) as mode:
                model(*args)
            return float(mode.get_total_flops())
        if peer == "fvcore":
            from fvcore.nn import FlopCountAnalysis

            f = FlopCountAnalysis(model, args).unsupported_ops_warnings(False).uncalled_modules_warnings(False)
            return float(f.total())
        if peer == "ptflops":
            import ptflops

            macs, _ = ptflops.get_model_complexity_info(
                model, tuple(args[0].shape), input_constructor=lambda _: args[0],
                                                        as_strings=False, print_per_layer_stat=False, verbose=False)
            return float(macs)
        import thop

        ops, _ = thop.profile(copy.deepcopy(model), inputs=args, verbose=False)
        return float(ops)


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[graphcost.Report, dict[str, float], int, Path]]:
    out = {}
    for name in MODELS:
        model, args, names = _model(name)
        path = Path(tmp_path_factory.mktemp("peers")) / f"{name}.onnx"
        export_torch(model, {n: a.numpy() for n, a in zip(names, args, strict=True)}, path, dynamo=False, opset=17,
                     keep_batchnorm=True)
        report = graphcost.analyze(path, fusion=False, memory=False, batchnorm=False)
        out[name] = (report, {p: _peer(p, model, args) for p in PEERS}, sum(p.numel() for p in model.parameters()),
                     path)
    return out


def _onnx_peers(path: Path) -> dict[str, int]:
    proc = subprocess.run([PEERS_PYTHON, str(ROOT / "tests" / "onnx_peer_counts.py"), str(path)], capture_output=True,
                          text=True, timeout=600, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"onnx peers failed on {path.name}: {proc.stderr.strip().splitlines()[-1:]}")
    counts: dict[str, int] = json.loads(proc.stdout.strip().splitlines()[-1])
    return counts


def _params() -> list[Any]:
    out = []
    for m in MODELS:
        for p in PEERS:
            reason = GAPS.get((m, p))
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            out.append(pytest.param(m, p, marks=marks, id=f"{m}-{p}"))
    return out


@pytest.mark.parametrize(("name", "peer"), _params())
def test_as_equals_the_peer(cases: dict[str, Any], name: str, peer: str) -> None:
    report, peers, _, _ = cases[name]
    assert as_convention(report, peer).total == peers[peer]  # the tool's own number, exactly


@pytest.mark.parametrize("name", MODELS)
def test_as_equals_the_onnx_peers(cases: dict[str, Any], name: str) -> None:
    if not Path(PEERS_PYTHON).is_file():
        pytest.skip(f"{PEERS_PYTHON} missing: run bench/peers_env.sh (onnx-tool 1.0.1, onnxsim 0.8.1)")
    report, _, _, path = cases[name]
    counts = _onnx_peers(path)
    for peer in ONNX_PEERS:
        assert as_convention(report, peer).total == counts[peer], peer  # the tool's own number, exactly


@pytest.mark.parametrize("name", MODELS)
def test_learnable_equals_torch_parameters(cases: dict[str, Any], name: str) -> None:
    report, _, torch_params, _ = cases[name]
    split = report.model.parameter_split
    assert split.learnable_count == torch_params  # model.parameters(): BN stats and zero states are buffers
    assert split.learnable_count + split.buffer_count == report.model.parameter_count


@pytest.mark.parametrize("name", MODELS)
def test_explain_rows_add_up(cases: dict[str, Any], name: str) -> None:
    report, _, _, _ = cases[name]
    for peer in (*PEERS, *ONNX_PEERS):
        r = as_convention(report, peer)
        assert sum(x.graphcost_flops for x in r.rows()) == report.totals.flops
        assert sum(x.tool for x in r.rows()) == r.total
