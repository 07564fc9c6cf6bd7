"""What memory depends on, and the searches over it, for :mod:`graphcost.passes.liveness`.

* :class:`Problem` / :func:`problem` — a graph reduced to buffers (sizes, producer, readers) and body peaks,
  in one pass over the nodes; :func:`lifetimes` and :func:`simulate` — the live bytes of one order.
* :func:`greedy_order` — list scheduling with a heap, O((nodes + uses) log nodes); graph order at once when
  it is the only topological order.
* :func:`exact_order` — dynamic programming over the sets of nodes already run (small graphs only).
* :func:`pack` — greedy best fit, largest buffer first, over the buffers whose lifetimes overlap;
  output-sensitive: each buffer looks only at the placed buffers that clash with it in time.

Everything here is linear or n log n in the graph (pack: in the sum of lifetimes and of clashes), so the pass
stays flat per node on graphs of 100k nodes. liveness.py turns the orders and sizes into results.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

from graphcost._dims import evaluate
from graphcost.graph import Graph, Node, Tensor, TensorKind
from graphcost.ops import Kind, lookup
from graphcost.passes.costs import tensor_bytes


# ----------------------------------------------------------------------------------------------- the problem
@dataclass
class Problem:
    """A graph reduced to what memory depends on: buffers, who makes and reads them, and body peaks.

    Buffers are parallel lists indexed by buffer; a buffer is named by the tensor that owns the storage
    (views of it share it).
    """

    nodes: list[Node]
    name: list[str] = field(default_factory=list)
    size: list[int] = field(default_factory=list)
    producer: list[int] = field(default_factory=list)  # node index in graph order; -1 for a graph input
    output: list[bool] = field(default_factory=list)
    uses: list[list[int]] = field(default_factory=list)  # distinct buffers each node reads (bodies' too)
    defs: list[list[int]] = field(default_factory=list)  # fresh buffers each node writes (not views)
    preds: list[list[int]] = field(default_factory=list)  # distinct data dependencies, node indices
    body: list[int] = field(default_factory=list)  # peak of a node's subgraph(s), held at its step
    body_conservative: list[int] = field(default_factory=list)
    unknown: list[tuple[str, str]] = field(default_factory=list)  # (tensor, why its size is unknown)
    subgraphs: list[Graph] = field(default_factory=list)  # the nodes' subgraphs, in node order
    readers: list[int] = field(default_factory=list)  # how many nodes read each buffer
    reader_sum: list[int] = field(default_factory=list)  # the sum of their indices (names a single reader)
    last_read: list[int] = field(default_factory=list)  # the last reader in graph order; -1 for none
    min_peak: int = 0  # the largest single step: a node's inputs, outputs and body

    @property
    def conservative(self) -> int:
        return sum(self.size) + sum(self.body_conservative)


class Sizes:
    """Tensor bytes under one binding, computed once per distinct (shape, dtype)."""

    def __init__(self, binding: Mapping[str, int]) -> None:
        self.binding = binding
        self.cache: dict[tuple[Any, str], tuple[int, str | None]] = {}

    def __call__(self, graph: Graph, t: Tensor, unknown: list[tuple[str, str]]) -> int:
        key = (t.shape, t.dtype)
        hit = self.cache.get(key)
        if hit is None:
            hit = self.cache[key] = self.compute(t)
        if hit[1] is not None:
            unknown.append((f"{graph.prefix}{t.name}", hit[1]))
        return hit[0]

    def compute(self, t: Tensor) -> tuple[int, str | None]:
        nbytes = tensor_bytes(t)
        if nbytes is None:
            return 0, "shape or element size unknown"
        if isinstance(nbytes, int):
            return nbytes, None
        try:
            return math.ceil(evaluate(nbytes, self.binding)), None
        except KeyError as e:
            return 0, f"dim {e.args[0]} is not bound"
        except (TypeError, ValueError) as e:
            return 0, f"size {nbytes} has no value: {e}"


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


def problem(graph: Graph, binding: Mapping[str, int] | Sizes, *, own_inputs: bool = True) -> Problem:
    """Buffers of ``graph``. A body (``own_inputs=False``) leaves its formal inputs to its parent.

    One pass over the nodes, with plain loops and the sizes cached per (shape, dtype): this runs once per
    analysis on graphs of 100k nodes, so it avoids per-node comprehensions and calls.
    """
    sized = binding if isinstance(binding, Sizes) else Sizes(binding)
    cache = sized.cache
    nodes = list(graph.nodes())
    outputs = set(graph.output_names)
    own = graph.tensors()
    p = Problem(nodes, body=[0] * len(nodes), body_conservative=[0] * len(nodes))
    names, sizes, producer, is_output, unknown = p.name, p.size, p.producer, p.output, p.unknown
    readers, reader_sum, last_read = p.readers, p.reader_sum, p.last_read
    all_preds, all_uses, all_defs, body, body_conservative = p.preds, p.uses, p.defs, p.body, p.body_conservative
    owner: dict[str, int] = {}  # tensor name -> buffer index
    made_by = {out: i for i, node in enumerate(nodes) for out in node.outputs if out}  # the graph's producers
    views: dict[tuple[str, str], bool] = {}
    weights = (TensorKind.PARAMETER, TensorKind.CONSTANT)
    prefix = graph.prefix
    min_peak = 0

    if own_inputs:
        for name in graph.input_names:
            t = own.get(name)
            if t is not None and t.kind == TensorKind.INPUT:
                owner[name] = len(sizes)
                names.append(name)
                sizes.append(sized(graph, t, unknown))
                producer.append(-1)
                is_output.append(name in outputs)
                readers.append(0)
                reader_sum.append(0)
                last_read.append(-1)
    for i, node in enumerate(nodes):
        inputs = node.inputs
        children = graph.children(node.name)
        if children:
            inputs = (*inputs, *_outer_names(graph, node))
        preds: list[int] = []
        uses: list[int] = []
        for name in inputs:
            if name:
                j = made_by.get(name)
                if j is not None:
                    preds.append(j)
                b = owner.get(name)
                if b is not None:
                    uses.append(b)
        if len(preds) > 1:
            preds = list(dict.fromkeys(preds))
        if len(uses) > 1:
            uses = list(dict.fromkeys(uses))
        all_preds.append(preds)
        all_uses.append(uses)
        step_bytes = 0
        for b in uses:
            readers[b] += 1
            reader_sum[b] += i
            last_read[b] = i
            step_bytes += sizes[b]
        op = (node.domain, node.op_type)
        is_view = views.get(op)
        if is_view is None:
            entry = lookup(*op)
            is_view = views[op] = entry is not None and entry.kind == Kind.VIEW
        defs: list[int] = []
        for slot, out in enumerate(node.outputs):
            t = own.get(out) if out else None
            if t is None or t.kind in weights:
                continue
            if is_view and slot == 0 and node.inputs and node.inputs[0]:
                src = owner.get(node.inputs[0])
                if src is not None:  # the same storage, under a new name
                    owner[out] = src
                    is_output[src] = is_output[src] or out in outputs
                continue  # else a view of a weight or of an outer/formal value: not this graph's buffer
            hit = cache.get((t.shape, t.dtype))
            if hit is None:
                hit = cache[(t.shape, t.dtype)] = sized.compute(t)
            if hit[1] is not None:
                unknown.append((f"{prefix}{out}", hit[1]))
            owner[out] = len(sizes)
            defs.append(len(sizes))
            names.append(out)
            sizes.append(hit[0])
            producer.append(i)
            is_output.append(out in outputs)
            readers.append(0)
            reader_sum.append(0)
            last_read.append(-1)
            step_bytes += hit[0]
        all_defs.append(defs)
        if children:
            peak = conservative = 0
            for _, child in children:
                p.subgraphs.append(child)
                sub = problem(child, sized, own_inputs=False)
                peak = max(peak, simulate(sub, range(len(sub.nodes)))[1])  # If: one branch runs
                conservative = max(conservative, sub.conservative)  # Loop/Scan: one iteration at a time
                unknown.extend(sub.unknown)
            body[i] = peak
            body_conservative[i] = conservative
            step_bytes += peak
        if step_bytes > min_peak or i == 0:
            min_peak = step_bytes
    p.min_peak = min_peak
    return p


# ----------------------------------------------------------------------------------------------- simulation
def lifetimes(p: Problem, order: Sequence[int]) -> tuple[list[int], list[int]]:
    """First and last step of every buffer (graph outputs stay to the last step), in one pass over ``order``;
    for graph order (passed as a ``range``) straight from the producers and last readers the problem keeps."""
    last = max(len(order) - 1, 0)
    if isinstance(order, range) and order == range(len(p.nodes)):
        first = [i if i > 0 else 0 for i in p.producer]
        return first, [last if out else (r if r > s else s) for s, r, out in zip(first, p.last_read, p.output,
                                                                                 strict=True)]
    starts = [0] * len(p.size)
    ends = [-1] * len(p.size)
    for step, i in enumerate(order):
        for b in p.defs[i]:
            starts[b] = step
        for b in p.uses[i]:
            ends[b] = step  # steps only grow: the last reader's step
    for b, out in enumerate(p.output):
        if out:
            ends[b] = last
        elif ends[b] < starts[b]:
            ends[b] = starts[b]
    return starts, ends


def simulate(p: Problem, order: Sequence[int], spans: tuple[list[int], list[int]] | None = None
             ) -> tuple[list[int], int, int | None]:
    """Live bytes per step, the peak and its (first) step; ``spans`` are the order's lifetimes if known."""
    n = len(order)
    if n == 0:
        return [], 0, None
    starts, ends = lifetimes(p, order) if spans is None else spans
    delta = [0] * (n + 1)
    for start, end, size in zip(starts, ends, p.size, strict=True):
        if size:
            delta[start] += size
            delta[end + 1] -= size
    del delta[n]
    curve = list(accumulate(delta))
    body = p.body
    if any(body):
        curve = [c + body[i] for c, i in zip(curve, order, strict=True)]
    peak = max(curve)
    return curve, peak, curve.index(peak)


