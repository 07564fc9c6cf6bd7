"""graphcost against the published reference models (ResNet-18/50, MobileNetV2, BERT-base, GPT-2 small).

The ``heavy`` tests export each model from ``models.reference`` with torch's legacy exporter into ``tmp_path``
(BERT/GPT-2 exports are 0.4-0.7 GB; peak RSS about 3 GB per test) and check graphcost's MAC count (conv + matmul
multiply-accumulates, bias excluded) against the well-known totals, and for dynamic exports the exact symbolic
formula in ``batch`` and ``seq``. Run them with ``pytest -m heavy``; they need torch (``pip install -e .[torch]``).

The fast tests only need onnx and onnxruntime: the tiny models shipped in ``models/`` load, pass the checker and run.
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import numpy as np
import pytest
import sympy

ROOT = Path(__file__).resolve().parent.parent
MODELS_DIR = ROOT / "models"
if str(ROOT) not in sys.path:  # `models` is a top-level folder of the checkout, not part of the installed package
    sys.path.insert(0, str(ROOT))

BATCH = sympy.Symbol("batch", integer=True, nonnegative=True)
SEQ = sympy.Symbol("seq", integer=True, nonnegative=True)
_OURS = {"batch": BATCH, "seq": SEQ}

# Published totals (torchvision model docs / HF configs; see models/reference.py), batch 1.
EXPECTED_MACS = {
    "resnet18": 1_814_073_344,  # 224x224
    "resnet50": 4_089_184_256,  # 224x224, torchvision v1.5
    "mobilenet_v2": 300_774_272,  # 224x224
    "bert_base": 11_174_215_680,  # seq 128, with pooler
    "gpt2_small": 16_114_089_984,  # seq 128, with the tied LM head
}


def _resnet50_macs_per_image() -> int:
    """ResNet-50 v1.5 conv+fc MACs for one 224x224 image, from the architecture alone."""

    def bottleneck_stage(h_in: int, c_in: int, planes: int, blocks: int, stride: int) -> int:
        h = h_in // stride  # output side; v1.5 puts the stride on the 3x3, so conv1 runs at h_in
        out = 4 * planes
        first = (
            h_in * h_in * planes * c_in  # conv1 1x1 c_in -> planes, at the input resolution
            + h * h * planes * planes * 9  # conv2 3x3 planes -> planes (strided)
            + h * h * out * planes  # conv3 1x1 planes -> 4*planes
            + h * h * out * c_in  # downsample 1x1 c_in -> 4*planes (strided)
        )
        rest = (blocks - 1) * h * h * (planes * out + planes * planes * 9 + out * planes)  # 1x1, 3x3, 1x1
        return first + rest

    return (
        112 * 112 * 64 * 3 * 7 * 7  # stem conv 7x7/2, 3 -> 64
        + bottleneck_stage(56, 64, 64, 3, 1)  # layer1, 56x56 (after the stem max-pool)
        + bottleneck_stage(56, 256, 128, 4, 2)  # layer2, -> 28x28
        + bottleneck_stage(28, 512, 256, 6, 2)  # layer3, -> 14x14
        + bottleneck_stage(14, 1024, 512, 3, 2)  # layer4, -> 7x7
        + 2048 * 1000  # fc
    )


def _expected_formula(name: str) -> sympy.Expr:
    """Closed-form MACs of the dynamic export of ``name`` in the dims ``batch`` (and ``seq``)."""
    if name == "resnet50":
        return BATCH * _resnet50_macs_per_image()  # fixed 224x224 image; only batch is dynamic
    if name == "gpt2_small":
        d, n_layer, vocab = 768, 12, 50257
        per_token = n_layer * (
            d * 3 * d  # c_attn: Gemm 768 -> 2304 (q, k, v)
            + d * d  # attn c_proj: Gemm 768 -> 768
            + 2 * d * 4 * d  # mlp c_fc 768 -> 3072 and c_proj 3072 -> 768
        ) + d * vocab  # tied LM head: MatMul 768 -> 50257
        attention = n_layer * 2 * d * SEQ**2  # per layer: q@k^T and probs@v, 12 heads x 64 x seq x seq each
        return BATCH * (SEQ * per_token + attention)
    if name == "bert_base":
        d, n_layer, ffn = 768, 12, 3072
        per_token = n_layer * (
            4 * d * d  # query, key, value and attention-output dense: 768 -> 768 each
            + 2 * d * ffn  # intermediate 768 -> 3072 and output 3072 -> 768
        )
        attention = n_layer * 2 * d * SEQ**2  # per layer: q@k^T and probs@v
        pooler = d * d  # pooler dense on the first token only: no seq factor
        return BATCH * (SEQ * per_token + attention + pooler)
    raise KeyError(name)


def _as_our_expr(formula: object) -> sympy.Expr:
    """graphcost's formula (a string or a sympy expression) with its symbols mapped, by name, onto ours."""
    if isinstance(formula, sympy.Basic):
        expr = formula
    else:
        expr = sympy.sympify(str(formula), locals=dict(_OURS))
    return expr.xreplace({s: _OURS.get(s.name, s) for s in expr.free_symbols})


