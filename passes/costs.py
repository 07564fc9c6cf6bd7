"""Per-node cost: dispatch each node to its op rule; charge bytes uniformly; cost control flow.

Bytes are compulsory traffic: each distinct input once (initializers included, omitted optionals
skipped) and each output once, at the tensor's dtype. Views (Reshape, Squeeze, Identity...) alias
their input and move no bytes; metadata ops (Shape, Size) read no data. A rule may state the traffic
itself (``Work.bytes_read`` / ``bytes_written``: the rows a Gather touches, a KV-cache append); where
that ideal is less than what the graph as written copies, the uniform charge is kept beside it in
``NodeCost.bytes_as_written`` (read + written).

Control flow: an If is costed through both branches and carries the more expensive one (each count
takes the larger branch, as an exact ``Max`` when the branches are symbolic); a Loop carries its body
times its trip count (a symbol ``trips_<node>`` when the count is not a constant); a Scan carries its
body times its sequence length. Nodes of a body are listed after their parent with path-like names
and ``depth > 0``; totals add up top-level nodes only, so nothing is counted twice.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from graphcost._dims import Dim, as_expr, simplify_dim, symbol
from graphcost._minmax import dim_max
from graphcost._sym import sympy
from graphcost.graph import Graph, Node, Tensor
from graphcost.ops import Kind, NodeView, ShapeUnknown, Unknown, Work, lookup, windows
from graphcost.ops._registry import RuleEntry, tensor_bytes
from graphcost.ops.misc import SEQUENCE_REFERENCES
from graphcost.ops.movement import views_of

__all__ = ["CONTROL_OPS", "CostResult", "CostWarning", "KvTraffic", "NodeCost", "TensorRef", "count_costs",
           "kv_cache_traffic", "tensor_bytes"]

CONTROL_OPS = ("If", "Loop", "Scan", "SequenceMap")


class TensorRef(NamedTuple):
    """A tensor as a cost row names it (one per tensor, shared by its producer's and consumers' rows)."""

    name: str
    shape: tuple[Dim, ...] | None
    dtype: str


class NodeCost(NamedTuple):
    """Cost of one node (of one execution; a body node is per iteration, see ``multiplier``).

    ``flops``/``macs`` are None when unknown; ``bytes_*`` are None when a shape is unknown.

    Frozen as a NamedTuple rather than a frozen dataclass, like ``roofline.Bound``: one is built per node, and
    a frozen dataclass of these 18 fields builds in 1.83 µs against 0.30 µs (measured, CPython 3.11).
    """

    name: str
    op_type: str
    domain: str
    kind: str | None
    dtype: str
    flops: Dim | None
    macs: Dim | None
    bytes_read: Dim | None
    bytes_written: Dim | None
    inputs: tuple[TensorRef, ...]
    outputs: tuple[TensorRef, ...]
    has_rule: bool
    depth: int = 0
    parent: str | None = None
    multiplier: Dim = 1
    """How many times this node runs per run of its top-level ancestor (body nodes of a Loop)."""
    note: str = ""
    unknown_reason: str | None = None
    bytes_as_written: Dim | None = None
    """Bytes (read + written) the graph as written moves where a rule charges the in-place ideal: a KV cache
    appended in place that the graph copies into ``present``. None for every other node (ideal = as written)."""
    parts: tuple[tuple[str, Dim], ...] = ()
    """The inputs the node reads only in part, each with the bytes it reads of it (a gather's rows, a slice's
    window: the rule's ``window``); every other input is read whole."""


@dataclass(frozen=True)
class CostWarning:
    node: str | None
    message: str


@dataclass(frozen=True)
class CostResult:
    nodes: tuple[NodeCost, ...]
    warnings: tuple[CostWarning, ...]

    def top_level(self) -> tuple[NodeCost, ...]:
        return tuple(n for n in self.nodes if n.depth == 0)


def _sum(values: Iterable[Dim | None]) -> Dim | None:
    """Σ of counts, None when any is unknown: the ints added in Python, the symbolic ones in one sum
    (:func:`_added`)."""
    total = 0
    terms: list[Dim] = []
    for v in values:
        if v is None:
            return None
        if type(v) is int:
            total += v
        else:
            terms.append(v)
    return _added(total, terms) if terms else total


def count_costs(graph: Graph) -> CostResult:
    """Cost every node of ``graph`` (and of its subgraphs)."""
    nodes: list[NodeCost] = []
    ctx = _Context()
    for node in graph.nodes():
        nodes.extend(_cost_node(graph, node, depth=0, parent=None, multiplier=1, ctx=ctx))
    return CostResult(tuple(nodes), tuple(ctx.warnings))


class _Seen(NamedTuple):
    """What the pass needs of one tensor name of one graph, looked up once: a tensor feeds ~2 nodes."""

    tensor: Tensor | None
    ref: TensorRef
    bytes: Dim | None


class _Rule(NamedTuple):
    """The registry's entry for one (domain, op_type), with what every node of that op reads of it."""

    entry: RuleEntry | None
    kind: str | None
    free_inputs: frozenset[int]
    moves_bytes: bool
    """False for views and metadata ops (``Kind.VIEW``, ``Kind.FREE``): they read and write no bytes."""


@dataclass
class _Context:
    """State of one count_costs call: warnings so far, one TensorRef per tensor (a tensor feeding many nodes is
    described once), each graph's tensors as looked up so far, and each op's registry entry.

    The tables make a node's inputs and outputs one dict hit each and its rule one more, where the tensor, its
    bytes, its TensorRef and the rule were looked up per use. synthetic-100k ``count_costs``: 3.39 s before,
    2.17 s after (with NodeCost and TensorRef as NamedTuples; measured side by side in one process, best of 2,
    on a loaded machine); synthetic-10k 0.73× the time of before."""

    warnings: list[CostWarning] = field(default_factory=list)
    refs: dict[int, TensorRef] = field(default_factory=dict)
    seen: dict[int, dict[str, _Seen]] = field(default_factory=dict)
    rules: dict[tuple[str, str], _Rule] = field(default_factory=dict)

    def ref(self, t: Tensor | None, name: str) -> TensorRef:
        if t is None:
            return TensorRef(name, None, "unknown")
        ref = self.refs.get(id(t))
        if ref is None or ref.name != name:
            ref = self.refs[id(t)] = TensorRef(name, t.shape, t.dtype)
        return ref

    def tensors(self, graph: Graph) -> dict[str, _Seen]:
        table = self.seen.get(id(graph))
        if table is None:
            table = self.seen[id(graph)] = {}
        return table

    def look(self, graph: Graph, name: str, table: dict[str, _Seen]) -> _Seen:
        """``table[name]``, made on the first use of the name."""
        t = graph.tensor(name)
        hit = table[name] = _Seen(t, self.ref(t, name), None if t is None else tensor_bytes(t))
        return hit

    def rule(self, domain: str, op_type: str) -> _Rule:
        entry = lookup(domain, op_type)
        if entry is None:
            got = _Rule(None, None, frozenset(), True)
        else:
            got = _Rule(entry, entry.kind.value, entry.free_inputs, entry.kind not in (Kind.VIEW, Kind.FREE))
        self.rules[(domain, op_type)] = got
        return got


def _added(number: int, terms: list[Dim]) -> Dim:
    """``number + terms[0] + terms[1] + ...``, as one sympy sum: adding symbolic counts one at a time
    re-sorts the growing sum at each step, which is quadratic in a node's inputs (SSD300 legacy's Concats of
    the detections kept for each of its 90 classes, each count in a dim of its own: about 1.4 s of a 6 s
    analyze, py-spy; 4.4-4.9 s with this)."""
    return sympy.Add(number, *terms)


def _cost_node(graph: Graph, node: Node, *, depth: int, parent: str | None, multiplier: Dim,
               ctx: _Context) -> list[NodeCost]:
    """The node's cost row (a control node's, then its bodies' rows).

    Bytes: each distinct input once (omitted optionals and the rule's ``free_inputs`` skipped) and each output
    once; views and metadata ops none. One pass over the names, each a table hit (see ``_Context``)."""
    table = ctx.tensors(graph)
    rule = ctx.rules.get((node.domain, node.op_type))
    if rule is None:
        rule = ctx.rule(node.domain, node.op_type)
    charge, free = rule.moves_bytes, rule.free_inputs
    inputs: list[Tensor | None] = []
    refs_in: list[TensorRef] = []
    missing: list[str] = []
    counted: list[str] = []
    dtype = None
    read: Dim = 0
    read_terms: list[Dim] = []  # the symbolic byte counts, added at once (:func:`_added`)
    names = node.inputs
    for slot, name in enumerate(names):
        if not name:
            inputs.append(None)
            continue
        hit = table.get(name)
        if hit is None:
            hit = ctx.look(graph, name, table)
        t = hit.tensor
        inputs.append(t)
        refs_in.append(hit.ref)
        if dtype is None and t is not None:
            dtype = t.dtype
        if charge and slot not in free and name not in counted:  # a name read twice is read once
            counted.append(name)
            b = hit.bytes
            if b is None:
                missing.append(name)
            elif type(b) is int:
                read += b
            else:
                read_terms.append(b)
    if read_terms:
        read = _added(read, read_terms)
    outputs: list[Tensor | None] = []
    refs_out: list[TensorRef] = []
    written: Dim = 0
    written_terms: list[Dim] = []
    for name in node.outputs:
        if not name:
            outputs.append(None)
            continue
        hit = table.get(name)
        if hit is None:
            hit = ctx.look(graph, name, table)
        outputs.append(hit.tensor)
        refs_out.append(hit.ref)
        if charge:
            b = hit.bytes
            if b is None:
                missing.append(name)
            elif type(b) is int:
                written += b
            else:
                written_terms.append(b)
    if written_terms:
        written = _added(written, written_terms)
    if dtype is None:
        dtype = "unknown"
    ins, outs = tuple(inputs), tuple(outputs)

    if node.op_type in CONTROL_OPS and graph.children(node.name):
        return _cost_control(graph, node, ins, outs, tuple(refs_in), tuple(refs_out), dtype, depth, parent,
                             multiplier, ctx)

    b_read: Dim | None = read
    b_written: Dim | None = written
    unsized = len(ctx.warnings)  # where the unknown-bytes warning goes, unless the rule states the bytes itself
    if missing:
        b_read = b_written = None
    entry = rule.entry
    view = NodeView(node, ins, outs, graph)
    parts: tuple[tuple[str, Dim], ...] = ()
    if entry is not None and entry.window is not None and not missing:
        taken = windows(entry, view)
        parts = tuple(taken.items())
        b_read = _read_in_part(graph, node, free, taken, table, ctx)
    if entry is None:
        reason = f"no cost rule for {node.domain}::{node.op_type}"
        _unsized(ctx, unsized, node, missing)
        ctx.warnings.append(CostWarning(node.name, f"{reason}; FLOPs unknown (register one with graphcost.ops.rule)"))
        return [NodeCost(node.name, node.op_type, node.domain, None, dtype, None, None, b_read, b_written,
                         tuple(refs_in), tuple(refs_out), False, depth, parent, multiplier, "", reason)]
    try:
        result = entry.fn(view)
    except ShapeUnknown as e:
        result = Unknown(str(e))
    except Exception as e:  # a rule bug must not kill the analysis, but it must be visible
        result = Unknown(f"cost rule for {node.op_type} failed: {type(e).__name__}: {e}")
    if missing and (isinstance(result, Unknown) or result.bytes_read is None or result.bytes_written is None):
        _unsized(ctx, unsized, node, missing)  # a rule that states its own bytes needs none of these
    if isinstance(result, Unknown):
        ctx.warnings.append(CostWarning(node.name, f"{node.op_type}: {result.reason}; FLOPs unknown"))
        return [NodeCost(node.name, node.op_type, node.domain, rule.kind, dtype, None, None,
                         b_read, b_written, tuple(refs_in), tuple(refs_out), True, depth, parent, multiplier, "",
                         result.reason)]
    ideal_read, ideal_written, as_written = _ideal_bytes(result, b_read, b_written)
    flops, macs = result.flops, result.macs
    return [NodeCost(node.name, node.op_type, node.domain, rule.kind, dtype,
                     flops if type(flops) is int else _clean(flops), macs if type(macs) is int else _clean(macs),
                     ideal_read, ideal_written, tuple(refs_in), tuple(refs_out), True, depth, parent, multiplier,
                     result.note, None, as_written, parts)]


def _unsized(ctx: _Context, at: int, node: Node, missing: list[str]) -> None:
    """Say, at position ``at`` of the warnings, that ``missing`` left the node's bytes uncounted."""
    if missing:
        ctx.warnings.insert(at, CostWarning(node.name, f"shape or dtype of {', '.join(missing[:3])} unknown: "
                                                       f"bytes of {node.op_type} not counted"))


def _read_in_part(graph: Graph, node: Node, free: frozenset[int], parts: dict[str, Dim], table: dict[str, _Seen],
                  ctx: _Context) -> Dim:
    """The uniform read charge of a node that reads some inputs only in part (the rule's window, ``parts`` by
    name): each distinct input once, those at their window's bytes, the rest whole. Called only when every
    input's bytes are known."""
    read: Dim = 0
    terms: list[Dim] = []
    seen: set[str] = set()
    for slot, name in enumerate(node.inputs):
        if not name or slot in free or name in seen:
            continue
        seen.add(name)
        b = parts.get(name)
        if b is None:
            hit = table.get(name)
            b = (hit if hit is not None else ctx.look(graph, name, table)).bytes
        if type(b) is int:
            read += b
        else:
            terms.append(b)  # type: ignore[arg-type]
    return _added(read, terms) if terms else read


def _ideal_bytes(result: Work, b_read: Dim | None, b_written: Dim | None
                 ) -> tuple[Dim | None, Dim | None, Dim | None]:
    """(read, written, as written): a rule's own traffic replaces the uniform charge; the uniform charge is
    kept as ``as written`` when the rule says the graph as written moves it (a KV-cache append)."""
    read = b_read if result.bytes_read is None else _clean(result.bytes_read)
    written = b_written if result.bytes_written is None else _clean(result.bytes_written)
    if not result.as_written or b_read is None or b_written is None:
        return read, written, None
    return read, written, b_read + b_written


def _clean(value: Dim) -> Dim:
    """Rules may hand back numpy ints or sympy numbers: store ints and sympy expressions only."""
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else simplify_dim(sympy.Float(value))
    return simplify_dim(as_expr(value))  # never sympify: it would evaluate a str


def _body_totals(rows: list[NodeCost], depth: int) -> tuple[Dim | None, Dim | None, Dim | None, Dim | None]:
    """Sum of the body's direct nodes (their own totals already include deeper bodies)."""
    direct = [r for r in rows if r.depth == depth]
    return (_sum(r.flops for r in direct), _sum(r.macs for r in direct),
            _sum(r.bytes_read for r in direct), _sum(r.bytes_written for r in direct))


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name).strip("_") or "node"


