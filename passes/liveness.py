"""Activation memory: the liveness peak, a memory-aware order, an arena estimate and training memory.

Nodes run one per step, in graph order (ONNX requires it to be topological) unless an order is given.
A *buffer* lives from the step that produces it (graph inputs from step 0) through the step of its
last consumer (graph outputs to the last step); the live set at a step holds that node's inputs and
outputs. Initializers and Constant outputs are parameters, never activations. ::

    step      0        1        2        3
    node    Conv     Relu     Conv     Add(c, x)
    x       ██████████████████████████████    graph input: from step 0 to its last consumer
    a       █████████████                     produced at 0, last read at 1
    b                ██████████████
    c                         █████████████
    d                                  ███    graph output: to the end

* Views (``Kind.VIEW``: Reshape, Squeeze, Unsqueeze, Flatten, Identity...) alias their input, as real
  runtimes do: the view's output is the *same buffer*, so it adds no bytes, and the buffer lives until the
  last consumer of the input or of any view of it. A view of a weight is a weight (0 activation bytes).
* Subgraphs (If/Loop/Scan bodies) are accounted for at their parent: the parent's step holds, on top of
  its live set, the body's own peak (the largest branch for If; one iteration for Loop/Scan), where the body
  counts only the tensors it produces. Its formal inputs and the outer values it reads are the parent's;
  outer values read by a body are inputs of the parent node, so they live through its step.
* A tensor whose size is unknown (no shape, string dtype, a dim the binding lacks) counts 0 bytes and is
  listed in ``unknown_tensors`` and the warnings, never silently.

Besides the peak (``peak_activation_bytes``) the result carries two bounds that hold for every order:
``min_peak_bytes`` (the largest single step's inputs + outputs) ≤ peak ≤ ``conservative_peak_bytes``
(every buffer at once, no reuse). :func:`reorder` searches for a topological order with a lower peak
(a greedy list scheduler, exact search on small graphs); :func:`arena` places buffers at offsets the way
an allocator must (aligned, no two live buffers overlapping), which can only cost more than the peak.
docs/memory.md gives the definitions and the training assumptions.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graphcost._dims import evaluate
from graphcost.graph import Graph, Node, TensorKind
from graphcost.ops import Kind, lookup
from graphcost.passes.costs import tensor_bytes

EXACT_MAX_NODES = 20
"""Graphs up to this many nodes also get an exact order search (dynamic programming over sets of done nodes)."""
EXACT_MAX_STATES = 200_000
"""The exact search gives up (and says so) past this many sets of done nodes."""
TOP_TENSORS = 10

# Ops whose backward pass needs none of their input values: the gradient is a fixed linear map of the
# output's gradient (or a routing of it). Their inputs are not saved for backward on their account.
NO_SAVE_OPS = frozenset({
    "Add", "Sub", "Neg", "Sum", "Mean", "Concat", "Split", "Slice", "Transpose", "Pad", "Expand", "Tile",
    "Cast", "ReduceSum", "ReduceMean", "GlobalAveragePool", "AveragePool", "DepthToSpace", "SpaceToDepth",
})


# ----------------------------------------------------------------------------------------------- results
@dataclass(frozen=True)
class LiveTensor:
    name: str
    bytes: int
    producer: str | None
    """The producing node; None for a graph input."""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "bytes": self.bytes, "producer": self.producer}


@dataclass(frozen=True)
class CurvePoint:
    step: int
    node: str
    live_bytes: int

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "node": self.node, "live_bytes": self.live_bytes}


@dataclass(frozen=True)
class UnknownTensor:
    name: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "reason": self.reason}


@dataclass(frozen=True)
class ReorderResult:
    """The best order found. ``peak_activation_bytes`` ≤ ``graph_order_peak_bytes`` always."""

    peak_activation_bytes: int
    graph_order_peak_bytes: int
    order: tuple[str, ...]
    method: str
    """Which order won: ``graph order`` (nothing better found), ``greedy`` or ``exact``."""
    greedy_peak_bytes: int
    exact_peak_bytes: int | None
    """The optimum over all topological orders; None when the graph is too large to search."""

    def to_dict(self) -> dict[str, Any]:
        return {"peak_activation_bytes": self.peak_activation_bytes,
                "graph_order_peak_bytes": self.graph_order_peak_bytes, "method": self.method,
                "greedy_peak_bytes": self.greedy_peak_bytes, "exact_peak_bytes": self.exact_peak_bytes,
                "order": list(self.order)}


@dataclass(frozen=True)
class ArenaResult:
    """Offsets for every buffer in one arena: ``bytes`` ≥ ``peak_activation_bytes`` (same order) always."""

    bytes: int
    alignment: int
    peak_activation_bytes: int
    buffers: int

    def to_dict(self) -> dict[str, Any]:
        return {"bytes": self.bytes, "alignment": self.alignment, "buffers": self.buffers}


@dataclass(frozen=True)
class TrainingOptions:
    optimizer_state_multiplier: float = 2.0
    """Optimizer state per parameter byte: 2 for Adam's two moments, 1 for momentum SGD, 0 for plain SGD."""
    gradients: bool = True


