"""graphcost on paddle2onnx exports of PP-OCR's detector, recognizer and direction classifier (issue 10's acceptance).

Every test is ``heavy`` (``pytest -m heavy tests/test_paddle_exports.py``). The networks are built and exported by
``tests/paddle_exports.py`` in a child process under an interpreter with paddlepaddle and paddle2onnx
(``GRAPHCOST_PADDLE_PYTHON``, else ``.venv-paddle`` from ``.ci/paddle.sh``, else ``/tmp/pd-venv``), once per
session; the tests skip only when no such interpreter exists. Random weights, nothing downloaded.

paddle2onnx 2.1 names its dynamic dims ``DynamicDimension.0``, ``DynamicDimension.1``... . That text is outside
graphcost's dim grammar, so graphcost names each one by its opaque symbol (``DynamicDimension_0``): the names a
resolved shape may be written in, and the names ``dims=`` binds, are those.

What is checked, through the API and the CLI:

* no node of a standard domain is left without a cost, no tensor without a shape, and no dim the numbers assumed is
  anything but an input dim (``assert_no_unknown_standard_op`` / ``assert_resolved`` of the torch real exports);
* the MAC formula is written in the input dims only, and at a binding the bound analysis gives the formula's value;
* closed-form shapes at that binding: the detector's map is the input's size, the recognizers' sequence is W / 8
  (after SVTR on the map, or through the BiLSTM),
  the classifier's FC reads [N, 200] through its computed Reshape target;
* two processes give byte-identical JSON.
"""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path
from typing import Any

import paddle_exports as px
import pytest
from export_checks import assert_no_unknown_standard_op, sequence_values

pytestmark = pytest.mark.heavy



@functools.cache
def _missing() -> str | None:
    return px.paddle_missing()


@pytest.fixture(scope="session")
def exports(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The four exports, built once per session (one child process, about two minutes on 2 cores)."""
    missing = _missing()
    if missing:
        pytest.skip(missing)
    out = tmp_path_factory.mktemp("paddle_exports")
    px.build_all(out)
    return out


def _analyze(path: Path, **kwargs: Any) -> Any:
    import graphcost

    return graphcost.analyze(str(path), **kwargs)


def input_dims(path: Path) -> dict[str, str]:
    """graphcost's name for each named input dim (its text as the model wrote it, in the sanitised form
    :func:`graphcost._dims.parse_dim` gives a text outside the grammar) -> the model's text."""
    import onnx

    from graphcost._dims import parse_dim, to_text

    graph = onnx.load(str(path), load_external_data=False).graph
    return {to_text(parse_dim(d.dim_param)): d.dim_param
            for vi in graph.input for d in vi.type.tensor_type.shape.dim if d.dim_param}


def assert_resolved(r: Any, path: Path) -> None:
    """Every dim the numbers assumed is an input dim and every tensor of a node has a shape."""
    names = input_dims(path)
    left = [f"dim {d}" for d in r.defaulted_dims if d not in names]
    sequences = sequence_values(path)
    for n in r.nodes:
        left.extend(f"tensor {t.name} of {n.name} ({n.op_type})" for t in (*n.inputs, *n.outputs)
                    if t.name and t.shape is None and t.name not in sequences)
    assert not left, f"{len(left)} unresolved: {', '.join(left[:6])}"


# Where each network is bound (graphcost's dim names in input order: batch, then height/width as exported).
# The detector's H and W are multiples of 32 (its stride): the FPN's Add of x2-upsampled maps needs them. The
# recognizers' W is a multiple of 8 (conv1, blocks5 and the closing pool each halve it).
BINDINGS: dict[str, tuple[int, ...]] = {"det": (1, 640, 480), "rec": (2, 320), "rec_lstm": (2, 320), "cls": (3,)}


def _binding(path: Path, model: str) -> dict[str, int]:
    names = list(input_dims(path))
    assert len(names) == len(BINDINGS[model]), names
    return dict(zip(names, BINDINGS[model], strict=True))


