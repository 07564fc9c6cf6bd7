"""Batchnorm folding: which BatchNormalization nodes fold into a neighbouring linear op, and why the others don't.

The math. In inference mode BatchNormalization is a per-channel affine map on axis 1 of its input::

    y[:, c, ...] = γ_c · (x[:, c, ...] − μ_c) / √(σ²_c + ε) + β_c  =  s_c · x[:, c, ...] + t_c
    with  s = γ / √(σ² + ε)   and   t = β − μ · s                       (see ``scale_shift``)

*Into the preceding op* (``direction="preceding"``). A Conv, ConvTranspose, Gemm or MatMul with a constant weight
is linear in its input, and each of its output channels owns one slice of the weight and one bias entry. Scaling
that slice by s_c and mapping the bias b_c ↦ s_c·b_c + t_c = (b_c − μ_c)·s_c + β_c gives the same result as
the op followed by the BN (a missing bias counts as b = 0, so the fold adds one when t ≠ 0). Which weight axis
holds the output channel depends on the op:

    Conv           W [M, C/g, k...]     axis 0
    ConvTranspose  W [C, M/g, k...]     axis 1, within each of the g groups: channel gi·(M/g) + j is W[gi·C/g:…, j]
    Gemm           Y = α·A'·B' + β·C    column n of B' = B (transB=0: column of B [K, N]; transB=1: row of B [N, K]);
                                        C' = s·C + t/β (β ≠ 0), else C' = t with β := 1
    MatMul         W [K, N] (2-D only)  column n; with t ≠ 0 the MatMul becomes Gemm(A, W', t) — always possible,
                                        since BN's axis 1 is the column axis only for a rank-2 output, so A is 2-D

*Into the following op* (``direction="following"``). Feeding s·x + t to a linear op scales its weight along the
*input*-channel axis by s and adds the op applied to the constant t to its bias::

    Conv           W[m, c', k] ↦ W[m, c', k]·s_c  and  b_m ↦ b_m + Σ_{c',k} W[m, c', k]·t_c    (c = group(m)·C/g + c')
    Gemm (transA=0)  B'[k, n] ↦ s_k·B'[k, n]  and  C ↦ C + α·(t·B')/β
    MatMul [K, N]    W[k, n] ↦ s_k·W[k, n]  and becomes Gemm(X, W', t·W)
    ConvTranspose    only when t = 0: W[c, …] ↦ s_c·W[c, …]

The bias identity holds only where every kernel tap reads real data. Padding is applied *after* the BN, so padded
taps read 0 in the original model but would read "t" in the folded one: with padding (``pads`` ≠ 0 or
``auto_pad=SAME_*``) a following Conv is legal only if t = 0 on every channel. A ConvTranspose's border outputs sum
fewer input taps than its interior ones even without padding, so only t = 0 folds into it.

Patterns matched, preceding preferred; the following fold is tried when the preceding one is refused::

    x ─► [Conv | ConvTranspose | Gemm | MatMul](W const, b const?) ─► BatchNormalization ─► y       (preceding)
    x ─► BatchNormalization ─► [Conv | Gemm | MatMul | ConvTranspose (t=0)](W const, b const?) ─► y   (following)

Legality (each refusal is a value with a human reason, never an exception):

* the BN is inference mode: ``training_mode=0`` and no running-statistics outputs (before opset 14, extra outputs
  mean training; opset < 7 needs ``is_test=1``; opset < 9 needs ``spatial=1``); domain ai.onnx;
* γ, β, μ, σ² are constants (initializers or Constant nodes, not also graph inputs), 1-D of one length C, floating,
  finite, with σ² + ε > 0;
* the tensor between the two ops has no other reader: not a graph output, no other consumer, not read inside a
  subgraph — otherwise the other readers would see the folded values;
* the target's weight (and bias, if any) is a constant that feeds only the target (a shared initializer would change
  for its other users), is not a graph input, and is floating point;
* channel counts agree: C equals the target's output channels (preceding) or input channels (following), and for
  MatMul BN's axis 1 is the column axis (rank-2 output, 2-D weight) — a [B, T, N] MatMul output normalized on T is a
  broadcast/channel-axis mismatch; a following Gemm needs ``transA=0``.

Grouped and depthwise convolutions fold like any other (the reshape by groups above). Chains (BN → BN) are not
followed: the second BN's neighbour is a BN, so it is refused; folding the output once more catches it.

Cost: folding removes the BN node (its bytes and FLOPs from ``count_costs``) and, when the target had no bias and
t ≠ 0, adds one (once per target): C bias elements read and one add per output element (the Conv/Gemm rules' own
bias convention). Each Foldable carries both; ``flops_saved``/``bytes_saved`` are the net, and on the reference
CNNs they equal the difference of ``analyze`` totals before and after ``graphcost fold`` exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graphcost._dims import Dim, evaluate, numel, to_text
from graphcost.graph import DEFAULT_DOMAIN, Graph, Node, dtype_bits
from graphcost.passes.costs import CostResult, NodeCost, count_costs
from graphcost.passes.roofline import kernel_bound

PRECEDING = "preceding"
FOLLOWING = "following"
TARGETS = ("Conv", "ConvTranspose", "Gemm", "MatMul")
FOLLOWING_TARGETS = ("Conv", "ConvTranspose", "Gemm", "MatMul")
FLOAT_DTYPES = frozenset({"float16", "float32", "float64", "bfloat16"})
DEFAULT_EPSILON = 1e-5  # BatchNormalization's schema default, every opset
BIAS_FLOPS_PER_OUTPUT = 1  # a new bias is one add per output element (as the Conv/Gemm rules count it)


def scale_shift(gamma: np.ndarray, beta: np.ndarray, mean: np.ndarray, var: np.ndarray,
                epsilon: float) -> tuple[np.ndarray, np.ndarray]:
    """BN as y = s·x + t per channel, in float64: s = γ/√(σ²+ε), t = β − μ·s."""
    s = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + float(epsilon))
    t = beta.astype(np.float64) - mean.astype(np.float64) * s
    return s, t


@dataclass(frozen=True)
class Foldable:
    """One BN that folds ``into`` a neighbour (``direction`` is ``preceding`` or ``following``)."""

    batchnorm: str
    into: str
    direction: str
    into_op: str
    dtype: str
    bytes_removed: Dim | None  # the BN node's bytes read + written
    flops_removed: Dim | None  # the BN node's FLOPs
    bytes_added: Dim = 0  # a new bias vector, when the target had none
    flops_added: Dim = 0  # its adds, one per output element

    @property
    def bytes_saved(self) -> Dim | None:
        return None if self.bytes_removed is None else self.bytes_removed - self.bytes_added

    @property
    def flops_saved(self) -> Dim | None:
        return None if self.flops_removed is None else self.flops_removed - self.flops_added

    def to_dict(self) -> dict[str, Any]:
        return {"batchnorm": self.batchnorm, "into": self.into, "direction": self.direction, "into_op": self.into_op,
                "bytes_removed": _out(self.bytes_removed), "flops_removed": _out(self.flops_removed),
                "bytes_added": _out(self.bytes_added), "flops_added": _out(self.flops_added)}


@dataclass(frozen=True)
class Refusal:
    batchnorm: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"batchnorm": self.batchnorm, "reason": self.reason}


@dataclass(frozen=True)
class BatchNormResult:
    foldable: tuple[Foldable, ...]
    refused: tuple[Refusal, ...]

    @property
    def bytes_saved(self) -> Dim | None:
        return _sum(f.bytes_saved for f in self.foldable)

    @property
    def flops_saved(self) -> Dim | None:
        return _sum(f.flops_saved for f in self.foldable)

    def __add__(self, other: BatchNormResult) -> BatchNormResult:
        return BatchNormResult(self.foldable + other.foldable, self.refused + other.refused)

    def to_dict(self) -> dict[str, Any]:
        """The report's ``batchnorm`` section (counts as numbers, or formulas when symbolic)."""
        return {
            "foldable": [f.to_dict() for f in self.foldable],
            "refused": [r.to_dict() for r in self.refused],
            "bytes_saved": _out(self.bytes_saved),
            "flops_saved": _out(self.flops_saved),
        }


