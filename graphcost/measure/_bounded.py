"""Runs that end: refuse a model whose loops cannot be bounded before running it, and clean up when stopped.

graphcost runs models in onnxruntime (``bench``, ``gap``, ``fold``'s check). A Loop with trip count 2**63−1 — what
``torch.onnx`` exports for a ``while`` loop — analyzes fine, but a session run cannot be interrupted from Python
and may never return. So before a run, :func:`check_bounded` walks the graph and every subgraph and counts how
often each looping node runs its body, multiplied through nesting::

    Loop(M, cond)      M resolved without running the model: a constant, a fed graph input, or small shape
                       arithmetic over those (Shape, Gather, Cast, Add, ... evaluated by onnx's reference
                       evaluator on at most MAX_EVAL_ELEMENTS values). M absent: the loop runs until cond turns
                       false, which only running tells — refused unless cond is a constant false.
    Scan               the length of the scan axis of its first scan input (fed or inferred shape).
    com.microsoft      BeamSearch, GreedySearch, Sampling, WhisperBeamSearch: their max_length input.
    If                 its branches run as often as the If.

A count above ``limit`` (``MAX_ITERATIONS``), or one that cannot be resolved, raises :class:`RunRefused`
naming the node and the count or the reason. A Loop whose condition may end it early is still counted at M:
graphcost cannot know before running that it will.

:func:`terminate_as_exit` makes SIGTERM unwind like Ctrl-C for its duration, so ``finally`` blocks remove
temporary files when a run is killed.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import FrameType
from typing import Any

import numpy as np
import onnx

from graphcost import _scan
from graphcost.graph import node_attribute

MAX_ITERATIONS = 10**6
"""Body executions graphcost will run, all loops of the model together (nesting multiplies)."""
MAX_EVAL_ELEMENTS = 1 << 16
"""Shape arithmetic is evaluated only on tensors this small."""
MAX_DEPTH = 64
"""Producer chain followed back from a trip count."""
SHAPE_OPS = frozenset({
    "Abs", "Add", "Cast", "CastLike", "Ceil", "Concat", "Constant", "Div", "Equal", "Flatten", "Floor", "Gather",
    "Greater", "Identity", "Less", "Max", "Min", "Mod", "Mul", "Neg", "Not", "ReduceMax", "ReduceMin", "ReduceProd",
    "ReduceSum", "Reshape", "Shape", "Size", "Slice", "Squeeze", "Sub", "Unsqueeze", "Where",
})
"""Default-domain ops whose value a trip count may be computed through (none of them grows its input)."""
SEARCH_OPS = frozenset({"BeamSearch", "GreedySearch", "Sampling", "WhisperBeamSearch"})
"""com.microsoft generation ops: their subgraphs run up to ``max_length`` (input 1) times."""
_DEFAULT = ("", "ai.onnx")


class RunRefused(ValueError):
    """graphcost will not run this model in onnxruntime: a loop it cannot bound. One line naming the node."""

    def __init__(self, message: str, node: str, iterations: int | None = None) -> None:
        super().__init__(message)
        self.node = node
        self.iterations = iterations


def check_bounded(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray] | None = None, *,
                  limit: int = MAX_ITERATIONS, base_dir: str | None = None) -> None:
    """Raise :class:`RunRefused` unless every loop of ``model`` runs at most ``limit`` body iterations in all.

    ``feeds`` are the arrays the run will get (graph inputs not in it are unknown); ``base_dir`` is where a
    structure-only model's stripped payloads live (``graphcost.load.Model.base_dir``), for small constants.
    """
    if not any(_loops_in(g) for g in (model.graph, *(_function_graph(f) for f in model.functions))):
        return
    if model.functions:
        import onnx.inliner

        model = onnx.inliner.inline_local_functions(model)
    model = _with_shapes(model, feeds or {})
    opset = next((o.version for o in model.opset_import if o.domain in _DEFAULT), 1)
    top = _Scope(model.graph, None, dict(feeds or {}), opset, base_dir, "the model")
    _walk(top, 1, None, limit)


@contextlib.contextmanager
def terminate_as_exit() -> Iterator[None]:
    """For its duration, SIGTERM raises ``SystemExit(143)`` in the main thread, so cleanup runs as for Ctrl-C.

    Python runs the handler between bytecodes: a kill during a long onnxruntime call takes effect when the call
    returns, which :func:`check_bounded` keeps finite. Outside the main thread this does nothing. Also a
    decorator (``@terminate_as_exit()``), as any ``contextlib.contextmanager``.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    old = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old if old is not None else signal.SIG_DFL)


