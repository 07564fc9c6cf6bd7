"""Other tools' counting conventions, as data over graphcost's own node records.

Every FLOP counter in the field counts a different thing and most call it "FLOPs". Each convention below is a
small table from an op family to a rule: a pure function of one node's record (graphcost's MACs and FLOPs, its
input and output shapes, whether it has a bias or a stored weight) that returns what that tool would count for
the node, in the tool's own unit. ``as_convention(report, "fvcore")`` applies one table to every node and
keeps the per-node counts, so ``graphcost explain`` can say, per op type, "graphcost counts X, fvcore counts Y,
because <rule>", with rows that add up to both totals exactly.

A family a convention does not list is **not counted by that tool** (the rule says so; it is the tool's
choice, not an unknown). A node graphcost itself could not cost stays unknown under every convention.

Sources are the tools' installed code (the versions pinned in ``constraints``; file and function named per
rule) — torch 2.13 ``torch/utils/flop_counter.py``; fvcore 0.1.5.post20221221 ``fvcore/nn/flop_count.py``
and ``jit_handles.py``; ptflops 0.7.5 ``ptflops/pytorch_ops.py`` (the default ``pytorch`` backend) and
``aten_ops.py``; thop 0.1.1.post2209072238 ``thop/profile.py``, ``thop/vision/basic_hooks.py``,
``calc_func.py``, ``rnn_hooks.py`` — and, for the ONNX tools that are not installed in this environment
(onnx-tool 1.0.1, onnxsim 0.8.1), the source notes in the project's research (``onnx_tool/node.py``
profiles, ``onnxsim/model_info.py`` ``_MAC_COUNTERS``).

What no table over an ONNX file can know is noted where it matters: module-hook counters (ptflops, thop) see
``nn.ReLU`` but not ``F.relu`` or ``x + y``; an export that folded BatchNorm into the Conv has no BN left for
fvcore's 2 per element (export with BatchNorm kept to compare); ``F.scaled_dot_product_attention`` is a
MatMul pair in ONNX but unsupported (0) in fvcore.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from graphcost._dims import evaluate, parse_dim
from graphcost.report.model import NodeReport, Report, TensorInfo

__all__ = ["CONVENTIONS", "Convention", "ConventionResult", "ConventionRow", "Rule", "as_convention", "family"]

Number = int | float

# --------------------------------------------------------------------------------------------------------------
# Op families: which ONNX ops a rule speaks about
# --------------------------------------------------------------------------------------------------------------

_FAMILIES: dict[str, tuple[str, ...]] = {
    "conv": ("Conv", "ConvInteger", "QLinearConv", "DeformConv", "NhwcConv", "FusedConv"),
    "conv_transpose": ("ConvTranspose",),
    "gemm": ("Gemm", "FusedGemm"),
    "matmul": ("MatMul", "MatMulInteger", "QLinearMatMul", "FusedMatMul", "MatMulNBits", "MatMulBnb4",
               "MatMulIntegerToFloat", "DynamicQuantizeMatMul", "QGemm"),
    "einsum": ("Einsum",),
    "attention": ("Attention", "MultiHeadAttention", "GroupQueryAttention", "PackedAttention"),
    "rnn": ("LSTM", "GRU", "RNN"),
    "batchnorm": ("BatchNormalization",),
    "layernorm": ("LayerNormalization", "SimplifiedLayerNormalization", "SkipLayerNormalization",
                  "SkipSimplifiedLayerNormalization", "RMSNormalization"),
    "groupnorm": ("GroupNormalization", "InstanceNormalization"),
    "maxpool": ("MaxPool", "GlobalMaxPool", "LpPool", "GlobalLpPool"),
    "avgpool": ("AveragePool",),
    "global_avgpool": ("GlobalAveragePool",),
    "resize": ("Resize", "Upsample"),
    "softmax": ("Softmax", "LogSoftmax"),
    "relu": ("Relu", "LeakyRelu", "PRelu", "Elu", "Clip", "Selu", "Celu", "ThresholdedRelu"),
    "gelu": ("Gelu", "FastGelu", "BiasGelu", "QuickGelu"),
    "transcendental": ("Exp", "Log", "Sqrt", "Tanh", "Sigmoid", "Erf", "Pow", "Reciprocal", "Sin", "Cos",
                       "HardSigmoid", "HardSwish", "Softplus", "Mish", "Softsign"),
    "div": ("Div",),
    "add_mul": ("Add", "Sub", "Mul", "Neg", "Abs", "Max", "Min", "Sum", "Mean", "Equal", "Less", "Greater",
                "Not", "And", "Or", "Where"),
    "control": ("If", "Loop", "Scan"),
}
_FAMILY_OF: dict[str, str] = {op: fam for fam, ops in _FAMILIES.items() for op in ops}
_PRODUCTS = ("conv", "conv_transpose", "gemm", "matmul", "einsum", "attention", "rnn")


def family(node: NodeReport) -> str:
    """The op family of a node: a key of the tables below, or ``other``."""
    return _FAMILY_OF.get(node.op_type, "other")


# --------------------------------------------------------------------------------------------------------------
# What a rule sees
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Facts:
    """One node's record with its shapes evaluated under the report's binding."""

    node: NodeReport
    macs: Number
    flops: Number
    out_elems: Number | None
    in_elems: Number | None
    in_shapes: tuple[tuple[Number, ...] | None, ...]
    out_shape: tuple[Number, ...] | None
    has_bias: bool
    weight_input: bool
    """Input 1 is a stored learnable tensor (an ``nn.Linear`` weight rather than an activation)."""

    def need(self, value: Number | None) -> Number:
        if value is None:
            raise _NoShape(self.node.name)
        return value


class _NoShape(Exception):
    pass


def _shape(t: TensorInfo, binding: Mapping[str, int]) -> tuple[Number, ...] | None:
    if t.shape is None:
        return None
    out: list[Number] = []
    for d in t.shape:
        if isinstance(d, int):
            out.append(d)
            continue
        try:
            out.append(evaluate(parse_dim(d), binding))
        except (KeyError, ValueError, TypeError):
            return None
    return tuple(out)


def _elems(shape: tuple[Number, ...] | None) -> Number | None:
    return None if shape is None else math.prod(shape)


def _facts(node: NodeReport, binding: Mapping[str, int], learnable: frozenset[str]) -> Facts:
    ins = tuple(_shape(t, binding) for t in node.inputs)
    out = _shape(node.outputs[0], binding) if node.outputs else None
    bias = family(node) in ("conv", "conv_transpose", "gemm") and len(node.inputs) > 2 and bool(node.inputs[2].name)
    weight = len(node.inputs) > 1 and node.inputs[1].name in learnable
    return Facts(node, node.macs or 0, node.flops or 0, _elems(out), _elems(ins[0]) if ins else None, ins, out,
                 bias, weight)


# --------------------------------------------------------------------------------------------------------------
# Rules
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """What a tool counts for one op family: ``count(facts)`` in the tool's unit, the rule in words, its source."""

    text: str
    count: Callable[[Facts], Number]
    source: str