def time_saved_s(result: BatchNormResult, hardware: Any, binding: Mapping[str, int]) -> float | None:
    """Σ over folded BNs of max(net bytes / DRAM bandwidth, net FLOPs / peak(dtype)); None if a cost is unknown.

    Dims the binding leaves unbound count as 1. On-chip capacity is ignored on purpose (``kernel_bound`` with
    ``capacity=False``): the saved bytes are the BN's own reads and writes, charged at DRAM bandwidth.
    """
    total = 0.0
    for f in result.foldable:
        b, fl = f.bytes_saved, f.flops_saved
        if b is None or fl is None:
            return None
        total += kernel_bound(bind(fl, binding), bind(b, binding), hardware, dtype=f.dtype, capacity=False
                              ).time_s or 0.0
    return total


def bind(value: Dim, binding: Mapping[str, int]) -> int | float:
    """Numeric value of a cost, with dims the binding leaves unbound taken as 1."""
    if isinstance(value, int):
        return value
    names = {str(s) for s in getattr(value, "free_symbols", ())}
    return evaluate(value, {**dict.fromkeys(names, 1), **binding})


# ------------------------------------------------------------------------------------------------ the pass
def find_foldable(graph: Graph, costs: CostResult | None = None) -> BatchNormResult:
    """Every BatchNormalization of ``graph`` (subgraphs included), foldable or refused with a reason.

    ``costs`` is the graph's ``count_costs`` result (computed here when not given).
    """
    costs = costs if costs is not None else count_costs(graph)
    # made at the first batchnorm: a graph without one (most, and synthetic-100k) needs neither table
    by_name: dict[str, NodeCost] | None = None
    uses: dict[str, list[str]] | None = None
    foldable: list[Foldable] = []
    refused: list[Refusal] = []
    biased: set[str] = set()  # targets that already got a new bias from an earlier fold
    for node in graph.nodes():
        if node.op_type != "BatchNormalization" or node.domain != DEFAULT_DOMAIN:
            for _, child in graph.children(node.name):
                refused.extend(Refusal(name, f"inside a subgraph of {node.name}: fold rewrites the main graph only")
                               for name in _batchnorms(child))
            continue
        if by_name is None or uses is None:
            by_name, uses = {c.name: c for c in costs.nodes}, _subgraph_uses(graph)
        match = _match(graph, node, uses)
        if isinstance(match, _Fail):
            refused.append(Refusal(node.name, match.reason))
            continue
        target, direction, adds_bias = match
        cost = by_name.get(node.name)
        b_rm = None if cost is None or cost.bytes_read is None or cost.bytes_written is None \
            else cost.bytes_read + cost.bytes_written
        f_rm = None if cost is None else cost.flops
        b_add: Dim = 0
        f_add: Dim = 0
        if adds_bias and target.name not in biased:
            biased.add(target.name)
            b_add, f_add = _bias_cost(graph, target)
        x = graph.tensor(node.inputs[0])
        foldable.append(Foldable(node.name, target.name, direction, target.op_type,
                                 x.dtype if x is not None else "unknown", b_rm, f_rm, b_add, f_add))
    return BatchNormResult(tuple(foldable), tuple(refused))