# --------------------------------------------------------------------------- the walk
def _walk(scope: _Scope, outer: int, within: str | None, limit: int) -> None:
    for node in scope.graph.node:
        trips: int | None = None  # None: the node's subgraphs run as often as the node itself
        if node.domain in _DEFAULT and node.op_type == "Loop":
            trips = _loop_trips(scope, node, limit)
        elif node.domain in _DEFAULT and node.op_type == "Scan":
            trips = _scan_trips(scope, node)
        elif node.domain == "com.microsoft" and node.op_type in SEARCH_OPS:
            trips = _search_trips(scope, node)
        total = outer if trips is None else outer * trips
        if trips is not None and total > limit:
            where = "" if within is None else f" ({total} in all, inside {within})"
            tail = ("; its condition may end it sooner, but only running it tells"
                    if node.op_type == "Loop" and len(node.input) > 1 and node.input[1] else "")
            raise RunRefused(f"{_label(node)} runs {trips} iterations{where}, more than the {limit} graphcost "
                             f"runs in onnxruntime{tail}{_hint(scope, node)}", _label(node), total)
        for attr in node.attribute:
            graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
            for g in graphs:
                child = _Scope(g, scope, {}, scope.opset, scope.base_dir, f"the body of {_label(node)}")
                nest = within if trips is None else _label(node) if within is None else f"{within} > {_label(node)}"
                _walk(child, total, nest, limit)


def _loop_trips(scope: _Scope, node: onnx.NodeProto, limit: int) -> int:
    m = node.input[0] if node.input else ""
    cond = node.input[1] if len(node.input) > 1 else ""
    if cond and _is_false(scope.value(cond)):
        return 0  # the body never runs
    if not m:
        if not cond:
            raise RunRefused(f"{_label(node)} has neither a trip count nor a condition: it never ends; graphcost "
                             "will not run it", _label(node))
        raise RunRefused(f"{_label(node)} has no trip count: it runs until its condition turns false, which only "
                         "running it tells; graphcost will not run a loop it cannot bound", _label(node))
    value = scope.value(m)
    if isinstance(value, _Unknown):
        raise RunRefused(f"{_label(node)}: its trip count cannot be known before running ({value.reason}); "
                         "graphcost will not run a loop it cannot bound", _label(node))
    n = _scalar(value)
    if n is None:
        raise RunRefused(f"{_label(node)}: its trip count {m!r} is not an integer scalar", _label(node))
    return max(n, 0)


def _scan_trips(scope: _Scope, node: onnx.NodeProto) -> int:
    n_scan = int(node_attribute(node, "num_scan_inputs", 0))
    if n_scan < 1 or len(node.input) < n_scan:
        raise RunRefused(f"{_label(node)}: no scan inputs (num_scan_inputs {n_scan})", _label(node))
    first = node.input[len(node.input) - n_scan]
    shape = scope.shape(first)
    if scope.opset < 9:  # Scan-8: [batch, sequence, ...], the body runs per batch element and step
        axes, per = [1], (shape[0] if shape and shape[0] is not None else None)
    else:
        axes, per = list(node_attribute(node, "scan_input_axes", None) or [0]), 1
    axis = axes[0]
    if shape is not None and axis < 0:
        axis += len(shape)
    length = shape[axis] if shape is not None and 0 <= axis < len(shape) else None
    if length is None or per is None:
        raise RunRefused(f"{_label(node)}: the length of its scan input {first!r} cannot be known before running; "
                         "graphcost will not run a loop it cannot bound", _label(node))
    return length * per


