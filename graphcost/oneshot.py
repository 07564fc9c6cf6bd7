"""From a framework object to a verified ONNX file in a cache folder: what ``graphcost.analyze(module, inputs)``,
``graphcost.gap(module, inputs)`` and ``graphcost bench FILE.py:FACTORY`` start from.

::

    torch.nn.Module / JAX function / flax.nnx module / Keras model / tf.function  +  example inputs
        │ framework: inferred from the object (or framework="torch" | "jax" | "tf")
        │ inputs: a tuple/list (call order) or a {name: array} mapping; names from the call's signature
        ▼
    graphcost.export.export_torch / export_jax / export_tf    (verified in onnxruntime; ExportError otherwise)
        ▼
    <cache_dir>/<fingerprint>/model.onnx  +  manifest.json     (cache_dir default: ~/.cache/graphcost/exports)

Nothing is written beside the user's code: the file goes under ``cache_dir`` (``$XDG_CACHE_HOME/graphcost/exports``
or ``~/.cache/graphcost/exports`` unless named). The fingerprint hashes what graphcost can see of the model (its
type, its ``repr``, its weights, a plain function's code) together with the example input names, shapes and dtypes
and the export options, so one model at one set of shapes keeps one folder; every call exports again (the cache is
where files live, not a promise that an old file still matches the code) and replaces the file atomically.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from graphcost import __version__

FRAMEWORKS = ("torch", "jax", "tf")
MODEL_FILE = "model.onnx"
MANIFEST_FILE = "manifest.json"
FINGERPRINT_CHARS = 16


@dataclass(frozen=True)
class Exported:
    """A framework object exported (and verified) into its cache folder."""

    path: Path  # <folder>/model.onnx
    folder: Path
    native: Any  # graphcost.models.zoo.NativeModel: framework, forward, module, inputs, dynamic
    result: Any  # graphcost.export.ExportResult

    @property
    def framework(self) -> str:
        return str(self.native.framework)


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/graphcost/exports``, else ``~/.cache/graphcost/exports``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "graphcost" / "exports"


def is_framework_object(obj: Any) -> bool:
    """Whether ``obj`` is a model object to export rather than an ONNX source (path, bytes, ModelProto, Model,
    Analysis)."""
    if isinstance(obj, (str, bytes, bytearray, os.PathLike)):
        return False
    module = type(obj).__module__ or ""
    if module.startswith(("onnx", "graphcost")):  # ModelProto, graphcost.load's Model, an Analysis
        return False
    return infer_framework(obj) is not None or callable(obj)


def infer_framework(obj: Any) -> str | None:
    """``torch`` for an ``nn.Module``, ``tf`` for a Keras layer or model, a ``tf.Module`` or a ``tf.function``,
    ``jax`` for a flax.nnx module or a ``jax.jit``-wrapped function; for a plain function, the one framework its
    module imported (None when it imported none or several: pass ``framework=``)."""
    # lazy: graphcost.cli.export (the CLI's export flags) is 0.024 s of imports; only a framework guess needs it
    from graphcost.cli.export import _infer_framework

    found = _infer_framework(obj)
    if found is not None:
        return found
    if (type(obj).__module__ or "").split(".")[0] in ("jax", "jaxlib"):  # jax.jit(f) is a jaxlib PjitFunction
        return "jax"
    return None


def _is_jitted(obj: Any) -> bool:
    """A ``jax.jit``-wrapped function (a jaxlib ``PjitFunction``) with the Python function it wraps."""
    return (type(obj).__module__ or "").split(".")[0] in ("jax", "jaxlib") and callable(
        getattr(obj, "__wrapped__", None))


def _input_names(obj: Any, framework: str, count: int) -> list[str]:
    """The positional parameter names of the call (``forward`` for torch, ``__call__`` for an nnx module), when
    there are exactly enough of them and they make valid, distinct names; else ``input_0``, ``input_1``, …"""
    target: Any = obj
    if framework == "torch" and hasattr(obj, "forward"):
        target = obj.forward
    elif framework == "tf" and hasattr(obj, "python_function"):  # a tf.function: the function it wraps
        target = obj.python_function
    try:
        params = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        params = []
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                  and p.name != "self" and p.default is p.empty]
    if len(positional) == count and len(set(positional)) == count and all(n.isidentifier() for n in positional):
        return positional
    return [f"input_{i}" for i in range(count)]


def _to_numpy(value: Any, where: str) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor (maybe requiring grad, maybe on a GPU)
        value = value.detach().cpu().numpy()
    elif hasattr(value, "numpy") and not isinstance(value, np.ndarray):  # a TF eager tensor
        value = value.numpy()
    arr = np.asarray(value)
    if arr.dtype == object:
        raise ValueError(f"{where}: a {type(value).__name__} is not an array or tensor")
    return np.ascontiguousarray(arr)


def example_arrays(obj: Any, framework: str, example_inputs: Any) -> dict[str, np.ndarray]:
    """The example inputs as ``{name: numpy array}`` in call order (``fn(*inputs)``).

    ``example_inputs``: a tuple or list of tensors/arrays (the call's positional arguments), one tensor, or a
    mapping name → tensor (its order is the call order)."""
    if example_inputs is None:
        raise ValueError("a framework model needs example inputs, e.g. graphcost.analyze(model, (x,))")
    if isinstance(example_inputs, Mapping):
        items = [(str(k), v) for k, v in example_inputs.items()]
    else:
        values = list(example_inputs) if isinstance(example_inputs, (tuple, list)) else [example_inputs]
        names = _input_names(obj, framework, len(values))
        items = list(zip(names, values, strict=True))
    if not items:
        raise ValueError("no example inputs: give at least one tensor")
    return {name: _to_numpy(v, f"example input {name}") for name, v in items}


def native_model(obj: Any, framework: str, inputs: dict[str, np.ndarray],
                 dynamic: Mapping[str, Mapping[int, str]] | None = None) -> Any:
    """A ``graphcost.models.zoo.NativeModel`` around a user's object: what the exporters and native timers take."""
    # lazy: graphcost.models.zoo is 0.004 s of imports; every analyze loads this module, only framework objects
    from graphcost.models.zoo import NativeModel

    forward: Any = obj
    if framework == "tf":
        import keras

        if isinstance(obj, keras.layers.Layer):
            def forward(*xs: Any) -> Any:  # inference behaviour, as the export sees it
                return obj(xs[0] if len(xs) == 1 else list(xs), training=False)
    elif framework == "torch":
        import torch

        if isinstance(obj, torch.nn.Module) and obj.training:  # timed as exported: in eval mode
            flags = {m: m.training for m in obj.modules()}

            def forward(*xs: Any) -> Any:
                obj.eval()
                try:
                    return obj(*xs)
                finally:
                    for m, was in flags.items():
                        m.training = was
    return NativeModel(framework=framework, arch="user", forward=forward, module=obj, inputs=dict(inputs),
                       dynamic={k: dict(v) for k, v in (dynamic or {}).items()}, layout="-")


def fingerprint(obj: Any, framework: str, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> str:
    """A short hash of what graphcost can see of ``obj`` and its example inputs: the cache folder's name."""
    h = hashlib.sha256()

    def put(*parts: object) -> None:
        for p in parts:
            h.update(p if isinstance(p, bytes) else repr(p).encode("utf-8", "backslashreplace"))
            h.update(b"\0")

    put(__version__, framework, type(obj).__module__, type(obj).__qualname__, sorted(options.items()))
    for name, arr in inputs.items():
        put(name, arr.shape, arr.dtype.str)
    for part in _weights(obj, framework):
        put(part)
    code = getattr(obj, "__code__", None) or getattr(getattr(obj, "__wrapped__", None), "__code__", None)
    if code is not None:
        put(getattr(obj, "__qualname__", ""), code.co_code, code.co_consts)
    else:
        put(_stable_repr(obj))
    return h.hexdigest()[:FINGERPRINT_CHARS]


def _stable_repr(obj: Any) -> str:
    """``repr`` without memory addresses (``<function f at 0x7f…>``), which change from run to run."""
    import re

    try:
        text = repr(obj)
    except Exception:  # a repr that fails says nothing stable
        return type(obj).__qualname__
    return re.sub(r" at 0x[0-9a-fA-F]+", "", text)


def _weights(obj: Any, framework: str) -> list[bytes]:
    """Weight bytes, where the framework exposes them cheaply (torch state_dict, Keras weights, nnx state)."""
    try:
        if framework == "torch" and hasattr(obj, "state_dict"):
            return [k.encode() + b"=" + v.detach().cpu().contiguous().numpy().tobytes()
                    for k, v in obj.state_dict().items()]
        if framework == "tf" and hasattr(obj, "get_weights"):
            return [np.ascontiguousarray(w).tobytes() for w in obj.get_weights()]
        if framework == "jax":
            nnx = sys.modules.get("flax.nnx")
            if nnx is not None and isinstance(obj, nnx.Module):
                import jax

                return [np.asarray(leaf).tobytes() for leaf in jax.tree_util.tree_leaves(nnx.state(obj))]
    except Exception:  # a weight that cannot be read only makes the name less specific
        return []
    return []


def export(obj: Any, example_inputs: Any, *, framework: str | None = None, cache_dir: str | os.PathLike[str] | None
           = None, dynamic: Mapping[str, Mapping[int, str]] | None = None, opset: int = 18, verify: bool = True,
           rtol: float = 1e-4, atol: float = 1e-5, dynamo: bool = True, keep_batchnorm: bool = False) -> Exported:
    """Export ``obj`` called as ``obj(*example_inputs)`` through the verified exporters into its cache folder.

    Raises ValueError for an object of no known framework, missing or unusable example inputs, or a cache folder
    that cannot be made; ``graphcost.export.ExportError`` when the export fails or onnxruntime disagrees with the
    framework (nothing is written then); ``FrameworkMissing`` (an ImportError) when the framework or its exporter
    is not installed.
    """
    # lazy: the exporters are 0.010 s of imports (their frameworks load on first use); only framework objects
    from graphcost.export import ExportError, export_native

    fw = framework or infer_framework(obj)
    if fw is None:
        raise ValueError(f"cannot tell the framework of a {type(obj).__name__}; pass framework='torch', 'jax' or "
                         "'tf'")
    if fw not in FRAMEWORKS:
        raise ValueError(f"framework {fw!r}: expected one of {', '.join(FRAMEWORKS)}")
    if fw == "jax" and _is_jitted(obj):
        # jax2onnx traces with its own primitives patched in: a jitted function first traced there would keep
        # that trace in its cache (and fail, called later, with "MLIR translation rule ... not found"). Export
        # the function it wraps; time_jax jits that one afresh.
        obj = obj.__wrapped__
    inputs = example_arrays(obj, fw, example_inputs)
    options: dict[str, Any] = {"opset": opset, "dynamic": {k: dict(v) for k, v in (dynamic or {}).items()},
                               "verify": verify}
    if fw == "torch":
        options.update(dynamo=dynamo, keep_batchnorm=keep_batchnorm)
    elif not dynamo or keep_batchnorm:
        raise ValueError(f"dynamo and keep_batchnorm are torch export options, not {fw}")
    folder = Path(cache_dir if cache_dir is not None else default_cache_dir()) / fingerprint(obj, fw, inputs, options)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"cache folder {folder}: cannot be made ({e.strerror or e})") from None
    native = native_model(obj, fw, inputs, dynamic)
    kw: dict[str, Any] = {k: v for k, v in options.items() if k != "verify"}
    result = export_native(native, folder / MODEL_FILE, verify=verify, rtol=rtol, atol=atol, **kw)
    if not isinstance(result.path, Path):  # pragma: no cover - the exporters return their ExportResult
        raise ExportError("the exporter returned no path")
    _write_manifest(folder, obj, fw, inputs, options, result)
    return Exported(result.path, folder, native, result)


def _write_manifest(folder: Path, obj: Any, framework: str, inputs: Mapping[str, np.ndarray],
                    options: Mapping[str, Any], result: Any) -> None:
    """What the folder holds and where it came from, written beside the model (tmp file, then rename)."""
    manifest = {
        "model": f"{type(obj).__module__}.{type(obj).__qualname__}", "framework": framework,
        "exporter": result.exporter, "opset": result.opset, "nodes": result.nodes, "verified": result.verified,
        "max_abs_diff": None if result.max_abs_diff != result.max_abs_diff else result.max_abs_diff,
        "inputs": {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in inputs.items()},
        "options": dict(options), "file": MODEL_FILE,
    }
    tmp = folder / f".{MANIFEST_FILE}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(manifest, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, folder / MANIFEST_FILE)


def time_native(native: Any, *, compile: bool = False, warmup: int = 10, repeats: int = 50,
                threads: int | None = None, device: str | None = None) -> list[Any]:
    """The native framework's runs of ``native`` on its own example inputs: torch eager (and ``torch.compile``
    with ``compile``), ``jax.jit`` (``block_until_ready``), ``tf.function``."""
    from graphcost.measure import time_jax, time_tf, time_torch  # lazy: the timers are 0.11 s of imports

    inputs: Sequence[np.ndarray] = list(native.inputs.values())
    kw: dict[str, Any] = {"warmup": warmup, "repeats": repeats}
    if native.framework == "torch":
        tkw = {**kw, "threads": threads, **({"device": device} if device else {})}
        runs = [time_torch(native.forward, inputs, **tkw)]
        if compile:
            runs.append(time_torch(native.forward, inputs, compile=True, **tkw))
        return runs
    if compile:
        raise ValueError(f"compile=True times torch.compile; the model is a {native.framework} model")
    if native.framework == "jax":
        return [time_jax(native.forward, inputs, device=device, **kw)]
    return [time_tf(native.forward, inputs, device=device, **kw)]


__all__ = ["Exported", "default_cache_dir", "example_arrays", "export", "fingerprint", "infer_framework",
           "is_framework_object", "native_model", "time_native"]
