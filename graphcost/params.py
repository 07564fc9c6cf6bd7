"""Parameters, split: what the file stores against what a framework calls its parameters.

``ModelInfo.parameter_count`` stays what the file stores. This pass says what those elements are, because
every "number of parameters" a paper or a tool prints is one of these sums:

* **learnable** — floating-point weights a training step would update (``torch``'s ``parameters()``,
  torchvision's ``num_params`` when BatchNorm is kept in the export);
* **buffers** — stored constants that are not trained: BatchNormalization's running mean and variance (inputs 3
  and 4), quantization scales and zero points, every non-float parameter (int64 index tables, bool/uint8
  causal masks such as GPT-2's ``attn.bias``) and every one-element constant (an export's ``sqrt(d)`` scale or
  epsilon; a scalar ``nn.Parameter`` would be miscounted here, a rare case);
* **exporter-made zero biases** are buffers too: the dynamo exporter gives a bias-free ``Conv`` an all-zero bias
  named ``val_<n>`` (its name for values it creates; parameters keep their state-dict names), which no framework
  counts (kind ``exporter_zero_bias``);
* **constant tables**: a stored float tensor fed as the *data* operand of a MatMul/Gemm whose weight is stored too
  (Swin V2's ``relative_coords_table`` into its ``cpb_mlp``): a registered buffer the model computes from, not a
  weight (kind ``constant_table``);
* **generated constants**: a ``ConstantOfShape`` of a constant shape (a parameter for the graph, which has its value
  at load) holds one repeated value, so no training step updates it: the zeros a forward pass makes with
  ``new_zeros`` (Swin's shifted-window mask, ``pad_H × pad_W`` per shifted block in a dynamo export) or an RNN's
  zero initial state (kind ``generated_constant``);
* **duplicates** — a tensor stored twice with the same bytes (the second copy's elements; a tied weight the
  exporter wrote again). A copy stored *transposed* (the legacy exporter's GPT-2 LM head) has other bytes and is
  not found here;
* **shared** — one stored tensor read by more than one node (tied weights the exporter kept tied): stored once,
  counted once, reported so the reader knows;
* **merged** — a tensor the model holds several times but the file stores once, read through ``Identity``
  copies: the legacy exporter's initializer deduplication (in eval mode it merges initializers with equal
  values, so every BatchNorm's all-ones gamma and running variance become one tensor). Each copy is counted in
  the role its readers give it (gamma: learnable, running variance: buffer), so ``learnable + buffers ==
  stored + merged``; the merged elements are the copies beyond the one stored tensor;
* **logical** — a block-quantized weight as the model computes with it (``MatMulNBits``: K·N, see
  ``graphcost.api._logical_parameter_count``), with its packed bytes.

Quantized weights (int8/uint8 read by ``DequantizeLinear`` or a quantized product, possibly through ``Cast``)
are learnable in their logical elements (one per stored integer); their scales and zero points are buffers.

Counts are elements; bytes are the stored bytes (``int4``/``uint4`` packed two per byte). Symbolic-shaped
parameters (rare) are left out of every sum, as ``parameter_count`` leaves them out.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import onnx

from graphcost._dims import numel
from graphcost.graph import Graph, Tensor, TensorKind
from graphcost.passes.costs import tensor_bytes

__all__ = ["ParameterSplit", "split_parameters"]

FLOAT_DTYPES = frozenset({"float32", "float16", "bfloat16", "float64", "float8_e4m3fn", "float8_e4m3fnuz",
                          "float8_e5m2", "float8_e5m2fnuz", "float4_e2m1"})

_BUFFER_SLOTS: dict[tuple[str, str], tuple[int, ...]] = {
    # (domain, op): input slots that hold stored statistics or quantization metadata, never trained
    ("ai.onnx", "BatchNormalization"): (3, 4),  # running mean, running variance
    ("ai.onnx", "LSTM"): (4, 5, 6),  # sequence_lens, initial_h, initial_c: an exporter's zero states
    ("ai.onnx", "GRU"): (4, 5),  # sequence_lens, initial_h
    ("ai.onnx", "RNN"): (4, 5),
    ("ai.onnx", "QuantizeLinear"): (1, 2),  # scale, zero point
    ("ai.onnx", "DequantizeLinear"): (1, 2),
    ("ai.onnx", "QLinearConv"): (1, 2, 4, 5, 6, 7),  # x/w/y scales and zero points
    ("ai.onnx", "QLinearMatMul"): (1, 2, 4, 5, 6, 7),
    ("ai.onnx", "MatMulInteger"): (2, 3),  # zero points
    ("ai.onnx", "ConvInteger"): (2, 3),
    ("com.microsoft", "MatMulNBits"): (2, 3, 4),  # scales, zero points, g_idx
    ("com.microsoft", "MatMulBnb4"): (2,),  # absmax
    ("com.microsoft", "GatherBlockQuantized"): (2, 3),  # scales, zero points
}


_EXPORTER_VALUE = re.compile(r"^val_\d+$")  # the dynamo exporter's name for a value it made (not a parameter)
_BIAS_SLOT = {("ai.onnx", "Conv"): 2, ("ai.onnx", "ConvTranspose"): 2, ("ai.onnx", "Gemm"): 2}


def _exporter_zero_biases(graph: Graph) -> set[str]:
    """Parameters named ``val_<n>``, all zeros, read only as the bias of a Conv/ConvTranspose/Gemm."""
    out: set[str] = set()
    for g in graph.walk():
        for t in g.tensors().values():
            if t.kind != TensorKind.PARAMETER or not _EXPORTER_VALUE.match(t.name):
                continue
            readers = g.consumers(t.name)
            if not readers or not all(_BIAS_SLOT.get((n.domain, n.op_type)) == 2 and len(n.inputs) > 2
                                      and n.inputs[2] == t.name and t.name not in n.inputs[:2] for n in readers):
                continue
            value = g.constant_value(t.name)  # stripped payloads are read back from the file
            if value is not None and value.size and not value.any():
                out.add(t.name)
    return out


_TABLE_PRODUCTS = frozenset({("ai.onnx", "MatMul"), ("ai.onnx", "Gemm")})


def _stored(g: Graph, tensors: Mapping[str, Tensor], name: str) -> bool:
    """``name`` is a stored parameter of ``g`` (``tensors``: its ``g.tensors()``, taken once per graph; per call
    that copy made the split quadratic, 78 of 118 s on synthetic-100k), or a view or copy of one (Identity,
    Transpose, Reshape...)."""
    for _ in range(_MAX_VIEW_CHAIN):
        t = tensors.get(name)
        if t is not None and t.kind == TensorKind.PARAMETER:
            return True
        producer = g.producer(name)
        if producer is None or producer.op_type not in _VIEWS or not producer.inputs:
            return False
        name = producer.inputs[0]
    return False


_VIEWS = frozenset({"Expand", "Unsqueeze", "Reshape", "Squeeze", "Cast", "Tile", "Identity", "Transpose"})
_MAX_VIEW_CHAIN = 8
_ROLE_OPS = frozenset({"ConstantOfShape", "Identity", *(op for _, op in _BUFFER_SLOTS),
                       *(op for _, op in _TABLE_PRODUCTS)})
"""Op types whose nodes can give a tensor a role (a copy, a buffer, a table); any other node only reads."""


@dataclass(frozen=True)
class ParameterSplit:
    """The stored parameters by role; ``learnable + buffers == stored + merged`` (counts and bytes)."""

    stored_count: int
    stored_bytes: int
    learnable_count: int
    learnable_bytes: int
    buffer_count: int
    buffer_bytes: int
    duplicate_count: int
    duplicate_bytes: int
    shared_count: int
    shared_bytes: int
    logical_count: int
    quantized_packed_bytes: int
    buffers_by_kind: dict[str, int] = field(default_factory=dict)
    """Buffer elements per reason (``batchnorm_stats``, ``quantization``, ``non_float``)."""
    merged_count: int = 0
    """Elements read through ``Identity`` copies of a stored tensor (the legacy exporter's deduplication), beyond
    the stored tensor itself; each copy is also in ``learnable`` or ``buffers``."""
    merged_bytes: int = 0
    learnable_names: frozenset[str] = field(default=frozenset(), repr=False)
    """Names of the learnable tensors (for the conventions: is this input a stored weight)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "stored": {"count": self.stored_count, "bytes": self.stored_bytes},
            "learnable": {"count": self.learnable_count, "bytes": self.learnable_bytes},
            "buffers": {"count": self.buffer_count, "bytes": self.buffer_bytes,
                        "by_kind": dict(sorted(self.buffers_by_kind.items()))},
            "duplicates": {"count": self.duplicate_count, "bytes": self.duplicate_bytes},
            "shared": {"count": self.shared_count, "bytes": self.shared_bytes},
            "merged": {"count": self.merged_count, "bytes": self.merged_bytes},
            "logical": {"count": self.logical_count, "packed_bytes": self.quantized_packed_bytes},
        }


