"""Fold BatchNormalization into its neighbours, verify in onnxruntime, and only then write the result.

``passes.batchnorm.find_foldable`` decides what folds (on the structure-only graph, so the decision costs no weight
reads); this module loads the full model (external data too), applies the per-channel math of that module's
docstring in float64 (fp16/bf16 weights are cast back to their dtype), removes the BNs and the constants only they
used, and runs the original and the folded model in onnxruntime on the same random inputs with every graph
optimization off (ORT's own BN folding would otherwise make the reference the folded model). When any output differs
beyond ``|folded − original| ≤ atol + rtol·|original|`` it raises :class:`FoldMismatch` and writes nothing.

The input file is only read. The output goes to a temporary directory beside ``out_path`` and is renamed into place
after verification; a model that had external data gets one ``<out name>.data`` file next to the output. The
temporary directory is removed on every way out: an error, Ctrl-C, or SIGTERM (which unwinds like Ctrl-C while
folding). A model whose loops could run without end is refused before anything is written or run
(``graphcost.measure._bounded``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import onnx.inliner
from onnx import numpy_helper

from graphcost._dims import parse_dim
from graphcost.analysis import Analysis
from graphcost.binding import DEFAULT_DIM_VALUE, run_failed
from graphcost.graph import Graph, node_attribute
from graphcost.load import display_path, external_files, load
from graphcost.measure import _ort_session
from graphcost.measure._bounded import RunRefused, check_bounded, terminate_as_exit
from graphcost.passes.batchnorm import (
    DEFAULT_EPSILON,
    PRECEDING,
    BatchNormResult,
    Foldable,
    Refusal,
    bind,
    find_foldable,
    scale_shift,
)

INT_INPUT_RANGE = (0, 4)  # integer inputs are drawn from [0, 4): small enough to be valid indices


class FoldError(Exception):
    """Bad input for folding (same path in and out, unknown dim, an input that cannot be fed); one line."""


class OriginalDoesNotRun(FoldError):
    """onnxruntime cannot run the model to be folded, so nothing can be verified; ``said`` is its first line."""

    def __init__(self, said: str) -> None:
        super().__init__(f"cannot verify: onnxruntime cannot run the original model ({said})")
        self.said = said


class FoldMismatch(Exception):
    """The folded model's outputs differ from the original's beyond the tolerance; nothing was written."""

    def __init__(self, message: str, max_abs_diff: float) -> None:
        super().__init__(message)
        self.max_abs_diff = max_abs_diff


@dataclass(frozen=True)
class FoldResult:
    analysis: BatchNormResult
    out_path: str
    binding: Mapping[str, int]
    """Dims used for the numbers and for the verification inputs (unbound ones are 1)."""
    bytes_saved: int | float | None
    flops_saved: int | float | None
    max_abs_diff: float
    max_rel_diff: float
    """Largest |folded − original| / max|original| over the outputs."""

    @property
    def folded(self) -> tuple[Foldable, ...]:
        return self.analysis.foldable

    @property
    def refused(self) -> tuple[Refusal, ...]:
        return self.analysis.refused

    def to_dict(self) -> dict[str, Any]:
        return {"batchnorm": self.analysis.to_dict(), "out_path": self.out_path, "binding": dict(self.binding),
                "bytes_saved": self.bytes_saved, "flops_saved": self.flops_saved,
                "max_abs_diff": self.max_abs_diff, "max_rel_diff": self.max_rel_diff}


def fold_model(path: str | os.PathLike[str], out_path: str | os.PathLike[str], *, dims: Mapping[str, int] | None = None,
               input_shapes: Mapping[str, Sequence[int | str]] | None = None,
               input_values: Mapping[str, Any] | None = None,
               rtol: float = 1e-4, atol: float = 1e-5, seed: int = 0) -> FoldResult:
    """Fold every foldable BN of the model at ``path``, verify, and write it to ``out_path``.

    ``dims``, ``input_shapes`` and ``input_values`` go to the front door (``graphcost.analysis.Analysis.of``);
    the verification inputs take the run binding (``Analysis.run_binding``: the user's dims, sizes the model
    states, else 1 where the model's shapes allow it) and the given input values.

    Raises ``graphcost.LoadError`` for an unreadable model, ``graphcost.binding.UnknownDim`` /
    ``UnboundDims`` / ``InvalidModel`` (ValueErrors) for dims or a model that cannot be bound,
    :class:`FoldError` for other bad input and :class:`FoldMismatch` when verification fails (nothing is
    written then).
    """
    src, dst = os.fspath(path), os.fspath(out_path)
    model = load(src)
    if _same_file(src, dst):
        raise FoldError(f"-o {display_path(dst)}: refusing to overwrite the input model")
    if os.path.isdir(dst):
        raise FoldError(f"-o {display_path(dst)}: is a directory, not a file name")
    if not os.path.isdir(os.path.dirname(os.path.abspath(dst))):
        raise FoldError(f"-o {display_path(dst)}: directory {display_path(os.path.dirname(os.path.abspath(dst)))} "
                        "does not exist")
    analysis = Analysis.of(model, dims=dims, input_shapes=input_shapes, input_values=input_values)
    run = analysis.run_binding()
    binding = run.as_dict()
    graph = analysis.graph
    analysis_result = find_foldable(graph)

    full = onnx.load(src, load_external_data=True)
    if full.functions:
        full = onnx.inliner.inline_local_functions(full)  # as graphcost.load does, so node indices agree
    inputs_files = external_files(model.proto, src)
    out_dir = os.path.dirname(os.path.abspath(dst))
    data_name = os.path.basename(dst) + ".data"
    if any(_same_file(f, os.path.join(out_dir, data_name)) for f in (src, *inputs_files)):
        raise FoldError(f"-o {display_path(dst)}: its data file {display_path(data_name)} would overwrite the input "
                        "model's data")
    external = bool(inputs_files) or full.ByteSize() > _INLINE_LIMIT
    for p in (src, dst):
        if not _utf8(p) and external:  # ORT opens files by a UTF-8 name; bytes only work for one small file
            raise FoldError(f"{display_path(p)}: onnxruntime cannot open a file whose name is not UTF-8, and a model "
                            "with external data (or over 2 GB) cannot be handed to it in memory; rename the file")
    feeds = random_inputs(full.graph, binding, seed, shapes=_input_shapes(graph), values=analysis.input_values)
    apply_folds(full, graph, analysis_result.foldable)
    try:  # the check runs both models: refuse loops that may not end before writing anything
        check_bounded(full, feeds)
    except RunRefused as e:
        raise FoldError(f"cannot verify: {e}") from None

    with terminate_as_exit():  # SIGTERM unwinds through the finally below, as Ctrl-C does
        tmp = ""
        try:
            try:
                tmp = tempfile.mkdtemp(prefix=".graphcost-fold-", dir=out_dir)
            except OSError as e:
                raise FoldError(f"-o {display_path(dst)}: cannot write there ({e.strerror or e})") from None
            tmp_model = os.path.join(tmp, os.path.basename(dst))
            if external:
                onnx.save_model(full, tmp_model, save_as_external_data=True, all_tensors_to_one_file=True,
                                location=data_name, size_threshold=1024)
            else:
                onnx.save_model(full, tmp_model)
            # a name onnxruntime cannot take is handed over as the file's bytes (_ort_session.session)
            try:
                max_abs, max_rel = verify(src, tmp_model, full.graph, binding, rtol=rtol, atol=atol, seed=seed,
                                          feeds=feeds)
            except OriginalDoesNotRun as e:
                refusal = run_failed(run, analysis.input_dims, e.said)  # dims that only took 1: name them
                if refusal is not None:
                    raise refusal from None
                raise
            if os.path.exists(os.path.join(tmp, data_name)):
                os.replace(os.path.join(tmp, data_name), os.path.join(out_dir, data_name))
            os.replace(tmp_model, dst)
        finally:
            if tmp:
                shutil.rmtree(tmp, ignore_errors=True)
    b, f = analysis_result.bytes_saved, analysis_result.flops_saved
    return FoldResult(analysis_result, dst, binding, None if b is None else bind(b, binding),
                      None if f is None else bind(f, binding), max_abs, max_rel)


_INLINE_LIMIT = (1 << 31) - (1 << 26)
"""A model larger than this is written with external data (protobuf's 2 GB limit, with room to spare)."""


def _utf8(path: str) -> bool:
    """Whether onnxruntime can open ``path`` by name (a POSIX name that is not UTF-8 holds lone surrogates)."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _input_shapes(graph: Graph) -> dict[str, tuple[Any, ...]]:
    """The analysed graph's input shapes (``--input-shape`` applied), for the verification inputs."""
    out: dict[str, tuple[Any, ...]] = {}
    for name in graph.input_names:
        t = graph.tensor(name)
        if t is not None and t.shape is not None:
            out[name] = tuple(t.shape)
    return out


# ------------------------------------------------------------------------------------------------ the rewrite
def apply_folds(model: onnx.ModelProto, graph: Graph, folds: tuple[Foldable, ...]) -> None:
    """Rewrite ``model`` in place: each fold's math, rewiring, then removal of the BNs and their dead constants.

    ``graph`` is the analysed graph of the same model; its node indices address ``model.graph.node``.
    """
    g = model.graph
    values = _Values(g)
    removed: list[int] = []
    params: set[str] = set()
    for fold in folds:
        bn_node, target_node = graph.node(fold.batchnorm), graph.node(fold.into)
        bn, target = g.node[bn_node.index], g.node[target_node.index]
        if list(bn.output) != list(bn_node.outputs) or bn.op_type != "BatchNormalization" \
                or target.op_type not in (target_node.op_type, "Gemm"):
            raise RuntimeError(f"fold {fold.batchnorm}: the loaded model's nodes do not match the analysed graph")
        eps = next((a.f for a in bn.attribute if a.name == "epsilon"), DEFAULT_EPSILON)
        gamma, beta, mean, var = (values.get(n) for n in bn.input[1:5])
        s, t = scale_shift(gamma, beta, mean, var, eps)
        if fold.direction == PRECEDING:
            _fold_preceding(values, target, s, t)
            _drop_value_info(g, target.output[0])
            target.output[0] = bn.output[0]
        else:
            _fold_following(values, target, s, t)
            _drop_value_info(g, bn.output[0])
            target.input[0] = bn.input[0]
        removed.append(bn_node.index)
        params.update(name for stat in bn.input[1:5] for name in values.chain(stat))
    for index in sorted(removed, reverse=True):
        del g.node[index]
    values.drop_unused(params | values.orphans)


def _fold_preceding(values: _Values, node: onnx.NodeProto, s: np.ndarray, t: np.ndarray) -> None:
    """Scale the output-channel slices of W by s; bias b ↦ s·b + t (see passes.batchnorm)."""
    w = values.get(node.input[1]).astype(np.float64)
    op = node.op_type
    if op == "Conv":
        w2 = w * s.reshape(-1, *[1] * (w.ndim - 1))  # W [M, C/g, k...]: output channel on axis 0
    elif op == "ConvTranspose":
        g = node_attribute(node, "group", 1)
        per = w.shape[1]  # W [C, M/g, k...]: output channel gi·(M/g) + j lives in group gi's rows, column j
        grouped = w.reshape(g, w.shape[0] // g, per, *w.shape[2:])
        w2 = (grouped * s.reshape(g, 1, per, *[1] * (w.ndim - 2))).reshape(w.shape)
    elif op == "Gemm":
        trans_b = node_attribute(node, "transB", 0)
        w2 = w * s[:, None] if trans_b else w * s[None, :]  # B [N, K] rows or B [K, N] columns
        _gemm_bias(values, node, lambda c: c * s, t)
        values.write(node.input[1], w2)
        return
    else:  # MatMul, W [K, N]: columns; a bias needs Gemm
        values.write(node.input[1], w * s[None, :])
        if np.any(t):
            _to_gemm(values, node, t)
        return
    values.write(node.input[1], w2)
    _conv_bias(values, node, lambda b: b * s + t, t)


def _fold_following(values: _Values, node: onnx.NodeProto, s: np.ndarray, t: np.ndarray) -> None:
    """Scale the input-channel slices of W by s; bias gains the op applied to the constant shift t."""
    w = values.get(node.input[1]).astype(np.float64)
    op = node.op_type
    if op == "Conv":
        g = node_attribute(node, "group", 1)
        m, cg = w.shape[0], w.shape[1]  # W [M, C/g, k...]
        grouped = w.reshape(g, m // g, cg, -1)
        extra = np.einsum("gmck,gc->gm", grouped, t.reshape(g, cg)).reshape(m)  # Σ_{c',k} W[m,c',k]·t_c
        values.write(node.input[1], (grouped * s.reshape(g, 1, cg, 1)).reshape(w.shape))
        _conv_bias(values, node, lambda b: b + extra, extra)
    elif op == "ConvTranspose":  # legal only with t = 0: no bias change
        values.write(node.input[1], w * s.reshape(-1, *[1] * (w.ndim - 1)))
    elif op == "Gemm":
        trans_b = node_attribute(node, "transB", 0)
        b_op = w.T if trans_b else w  # B' [K, N]
        alpha = node_attribute(node, "alpha", 1.0)
        extra = alpha * (t @ b_op)
        values.write(node.input[1], w * s[None, :] if trans_b else w * s[:, None])
        _gemm_bias(values, node, lambda c: c, extra)
    else:  # MatMul W [K, N]
        values.write(node.input[1], w * s[:, None])
        if np.any(t):
            _to_gemm(values, node, t @ w)


def _conv_bias(values: _Values, node: onnx.NodeProto, update: Any, fresh: np.ndarray) -> None:
    """Conv/ConvTranspose bias: update the existing one, or add ``fresh`` when the shift is non-zero."""
    if len(node.input) > 2 and node.input[2]:
        values.write(node.input[2], update(values.get(node.input[2]).astype(np.float64)))
    elif np.any(fresh):
        name = values.add(f"{node.name or node.output[0]}_bias", fresh, like=node.input[1])
        if len(node.input) > 2:
            node.input[2] = name  # an omitted optional bias ("")
        else:
            node.input.append(name)


def _gemm_bias(values: _Values, node: onnx.NodeProto, update: Any, extra: np.ndarray) -> None:
    """Gemm: Y = α·A'B' + β·C. New C' with β·C' = β·update(C) + extra, or C' = extra with β := 1."""
    beta = node_attribute(node, "beta", 1.0)
    if len(node.input) > 2 and node.input[2] and beta != 0:
        c = values.get(node.input[2]).astype(np.float64)
        values.write(node.input[2], update(c) + extra / beta)
        return
    if not np.any(extra):
        return
    name = values.add(f"{node.name or node.output[0]}_bias", extra, like=node.input[1])
    if len(node.input) > 2:
        if node.input[2]:
            values.orphans.add(node.input[2])  # β was 0: the old C was never used
        node.input[2] = name
    else:
        node.input.append(name)
    _set_attr(node, "beta", 1.0)


def _to_gemm(values: _Values, node: onnx.NodeProto, bias: np.ndarray) -> None:
    """A 2-D MatMul with a bias becomes Gemm(A, W, bias) (alpha = beta = 1, no transposes)."""
    name = values.add(f"{node.name or node.output[0]}_bias", bias, like=node.input[1])
    node.op_type = "Gemm"
    del node.attribute[:]
    node.input.append(name)


def _set_attr(node: onnx.NodeProto, name: str, value: float) -> None:
    for a in node.attribute:
        if a.name == name:
            a.f = value
            return
    node.attribute.append(onnx.helper.make_attribute(name, value))


def _drop_value_info(g: onnx.GraphProto, name: str) -> None:
    for i in reversed(range(len(g.value_info))):
        if g.value_info[i].name == name:
            del g.value_info[i]


class _Values:
    """Constant values of one graph by name: initializers and Constant-node outputs, read and replaced in place."""

    def __init__(self, g: onnx.GraphProto) -> None:
        self.g = g
        self.inits = {t.name: t for t in g.initializer}
        self.consts = {n.output[0]: n for n in g.node if n.op_type == "Constant" and n.domain in ("", "ai.onnx")}
        self.names = set(_all_names(g))
        self.orphans: set[str] = set()  # constants a fold stopped reading (cleanup candidates)
        # Identity copies of a constant (the legacy exporter's deduplication), to what they copy
        self.copies = {n.output[0]: n.input[0] for n in g.node
                       if n.op_type == "Identity" and n.domain in ("", "ai.onnx") and n.input and n.output}

    def chain(self, name: str) -> list[str]:
        """``name`` and the names its Identity copies read, down to the stored constant."""
        out = [name]
        while out[-1] not in self.inits and out[-1] not in self.consts and out[-1] in self.copies \
                and len(out) <= len(self.copies):
            out.append(self.copies[out[-1]])
        return out

    def get(self, name: str) -> np.ndarray:
        name = self.chain(name)[-1]
        if name in self.inits:
            return numpy_helper.to_array(self.inits[name])
        node = self.consts[name]
        for a in node.attribute:
            if a.name == "value":
                return numpy_helper.to_array(a.t)
            if a.name in ("value_float", "value_floats"):
                return np.asarray(onnx.helper.get_attribute_value(a), dtype=np.float32)
        raise KeyError(name)

    def write(self, name: str, value: np.ndarray) -> None:
        """Replace a constant, cast back to its own dtype (the math ran in float64)."""
        old = self.get(name)
        new = numpy_helper.from_array(np.asarray(value).astype(old.dtype), name)
        if name in self.inits:
            self.inits[name].CopyFrom(new)
        elif name in self.copies:  # copy on write: the Identity of a shared constant becomes this reader's own
            node = next(n for n in self.g.node if n.op_type == "Identity" and n.output and n.output[0] == name)
            self.orphans.update(self.chain(name)[1:])  # what it copied may now have no reader left
            del self.copies[name]
            node.op_type = "Constant"  # in place: the node indices the analysed graph addresses stay valid
            del node.input[:]
            del node.attribute[:]
            node.attribute.append(onnx.helper.make_attribute("value", new))
            self.consts[name] = node
        else:
            node = self.consts[name]
            del node.attribute[:]
            node.attribute.append(onnx.helper.make_attribute("value", new))

    def add(self, hint: str, value: np.ndarray, *, like: str) -> str:
        """A new initializer with a fresh name, in the dtype of constant ``like``."""
        name, k = hint, 1
        while name in self.names:
            k += 1
            name = f"{hint}_{k}"
        self.names.add(name)
        tensor = numpy_helper.from_array(np.asarray(value).astype(self.get(like).dtype), name)
        self.g.initializer.append(tensor)
        self.inits[name] = self.g.initializer[-1]
        return name

    def drop_unused(self, candidates: set[str]) -> None:
        """Remove initializers, Constant nodes and Identity copies among ``candidates`` that nothing reads any
        more (a dropped copy can leave what it read unread: repeated until nothing more goes)."""
        while True:
            used = {name for name in _read_names(self.g)} | {o.name for o in self.g.output}
            dead = candidates - used
            keep = [t for t in self.g.initializer if t.name not in dead]
            gone = len(keep) != len(self.g.initializer)
            if gone:
                del self.g.initializer[:]
                self.g.initializer.extend(keep)
            for i in reversed(range(len(self.g.node))):
                n = self.g.node[i]
                if n.op_type in ("Constant", "Identity") and n.output and n.output[0] in dead:
                    del self.g.node[i]
                    gone = True
            candidates = candidates & used
            if not gone:
                return


def _subgraphs(g: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield a.g
            elif a.type == onnx.AttributeProto.GRAPHS:
                yield from a.graphs


def _read_names(g: onnx.GraphProto) -> Iterator[str]:
    for n in g.node:
        yield from n.input
    for sub in _subgraphs(g):
        yield from _read_names(sub)
        yield from (o.name for o in sub.output)


def _all_names(g: onnx.GraphProto) -> Iterator[str]:
    yield from (t.name for t in g.initializer)
    yield from (v.name for v in (*g.input, *g.output, *g.value_info))
    for n in g.node:
        yield from n.input
        yield from n.output
    for sub in _subgraphs(g):
        yield from _all_names(sub)


# ------------------------------------------------------------------------------------------------ verification
def verify(original: str | bytes, folded: str | bytes, graph: onnx.GraphProto, binding: Mapping[str, int], *,
           rtol: float, atol: float, seed: int, feeds: Mapping[str, np.ndarray] | None = None) -> tuple[float, float]:
    """Run both models (file paths, or serialized bytes) on the same inputs (``feeds``, else random ones); return
    (max |diff|, max |diff| / max|original|) over outputs."""
    import onnxruntime as ort

    feeds = dict(feeds) if feeds is not None else random_inputs(graph, binding, seed)
    so = _ort_session.options()  # quiet: a refused model costs graphcost's one line, not ORT's log too
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # ORT would fold BN in the reference
    so.intra_op_num_threads = min(2, os.cpu_count() or 1)
    so.inter_op_num_threads = 1
    try:
        ref_sess = _ort_session.session(original, so)
        names = [o.name for o in ref_sess.get_outputs()]
        ref = _ort_session.run(ref_sess, names, feeds)
    except Exception as e:
        raise OriginalDoesNotRun(_first_line(e)) from None
    del ref_sess
    try:
        got = _ort_session.run(_ort_session.session(folded, so), names, feeds)
    except Exception as e:
        raise FoldMismatch(f"onnxruntime cannot run the folded model ({_first_line(e)})", float("inf")) from None
    max_abs = max_rel = 0.0
    for name, r, f in zip(names, ref, got, strict=True):
        r, f = np.asarray(r), np.asarray(f)
        if r.shape != f.shape:
            raise FoldMismatch(f"output {name!r} has shape {list(f.shape)} after folding, {list(r.shape)} before",
                               float("inf"))
        if r.size == 0:
            continue
        if r.dtype.kind not in "fc":
            if not np.array_equal(r, f):
                raise FoldMismatch(f"output {name!r} ({r.dtype}) differs after folding", float("inf"))
            continue
        r64, f64 = r.astype(np.float64), f.astype(np.float64)
        diff = np.abs(f64 - r64)
        worst = float(np.nanmax(diff)) if not np.all(np.isnan(diff)) else float("inf")
        scale = float(np.max(np.abs(r64)))
        max_abs = max(max_abs, worst)
        max_rel = max(max_rel, worst / scale if scale > 0 else (0.0 if worst == 0 else float("inf")))
        excess = diff - (atol + rtol * np.abs(r64))
        bad = ~(excess <= 0)  # NaN counts as a failure
        if np.any(bad):
            i = np.unravel_index(int(np.argmax(np.where(np.isnan(excess), np.inf, excess))), r.shape)
            raise FoldMismatch(
                f"output {name!r} differs after folding: largest |diff| {worst:.3g}; at {list(map(int, i))} "
                f"folded {f64[i]:.6g} vs original {r64[i]:.6g} (allowed atol {atol:g} + rtol {rtol:g}·|original|)",
                worst)
    return max_abs, max_rel


def random_inputs(graph: onnx.GraphProto, binding: Mapping[str, int], seed: int, *,
                  shapes: Mapping[str, Sequence[Any]] | None = None,
                  values: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """One array per graph input: normal floats, integers in ``INT_INPUT_RANGE``, fair booleans.

    ``shapes`` (input → dims, ints or graphcost dims) replaces an input's declared shape (``--input-shape``);
    ``values`` are used as given (``--input-value``)."""
    rng = np.random.default_rng(seed)
    inits = {t.name for t in graph.initializer}
    feeds: dict[str, np.ndarray] = {}
    for vi in graph.input:
        if vi.name in inits:
            continue
        if vi.type.WhichOneof("value") != "tensor_type":
            raise FoldError(f"cannot verify: input {vi.name!r} is not a tensor")
        tt = vi.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if values and vi.name in values:
            feeds[vi.name] = np.asarray(values[vi.name]).astype(dtype)
            continue
        given = (shapes or {}).get(vi.name)
        if given is not None:
            shape = [_given_dim(d, binding) for d in given]
        elif not tt.HasField("shape"):
            raise FoldError(f"cannot verify: input {vi.name!r} declares no shape")
        else:
            shape = [_dim_value(d, binding) for d in tt.shape.dim]
        if np.dtype(dtype).kind == "f" or str(dtype) == "bfloat16":
            feeds[vi.name] = rng.standard_normal(shape).astype(dtype)
        elif np.dtype(dtype).kind in "iu":
            feeds[vi.name] = rng.integers(*INT_INPUT_RANGE, size=shape).astype(dtype)
        elif np.dtype(dtype).kind == "b":
            feeds[vi.name] = rng.random(shape) < 0.5
        else:
            raise FoldError(f"cannot verify: input {vi.name!r} has element type {dtype}")
    return feeds


def _given_dim(d: Any, binding: Mapping[str, int]) -> int:
    if isinstance(d, int):
        return d if d > 0 else DEFAULT_DIM_VALUE
    try:
        return int(bind(d, binding))
    except (ValueError, TypeError, KeyError):
        return DEFAULT_DIM_VALUE


def _dim_value(d: onnx.TensorShapeProto.Dimension, binding: Mapping[str, int]) -> int:
    if d.HasField("dim_value") and d.dim_value > 0:
        return int(d.dim_value)
    if d.HasField("dim_param") and d.dim_param:
        try:
            return int(bind(parse_dim(d.dim_param), binding))
        except (ValueError, TypeError):
            return DEFAULT_DIM_VALUE
    return DEFAULT_DIM_VALUE


# ------------------------------------------------------------------------------------------------ files
def _first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0][:300]


def _same_file(a: str, b: str) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.exists(a) and os.path.exists(b) and os.path.samefile(a, b)
    except OSError:
        return False


__all__ = ["FoldError", "FoldMismatch", "FoldResult", "apply_folds", "fold_model", "random_inputs", "verify"]
