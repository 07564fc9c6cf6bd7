"""Training-step cost: forward + backward FLOPs and bytes per node, and the activations backward needs.

Everything starts from the *forward* graph an exporter wrote: each node's forward cost is the one
``passes.costs`` counted; its backward cost comes from a rule per op (:data:`BACKWARD_RULES`), and the
forward tensors its backward reads (the *saved* tensors) are decided per op too, not "every activation":

    op                      backward FLOPs                                 saves
    MatMul, Gemm, Conv      2 × forward (dX and dW: two products of the    its activation inputs
                            forward's size)
    Add, Sub, Concat...     0 (+ one add per element a broadcast input     nothing
                            must sum back)
    Mul                     2 per output element (dA = dY·B, dB = dY·A)    its activation inputs
    Relu / Sigmoid / Tanh   1 / 3 / 3 per element                          the output
    Softmax                 4 per element: Y ⊙ (dY − Σ dY⊙Y)               the output
    LayerNormalization      13 per element (see LAYERNORM_BACKWARD)        the input + mean and 1/σ per row

An op with no rule gets ``backward_flops=None`` and a reason: unknown, never zero. Ops whose outputs are not
floating point (shape plumbing, masks, indices) have no backward. The loss is outside the graph.

Backward bytes, for every differentiable node: the output gradients read (one per float output byte), the saved
tensors and the parameters read (dX needs W), and one gradient written per float input byte.

Units: FLOPs (``FLOPS_PER_MAC = 2`` as in the forward rules), bytes, seconds. Numbers are evaluated under the
binding. docs/training.md has the rules table; docs/memory.md the saved-tensor rules.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from graphcost._dims import Dim, numel
from graphcost.graph import Graph, Node, Tensor, TensorKind
from graphcost.hardware.spec import HardwareSpec
from graphcost.ops import FLOPS_PER_MAC, Kind, lookup
from graphcost.passes.costs import CostResult, NodeCost, tensor_bytes
from graphcost.passes.roofline import count_value, kernel_bound

Number = int | float

SAVES_INPUTS = "inputs"
SAVES_OUTPUT = "output"
SAVES_NOTHING = "nothing"
SAVES_FIRST = "input 0"
SAVES_MASK = "mask"

LAYERNORM_BACKWARD = 13
"""Per element: recompute ŷ = (x − μ)·rstd (2); dŷ = dy·γ (1); mean(dŷ) (1); dŷ·ŷ (1); its mean (1); ŷ·that (1);
two subtractions (2); × rstd (1); dγ = Σ dy·ŷ (2); dβ = Σ dy (1)."""
RMSNORM_BACKWARD = 10
"""Per element, as LayerNorm without the mean terms: ŷ (1), dŷ (1), dŷ·ŷ (1), mean (1), ŷ·m (1), sub (1),
× rstd (1), dγ (2), + 1 for the square-root chain."""
STATS_BYTES_PER_ROW = 8
"""LayerNorm keeps its mean and 1/σ per normalized row, two float32 values (as PyTorch's native kernel does)."""

Rule = tuple[Callable[["_Facts"], Number], str]


@dataclass(frozen=True)
class _Facts:
    forward_flops: Number
    macs: Number
    out_elements: Number
    in_elements: tuple[Number | None, ...]
    grads: tuple[bool, ...]
    """Which inputs need a gradient (:func:`requires_grad`)."""

    def grad(self, i: int) -> bool:
        return i < len(self.grads) and self.grads[i]


def _per_element(k: int) -> Callable[[_Facts], Number]:
    return lambda f: k * f.out_elements


def _broadcast_sum(f: _Facts) -> Number:
    """Add/Sub: the gradient passes through; an input broadcast to the output that needs a gradient sums it back
    (one add per output element it does not have)."""
    return sum(f.out_elements - e for i, e in enumerate(f.in_elements)
               if e is not None and e < f.out_elements and f.grad(i))


def _mul(f: _Facts) -> Number:
    # dA = dY·B and dB = dY·A: one multiply per output element for each input that needs a gradient
    return (f.grad(0) + f.grad(1)) * f.out_elements + _broadcast_sum(f)


def _div(f: _Facts) -> Number:
    # dA = dY/B (1 per element); dB = −dY·A/B² (3 per element); + broadcast sums
    return (f.grad(0) + 3 * f.grad(1)) * f.out_elements + _broadcast_sum(f)


def _twice_forward(f: _Facts) -> Number:
    # dX = dY·Wᵀ and dW = Xᵀ·dY: one product of the forward's size for each operand that needs a gradient
    # (both, for a weight product or attention's QKᵀ); a Gemm/Conv bias adds its sum of dY
    products = f.grad(0) + f.grad(1)
    bias = f.out_elements if f.grad(2) else 0
    return products * FLOPS_PER_MAC * f.macs + bias


def _zero(_: _Facts) -> Number:
    return 0


def _reduce_mean(f: _Facts) -> Number:
    return f.in_elements[0] or 0  # the output gradient broadcast back and scaled by 1/n: one multiply per input


def _gather(f: _Facts) -> Number:
    return f.out_elements  # scatter-add of the gathered rows' gradients into the table


BACKWARD_RULES: Mapping[str, Rule] = {
    # products: two products of the forward's size
    "MatMul": (_twice_forward, SAVES_INPUTS),
    "Gemm": (_twice_forward, SAVES_INPUTS),
    "Conv": (_twice_forward, SAVES_INPUTS),
    "ConvTranspose": (_twice_forward, SAVES_INPUTS),
    "Einsum": (_twice_forward, SAVES_INPUTS),
    # linear routing: the gradient is a fixed linear map of dY
    "Add": (_broadcast_sum, SAVES_NOTHING),
    "Sub": (lambda f: f.out_elements + _broadcast_sum(f), SAVES_NOTHING),  # −dY for B
    "Neg": (_per_element(1), SAVES_NOTHING),
    "Sum": (_broadcast_sum, SAVES_NOTHING),
    "Concat": (_zero, SAVES_NOTHING),
    "Split": (_zero, SAVES_NOTHING),
    "Slice": (_zero, SAVES_NOTHING),
    "Transpose": (_zero, SAVES_NOTHING),
    "Expand": (lambda f: max(f.out_elements - (f.in_elements[0] or 0), 0), SAVES_NOTHING),
    "Tile": (lambda f: max(f.out_elements - (f.in_elements[0] or 0), 0), SAVES_NOTHING),
    "Pad": (_zero, SAVES_NOTHING),
    "Cast": (_zero, SAVES_NOTHING),
    "Gather": (_gather, SAVES_NOTHING),  # the indices are integers: kept only when they are activations
    "ReduceSum": (_zero, SAVES_NOTHING),
    "ReduceMean": (_reduce_mean, SAVES_NOTHING),
    "Where": (_zero, SAVES_FIRST),  # routes dY by the condition
    # elementwise
    "Mul": (_mul, SAVES_INPUTS),
    "Div": (_div, SAVES_INPUTS),
    "Pow": (_per_element(3), SAVES_INPUTS),  # dY·p·A^(p−1)
    "Relu": (_per_element(1), SAVES_OUTPUT),  # dY masked by y > 0
    "LeakyRelu": (_per_element(2), SAVES_FIRST),
    "Sigmoid": (_per_element(3), SAVES_OUTPUT),  # dY·y·(1 − y)
    "Tanh": (_per_element(3), SAVES_OUTPUT),  # dY·(1 − y²)
    "Exp": (_per_element(1), SAVES_OUTPUT),  # dY·y
    "Log": (_per_element(1), SAVES_FIRST),  # dY / x
    "Sqrt": (_per_element(2), SAVES_OUTPUT),  # dY / (2y)
    "Reciprocal": (_per_element(3), SAVES_OUTPUT),  # −dY·y²
    "Erf": (_per_element(4), SAVES_FIRST),  # dY·(2/√π)·exp(−x²)
    "Gelu": (_per_element(8), SAVES_FIRST),  # dY·(Φ(x) + x·φ(x))
    "Abs": (_per_element(1), SAVES_FIRST),
    "Dropout": (_per_element(1), SAVES_MASK),  # dY·mask/(1 − p)
    # reductions
    "Softmax": (_per_element(4), SAVES_OUTPUT),  # Y ⊙ (dY − Σ dY⊙Y): mul, sum, sub, mul
    "LogSoftmax": (_per_element(3), SAVES_OUTPUT),  # dY − exp(y)·Σ dY
    # normalization
    "LayerNormalization": (_per_element(LAYERNORM_BACKWARD), SAVES_FIRST),
    "SimplifiedLayerNormalization": (_per_element(RMSNORM_BACKWARD), SAVES_FIRST),
    "RMSNormalization": (_per_element(RMSNORM_BACKWARD), SAVES_FIRST),
    "BatchNormalization": (_per_element(LAYERNORM_BACKWARD), SAVES_FIRST),
}
"""op type (default domain) → (backward FLOPs of the node's facts, which forward tensors backward reads)."""

NORMALIZATION_STATS = frozenset({"LayerNormalization", "SimplifiedLayerNormalization", "RMSNormalization"})

ASSUMPTIONS = (
    "backward FLOPs per op from BACKWARD_RULES; an op without a rule is unknown (listed), never zero",
    "every floating-point activation and graph input gets a gradient (an embedding output needs one), and every "
    "floating parameter but one-element scales (1/√d); products and Mul/Div save an operand only when the "
    "other operand needs a gradient",
    "saved tensors per op (docs/memory.md); views share their input's storage; parameters are resident, not kept",
    "LayerNorm/RMSNorm keep mean and 1/σ per row as float32 (8 B per row)",
    "the loss and the optimizer update are outside the graph",
    "time: per node max(FLOPs / peak, bytes / DRAM bandwidth), forward and backward bounded separately, summed",
)


@dataclass(frozen=True)
class TrainingNode:
    name: str
    op_type: str
    category: str
    """``dense`` (a product with a parameter), ``attention`` (a product of two activations) or ``other``."""
    forward_flops: Number | None
    backward_flops: Number | None
    forward_bytes: Number | None
    backward_bytes: Number | None
    saved: tuple[str, ...]
    """Storage names (views resolved) of the forward tensors this node's backward reads."""
    extra_saved_bytes: int
    """Bytes kept that are not graph tensors (LayerNorm's per-row statistics, Dropout's mask)."""
    dtype: str
    unknown_reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "op_type": self.op_type, "category": self.category,
                "forward_flops": self.forward_flops, "backward_flops": self.backward_flops,
                "forward_bytes": self.forward_bytes, "backward_bytes": self.backward_bytes,
                "saved": list(self.saved), "unknown_reason": self.unknown_reason}


