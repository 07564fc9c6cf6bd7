"""Fusion policy: which nodes may share one kernel, and the reason when they may not.

A node's *role* comes from its registered op kind (``graphcost.ops``, data), refined by one literal table
(:data:`ROLE_OVERRIDES`) for ops whose fusion behaviour differs from their cost family (TopK is costed as a
reduction but sorts; Expand is costed as movement but is a broadcast). A :class:`Policy` then decides whether
a proposed group is legal. The built-in legality is what one kernel can physically do; a policy adds named
*capabilities* (what the default ``IDEAL`` lets fuse) and user predicates (extra refusals).

What ``IDEAL`` fuses (``[...]`` is one group, ``→`` a tensor)::

    [Conv → BatchNormalization → Relu → Add(·, skip)]   a compute anchor and its elementwise epilogue
    [MatMul → Add(bias) → Mul/Pow/Tanh… (GELU) → Cast]   (views such as Reshape pass through anywhere)
    [Sigmoid → Mul → Add]                                a chain of elementwise ops (broadcasts allowed)
    [ReduceMax → Sub → Exp → ReduceSum → Div]            reductions over one (elements → rows) domain with
    [ReduceMean → Sub → Pow → ReduceMean → … → Add]      their elementwise neighbours, before and after
    [Relu → MaxPool → Add]                               a pool with its elementwise neighbours

         ┌→ A ─┐
    x ───┤     ├→ D     a diamond fuses whole (every path between the two ends joins), or not at all
         └→ B ─┘

What it never fuses::

    Relu → [Conv]              prologue: an anchor reads its operands from memory (a DequantizeLinear excepted:
                               [DequantizeLinear(w) → MatMul] is the QDQ form of a quantized kernel)
    [Conv] → ReduceMean        an anchor's group holds only an elementwise epilogue
    [Conv → Relu] → [Conv]     at most one compute anchor per group
    Transpose, Gather, Concat, Split, Slice, Pad…   movement copies data: a kernel of its own
    If, Loop, Scan, LSTM, TopK, NonZero, Scatter…   opaque: control flow, recurrence, sort, data-dependent
    a → t (graph output) → b   t must be written anyway, so b reads it back
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from graphcost._dims import Dim, numel, prod
from graphcost._sym import sympy
from graphcost.graph import Graph, Node
from graphcost.ops import Kind, lookup
from graphcost.passes.costs import tensor_bytes


class Role(str, enum.Enum):
    """What a node can be in a fused kernel."""

    ANCHOR = "anchor"  # Conv, MatMul, Gemm, quantized and com.microsoft fused forms
    ELEMENTWISE = "elementwise"  # same-index (or broadcast) math, Cast, BatchNormalization (inference)
    REDUCTION = "reduction"  # Reduce*, Softmax, LayerNorm and other norms, pools
    VIEW = "view"  # Reshape, Squeeze, Flatten, Identity: aliases its input
    MOVEMENT = "movement"  # Transpose, Concat, Gather, Slice...: copies data, a kernel of its own
    OPAQUE = "opaque"  # sort, scatter, data-dependent shapes, random, recurrent, unknown ops
    CONTROL = "control"  # If, Loop, Scan: their bodies run as kernels of their own
    FREE = "free"  # Constant, Shape, Size: no kernel (treated like initializers)


NON_FUSABLE = frozenset({Role.MOVEMENT, Role.OPAQUE, Role.CONTROL})


class Code(str, enum.Enum):
    """The fixed vocabulary of boundary reasons (``Boundary.code``); each comes with a human sentence."""

    NON_FUSABLE = "non_fusable"  # "{node} ({op}) is not fusable: {kind}"
    LAYOUT_CHANGE = "layout_change"  # Transpose, DepthToSpace, a Reshape that is not a view, NCHWc reorders
    CONTROL_FLOW = "control_flow"  # If/Loop/Scan
    GRAPH_OUTPUT = "graph_output"  # the tensor is a graph output and must be written
    SECOND_ANCHOR = "second_anchor"  # two compute anchors in one kernel
    PROLOGUE = "prologue"  # something computed inside the group would feed the anchor
    DTYPE_CAST = "dtype_cast"  # a Cast feeding an anchor, or a policy that runs casts alone
    REDUCTION_IN_EPILOGUE = "reduction_in_epilogue"  # a reduction in an anchor's group
    ITERATION_SPACE = "iteration_space"  # an op iterates another element count than its group
    REDUCTION_MISMATCH = "reduction_mismatch"  # two reductions over different domains
    DIFFERENT_DTYPE = "different_dtype"  # policy predicate same_compute_dtype
    SHAPE_UNKNOWN = "shape_unknown"  # legality needs a shape nobody inferred
    SIZE_LIMIT = "size_limit"  # policy predicate max_nodes
    POLICY = "policy"  # a capability the policy lacks, or a user predicate
    WOULD_CREATE_CYCLE = "would_create_cycle"  # joining would also pull in a path that cannot join
    MULTI_CONSUMER = "multi_consumer"  # the tensor has consumers that land in different groups


CODE_TEXT: Mapping[str, str] = {
    "non_fusable": "non-fusable op",
    "layout_change": "layout change",
    "control_flow": "control flow",
    "graph_output": "graph output",
    "second_anchor": "second compute anchor",
    "prologue": "prologue into a compute anchor",
    "dtype_cast": "dtype cast",
    "reduction_in_epilogue": "reduction after a compute anchor",
    "iteration_space": "different iteration space",
    "reduction_mismatch": "reductions over different domains",
    "different_dtype": "different compute dtype",
    "shape_unknown": "shape unknown",
    "size_limit": "size limit",
    "policy": "policy",
    "would_create_cycle": "would create a cycle",
    "multi_consumer": "tensor used by several consumers",
}
"""A short label per code, for tables and summaries."""


@dataclass(frozen=True)
class Refusal:
    """Why a proposed group is illegal: a code from :class:`Code` and a sentence naming nodes and tensors."""

    code: str
    reason: str


# Ops whose fusion role differs from their registered cost kind: (role, what makes them so).
ROLE_OVERRIDES: Mapping[str, tuple[Role, str]] = {
    "TopK": (Role.OPAQUE, "sort/select"),
    "NonMaxSuppression": (Role.OPAQUE, "data-dependent shape"),
    "NonZero": (Role.OPAQUE, "data-dependent shape"),
    "Unique": (Role.OPAQUE, "data-dependent shape"),
    "Compress": (Role.OPAQUE, "data-dependent shape"),
    "CumSum": (Role.OPAQUE, "scan along an axis"),
    "CumProd": (Role.OPAQUE, "scan along an axis"),
    "Scatter": (Role.OPAQUE, "scatter"),
    "ScatterElements": (Role.OPAQUE, "scatter"),
    "ScatterND": (Role.OPAQUE, "scatter"),
    "TensorScatter": (Role.OPAQUE, "scatter"),
    "RandomNormal": (Role.OPAQUE, "random"),
    "RandomNormalLike": (Role.OPAQUE, "random"),
    "RandomUniform": (Role.OPAQUE, "random"),
    "RandomUniformLike": (Role.OPAQUE, "random"),
    "Bernoulli": (Role.OPAQUE, "random"),
    "Multinomial": (Role.OPAQUE, "random"),
    "ImageDecoder": (Role.OPAQUE, "decoder"),
    "EmbedLayerNormalization": (Role.OPAQUE, "embedding gather + normalization"),
    "Expand": (Role.ELEMENTWISE, ""),  # a broadcast: fuses like one
}

LAYOUT_OPS = frozenset({"Transpose", "DepthToSpace", "SpaceToDepth", "ReorderInput", "ReorderOutput"})
CAST_OPS = frozenset({"Cast", "CastLike"})

_KIND_ROLE: Mapping[Kind, Role] = {
    Kind.COMPUTE: Role.ANCHOR,
    Kind.ELEMENTWISE: Role.ELEMENTWISE,
    Kind.REDUCTION: Role.REDUCTION,
    Kind.NORMALIZATION: Role.REDUCTION,
    Kind.MOVEMENT: Role.MOVEMENT,
    Kind.VIEW: Role.VIEW,
    Kind.FREE: Role.FREE,
    Kind.CONTROL: Role.CONTROL,
    Kind.RECURRENT: Role.OPAQUE,
}

# Reductions over independent rows (anything else, such as a pool window, has an iteration space of its own).
_REDUCE_TO_OUTPUT = frozenset({
    "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
    "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin", "GlobalAveragePool", "GlobalMaxPool",
    "GlobalLpPool", "QLinearGlobalAveragePool", "QLinearReduceMean"})
_SOFTMAX_LIKE = frozenset({"Softmax", "LogSoftmax", "Hardmax", "QLinearSoftmax"})
_LAST_AXES_NORMS = frozenset({"LayerNormalization", "SimplifiedLayerNormalization", "SkipLayerNormalization",
                              "SkipSimplifiedLayerNormalization", "RMSNormalization"})


@dataclass(frozen=True)
class NodeInfo:
    """What the policy needs to know about one node, computed once per node."""

    name: str
    op_type: str
    role: Role
    detail: str  # why it is not fusable (for MOVEMENT/OPAQUE/CONTROL), else ""
    numel: Dim | None  # elements of output 0 (the iteration space of an elementwise op or anchor)
    in_numel: Dim | None  # elements of input 0
    rows: Dim | None  # reductions: independent rows; None for a reduction with its own iteration space
    dtype: str  # compute dtype: the first input's
    cast: tuple[str, str] | None = None  # (from, to) for Cast

    @property
    def kernel(self) -> bool:
        """Does this node run as (part of) a kernel? Views and free ops do not."""
        return self.role not in (Role.VIEW, Role.FREE)


def classify(graph: Graph, node: Node) -> NodeInfo:
    """The fusion role and iteration space of one node (registry kind, refined by ROLE_OVERRIDES)."""
    entry = lookup(node.domain, node.op_type)
    detail = ""
    if node.op_type in ROLE_OVERRIDES and (entry is None or entry.domain in ("ai.onnx", "com.microsoft")):
        role, detail = ROLE_OVERRIDES[node.op_type]
    elif entry is None:
        role, detail = Role.OPAQUE, f"unknown op {node.domain}::{node.op_type} (no rule)"
    else:
        role = _KIND_ROLE[entry.kind]
        if entry.kind == Kind.RECURRENT:
            detail = "recurrent (runs its own loop over the sequence)"
        elif entry.kind == Kind.CONTROL:
            detail = "control flow (its body runs as kernels of its own)"
        elif entry.kind == Kind.MOVEMENT:
            detail = "layout change" if node.op_type in LAYOUT_OPS else "movement (copies data)"
    if node.op_type == "BatchNormalization" and not _bn_training(node):
        role = Role.ELEMENTWISE  # inference BN is one multiply-add per element
    out = graph.tensor(node.outputs[0]) if node.outputs and node.outputs[0] else None
    inp = graph.tensor(node.inputs[0]) if node.inputs and node.inputs[0] else None
    if role is Role.VIEW:
        why_not = _not_a_view(graph, node)
        if why_not:
            role, detail = Role.MOVEMENT, why_not
    out_n = None if out is None or out.shape is None else numel(out.shape)
    in_n = None if inp is None or inp.shape is None else numel(inp.shape)
    rows = _rows(node, inp.shape if inp is not None else None, out_n) if role is Role.REDUCTION else None
    dtype = next((t.dtype for t in (graph.tensor(i) for i in node.inputs if i) if t is not None), "unknown")
    cast = None
    if node.op_type in CAST_OPS and out is not None:
        cast = (dtype, out.dtype)
    return NodeInfo(node.name, node.op_type, role, detail, out_n, in_n, rows, dtype, cast)


def _bn_training(node: Node) -> bool:
    if node.opset >= 14:
        return bool(node.attribute("training_mode") or 0)
    return sum(1 for o in node.outputs if o) > 1


def _not_a_view(graph: Graph, node: Node) -> str:
    """Empty when the node really aliases its input; else why it must copy (then it is a layout change)."""
    if any(o for o in node.outputs[1:] if graph.consumers(o) or o in graph.output_names):
        return f"{node.op_type} writes a second output ({node.outputs[1]}): not a view"
    if not node.inputs or not node.inputs[0] or not node.outputs:
        return ""
    b_in, b_out = tensor_bytes(graph.tensor(node.inputs[0])), tensor_bytes(graph.tensor(node.outputs[0]))
    if b_in is not None and b_out is not None and not same(b_in, b_out):
        return f"{node.op_type} changes the storage size ({b_in} → {b_out} B): not a view"
    return ""


def _rows(node: Node, shape: tuple[Dim, ...] | None, out_numel: Dim | None) -> Dim | None:
    """Independent rows of a row reduction (its output elements, or the leading dims of a norm)."""
    op = node.op_type
    if op in _REDUCE_TO_OUTPUT:
        return out_numel
    if shape is None:
        return None
    rank = len(shape)
    if op in _SOFTMAX_LIKE:
        axis = node.attribute("axis")
        if node.opset >= 13 or op == "QLinearSoftmax":
            a = _axis(-1 if axis is None else int(axis), rank)
            return prod(shape[:a]) * prod(shape[a + 1:])
        return prod(shape[:_axis(1 if axis is None else int(axis), rank)])  # opset < 13 flattens from axis
    if op in _LAST_AXES_NORMS:
        axis = node.attribute("axis")
        return prod(shape[:_axis(-1 if axis is None else int(axis), rank)])
    if op == "InstanceNormalization" and rank >= 2:
        return shape[0] * shape[1]
    if op == "GroupNormalization" and rank >= 2:
        return shape[0] * int(node.attribute("num_groups") or 1)
    if op == "LpNormalization":
        lp_axis = node.attribute("axis")
        a = _axis(-1 if lp_axis is None else int(lp_axis), rank)
        return prod(shape[:a]) * prod(shape[a + 1:])
    if op == "MeanVarianceNormalization":
        axes = node.attribute("axes")
        kept = set(range(rank)) - {_axis(int(a), rank) for a in (axes if axes is not None else (0, 2, 3))}
        return prod(shape[i] for i in sorted(kept))
    return None


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def same(a: Dim, b: Dim) -> bool:
    """Equal counts, also when symbolic (``batch*seq*768`` vs ``768*seq*batch``)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return bool(sympy.expand(a - b) == 0)