def _cost_control(graph: Graph, node: Node, inputs: tuple[Tensor | None, ...], outputs: tuple[Tensor | None, ...],
                  refs_in: tuple[TensorRef, ...], refs_out: tuple[TensorRef, ...], dtype: str, depth: int,
                  parent: str | None, multiplier: Dim, ctx: _Context) -> list[NodeCost]:
    children = graph.children(node.name)
    # Bytes of the control node itself: the inputs it reads directly (If's condition, Loop's counters).
    own_read: Dim | None = 0
    if node.op_type == "If":
        own_read = tensor_bytes(inputs[0]) if inputs and inputs[0] is not None else None

    if node.op_type == "If":
        branches: list[tuple[str, list[NodeCost]]] = []
        for label, child in children:
            rows: list[NodeCost] = []
            for cn in child.nodes():
                rows.extend(_cost_node(child, cn, depth=depth + 1, parent=node.name, multiplier=multiplier,
                                       ctx=ctx))
            branches.append((label, rows))
        totals = [_body_totals(rows, depth + 1) for _, rows in branches]
        flops, macs, b_read, b_written = (_max_of([t[i] for t in totals]) for i in range(4))
        pick = _pick_branch([t[0] for t in totals], [lbl for lbl, _ in branches])
        note = f"If: both branches costed; totals take the more expensive ({pick})"
        body_rows = [r for _, rows in branches for r in rows]
        factor: Dim = 1
    else:
        factor, why = _trip_count(graph, node, inputs)
        label, child = children[0]
        body_rows = []
        for cn in child.nodes():
            body_rows.extend(_cost_node(child, cn, depth=depth + 1, parent=node.name,
                                        multiplier=multiplier * factor, ctx=ctx))
        flops, macs, b_read, b_written = (
            None if v is None else simplify_dim(v * factor) if not isinstance(v * factor, int) else v * factor
            for v in _body_totals(body_rows, depth + 1))
        note = f"{node.op_type}: body × {why}"
        if not isinstance(factor, int) and str(factor).startswith("trips_"):
            ctx.warnings.append(CostWarning(node.name, f"{node.op_type} trip count unknown; "
                                                   f"totals carry the symbol {factor} (bind it with --dim)"))
    reason = None
    if flops is None:
        reason = f"{node.op_type} body has nodes of unknown cost"
    read_total = None if b_read is None or own_read is None else b_read + own_read
    written_as: Dim | None = None
    if own_read is not None and any(r.bytes_as_written is not None for r in body_rows if r.depth == depth + 1):
        if node.op_type == "If":  # the branch the totals took, as the graph writes it
            per = [_as_written(rows, depth + 1) for _, rows in branches]
            written_as = _max_of(per)
        else:
            once = _as_written(body_rows, depth + 1)
            written_as = None if once is None else simplify_dim(once * factor)
        written_as = None if written_as is None else simplify_dim(written_as + own_read)
    row = NodeCost(node.name, node.op_type, node.domain, Kind.CONTROL.value, dtype, flops, macs, read_total,
                   b_written, refs_in, refs_out, True, depth, parent, multiplier, note, reason, written_as)
    return [row, *body_rows]


