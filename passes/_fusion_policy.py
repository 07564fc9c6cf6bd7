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
import functools
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType, SimpleNamespace
from typing import Any, Protocol

from graphcost._dims import Dim, expands_within, numel, prod
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


CODES = SimpleNamespace(**{c.name: c.value for c in Code})
"""``Code.X.value`` as ``CODES.X`` (reading ``.value`` off an Enum member is a Python-level call)."""

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
        return self.role not in _NOT_KERNEL


# The roles as module constants: reading a member off the Enum class, or hashing one, is a Python-level call,
# and the per-node code below does it for every node.
_ANCHOR, _ELEMENTWISE, _REDUCTION, _VIEW = Role.ANCHOR, Role.ELEMENTWISE, Role.REDUCTION, Role.VIEW
_MOVEMENT, _OPAQUE, _CONTROL, _FREE = Role.MOVEMENT, Role.OPAQUE, Role.CONTROL, Role.FREE
_NOT_KERNEL = (_VIEW, _FREE)
_NEW, _SET = object.__new__, object.__setattr__


def node_info(name: str, op_type: str, role: Role, detail: str, numel: Dim | None, in_numel: Dim | None,
              rows: Dim | None, dtype: str, cast: tuple[str, str] | None = None) -> NodeInfo:
    """``NodeInfo(...)``, built without the frozen dataclass's one ``__setattr__`` per field (same object)."""
    info = _NEW(NodeInfo)
    _SET(info, "__dict__", {"name": name, "op_type": op_type, "role": role, "detail": detail, "numel": numel,
                            "in_numel": in_numel, "rows": rows, "dtype": dtype, "cast": cast})
    return info


def is_opaque(role: Role) -> bool:
    """``role in NON_FUSABLE``, without hashing the role."""
    return role is _MOVEMENT or role is _OPAQUE or role is _CONTROL


def classify(graph: Graph, node: Node) -> NodeInfo:
    """The fusion role and iteration space of one node (registry kind, refined by ROLE_OVERRIDES)."""
    return _classify(graph, node, {}, {})


def classify_all(graph: Graph, nodes: Iterable[Node]) -> dict[str, NodeInfo]:
    """:func:`classify` of many nodes of one graph, sharing the registry look-ups and element counts."""
    roles: dict[tuple[str, str], tuple[Role, str]] = {}
    numels: dict[tuple[Dim, ...], Dim] = {}
    return {n.name: _classify(graph, n, roles, numels) for n in nodes}


def _role_of(domain: str, op_type: str) -> tuple[Role, str]:
    """(role, detail) from the registry kind and ROLE_OVERRIDES, before the per-node refinements."""
    entry = lookup(domain, op_type)
    if op_type in ROLE_OVERRIDES and (entry is None or entry.domain in ("ai.onnx", "com.microsoft")):
        return ROLE_OVERRIDES[op_type]
    if entry is None:
        return Role.OPAQUE, f"unknown op {domain}::{op_type} (no rule)"
    detail = ""
    if entry.kind == Kind.RECURRENT:
        detail = "recurrent (runs its own loop over the sequence)"
    elif entry.kind == Kind.CONTROL:
        detail = "control flow (its body runs as kernels of its own)"
    elif entry.kind == Kind.MOVEMENT:
        detail = "layout change" if op_type in LAYOUT_OPS else "movement (copies data)"
    return _KIND_ROLE[entry.kind], detail


