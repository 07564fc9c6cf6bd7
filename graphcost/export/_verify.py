"""What every exporter shares: the result type, input checks, the onnxruntime check, and the write-then-rename.

An export is only ever *written* after onnxruntime agrees with the source framework::

    <dir>/.<name>.XXXX.tmp.onnx   ← the exporter writes here (same folder, so the rename is atomic)
        │ run in onnxruntime at the example shapes, and at a second shape when dims are dynamic
        ├─ agrees  → os.replace(tmp, path)
        └─ differs → ExportError naming the output, the largest difference and the input shapes; tmp removed

The second shape grows each distinct dynamic dim by a different odd amount (first name +1, second +3, ...: for
the zoo ``batch`` 2 → 3 and ``seq`` 16 → 19), so a dim the exporter baked in, or two dims it confused, shows.
Its inputs are drawn from a fixed seed: floats standard normal, integers within the example's own range (valid
token ids stay valid), booleans fair coins.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import os
import re
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "ExportError",
    "ExportResult",
    "Reference",
    "check_inputs",
    "check_shapes",
    "export_verified",
    "name_dims",
    "verify_onnx",
]

Reference = Callable[[dict[str, np.ndarray]], Any]
"""The source framework's forward on numpy inputs: one array, or a sequence of arrays in output order."""

SECOND_SHAPE_SEED = 1234


class ExportError(Exception):
    """An export failed or did not verify; one line (the file was not written)."""


@dataclass(frozen=True)
class ExportResult:
    """A written, verified export. ``max_*_diff`` are NaN and ``checked_shapes`` empty when not verified.

    ``max_rel_diff`` is per output ``max|onnx − reference| / max|reference|``, the largest over outputs and shapes.
    """

    path: Path
    framework: str
    exporter: str  # torch.dynamo, torch.legacy, tf2onnx, jax2onnx
    opset: int
    nodes: int
    max_abs_diff: float
    max_rel_diff: float
    checked_shapes: tuple[dict[str, tuple[int, ...]], ...]
    seconds: float

    @property
    def verified(self) -> bool:
        return bool(self.checked_shapes)

    def summary(self) -> str:
        """One line: path, exporter, opset, nodes, differences, time."""
        if self.verified:
            shapes = " and ".join(_shapes_text(s) for s in self.checked_shapes)
            check = f"max |diff| {self.max_abs_diff:.2g} (rel {self.max_rel_diff:.2g}) at {shapes}"
        else:
            check = "not verified"
        return (f"{self.path}: {self.exporter}, opset {self.opset}, {self.nodes} nodes, {check}, "
                f"{self.seconds:.1f} s")


def _shapes_text(shapes: Mapping[str, tuple[int, ...]]) -> str:
    return ", ".join(f"{k}[{'×'.join(str(d) for d in v)}]" for k, v in shapes.items())


def check_inputs(inputs: Mapping[str, Any], dynamic: Mapping[str, Mapping[int, str]] | None
                 ) -> tuple[dict[str, np.ndarray], dict[str, dict[int, str]]]:
    """Validate example inputs and named dynamic dims; return them as plain dicts (arrays contiguous).

    A dim name used twice must have the same example size everywhere (it is one symbol in the ONNX file).
    """
    if not inputs:
        raise ExportError("no example inputs: give at least one named input")
    arrays: dict[str, np.ndarray] = {}
    for name, value in inputs.items():
        if not isinstance(name, str) or not name:
            raise ExportError(f"input names must be non-empty strings, got {name!r}")
        arr = np.asarray(value)
        if arr.dtype == object:
            raise ExportError(f"input {name}: not a numeric array")
        arrays[name] = np.ascontiguousarray(arr)
    dyn: dict[str, dict[int, str]] = {}
    sizes: dict[str, int] = {}
    for name, axes in (dynamic or {}).items():
        if name not in arrays:
            raise ExportError(f"dynamic dims for {name!r}, which is not an input ({', '.join(arrays)})")
        rank = arrays[name].ndim
        dyn[name] = {}
        for axis, dim in axes.items():
            if not -rank <= axis < rank:
                raise ExportError(f"input {name}: dynamic axis {axis} out of range for rank {rank}")
            if not isinstance(dim, str) or not dim.isidentifier():
                raise ExportError(f"input {name}: dim name {dim!r} must be an identifier, e.g. batch")
            size = arrays[name].shape[axis]
            if sizes.setdefault(dim, size) != size:
                raise ExportError(f"dim {dim!r} is {sizes[dim]} in one input and {size} in {name}: one name, one size")
            dyn[name][axis % rank] = dim
    return arrays, {k: v for k, v in dyn.items() if v}


