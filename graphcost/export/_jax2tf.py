"""JAX → TensorFlow → ONNX through jax2tf's non-native lowering and tf2onnx.

The route is a legacy one and kept only for code that already depends on it; new exports should use jax2onnx
(the ``[jax]`` extra). It works with exactly one set of flags, and only up to jax 0.7.1:

    jax2tf.convert(f, native_serialization=False, enable_xla=False)   # with_gradient stays True

- native serialization (the default, and the only mode from jax 0.7.2 on) gives one ``XlaCallModule`` op,
  which tf2onnx cannot convert;
- ``enable_xla=True`` gives ``XlaDotV2``/``XlaConvV2``, which tf2onnx passes through and ONNX Runtime rejects;
- ``with_gradient=False`` wraps outputs in ``PreventGradient``, which ONNX Runtime rejects too.

That jax cannot share an environment with jax2onnx, so the ``[jax2tf]`` extra lives in a venv of its own
(``.ci/jax2tf.sh``). Nothing here imports jax, tensorflow or tf2onnx before :func:`export_jax2tf` is called.

The exported model is checked in ONNX Runtime against JAX before anything is written: at the example shapes and,
when dims are dynamic, once more with every named dim one larger. The file is written to a temporary name in the
target folder and renamed, so a failed export leaves nothing behind.
"""

from __future__ import annotations

import importlib.util
import os
import re
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import onnx

__all__ = ["EXPORTER", "LAST_JAX", "MAX_OPSET", "Jax2TfMismatch", "Jax2TfResult", "export_jax2tf"]

EXPORTER = "jax2tf+tf2onnx"
MAX_OPSET = 18  # tf2onnx 1.17 stops at opset 18 ("Opset 19 is not supported yet")
LAST_JAX = (0, 7, 1)  # from jax 0.7.2 on jax2tf ignores native_serialization=False (export-paths.md §3)
_INSTALL = "pip install 'graphcost[jax2tf]' in a separate environment"
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TF_NAME = re.compile(r"^[A-Za-z0-9.][A-Za-z0-9_.\-/]*$")  # what TensorFlow accepts as a placeholder name
_SIMPLE_DIM = re.compile(r"^[A-Za-z0-9_ +*\-]+$")  # sums and products of named dims; graphcost parses these


class Jax2TfMismatch(ValueError):
    """ONNX Runtime's outputs differ from JAX's beyond the tolerance (or in shape, dtype or count)."""


@dataclass(frozen=True)
class Jax2TfResult:
    """One written, checked export.

    ``max_abs_diff`` is the largest ``|onnx - jax|`` over all outputs and checked shapes; ``max_rel_diff`` the
    largest ``|onnx - jax| / |jax|`` over elements with ``|jax| > atol`` (smaller ones are judged by ``atol``
    alone). Both are NaN when ``verify=False``. ``seconds`` is the wall time of the whole export.
    """

    path: Path
    exporter: str
    opset: int
    nodes: int
    max_abs_diff: float
    max_rel_diff: float
    seconds: float


def export_jax2tf(
    apply: Callable[..., Any],
    params: Any,
    example_inputs: dict[str, np.ndarray],
    path: str | os.PathLike[str],
    *,
    dynamic: dict[str, dict[int, str]] | None = None,
    opset: int = 18,
    verify: bool = True,
    rtol: float = 1e-4,
    atol: float = 1e-5,
) -> Jax2TfResult:
    """Export ``apply(params, *inputs)`` to ONNX at ``path`` through jax2tf and tf2onnx.

    ``params`` is any JAX pytree of arrays; it becomes non-trainable ``tf.Variable``s and so ONNX initializers.
    ``example_inputs`` maps each graph input's name to an example array, in ``apply``'s argument order.
    ``dynamic`` names the dims left free, e.g. ``{"x": {0: "batch"}}``: jax2tf traces them symbolically
    (``polymorphic_shapes``), the TF signature leaves them ``None`` and the ONNX inputs carry the names.
    Raises :class:`Jax2TfMismatch` (a ``ValueError``) when ONNX Runtime and JAX disagree.
    """
    start = time.perf_counter()
    path = Path(path)
    inputs = _check_inputs(example_inputs)
    dyn = _check_dynamic(dynamic or {}, inputs)
    if not 7 <= opset <= MAX_OPSET:
        raise ValueError(f"opset {opset} is not supported by the jax2tf route: tf2onnx exports opsets 7 to {MAX_OPSET}")
    if not path.parent.is_dir():
        raise FileNotFoundError(f"cannot write {path}: folder {path.parent} does not exist")
    _require_jax2tf()

    model = _convert(apply, params, inputs, dyn, opset)
    data = model.SerializeToString()
    max_abs = max_rel = float("nan")
    if verify:
        max_abs, max_rel = _check_against_jax(data, apply, params, inputs, dyn, rtol, atol)
    _write_atomically(path, data)
    opset_written = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), opset)
    return Jax2TfResult(path, EXPORTER, opset_written, len(model.graph.node), max_abs, max_rel,
                        time.perf_counter() - start)