def _classify(graph: Graph, node: Node, roles: dict[tuple[str, str], tuple[Role, str]],
              numels: dict[tuple[Dim, ...], Dim]) -> NodeInfo:
    op = node.op_type
    key = (node.domain, op)
    found = roles.get(key)
    if found is None:
        found = roles[key] = _role_of(node.domain, op)
    role, detail = found
    if op == "BatchNormalization" and not _bn_training(node):
        role = _ELEMENTWISE  # inference BN is one multiply-add per element
    inputs, outputs = node.inputs, node.outputs
    tensor = graph.tensor
    out = tensor(outputs[0]) if outputs and outputs[0] else None
    inp = tensor(inputs[0]) if inputs and inputs[0] else None
    if role is _VIEW:
        why_not = _not_a_view(graph, node)
        if why_not:
            role, detail = _MOVEMENT, why_not
    out_n = in_n = None
    if out is not None:
        shape = out.shape
        if shape is not None:
            out_n = numels.get(shape)
            if out_n is None:
                out_n = numels[shape] = numel(shape)
    in_shape = None if inp is None else inp.shape
    if in_shape is not None:
        in_n = numels.get(in_shape)
        if in_n is None:
            in_n = numels[in_shape] = numel(in_shape)
    rows = _rows(node, in_shape, out_n) if role is _REDUCTION else None
    if inp is not None:
        dtype = inp.dtype
    else:
        dtype = "unknown"
        for i in inputs:
            t = tensor(i) if i else None
            if t is not None:
                dtype = t.dtype
                break
    cast = (dtype, out.dtype) if op in CAST_OPS and out is not None else None
    return node_info(node.name, op, role, detail, out_n, in_n, rows, dtype, cast)


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
    return _same_symbolic(a, b)


@functools.lru_cache(maxsize=65536)
def _same_symbolic(a: Dim, b: Dim) -> bool:
    """``expand(a - b) == 0``. Two monomials (``4*H*W``, ``2*x**2*y``) are equal exactly when sympy's canonical
    forms are, so they are compared as they stand (FCOS with ORT-minted dims: 402 asks, all monomial pairs,
    46 ms CPU expanding, 1 ms compared)."""
    if _is_monomial(a) and _is_monomial(b):
        return bool(a == b)
    d = a - b
    if not expands_within(d, 4096):  # expanding would be unbounded work: compare as written (may say "differ")
        return bool(d == 0)
    return bool(sympy.expand(d) == 0)


def _is_monomial(value: Any) -> bool:
    """A rational, a symbol, or a product of a rational and symbols raised to positive integer powers."""
    if isinstance(value, int):
        return True
    if not isinstance(value, sympy.Expr):
        return False
    if value.is_Rational or value.is_Symbol:
        return True
    if not value.is_Mul:
        return False
    for f in value.args:
        if f.is_Rational or f.is_Symbol:
            continue
        if f.is_Pow and f.base.is_Symbol and f.exp.is_Integer and f.exp > 0:
            continue
        return False
    return True


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
        return Refusal(CODES.DIFFERENT_DTYPE,
                       f"different compute dtype: {n1} computes in {d1} but {n2} in {d2}")
    return None


def max_nodes(limit: int) -> Predicate:
    """Predicate factory: at most ``limit`` kernels per group (TVM's max_depth is 256)."""

    def check(c: Candidate) -> Refusal | None:
        n = len(c.kernels)
        if n > limit:
            return Refusal(CODES.SIZE_LIMIT, f"the group would hold {n} ops (limit {limit})")
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
        return Refusal(CODES.CONTROL_FLOW, f"{i.name} ({i.op_type}) is control flow; its body runs as "
                                           "kernels of its own")
    if i.role is Role.MOVEMENT and (i.op_type in LAYOUT_OPS or "storage size" in i.detail):
        what = i.detail if "storage size" in i.detail else "reorders elements"
        return Refusal(CODES.LAYOUT_CHANGE, f"layout change: {i.name} ({i.op_type}) {what}; it runs as a "
                                            "kernel of its own")
    return Refusal(CODES.NON_FUSABLE, f"{i.name} ({i.op_type}) is not fusable: {i.detail or i.role.value}")


DEQUANTIZE_OPS = frozenset({"DequantizeLinear", "DynamicDequantizeLinear"})