@dataclass(frozen=True)
class Candidate:
    """A proposed group, as a policy predicate sees it: the edge that proposed it and all its members."""

    producer: str
    consumer: str
    tensor: str
    nodes: tuple[str, ...]
    infos: Mapping[str, NodeInfo] = field(repr=False)
    graph: Graph = field(repr=False)

    def info(self, node: str) -> NodeInfo:
        return self.infos[node]

    @property
    def kernels(self) -> tuple[NodeInfo, ...]:
        return tuple(self.infos[n] for n in self.nodes if self.infos[n].kernel)

    def with_role(self, role: Role) -> tuple[NodeInfo, ...]:
        return tuple(self.infos[n] for n in self.nodes if self.infos[n].role is role)


Predicate = Callable[[Candidate], "str | Refusal | None"]
"""A user rule: None to allow the group, else a sentence (or a Refusal) saying why not."""

CAPABILITIES = ("views", "anchor_epilogues", "elementwise_chains", "reduction_blocks", "casts", "dequant_prologue")
"""What a policy may let fuse. ``views``: views join any group; ``anchor_epilogues``: an anchor takes an
elementwise epilogue; ``elementwise_chains``: elementwise ops fuse with each other; ``reduction_blocks``:
reductions fuse with same-domain reductions and elementwise neighbours; ``casts``: Cast fuses like any
elementwise op; ``dequant_prologue``: a DequantizeLinear feeding an anchor joins it (the QDQ form of a quantized
kernel, which reads the quantized tensor and dequantizes on load)."""


