"""Fusion roles: what each node is to the fusion pass (anchor, elementwise, reduction, view, movement, …).

A node's *role* comes from its registered op kind (``graphcost.ops``, data), refined by one literal table
(:data:`ROLE_OVERRIDES`) for ops whose fusion behaviour differs from their cost family (TopK is costed as a
reduction but sorts; Expand is costed as movement but is a broadcast), and per node: inference BatchNormalization
is elementwise, a Reshape that changes the storage size is not a view. :class:`NodeInfo` is the per-node record
the policy (``_fusion_policy.py``) and the legality check (``_fusion_legality.py``) read.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from graphcost._dims import Dim, expands_within, numel, prod
from graphcost._sym import sympy
from graphcost.graph import Graph, Node, Tensor
from graphcost.ops import Kind, lookup
from graphcost.ops.misc import SEQUENCE_REFERENCES
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
    # sequences hold their elements by reference (graphcost/ops/misc.py): no kernel, no bytes of their own
    **{op: (Role.FREE, "") for op in SEQUENCE_REFERENCES},
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
    """What the policy needs to know about one node, computed once per node.

    Slotted (``__slots__`` written out: ``slots=True`` on a frozen dataclass makes CPython 3.11 answer an
    assignment to an unknown attribute with a TypeError instead of FrozenInstanceError): one per node, 104 B
    against 328 B with a ``__dict__`` (measured; 100k nodes: 22 MB less)."""

    __slots__ = ("cast", "detail", "dtype", "in_numel", "name", "numel", "op_type", "role", "rows")

    name: str
    op_type: str
    role: Role
    detail: str  # why it is not fusable (for MOVEMENT/OPAQUE/CONTROL), else ""
    numel: Dim | None  # elements of output 0 (the iteration space of an elementwise op or anchor)
    in_numel: Dim | None  # elements of input 0
    rows: Dim | None  # reductions: independent rows; None for a reduction with its own iteration space
    dtype: str  # compute dtype: the first input's
    cast: tuple[str, str] | None  # (from, to) for Cast, else None

    @property
    def kernel(self) -> bool:
        """Does this node run as (part of) a kernel? Views and free ops do not."""
        return self.role not in _NOT_KERNEL


# The roles as module constants: reading a member off the Enum class, or hashing one, is a Python-level call,
# and the per-node code below does it for every node.
_ANCHOR, _ELEMENTWISE, _REDUCTION, _VIEW = Role.ANCHOR, Role.ELEMENTWISE, Role.REDUCTION, Role.VIEW
_MOVEMENT, _OPAQUE, _CONTROL, _FREE = Role.MOVEMENT, Role.OPAQUE, Role.CONTROL, Role.FREE
_NOT_KERNEL = (_VIEW, _FREE)


def node_info(name: str, op_type: str, role: Role, detail: str, numel: Dim | None, in_numel: Dim | None,
              rows: Dim | None, dtype: str, cast: tuple[str, str] | None = None) -> NodeInfo:
    """``NodeInfo(...)``."""
    return NodeInfo(name, op_type, role, detail, numel, in_numel, rows, dtype, cast)


def tensor_getter(graph: Graph) -> Callable[[str], Tensor | None]:
    """``graph.tensor``, as the table's own ``get`` for a top-level graph (no enclosing graph to look through): a
    C call instead of a Python one, asked a few times per node (synthetic-100k: 360k asks in ``fuse``, ~0.08 s)."""
    return graph.tensors().get if graph.parent is None else graph.tensor


def is_opaque(role: Role) -> bool:
    """``role in NON_FUSABLE``, without hashing the role."""
    return role is _MOVEMENT or role is _OPAQUE or role is _CONTROL


def classify(graph: Graph, node: Node) -> NodeInfo:
    """The fusion role and iteration space of one node (registry kind, refined by ROLE_OVERRIDES)."""
    return _classify(graph, node, {}, {}, tensor_getter(graph))


def classify_all(graph: Graph, nodes: Iterable[Node]) -> dict[str, NodeInfo]:
    """:func:`classify` of many nodes of one graph, sharing the registry look-ups and element counts."""
    roles: dict[tuple[str, str], tuple[Role, str]] = {}
    numels: dict[tuple[Dim, ...], Dim] = {}
    tensor = tensor_getter(graph)
    return {n.name: _classify(graph, n, roles, numels, tensor) for n in nodes}


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
              numels: dict[tuple[Dim, ...], Dim], tensor: Callable[[str], Tensor | None]) -> NodeInfo:
    op = node.op_type
    key = (node.domain, op)
    found = roles.get(key)
    if found is None:
        found = roles[key] = _role_of(node.domain, op)
    role, detail = found
    if op == "BatchNormalization" and not _bn_training(node):
        role = _ELEMENTWISE  # inference BN is one multiply-add per element
    inputs, outputs = node.inputs, node.outputs
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
    return NodeInfo(node.name, op, role, detail, out_n, in_n, rows, dtype, cast)


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