def _search_trips(scope: _Scope, node: onnx.NodeProto) -> int:
    value = scope.value(node.input[1]) if len(node.input) > 1 and node.input[1] else _Unknown("no max_length")
    n = None if isinstance(value, _Unknown) else _scalar(value)
    if n is None:
        why = value.reason if isinstance(value, _Unknown) else "not an integer scalar"
        raise RunRefused(f"{_label(node)}: its max_length cannot be known before running ({why}); graphcost will "
                         "not run a loop it cannot bound", _label(node))
    return max(n, 0)


def _hint(scope: _Scope, node: onnx.NodeProto) -> str:
    """Point at --dim when the count follows from the inputs rather than from a constant in the file."""
    name = node.input[0] if node.op_type == "Loop" and node.input else ""
    owner = scope.owner(name) if name else None
    if owner is not None and (name in owner.consts or (name in owner.producer and
                                                        owner.producer[name].op_type == "Constant")):
        return ""
    return " (it follows from the inputs: bind smaller dims with --dim)"


# --------------------------------------------------------------------------- values without running
@dataclass(frozen=True)
class _Unknown:
    reason: str


class _Scope:
    """One graph's names: what is constant, fed, or produced, and the shapes onnx inferred; outer scopes behind."""

    def __init__(self, graph: onnx.GraphProto, parent: _Scope | None, feeds: dict[str, np.ndarray], opset: int,
                 base_dir: str | None, what: str) -> None:
        self.graph, self.parent, self.feeds, self.opset, self.base_dir, self.what = (
            graph, parent, feeds, opset, base_dir, what)
        self.consts = {t.name: t for t in graph.initializer}
        self.sparse = {t.values.name for t in graph.sparse_initializer}
        self.producer = {o: n for n in graph.node for o in n.output if o}
        self.inputs = {i.name for i in graph.input}
        self.shapes = {v.name: _declared(v) for v in (*graph.input, *graph.value_info, *graph.output)}
        self.defined = set(self.consts) | self.sparse | set(self.producer) | self.inputs
        self._cache: dict[str, np.ndarray | _Unknown] = {}

    def owner(self, name: str) -> _Scope | None:
        scope: _Scope | None = self
        while scope is not None and name not in scope.defined:
            scope = scope.parent
        return scope

    def value(self, name: str, depth: int = 0) -> np.ndarray | _Unknown:
        scope = self.owner(name)
        if scope is None:
            return _Unknown(f"{name!r} is not defined")
        if name not in scope._cache:
            scope._cache[name] = scope._local(name, depth)
        return scope._cache[name]

    def shape(self, name: str, depth: int = 0) -> tuple[int | None, ...] | None:
        scope = self.owner(name)
        if scope is None:
            return None
        if name in scope.feeds:
            return tuple(int(d) for d in np.shape(scope.feeds[name]))
        if name in scope.consts:
            return tuple(int(d) for d in scope.consts[name].dims)
        known = scope.shapes.get(name)
        if known is not None and None not in known:
            return known
        node = scope.producer.get(name)
        if node is not None and node.domain in _DEFAULT and node.op_type in SHAPE_OPS:
            value = scope.value(name, depth)
            if not isinstance(value, _Unknown):
                return tuple(int(d) for d in value.shape)
        return known

    def _local(self, name: str, depth: int) -> np.ndarray | _Unknown:
        if name in self.feeds:
            return np.asarray(self.feeds[name])
        if name in self.consts:
            return self._tensor(self.consts[name])
        if name in self.sparse:
            return _Unknown(f"{name!r} is a sparse initializer")
        node = self.producer.get(name)
        if node is None:
            return _Unknown(f"{name!r} is an input of {self.what}, known only while it runs")
        return self._compute(node, name, depth)

    def _tensor(self, t: onnx.TensorProto) -> np.ndarray | _Unknown:
        if not onnx.external_data_helper.uses_external_data(t):
            return onnx.numpy_helper.to_array(t)
        if self.base_dir is None or int(np.prod([int(d) for d in t.dims])) > MAX_EVAL_ELEMENTS:
            return _Unknown(f"{t.name!r} is stored outside the model file")
        try:
            return _scan.read_external_payload(t, self.base_dir)
        except (_scan.ScanError, OSError, ValueError) as e:
            return _Unknown(f"{t.name!r} cannot be read ({str(e).splitlines()[0] if str(e) else type(e).__name__})")

    def _compute(self, node: onnx.NodeProto, name: str, depth: int) -> np.ndarray | _Unknown:
        what = f"{node.op_type} node {node.name!r}" if node.name else f"a {node.op_type} node"
        if node.domain not in _DEFAULT or node.op_type not in SHAPE_OPS:
            return _Unknown(f"{name!r} is computed while running, by {what}")
        if depth > MAX_DEPTH:
            return _Unknown(f"{name!r} is computed through more than {MAX_DEPTH} nodes")
        if node.op_type in ("Shape", "Size"):
            shape = self.shape(node.input[0], depth + 1)
            if shape is None or None in shape:
                return _Unknown(f"the shape of {node.input[0]!r} is not known before running")
            dims = np.array(shape, dtype=np.int64)
            if node.op_type == "Size":
                return np.array(int(np.prod(dims)), dtype=np.int64)
            start, end = node_attribute(node, "start", None), node_attribute(node, "end", None)
            return dims[slice(start, end)]
        args: dict[str, np.ndarray] = {}
        for i in node.input:
            if not i:
                continue
            v = self.value(i, depth + 1)
            if isinstance(v, _Unknown):
                return v
            if v.size > MAX_EVAL_ELEMENTS:
                return _Unknown(f"{i!r} is too large to evaluate before running ({v.size} values)")
            args[i] = v
        from onnx.reference import ReferenceEvaluator

        out: Any
        try:
            with np.errstate(all="ignore"):
                out = ReferenceEvaluator(node, opsets={"": self.opset}).run(None, args)
        except Exception as e:  # the reference evaluator raises whatever numpy raises
            return _Unknown(f"{what} cannot be evaluated before running ({type(e).__name__})")
        return np.asarray(out[list(node.output).index(name)])