@dataclass(frozen=True)
class Policy:
    """A named fusion policy: the capabilities it grants and the extra predicates every group must pass.

    ``IDEAL.without("reduction_blocks")`` drops a capability (or a predicate, by its ``__name__``);
    ``IDEAL.with_(same_compute_dtype)`` adds predicates; ``Policy("mine", can_fuse=[pred, ...])`` starts from
    every capability plus your predicates.
    """

    name: str
    can_fuse: Sequence[Predicate] = ()
    allow: frozenset[str] = frozenset(CAPABILITIES)

    def __post_init__(self) -> None:
        object.__setattr__(self, "can_fuse", tuple(self.can_fuse))
        object.__setattr__(self, "allow", frozenset(self.allow))
        unknown = set(self.allow) - set(CAPABILITIES)
        if unknown:
            raise ValueError(f"policy {self.name!r}: unknown capabilities {sorted(unknown)} "
                             f"(known: {', '.join(CAPABILITIES)})")

    def without(self, *names: str, name: str | None = None) -> Policy:
        known = set(CAPABILITIES) | {_pred_name(p) for p in self.can_fuse}
        missing = [n for n in names if n not in known]
        if missing:
            raise ValueError(f"policy {self.name!r} has no capability or predicate {missing[0]!r} "
                             f"(it has: {', '.join(sorted(known))})")
        return Policy(name or f"{self.name}-without-{'-'.join(names)}",
                      tuple(p for p in self.can_fuse if _pred_name(p) not in names),
                      self.allow - set(names))

    def with_(self, *predicates: Predicate, name: str | None = None) -> Policy:
        label = "-".join(_pred_name(p) for p in predicates)
        return Policy(name or f"{self.name}+{label}", (*self.can_fuse, *predicates), self.allow)