def _batchnorms(graph: Graph) -> list[str]:
    out = []
    for node in graph.nodes():
        if node.op_type == "BatchNormalization" and node.domain == DEFAULT_DOMAIN:
            out.append(node.name)
        for _, child in graph.children(node.name):
            out.extend(_batchnorms(child))
    return out


@dataclass(frozen=True)
class _Fail:
    """A failed match: the reason a human reads."""

    reason: str


@dataclass(frozen=True)
class _BN:
    channels: int
    shift: np.ndarray = field(repr=False)


_Match = tuple[Node, str, bool]  # target, direction, whether the fold adds a bias the target lacked


def _match(graph: Graph, bn: Node, uses: Mapping[str, list[str]]) -> _Match | _Fail:
    params = _check_batchnorm(graph, bn)
    if isinstance(params, _Fail):
        return params
    before = _into_preceding(graph, bn, params, uses)
    if not isinstance(before, _Fail):
        return before
    after = _into_following(graph, bn, params, uses)
    if not isinstance(after, _Fail):
        return after
    return _Fail(f"not into the preceding op: {before.reason}; not into the following op: {after.reason}")


def _check_batchnorm(graph: Graph, bn: Node) -> _BN | _Fail:
    if bn.opset < 7 and not bn.attribute("is_test"):
        return _Fail("training mode (is_test=0, opset < 7): statistics come from the batch at run time")
    if bn.opset < 9 and bn.attribute("spatial") == 0:
        return _Fail("spatial=0: statistics per element, not per channel")
    if bn.attribute("training_mode"):
        return _Fail("training mode (training_mode=1): statistics come from the batch at run time")
    extra = [o for o in bn.outputs[1:] if o]
    if extra:
        return _Fail(f"training outputs are used ({', '.join(extra)}): the running statistics are updated at run time")
    if len(bn.inputs) < 5 or not all(bn.inputs[:5]):
        return _Fail("missing scale, bias, mean or variance input")
    values = []
    for role, name in zip(("scale", "bias", "mean", "variance"), bn.inputs[1:5], strict=True):
        stored = graph.copied_from(name)  # an Identity copy of a deduplicated initializer is that initializer
        if not graph.is_constant(stored):
            return _Fail(f"non-constant statistics: {role} {name!r} is computed at run time")
        if stored in graph.input_names:
            return _Fail(f"non-constant statistics: {role} {name!r} is also a graph input (it can be fed at run time)")
        v = graph.constant_value(stored)
        if v is None:
            return _Fail(f"{role} {name!r}: its value cannot be read")
        if v.ndim != 1:
            return _Fail(f"{role} {name!r} has shape {list(v.shape)}, not [C]")
        if v.dtype.kind != "f" and str(v.dtype) != "bfloat16":
            return _Fail(f"{role} {name!r} is {v.dtype}, not floating point")
        values.append(v)
    sizes = {len(v) for v in values}
    if len(sizes) != 1:
        return _Fail(f"scale, bias, mean and variance have different lengths {sorted(sizes)}")
    c = sizes.pop()
    x = graph.tensor(bn.inputs[0])
    if x is not None and x.dtype not in FLOAT_DTYPES and x.dtype != "unknown":
        return _Fail(f"input is {x.dtype}, not floating point")
    if x is not None and x.shape is not None:
        if len(x.shape) < 2:
            return _Fail(f"input has rank {len(x.shape)}: no channel axis 1")
        if isinstance(x.shape[1], int) and x.shape[1] != c:
            return _Fail(f"channel-axis mismatch: input has {x.shape[1]} channels on axis 1, statistics have {c}")
    eps = bn.attribute("epsilon")
    eps = DEFAULT_EPSILON if eps is None else float(eps)
    gamma, beta, mean, var = values
    if not np.all(var.astype(np.float64) + eps > 0):
        return _Fail("variance + epsilon ≤ 0 on some channel")
    s, t = scale_shift(gamma, beta, mean, var, eps)
    if not (np.all(np.isfinite(s)) and np.all(np.isfinite(t))):
        return _Fail("scale or shift is not finite (NaN/Inf statistics)")
    return _BN(c, t)


