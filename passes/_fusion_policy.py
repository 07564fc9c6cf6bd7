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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace

from graphcost.graph import Graph
from graphcost.passes._fusion_roles import (
    CAST_OPS,
    LAYOUT_OPS,
    NON_FUSABLE,
    ROLE_OVERRIDES,
    NodeInfo,
    Role,
    classify,
    classify_all,
    is_opaque,
    node_info,
    same,
)


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


__all__ = [  # the roles are re-exported: the policy is where a reader looks for them
    "CAPABILITIES",
    "CAST_OPS",
    "CODES",
    "CODE_TEXT",
    "IDEAL",
    "LAYOUT_OPS",
    "NONE",
    "NON_FUSABLE",
    "POLICIES",
    "ROLE_OVERRIDES",
    "Candidate",
    "Code",
    "NodeInfo",
    "Policy",
    "Predicate",
    "Refusal",
    "Role",
    "classify",
    "classify_all",
    "is_opaque",
    "max_nodes",
    "node_info",
    "same",
    "same_compute_dtype",
]