def _count(t: Tensor) -> tuple[int, int] | None:
    if t.shape is None:
        return None
    n, b = numel(t.shape), tensor_bytes(t)
    if not isinstance(n, int) or not isinstance(b, int):
        return None
    return n, b


class _Digests:
    """A digest of each stored tensor's dtype, shape and bytes (initializers and Constant values), by name:
    equal digests, equal tensors. ``None`` for a tensor whose bytes are not loaded (external), which is
    therefore never called a duplicate.

    Only the nodes that can hold a stored tensor are read from the proto: Constants and holders of subgraphs,
    found from ``graph``'s node records when its node list is the proto's (the shapes pass keeps the nodes;
    reading every node's attributes from the proto was a third of the split on synthetic-100k). A digest is
    taken when first asked for (the split asks only about parameters of more than one element)."""

    def __init__(self, proto: onnx.ModelProto, graph: Graph) -> None:
        self._tensors: dict[str, onnx.TensorProto] = {}
        self._done: dict[str, tuple[int, tuple[int, ...], bytes] | None] = {}
        nodes = proto.graph.node
        if len(nodes) != len(graph):  # not the graph of this proto: read every node
            self._walk(proto.graph)
            return
        chosen = [(node.index, node.op_type) for node in graph.nodes()
                  if node.op_type == "Constant" or graph.children(node.name)]
        if any(nodes[i].op_type != op for i, op in chosen):
            self._walk(proto.graph)
            return
        for t in proto.graph.initializer:
            self._tensors[t.name] = t
        for i, _ in chosen:
            self._node(nodes[i])

    def _walk(self, g: onnx.GraphProto) -> None:
        for t in g.initializer:
            self._tensors[t.name] = t
        for node in g.node:
            if node.attribute:
                self._node(node)

    def _node(self, node: onnx.NodeProto) -> None:
        constant = node.op_type == "Constant" and node.output
        for a in node.attribute:
            if constant and a.name == "value":
                self._tensors[node.output[0]] = a.t
            if a.type == onnx.AttributeProto.GRAPH:
                self._walk(a.g)
            for sub in a.graphs:
                self._walk(sub)

    def get(self, name: str) -> tuple[int, tuple[int, ...], bytes] | None:
        if name in self._done:
            return self._done[name]
        t = self._tensors.get(name)
        out = None if t is None or t.data_location == onnx.TensorProto.EXTERNAL else \
            (t.data_type, tuple(t.dims), hashlib.sha256(t.raw_data or _without_name(t)).digest())
        self._done[name] = out
        return out