# ----------------------------------------------------------------------------------------------- reorder
def greedy_order(p: Problem) -> list[int]:
    """List scheduling: among ready nodes, run the one that frees the most bytes net of what it keeps.

    A node's key is ``kept - freed``: the bytes of its outputs that someone reads (or that are graph
    outputs), minus the bytes of its inputs it is the last pending reader of (graph outputs excepted);
    smaller runs first, ties go to the lower node index. A waiting node's key drops when one of its
    inputs is left with it as the only pending reader: it is pushed again under a new version and the
    stale entry is skipped. O((nodes + uses) log nodes).
    """
    if _only_order(p.preds):
        return list(range(len(p.nodes)))
    n = len(p.nodes)
    size, output, uses = p.size, p.output, p.uses
    pending = p.readers.copy()  # readers of each buffer not yet run
    remaining = p.reader_sum.copy()  # the sum of their indices: the last one's index once a single reader is left
    freeable = [0 if out else sz for sz, out in zip(size, output, strict=True)]
    kept = [0] * n
    succs: list[list[int]] = [[] for _ in range(n)]
    waiting = [0] * n
    for i in range(n):
        for b in p.defs[i]:
            if pending[b] or output[b]:
                kept[i] += size[b]
        pr = p.preds[i]
        waiting[i] = len(pr)
        for j in pr:
            succs[j].append(i)

    def key(i: int) -> int:
        k = kept[i]
        for b in uses[i]:
            if pending[b] == 1:
                k -= freeable[b]
        return k

    version = [0] * n
    done = [False] * n
    heap = [(key(i), i, 0) for i in range(n) if waiting[i] == 0]  # (the hot loop below inlines key())
    heapq.heapify(heap)
    order: list[int] = []
    push, pop, append = heapq.heappush, heapq.heappop, order.append
    while heap:
        _, i, v = pop(heap)
        if done[i] or v != version[i]:
            continue
        done[i] = True
        append(i)
        for b in uses[i]:
            left = pending[b] - 1
            pending[b] = left
            remaining[b] -= i
            if left == 1 and freeable[b]:  # its last reader now frees it (not a graph output): its key drops
                c = remaining[b]
                if waiting[c] == 0 and not done[c]:
                    version[c] += 1
                    push(heap, (key(c), c, version[c]))
        for s in succs[i]:
            w = waiting[s] - 1
            waiting[s] = w
            if w == 0:
                k = kept[s]
                for b in uses[s]:
                    if pending[b] == 1:
                        k -= freeable[b]
                push(heap, (k, s, version[s]))
    return order