def _into_preceding(graph: Graph, bn: Node, p: _BN, uses: Mapping[str, list[str]]) -> _Match | _Fail:
    x = bn.inputs[0]
    prod = graph.producer(x)
    if prod is None:
        return _Fail(f"its input {x!r} is a graph input or constant, not produced by an op")
    if prod.op_type not in TARGETS or prod.domain != DEFAULT_DOMAIN:
        return _Fail(f"producer {prod.name} is {prod.op_type}, not a foldable op ({', '.join(TARGETS)})")
    readers = _other_readers(graph, x, bn, uses)
    if readers:
        return _Fail(f"producer {prod.name} has other consumers: its output {x!r} also feeds {readers}")
    own = _own_constants(graph, prod, uses)
    if isinstance(own, _Fail):
        return own
    w = graph.tensor(prod.inputs[1])
    assert w is not None and w.shape is not None  # _own_constants checked it
    shape = w.shape
    if prod.op_type == "Conv":
        out_c = shape[0]
    elif prod.op_type == "ConvTranspose":
        out_c = shape[1] * int(prod.attribute("group") or 1)
    elif prod.op_type == "Gemm":
        out_c = shape[0] if prod.attribute("transB") else shape[1]
    else:  # MatMul
        if len(shape) != 2:
            return _Fail(f"MatMul weight {prod.inputs[1]!r} has rank {len(shape)}: only a 2-D [K, N] weight folds")
        y = graph.tensor(x)
        if y is None or y.shape is None:
            return _Fail("MatMul output rank unknown: cannot tell which axis BN normalizes")
        if len(y.shape) != 2:
            return _Fail(f"broadcast/channel-axis mismatch: BN normalizes axis 1 of the rank-{len(y.shape)} MatMul "
                         "output, whose columns are its last axis")
        out_c = shape[1]
    if out_c != p.channels:
        return _Fail(f"channel-axis mismatch: {prod.op_type} has {out_c} output channels, BN has {p.channels}")
    return prod, PRECEDING, not _has(prod, 2) and bool(np.any(p.shift))