def _pred_name(p: Predicate) -> str:
    return str(getattr(p, "__name__", type(p).__name__))


def same_compute_dtype(c: Candidate) -> Refusal | None:
    """Predicate: every kernel of a group computes in one dtype (casts excepted: they convert)."""
    seen: dict[str, str] = {}
    for k in c.kernels:
        if k.cast is None and k.dtype not in seen:
            seen[k.dtype] = k.name
    if len(seen) > 1:
        (d1, n1), (d2, n2) = list(seen.items())[:2]
        return Refusal(Code.DIFFERENT_DTYPE.value,
                       f"different compute dtype: {n1} computes in {d1} but {n2} in {d2}")
    return None


def max_nodes(limit: int) -> Predicate:
    """Predicate factory: at most ``limit`` kernels per group (TVM's max_depth is 256)."""

    def check(c: Candidate) -> Refusal | None:
        n = len(c.kernels)
        if n > limit:
            return Refusal(Code.SIZE_LIMIT.value, f"the group would hold {n} ops (limit {limit})")
        return None

    check.__name__ = f"max_nodes_{limit}"
    return check


IDEAL = Policy("ideal")
"""The default: everything in CAPABILITIES, no extra predicates (see the module docstring)."""

NONE = Policy("none", allow=frozenset())
"""One group per node: the unfused accounting, for comparison."""