def _without_name(t: onnx.TensorProto) -> bytes:
    """The tensor's wire bytes with its name cleared: its payload when it is not held as ``raw_data``."""
    copy = onnx.TensorProto()
    copy.CopyFrom(t)
    copy.name = ""
    return copy.SerializeToString()


def _copies(graph: Graph) -> dict[str, str]:
    """``Identity`` outputs of stored parameters, to the parameter they copy: how the legacy exporter writes a
    tensor it deduplicated (one initializer, an ``Identity`` per further use)."""
    out: dict[str, str] = {}
    for g in graph.walk():
        tensors = g.tensors()  # a copy per call: taken once per graph, not once per node
        for node in g.nodes():
            if node.op_type != "Identity" or not node.inputs or not node.outputs:
                continue
            t = tensors.get(node.inputs[0])
            if t is not None and t.kind == TensorKind.PARAMETER:
                out[node.outputs[0]] = t.name
    return out


def split_parameters(graph: Graph, proto: onnx.ModelProto, logical_count: int) -> ParameterSplit:
    """Split the parameters of ``graph`` (and its subgraphs) by role; ``logical_count`` is the model's
    ``logical_parameter_count`` (computed by the API, where the block-quantized rules live)."""
    copies = _copies(graph)
    buffer_reason: dict[str, str] = dict.fromkeys(_exporter_zero_biases(graph), "exporter_zero_bias")
    reads: list[tuple[str, ...]] = []  # the inputs of each node other than an Identity copy
    for g in graph.walk():
        tensors = g.tensors()
        for node in g.nodes():
            if node.op_type not in _ROLE_OPS:  # most nodes give no role: only their reads are counted
                reads.append(node.inputs)
                continue
            op = (node.domain, node.op_type)
            if op == ("ai.onnx", "ConstantOfShape") and node.outputs \
                    and node.outputs[0] in tensors and tensors[node.outputs[0]].kind == TensorKind.PARAMETER:
                buffer_reason.setdefault(node.outputs[0], "generated_constant")  # one repeated value: nothing to learn
            if not (node.op_type == "Identity" and node.outputs and node.outputs[0] in copies):
                reads.append(node.inputs)
            slots = _BUFFER_SLOTS.get(op, ())
            if op in _TABLE_PRODUCTS and len(node.inputs) > 1 \
                    and _stored(g, tensors, node.inputs[0]) and _stored(g, tensors, node.inputs[1]):
                slots = (0,)  # a stored tensor as the data operand of a product by a stored weight: a table
            for i in slots:
                if i < len(node.inputs) and node.inputs[i]:
                    kind = {"BatchNormalization": "batchnorm_stats", "LSTM": "initial_state", "GRU": "initial_state",
                            "RNN": "initial_state", "MatMul": "constant_table",
                            "Gemm": "constant_table"}.get(node.op_type, "quantization")
                    name = node.inputs[i]
                    for _ in range(_MAX_VIEW_CHAIN):  # through the views an exporter puts in front (Expand(zeros))
                        buffer_reason.setdefault(name, kind)
                        producer = g.producer(name)
                        if name in copies or producer is None or producer.op_type not in _VIEWS or not producer.inputs:
                            break  # a deduplicated copy has its own role; the stored tensor keeps its direct one
                        name = producer.inputs[0]
    # readers of a tensor other than its Identity copies, each node once (counted in C rather than by a dict
    # update per input)
    direct = Counter(chain.from_iterable(map(set, reads)))
    direct.pop("", None)  # an omitted optional input
    copies_of: dict[str, list[str]] = {}
    for copy_name, source in copies.items():
        copies_of.setdefault(source, []).append(copy_name)
    digests = _Digests(proto, graph)
    seen_digest: set[tuple[int, tuple[int, ...], bytes]] = set()
    stored = [0, 0]
    learnable = [0, 0]
    buffers = [0, 0]
    dup = [0, 0]
    shared = [0, 0]
    merged = [0, 0]
    packed = 0
    by_kind: dict[str, int] = {}
    names: set[str] = set()
    packed_names = _packed_weights(graph)

    def reason_of(name: str, t: Tensor, n: int) -> str | None:
        reason = buffer_reason.get(name) or (None if t.dtype in FLOAT_DTYPES else "non_float")
        if reason is None and n == 1:
            reason = "scalar_constant"  # an export's scale or epsilon (sqrt(d), 1e-5), not a weight
        if reason == "non_float" and name in packed_names:
            reason = None  # a quantized weight: learnable, one logical element per stored integer
        return reason

    for g in graph.walk():
        for t in g.tensors().values():
            if t.kind != TensorKind.PARAMETER:
                continue
            nb = _count(t)
            if nb is None:
                continue
            n, b = nb
            stored[0] += n
            stored[1] += b
            roles = [c for c in copies_of.get(t.name, ())]
            if direct.get(t.name, 0) or not roles:
                roles.insert(0, t.name)
            merged[0] += n * (len(roles) - 1)
            merged[1] += b * (len(roles) - 1)
            for role in roles:
                reason = reason_of(role, t, n)
                if reason is None and t.dtype not in FLOAT_DTYPES:
                    packed += b
                if reason is None:
                    learnable[0] += n
                    learnable[1] += b
                    names.add(role)
                else:
                    buffers[0] += n
                    buffers[1] += b
                    by_kind[reason] = by_kind.get(reason, 0) + n
            d = digests.get(t.name) if n > 1 else None
            if d is not None:
                if d in seen_digest:
                    dup[0] += n
                    dup[1] += b
                seen_digest.add(d)
            if direct.get(t.name, 0) > 1:
                shared[0] += n
                shared[1] += b
    return ParameterSplit(stored[0], stored[1], learnable[0], learnable[1], buffers[0], buffers[1], dup[0], dup[1],
                          shared[0], shared[1], logical_count, packed, by_kind, merged[0], merged[1],
                          frozenset(names))