class Summary:
    """What the legality rules need to know about a set of nodes, without walking it: counts, the one
    anchor or non-fusable node, the reductions, and per element count the first elementwise node with it.

    Entries are ``(position, NodeInfo)``, position being the node's place in the order the rules read the
    nodes in ("the first reduction" is the one with the smallest position). A summary is never changed once
    built: :meth:`merged` makes a new one, which is how a fusion group's summary follows its merges.
    """

    __slots__ = ("anchors", "cast", "ew", "gout", "kernels", "mask", "n_ew", "nonfusable", "reductions", "size",
                 "views")

    def __init__(self, size: int, views: int, kernels: int, n_ew: int, nonfusable: tuple[int, NodeInfo] | None,
                 cast: tuple[int, NodeInfo] | None, anchors: tuple[tuple[int, NodeInfo], ...],
                 reductions: tuple[tuple[int, NodeInfo], ...], ew: Mapping[Dim | None, tuple[int, NodeInfo]],
                 gout: tuple[tuple[int, str], ...], mask: int) -> None:
        self.size = size
        self.views = views  # members whose role is VIEW
        self.kernels = kernels  # members that run as (part of) a kernel
        self.n_ew = n_ew  # ELEMENTWISE members
        self.nonfusable = nonfusable  # the first member whose role is in NON_FUSABLE
        self.cast = cast  # the first elementwise member that casts
        self.anchors = anchors  # ANCHOR members, in order
        self.reductions = reductions  # REDUCTION members, in order
        self.ew = ew  # element count → the first ELEMENTWISE member writing that many
        self.gout = gout  # members that write a graph output some node reads
        self.mask = mask  # _M_* bits: which of the above are set (non-zero), for a quick look at a union

    @classmethod
    def of(cls, info: NodeInfo, pos: int, writes_read_output: bool) -> Summary:
        """One node: ``writes_read_output`` when it writes a graph output that a node (maybe a member) reads."""
        role = info.role
        entry = (pos, info)
        gout, m = (((pos, info.name),), _M_GOUT) if writes_read_output else ((), 0)
        if role is _ELEMENTWISE:
            if info.cast is None:
                return cls(1, 0, 1, 1, None, None, (), (), {info.numel: entry}, gout, m | _M_EW)
            return cls(1, 0, 1, 1, None, entry, (), (), {info.numel: entry}, gout, m | _M_EW | _M_CAST)
        if role is _ANCHOR:
            return cls(1, 0, 1, 0, None, None, (entry,), (), _NO_EW, gout, m | _M_ANCHOR)
        if role is _REDUCTION:
            return cls(1, 0, 1, 0, None, None, (), (entry,), _NO_EW, gout, m | _M_REDUCTION)
        if role is _VIEW:
            return cls(1, 1, 0, 0, None, None, (), (), _NO_EW, gout, m | _M_VIEW)
        if role is _FREE:
            return cls(1, 0, 0, 0, None, None, (), (), _NO_EW, gout, m)
        if role in NON_FUSABLE:
            return cls(1, 0, 1, 0, entry, None, (), (), _NO_EW, gout, m | _M_OPAQUE)
        return cls(1, 0, 1, 0, None, None, (), (), _NO_EW, gout, m)

    @classmethod
    def merged(cls, parts: Sequence[Summary]) -> Summary:
        """The summary of the union of disjoint node sets."""
        size = views = kernels = n_ew = 0
        nonfusable = cast = None
        anchors: tuple[tuple[int, NodeInfo], ...] = ()
        reductions: tuple[tuple[int, NodeInfo], ...] = ()
        gout: tuple[tuple[int, str], ...] = ()
        ew: Mapping[Dim | None, tuple[int, NodeInfo]] | None = None
        more: list[Mapping[Dim | None, tuple[int, NodeInfo]]] = []
        mask = 0
        for p in parts:
            mask |= p.mask
            size += p.size
            views += p.views
            kernels += p.kernels
            n_ew += p.n_ew
            q = p.nonfusable
            if q is not None and (nonfusable is None or q[0] < nonfusable[0]):
                nonfusable = q
            q = p.cast
            if q is not None and (cast is None or q[0] < cast[0]):
                cast = q
            if p.anchors:
                anchors = _by_pos(anchors + p.anchors) if anchors else p.anchors
            if p.reductions:
                reductions = _by_pos(reductions + p.reductions) if reductions else p.reductions
            if p.gout:
                gout = tuple(sorted(gout + p.gout)) if gout else p.gout
            if p.ew:
                if ew is None:
                    ew = p.ew  # shared, never changed
                else:
                    more.append(p.ew)
        if more:
            union = dict(ew)  # type: ignore[arg-type]
            for e in more:
                for k, v in e.items():
                    got = union.get(k)
                    if got is None or v[0] < got[0]:
                        union[k] = v
            ew = union
        return cls(size, views, kernels, n_ew, nonfusable, cast, anchors, reductions,
                   _NO_EW if ew is None else ew, gout, mask)