POLICIES: Mapping[str, Policy] = {"ideal": IDEAL, "none": NONE}


# --------------------------------------------------------------------------- legality
def non_fusable_refusal(i: NodeInfo) -> Refusal:
    if i.role is Role.CONTROL:
        return Refusal(Code.CONTROL_FLOW.value, f"{i.name} ({i.op_type}) is control flow; its body runs as "
                                                "kernels of its own")
    if i.role is Role.MOVEMENT and (i.op_type in LAYOUT_OPS or "storage size" in i.detail):
        what = i.detail if "storage size" in i.detail else "reorders elements"
        return Refusal(Code.LAYOUT_CHANGE.value, f"layout change: {i.name} ({i.op_type}) {what}; it runs as a "
                                                 "kernel of its own")
    return Refusal(Code.NON_FUSABLE.value, f"{i.name} ({i.op_type}) is not fusable: {i.detail or i.role.value}")


DEQUANTIZE_OPS = frozenset({"DequantizeLinear", "DynamicDequantizeLinear"})


def _prologue(c: Candidate, anchor: NodeInfo, dequant: bool) -> tuple[NodeInfo | None, set[str]]:
    """The first member that feeds the anchor other than views (and DequantizeLinear, with ``dequant``), if any,
    and the members that feed it legally."""
    members = set(c.nodes)
    stack = [anchor.name]
    seen = {anchor.name}
    while stack:
        node = c.graph.node(stack.pop())
        for t in node.inputs:
            p = c.graph.producer(t) if t else None
            if p is None or p.name not in members or p.name in seen:
                continue
            seen.add(p.name)
            info = c.infos[p.name]
            if info.role is not Role.VIEW and not (dequant and info.op_type in DEQUANTIZE_OPS):
                return info, seen
            stack.append(p.name)
    return None, seen - {anchor.name}