def _as_written(rows: list[NodeCost], depth: int) -> Dim | None:
    """Bytes (read + written) the body's direct nodes move as the graph writes them: a node's
    ``bytes_as_written`` where it has one (a KV-cache copy, a sequence's), else its bytes; None when any is
    unknown. A control node's row carries its body's, so an optimum merged decoder (its KV Concats inside an
    If) says what its graph as written copies."""
    out: list[Dim | None] = []
    for r in rows:
        if r.depth != depth:
            continue
        if r.bytes_as_written is not None:
            out.append(r.bytes_as_written)
        elif r.bytes_read is None or r.bytes_written is None:
            return None
        else:
            out.append(r.bytes_read + r.bytes_written)
    return _sum(out)


def _max_of(values: list[Dim | None]) -> Dim | None:
    if any(v is None for v in values):
        return None
    vals = [v for v in values if v is not None]
    if not vals:
        return 0
    if all(isinstance(v, int) for v in vals):
        return max(vals)  # type: ignore[type-var]
    return simplify_dim(dim_max(*vals))  # sympy.Max's object, without its order search where none exists


def _pick_branch(flops: list[Dim | None], labels: list[str]) -> str:
    known = [(f, lbl) for f, lbl in zip(flops, labels, strict=True) if f is not None]
    if known and all(isinstance(f, int) for f, _ in known):
        return max(known, key=lambda x: x[0])[1]  # type: ignore[arg-type,return-value]
    return "per count, as Max(...)" if known else "unknown"


