"""Real quantized exports: torch models (LSTM, GRU, attention, CNN) exported with the legacy exporter, then
quantized by onnxruntime's own quantizer (``quantize_dynamic``: DynamicQuantizeLSTM, MatMulInteger,
DynamicQuantizeLinear, ConvInteger; ``quantize_static``: QDQ and QOperator) and, for the CNN, optimized by
onnxruntime at ORT_ENABLE_ALL (NHWC QLinearConv, NhwcMaxPool).

Every graph must analyze with no node of any domain left without a cost, every shape resolved (numbers, or
formulas in the graph inputs' dims), and MACs equal to the float model's closed form: quantizing changes the
arithmetic's type, not the number of products. Heavy: each case exports and quantizes a model (a few seconds).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import third_party_models as tpm

pytestmark = pytest.mark.heavy

SEQ, BATCH, INPUT, HIDDEN, CLASSES = 7, 2, 16, 32, 10
WIDTH, HEADS = 32, 4
BIND = {"seq": 5, "batch": 3, "h": 16, "w": 16}
FUNCTIONS = {"floor", "ceiling", "Min", "Max", "Mod", "min", "max"}


def _lstm_macs(d: Mapping[str, int], *, layers: int = 1, dirs: int = 1) -> int:
    """The float LSTM layers' MACs: seq·batch·dirs cells of (input + hidden)·4·hidden per layer."""
    cells = d["seq"] * d["batch"] * dirs
    first = cells * (INPUT + HIDDEN) * 4 * HIDDEN  # input + recurrent projections, 4 gates
    rest = (layers - 1) * cells * (dirs * HIDDEN + HIDDEN) * 4 * HIDDEN  # later layers read dirs·hidden
    return first + rest


def _classifier(d: Mapping[str, int], features: int) -> int:
    return d["seq"] * d["batch"] * features * CLASSES  # the Linear on every step's output