@dataclass(frozen=True)
class Convention:
    name: str
    unit: str
    """What the tool's number is: ``FLOP`` (a MAC is 2) or ``MAC`` (a multiply-add is 1, whatever it is called)."""
    rules: Mapping[str, Rule]
    not_counted: str
    """Why a family without a rule counts 0 in this tool."""
    summary: str


def _zero(text: str, source: str) -> Rule:
    return Rule(text, lambda f: 0, source)


def _macs(k: int, text: str, source: str) -> Rule:
    return Rule(text, lambda f: k * f.macs, source)


def _per_out(k: Number, text: str, source: str) -> Rule:
    return Rule(text, lambda f: k * f.need(f.out_elems), source)


def _per_in(k: Number, text: str, source: str) -> Rule:
    return Rule(text, lambda f: k * f.need(f.in_elems), source)


def _bias_per_out(f: Facts) -> Number:
    return f.need(f.out_elems) if f.has_bias else 0


def _resize_mode(f: Facts) -> str:
    return (f.node.note or "nearest").split(":", 1)[0].strip() or "nearest"


def _rnn_dims(f: Facts) -> tuple[Number, Number, Number, Number, Number, bool]:
    """(seq, batch, directions, input size, hidden size, has bias) of an ONNX LSTM/GRU/RNN node."""
    x, w = (f.in_shapes[0] if f.in_shapes else None), (f.in_shapes[1] if len(f.in_shapes) > 1 else None)
    if x is None or w is None:
        raise _NoShape(f.node.name)
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[f.node.op_type]
    bias = len(f.node.inputs) > 3 and bool(f.node.inputs[3].name)
    return x[0], x[1], w[0], w[2], w[1] // gates, bias  # X [seq, batch, I]; W [dirs, gates·H, I]