_PACKED_WEIGHT_SLOT = {("com.microsoft", "MatMulNBits"): 1, ("com.microsoft", "MatMulBnb4"): 1,
                       ("com.microsoft", "GatherBlockQuantized"): 0, ("ai.onnx", "QLinearConv"): 3,
                       ("ai.onnx", "QLinearMatMul"): 3, ("ai.onnx", "MatMulInteger"): 1,
                       ("ai.onnx", "ConvInteger"): 1, ("ai.onnx", "DequantizeLinear"): 0}


def _packed_weights(graph: Graph) -> frozenset[str]:
    """Names that are the weight operand of a quantized product or ``DequantizeLinear`` (stored in an integer
    type), directly or through the views an exporter puts in front (the legacy exporter's ``Cast``): walked back
    from each such operand, once for the whole graph (asked per initializer, the walk was quadratic: 86 of 94 s
    on synthetic-10k)."""
    out: set[str] = set()
    for g in graph.walk():
        for node in g.nodes():
            slot = _PACKED_WEIGHT_SLOT.get((node.domain, node.op_type))
            if slot is None or slot >= len(node.inputs) or not node.inputs[slot]:
                continue
            name = node.inputs[slot]
            for _ in range(_MAX_VIEW_CHAIN):
                out.add(name)
                producer = g.producer(name)
                if producer is None or producer.op_type not in _PACKED_VIEWS or not producer.inputs:
                    break
                name = producer.inputs[0]
    return frozenset(out)


_PACKED_VIEWS = frozenset({"Cast", "Identity", "Reshape", "Transpose"})