def _into_following(graph: Graph, bn: Node, p: _BN, uses: Mapping[str, list[str]]) -> _Match | _Fail:
    y = bn.outputs[0]
    if y in graph.output_names:
        return _Fail(f"its output {y!r} is a graph output")
    readers = graph.consumers(y)
    inner = uses.get(y, [])
    if inner:
        return _Fail(f"its output {y!r} is read inside the subgraph of {inner[0]}")
    if len(readers) != 1:
        names = ", ".join(r.name for r in readers[:3])
        return _Fail(f"its output feeds {len(readers)} nodes" + (f" ({names})" if readers else ""))
    cons = readers[0]
    if cons.op_type not in FOLLOWING_TARGETS or cons.domain != DEFAULT_DOMAIN:
        return _Fail(f"consumer {cons.name} is {cons.op_type}, not Conv, Gemm or MatMul")
    if cons.inputs[0] != y or cons.inputs.count(y) != 1:
        return _Fail(f"its output is not only the data input of {cons.name}")
    own = _own_constants(graph, cons, uses)
    if isinstance(own, _Fail):
        return own
    w = graph.tensor(cons.inputs[1])
    assert w is not None and w.shape is not None
    shape = w.shape
    x = graph.tensor(bn.inputs[0])
    rank = None if x is None or x.shape is None else len(x.shape)
    shift_free = not np.any(p.shift)
    if cons.op_type in ("Conv", "ConvTranspose"):
        in_c = shape[1] * int(cons.attribute("group") or 1) if cons.op_type == "Conv" else shape[0]
        if cons.op_type == "ConvTranspose" and not shift_free:
            return _Fail(f"{cons.name} is a ConvTranspose and the BN shift β − μ·s is non-zero: its border outputs "
                         "sum fewer input taps, so the shift is no per-channel bias")
        pads = [int(v) for v in (cons.attribute("pads") or [])]
        auto_pad = cons.attribute("auto_pad")
        auto = auto_pad.decode() if isinstance(auto_pad, bytes) else (auto_pad or "NOTSET")
        padded = any(pads) or auto in ("SAME_UPPER", "SAME_LOWER")
        if cons.op_type == "Conv" and padded and not shift_free:
            what = f"pads {pads}" if any(pads) else f"auto_pad={auto}"
            return _Fail(f"{cons.name} has padding ({what}) and the BN shift β − μ·s is non-zero: padded taps read 0 "
                         "in the original but would read the shift after folding")
    elif cons.op_type == "Gemm":
        if cons.attribute("transA"):
            return _Fail(f"channel-axis mismatch: {cons.name} has transA=1, so BN's axis 1 is Gemm's M, not K")
        in_c = shape[1] if cons.attribute("transB") else shape[0]
    else:  # MatMul
        if len(shape) != 2:
            return _Fail(f"MatMul weight {cons.inputs[1]!r} has rank {len(shape)}: only a 2-D [K, N] weight folds")
        if rank != 2:
            return _Fail("broadcast/channel-axis mismatch: BN normalizes axis 1, the MatMul contracts the last axis"
                         if rank is not None else "BN input rank unknown: cannot tell which axis it normalizes")
        in_c = shape[0]
    if in_c != p.channels:
        return _Fail(f"channel-axis mismatch: {cons.op_type} has {in_c} input channels, BN has {p.channels}")
    return cons, FOLLOWING, not _has(cons, 2) and not shift_free