@dataclass(frozen=True)
class TrainingMemory:
    parameters: int
    gradients: int
    optimizer_state: int
    activations_kept: int
    """Bytes of the activations saved for backward (see ``NO_SAVE_OPS`` and ``assumptions``)."""
    activations_peak: int
    """The forward pass's peak when saved activations stay live to its end (≥ kept and ≥ the inference peak)."""
    total: int
    """parameters + gradients + optimizer_state + activations_peak."""
    assumptions: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"parameters": self.parameters, "gradients": self.gradients, "optimizer_state": self.optimizer_state,
                "activations_kept": self.activations_kept, "activations_peak": self.activations_peak,
                "total": self.total, "assumptions": list(self.assumptions)}


@dataclass(frozen=True)
class MemoryResult:
    """Activation memory of one order of the graph, in bytes under the binding."""

    parameter_bytes: int
    peak_activation_bytes: int
    peak_node: str | None
    peak_step: int | None
    live_at_peak: tuple[LiveTensor, ...]
    """Buffers live at the peak step, in order of production (a body's peak shows as ``<node>/body``)."""
    min_peak_bytes: int
    conservative_peak_bytes: int
    curve: tuple[CurvePoint, ...]
    top_tensors: tuple[LiveTensor, ...]
    unknown_tensors: tuple[UnknownTensor, ...]
    order: tuple[str, ...]
    reorder: ReorderResult | None = None
    arena: ArenaResult | None = None
    training: TrainingMemory | None = None
    warnings: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        """The JSON ``memory`` object."""
        return {
            "parameter_bytes": self.parameter_bytes, "peak_activation_bytes": self.peak_activation_bytes,
            "peak_node": self.peak_node, "peak_step": self.peak_step,
            "live_at_peak": [t.to_dict() for t in self.live_at_peak],
            "min_peak_bytes": self.min_peak_bytes, "conservative_peak_bytes": self.conservative_peak_bytes,
            "curve": [p.to_dict() for p in self.curve], "top_tensors": [t.to_dict() for t in self.top_tensors],
            "reorder": None if self.reorder is None else self.reorder.to_dict(),
            "arena": None if self.arena is None else self.arena.to_dict(),
            "training": None if self.training is None else self.training.to_dict(),
            "unknown_tensors": [u.to_dict() for u in self.unknown_tensors],
        }


# ----------------------------------------------------------------------------------------------- the problem
@dataclass
class _Buffer:
    name: str  # the tensor that owns the storage (views of it share it)
    size: int
    producer: int | None  # node index in graph order; None for a graph input
    output: bool
    consumers: set[int] = field(default_factory=set)


@dataclass
class _Problem:
    """A graph reduced to what memory depends on: buffers, who makes and reads them, and body peaks."""

    nodes: list[Node]
    buffers: list[_Buffer]
    uses: list[tuple[int, ...]]  # distinct buffers each node reads (outer values its bodies read included)
    defs: list[tuple[int, ...]]  # fresh buffers each node writes (not views)
    preds: list[set[int]]  # data dependencies, node indices
    body: list[int]  # peak of a node's subgraph(s), held at its step
    body_conservative: list[int]
    unknown: list[UnknownTensor]

    @property
    def conservative(self) -> int:
        return sum(b.size for b in self.buffers) + sum(self.body_conservative)


def _size(graph: Graph, name: str, binding: Mapping[str, int], unknown: list[UnknownTensor]) -> int:
    label = f"{graph.prefix}{name}"
    nbytes = tensor_bytes(graph.tensor(name))
    if nbytes is None:
        unknown.append(UnknownTensor(label, "shape or element size unknown"))
        return 0
    try:
        return math.ceil(evaluate(nbytes, binding))
    except KeyError as e:
        unknown.append(UnknownTensor(label, f"dim {e.args[0]} is not bound"))
    except (TypeError, ValueError) as e:
        unknown.append(UnknownTensor(label, f"size {nbytes} has no value: {e}"))
    return 0