def _ptflops_rnn(f: Facts) -> Number:
    """ptflops ``rnn_flops`` + ``rnn_flops_counter_hook``: per step and batch row, the weight elements of W_ih
    and W_hh (one multiply-add each), the gate adds and Hadamard products, and the bias elements."""
    seq, batch, dirs, i, h, bias = _rnn_dims(f)
    g = {"LSTM": 4, "GRU": 3, "RNN": 1}[f.node.op_type]
    per = g * h * i + g * h * h  # w_ih and w_hh elements
    per += {"LSTM": 4 * h + 3 * h + 3 * h, "GRU": h + 3 * h + 3 * h, "RNN": h}[f.node.op_type]  # gate arithmetic
    per += 2 * g * h if bias else 0  # b_ih + b_hh
    return per * batch * seq * dirs


def _thop_rnn(f: Facts) -> Number:
    """thop ``_count_lstm_cell`` / ``_count_gru_cell`` / ``_count_rnn_cell`` × steps × batch × directions."""
    seq, batch, dirs, i, h, bias = _rnn_dims(f)
    op = f.node.op_type
    if op == "LSTM":
        state = (i + h) * h + h + (2 * h if bias else 0)
        cell = 4 * state + 3 * h + h  # four gates; c' = f·c + i·g; h' = o·tanh(c')
    elif op == "GRU":
        state = (h + i) * h + h + (2 * h if bias else 0)
        cell = 2 * state + (h + i) * h + h + (2 * h if bias else 0) + h + 3 * h  # r, z; n; r ⊙; h'
    else:
        cell = (h + i) * h + (2 * h if bias else 0)  # thop _count_rnn_cell: (h+i)·h, + the two biases
    return cell * seq * batch * dirs


def _thop_conv_transpose(f: Facts) -> Number:
    """thop uses its Conv formula for ConvTranspose: output elements × (Cin/group) × ∏kernel, i.e. graphcost's
    ConvTranspose MACs (which run over the input positions) × ∏out_spatial / ∏in_spatial."""
    x, out = (f.in_shapes[0] if f.in_shapes else None), f.out_shape
    if x is None or out is None:
        raise _NoShape(f.node.name)
    return f.macs * math.prod(out[2:]) // math.prod(x[2:])


TORCH_SRC = "torch 2.13 torch/utils/flop_counter.py (mm_flop, addmm_flop, conv_flop, sdpa_flop_count)"
FV = "fvcore 0.1.5 fvcore/nn/flop_count.py _DEFAULT_SUPPORTED_OPS, jit_handles.py"
PT = "ptflops 0.7.5 ptflops/pytorch_ops.py MODULES_MAPPING"
TH = "thop 0.1.1 thop/profile.py register_hooks, thop/vision/basic_hooks.py, calc_func.py"
OT = "onnx-tool 1.0.1 onnx_tool/node.py *Node.profile (research notes; not installed here)"
OS = "onnxsim 0.8.1 onnxsim/model_info.py _MAC_COUNTERS (research notes; not installed here)"
TV = "torchvision 0.28 weights meta _ops (GFLOPS column): conv/linear/matmul MACs"


def _products(k: int, text: str, source: str, families: tuple[str, ...] = _PRODUCTS) -> dict[str, Rule]:
    return {fam: _macs(k, text, source) for fam in families}