_NO_EW: Mapping[Dim | None, tuple[int, NodeInfo]] = MappingProxyType({})
_M_OPAQUE, _M_GOUT, _M_ANCHOR, _M_REDUCTION, _M_EW, _M_VIEW, _M_CAST = 1, 2, 4, 8, 16, 32, 64


def _by_pos(entries: tuple[tuple[int, NodeInfo], ...]) -> tuple[tuple[int, NodeInfo], ...]:
    return tuple(sorted(entries, key=_first))


def _first(entry: tuple[int, NodeInfo]) -> int:
    return entry[0]


class Members(Protocol):
    """The node set of a proposed group, for the rules that walk the graph (see :func:`check_parts`)."""

    def __contains__(self, node: object) -> bool: ...

    def input_producers(self, node: str) -> Iterable[str]:
        """The nodes writing ``node``'s inputs, in input order (only those that could be members matter)."""
        ...

    def output_readers(self, node: str) -> Iterable[tuple[str, Iterable[str]]]:
        """(tensor, nodes reading it) for each graph output ``node`` writes, in output order."""
        ...

    def nodes(self) -> tuple[str, ...]:
        """All members in order."""
        ...


class _CandidateMembers:
    """:class:`Members` of a :class:`Candidate`, its nodes read in the order given."""

    def __init__(self, c: Candidate) -> None:
        self.c = c
        self.set = set(c.nodes)

    def __contains__(self, node: object) -> bool:
        return node in self.set

    def input_producers(self, node: str) -> Iterable[str]:
        graph = self.c.graph
        return [p.name for t in graph.node(node).inputs if t and (p := graph.producer(t)) is not None]

    def output_readers(self, node: str) -> Iterable[tuple[str, Iterable[str]]]:
        graph = self.c.graph
        outputs = set(graph.output_names)
        return [(t, [x.name for x in graph.consumers(t)]) for t in graph.node(node).outputs if t in outputs]

    def nodes(self) -> tuple[str, ...]:
        return self.c.nodes


def summarize(c: Candidate) -> Summary:
    """The summary of a candidate's nodes, positions being their places in ``c.nodes``."""
    outputs = set(c.graph.output_names)
    parts = []
    for i, n in enumerate(c.nodes):
        writes = any(t in outputs and c.graph.consumers(t) for t in c.graph.node(n).outputs)
        parts.append(Summary.of(c.infos[n], i, writes))
    return Summary.merged(parts)


def _prologue(members: Members, infos: Mapping[str, NodeInfo], anchor: NodeInfo,
              dequant: bool) -> tuple[NodeInfo | None, set[str]]:
    """The first member that feeds the anchor other than views (and DequantizeLinear, with ``dequant``), if any,
    and the members that feed it legally."""
    stack = [anchor.name]
    seen = {anchor.name}
    while stack:
        for p in members.input_producers(stack.pop()):
            if p in seen or p not in members:
                continue
            seen.add(p)
            info = infos[p]
            if info.role is not _VIEW and not (dequant and info.op_type in DEQUANTIZE_OPS):
                return info, seen
            stack.append(p)
    return None, seen - {anchor.name}


def _space(i: NodeInfo, allowed: Iterable[Dim], what: str) -> Refusal | None:
    if i.numel is None:
        return Refusal(CODES.SHAPE_UNKNOWN, f"the shape of {i.name} ({i.op_type}) is unknown")
    if any(same(i.numel, a) for a in allowed):
        return None
    return Refusal(CODES.ITERATION_SPACE, f"{i.name} ({i.op_type}) writes {i.numel} elements but {what}")


def _first_off_space(parts: Sequence[Summary], allowed: Sequence[Dim], skip: Collection[str],
                     members: Members, infos: Mapping[str, NodeInfo]) -> NodeInfo | None:
    """The first elementwise member not in ``skip`` whose element count is unknown or none of ``allowed``."""
    best: tuple[int, NodeInfo] | None = None
    for p in parts:
        for count, entry in p.ew.items():
            if count is not None:
                for a in allowed:
                    if same(count, a):
                        break
                else:
                    a = None
                if a is not None:
                    continue
            if entry[1].name in skip:  # the first of that count is skipped: look at every member
                for n in members.nodes():
                    i = infos[n]
                    if i.role is _ELEMENTWISE and n not in skip and (
                            i.numel is None or not any(same(i.numel, a) for a in allowed)):
                        return i
                return None
            if best is None or entry[0] < best[0]:
                best = entry
    return None if best is None else best[1]