def _outer_names(graph: Graph, node: Node) -> list[str]:
    """Values of enclosing graphs that ``node``'s subgraphs read (implicit inputs of the node)."""
    names: list[str] = []
    for _, child in graph.children(node.name):
        own = child.tensors()
        reads = [t for inner in child.nodes() for t in (*inner.inputs, *_outer_names(child, inner))]
        for t in (*reads, *child.output_names):  # a branch may return an outer value as it is
            if t and t not in own and t not in names:
                names.append(t)
    return names


def _problem(graph: Graph, binding: Mapping[str, int], *, own_inputs: bool = True) -> _Problem:
    """Buffers of ``graph``. A body (``own_inputs=False``) leaves its formal inputs to its parent."""
    nodes = list(graph.nodes())
    index = {n.name: i for i, n in enumerate(nodes)}
    outputs = set(graph.output_names)
    own = graph.tensors()
    buffers: list[_Buffer] = []
    owner: dict[str, int] = {}  # tensor name -> buffer index
    unknown: list[UnknownTensor] = []
    p = _Problem(nodes, buffers, [], [], [], [], [], unknown)

    def fresh(name: str, producer: int | None) -> int:
        owner[name] = len(buffers)
        buffers.append(_Buffer(name, _size(graph, name, binding, unknown), producer, name in outputs))
        return owner[name]

    if own_inputs:
        for name in graph.input_names:
            t = own.get(name)
            if t is not None and t.kind == TensorKind.INPUT:
                fresh(name, None)
    for i, node in enumerate(nodes):
        reads = [t for t in (*node.inputs, *_outer_names(graph, node)) if t]
        preds = {index[m.name] for t in reads if (m := graph.producer(t)) is not None and m.name in index}
        uses = tuple(dict.fromkeys(owner[t] for t in reads if t in owner))
        for b in uses:
            buffers[b].consumers.add(i)
        entry = lookup(node.domain, node.op_type)
        is_view = entry is not None and entry.kind == Kind.VIEW
        defs: list[int] = []
        for slot, out in enumerate(node.outputs):
            t = own.get(out) if out else None
            if t is None or t.kind in (TensorKind.PARAMETER, TensorKind.CONSTANT):
                continue
            src = node.inputs[0] if node.inputs else ""
            if is_view and slot == 0 and src:
                if src in owner:  # the same storage, under a new name
                    owner[out] = owner[src]
                    buffers[owner[src]].output |= out in outputs
                continue  # else a view of a weight or of an outer/formal value: not this graph's buffer
            defs.append(fresh(out, i))
        peaks, conservative = [0], [0]
        for _, child in graph.children(node.name):
            sub = _problem(child, binding, own_inputs=False)
            peaks.append(_simulate(sub, list(range(len(sub.nodes))))[1])
            conservative.append(sub.conservative)
            unknown.extend(sub.unknown)
        p.uses.append(uses)
        p.defs.append(tuple(defs))
        p.preds.append(preds)
        p.body.append(max(peaks))  # If: one branch runs; Loop/Scan: one iteration at a time
        p.body_conservative.append(max(conservative))
    return p


# ----------------------------------------------------------------------------------------------- simulation
def _lifetimes(p: _Problem, order: Sequence[int], hold: frozenset[int] = frozenset()) -> list[tuple[int, int]]:
    """[first, last] step of every buffer; buffers in ``hold`` (and graph outputs) stay to the last step."""
    pos = [0] * len(p.nodes)
    for step, i in enumerate(order):
        pos[i] = step
    last = max(len(order) - 1, 0)
    spans = []
    for k, b in enumerate(p.buffers):
        start = 0 if b.producer is None else pos[b.producer]
        end = max((pos[c] for c in b.consumers), default=start)
        if b.output or k in hold:
            end = last
        spans.append((start, max(start, end)))
    return spans


def _simulate(p: _Problem, order: Sequence[int], hold: frozenset[int] = frozenset()
              ) -> tuple[list[int], int, int | None]:
    """Live bytes per step, the peak and its (first) step."""
    n = len(order)
    if n == 0:
        return [], 0, None
    delta = [0] * (n + 1)
    for (start, end), b in zip(_lifetimes(p, order, hold), p.buffers, strict=True):
        delta[start] += b.size
        delta[end + 1] -= b.size
    curve, running = [], 0
    for step, i in enumerate(order):
        running += delta[step]
        curve.append(running + p.body[i])
    peak = max(curve)
    return curve, peak, curve.index(peak)