def _with_shapes(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> onnx.ModelProto:
    """A copy with the fed input shapes fixed and onnx's shape inference (with data propagation) applied."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for vi in copy.graph.input:
        if vi.name in feeds and vi.type.HasField("tensor_type"):
            shape = vi.type.tensor_type.shape
            shape.Clear()
            for d in np.shape(feeds[vi.name]):
                shape.dim.add().dim_value = int(d)
    try:
        return onnx.shape_inference.infer_shapes(copy, data_prop=True)
    except Exception:  # inference is a help here, not a requirement: unknown shapes are refused where needed
        return copy


def _declared(vi: onnx.ValueInfoProto) -> tuple[int | None, ...] | None:
    if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
        return None
    return tuple(int(d.dim_value) if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim)


def _loops_in(g: onnx.GraphProto) -> bool:
    for n in g.node:
        if n.op_type in ("Loop", "Scan") or n.op_type in SEARCH_OPS:
            return True
        for a in n.attribute:
            if any(_loops_in(s) for s in ([a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs)):
                return True
    return False


def _function_graph(f: onnx.FunctionProto) -> onnx.GraphProto:
    g = onnx.GraphProto()
    g.node.extend(f.node)
    return g


def _is_false(value: np.ndarray | _Unknown) -> bool:
    return not isinstance(value, _Unknown) and value.size == 1 and not bool(value.reshape(-1)[0])


def _scalar(value: np.ndarray) -> int | None:
    if value.size != 1 or value.dtype.kind not in "iu":
        return None
    return int(value.reshape(-1)[0])


def _label(node: onnx.NodeProto) -> str:
    return f"{node.op_type} {node.name!r}" if node.name else f"{node.op_type} (output {node.output[0]!r})" \
        if node.output else node.op_type


__all__ = ["MAX_ITERATIONS", "RunRefused", "check_bounded", "terminate_as_exit"]