def _assert_formula(formula: object, expected: sympy.Expr) -> None:
    expr = _as_our_expr(formula)
    assert {s.name for s in expr.free_symbols} == {s.name for s in expected.free_symbols}, expr
    # Exact identity as polynomials ...
    assert sympy.expand(expr - expected) == 0, f"got {sympy.expand(expr)}, expected {sympy.expand(expected)}"
    # ... the same structure term by term (degree 1 in batch, 2 in seq for the transformers) ...
    gens = sorted(expected.free_symbols, key=lambda s: s.name)
    assert sympy.Poly(expr, *gens).as_dict() == sympy.Poly(expected, *gens).as_dict()
    # ... and the same numbers at two points.
    for b, s in ((1, 128), (3, 77)):
        point = {BATCH: b, SEQ: s}
        assert int(expr.subs(point)) == int(expected.subs(point))


def test_closed_forms_match_the_published_totals() -> None:
    assert _resnet50_macs_per_image() == EXPECTED_MACS["resnet50"]
    for name in ("gpt2_small", "bert_base"):
        assert _expected_formula(name).subs({BATCH: 1, SEQ: 128}) == EXPECTED_MACS[name]


# ---------------------------------------------------------------------------------------------------------------
# heavy: real exports
# ---------------------------------------------------------------------------------------------------------------


def _export(name: str, path: Path, *, dynamic: bool, verify: bool = False) -> Path:
    pytest.importorskip("torch")
    from graphcost.models.export import export_reference, verify_export
    from graphcost.models.reference import build

    model = build(name)
    export_reference(name, path, dynamic=dynamic, model=model)
    if verify:  # onnxruntime agrees with torch (relative diff <= 1e-3)
        verify_export(name, path, model)
    del model
    gc.collect()
    return path


@pytest.mark.heavy
def test_reference_table_matches_torch_flop_counter() -> None:
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    from graphcost.models.reference import MODELS, REFERENCE, build, example_inputs, param_count

    assert {name: macs for name, (_, macs) in REFERENCE.items()} == EXPECTED_MACS
    for name, spec in MODELS.items():
        model = build(name)
        assert param_count(model) == spec.params, name
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(*example_inputs(name))
        assert counter.get_total_flops() == 2 * spec.macs, name  # the counter reports 2 FLOPs per MAC, no bias
        del model
        gc.collect()


@pytest.mark.heavy
@pytest.mark.parametrize("name", list(EXPECTED_MACS))
def test_static_export_macs(name: str, tmp_path: Path) -> None:
    import graphcost

    path = _export(name, tmp_path / f"{name}.onnx", dynamic=False, verify=True)
    try:
        r = graphcost.analyze(str(path))
        assert r.totals.macs == EXPECTED_MACS[name]
    finally:
        path.unlink(missing_ok=True)