def _second_inputs(inputs: dict[str, np.ndarray], dynamic: dict[str, dict[int, str]]) -> dict[str, np.ndarray]:
    order: list[str] = []
    for axes in dynamic.values():
        order += [d for _, d in sorted(axes.items()) if d not in order]
    grow = {dim: 2 * k + 1 for k, dim in enumerate(order)}  # +1, +3, +5, ...
    rng = np.random.default_rng(SECOND_SHAPE_SEED)
    out: dict[str, np.ndarray] = {}
    for name, arr in inputs.items():
        shape = list(arr.shape)
        for axis, dim in dynamic.get(name, {}).items():
            shape[axis] += grow[dim]
        new: np.ndarray
        if arr.dtype == np.bool_:
            new = rng.random(shape) < 0.5
        elif np.issubdtype(arr.dtype, np.integer):
            lo, hi = (int(arr.min()), int(arr.max())) if arr.size else (0, 0)
            new = rng.integers(lo, hi + 1, size=shape)
        else:
            new = rng.standard_normal(shape)
        out[name] = np.ascontiguousarray(new, dtype=arr.dtype)
    return out


def check_shapes(inputs: dict[str, np.ndarray], dynamic: dict[str, dict[int, str]]) -> list[dict[str, np.ndarray]]:
    """The input sets to verify at: the examples, plus a grown set when any dim is dynamic."""
    return [inputs, _second_inputs(inputs, dynamic)] if dynamic else [inputs]


def _as_outputs(value: Any) -> list[np.ndarray]:
    if isinstance(value, Mapping):
        return [np.asarray(value[k]) for k in sorted(value)]
    if isinstance(value, (list, tuple)):
        return [np.asarray(v) for v in value]
    return [np.asarray(value)]


def _session(path: Path) -> Any:
    from graphcost.measure import _ort_session  # lazy: 0.1 s of imports (onnx, the runners); only the check

    so = _ort_session.options()  # quiet: unused-initializer notes are not failures, and failures are our line
    so.intra_op_num_threads = min(2, os.cpu_count() or 1)
    so.inter_op_num_threads = 1
    try:
        return _ort_session.session(path, so)
    except Exception as e:
        raise ExportError(f"onnxruntime cannot load the export: {_first_line(e)}") from e


def _first_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in _ANSI.sub("", str(e)).strip().splitlines() if ln.strip()]
    text = lines[0] if lines else type(e).__name__
    return text if len(text) <= 300 else text[:297] + "..."


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _root_cause(e: BaseException) -> str:
    """The innermost cause, as ``Type: first line``: exporters wrap the real reason in generic 'step 1/3' errors."""
    while e.__cause__ is not None:
        e = e.__cause__
    return f"{type(e).__name__}: {_first_line(e)}"


