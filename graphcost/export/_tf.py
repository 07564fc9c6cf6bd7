"""TensorFlow → ONNX through tf2onnx, from a Keras model, a ``tf.function`` (or plain callable), or a SavedModel.

Whatever the source, it is wrapped in one ``tf.function`` with an explicit ``input_signature`` (a ``None`` for each
dynamic dim: tf2onnx needs the signature, and Keras 3 models without one fail inside tf2onnx) and converted with
``tf2onnx.convert.from_function``. tf2onnx 1.17 stops at opset 18, so a higher opset is refused before it is called.

tf2onnx names dynamic dims ``unk__N`` and may suffix input names; the file gets the caller's input and dim names
back (``name_dims``). Keras BatchNormalization in inference mode is folded into the preceding Conv by tf2onnx's
optimizer, and NHWC convolutions come out as Transpose → Conv (NCHW) → Transpose.

A SavedModel is called through its ``serving_default`` signature (else its only one); its outputs, a dict, are
compared in sorted key order, which is the order tf2onnx writes them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from graphcost.models.zoo import require

from ._verify import ExportError, ExportResult, check_inputs, export_verified, name_dims

__all__ = ["TF2ONNX_MAX_OPSET", "export_tf", "saved_model_inputs"]

TF2ONNX_MAX_OPSET = 18  # tf2onnx 1.17.0: "Opset 19 is not supported yet"


def _require() -> None:
    require("tf")
    require("tf", "tf2onnx")


def _signature(loaded: Any, where: str) -> Any:
    sigs = dict(loaded.signatures)
    if "serving_default" in sigs:
        return sigs["serving_default"]
    if len(sigs) == 1:
        return next(iter(sigs.values()))
    raise ExportError(f"{where}: no serving_default signature (has {', '.join(sorted(sigs)) or 'none'})")


def _load_saved_model(path: str | os.PathLike[str]) -> Any:
    import tensorflow as tf

    where = str(path)
    if not (Path(path) / "saved_model.pb").is_file():
        raise ExportError(f"{where}: not a SavedModel directory (no saved_model.pb)")
    try:
        return tf.saved_model.load(where)
    except Exception as e:
        raise ExportError(f"{where}: cannot load the SavedModel: {str(e).strip().splitlines()[0]}") from e


def saved_model_inputs(path: str | os.PathLike[str]) -> dict[str, tuple[tuple[int | None, ...], np.dtype[Any]]]:
    """A SavedModel's serving inputs: name → (shape with None for unknown dims, numpy dtype), in signature order."""
    _require()
    loaded = _load_saved_model(path)
    sig = _signature(loaded, str(path))
    specs = sig.structured_input_signature[1]
    out: dict[str, tuple[tuple[int | None, ...], np.dtype[Any]]] = {}
    for name in sorted(specs):  # keyword-only signatures: tf2onnx and we order them by name
        spec = specs[name]
        if spec.shape.rank is None:
            raise ExportError(f"{path}: input {name} has unknown rank")
        out[name] = (tuple(spec.shape.as_list()), np.dtype(spec.dtype.as_numpy_dtype))
    return out


def _callable(source: Any, names: list[str]) -> tuple[Callable[..., Any], Any]:
    """A positional callable for ``source`` and the object to keep alive while it is used."""
    import keras
    import tensorflow as tf

    if isinstance(source, (str, os.PathLike)):
        loaded = _load_saved_model(source)
        sig = _signature(loaded, str(source))
        expected = sorted(sig.structured_input_signature[1])
        if sorted(names) != expected:
            raise ExportError(f"{source}: the SavedModel's inputs are {', '.join(expected)}, got {', '.join(names)}")
        return (lambda *xs: sig(**dict(zip(names, xs, strict=True)))), loaded
    if isinstance(source, keras.Model) or isinstance(source, keras.layers.Layer):
        if len(names) == 1:
            return (lambda x: source(x, training=False)), source
        return (lambda *xs: source(list(xs), training=False)), source
    if isinstance(source, tf.Module) and not callable(source):
        raise ExportError(f"a {type(source).__name__} is not callable; give a tf.function or a Keras model")
    if callable(source):
        return source, source
    raise ExportError(f"expected a Keras model, a tf.function, a callable or a SavedModel directory, "
                      f"got {type(source).__name__}")


def _flatten(value: Any) -> list[np.ndarray]:
    if isinstance(value, Mapping):
        return [a for k in sorted(value) for a in _flatten(value[k])]
    if isinstance(value, (list, tuple)):
        return [a for v in value for a in _flatten(v)]
    return [np.asarray(value.numpy() if hasattr(value, "numpy") else value)]


def export_tf(source: Any, example_inputs: Mapping[str, np.ndarray], path: str | os.PathLike[str], *,
              dynamic: Mapping[str, Mapping[int, str]] | None = None, opset: int = 18, verify: bool = True,
              rtol: float = 1e-4, atol: float = 1e-5) -> ExportResult:
    """Export a Keras model, a ``tf.function``/callable or a SavedModel directory (a path) to ``path``.

    The source is called with the inputs positionally, in ``example_inputs`` order (a SavedModel by keyword, with
    these names). ``dynamic`` names dims per input; None exports fixed shapes. Raises ExportError (nothing written)
    for opset > 18, a failed conversion or a mismatch in onnxruntime; FrameworkMissing without TF or tf2onnx.
    """
    if opset > TF2ONNX_MAX_OPSET:
        raise ExportError(f"opset {opset}: tf2onnx exports opset ≤ {TF2ONNX_MAX_OPSET} (use --opset 18)")
    _require()
    import tensorflow as tf

    inputs, dyn = check_inputs(example_inputs, dynamic)
    names = list(inputs)
    call, keep_alive = _callable(source, names)
    signature = tuple(
        tf.TensorSpec([None if axis in dyn.get(n, {}) else d for axis, d in enumerate(a.shape)],
                      tf.as_dtype(a.dtype), name=n)
        for n, a in inputs.items())
    fn = tf.function(lambda *xs: call(*xs), input_signature=signature, autograph=False)

    def reference(feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return _flatten(fn(*(tf.convert_to_tensor(feeds[n]) for n in names)))

    def produce(tmp: Path) -> None:
        import onnx
        import tf2onnx

        model_proto, _ = tf2onnx.convert.from_function(fn, input_signature=signature, opset=opset)
        name_dims(model_proto, inputs, dyn)
        onnx.save(model_proto, str(tmp))

    try:
        return export_verified(path, framework="tf", exporter="tf2onnx", opset=opset, produce=produce,
                               reference=reference, inputs=inputs, dynamic=dyn, verify=verify, rtol=rtol, atol=atol)
    finally:
        del keep_alive
