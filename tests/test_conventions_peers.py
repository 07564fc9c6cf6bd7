"""``--as X`` against X itself: torch's FlopCounterMode, fvcore, ptflops and thop run on the torch reference models
(``models/reference.py``) and on a small LSTM, and graphcost's convention tables run on the exports
(legacy exporter, BatchNorm kept so that the BN terms stay in the file). Exact equality, no tolerance.

A pair that does not agree is listed in ``GAPS`` with its reason, as a strict xfail: the module-hook counters see
how the torch code is written (``F.adaptive_avg_pool2d`` against ``nn.AdaptiveAvgPool2d``, ``x + y``), which
no ONNX file records.
"""

from __future__ import annotations

import contextlib
import copy
import io
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
from models import reference as R  # noqa: E402

PEERS = ("torch", "fvcore", "ptflops", "thop")
MODELS = ("resnet18", "mobilenet_v2", "tiny_transformer", "lstm")
GAPS = {
    ("resnet18", "ptflops"): "ptflops' hooks count the ResNet block differently from its ONNX nodes (not yet traced)",
    ("tiny_transformer", "ptflops"): "ptflops patches torch.matmul/Tensor.add but not `@` or `+` (not yet traced)",
    ("lstm", "ptflops"): "ptflops' nn.LSTM hook reads (batch, seq) from a seq-first input (not yet traced)",
    ("mobilenet_v2", "thop"): "torchvision's MobileNetV2 pools with F.adaptive_avg_pool2d, which thop's module "
                              "hooks do not see; the ONNX GlobalAveragePool cannot say which was used",
}


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
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[graphcost.Report, dict[str, float], int]]:
    out = {}
    for name in MODELS:
        model, args, names = _model(name)
        path = Path(tmp_path_factory.mktemp("peers")) / f"{name}.onnx"
        export_torch(model, {n: a.numpy() for n, a in zip(names, args, strict=True)}, path, dynamo=False, opset=17,
                     keep_batchnorm=True)
        report = graphcost.analyze(path, fusion=False, memory=False, batchnorm=False)
        out[name] = (report, {p: _peer(p, model, args) for p in PEERS}, sum(p.numel() for p in model.parameters()))
    return out


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
    report, peers, _ = cases[name]
    assert as_convention(report, peer).total == peers[peer]  # the tool's own number, exactly


@pytest.mark.parametrize("name", MODELS)
def test_learnable_equals_torch_parameters(cases: dict[str, Any], name: str) -> None:
    report, _, torch_params = cases[name]
    split = report.model.parameter_split
    assert split.learnable_count == torch_params  # model.parameters(): BN stats and zero states are buffers
    assert split.learnable_count + split.buffer_count == report.model.parameter_count


@pytest.mark.parametrize("name", MODELS)
def test_explain_rows_add_up(cases: dict[str, Any], name: str) -> None:
    report, _, _ = cases[name]
    for peer in PEERS:
        r = as_convention(report, peer)
        assert sum(x.graphcost_flops for x in r.rows()) == report.totals.flops
        assert sum(x.tool for x in r.rows()) == r.total