@dataclass(frozen=True)
class StepBound:
    forward_time_s: float
    backward_time_s: float
    compute_time_s: float
    memory_time_s: float
    hardware: str

    @property
    def step_time_s(self) -> float:
        return self.forward_time_s + self.backward_time_s

    def to_dict(self) -> dict[str, Any]:
        return {"hardware": self.hardware, "forward_time_s": self.forward_time_s,
                "backward_time_s": self.backward_time_s, "step_time_s": self.step_time_s,
                "compute_time_s": self.compute_time_s, "memory_time_s": self.memory_time_s}


@dataclass(frozen=True)
class TrainingCost:
    nodes: tuple[TrainingNode, ...]
    sizes: Mapping[str, int]
    """Bytes of every activation (graph inputs and outputs included) under the binding."""
    bound: StepBound | None
    assumptions: tuple[str, ...] = ASSUMPTIONS

    def _total(self, attr: str, category: str | None = None) -> Number:
        return sum(getattr(n, attr) or 0 for n in self.nodes if category is None or n.category == category)

    @property
    def forward_flops(self) -> Number:
        return self._total("forward_flops")

    @property
    def backward_flops(self) -> Number:
        return self._total("backward_flops")

    @property
    def training_flops(self) -> Number:
        return self.forward_flops + self.backward_flops

    def category_flops(self, category: str) -> Number:
        """Forward + backward FLOPs of one category (``dense``, ``attention``, ``other``)."""
        return self._total("forward_flops", category) + self._total("backward_flops", category)

    @property
    def unknown(self) -> tuple[TrainingNode, ...]:
        return tuple(n for n in self.nodes if n.unknown_reason is not None)

    @property
    def kept(self) -> tuple[str, ...]:
        """Storage names saved for backward, in order of first saving node."""
        return tuple(dict.fromkeys(s for n in self.nodes for s in n.saved))

    @property
    def kept_bytes(self) -> int:
        return sum(self.sizes[s] for s in self.kept) + sum(n.extra_saved_bytes for n in self.nodes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "forward_flops": self.forward_flops, "backward_flops": self.backward_flops,
            "training_flops": self.training_flops,
            "flops_by_category": {c: self.category_flops(c) for c in ("dense", "attention", "other")},
            "forward_bytes": self._total("forward_bytes"), "backward_bytes": self._total("backward_bytes"),
            "activations_kept_bytes": self.kept_bytes, "kept_tensors": len(self.kept),
            "bound": None if self.bound is None else self.bound.to_dict(),
            "unknown": [{"node": n.name, "op_type": n.op_type, "reason": n.unknown_reason} for n in self.unknown],
            "nodes": [n.to_dict() for n in self.nodes], "assumptions": list(self.assumptions),
        }