# --------------------------------------------------------------------------- argument checks


def _check_inputs(example_inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    if not example_inputs:
        raise ValueError("example_inputs is empty: give one example array per graph input")
    inputs: dict[str, np.ndarray] = {}
    for name, value in example_inputs.items():
        if not isinstance(name, str) or not _TF_NAME.match(name):
            raise ValueError(f"input name {name!r} is not a valid TensorFlow tensor name (letters, digits, _ . - /)")
        inputs[name] = np.asarray(value)
    return inputs


def _check_dynamic(
    dynamic: Mapping[str, Mapping[int, str]], inputs: Mapping[str, np.ndarray]
) -> dict[str, dict[int, str]]:
    """Validate ``dynamic`` and normalise negative axes. A name used twice means the dims are equal."""
    out: dict[str, dict[int, str]] = {}
    sizes: dict[str, tuple[int, str]] = {}  # dim name -> (example size, where it was first seen)
    for name, axes in dynamic.items():
        if name not in inputs:
            raise ValueError(f"dynamic names input {name!r}, which is not in example_inputs ({', '.join(inputs)})")
        x = inputs[name]
        out[name] = {}
        for axis, dim in axes.items():
            if not -x.ndim <= axis < x.ndim:
                raise ValueError(f"dynamic axis {axis} of input {name!r} is out of range for its rank {x.ndim}")
            if not isinstance(dim, str) or not _IDENT.match(dim):
                raise ValueError(f"dynamic dim name {dim!r} of input {name!r} must be an identifier, e.g. 'batch'")
            axis %= x.ndim
            size = int(x.shape[axis])
            seen = sizes.setdefault(dim, (size, f"{name}[{axis}]"))
            if seen[0] != size:
                raise ValueError(f"dim {dim!r} is {seen[0]} at {seen[1]} but {size} at {name}[{axis}] in the examples")
            out[name][axis] = dim
    return out


def _require_jax2tf() -> None:
    """Fail in one line, before the slow imports, when this environment cannot run the route."""
    try:
        version = metadata.version("jax")
    except metadata.PackageNotFoundError:
        raise ImportError(f"export_jax2tf needs jax<=0.7.1, tensorflow and tf2onnx: {_INSTALL}") from None
    parts = tuple(int(p) for p in re.findall(r"\d+", version)[:3])
    if parts > LAST_JAX:
        raise RuntimeError(
            f"export_jax2tf needs jax<=0.7.1 (jax {version} is installed, whose jax2tf only emits XlaCallModule, "
            f"which tf2onnx cannot convert): {_INSTALL}, or use the jax2onnx route"
        )
    for module in ("tensorflow", "tf2onnx"):
        if importlib.util.find_spec(module) is None:
            raise ImportError(f"export_jax2tf needs {module}: {_INSTALL}")


# --------------------------------------------------------------------------- conversion


def _poly_spec(x: np.ndarray, axes: Mapping[int, str]) -> str | None:
    """jax2tf's polymorphic shape for one input: ``(batch, _, _)`` (``_`` = the signature's static size)."""
    if not axes:
        return None
    return "(" + ", ".join(axes.get(i, "_") for i in range(x.ndim)) + ")"


def _convert(
    apply: Callable[..., Any],
    params: Any,
    inputs: dict[str, np.ndarray],
    dyn: dict[str, dict[int, str]],
    opset: int,
) -> onnx.ModelProto:
    import jax
    import tensorflow as tf
    import tf2onnx
    from jax.experimental import jax2tf

    # Flatten the params so any pytree (dicts, flax State, dataclasses) becomes a plain list of variables.
    flat, treedef = jax.tree_util.tree_flatten_with_path(params)
    leaves = []
    for key_path, leaf in flat:
        array = np.asarray(leaf) if not _is_key_array(leaf) else None
        if array is None or array.dtype == object:
            raise ValueError(f"params leaf {jax.tree_util.keystr(key_path)} is not a numeric array "
                             f"(pass only weights and statistics, not RNG keys or objects)")
        leaves.append(array)

    def flat_apply(leaf_list: list[Any], *xs: Any) -> Any:
        return apply(jax.tree_util.tree_unflatten(treedef, leaf_list), *xs)

    name = getattr(apply, "__name__", "")
    flat_apply.__name__ = name if _IDENT.match(name) else "apply"  # TF node names read jax2tf_<name>_/Conv2D

    polymorphic = [None] + [_poly_spec(x, dyn.get(name, {})) for name, x in inputs.items()]
    signature = tuple(
        tf.TensorSpec([None if i in dyn.get(name, {}) else d for i, d in enumerate(x.shape)], tf.as_dtype(x.dtype),
                      name=name)
        for name, x in inputs.items()
    )
    variables = [tf.Variable(a, trainable=False) for a in leaves]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*enable_xla=False.*", category=DeprecationWarning)
        tf_apply = jax2tf.convert(flat_apply, native_serialization=False, enable_xla=False,
                                  polymorphic_shapes=polymorphic)
        function = tf.function(lambda *xs: tf_apply(variables, *xs), input_signature=signature, autograph=False)
        try:
            model, _ = tf2onnx.convert.from_function(function, input_signature=signature, opset=opset)
        except Exception as exc:
            raise RuntimeError(f"jax2tf/tf2onnx conversion failed: {_first_line(exc)}") from exc

    _name_dims(model, inputs, dyn, _symbolic_output_shapes(apply, params, inputs, dyn))
    _name_outputs(model)
    return model


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"


def _is_key_array(leaf: Any) -> bool:
    import jax

    return isinstance(leaf, jax.Array) and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)


