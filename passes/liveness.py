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
The buffer model and the searches are in ``_order_search.py``, linear or n log n in the graph.
docs/memory.md gives the definitions and the training assumptions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress
from typing import Any

from graphcost._gc import paused as gc_paused
from graphcost.graph import CycleError, Graph, TensorKind
from graphcost.ops import Kind, lookup
from graphcost.passes._order_search import (
    Problem,
    Sizes,
    exact_order,
    greedy_order,
    lifetimes,
    pack,
    problem,
    simulate,
)

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


@dataclass(frozen=True, slots=True)
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

    def to_dict(self, *, lazy: bool = False) -> dict[str, Any]:
        """The JSON ``memory`` object. ``lazy``: the curve as an iterator of its dicts, for a writer that streams
        it (``Report.json_chunks``; synthetic-100k: 100k dicts, about 25 MiB, never all alive at once)."""
        curve = (p.to_dict() for p in self.curve)
        return {
            "parameter_bytes": self.parameter_bytes, "peak_activation_bytes": self.peak_activation_bytes,
            "peak_node": self.peak_node, "peak_step": self.peak_step,
            "live_at_peak": [t.to_dict() for t in self.live_at_peak],
            "min_peak_bytes": self.min_peak_bytes, "conservative_peak_bytes": self.conservative_peak_bytes,
            "curve": curve if lazy else list(curve), "top_tensors": [t.to_dict() for t in self.top_tensors],
            "reorder": None if self.reorder is None else self.reorder.to_dict(),
            "arena": None if self.arena is None else self.arena.to_dict(),
            "training": None if self.training is None else self.training.to_dict(),
            "unknown_tensors": [u.to_dict() for u in self.unknown_tensors],
        }


# Each pass below runs with the cyclic collector paused (graphcost/_gc.py): it keeps about ten containers per
# node and makes no cycles; with the collector on, the full collections they trigger made the pass 2x slower
# per node at 100k nodes than at 10k.


# ----------------------------------------------------------------------------------------------- orders
def _check_order(p: Problem, names: Sequence[str]) -> list[int]:
    index = {n.name: i for i, n in enumerate(p.nodes)}
    order = [index.get(name, -1) for name in names]
    if -1 in order or len(set(order)) != len(order) or len(order) != len(p.nodes):
        raise ValueError("order must name every top-level node of the graph exactly once")
    done = [False] * len(p.nodes)
    for i in order:
        missing = [j for j in p.preds[i] if not done[j]]
        if missing:
            raise ValueError(f"order is not topological: {p.nodes[i].name} runs before its input's producer "
                             f"{p.nodes[min(missing)].name}")
        done[i] = True
    return order


# ----------------------------------------------------------------------------------------------- reorder
def _reorder(p: Problem, graph_order_peak: int | None = None) -> ReorderResult:
    """The greedy search, and the exact one up to EXACT_MAX_NODES, against graph order (of peak
    ``graph_order_peak`` when the caller knows it)."""
    names = [node.name for node in p.nodes]
    graph_order = range(len(p.nodes))
    base = simulate(p, graph_order)[1] if graph_order_peak is None else graph_order_peak
    best: Sequence[int] = graph_order
    best_peak, method = base, "graph order"
    greedy = greedy_order(p)
    greedy_peak = base if greedy == list(graph_order) else simulate(p, greedy)[1]
    if greedy_peak < best_peak:
        best, best_peak, method = greedy, greedy_peak, "greedy"
    exact_peak = None
    if len(p.nodes) <= EXACT_MAX_NODES:
        exact = exact_order(p, EXACT_MAX_STATES)
        if exact is not None:
            exact_peak = simulate(p, exact)[1]
            if exact_peak < best_peak:
                best, best_peak, method = exact, exact_peak, "exact"
    chosen = tuple(names) if best is graph_order else tuple(map(names.__getitem__, best))
    return ReorderResult(best_peak, base, chosen, method, greedy_peak, exact_peak)


def reorder(graph: Graph, binding: Mapping[str, int]) -> ReorderResult:
    """A topological order with a peak no higher than graph order's (graph order itself when nothing beats it)."""
    with gc_paused():
        return _reorder(problem(graph, binding))