def _check_order(p: _Problem, names: Sequence[str]) -> list[int]:
    index = {n.name: i for i, n in enumerate(p.nodes)}
    order = [index.get(name, -1) for name in names]
    if -1 in order or len(set(order)) != len(order) or len(order) != len(p.nodes):
        raise ValueError("order must name every top-level node of the graph exactly once")
    done: set[int] = set()
    for i in order:
        missing = p.preds[i] - done
        if missing:
            raise ValueError(f"order is not topological: {p.nodes[i].name} runs before its input's producer "
                             f"{p.nodes[min(missing)].name}")
        done.add(i)
    return order


# ----------------------------------------------------------------------------------------------- reorder
def _greedy(p: _Problem) -> list[int]:
    """List scheduling: among ready nodes, run the one that frees the most bytes net of what it keeps."""
    n = len(p.nodes)
    succs: list[list[int]] = [[] for _ in range(n)]
    waiting = [len(pr) for pr in p.preds]
    for i, pr in enumerate(p.preds):
        for j in pr:
            succs[j].append(i)
    pending = [set(b.consumers) for b in p.buffers]  # consumers not yet run

    def key(i: int) -> int:
        freed = sum(p.buffers[b].size for b in p.uses[i] if pending[b] == {i} and not p.buffers[b].output)
        kept = sum(p.buffers[b].size for b in p.defs[i] if p.buffers[b].consumers or p.buffers[b].output)
        return kept - freed  # smaller is better

    version = [0] * n
    heap = [(key(i), i, 0) for i in range(n) if waiting[i] == 0]
    heapq.heapify(heap)
    order: list[int] = []
    done = [False] * n
    while heap:
        _, i, v = heapq.heappop(heap)
        if done[i] or v != version[i]:
            continue
        done[i] = True
        order.append(i)
        for b in p.uses[i]:
            pending[b].discard(i)
            if len(pending[b]) == 1:  # its last reader now frees it: that reader's key drops
                (c,) = pending[b]
                if waiting[c] == 0 and not done[c]:
                    version[c] += 1
                    heapq.heappush(heap, (key(c), c, version[c]))
        for s in succs[i]:
            waiting[s] -= 1
            if waiting[s] == 0:
                heapq.heappush(heap, (key(s), s, version[s]))
    return order


def _exact(p: _Problem) -> list[int] | None:
    """An order of least peak, by dynamic programming over the sets of nodes already run.

    The bytes live after a set S has run depend on S alone, so the best peak reaching S is
    ``min over last node v of max(best(S - v), live(S - v) + outputs(v) + body(v))``.
    """
    n = len(p.nodes)
    pred_mask = [sum(1 << j for j in pr) for pr in p.preds]
    cons_mask = [sum(1 << c for c in b.consumers) for b in p.buffers]
    made = [sum(p.buffers[b].size for b in p.defs[v]) + p.body[v] for v in range(n)]
    # Buffers present before any node runs; an unread input is live at the first step only.
    start = sum(b.size for k, b in enumerate(p.buffers) if b.producer is None and (b.output or cons_mask[k]))
    unread = sum(b.size for k, b in enumerate(p.buffers) if b.producer is None and not (b.output or cons_mask[k]))
    layer: dict[int, tuple[int, int]] = {0: (0, start)}  # set -> (best peak, live bytes after it)
    back: dict[int, tuple[int, int]] = {}
    states = 1
    for _ in range(n):
        nxt: dict[int, tuple[int, int]] = {}
        for s, (peak, live) in layer.items():
            for v in range(n):
                if s >> v & 1 or pred_mask[v] & ~s:
                    continue
                step_peak = max(peak, live + made[v] + (unread if s == 0 else 0))
                s2 = s | 1 << v
                if s2 in nxt and nxt[s2][0] <= step_peak:
                    continue
                after = live
                for b in p.defs[v]:
                    if p.buffers[b].output or cons_mask[b] & ~s2:
                        after += p.buffers[b].size
                for b in p.uses[v]:
                    if not p.buffers[b].output and not cons_mask[b] & ~s2:
                        after -= p.buffers[b].size
                nxt[s2] = (step_peak, after)
                back[s2] = (s, v)
        states += len(nxt)
        if states > EXACT_MAX_STATES:
            return None
        layer = nxt
    order: list[int] = []
    s = (1 << n) - 1
    while s:
        s, v = back[s]
        order.append(v)
    return order[::-1]