def _only_order(preds: Sequence[Sequence[int]]) -> bool:
    """True when graph order is the only topological order: it is one, and every node reads the one before
    (a chain; skips to earlier nodes allowed). No search then has anything to choose."""
    for i, pr in enumerate(preds):
        if i and i - 1 not in pr:
            return False
        for j in pr:
            if j >= i:
                return False
    return True


def exact_order(p: Problem, max_states: int) -> list[int] | None:
    """An order of least peak, by dynamic programming over the sets of nodes already run; None past
    ``max_states`` sets.

    The bytes live after a set S has run depend on S alone, so the best peak reaching S is
    ``min over last node v of max(best(S - v), live(S - v) + outputs(v) + body(v))``.
    """
    n = len(p.nodes)
    size, output = p.size, p.output
    pred_mask = [sum(1 << j for j in pr) for pr in p.preds]
    cons_mask = [0] * len(size)
    for v, us in enumerate(p.uses):
        for b in us:
            cons_mask[b] |= 1 << v
    made = [sum(size[b] for b in p.defs[v]) + p.body[v] for v in range(n)]
    # Buffers present before any node runs; an unread input is live at the first step only.
    inputs = [k for k, prod in enumerate(p.producer) if prod < 0]
    start = sum(size[k] for k in inputs if output[k] or cons_mask[k])
    unread = sum(size[k] for k in inputs if not (output[k] or cons_mask[k]))
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
                    if output[b] or cons_mask[b] & ~s2:
                        after += size[b]
                for b in p.uses[v]:
                    if not output[b] and not cons_mask[b] & ~s2:
                        after -= size[b]
                nxt[s2] = (step_peak, after)
                back[s2] = (s, v)
        states += len(nxt)
        if states > max_states:
            return None
        layer = nxt
    order: list[int] = []
    s = (1 << n) - 1
    if s and s not in back:
        return None  # no order runs every node: the data flow has a cycle (liveness refuses those first)
    while s:
        s, v = back[s]
        order.append(v)
    return order[::-1]