def _own_constants(graph: Graph, node: Node, uses: Mapping[str, list[str]]) -> _Fail | None:
    """The weight (and bias) must be floating constants (or Identity copies of one) that only this node reads."""
    slots = (1, 2) if node.op_type != "MatMul" else (1,)
    for slot in slots:
        if not _has(node, slot):
            continue
        name = node.inputs[slot]
        role = "weight" if slot == 1 else "bias"
        t = graph.tensor(name)
        stored = graph.copied_from(name)  # an Identity copy only this node reads becomes its own constant
        if not graph.is_constant(stored):
            return _Fail(f"{node.op_type} {role} {name!r} is computed at run time, not a constant")
        if stored in graph.input_names:
            return _Fail(f"{node.op_type} {role} {name!r} is also a graph input (it can be fed at run time)")
        if t is None or t.shape is None:
            return _Fail(f"{node.op_type} {role} {name!r} has an unknown shape")
        if t.dtype not in FLOAT_DTYPES:
            return _Fail(f"{node.op_type} {role} {name!r} is {t.dtype}, not floating point")
        others = sorted({c.name for c in graph.consumers(name) if c.name != node.name} | set(uses.get(name, [])))
        if others or node.inputs.count(name) > 1 or name in graph.output_names:
            who = ", ".join(others[:3]) or ("a graph output" if name in graph.output_names else "another input slot")
            return _Fail(f"shared initializer: {role} {name!r} of {node.name} also feeds {who}")
    return None


def _other_readers(graph: Graph, tensor: str, bn: Node, uses: Mapping[str, list[str]]) -> str:
    names = [c.name for c in graph.consumers(tensor) if c.name != bn.name]
    names += [f"the subgraph of {u}" for u in uses.get(tensor, [])]
    if tensor in graph.output_names:
        names.append("a graph output")
    if bn.inputs.count(tensor) > 1:
        names.append(f"another input of {bn.name}")
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _subgraph_uses(graph: Graph) -> dict[str, list[str]]:
    """Tensor names read inside a node's subgraphs (outer-scope reads), mapped to that node."""
    out: dict[str, list[str]] = {}

    def walk(g: Graph, owner: str) -> None:
        for n in g.nodes():
            for name in n.inputs:
                if name and owner not in out.setdefault(name, []):
                    out[name].append(owner)
            for _, child in g.children(n.name):
                walk(child, owner)

    for node in graph.nodes():
        for _, child in graph.children(node.name):
            walk(child, node.name)
    return out


def _has(node: Node, slot: int) -> bool:
    return len(node.inputs) > slot and bool(node.inputs[slot])


def _bias_cost(graph: Graph, target: Node) -> tuple[Dim, Dim]:
    """Bytes and FLOPs of a bias the fold adds: channels × element size read, one add per output element."""
    w = graph.tensor(target.inputs[1])
    y = graph.tensor(target.outputs[0])
    if w is None or w.shape is None or y is None or y.shape is None:
        return 0, 0
    op = target.op_type
    channels = {"Conv": w.shape[0], "ConvTranspose": w.shape[1] * int(target.attribute("group") or 1)}.get(
        op, y.shape[-1])  # Gemm/MatMul: the output's columns
    bits = dtype_bits(w.dtype) or 32
    return channels * bits // 8, BIAS_FLOPS_PER_OUTPUT * numel(y.shape)


def _sum(values: Any) -> Dim | None:
    total: Dim = 0
    for v in values:
        if v is None:
            return None
        total = total + v
    return total


def _out(value: Dim | None) -> int | str | None:
    if value is None or isinstance(value, int):
        return value
    return to_text(value)


__all__ = ["FOLLOWING", "PRECEDING", "BatchNormResult", "Foldable", "Refusal", "bind", "find_foldable",
           "scale_shift", "time_saved_s"]