TORCH = Convention(
    "torch", "FLOP",
    {**_products(2, "2 per MAC of mm/addmm/bmm/convolution/sdpa; bias not counted", TORCH_SRC,
                 ("conv", "conv_transpose", "gemm", "matmul", "einsum", "attention")),
     "rnn": _zero("not counted: aten::lstm/gru run as one fused kernel, which has no flop formula", TORCH_SRC),
     "control": _macs(2, "2 per MAC of the products in its body", TORCH_SRC)},
    "FlopCounterMode counts only matrix products, convolutions and attention", "FlopCounterMode: 2·MACs of products")
TORCHVISION = Convention(
    "torchvision", "MAC",
    {**_products(1, "1 per MAC of conv/linear/matmul; bias not counted", TV),
     "control": _macs(1, "1 per MAC of the products in its body", TV)},
    "the published GFLOPS count conv/linear/matmul MACs only", "published _ops: MACs of products (GMAC)")
ONNXSIM = Convention(
    "onnxsim", "MAC",
    {**_products(1, "1 per MAC; bias not counted", OS, ("conv", "conv_transpose", "gemm", "matmul", "attention"))},
    "onnxsim's model_info counts only Conv/ConvTranspose/Gemm/MatMul/Attention", "MACs of 5 product families")
FVCORE = Convention(
    "fvcore", "MAC",
    {**_products(1, "1 per MAC (fvcore's 'flop' is a MAC); bias not counted", FV,
                 ("conv", "conv_transpose", "gemm", "matmul", "einsum")),
     "batchnorm": _per_in(2, "2 per input element (eval, affine: batchnorm_flop_jit)", FV),
     "layernorm": _per_in(5, "5 per input element (affine: norm_flop_counter)", FV),
     "groupnorm": _per_in(5, "5 per input element (affine: norm_flop_counter)", FV),
     "global_avgpool": _per_in(1, "1 per input element (adaptive_avg_pool2d)", FV),
     "resize": Rule("nearest: 1, bilinear: 4 per output element (upsample_*2d)",
                    lambda f: f.need(f.out_elems) * (1 if _resize_mode(f) == "nearest" else 4), FV)},
    "fvcore skips it (elementwise, activations, softmax, max pooling, aten::lstm and sdpa are unsupported "
    "or ignored)", "MACs of products + BN 2, norms 5 per element, global average pool, upsampling")
PTFLOPS = Convention(
    "ptflops", "MAC",
    {"conv": Rule("1 per MAC + 1 per output element with a bias (conv_flops_counter_hook)",
                  lambda f: f.macs + _bias_per_out(f), PT),
     "conv_transpose": Rule("1 per MAC + 1 per output element with a bias (conv_flops_counter_hook)",
                            lambda f: f.macs + _bias_per_out(f), PT),
     "gemm": Rule("1 per MAC + 1 per output element with a bias (linear_flops_counter_hook)",
                  lambda f: f.macs + _bias_per_out(f), PT),
     "matmul": _macs(1, "1 per MAC (nn.Linear without bias, torch.matmul)", PT),
     "einsum": _zero("not counted (torch.einsum is not patched)", PT),
     "rnn": Rule("weights of W_ih and W_hh + gate arithmetic + biases, per step and row (rnn_flops)",
                 _ptflops_rnn, PT),
     "batchnorm": _per_in(2, "2 per input element (bn_flops_counter_hook, affine)", PT),
     "layernorm": _per_in(1, "1 per input element (bn hook: LayerNorm has no .affine)", PT),
     "groupnorm": _per_in(2, "2 per input element (bn hook, affine)", PT),
     "maxpool": _per_in(1, "1 per input element (pool_flops_counter_hook)", PT),
     "avgpool": _per_in(1, "1 per input element (pool_flops_counter_hook)", PT),
     "global_avgpool": _per_in(1, "1 per input element (pool_flops_counter_hook)", PT),
     "relu": _per_out(1, "1 per output element (relu_flops_counter_hook)", PT),
     "gelu": _per_out(1, "1 per output element (nn.GELU → relu hook)", PT),
     "softmax": _per_in(1, "1 per input element (F.softmax functional hook)", PT),
     "resize": _per_out(1, "1 per output element (upsample_flops_counter_hook)", PT),
     "control": _macs(1, "1 per MAC of the products in its body", PT)},
    "ptflops counts modules and patched functionals; `x + y`, `x * y`, tanh, exp... are not seen",
    "module hooks: products + bias, BN 2, LN 1, pools, activations 1 per element")