def verify_onnx(path: str | os.PathLike[str], reference: Reference, inputs_list: Sequence[Mapping[str, np.ndarray]],
                *, rtol: float = 1e-4, atol: float = 1e-5, source: str = "the reference") -> tuple[float, float]:
    """Run ``path`` in onnxruntime (CPU) on each input set and compare with ``reference``; (max_abs, max_rel).

    Elementwise, ``|onnx − ref| ≤ atol + rtol·|ref|`` must hold (NaN where both are NaN counts as equal), and the
    shapes must match exactly. ONNX inputs are fed by name when the names match the example names, else by position.
    Raises ExportError naming the output, the largest difference and the input shapes; ``source`` names the
    reference in that message (the exporters pass the framework's name).
    """
    from graphcost.measure import _ort_session  # lazy: 0.1 s of imports (onnx, the runners); only the check

    sess = _session(Path(path))
    onnx_inputs = [i.name for i in sess.get_inputs()]
    onnx_outputs = [o.name for o in sess.get_outputs()]
    max_abs = max_rel = 0.0
    for feeds in inputs_list:
        if len(feeds) != len(onnx_inputs):
            raise ExportError(f"the export has {len(onnx_inputs)} inputs ({', '.join(onnx_inputs)}), "
                              f"the model {len(feeds)} ({', '.join(feeds)})")
        if set(feeds) == set(onnx_inputs):
            ort_feeds = {n: feeds[n] for n in onnx_inputs}
        else:  # an exporter renamed them: the order is the call order
            ort_feeds = dict(zip(onnx_inputs, feeds.values(), strict=True))
        at = _shapes_text({k: tuple(v.shape) for k, v in feeds.items()})
        try:
            got = _ort_session.run(sess, None, ort_feeds)
        except Exception as e:
            raise ExportError(f"onnxruntime fails at {at}: {_first_line(e)}") from e
        want = _as_outputs(reference(dict(feeds)))
        if len(got) != len(want):
            raise ExportError(f"the export has {len(got)} outputs, {source} {len(want)} (at {at})")
        for name, g, r in zip(onnx_outputs, got, want, strict=True):
            g = np.asarray(g)
            if g.shape != r.shape:
                raise ExportError(f"output {name}: shape {g.shape} in onnxruntime, {r.shape} in {source} "
                                  f"(at {at})")
            if r.size == 0:
                continue
            if r.dtype == np.bool_ or g.dtype == np.bool_:
                g, r = g.astype(np.int64), r.astype(np.int64)
            diff = np.abs(g.astype(np.float64) - r.astype(np.float64))
            bad = ~np.isclose(g, r, rtol=rtol, atol=atol, equal_nan=True)
            diff = np.where(np.isnan(diff) & ~bad, 0.0, diff)  # NaN in both: equal
            scale = float(np.nanmax(np.abs(r))) if np.isfinite(r).any() else 0.0
            worst = float(np.nanmax(diff)) if not np.isnan(diff).all() else math.inf
            if bad.any():
                idx = np.unravel_index(int(np.argmax(np.where(bad, np.nan_to_num(diff, nan=math.inf), -1.0))),
                                       diff.shape)
                raise ExportError(
                    f"output {name} differs from {source} at {at}: max |diff| {worst:.3g} "
                    f"(onnxruntime {_scalar(g[idx])}, {source} {_scalar(r[idx])} at index "
                    f"{tuple(int(i) for i in idx)}), "
                    f"{int(bad.sum())} of {bad.size} elements beyond atol {atol:g} + rtol {rtol:g}·|ref|")
            max_abs = max(max_abs, worst)
            max_rel = max(max_rel, worst / scale if scale > 0 else (0.0 if worst == 0 else math.inf))
    return max_abs, max_rel


def _scalar(v: Any) -> str:
    return f"{float(v):.6g}" if np.issubdtype(np.asarray(v).dtype, np.number) else str(v)


def name_dims(model: Any, inputs: Mapping[str, np.ndarray], dynamic: Mapping[str, Mapping[int, str]]) -> None:
    """Give the ONNX graph inputs the user's names and dim names, in place (for exporters that invent them).

    Graph inputs are renamed by position to the example names (tf2onnx writes ``x:0``-style names when asked for
    ``x``); a dynamic axis gets its dim name, and the exporter's own name for that dim (``unk__32``) is replaced
    wherever it appears in outputs and value_info, so the ONNX file says ``batch`` throughout.
    """
    graph = model.graph
    initializers = {t.name for t in graph.initializer}
    graph_inputs = [i for i in graph.input if i.name not in initializers]
    renames: dict[str, str] = {}
    for value, name in zip(graph_inputs, inputs, strict=False):
        if value.name != name:
            renames[value.name] = name
    if renames:
        for value in graph_inputs:
            value.name = renames.get(value.name, value.name)
        for node in graph.node:
            for i, x in enumerate(node.input):
                if x in renames:
                    node.input[i] = renames[x]
    dim_renames: dict[str, str] = {}
    for value, name in zip(graph_inputs, inputs, strict=False):
        dims = value.type.tensor_type.shape.dim
        for axis, dim_name in dynamic.get(name, {}).items():
            if axis >= len(dims):
                continue
            old = dims[axis].dim_param
            if old and old != dim_name:
                dim_renames[old] = dim_name
            dims[axis].dim_param = dim_name
    if dim_renames:
        for value in [*graph.output, *graph.value_info]:
            for d in value.type.tensor_type.shape.dim:
                if d.dim_param in dim_renames:
                    d.dim_param = dim_renames[d.dim_param]
    _infer_output_dims(model, {d for axes in dynamic.values() for d in axes.values()})


