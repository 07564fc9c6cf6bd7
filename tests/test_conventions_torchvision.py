"""torchvision's published numbers, reproduced: ``--as torchvision`` equals each weights enum's ``_ops`` (GMACs,
3 published decimals) and the learnable parameters equal ``num_params`` exactly, on a representative subset of
the classification, quantized and segmentation models, with both exporters (the full list:
``bench/bench_torchvision_ops.py``, table in docs/conventions.md). Where the dynamo path's constant folding stores
values computed from parameters (maxvit_t, Swin), the difference is pinned in closed form instead.

Models are built with random weights (torchvision's own init, seed 0) and exported at their weights' published
size with BatchNorm kept, in a child process (``tests/tv_convention_exports.py``) run by the interpreter that can
import torchvision (``tests/real_exports.py``'s ``torchvision_python``); skipped only when none can.

torchvision's init leaves every BatchNorm's gamma/beta at ones/zeros, equal to the running variance/mean: the
legacy exporter merges those equal initializers and reads them through ``Identity`` copies, which the parameter
split counts once per copy (``graphcost/params.py``, ``merged``). A quantized model is BN-fused before
quantization, so its file holds one bias per folded channel where ``num_params`` (the float model's) counts gamma
and beta: there the learnable count equals the quantized model's own logical count, and the gap to
``num_params`` is that fold, checked against the float model in the child.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import real_exports as rx

import graphcost
from graphcost.conventions import as_convention

pytestmark = pytest.mark.heavy

CHILD = Path(__file__).resolve().parent / "tv_convention_exports.py"
CASES = (  # (module, name, exporter)
    ("classification", "resnet18", "legacy"),
    ("classification", "resnet18", "dynamo"),
    ("classification", "mobilenet_v3_small", "legacy"),
    ("classification", "efficientnet_b0", "legacy"),
    ("classification", "convnext_tiny", "legacy"),
    ("classification", "vit_b_16", "legacy"),
    ("classification", "swin_v2_t", "legacy"),  # relative_coords_table: a float buffer fed to a Linear
    ("classification", "swin_t", "legacy"),  # window attention (V1): analyzed since the front-door fix
    ("classification", "vit_b_16", "dynamo"),
    ("classification", "swin_t", "dynamo-raw"),  # its shift masks: ConstantOfShape zeros, buffers not weights
    ("quantization", "mobilenet_v3_large", "legacy"),
    ("segmentation", "lraspp_mobilenet_v3_large", "legacy"),
)


@pytest.fixture(scope="module")
def tv_python() -> str:
    why = rx.torchvision_missing()
    if why is not None:
        pytest.skip(why)
    return rx.torchvision_python()


def _export(python: str, module: str, name: str, exporter: str, out: Path) -> dict[str, Any]:
    import json
    import subprocess

    proc = subprocess.run([python, str(CHILD), module, name, exporter, str(out)], capture_output=True, text=True,
                          timeout=rx.EXPORT_TIMEOUT_S, check=False, cwd=out.parent)
    if proc.returncode != 0 or not out.is_file():
        tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
        raise RuntimeError(f"export of {module}/{name} ({exporter}) failed (exit {proc.returncode}): {tail}")
    facts: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return facts


@pytest.mark.parametrize(("module", "name", "exporter"), CASES, ids=[f"{n}-{e}" for _, n, e in CASES])
def test_published_numbers(tv_python: str, tmp_path: Path, module: str, name: str, exporter: str) -> None:
    out = tmp_path / f"{name}.onnx"
    facts = _export(tv_python, module, name, exporter, out)
    report = graphcost.analyze(out, fusion=False, memory=False, batchnorm=False)
    ours = as_convention(report, "torchvision")
    assert ours.unknown_nodes == 0
    assert round(ours.total / 1e9, 3) == facts["ops"]  # conv/linear/matmul MACs, in GMAC to 3 decimals
    split = report.model.parameter_split
    assert split.learnable_count + split.buffer_count == split.stored_count + split.merged_count
    if module == "quantization":
        assert split.learnable_count == facts["model_params"]  # packed weights' elements + biases, exactly
        assert facts["float_params"] == facts["num_params"]  # num_params is the float (unfused) model's count
        assert split.learnable_count < facts["num_params"]  # the fold: 2C of gamma+beta became C of bias per BN
    else:
        assert split.learnable_count == facts["num_params"]  # model.parameters(), exactly


def test_dynamo_folding_stores_the_gathered_position_bias(tv_python: str, tmp_path: Path) -> None:
    """maxvit_t through the dynamo path: each attention's bias is its learnable relative-position table
    ((2·7−1)² rows × h heads) gathered by a constant index buffer (49·49 entries); onnxscript's ``fold_constants``
    evaluates that Gather and stores the result (h × 49 × 49) in place of the table. The file then holds more
    float weights than the model has parameters, by a closed form: an exporter artifact, not a graphcost count
    (the legacy export keeps the table and matches ``num_params``). The MACs are unchanged."""
    out = tmp_path / "maxvit_t.onnx"
    facts = _export(tv_python, "classification", "maxvit_t", "dynamo", out)
    report = graphcost.analyze(out, fusion=False, memory=False, batchnorm=False)
    assert round(as_convention(report, "torchvision").total / 1e9, 3) == facts["ops"]
    heads = 2 * (2 * 2 + 2 * 4 + 5 * 8 + 2 * 16)  # 2 attentions (window, grid) per block; blocks (2,2,5,2) with
    #   channels (64,128,256,512) / head_dim 32 = heads (2,4,8,16): 168 attention heads in all
    per_head = 49 * 49 - 13 * 13  # the stored gathered bias (7²·7² per head) less the table it replaced (13² per head)
    assert report.model.parameter_split.learnable_count == facts["num_params"] + heads * per_head  # + 374,976
