"""Bytes of sequence values: the sum of their elements, from the ops that build them.

A sequence has no tensor shape, so its type says nothing of its size; the ops that build one do::

    SequenceEmpty()              0
    SequenceConstruct(t1..tn)    Σ bytes(ti)
    SequenceInsert(s, t)         bytes(s) + bytes(t)
    SplitToSequence(x, ...)      bytes(x)            (the pieces cover x)
    Identity(s)                  bytes(s)
    If                           the branches' output, when both give the same
    Loop carrying s              bytes(s) + M × (what one trip adds), M a constant trip count run in full

``torch.tensor_split`` exports as the last (MViT's class token: SequenceEmpty → Loop(SequenceInsert(Slice)) →
SequenceInsert → SequenceAt). What one trip adds is the body's carried output sized with its carried input at
0: an append-only body adds the same each trip. A sequence no rule sizes (SequenceErase, a Loop that may stop
early or whose trips are data) stays unknown, never zero. The liveness pass then holds a sequence's elements at
these bytes; the costs pass charges the sequence ops the in-place ideal and keeps these copies beside it
(``graphcost/ops/misc.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from graphcost._dims import Dim
from graphcost.graph import DEFAULT_DOMAIN, Graph, Node
from graphcost.ops._registry import tensor_bytes
from graphcost.passes._storage import sum_dims

BUILDERS = frozenset({"SequenceEmpty", "SequenceConstruct", "SequenceInsert", "SplitToSequence"})
"""Ops whose output is a sequence sized here (with Identity, If and Loop of one)."""
Size = Callable[[str], "Dim | None"]
"""The size of a value so far (a sequence sized earlier in the walk, else its tensor bytes)."""
_TRIPS = 1 << 20
"""Largest constant trip count sized (a larger one is left unknown: a malformed file's count, not a model's)."""


def has_sequences(graph: Graph) -> bool:
    """Whether any node of ``graph`` or of its subgraphs builds a sequence (only such graphs are sized)."""
    for node in graph.nodes():
        if node.op_type in BUILDERS and node.domain == DEFAULT_DOMAIN:
            return True
        for _, child in graph.children(node.name):
            if has_sequences(child):
                return True
    return False


def sequence_bytes(graph: Graph, given: Mapping[str, Dim] | None = None) -> dict[str, Dim]:
    """Bytes of each sequence value ``graph`` defines that the rules above size (``given``: sizes of values
    known from outside, such as a body's carried input). Values left out are unknown."""
    sizes: dict[str, Dim] = dict(given or {})

    def of(name: str) -> Dim | None:
        if not name:
            return None
        if name in sizes:
            return sizes[name]
        return tensor_bytes(graph.tensor(name))

    for node in graph.nodes():
        if node.domain != DEFAULT_DOMAIN or not node.outputs or not node.outputs[0]:
            continue
        got = _one(graph, node, of)
        for name, b in got.items():
            if b is not None:
                sizes[name] = b
    return {k: v for k, v in sizes.items() if not given or k not in given}


def _one(graph: Graph, node: Node, size: Size) -> dict[str, Dim | None]:
    """The sizes of the sequence outputs of one node."""
    op, out = node.op_type, node.outputs[0]
    ins = node.inputs
    if op == "SequenceEmpty":
        return {out: 0}
    if op == "SequenceConstruct":
        return {out: sum_dims([size(t) for t in ins])}
    if op == "SequenceInsert" and len(ins) >= 2:
        return {out: sum_dims([size(ins[0]), size(ins[1])])}
    if op == "SplitToSequence" and ins:
        return {out: size(ins[0])}
    if op == "Identity" and ins and _unshaped(graph, out):
        return {out: size(ins[0])}
    if op == "If":
        return _if(graph, node)
    if op == "Loop":
        return _loop(graph, node, size)
    return {}


def _unshaped(graph: Graph, name: str) -> bool:
    """A value with no tensor shape (a sequence: only those are sized here)."""
    t = graph.tensor(name)
    return t is not None and t.shape is None


def _if(graph: Graph, node: Node) -> dict[str, Dim | None]:
    """An If's sequence output: the branches' size when both branches give the same one."""
    branches = [child for _, child in graph.children(node.name)]
    if len(branches) != 2:
        return {}
    found: dict[str, Dim | None] = {}
    sized = [sequence_bytes(b) for b in branches]
    for k, out in enumerate(node.outputs):
        values = []
        for b, table in zip(branches, sized, strict=True):
            inner = b.output_names[k] if k < len(b.output_names) else ""
            values.append(table.get(inner, tensor_bytes(b.tensor(inner)) if inner else None))
        if out and values[0] is not None and values[0] == values[1] and _unshaped(graph, out):
            found[out] = values[0]
    return found


def _loop(graph: Graph, node: Node, size: Size) -> dict[str, Dim | None]:
    """A Loop's carried sequences: the initial size plus the trips times what one trip adds, when the trip count
    is a constant and every trip runs (the body's condition output is the Loop's constant-true condition)."""
    children = graph.children(node.name)
    if not children or len(node.inputs) < 2:
        return {}
    body = children[0][1]
    trips = _constant_int(graph, node.inputs[0])
    if trips is None or not 0 <= trips <= _TRIPS or not _runs_every_trip(graph, node, body):
        return {}
    found: dict[str, Dim | None] = {}
    carried = node.inputs[2:]
    for k, init in enumerate(carried):
        out = node.outputs[k] if k < len(node.outputs) else ""
        if not out or not init or k + 2 >= len(body.input_names) or k + 1 >= len(body.output_names):
            continue
        if not _unshaped(graph, out):
            continue  # a tensor carry: its shape says its size
        start = size(init)
        if start is None:
            continue
        added = sequence_bytes(body, {body.input_names[k + 2]: 0}).get(body.output_names[k + 1])
        if added is not None:
            found[out] = start + trips * added
    return found


def _constant_int(graph: Graph, name: str) -> int | None:
    if not name:
        return None
    value = graph.constant_value(name)
    if value is None or value.size != 1:
        return None
    return int(value.reshape(-1)[0])


def _runs_every_trip(graph: Graph, node: Node, body: Graph) -> bool:
    """The Loop's condition is a constant true, and the body hands it back unchanged (directly, through
    Identity, or as the outer constant it came from)."""
    cond = node.inputs[1] if len(node.inputs) > 1 else ""
    if cond:
        value = graph.constant_value(cond)
        if value is None or value.size != 1 or not bool(value.reshape(-1)[0]):
            return False
    out = body.output_names[0] if body.output_names else ""
    for _ in range(8):
        if not out:
            return False
        if len(body.input_names) > 1 and out == body.input_names[1]:
            return True  # the condition passed through
        value = body.constant_value(out)
        if value is not None:
            return value.size == 1 and bool(value.reshape(-1)[0])
        producer = body.producer(out)
        if producer is None or producer.op_type != "Identity" or not producer.inputs:
            return False
        out = producer.inputs[0]
    return False