def _reorder(p: _Problem) -> ReorderResult:
    names = [node.name for node in p.nodes]
    graph_order = list(range(len(p.nodes)))
    base = _simulate(p, graph_order)[1]
    greedy = _greedy(p)
    greedy_peak = _simulate(p, greedy)[1]
    best, best_peak, method = graph_order, base, "graph order"
    if greedy_peak < best_peak:
        best, best_peak, method = greedy, greedy_peak, "greedy"
    exact_peak = None
    if len(p.nodes) <= EXACT_MAX_NODES:
        exact = _exact(p)
        if exact is not None:
            exact_peak = _simulate(p, exact)[1]
            if exact_peak < best_peak:
                best, best_peak, method = exact, exact_peak, "exact"
    return ReorderResult(best_peak, base, tuple(names[i] for i in best), method, greedy_peak, exact_peak)


def reorder(graph: Graph, binding: Mapping[str, int]) -> ReorderResult:
    """A topological order with a peak no higher than graph order's (graph order itself when nothing beats it)."""
    return _reorder(_problem(graph, binding))


# ----------------------------------------------------------------------------------------------- arena
def _align(size: int, alignment: int) -> int:
    return -(-size // alignment) * alignment


def _arena(p: _Problem, order: Sequence[int], alignment: int) -> ArenaResult:
    """Greedy best fit, largest buffer first: each goes into the smallest free gap among the buffers
    already placed whose lifetimes overlap its own, else on top of them. Bodies' peaks are one-step blocks."""
    if alignment < 1:
        raise ValueError(f"alignment must be ≥ 1, got {alignment}")
    items = [(_align(b.size, alignment), s, e) for b, (s, e) in zip(p.buffers, _lifetimes(p, order), strict=True)
             if b.size > 0]
    items += [(_align(p.body[i], alignment), step, step) for step, i in enumerate(order) if p.body[i] > 0]
    items.sort(key=lambda it: (-it[0], it[1]))
    starts, ends = np.zeros(len(items), np.int64), np.zeros(len(items), np.int64)
    offsets, sizes = np.zeros(len(items), np.int64), np.zeros(len(items), np.int64)
    top = 0
    for k, (size, s, e) in enumerate(items):
        clash = np.nonzero((starts[:k] <= e) & (ends[:k] >= s))[0]
        cursor, best, best_gap = 0, None, None
        for j in clash[np.argsort(offsets[clash], kind="stable")]:
            gap = int(offsets[j]) - cursor
            if gap >= size and (best_gap is None or gap < best_gap):
                best, best_gap = cursor, gap
            cursor = max(cursor, int(offsets[j] + sizes[j]))
        offset = cursor if best is None else best
        starts[k], ends[k], offsets[k], sizes[k] = s, e, offset, size
        top = max(top, offset + size)
    return ArenaResult(top, alignment, _simulate(p, order)[1], len(items))


def arena(graph: Graph, binding: Mapping[str, int], alignment: int = 64) -> ArenaResult:
    """Arena bytes for graph order, each buffer rounded up to ``alignment``: never less than the ideal peak."""
    p = _problem(graph, binding)
    return _arena(p, list(range(len(p.nodes))), alignment)


# ----------------------------------------------------------------------------------------------- training
def _walk(graph: Graph) -> Iterator[Graph]:
    yield graph
    for node in graph.nodes():
        for _, child in graph.children(node.name):
            yield from _walk(child)


def _parameter_bytes(graph: Graph, binding: Mapping[str, int], unknown: list[UnknownTensor]
                     ) -> tuple[int, int]:
    """Bytes of every parameter (initializers and Constant weights, subgraphs included), and of the floating ones."""
    total = floating = 0
    for g in _walk(graph):
        for t in g.tensors().values():
            if t.kind == TensorKind.PARAMETER:
                size = _size(g, t.name, binding, unknown)
                total += size
                floating += size if t.dtype.startswith(("float", "bfloat")) else 0
    return total, floating


def _saved(p: _Problem) -> frozenset[int]:
    """Buffers read by a node whose backward needs its inputs (all but views, metadata and NO_SAVE_OPS)."""
    kept: set[int] = set()
    for node, uses in zip(p.nodes, p.uses, strict=True):
        entry = lookup(node.domain, node.op_type)
        if entry is not None and entry.kind in (Kind.VIEW, Kind.FREE):
            continue
        if node.domain == "ai.onnx" and node.op_type in NO_SAVE_OPS:
            continue
        kept.update(uses)
    return frozenset(kept)


TRAINING_ASSUMPTIONS = (
    "gradients: one per floating-point parameter byte, in the parameter's dtype (integer weights get none)",
    "optimizer state: multiplier × floating-point parameter bytes (2 = Adam's two moments in the parameter dtype)",
    "activations kept: every activation read by a node whose backward needs its inputs; views, Shape/Size and "
    "linear routing ops (Add, Sub, Concat, Slice, Transpose, Pad, ReduceSum, average pooling...) save nothing",
    "the loss is outside the graph; graph outputs stay live to the end of the forward pass",
    "activations peak: the forward pass with kept activations held to its end; backward's transient "
    "gradients of activations and control-flow bodies' per-iteration saves are not counted",
)


def _training(p: _Problem, order: Sequence[int], opts: TrainingOptions, params: int, floating: int
              ) -> TrainingMemory:
    kept = _saved(p)
    grads = floating if opts.gradients else 0
    state = math.ceil(opts.optimizer_state_multiplier * floating)
    act_peak = _simulate(p, order, hold=kept)[1]
    return TrainingMemory(params, grads, state, sum(p.buffers[b].size for b in kept), act_peak,
                          params + grads + state + act_peak, TRAINING_ASSUMPTIONS)


# ----------------------------------------------------------------------------------------------- entry point
def liveness(
    graph: Graph,
    binding: Mapping[str, int],
    *,
    order: Sequence[str] | None = None,
    alignment: int = 64,
    training: TrainingOptions | None = None,
    search_order: bool = True,
) -> MemoryResult:
    """Activation memory of ``graph`` run in ``order`` (default: graph order), in bytes under ``binding``.

    Also searches for a better order (``search_order``), estimates an arena with ``alignment``, and,
    given ``training``, adds gradients, optimizer state and saved activations.
    """
    p = _problem(graph, binding)
    steps = list(range(len(p.nodes))) if order is None else _check_order(p, order)
    curve, peak, peak_step = _simulate(p, steps)
    spans = _lifetimes(p, steps)
    names = [node.name for node in p.nodes]
    live: list[LiveTensor] = []
    if peak_step is not None:
        at_peak = [k for k, (s, e) in enumerate(spans) if s <= peak_step <= e and p.buffers[k].size > 0]
        at_peak.sort(key=lambda k: (spans[k][0], k))
        for k in at_peak:
            b = p.buffers[k]
            live.append(LiveTensor(b.name, b.size, None if b.producer is None else names[b.producer]))
        peak_node = names[steps[peak_step]]
        if p.body[steps[peak_step]]:
            live.append(LiveTensor(f"{peak_node}/body", p.body[steps[peak_step]], peak_node))
    min_peak = max((sum(p.buffers[b].size for b in (*p.uses[i], *p.defs[i])) + p.body[i]
                    for i in range(len(p.nodes))), default=0)
    params, floating = _parameter_bytes(graph, binding, p.unknown)
    unknown = tuple(dict.fromkeys(p.unknown))
    warnings: tuple[str, ...] = ()
    if unknown:
        shown = ", ".join(u.name for u in unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        warnings = (f"memory: {len(unknown)} tensors of unknown size counted as 0 bytes ({shown})",)
    return MemoryResult(
        parameter_bytes=params,
        peak_activation_bytes=peak,
        peak_node=None if peak_step is None else names[steps[peak_step]],
        peak_step=peak_step,
        live_at_peak=tuple(live),
        min_peak_bytes=min_peak,
        conservative_peak_bytes=p.conservative,
        curve=tuple(CurvePoint(s, names[i], c) for s, (i, c) in enumerate(zip(steps, curve, strict=True))),
        top_tensors=tuple(sorted(live, key=lambda t: (-t.bytes, t.name))[:TOP_TENSORS]),
        unknown_tensors=unknown,
        order=tuple(names[i] for i in steps),
        reorder=_reorder(p) if search_order else None,
        arena=_arena(p, steps, alignment),
        training=None if training is None else _training(p, steps, training, params, floating),
        warnings=warnings,
    )


__all__ = [
    "ArenaResult",
    "CurvePoint",
    "LiveTensor",
    "MemoryResult",
    "ReorderResult",
    "TrainingMemory",
    "TrainingOptions",
    "UnknownTensor",
    "arena",
    "liveness",
    "reorder",
]