# ----------------------------------------------------------------------------------------------- helpers
def _num(value: Dim | None, binding: Mapping[str, int]) -> Number | None:
    """A count under the binding, or None (unknown) where it has no value there: training memory is an
    estimate beside the bound, so an unbound dim leaves that figure unknown rather than failing the report."""
    try:
        return count_value(value, binding)
    except ValueError:
        return None


def _floating(t: Tensor | None) -> bool:
    return t is not None and t.dtype.startswith(("float", "bfloat"))


def storage(graph: Graph, name: str) -> str:
    """The tensor that owns ``name``'s storage: views (Reshape, Squeeze, Identity...) alias their input."""
    seen = 0
    while seen < 10_000:
        node = graph.producer(name)
        if node is None or not node.inputs:
            return name
        entry = lookup(node.domain, node.op_type)
        if entry is None or entry.kind != Kind.VIEW or not node.inputs[0]:
            return name
        name, seen = node.inputs[0], seen + 1
    return name


def is_activation(graph: Graph, name: str) -> bool:
    """A value produced at run time or fed by the caller (not a weight, not constant plumbing)."""
    t = graph.tensor(name)
    return bool(name) and t is not None and t.kind in (TensorKind.ACTIVATION, TensorKind.INPUT, TensorKind.OUTPUT)