def _infer_output_dims(model: Any, names: set[str]) -> None:
    """Replace invented output dim names (``unk__44``) by what onnx's shape inference derives from the inputs.

    Only the graph outputs change (no value_info is added); a dim inference cannot derive keeps its old name.
    """
    import onnx

    invented = [(i, k) for i, out in enumerate(model.graph.output)
                for k, d in enumerate(out.type.tensor_type.shape.dim) if d.dim_param and d.dim_param not in names]
    if not invented:
        return
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    for i, k in invented:
        probe.graph.output[i].type.tensor_type.shape.dim[k].Clear()
    try:
        inferred = onnx.shape_inference.infer_shapes(probe, data_prop=True)
    except Exception:
        return  # inference is a nicety here: the file is verified either way
    for i, k in invented:
        dims = inferred.graph.output[i].type.tensor_type.shape.dim
        if k < len(dims) and (dims[k].dim_param in names or dims[k].HasField("dim_value")):
            model.graph.output[i].type.tensor_type.shape.dim[k].CopyFrom(dims[k])


@contextlib.contextmanager
def quiet(logger_names: Sequence[str], level: int) -> Iterator[None]:
    """Exporters log progress, print notes and warn about deprecations and tracing; a verified export needs none
    of it. Raises the named loggers to ``level``, swallows warnings and stdout, and restores all on exit."""
    loggers = [logging.getLogger(name) for name in logger_names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(level)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, old in zip(loggers, levels, strict=True):
            lg.setLevel(old)


@contextlib.contextmanager
def _temp_beside(path: Path) -> Iterator[Path]:
    """A temporary .onnx file in ``path``'s folder; removed unless it was renamed onto ``path``."""
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp.onnx")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
    finally:
        tmp.unlink(missing_ok=True)
        for extra in _sidecars(tmp):
            extra.unlink(missing_ok=True)


def _sidecars(tmp: Path) -> list[Path]:
    """Files an exporter wrote beside ``tmp`` (external data, for models past protobuf's 2 GB)."""
    return [p for p in tmp.parent.iterdir() if p.name.startswith(tmp.name) and p != tmp]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _check_target(path: str | os.PathLike[str]) -> Path:
    target = Path(path)
    if target.is_dir():
        raise ExportError(f"{target}: is a directory; give the .onnx file to write")
    if not target.parent.is_dir():
        raise ExportError(f"{target}: folder {target.parent} does not exist")
    return target


def export_verified(path: str | os.PathLike[str], *, framework: str, exporter: str, opset: int,
                    produce: Callable[[Path], None], reference: Reference, inputs: dict[str, np.ndarray],
                    dynamic: dict[str, dict[int, str]], verify: bool, rtol: float, atol: float) -> ExportResult:
    """Run ``produce(tmp)`` (which writes the ONNX file to ``tmp``), verify ``tmp``, and move it to ``path``."""
    import onnx

    target = _check_target(path)
    t0 = time.perf_counter()
    with _temp_beside(target) as tmp:
        try:
            produce(tmp)
        except (ExportError, ImportError):
            raise
        except Exception as e:
            raise ExportError(f"{exporter} failed: {_root_cause(e)}") from e
        if _sidecars(tmp):
            raise ExportError(f"{exporter} wrote external data (a model past 2 GB): not supported here; "
                              "export with the framework's own tools")
        try:
            proto = onnx.load(str(tmp), load_external_data=False)
        except Exception as e:
            raise ExportError(f"{exporter} wrote an unreadable model: {_first_line(e)}") from e
        written_opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), opset)
        nodes = len(proto.graph.node)
        del proto
        checks = check_shapes(inputs, dynamic) if verify else []
        max_abs = max_rel = math.nan
        if verify:
            try:
                max_abs, max_rel = verify_onnx(tmp, reference, checks, rtol=rtol, atol=atol, source=framework)
            except ExportError as e:  # name the file the user asked for, not the temporary one
                raise ExportError(str(e).replace(str(tmp), str(target))) from e.__cause__
        tmp.chmod(0o666 & ~_umask())  # mkstemp made it private; the export is an ordinary file
        os.replace(tmp, target)
    shapes = tuple({k: tuple(int(d) for d in v.shape) for k, v in c.items()} for c in checks)
    return ExportResult(path=target, framework=framework, exporter=exporter, opset=written_opset, nodes=nodes,
                        max_abs_diff=max_abs, max_rel_diff=max_rel, checked_shapes=shapes,
                        seconds=time.perf_counter() - t0)