@pytest.mark.parametrize("model", px.MODELS)
def test_every_op_costed_and_every_shape_resolved(model: str, exports: Path) -> None:
    import sympy

    path = exports / f"{model}.onnx"
    r = _analyze(path)
    assert_no_unknown_standard_op(r)
    assert_resolved(r, path)
    formula = sympy.sympify(r.totals.formulas["macs"])
    assert {s.name for s in formula.free_symbols} <= set(input_dims(path)), formula
    at = _binding(path, model)
    bound = _analyze(path, dims=at)
    assert not bound.defaulted_dims
    assert bound.totals.macs == int(formula.subs({sympy.Symbol(k): v for k, v in at.items()}))
    assert bound.totals.macs > r.totals.macs  # the unbound numbers took every dim as 1


def _at(shape: Any, binding: dict[str, int]) -> tuple[int, ...]:
    """A shape's dims evaluated at ``binding`` (a report keeps formulas in its tensors' shapes)."""
    from graphcost._dims import evaluate, parse_dim

    return tuple(int(evaluate(parse_dim(d) if isinstance(d, str) else d, binding)) for d in shape)


def _output_shape(r: Any, binding: dict[str, int]) -> tuple[int, ...]:
    (last,) = [n for n in r.nodes if any(t.name == "fetch_name_0" for t in n.outputs)]
    (out,) = [t for t in last.outputs if t.name == "fetch_name_0"]
    return _at(out.shape, binding)


def test_detector_map_has_the_input_size(exports: Path) -> None:
    path = exports / "det.onnx"
    n, h, w = BINDINGS["det"]
    at = _binding(path, "det")
    r = _analyze(path, dims=at)
    # backbone stride 32 -> FPN back up to stride 4 (x2 x2 x2 upsample, then x8/x4/x2 to the stride-4 map) ->
    # DB head: two ConvTranspose 2x2 stride 2 (x4): one shrink-map channel at the input's size
    assert _output_shape(r, at) == (n, 1, h, w)


@pytest.mark.parametrize("model", ["rec", "rec_lstm"])
def test_recognizer_sequence_is_width_over_8(model: str, exports: Path) -> None:
    path = exports / f"{model}.onnx"
    n, w = BINDINGS[model]
    at = _binding(path, model)
    r = _analyze(path, dims=at)
    # W: conv1 stride 2 (W/2), blocks5's (1, 2) stride (W/4), the closing 3x2 average pool (W/8); H 48 -> 1;
    # Im2Seq makes [N, W/8, C]; the CTC head's FC gives one score per class
    assert _output_shape(r, at) == (n, w // 8, px.REC_CLASSES)


def test_classifier_reshape_target_is_computed(exports: Path) -> None:
    """The ClsHead's ``reshape(x, [x.shape[0], x.shape[1]])`` exports as Reshape(x, Concat(...Slice(Shape(x))...)):
    the MatMul after it reads [N, 200] and is costed."""
    path = exports / "cls.onnx"
    (n,) = BINDINGS["cls"]
    at = _binding(path, "cls")
    r = _analyze(path, dims=at)
    (fc,) = [x for x in r.nodes if x.op_type == "MatMul"]
    channels = 200  # MobileNetV3-small x0.35's last conv: 576 * 0.35 = 201.6, rounded to a multiple of 8
    assert _at(fc.inputs[0].shape, at) == (n, channels)
    assert fc.macs == n * channels * 2  # one MAC per (image, input channel, class); two classes (0 / 180 degrees)


def _cli_json(path: Path) -> bytes:
    proc = subprocess.run([sys.executable, "-m", "graphcost", "analyze", str(path), "--format", "json"],
                          capture_output=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout


@pytest.mark.parametrize("model", px.MODELS)
def test_two_processes_give_the_same_bytes(model: str, exports: Path) -> None:
    path = exports / f"{model}.onnx"
    assert _cli_json(path) == _cli_json(path)