def _symbolic_output_shapes(
    apply: Callable[..., Any], params: Any, inputs: dict[str, np.ndarray], dyn: dict[str, dict[int, str]]
) -> list[tuple[str | int, ...]] | None:
    """Each output's shape with jax's names for the free dims (``batch``, ``2*batch``), or None if unknowable."""
    if not any(dyn.values()):
        return None
    import jax

    try:
        scope = jax.export.SymbolicScope()
        specs = [
            jax.ShapeDtypeStruct(
                jax.export.symbolic_shape(_poly_spec(x, dyn[name]) or "", scope=scope, like=x.shape)
                if dyn.get(name) else x.shape,
                x.dtype,
            )
            for name, x in inputs.items()
        ]
        out = jax.eval_shape(lambda *xs: apply(params, *xs), *specs)
    except Exception:  # the conversion itself succeeded; unnamed output dims are only cosmetic
        return None
    return [tuple(d if isinstance(d, int) else str(d) for d in leaf.shape) for leaf in jax.tree_util.tree_leaves(out)]


def _name_dims(
    model: onnx.ModelProto,
    inputs: dict[str, np.ndarray],
    dyn: dict[str, dict[int, str]],
    output_shapes: list[tuple[str | int, ...]] | None,
) -> None:
    """Replace tf2onnx's ``unk__N`` dims with the user's names, so graphcost's formulas read ``batch``."""
    for value, name in zip(model.graph.input, inputs, strict=False):
        for axis, dim in dyn.get(name, {}).items():
            value.type.tensor_type.shape.dim[axis].dim_param = dim
    if output_shapes is None or len(output_shapes) != len(model.graph.output):
        return
    for value, shape in zip(model.graph.output, output_shapes, strict=True):
        dims = value.type.tensor_type.shape.dim
        if len(dims) != len(shape):
            continue
        for proto, size in zip(dims, shape, strict=True):
            if isinstance(size, str) and _SIMPLE_DIM.match(size) and not proto.HasField("dim_value"):
                proto.dim_param = size.replace(" ", "")


def _name_outputs(model: onnx.ModelProto) -> None:
    """Rename tf2onnx's output tensors (``Identity_1:0``) to ``output_0``, ``output_1``, ... in graph order."""
    renames = {o.name: f"output_{i}" for i, o in enumerate(model.graph.output)}
    taken = {t for n in model.graph.node for t in (*n.input, *n.output)} | {i.name for i in model.graph.initializer}
    if any(new in taken and new not in renames for new in renames.values()):
        return
    for node in model.graph.node:
        node.output[:] = [renames.get(t, t) for t in node.output]
        node.input[:] = [renames.get(t, t) for t in node.input]
    for value in (*model.graph.output, *model.graph.value_info):
        value.name = renames.get(value.name, value.name)