def _space(i: NodeInfo, allowed: Iterable[Dim], what: str) -> Refusal | None:
    if i.numel is None:
        return Refusal(Code.SHAPE_UNKNOWN.value, f"the shape of {i.name} ({i.op_type}) is unknown")
    if any(same(i.numel, a) for a in allowed):
        return None
    return Refusal(Code.ITERATION_SPACE.value, f"{i.name} ({i.op_type}) writes {i.numel} elements but {what}")


def check(c: Candidate, policy: Policy) -> Refusal | None:
    """The first rule a proposed group breaks, or None when one kernel can compute it under ``policy``.

    Order (the first that holds is the reason): non-fusable member (the edge's consumer, then its producer,
    then the rest), graph output inside, second anchor, prologue (dtype cast when it is a Cast), reduction
    in an anchor's group, iteration spaces, the policy's capabilities, its predicates.
    """
    members = set(c.nodes)
    order = [c.consumer, c.producer, *[n for n in c.nodes if n not in (c.consumer, c.producer)]]
    for n in order:
        if n in members and c.infos[n].role in NON_FUSABLE:
            return non_fusable_refusal(c.infos[n])
    outputs = set(c.graph.output_names)
    for n in c.nodes:
        for t in c.graph.node(n).outputs:
            if t in outputs and any(x.name in members for x in c.graph.consumers(t)):
                return Refusal(Code.GRAPH_OUTPUT.value, f"{t} is a graph output and must be written to memory")
    anchors = c.with_role(Role.ANCHOR)
    if len(anchors) > 1:
        a, b = anchors[:2]
        return Refusal(Code.SECOND_ANCHOR.value, f"second compute anchor: {a.name} ({a.op_type}) and {b.name} "
                                                 f"({b.op_type}); a kernel runs at most one")
    reductions = c.with_role(Role.REDUCTION)
    elementwise = c.with_role(Role.ELEMENTWISE)
    if anchors:
        a = anchors[0]
        p, feeding = _prologue(c, a, "dequant_prologue" in policy.allow)
        if p is not None and p.cast is not None:
            return Refusal(Code.DTYPE_CAST.value, f"dtype cast: {p.name} casts {p.cast[0]}→{p.cast[1]} for anchor "
                                                  f"{a.name}, which reads its operands from memory as stored")
        if p is not None:
            return Refusal(Code.PROLOGUE.value, f"{p.name} ({p.op_type}) feeds compute anchor {a.name} "
                                                f"({a.op_type}); an anchor reads its operands from memory")
        if reductions:
            r = reductions[0]
            return Refusal(Code.REDUCTION_IN_EPILOGUE.value, f"{r.name} ({r.op_type}) is a reduction; anchor "
                                                             f"{a.name} takes only an elementwise epilogue")
        if a.numel is None:
            return Refusal(Code.SHAPE_UNKNOWN.value, f"the shape of {a.name} ({a.op_type}) is unknown")
        for e in (e for e in elementwise if e.name not in feeding):
            bad = _space(e, [a.numel], f"anchor {a.name} writes {a.numel}; an epilogue iterates its anchor's output")
            if bad:
                return bad
    elif reductions:
        first = reductions[0]
        for r in reductions:
            if r.in_numel is None or (r.rows is None and r.numel is None):
                return Refusal(Code.SHAPE_UNKNOWN.value, f"the shape of {r.name} ({r.op_type}) is unknown")
        if len(reductions) > 1:
            own = next((r for r in reductions if r.rows is None), None)
            if own is not None:
                other = next(r for r in reductions if r is not own)
                return Refusal(Code.REDUCTION_MISMATCH.value,
                               f"{own.name} ({own.op_type}) iterates a space of its own; it cannot share a loop "
                               f"nest with {other.name} ({other.op_type})")
            for r in reductions[1:]:
                if not (same(r.in_numel, first.in_numel) and same(r.rows, first.rows)):  # type: ignore[arg-type]
                    return Refusal(Code.REDUCTION_MISMATCH.value,
                                   f"{first.name} reduces {first.in_numel} elements to {first.rows} rows but "
                                   f"{r.name} reduces {r.in_numel} to {r.rows}; they cannot share a loop nest")
        spaces = [first.in_numel, first.rows if first.rows is not None else first.numel]
        for e in elementwise:
            bad = _space(e, [s for s in spaces if s is not None],
                         f"reduction {first.name} iterates {spaces[0]} elements and {spaces[1]} rows")
            if bad:
                return bad
    missing = _capabilities_needed(c, anchors, reductions, elementwise) - policy.allow
    if missing:
        return _capability_refusal(c, policy, sorted(missing, key=CAPABILITIES.index)[0])
    for pred in policy.can_fuse:
        out = pred(c)
        if isinstance(out, Refusal):
            return out
        if out:
            return Refusal(Code.POLICY.value, f"policy {policy.name}: {out}")
    return None