THOP = Convention(
    "thop", "MAC",
    {"conv": _macs(1, "output elements × Cin/group × ∏kernel; bias not counted (count_convNd)", TH),
     "conv_transpose": Rule("the Conv formula over the output (count_convNd)", _thop_conv_transpose, TH),
     "gemm": _macs(1, "in_features per output element; bias not counted (count_linear)", TH),
     "matmul": Rule("in_features per output element for an nn.Linear (a stored weight); torch.matmul is "
                    "not a module: 0", lambda f: f.macs if f.weight_input else 0, TH),
     "rnn": Rule("per cell: gates' products + biases + state updates, × steps × batch (rnn_hooks.py)",
                 _thop_rnn, TH),
     "batchnorm": _per_in(4, "2 per input element, ×2 affine (count_normalization)", TH),
     "layernorm": _per_in(4, "2 per input element, ×2 elementwise_affine (count_normalization)", TH),
     "avgpool": _per_out(1, "1 per output element (count_avgpool)", TH),
     "global_avgpool": Rule("window + 1 per output element (count_adap_avgpool)",
                            lambda f: f.need(f.in_elems) + f.need(f.out_elems), TH),
     "softmax": _zero("not counted: F.softmax is a functional (an nn.Softmax module would count 3n − 1 per "
                      "row, count_softmax)", TH),
     "resize": Rule("nearest 1, linear 5, bilinear 11 per output element (count_upsample)",
                    lambda f: f.need(f.out_elems) * (1 if _resize_mode(f) == "nearest" else 11), TH)},
    "thop counts registered modules only: ReLU and max pooling are zero_ops, functionals and elementwise "
    "ops are not seen", "module hooks: products (no bias), BN/LN 4, softmax, average pools")
ONNX_TOOL = Convention(
    "onnx-tool", "MAC",
    {**_products(1, "1 per MAC", OT, ("conv_transpose", "matmul", "einsum", "attention", "rnn")),
     "conv": Rule("1 per MAC + 1 per output element with a bias (ConvNode.profile)",
                  lambda f: f.macs + _bias_per_out(f), OT),
     "gemm": Rule("1 per MAC + 1 per output element with a bias", lambda f: f.macs + _bias_per_out(f), OT),
     "batchnorm": _per_in(31, "31 per element (x86 instruction weights: sub, div 4, sqrt 24...)", OT),
     "softmax": _per_in(36, "36 per element (exp 32 + add + div)", OT),
     "relu": _per_out(1, "1 per output element", OT),
     "add_mul": _per_out(1, "1 per output element (ADD/MUL/CMP weight 1)", OT),
     "div": _per_out(4, "4 per output element (DIV weight)", OT),
     "maxpool": _per_out(1, "1 per output element", OT),
     "transcendental": Rule("EXP 32, LOG 43, SQRT 24, TANH 38 per element; Erf 0",
                            lambda f: f.need(f.out_elems) * {"Exp": 32, "Log": 43, "Sqrt": 24, "Tanh": 38,
                                                               "Pow": 32, "Sigmoid": 33,
                                                               "Reciprocal": 4}.get(f.node.op_type, 0), OT)},
    "onnx-tool's NoMacsOps (Gather, Reshape, Concat, Slice, Cast...) and ops it has no profile for",
    "MACs + bias + elementwise ops at x86 instruction weights")

CONVENTIONS: dict[str, Convention] = {c.name: c for c in
                                      (TORCH, TORCHVISION, FVCORE, PTFLOPS, THOP, ONNX_TOOL, ONNXSIM)}


# --------------------------------------------------------------------------------------------------------------
# Applying a convention
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeCount:
    node: str
    op_type: str
    domain: str
    family: str
    graphcost_flops: Number | None
    tool: Number | None
    """The tool's count for this node; None when graphcost has no cost for it (unknown stays unknown)."""
    rule: str