# --------------------------------------------------------------------------- the check in ONNX Runtime


def _check_against_jax(
    data: bytes,
    apply: Callable[..., Any],
    params: Any,
    inputs: dict[str, np.ndarray],
    dyn: dict[str, dict[int, str]],
    rtol: float,
    atol: float,
) -> tuple[float, float]:
    """Run the ONNX model and JAX on the same inputs; return (max abs diff, max rel diff) or raise."""
    import jax

    # lazy: graphcost.measure (its runners, onnx) is 0.09 s of imports; only the check against onnxruntime
    from graphcost.measure import _ort_session

    try:
        session = _ort_session.session(data)
    except Exception as exc:
        raise RuntimeError(f"ONNX Runtime cannot load the converted model: {_first_line(exc)}") from exc
    onnx_inputs = [i.name for i in session.get_inputs()]
    onnx_outputs = [o.name for o in session.get_outputs()]
    if len(onnx_inputs) != len(inputs):
        raise Jax2TfMismatch(f"the ONNX model has {len(onnx_inputs)} inputs, JAX {len(inputs)}")
    worst_abs = worst_rel = 0.0
    for feed in _check_feeds(inputs, dyn):
        shapes = ", ".join(f"{name}={tuple(x.shape)}" for name, x in feed.items())
        want = [np.asarray(a) for a in jax.tree_util.tree_leaves(apply(params, *feed.values()))]
        try:
            got = _ort_session.run(session, None, dict(zip(onnx_inputs, feed.values(), strict=True)))
        except Exception as exc:  # e.g. a shape baked in at tracing time
            raise Jax2TfMismatch(f"ONNX Runtime fails at input shapes {shapes}: {_first_line(exc)}") from exc
        if len(got) != len(want):
            raise Jax2TfMismatch(f"ONNX Runtime gives {len(got)} outputs, JAX {len(want)}, at input shapes {shapes}")
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            where = f"output {i} ({onnx_outputs[i]!r}) at input shapes {shapes}"
            if g.shape != w.shape:
                raise Jax2TfMismatch(f"{where}: ONNX Runtime shape {g.shape}, JAX {w.shape}")
            if g.dtype != w.dtype:
                raise Jax2TfMismatch(f"{where}: ONNX Runtime dtype {g.dtype}, JAX {w.dtype}")
            if g.size == 0:
                continue
            a, b = np.asarray(g, dtype=np.float64), np.asarray(w, dtype=np.float64)
            diff = np.abs(a - b)
            diff[np.isnan(a) & np.isnan(b)] = 0.0  # NaN where JAX has NaN is agreement
            diff[np.isnan(diff)] = np.inf
            big = np.abs(b) > atol
            rel = float(np.max(diff[big] / np.abs(b[big]))) if big.any() else 0.0
            worst_abs, worst_rel = max(worst_abs, float(diff.max())), max(worst_rel, rel)
            if not np.all(diff <= atol + rtol * np.abs(b)):
                at = np.unravel_index(int(np.argmax(diff)), diff.shape)
                raise Jax2TfMismatch(
                    f"ONNX Runtime differs from JAX on {where}: largest |diff| {diff[at]:.3g} at index "
                    f"{tuple(map(int, at))} (ONNX {a[at]:.6g}, JAX {b[at]:.6g}; atol {atol:g}, rtol {rtol:g})"
                )
    return worst_abs, worst_rel


def _check_feeds(inputs: dict[str, np.ndarray], dyn: dict[str, dict[int, str]]) -> list[dict[str, np.ndarray]]:
    """The example inputs, plus (when dims are free) a copy with every named dim one larger.

    The larger copy reuses the example's own values, in reverse order along each free axis (so token ids stay
    valid and a mix-up of rows shows), wrapping around to fill the extra slot.
    """
    feeds = [dict(inputs)]
    if any(dyn.values()):
        grown: dict[str, np.ndarray] = {}
        for name, x in inputs.items():
            for axis in dyn.get(name, {}):
                n = x.shape[axis]
                x = np.take(x, (n - 1 - np.arange(n + 1)) % max(n, 1), axis=axis)
            grown[name] = x
        feeds.append(grown)
    return feeds


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "xb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