# ----------------------------------------------------------------------------------------------- arena
def _align(size: int, alignment: int) -> int:
    return -(-size // alignment) * alignment


def _arena(p: Problem, order: Sequence[int], alignment: int,
           spans: tuple[list[int], list[int]] | None = None, peak: int | None = None) -> ArenaResult:
    """Greedy best fit, largest buffer first (see :func:`pack`); bodies' peaks are one-step blocks."""
    if alignment < 1:
        raise ValueError(f"alignment must be ≥ 1, got {alignment}")
    starts, ends = lifetimes(p, order) if spans is None else spans
    placed = [size > 0 for size in p.size]
    sizes = [-(-size // alignment) * alignment for size in compress(p.size, placed)]
    first, last = list(compress(starts, placed)), list(compress(ends, placed))
    if any(p.body):
        for step, i in enumerate(order):
            if p.body[i] > 0:
                sizes.append(_align(p.body[i], alignment))
                first.append(step)
                last.append(step)
    top = pack(sizes, first, last, max(len(order), 1))
    if peak is None:
        peak = simulate(p, order, (starts, ends))[1]
    return ArenaResult(top, alignment, peak, len(sizes))


def arena(graph: Graph, binding: Mapping[str, int], alignment: int = 64) -> ArenaResult:
    """Arena bytes for graph order, each buffer rounded up to ``alignment``: never less than the ideal peak."""
    with gc_paused():
        p = problem(graph, binding)
        return _arena(p, range(len(p.nodes)), alignment)


# ----------------------------------------------------------------------------------------------- training
def _parameter_bytes(p: Problem, graph: Graph, sized: Sizes, unknown: list[tuple[str, str]]) -> tuple[int, int]:
    """Bytes of every parameter (initializers and Constant weights, subgraphs included), and of the floating ones;
    ``p`` is ``graph``'s problem (which lists its subgraphs)."""
    total = floating = 0
    cache, parameter = sized.cache, TensorKind.PARAMETER
    for g in (graph, *(g for child in p.subgraphs for g in child.walk())):
        for t in g.tensors().values():
            if t.kind == parameter:
                hit = cache.get((t.shape, t.dtype))
                size = sized(g, t, unknown) if hit is None or hit[1] is not None else hit[0]
                total += size
                if t.dtype.startswith(("float", "bfloat")):
                    floating += size
    return total, floating


def _saved(p: Problem) -> frozenset[int]:
    """Buffers read by a node whose backward needs its inputs (all but views, metadata and NO_SAVE_OPS)."""
    kept: set[int] = set()
    for node, uses in zip(p.nodes, p.uses, strict=True):
        if not uses:
            continue
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


def _training(p: Problem, order: Sequence[int], spans: tuple[list[int], list[int]], opts: TrainingOptions,
              params: int, floating: int) -> TrainingMemory:
    kept = _saved(p)
    grads = floating if opts.gradients else 0
    state = math.ceil(opts.optimizer_state_multiplier * floating)
    last = max(len(order) - 1, 0)
    held = [last if b in kept else e for b, e in enumerate(spans[1])]  # kept buffers stay to the end
    act_peak = simulate(p, order, (spans[0], held))[1]
    return TrainingMemory(params, grads, state, sum(p.size[b] for b in kept), act_peak,
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
    with gc_paused():
        return _liveness(graph, binding, order, alignment, training, search_order)


def _liveness(graph: Graph, binding: Mapping[str, int], order: Sequence[str] | None, alignment: int,
              training: TrainingOptions | None, search_order: bool) -> MemoryResult:
    sized = Sizes(binding)
    p = problem(graph, sized)
    n = len(p.nodes)
    if not all(j < i for i, pr in enumerate(p.preds) for j in pr):  # graph order is not topological: a cycle?
        cycle = graph.cycle()
        if cycle is not None:
            raise CycleError(cycle)  # no order runs every node, so no memory curve exists
    steps: Sequence[int] = range(n) if order is None else _check_order(p, order)
    in_graph_order = isinstance(steps, range) or steps == list(range(n))
    if in_graph_order:
        steps = range(n)  # lifetimes come straight from the problem
    spans = lifetimes(p, steps)
    curve, peak, peak_step = simulate(p, steps, spans)
    names = [node.name for node in p.nodes]
    live: list[LiveTensor] = []
    if peak_step is not None:
        starts, ends = spans
        at_peak = [k for k, (s, e, size) in enumerate(zip(starts, ends, p.size, strict=True))
                   if s <= peak_step <= e and size > 0]
        at_peak.sort(key=lambda k: (starts[k], k))
        for k in at_peak:
            live.append(LiveTensor(p.name[k], p.size[k], None if p.producer[k] < 0 else names[p.producer[k]]))
        peak_node = names[steps[peak_step]]
        if p.body[steps[peak_step]]:
            live.append(LiveTensor(f"{peak_node}/body", p.body[steps[peak_step]], peak_node))
    params, floating = _parameter_bytes(p, graph, sized, p.unknown)
    unknown = tuple(UnknownTensor(name, reason) for name, reason in dict.fromkeys(p.unknown))
    warnings: tuple[str, ...] = ()
    if unknown:
        shown = ", ".join(u.name for u in unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        warnings = (f"{len(unknown)} tensors of unknown size counted as 0 bytes ({shown})",)
    step_names = names if in_graph_order else [names[i] for i in steps]
    return MemoryResult(
        parameter_bytes=params,
        peak_activation_bytes=peak,
        peak_node=None if peak_step is None else names[steps[peak_step]],
        peak_step=peak_step,
        live_at_peak=tuple(live),
        min_peak_bytes=p.min_peak,
        conservative_peak_bytes=p.conservative,
        curve=tuple(map(CurvePoint, range(n), step_names, curve)),
        top_tensors=tuple(sorted(live, key=lambda t: (-t.bytes, t.name))[:TOP_TENSORS]),
        unknown_tensors=unknown,
        order=tuple(step_names),
        reorder=(_reorder(p, peak if in_graph_order else None) if search_order else None),
        arena=_arena(p, steps, alignment, spans, peak),
        training=None if training is None else _training(p, steps, spans, training, params, floating),
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