def _trip_count(graph: Graph, node: Node, inputs: tuple[Tensor | None, ...]) -> tuple[Dim, str]:
    """How many times the body runs: Loop's constant M, Scan's sequence length, else a named symbol."""
    if node.op_type == "Loop":
        if node.inputs and node.inputs[0]:
            value = graph.constant_value(node.inputs[0])
            if value is not None and value.size == 1:
                trips = int(value.reshape(-1)[0])
                return trips, f"trip count {trips}"
        s = symbol(f"trips_{_safe(node.name)}")
        return s, f"trip count {s} (not a constant)"
    if node.op_type == "Scan":
        n_scan = node.attribute("num_scan_inputs") or 0
        n_in = len(node.inputs)
        first_scan = n_in - int(n_scan)
        if node.opset >= 9 and 0 <= first_scan < n_in:
            axes = node.attribute("scan_input_axes") or [0] * int(n_scan)
            t = inputs[first_scan]
            if t is not None and t.shape is not None:
                axis = int(axes[0])
                axis = axis + len(t.shape) if axis < 0 else axis
                return t.shape[axis], f"sequence length {t.shape[axis]}"
        elif node.opset < 9 and len(inputs) > 1 + first_scan:
            t = inputs[first_scan]
            if t is not None and t.shape is not None and len(t.shape) > 1:
                return t.shape[1], f"sequence length {t.shape[1]}"
    s = symbol(f"trips_{_safe(node.name)}")
    return s, f"iterations {s} (not known statically)"