@dataclass(frozen=True)
class ConventionRow:
    op_type: str
    domain: str
    count: int
    graphcost_flops: Number
    tool: Number
    unknown: int
    rules: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"op_type": self.op_type, "domain": self.domain, "count": self.count,
                "graphcost_flops": self.graphcost_flops, "tool": self.tool, "unknown": self.unknown,
                "rules": list(self.rules)}


@dataclass(frozen=True)
class ConventionResult:
    """One tool's totals over a report, with the per-node counts they add up from."""

    convention: str
    unit: str
    total: Number
    graphcost_flops: Number
    nodes: tuple[NodeCount, ...]
    unknown_nodes: int

    def rows(self) -> list[ConventionRow]:
        """Per (domain, op type): graphcost's FLOPs and the tool's count; they sum to both totals."""
        groups: dict[tuple[str, str], list[NodeCount]] = {}
        for n in self.nodes:
            groups.setdefault((n.domain, n.op_type), []).append(n)
        out = []
        for (domain, op), ns in groups.items():
            rules = tuple(dict.fromkeys(n.rule for n in ns))
            out.append(ConventionRow(op, domain, len(ns), sum(n.graphcost_flops or 0 for n in ns),
                                     sum(n.tool or 0 for n in ns), sum(n.tool is None for n in ns), rules))
        out.sort(key=lambda r: (-abs(r.graphcost_flops - r.tool), r.op_type))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"convention": self.convention, "unit": self.unit, "total": self.total,
                "graphcost_flops": self.graphcost_flops, "unknown_nodes": self.unknown_nodes,
                "summary": CONVENTIONS[self.convention].summary,
                "by_op_type": [r.to_dict() for r in self.rows()]}


_WEIGHT_VIEWS = frozenset({"Transpose", "Identity", "Cast", "Reshape", "Unsqueeze", "Squeeze", "Flatten",
                           "DequantizeLinear"})


def _weights(report: Report) -> frozenset[str]:
    """Learnable tensors and what views of them produce (an unfolded export reads ``Transpose(W)``)."""
    split = report.model.parameter_split
    names = set(split.learnable_names if split is not None else ())
    for n in report.nodes:
        if n.op_type in _WEIGHT_VIEWS and n.inputs and n.inputs[0].name in names:
            names.update(t.name for t in n.outputs)
    return frozenset(names)


def as_convention(report: Report, name: str) -> ConventionResult:
    """``report``'s counts as tool ``name`` (a key of ``CONVENTIONS``) would report them.

    Top-level nodes only: a control-flow node carries its body's costs (``graphcost/passes/costs.py``), and is
    counted by its ``control`` rule. Raises ValueError for an unknown convention name.
    """
    conv = CONVENTIONS.get(name)
    if conv is None:
        raise ValueError(f"unknown convention {name!r}: expected one of {', '.join(CONVENTIONS)}")
    learnable = _weights(report)
    counts: list[NodeCount] = []
    for n in report.nodes:
        if n.depth != 0:
            continue
        fam = family(n)
        rule = conv.rules.get(fam)
        if n.flops is None:
            counts.append(NodeCount(n.name, n.op_type, n.domain, fam, None, None, "unknown to graphcost"))
            continue
        if rule is None:
            counts.append(NodeCount(n.name, n.op_type, n.domain, fam, n.flops, 0, f"not counted: {conv.not_counted}"))
            continue
        try:
            value = rule.count(_facts(n, report.binding, learnable))
        except _NoShape:
            counts.append(NodeCount(n.name, n.op_type, n.domain, fam, n.flops, None, "shape unknown"))
            continue
        counts.append(NodeCount(n.name, n.op_type, n.domain, fam, n.flops, value, rule.text))
    total = sum(c.tool for c in counts if c.tool is not None)
    gc = sum(c.graphcost_flops for c in counts if c.graphcost_flops is not None)
    return ConventionResult(conv.name, conv.unit, total, gc, tuple(counts), sum(c.tool is None for c in counts))
