"""Which shapes depend on run-time *values*, so no inference engine may state them as numbers.

An op such as Split, Squeeze or Reshape takes a shape-carrying input (split sizes, axes, target
shape). When that input is a constant, or is computed from shapes alone (Shape → Gather → Concat),
inference can know the output shape. When it carries run-time data (it traces back to a graph
input's values), the output shape is not knowable statically — and symbolic engines (onnxruntime's was
seen) guess anyway (Split assumed equal parts, Squeeze removed every 1-dim). Such outputs
are *guarded*: they get named unknown dims, and everything downstream takes only onnx's inference
(which propagates unknown dims instead of guessing).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import onnx

from graphcost.graph import graph_protos

# op_type → input slots whose *values* decide the output shape.
SHAPE_SLOTS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "Slice": (1, 2, 3, 4), "Squeeze": (1,), "Unsqueeze": (1,),
    "Split": (1,), "Pad": (1, 3), "Resize": (1, 2, 3), "Upsample": (1,), "ConstantOfShape": (0,),
    "Range": (0, 1, 2), "OneHot": (1,), "TopK": (1,), "CenterCropPad": (1,), "Col2Im": (1, 2),
    "DFT": (1, 2), "STFT": (1, 3), "HannWindow": (0,), "HammingWindow": (0,), "BlackmanWindow": (0,),
    "MelWeightMatrix": (0, 1), "MaxUnpool": (2,), "AffineGrid": (1,), "SplitToSequence": (1,),
    "ReduceSum": (1,), "ReduceMean": (1,), "ReduceMax": (1,), "ReduceMin": (1,), "ReduceProd": (1,),
    "ReduceL1": (1,), "ReduceL2": (1,), "ReduceLogSum": (1,), "ReduceLogSumExp": (1,), "ReduceSumSquare": (1,),
    "Compress": (1,), "NonZero": (0,), "Unique": (0,), "NonMaxSuppression": (0, 1, 2),
    "RandomNormal": (), "RandomUniform": (),
}
# Ops whose output rank equals input 0's rank whatever the shape-carrying values are.
RANK_PRESERVING = frozenset({"Split", "Slice", "Pad", "Tile", "Resize", "Upsample", "TopK", "CenterCropPad",
                             "MaxUnpool"})
# Ops whose outputs carry values computed from shapes only, never from data.
SHAPE_ONLY_VALUES = frozenset({"Shape", "Size"})


@dataclass(frozen=True)
class DataDependence:
    guarded: dict[str, str]
    """Output tensor → op type, for outputs whose shape depends on run-time values."""
    tainted: frozenset[str]
    """Tensors downstream of a guarded output (their shapes come from onnx inference only)."""


Candidates = list[tuple[onnx.NodeProto, list[str]]]
"""(node, the names in its shape-carrying input slots) for each node of an op in :data:`SHAPE_SLOTS`."""


def candidate(node: onnx.NodeProto, op_type: str, domain: str) -> list[str] | None:
    """The names in ``node``'s shape-carrying input slots (``op_type``/``domain`` are the node's, read by
    the caller), or None when the op has none."""
    positions = SHAPE_SLOTS.get(op_type)
    if positions is None or domain not in ("", "ai.onnx"):
        return None
    ins = list(node.input)  # read once: each read of a repeated field makes a new wrapper
    return [ins[i] for i in positions if i < len(ins) and ins[i]]


def analyze(model: onnx.ModelProto, *, nested: bool = True, holders: frozenset[str] | None = None,
            candidates: Candidates | None = None) -> DataDependence:
    """Find value-dependent shapes. ``nested=False`` promises the model has no subgraphs; ``holders``, when
    given, are the op types of every node of the model that holds one (only those nodes' attributes are read:
    Faster R-CNN legacy: 2 If nodes of 1,573 hold its 4 subgraphs). ``candidates``, for a model without
    subgraphs, are its nodes' :func:`candidate` slots in graph order, collected by a caller that walks the
    nodes anyway (the shapes pass's census); the nodes are then walked here only when a slot needs a walk up
    or something is guarded. synthetic-100k: 0.28-0.34 s CPU with the walk here, 0.11-0.12 s without it, and
    census and this together 0.60 s against 0.50 (best of 4, a fresh load each, alternating)."""
    if candidates is not None and not nested:
        return _analyze_flat(model, candidates)
    inits: set[str] = set()
    sources: set[str] = set()  # tensors whose values are run-time data
    nodes: list[onnx.NodeProto] = []
    graphs = [model.graph]
    while graphs:
        g = graphs.pop()
        inits.update(t.name for t in g.initializer)
        sources.update(vi.name for vi in g.input)
        nodes.extend(g.node)
        if nested:
            for node in g.node:
                if holders is not None and node.op_type not in holders:
                    continue
                for a in node.attribute:
                    if a.type == onnx.AttributeProto.GRAPH:
                        graphs.append(a.g)
                    elif a.type == onnx.AttributeProto.GRAPHS:
                        graphs.extend(a.graphs)
    sources -= inits

    found: Candidates = []
    for node in nodes:
        slots = candidate(node, node.op_type, node.domain)
        if slots is not None:
            found.append((node, slots))
    return _decide(found, inits, sources, lambda: nodes)


def _analyze_flat(model: onnx.ModelProto, candidates: Candidates) -> DataDependence:
    g = model.graph
    inits = {t.name for t in g.initializer}
    sources = {vi.name for vi in g.input} - inits
    return _decide(candidates, inits, sources, lambda: list(g.node))


def _decide(candidates: Candidates, inits: set[str], sources: set[str],
            all_nodes: Callable[[], list[onnx.NodeProto]]) -> DataDependence:
    """Guarded outputs and their taint, from the candidate slots (``all_nodes`` is called only when needed)."""
    # an initializer slot is never data (most Reshape targets of a static export): the producer table is only
    # built when some slot needs a walk up (synthetic-100k: its 20,000 Reshapes read initializers; this function
    # took 0.40-0.45 s with the table of 100,000 nodes' outputs and 0.21 s without it, CPU, one run each)
    memo: dict[str, bool] = dict.fromkeys(inits & {t for _, slots in candidates for t in slots}, False)
    producer: dict[str, onnx.NodeProto] = {}
    nodes: list[onnx.NodeProto] | None = None
    if any(t not in memo for _, slots in candidates for t in slots):
        nodes = all_nodes()
        producer = {o: node for node in nodes for o in node.output if o}
    guarded: dict[str, str] = {}
    for node, slots in candidates:
        if any(_is_data(t, sources, producer, memo) for t in slots):
            for o in node.output:
                if o:
                    guarded[o] = node.op_type
    if not guarded:
        return DataDependence({}, frozenset())
    tainted: set[str] = set(guarded)
    if nodes is None:
        nodes = all_nodes()
    _close(tainted, nodes)
    return DataDependence(guarded, frozenset(tainted))


def _close(tainted: set[str], nodes: list[onnx.NodeProto]) -> None:
    """Add to ``tainted``, in place, every output of ``nodes`` downstream of it."""
    # a node holding subgraphs (If, Loop, Scan) is downstream of whatever its bodies read or compute: an If whose
    # branch reshapes by a value-dependent count returns that count's shape, though its own input is a condition
    inner = {id(n): _inner_names(n) for n in nodes if any(a.type in _GRAPH_ATTRS for a in n.attribute)}
    changed = True
    while changed:  # bodies may come after their consumers in the walk: iterate to a fixed point
        changed = False
        for node in nodes:
            body = inner.get(id(node), ())
            if any(i in tainted for i in node.input if i) or any(n in tainted for n in body):
                for o in node.output:
                    if o and o not in tainted:
                        tainted.add(o)
                        changed = True


def downstream(model: onnx.ModelProto, sources: Iterable[str]) -> frozenset[str]:
    """``sources`` and every value downstream of them, over every node of the model, bodies included. For shapes
    found unstable after inference (a Loop-carried value that grows each trip), which no input slot shows; the
    taint is a forward reach, so a :class:`DataDependence` widened by these is its own taint united with this."""
    tainted = set(sources)
    _close(tainted, [n for g in graph_protos(model.graph) for n in g.node])
    return frozenset(tainted)


def _is_data(tensor: str, sources: set[str], producer: dict[str, onnx.NodeProto], memo: dict[str, bool]) -> bool:
    """Whether a tensor's *value* depends on run-time data (iterative, memoized walk up the producers)."""
    stack = [tensor]
    entered: set[str] = set()  # guards against malformed (cyclic) graphs
    while stack:
        t = stack[-1]
        if t in memo:
            stack.pop()
            continue
        if t in sources:
            memo[t] = True
            stack.pop()
            continue
        node = producer.get(t)
        if node is None or (node.domain in ("", "ai.onnx") and node.op_type in SHAPE_ONLY_VALUES):
            memo[t] = False  # an initializer, an outer constant, or a value computed from shapes only
            stack.pop()
            continue
        if node.op_type in ("If", "Loop", "Scan", "SequenceMap"):
            memo[t] = True  # values produced by a body are run-time data
            stack.pop()
            continue
        pending = [i for i in node.input if i and i not in memo]
        if pending and t not in entered:
            entered.add(t)
            stack.extend(pending)
            continue
        memo[t] = any(memo.get(i, False) for i in node.input if i)
        stack.pop()
    return memo[tensor]


def without_tainted(model: onnx.ModelProto, dep: DataDependence) -> onnx.ModelProto:
    """A copy without the top-level nodes any of whose outputs is tainted (and without tainted graph outputs).

    For the symbolic engines: their types for tainted values are thrown away anyway, and reasoning about
    value-dependent sizes is where they spend their time (a Faster R-CNN export: minutes of sympy in Slice
    and Min rules after NonMaxSuppression and TopK, in onnxruntime's engine and onnx-shape-inference
    alike). The tainted values keep onnx's inference, which propagates the named unknown dims. Nodes inside
    subgraphs are kept whole with their top-level node. The input is never changed."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    if not dep.tainted:
        return out
    g = out.graph
    gone = set(dep.tainted)
    kept: list[onnx.NodeProto] = []
    for n in g.node:  # graph order: a node reading a dropped value (a subgraph's outer read too) goes as well
        if any(o in gone for o in n.output if o) or any(i in gone for i in _reads(n)):
            gone.update(o for o in n.output if o)
        else:
            kept.append(n)
    del g.node[:]
    g.node.extend(kept)
    outputs = [vi for vi in g.output if vi.name not in gone]
    del g.output[:]
    g.output.extend(outputs)
    infos = [vi for vi in g.value_info if vi.name not in gone]
    del g.value_info[:]
    g.value_info.extend(infos)
    return out


_GRAPH_ATTRS = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)


def _bodies(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    """Every subgraph ``node`` holds, nested bodies included."""
    graphs = [a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH]
    graphs += [sub for a in node.attribute if a.type == onnx.AttributeProto.GRAPHS for sub in a.graphs]
    out: list[onnx.GraphProto] = []
    while graphs:
        g = graphs.pop()
        out.append(g)
        for inner in g.node:
            graphs.extend(a.g for a in inner.attribute if a.type == onnx.AttributeProto.GRAPH)
            graphs.extend(sub for a in inner.attribute if a.type == onnx.AttributeProto.GRAPHS for sub in a.graphs)
    return out


def _inner_names(node: onnx.NodeProto) -> set[str]:
    """Every name the subgraphs of ``node`` read or compute (nested bodies included)."""
    out: set[str] = set()
    for g in _bodies(node):
        out.update(o.name for o in g.output)
        for n in g.node:
            out.update(i for i in n.input if i)
            out.update(o for o in n.output if o)
    return out


def _reads(node: onnx.NodeProto) -> list[str]:
    """The names a node reads: its inputs and what its subgraphs' nodes read (outer-scope reads included)."""
    out = [i for i in node.input if i]
    for g in _bodies(node):
        for inner in g.node:
            out.extend(i for i in inner.input if i)
    return out