@dataclass(frozen=True)
class KvTraffic:
    """Bytes of KV-cache traffic per run: the ideal (read the cache once, append the new tokens in place) and
    the graph as written (the whole cache copied into ``present``). Both may be symbolic in the past length."""

    ideal: Dim
    as_written: Dim
    nodes: tuple[str, ...]
    """The cache nodes: KV-cache Concats and attention ops given a past."""


def kv_cache_traffic(graph: Graph, costs: CostResult) -> KvTraffic | None:
    """KV-cache traffic of a decoder, or None when no node appends to a cache (``NodeCost.bytes_as_written``).

    The cache nodes' own bytes, plus the reads of their outputs (and views of them) by other nodes: with a
    ``Concat(past, new) → present`` the attention reads ``present`` through MatMul/Transpose, and that read is
    the cache's one read. Per past token this is the coefficient of the past length (2 · layers · kv_heads ·
    head_dim · dtype bytes for the ideal).
    """
    top = [c for c in costs.top_level() if c.bytes_as_written is not None and c.kind != Kind.CONTROL.value
           and c.op_type not in SEQUENCE_REFERENCES]  # the cache nodes: no body's roll-up, no sequence's copies
    if not top:
        return None
    names = {c.name for c in top}
    ideal: Dim = 0
    as_written: Dim = 0
    cached: set[str] = set()
    for c in top:
        ideal = ideal + (c.bytes_read or 0) + (c.bytes_written or 0)
        as_written = as_written + (c.bytes_as_written or 0)
        if c.op_type == "Concat":  # attention ops' present outputs are read by the op itself, next run
            for ref in c.outputs:
                cached.update(views_of(graph, ref.name))
    for node in graph.nodes():
        if node.name in names:
            continue
        entry = lookup(node.domain, node.op_type)
        if entry is not None and entry.kind in (Kind.VIEW, Kind.FREE):
            continue
        for slot, name in enumerate(dict.fromkeys(node.inputs)):
            if name in cached and (entry is None or slot not in entry.free_inputs):
                b = tensor_bytes(graph.tensor(name)) or 0
                ideal, as_written = ideal + b, as_written + b  # the one read of the cache
    return KvTraffic(_expand(ideal), _expand(as_written), tuple(c.name for c in top))


def _expand(value: Dim) -> Dim:
    return value if isinstance(value, int) else simplify_dim(sympy.expand(value))