def _models() -> dict[str, tuple[Any, tuple[Any, ...], dict[str, dict[int, str]], Callable[[Mapping[str, int]], int]]]:
    import torch

    class Recurrent(torch.nn.Module):
        def __init__(self, cell: type[torch.nn.Module], layers: int = 1, bidirectional: bool = False) -> None:
            super().__init__()
            self.rnn = cell(INPUT, HIDDEN, num_layers=layers, bidirectional=bidirectional)  # type: ignore[call-arg]
            self.fc = torch.nn.Linear(HIDDEN * (2 if bidirectional else 1), CLASSES)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y, _ = self.rnn(x)
            return self.fc(y)

    class Attention(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv, self.out = torch.nn.Linear(WIDTH, 3 * WIDTH), torch.nn.Linear(WIDTH, WIDTH)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, _ = x.shape
            q, k, v = self.qkv(x).reshape(b, t, 3, HEADS, WIDTH // HEADS).permute(2, 0, 3, 1, 4)
            p = torch.softmax(q @ k.transpose(-1, -2) / (WIDTH // HEADS) ** 0.5, -1)
            return self.out((p @ v).transpose(1, 2).reshape(b, t, WIDTH))

    class Cnn(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1, self.c2 = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.Conv2d(8, 8, 3, padding=1)
            self.fc = torch.nn.Linear(8, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.nn.functional.max_pool2d(torch.relu(self.c1(x)), 2)
            y = torch.sigmoid(self.c2(y)) + y
            return self.fc(y.mean((2, 3)))

    torch.manual_seed(0)
    seq_major = {"x": {0: "seq", 1: "batch"}, "y": {0: "seq", 1: "batch"}}
    x_seq = (torch.randn(SEQ, BATCH, INPUT),)
    gru_macs = lambda d: d["seq"] * d["batch"] * (INPUT + HIDDEN) * 3 * HIDDEN + _classifier(d, HIDDEN)  # noqa: E731
    attn_macs = lambda d: d["batch"] * (  # noqa: E731
        d["seq"] * (WIDTH * 3 * WIDTH + WIDTH * WIDTH)  # QKV and output projections
        + 2 * d["seq"] ** 2 * WIDTH)  # Q·K^T and P·V over all heads
    cnn_macs = lambda d: d["batch"] * (  # noqa: E731
        16 * 16 * 8 * 3 * 9  # conv1 at 16×16
        + 8 * 8 * 8 * 8 * 9  # conv2 at 8×8 after the 2×2 pool
        + 8 * 4)  # the classifier
    return {
        "lstm": (Recurrent(torch.nn.LSTM), x_seq, seq_major, lambda d: _lstm_macs(d) + _classifier(d, HIDDEN)),
        "bilstm2": (Recurrent(torch.nn.LSTM, layers=2, bidirectional=True), x_seq, seq_major,
                    lambda d: _lstm_macs(d, layers=2, dirs=2) + _classifier(d, 2 * HIDDEN)),
        "gru": (Recurrent(torch.nn.GRU), x_seq, seq_major, gru_macs),
        "attention": (Attention(), (torch.randn(BATCH, SEQ, WIDTH),),
                      {"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}}, attn_macs),
        "cnn": (Cnn(), (torch.randn(BATCH, 3, 16, 16),), {"x": {0: "batch"}, "y": {0: "batch"}}, cnn_macs),
    }


@pytest.fixture(scope="module")
def models() -> dict[str, Any]:
    pytest.importorskip("torch")
    pytest.importorskip("onnxruntime.quantization")
    return _models()


def _export(models: Mapping[str, Any], name: str, folder: Path) -> Path:
    import torch

    model, args, dims, _ = models[name]
    path = folder / f"{name}.onnx"
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(model.eval(), args, str(path), dynamo=False, opset_version=17, input_names=["x"],
                          output_names=["y"], dynamic_axes=dims)
    return path


def _analyze(path: Path, dims: set[str]) -> Any:
    import graphcost

    return graphcost.analyze(str(path), dims={k: v for k, v in BIND.items() if k in dims})


def _input_dims(models: Mapping[str, Any], name: str) -> set[str]:
    return {d for axes in models[name][2].values() for d in axes.values()}


def _assert_complete(r: Any, input_dims: set[str]) -> None:
    """No node without a cost, and every output shape in numbers or formulas of the input dims."""
    unknown = [f"{n.domain or 'ai.onnx'}::{n.op_type} {n.name}: {n.unknown_reason}" for n in r.nodes
               if n.flops is None]
    assert not unknown, unknown[:5]
    assert r.totals.unknown_nodes == 0 and not r.coverage.unknown_ops
    unresolved = []
    for n in r.nodes:
        for o in n.outputs:
            if o.shape is None:
                unresolved.append((n.name, o.name, None))
                continue
            for d in o.shape:
                names = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", str(d))) if not isinstance(d, int) else set()
                if names - input_dims - FUNCTIONS:
                    unresolved.append((n.name, o.name, o.shape))
                    break
    assert not unresolved, unresolved[:5]


def _ops(path: Path) -> set[str]:
    import onnx

    return {f"{n.domain}::{n.op_type}" if n.domain else n.op_type for n in onnx.load(str(path)).graph.node}


EXPECTED_OPS = {
    ("lstm", "dynamic"): {"com.microsoft::DynamicQuantizeLSTM", "MatMulInteger", "DynamicQuantizeLinear"},
    ("bilstm2", "dynamic"): {"com.microsoft::DynamicQuantizeLSTM"},
    ("gru", "dynamic"): {"MatMulInteger", "DynamicQuantizeLinear"},
    ("attention", "dynamic"): {"MatMulInteger", "DynamicQuantizeLinear"},
    ("attention", "qoperator"): {"QLinearMatMul", "com.microsoft::QLinearSoftmax"},
    ("cnn", "dynamic"): {"ConvInteger", "MatMulInteger"},
    ("cnn", "qdq"): {"QuantizeLinear", "DequantizeLinear"},
    ("cnn", "qoperator"): {"QLinearConv", "com.microsoft::QLinearSigmoid", "com.microsoft::QLinearAdd"},
    ("cnn", "qoperator-all"): {"com.microsoft::QLinearConv", "com.microsoft::NhwcMaxPool"},
}
CASES = [(m, mode) for m in ("lstm", "bilstm2", "gru", "attention", "cnn") for mode in ("dynamic", "qdq", "qoperator")]
CASES.append(("cnn", "qoperator-all"))


@pytest.mark.parametrize(("name", "mode"), CASES, ids=[f"{m}-{mode}" for m, mode in CASES])
def test_quantized_export(name: str, mode: str, models: dict[str, Any], tmp_path: Path) -> None:
    src = _export(models, name, tmp_path)
    quant_mode = mode.removesuffix("-all")
    path = tpm.quantize(src, tmp_path / f"{name}_{quant_mode}.onnx", quant_mode, dims=BIND)
    if mode.endswith("-all"):
        path = tpm.ort_optimize(path, tmp_path / f"{name}_{mode}.onnx", "all")
    missing = EXPECTED_OPS.get((name, mode), set()) - _ops(path)
    assert not missing, f"the quantizer did not write {missing}"
    input_dims = _input_dims(models, name)
    r = _analyze(path, input_dims)
    _assert_complete(r, input_dims)
    closed_form = models[name][3]
    assert r.totals.macs == closed_form(BIND), (r.totals.macs, closed_form(BIND))


@pytest.mark.parametrize("name", ["lstm", "bilstm2"])
def test_dynamic_quantize_lstm_macs_equal_the_float_lstm(name: str, models: dict[str, Any], tmp_path: Path) -> None:
    """Node by node: each DynamicQuantizeLSTM has the MACs of the float LSTM it replaced (same closed form)."""
    src = _export(models, name, tmp_path)
    path = tpm.quantize(src, tmp_path / f"{name}_dynamic.onnx", "dynamic", dims=BIND)
    dims = _input_dims(models, name)
    float_lstm = [n.macs for n in _analyze(src, dims).nodes if n.op_type == "LSTM"]
    quant_lstm = [n.macs for n in _analyze(path, dims).nodes if n.op_type == "DynamicQuantizeLSTM"]
    assert len(float_lstm) == len(quant_lstm) >= 1
    assert sorted(float_lstm) == sorted(quant_lstm)
    layers, dirs = (2, 2) if name == "bilstm2" else (1, 1)
    assert sum(quant_lstm) == _lstm_macs(BIND, layers=layers, dirs=dirs)