def _capabilities_needed(c: Candidate, anchors: Sequence[NodeInfo], reductions: Sequence[NodeInfo],
                         elementwise: Sequence[NodeInfo]) -> set[str]:
    need: set[str] = set()
    if len(c.nodes) > 1 and c.with_role(Role.VIEW):
        need.add("views")
    if anchors and elementwise:
        need.add("anchor_epilogues")
    if reductions and (len(reductions) > 1 or elementwise):
        need.add("reduction_blocks")
    if not anchors and not reductions and len(elementwise) > 1:
        need.add("elementwise_chains")
    if len(c.kernels) > 1 and any(i.cast is not None for i in elementwise):
        need.add("casts")
    return need


def _capability_refusal(c: Candidate, policy: Policy, capability: str) -> Refusal:
    if capability == "casts":
        cast = next(i for i in c.with_role(Role.ELEMENTWISE) if i.cast is not None)
        return Refusal(Code.DTYPE_CAST.value, f"dtype cast: {cast.name} casts {cast.cast[0]}→{cast.cast[1]}; "  # type: ignore[index]
                                              f"policy {policy.name} runs casts as kernels of their own")
    what = {"views": "views into other ops", "anchor_epilogues": "a compute anchor with its epilogue",
            "elementwise_chains": "elementwise ops with each other",
            "reduction_blocks": "a reduction with its neighbours"}[capability]
    return Refusal(Code.POLICY.value, f"policy {policy.name} does not fuse {what} (no {capability!r})")


__all__ = [
    "CAPABILITIES",
    "CODE_TEXT",
    "IDEAL",
    "NONE",
    "POLICIES",
    "ROLE_OVERRIDES",
    "Candidate",
    "Code",
    "NodeInfo",
    "Policy",
    "Predicate",
    "Refusal",
    "Role",
    "check",
    "classify",
    "max_nodes",
    "non_fusable_refusal",
    "same_compute_dtype",
]
