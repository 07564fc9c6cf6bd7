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
``calc_func.py``, ``rnn_hooks.py`` — and onnx-tool 1.0.1 ``onnx_tool/node.py`` (``*Node.profile``) and onnxsim 0.8.1
``onnxsim/model_info.py`` (``_MAC_COUNTERS``), installed in ``bench/.venv-peers`` (``bench/peers_env.sh``), not
in the project venv.

What no table over an ONNX file can know is noted where it matters: module-hook counters (ptflops, thop) see
``nn.ReLU`` but not ``F.relu`` or ``x + y``, and ptflops counts ``nn.ReLU``/``nn.MaxPool2d``/
``nn.AdaptiveAvgPool2d``/``nn.GELU`` **twice** (its module hook, and again the patched ``F.relu``,
``F.max_pool2d``... that the module's forward calls). The legacy exporter's node names carry the module scopes
(``/layer1/layer1.0/relu/Relu``): a node alone in a leaf scope came from a module, a node in a scope with child
scopes from a functional call, and the rules use that (``Facts.module_call``). Without scopes (the dynamo
exporter, hand-written graphs) the rule assumes one and ``notes`` says the tool's number depends on how the
torch code was written. An export that folded BatchNorm into the Conv has no BN left for fvcore's 2 per element
(export with BatchNorm kept to compare); ``F.scaled_dot_product_attention`` is a MatMul pair in ONNX but
unsupported (0) in fvcore.
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
    module_call: bool | None = None
    """The node came from a leaf module's forward (True), a functional call (False), or the file's node names
    carry no module scopes to tell (None). See ``_module_calls``."""
    linear_bias: bool = False
    """An ``Add`` of a stored bias to a ``MatMul`` by a stored weight: an ``nn.Linear`` on a 3-D input."""
    gelu: bool = False
    """An ``Erf`` inside the exact-GELU decomposition ``x·(1 + erf(x/√2))/2`` (opsets before ``Gelu``)."""

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


@dataclass(frozen=True)
class _Context:
    """What a rule may ask about a node's neighbours: computed once per report."""

    learnable: frozenset[str]
    module_call: Mapping[str, bool]
    producers: Mapping[str, NodeReport]


def _facts(node: NodeReport, binding: Mapping[str, int], ctx: _Context) -> Facts:
    ins = tuple(_shape(t, binding) for t in node.inputs)
    out = _shape(node.outputs[0], binding) if node.outputs else None
    bias = family(node) in ("conv", "conv_transpose", "gemm") and len(node.inputs) > 2 and bool(node.inputs[2].name)
    weight = len(node.inputs) > 1 and node.inputs[1].name in ctx.learnable
    linear_bias = False
    if node.op_type == "Add" and len(node.inputs) == 2:
        for a, b in ((0, 1), (1, 0)):
            src = ctx.producers.get(node.inputs[a].name)
            if (node.inputs[b].name in ctx.learnable and src is not None and src.op_type == "MatMul"
                    and len(src.inputs) > 1 and src.inputs[1].name in ctx.learnable):
                linear_bias = True
    gelu = False
    if node.op_type == "Erf" and node.inputs:
        src = ctx.producers.get(node.inputs[0].name)
        gelu = src is not None and src.op_type in ("Div", "Mul")  # erf(x / √2) or erf(x · (1/√2))
    return Facts(node, node.macs or 0, node.flops or 0, _elems(out), _elems(ins[0]) if ins else None, ins, out,
                 bias, weight, ctx.module_call.get(node.name), linear_bias, gelu)


_GELU_PARTS = frozenset({"Div", "Erf", "Add", "Mul", "Constant"})


def _module_calls(nodes: list[NodeReport]) -> dict[str, bool]:
    """Which nodes a leaf module produced, from the legacy exporter's scoped node names.

    ``/layer1/layer1.0/relu/Relu`` is alone in scope ``/layer1/layer1.0/relu``, which has no child scope: an
    ``nn.ReLU``. ``/layer1/layer1.0/Relu`` sits in a scope with child scopes (``conv1``, ``bn1``...): ``F.relu``
    in the block's forward. A leaf scope counts as a module call when every node in it is of the node's op
    family (an ``nn.GELU`` at opset < 20: its Div/Erf/Add/Mul decomposition). Nodes without a scoped name are
    left out: the file cannot tell.
    """
    scoped = [n for n in nodes if n.name.startswith("/")]
    if not scoped:
        return {}
    members: dict[str, list[NodeReport]] = {}
    parents: set[str] = set()
    for n in scoped:
        scope = n.name.rsplit("/", 1)[0]
        members.setdefault(scope, []).append(n)
        parts = scope.split("/")
        parents.update("/".join(parts[:i]) for i in range(1, len(parts)))
    out: dict[str, bool] = {}
    for scope, ns in members.items():
        leaf = bool(scope) and scope not in parents
        for n in ns:
            if not leaf:
                out[n.name] = False
                continue
            allowed = _GELU_PARTS if n.op_type in ("Erf", "Gelu") else {n.op_type, "Constant"}
            same = all(m.op_type in allowed or family(m) == family(n) for m in ns)
            out[n.name] = same and (family(n) != "other" or n.op_type == "Erf")
    return out


# --------------------------------------------------------------------------------------------------------------
# Rules
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """What a tool counts for one op family: ``count(facts)`` in the tool's unit, the rule in words, its source."""

    text: str
    count: Callable[[Facts], Number]
    source: str
    by_call: bool = False
    """The count depends on a module against a functional call (``Facts.module_call``)."""


@dataclass(frozen=True)
class Convention:
    name: str
    unit: str
    """What the tool's number is: ``FLOP`` (a MAC is 2) or ``MAC`` (a multiply-add is 1, whatever it is called)."""
    rules: Mapping[str, Rule]
    not_counted: str
    """Why a family without a rule counts 0 in this tool."""
    summary: str
    unscoped_as: str = "a functional call"
    """How a node without a module scope is counted by the ``by_call`` rules."""
    per_sample: bool = False
    """The tool divides its total by the batch (ptflops' ``__batch_counter__``: ``len()`` of the first input, so
    its leading dim whatever it means) and truncates to an int."""


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


_PT_POOL = ("nn.MaxPool2d/AvgPool2d/AdaptiveAvgPool2d: 2 per input element (pool_flops_counter_hook, then the "
            "patched F.max_pool2d... its forward calls); a functional call: 1")


def _twice_if_module(f: Facts, per: Number) -> Number:
    """ptflops: a module's hook and the patched functional its forward calls both count; a bare functional once."""
    return 2 * per if f.module_call else per


def _ptflops_relu(f: Facts) -> Number:
    op = f.node.op_type
    if op in ("Relu", "PRelu", "Elu"):  # F.relu / F.prelu / F.elu are patched
        return _twice_if_module(f, f.need(f.out_elems))
    if op in ("Clip", "LeakyRelu"):  # nn.ReLU6 / nn.LeakyReLU hooks; F.hardtanh, F.leaky_relu unpatched
        return f.need(f.out_elems) if f.module_call is not False or op == "Clip" else 0
    return 0  # SELU, CELU, ThresholdedReLU: neither hooked nor patched


def _ptflops_gelu(f: Facts) -> Number:
    return _twice_if_module(f, f.need(f.out_elems))


def _ptflops_pool(f: Facts) -> Number:
    return _twice_if_module(f, f.need(f.in_elems))


def _onnx_tool_pool(f: Facts) -> Number:
    """onnx-tool ``PoolBase.profile``: output volume × the kernel window, graphcost's MaxPool FLOPs (an average
    pool's FLOPs less its one divide per output). onnx-tool multiplies only kernel[0]·kernel[1], so a 3-D pool
    window's third dim is not in its number, nor here: a 3-D pool is counted as graphcost counts it."""
    if f.node.op_type == "AveragePool":
        return f.flops - f.need(f.out_elems)
    return f.flops


def _onnx_tool_rnn(f: Facts) -> Number:
    """onnx-tool ``LSTMNode.profile`` / ``GRUNode.profile`` (per step and batch row: W and R elements, the bias
    elements; then per ``batch·seq·hidden`` — one direction's outputs, not multiplied by the directions — LSTM:
    4 adds, 3 sigmoids at EXP 32, 2 tanh at 38 and 4 blend ops; GRU: 3 adds, 2 sigmoids, 1 tanh, 5 blend)."""
    per_out = {"LSTM": 4 + 3 * 32 + 2 * 38 + 4, "GRU": 3 + 2 * 32 + 38 + 5}.get(f.node.op_type)
    if per_out is None:
        return 0
    x, w, r = (f.in_shapes[i] if len(f.in_shapes) > i else None for i in range(3))
    if x is None or w is None or r is None:
        raise _NoShape(f.node.name)
    seq, batch, hidden = x[0], x[1], w[1] // (4 if f.node.op_type == "LSTM" else 3)
    b = f.in_shapes[3] if len(f.in_shapes) > 3 and f.node.inputs[3].name else None
    steps = batch * seq
    out = steps * hidden  # ht_size
    return ((math.prod(w) + math.prod(r)) * steps  # the gate products
            + (math.prod(b) * steps if b is not None else 0)  # the biases
            + out * per_out)  # gate adds, sigmoids, tanh, blend


def _onnx_tool_layernorm(f: Facts) -> Number:
    """onnx-tool ``LayerNormalizationNode.profile``: 7 per element and 29 per row, a row being the last axis
    (the exporters' ``axis = -1``; onnx-tool sets only that one axis to 1)."""
    x = f.in_shapes[0] if f.in_shapes else None
    if x is None or not x:
        raise _NoShape(f.node.name)
    return math.prod(x) * 7 + math.prod(x[:-1]) * 29


TORCH_SRC = "torch 2.13 torch/utils/flop_counter.py (mm_flop, addmm_flop, conv_flop, sdpa_flop_count)"
FV = "fvcore 0.1.5 fvcore/nn/flop_count.py _DEFAULT_SUPPORTED_OPS, jit_handles.py"
PT = "ptflops 0.7.5 ptflops/pytorch_ops.py MODULES_MAPPING"
TH = "thop 0.1.1 thop/profile.py register_hooks, thop/vision/basic_hooks.py, calc_func.py"
OT = "onnx-tool 1.0.1 onnx_tool/node.py *Node.profile"
OS = "onnxsim 0.8.1 onnxsim/model_info.py _MAC_COUNTERS"
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
     "maxpool": Rule(_PT_POOL, _ptflops_pool, PT, by_call=True),
     "avgpool": Rule(_PT_POOL, _ptflops_pool, PT, by_call=True),
     "global_avgpool": Rule(_PT_POOL, _ptflops_pool, PT, by_call=True),
     "relu": Rule("nn.ReLU/PReLU/ELU: 2 per output element (relu_flops_counter_hook, then the patched F.relu its "
                  "forward calls); F.relu: 1; nn.ReLU6/LeakyReLU: 1 (F.hardtanh/F.leaky_relu are not patched)",
                  _ptflops_relu, PT, by_call=True),
     "gelu": Rule("nn.GELU: 2 per output element (relu hook + patched F.gelu); F.gelu: 1", _ptflops_gelu, PT,
                  by_call=True),
     "transcendental": Rule("Erf of a GELU decomposition: as GELU (nn.GELU 2, F.gelu 1 per element); the rest "
                            "(torch.exp, tanh...) are not patched: 0",
                            lambda f: _ptflops_gelu(f) if f.gelu else 0, PT, by_call=True),
     "add_mul": Rule("the bias Add of an nn.Linear exported as MatMul + Add: 1 per output element; `x + y` and "
                     "`x * y` (Tensor.__add__/__mul__) are not patched: 0",
                     lambda f: f.need(f.out_elems) if f.linear_bias else 0, PT),
     "softmax": Rule("a functional call counts 0 (Tensor.softmax is not patched; F.softmax would count 1 per "
                     "element); inside a leaf module (nn.Softmax → F.softmax): 1 per input element",
                     lambda f: f.need(f.in_elems) if f.module_call else 0, PT, by_call=True),
     "resize": _per_out(1, "1 per output element (upsample_flops_counter_hook)", PT),
     "control": _macs(1, "1 per MAC of the products in its body", PT)},
    "ptflops counts modules and patched functionals; `x + y`, `x * y`, tanh, exp... are not seen",
    "module hooks + patched functionals: products + bias, BN 2, LN 1, pools and activations 1 or 2 per element; "
    "the total is per sample (÷ the first input's leading dim)", per_sample=True)
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
     "avgpool": Rule("nn.AvgPool2d: 1 per output element (count_avgpool); F.avg_pool2d is not seen: 0",
                     lambda f: 0 if f.module_call is False else f.need(f.out_elems), TH, by_call=True),
     "global_avgpool": Rule("nn.AdaptiveAvgPool2d: window + 1 per output element (count_adap_avgpool); "
                            "F.adaptive_avg_pool2d is not seen: 0",
                            lambda f: 0 if f.module_call is False else f.need(f.in_elems) + f.need(f.out_elems),
                            TH, by_call=True),
     "softmax": _zero("not counted: F.softmax is a functional (an nn.Softmax module would count 3n − 1 per "
                      "row, count_softmax)", TH),
     "resize": Rule("nearest 1, linear 5, bilinear 11 per output element (count_upsample)",
                    lambda f: f.need(f.out_elems) * (1 if _resize_mode(f) == "nearest" else 11), TH)},
    "thop counts registered modules only: ReLU and max pooling are zero_ops, functionals and elementwise "
    "ops are not seen", "module hooks: products (no bias), BN/LN 4, softmax, average pools", unscoped_as="a module")