@pytest.mark.heavy
@pytest.mark.parametrize("name", ["resnet50", "gpt2_small", "bert_base"])
def test_dynamic_export_macs_and_formula(name: str, tmp_path: Path) -> None:
    import graphcost

    path = _export(name, tmp_path / f"{name}_dynamic.onnx", dynamic=True)
    dims = {"batch": 1, "seq": 128} if name != "resnet50" else {"batch": 1}
    try:
        r = graphcost.analyze(str(path), dims=dims)
        assert r.totals.macs == EXPECTED_MACS[name]
        _assert_formula(r.totals.formulas["macs"], _expected_formula(name))
    finally:
        path.unlink(missing_ok=True)


@pytest.mark.heavy
def test_shipped_models_are_reproducible() -> None:
    pytest.importorskip("torch")
    from graphcost.models.build_shipped import main

    assert main(["--check", "--out-dir", str(MODELS_DIR)]) == 0


# ---------------------------------------------------------------------------------------------------------------
# fast: the shipped tiny models
# ---------------------------------------------------------------------------------------------------------------

SHIPPED = {
    # file -> (input name, input shapes to run, expected output shape for each)
    "tiny_cnn.onnx": ("input", [((1, 3, 32, 32), (1, 10))]),
    "tiny_transformer.onnx": ("input_ids", [((1, 16), (1, 16, 128)), ((3, 7), (3, 7, 128))]),
}


@pytest.mark.parametrize("filename", list(SHIPPED))
def test_shipped_model_loads_and_runs(filename: str) -> None:
    import onnx
    import onnxruntime as ort

    path = MODELS_DIR / filename
    assert path.stat().st_size < 1_000_000
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version == 17

    input_name, runs = SHIPPED[filename]
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    assert [i.name for i in sess.get_inputs()] == [input_name]
    rng = np.random.default_rng(0)
    for in_shape, out_shape in runs:
        if input_name == "input_ids":
            feed = rng.integers(0, 128, size=in_shape, dtype=np.int64)
        else:
            feed = rng.standard_normal(in_shape, dtype=np.float32)
        (out,) = sess.run(None, {input_name: feed})
        assert out.shape == out_shape
        assert np.isfinite(out).all()


def test_shipped_transformer_dims_are_named() -> None:
    import onnx

    model = onnx.load(str(MODELS_DIR / "tiny_transformer.onnx"))
    dims = [d.dim_param or d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["batch", "seq"]


@pytest.mark.parametrize(
    ("filename", "dims", "expected"),
    [
        ("tiny_cnn.onnx", None, 6_340_928),  # 4 convs (442,368 + 2x2,359,296 + 1,179,648) + fc 32x10
        ("tiny_transformer.onnx", {"batch": 1, "seq": 16}, 1_769_472),
    ],
)
def test_shipped_model_macs(filename: str, dims: dict[str, int] | None, expected: int) -> None:
    import graphcost

    if not hasattr(graphcost, "analyze"):
        pytest.skip("graphcost.analyze is not available yet")
    path = str(MODELS_DIR / filename)
    r = graphcost.analyze(path, dims=dims) if dims else graphcost.analyze(path)
    assert r.totals.macs == expected
    if filename == "tiny_transformer.onnx":
        d, vocab = 64, 128
        per_token = 2 * (d * 3 * d + d * d + 2 * d * 4 * d) + d * vocab  # 2 blocks: qkv, proj, fc1+fc2; LM head
        attention = 2 * 2 * d * SEQ**2  # 2 blocks x (q@k^T + probs@v), 4 heads x 16 x seq x seq each
        _assert_formula(r.totals.formulas["macs"], BATCH * (SEQ * per_token + attention))