def check(c: Candidate, policy: Policy) -> Refusal | None:
    """The first rule a proposed group breaks, or None when one kernel can compute it under ``policy``.

    Order (the first that holds is the reason): non-fusable member (the edge's consumer, then its producer,
    then the rest), graph output inside, second anchor, prologue (dtype cast when it is a Cast), reduction
    in an anchor's group, iteration spaces, the policy's capabilities, its predicates. "First" is in the
    order of ``c.nodes``.
    """
    return check_parts((summarize(c),), c.producer, c.consumer, c.tensor, policy, _CandidateMembers(c),
                       c.infos, c.graph)


def check_parts(parts: Sequence[Summary], producer: str, consumer: str, tensor: str, policy: Policy,
                members: Members, infos: Mapping[str, NodeInfo], graph: Graph,
                opaque: Callable[[NodeInfo], Refusal] = non_fusable_refusal) -> Refusal | None:
    """:func:`check` of the union of disjoint node sets given by their summaries (the fusion pass keeps one
    per group, so a proposed merge is checked without walking the groups). ``opaque`` is
    :func:`non_fusable_refusal`, maybe cached."""
    mask = 0
    for p in parts:
        mask |= p.mask
    if mask & _M_OPAQUE:
        for n in (consumer, producer):
            if n in members and is_opaque(infos[n].role):
                return opaque(infos[n])
        first: tuple[int, NodeInfo] | None = None
        for p in parts:
            q = p.nonfusable
            if q is not None and (first is None or q[0] < first[0]):
                first = q
        return opaque(first[1])  # type: ignore[index]
    if mask & _M_GOUT:
        for _, n in sorted(g for p in parts for g in p.gout):
            for t, readers in members.output_readers(n):
                if any(x in members for x in readers):
                    return Refusal(CODES.GRAPH_OUTPUT, f"{t} is a graph output and must be written to memory")
    anchors: tuple[tuple[int, NodeInfo], ...] = ()
    if mask & _M_ANCHOR:
        for p in parts:
            if p.anchors:
                anchors += p.anchors
        if len(anchors) > 1:
            anchors = _by_pos(anchors)
            a, b = anchors[0][1], anchors[1][1]
            return Refusal(CODES.SECOND_ANCHOR, f"second compute anchor: {a.name} ({a.op_type}) and {b.name} "
                                                f"({b.op_type}); a kernel runs at most one")
    reductions: tuple[tuple[int, NodeInfo], ...] = ()
    if mask & _M_REDUCTION:
        for p in parts:
            if p.reductions:
                reductions += p.reductions
        if len(reductions) > 1:
            reductions = _by_pos(reductions)
    if anchors:
        a = anchors[0][1]
        pro, feeding = _prologue(members, infos, a, "dequant_prologue" in policy.allow)
        if pro is not None and pro.cast is not None:
            return Refusal(CODES.DTYPE_CAST, f"dtype cast: {pro.name} casts {pro.cast[0]}→{pro.cast[1]} for "
                                             f"anchor {a.name}, which reads its operands from memory as stored")
        if pro is not None:
            return Refusal(CODES.PROLOGUE, f"{pro.name} ({pro.op_type}) feeds compute anchor {a.name} "
                                           f"({a.op_type}); an anchor reads its operands from memory")
        if reductions:
            r = reductions[0][1]
            return Refusal(CODES.REDUCTION_IN_EPILOGUE, f"{r.name} ({r.op_type}) is a reduction; anchor "
                                                        f"{a.name} takes only an elementwise epilogue")
        if a.numel is None:
            return Refusal(CODES.SHAPE_UNKNOWN, f"the shape of {a.name} ({a.op_type}) is unknown")
        if mask & _M_EW:
            e = _first_off_space(parts, (a.numel,), feeding, members, infos)
            if e is not None:
                return _space(e, [a.numel], f"anchor {a.name} writes {a.numel}; an epilogue iterates its anchor's "
                                            "output")
    elif reductions:
        reds = [r for _, r in reductions]
        first_r = reds[0]
        for r in reds:
            if r.in_numel is None or (r.rows is None and r.numel is None):
                return Refusal(CODES.SHAPE_UNKNOWN, f"the shape of {r.name} ({r.op_type}) is unknown")
        if len(reds) > 1:
            own = next((r for r in reds if r.rows is None), None)
            if own is not None:
                other = next(r for r in reds if r is not own)
                return Refusal(CODES.REDUCTION_MISMATCH,
                               f"{own.name} ({own.op_type}) iterates a space of its own; it cannot share a loop "
                               f"nest with {other.name} ({other.op_type})")
            for r in reds[1:]:
                if not (same(r.in_numel, first_r.in_numel) and same(r.rows, first_r.rows)):  # type: ignore[arg-type]
                    return Refusal(CODES.REDUCTION_MISMATCH,
                                   f"{first_r.name} reduces {first_r.in_numel} elements to {first_r.rows} rows but "
                                   f"{r.name} reduces {r.in_numel} to {r.rows}; they cannot share a loop nest")
        spaces = [first_r.in_numel, first_r.rows if first_r.rows is not None else first_r.numel]
        allowed = [s for s in spaces if s is not None]
        if mask & _M_EW:
            e = _first_off_space(parts, allowed, (), members, infos)
            if e is not None:
                return _space(e, allowed, f"reduction {first_r.name} iterates {spaces[0]} elements and {spaces[1]} "
                                          "rows")
    allow = policy.allow
    if len(allow) < len(CAPABILITIES):  # the capabilities the group needs, in CAPABILITIES order
        if mask & _M_VIEW and "views" not in allow and (len(parts) > 1 or parts[0].size > 1):
            return _capability_refusal(policy, "views", None)
        if anchors and mask & _M_EW and "anchor_epilogues" not in allow:
            return _capability_refusal(policy, "anchor_epilogues", None)
        if (not anchors and not reductions and mask & _M_EW and "elementwise_chains" not in allow
                and sum(p.n_ew for p in parts) > 1):
            return _capability_refusal(policy, "elementwise_chains", None)
        if reductions and (len(reductions) > 1 or mask & _M_EW) and "reduction_blocks" not in allow:
            return _capability_refusal(policy, "reduction_blocks", None)
        if mask & _M_CAST and "casts" not in allow and sum(p.kernels for p in parts) > 1:
            cast: tuple[int, NodeInfo] | None = None
            for p in parts:
                q = p.cast
                if q is not None and (cast is None or q[0] < cast[0]):
                    cast = q
            return _capability_refusal(policy, "casts", cast[1])  # type: ignore[index]
    if policy.can_fuse:
        candidate = Candidate(producer, consumer, tensor, members.nodes(), infos, graph)
        for pred in policy.can_fuse:
            out = pred(candidate)
            if isinstance(out, Refusal):
                return out
            if out:
                return Refusal(CODES.POLICY, f"policy {policy.name}: {out}")
    return None


def _capability_refusal(policy: Policy, capability: str, cast: NodeInfo | None) -> Refusal:
    if cast is not None:
        return Refusal(CODES.DTYPE_CAST, f"dtype cast: {cast.name} casts {cast.cast[0]}→{cast.cast[1]}; "  # type: ignore[index]
                                         f"policy {policy.name} runs casts as kernels of their own")
    what = {"views": "views into other ops", "anchor_epilogues": "a compute anchor with its epilogue",
            "elementwise_chains": "elementwise ops with each other",
            "reduction_blocks": "a reduction with its neighbours"}[capability]
    return Refusal(CODES.POLICY, f"policy {policy.name} does not fuse {what} (no {capability!r})")


__all__ = [
    "CAPABILITIES",
    "CODES",
    "CODE_TEXT",
    "IDEAL",
    "NONE",
    "POLICIES",
    "ROLE_OVERRIDES",
    "Candidate",
    "Code",
    "Members",
    "NodeInfo",
    "Policy",
    "Predicate",
    "Refusal",
    "Role",
    "Summary",
    "check",
    "check_parts",
    "classify",
    "classify_all",
    "is_opaque",
    "max_nodes",
    "node_info",
    "non_fusable_refusal",
    "same_compute_dtype",
    "summarize",
]