ONNX_TOOL = Convention(
    "onnx-tool", "MAC",
    {**_products(1, "1 per MAC", OT, ("conv_transpose", "matmul", "einsum", "attention")),
     "rnn": Rule("W and R elements + bias elements per step and row, + per hidden output LSTM 180 (4 gate adds, "
                 "3 sigmoids at EXP 32, 2 tanh at 38, 4 blend), GRU 110 (3, 2 sigmoids, 1 tanh, 5); RNN: no "
                 "profile, 0", _onnx_tool_rnn, OT),
     "conv": Rule("1 per MAC + 1 per output element with a bias (ConvNode.profile)",
                  lambda f: f.macs + _bias_per_out(f), OT),
     "gemm": Rule("1 per MAC + 1 per output element with a bias", lambda f: f.macs + _bias_per_out(f), OT),
     "batchnorm": _per_in(31, "31 per element (x86 instruction weights: sub, div 4, sqrt 24...)", OT),
     "softmax": _per_in(36, "36 per element (exp 32 + add + div)", OT),
     "relu": Rule("Relu 1, Clip 2, LeakyRelu/PRelu 2 per output element (CMP, MUL weights); others 0",
                  lambda f: f.need(f.out_elems) * {"Relu": 1, "Clip": 2, "LeakyRelu": 2,
                                                   "PRelu": 2}.get(f.node.op_type, 0), OT),
     "add_mul": Rule("1 per output element (ADD/MUL/CMP weight 1; Sum: inputs − 1); Where and Mean: no profile, 0",
                     lambda f: 0 if f.node.op_type in ("Where", "Mean") else f.need(f.out_elems) * (
                         len(f.node.inputs) - 1 if f.node.op_type == "Sum" else 1), OT),
     "div": _per_out(4, "4 per output element (DIV weight)", OT),
     "maxpool": Rule("output elements × kernel window (PoolBase.profile)", _onnx_tool_pool, OT),
     "avgpool": Rule("output elements × kernel window, no divide (PoolBase.profile)", _onnx_tool_pool, OT),
     "global_avgpool": Rule("1 per input element + 4 per output element (ADD, DIV weights)",
                            lambda f: f.need(f.in_elems) + 4 * f.need(f.out_elems), OT),
     "layernorm": Rule("LayerNormalization: 7 per element (3 MUL + 4 ADD) + 29 per row (ADD + SQRT 24 + DIV 4)",
                       _onnx_tool_layernorm, OT),
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
    per_sample: Number = 1
    """What the tool divided its node sum by (ptflops: the first input's leading dim); 1 for the others."""
    notes: tuple[str, ...] = ()
    """What the tool's number depends on that the file cannot show (module against functional calls)."""

    def rows(self) -> list[ConventionRow]:
        """Per (domain, op type): graphcost's FLOPs and the tool's count; they sum to both totals. A tool that
        reports per sample gets one more row, ``(per sample)``, holding the difference the division makes."""
        groups: dict[tuple[str, str], list[NodeCount]] = {}
        for n in self.nodes:
            groups.setdefault((n.domain, n.op_type), []).append(n)
        out = []
        for (domain, op), ns in groups.items():
            rules = tuple(dict.fromkeys(n.rule for n in ns))
            out.append(ConventionRow(op, domain, len(ns), sum(n.graphcost_flops or 0 for n in ns),
                                     sum(n.tool or 0 for n in ns), sum(n.tool is None for n in ns), rules))
        out.sort(key=lambda r: (-abs(r.graphcost_flops - r.tool), r.op_type))
        if self.per_sample != 1:
            node_sum = sum(n.tool or 0 for n in self.nodes)
            out.append(ConventionRow("(per sample)", "", 0, 0, self.total - node_sum, 0,
                                     (f"the tool divides its sum {node_sum:,} by {self.per_sample:,} (the first "
                                      "input's leading dim, its batch counter) and truncates to an int",)))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"convention": self.convention, "unit": self.unit, "total": self.total,
                "graphcost_flops": self.graphcost_flops, "unknown_nodes": self.unknown_nodes,
                "per_sample": self.per_sample, "notes": list(self.notes),
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
    top = [n for n in report.nodes if n.depth == 0]
    ctx = _Context(_weights(report), _module_calls(top), {t.name: n for n in top for t in n.outputs})
    counts: list[NodeCount] = []
    unscoped: set[str] = set()
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
            facts = _facts(n, report.binding, ctx)
            value = rule.count(facts)
        except _NoShape:
            counts.append(NodeCount(n.name, n.op_type, n.domain, fam, n.flops, None, "shape unknown"))
            continue
        if facts.module_call is None and rule.by_call and (value or conv.unscoped_as == "a functional call"):
            unscoped.add(n.op_type)
        counts.append(NodeCount(n.name, n.op_type, n.domain, fam, n.flops, value, rule.text))
    total: Number = sum(c.tool for c in counts if c.tool is not None)
    gc = sum(c.graphcost_flops for c in counts if c.graphcost_flops is not None)
    divisor: Number = 1
    if conv.per_sample:
        divisor = _leading_dim(report) or 1
        total = int(total / divisor) if divisor != 1 else total
    notes: tuple[str, ...] = ()
    if unscoped:
        notes = (f"{conv.name}'s count for {', '.join(sorted(unscoped))} depends on whether the torch code called "
                 "a module (nn.ReLU...) or a functional (F.relu...), which this file's node names do not show "
                 f"(no module scopes); counted as {conv.unscoped_as}",)
    return ConventionResult(conv.name, conv.unit, total, gc, tuple(counts), sum(c.tool is None for c in counts),
                            divisor, notes)


def _leading_dim(report: Report) -> Number | None:
    """The first graph input's leading dim under the report's binding (ptflops' batch counter)."""
    if not report.model.inputs:
        return None
    shape = _shape(report.model.inputs[0], report.binding)
    return shape[0] if shape else None