def _bytes(t: Tensor | None, binding: Mapping[str, int]) -> int | None:
    value = _num(tensor_bytes(t), binding)
    return None if value is None else int(value)


def _category(graph: Graph, node: Node) -> str:
    if node.op_type not in ("MatMul", "Gemm", "Conv", "ConvTranspose", "Einsum"):
        return "other"
    roots = [storage(graph, x) for x in node.inputs[:2] if x]
    return "attention" if all(is_activation(graph, r) for r in roots) else "dense"


def requires_grad(graph: Graph, name: str) -> bool:
    """A floating-point activation or graph input, or a trained parameter. A one-element floating parameter is a
    constant scale (attention's 1/√d), not trained."""
    t = graph.tensor(name) if name else None
    if not _floating(t) or t is None or t.kind == TensorKind.CONSTANT:
        return False
    if t.kind == TensorKind.PARAMETER:
        return t.shape is None or numel(t.shape) != 1
    return True


def _saved(graph: Graph, node: Node, how: str) -> list[str]:
    if how == SAVES_INPUTS:  # a product needs A for dB and B for dA: A is kept when B needs a gradient
        pair = [x for x in node.inputs[:2]]
        names = [x for i, x in enumerate(pair) if x and len(pair) == 2 and requires_grad(graph, pair[1 - i])]
    elif how == SAVES_FIRST:
        names = [node.inputs[0]] if node.inputs and node.inputs[0] else []
    elif how == SAVES_OUTPUT:
        names = [node.outputs[0]] if node.outputs else []
    else:
        names = []
    return [r for r in dict.fromkeys(storage(graph, x) for x in names) if is_activation(graph, r)]


def _extra_saved(graph: Graph, node: Node, how: str, binding: Mapping[str, int]) -> int:
    x = graph.tensor(node.inputs[0]) if node.inputs else None
    if node.op_type in NORMALIZATION_STATS and x is not None and x.shape is not None:
        axis = node.attribute("axis")
        axis = -1 if axis is None else int(axis)
        axis = axis + len(x.shape) if axis < 0 else axis
        rows = _num(numel(tuple(x.shape[:axis])), binding)
        return 0 if rows is None else int(rows) * STATS_BYTES_PER_ROW
    if how == SAVES_MASK and node.outputs:
        out = _num(numel(tuple(graph.tensor(node.outputs[0]).shape or ())), binding)  # type: ignore[union-attr]
        return 0 if out is None else int(out)  # one bool byte per element
    return 0