# ----------------------------------------------------------------------------------------------- arena
def pack(sizes: Sequence[int], starts: Sequence[int], ends: Sequence[int], steps: int) -> int:
    """The arena's top when blocks (``sizes[k]`` bytes, live over steps ``starts[k]..ends[k]``) are placed
    largest first (ties: earlier start, then index): each at the start of the smallest free gap between the
    placed blocks whose lifetimes overlap its own (the lowest such gap on a tie), else on top of them.

    The blocks that clash with [s, e] are those live at step s plus those born in (s, e]; ``live[t]`` and
    ``born[t]`` list the placed ones, so each block sees only its clashes, never every placed block.
    Cost: O(sum of lifetimes + sum of clashes × log) instead of O(blocks²).
    """
    live: list[list[tuple[int, int]]] = [[] for _ in range(steps)]
    born: list[list[tuple[int, int]]] = [[] for _ in range(steps)]
    top = 0
    for _, s, k in sorted(zip([-size for size in sizes], starts, range(len(sizes)), strict=True)):
        size, e = sizes[k], ends[k]
        clash = live[s]
        if s < e:
            clash = clash.copy()
            for t in range(s + 1, e + 1):
                if born[t]:
                    clash += born[t]
        offset = 0
        if clash:
            if len(clash) > 1:
                clash.sort()
            cursor, best, best_gap = 0, -1, 0
            for lo, hi in clash:
                if lo - cursor >= size and (best < 0 or lo - cursor < best_gap):
                    best, best_gap = cursor, lo - cursor
                if hi > cursor:
                    cursor = hi
            offset = cursor if best < 0 else best
        block = (offset, offset + size)
        born[s].append(block)
        if s == e:
            live[s].append(block)
        else:
            for t in range(s, e + 1):
                live[t].append(block)
        if block[1] > top:
            top = block[1]
    return top