# ----------------------------------------------------------------------------------------------- the pass
def training_cost(graph: Graph, costs: CostResult, binding: Mapping[str, int],
                  hardware: HardwareSpec | None = None) -> TrainingCost:
    """Forward + backward cost of every top-level node of ``graph`` (costs from ``count_costs(graph)``)."""
    rows: list[TrainingNode] = []
    sizes: dict[str, int] = {}
    fwd_time = bwd_time = compute = memory = 0.0
    by_name = {c.name: c for c in costs.top_level()}
    for node in graph.nodes():
        cost = by_name.get(node.name)
        if cost is None:
            continue
        row = _node(graph, node, cost, binding)
        rows.append(row)
        if hardware is not None:
            for flops, moved, fwd in ((row.forward_flops, row.forward_bytes, True),
                                      (row.backward_flops, row.backward_bytes, False)):
                # a per-device step estimate: every byte at DRAM bandwidth, on purpose (capacity=False)
                k = kernel_bound(flops or 0, moved or 0, hardware, dtype=row.dtype, capacity=False)
                c, m, t = k.compute_s or 0.0, k.memory_s or 0.0, k.time_s or 0.0
                compute, memory = compute + c, memory + m
                if fwd:
                    fwd_time += t
                else:
                    bwd_time += t
    for name, t in graph.tensors().items():
        if is_activation(graph, name):
            sizes[name] = _bytes(t, binding) or 0
    bound = None if hardware is None else StepBound(fwd_time, bwd_time, compute, memory, hardware.name)
    return TrainingCost(tuple(rows), sizes, bound)


def _node(graph: Graph, node: Node, cost: NodeCost, binding: Mapping[str, int]) -> TrainingNode:
    fwd = _num(cost.flops, binding)
    fwd_bytes = None if cost.bytes_read is None or cost.bytes_written is None else \
        _num(cost.bytes_read + cost.bytes_written, binding)
    ins = [graph.tensor(x) if x else None for x in node.inputs]
    outs = [graph.tensor(x) for x in node.outputs if x]
    entry = lookup(node.domain, node.op_type)
    category = _category(graph, node)
    base = dict(name=node.name, op_type=node.op_type, category=category, forward_flops=fwd,
                forward_bytes=fwd_bytes, dtype=cost.dtype)
    if not any(_floating(t) for t in outs) or (entry is not None and entry.kind in (Kind.VIEW, Kind.FREE)):
        # integer/bool outputs (shape plumbing, masks, indices) have no gradient; views pass dY through
        return TrainingNode(**base, backward_flops=0, backward_bytes=0, saved=(), extra_saved_bytes=0)  # type: ignore[arg-type]
    rule = BACKWARD_RULES.get(node.op_type) if node.domain in ("", "ai.onnx") else None
    if rule is None:
        return TrainingNode(**base, backward_flops=None, backward_bytes=None, saved=(), extra_saved_bytes=0,  # type: ignore[arg-type]
                            unknown_reason=f"no backward rule for {node.domain}::{node.op_type}")
    out_elems = _num(numel(outs[0].shape), binding) if outs and outs[0] is not None and outs[0].shape is not None \
        else None
    if fwd is None or out_elems is None:
        return TrainingNode(**base, backward_flops=None, backward_bytes=None, saved=(), extra_saved_bytes=0,  # type: ignore[arg-type]
                            unknown_reason=cost.unknown_reason or "forward cost or output shape unknown")
    in_elems = tuple(_num(numel(t.shape), binding) if t is not None and t.shape is not None else None for t in ins)
    fn, how = rule
    grads = tuple(requires_grad(graph, x) for x in node.inputs)
    bwd = fn(_Facts(fwd, _num(cost.macs, binding) or 0, out_elems, in_elems, grads))
    saved = _saved(graph, node, how)
    extra = _extra_saved(graph, node, how, binding)
    grad_out = sum(_bytes(t, binding) or 0 for t in outs if _floating(t))  # dY read
    params = sum(_bytes(t, binding) or 0 for t in ins if t is not None and t.kind == TensorKind.PARAMETER
                 and how == SAVES_INPUTS)  # W read for dX
    saved_read = sum(_bytes(graph.tensor(s), binding) or 0 for s in saved) + extra
    grad_in = sum(_bytes(graph.tensor(x), binding) or 0 for x in node.inputs
                  if requires_grad(graph, x))  # one gradient written per input that needs one
    return TrainingNode(**base, backward_flops=bwd, backward_bytes=grad_out + params + saved_read + grad_in,  # type: ignore[arg-type]
                        saved=tuple(saved), extra_saved_bytes=extra)


__all__ = ["BACKWARD_RULES", "StepBound", "TrainingCost", "TrainingNode", "is_activation", "requires_grad", "storage",
           "training_cost"]
