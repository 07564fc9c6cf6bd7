"""Attention and its relatives: Attention (opset 23+), FlexAttention, RotaryEmbedding,
LinearAttention, SwiGLU.

``macs`` counts the dot products (Q·Kᵀ and P·V); scaling, masking and softmax are FLOPs per score.
Every (query, key) pair is costed, causal masking included: an upper bound a causal kernel halves.

KV cache. An attention op given ``past_key``/``past_value`` reads the cache once and, ideally, appends the
new tokens' K and V in place: its bytes written are the output and the appended slices
(``present − past`` per cache; with a shared past/present buffer, S of its L rows), not the whole
``present`` copy the op's contract writes. That copy is what the graph as written moves, kept beside the
ideal as the node's ``bytes_as_written`` (:func:`kv_append`, shared with the com.microsoft attention ops).
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx

from graphcost._dims import Dim, as_expr, expands_within, numel, prod
from graphcost._sym import sympy
from graphcost.graph import Graph
from graphcost.ops._registry import (
    FLOPS_PER_MAC,
    ZERO,
    Kind,
    NodeView,
    ShapeUnknown,
    Unknown,
    Work,
    lookup,
    rule,
)
from graphcost.ops.reduce import SOFTMAX_FLOPS_PER_ELEMENT

PREVIEW = "ai.onnx.preview"


def _div(a: Dim, b: Dim) -> Dim:
    """Exact quotient of dims known to divide (hidden / heads)."""
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    quotient = as_expr(a) / as_expr(b)
    if not expands_within(quotient, _SIMPLIFY_TERMS):
        return quotient  # exact as it stands; simplify's time grows without bound on large expressions
    return sympy.simplify(quotient)


_SIMPLIFY_TERMS = 64
"""Quotients whose expansion could exceed this many terms are left unsimplified."""


# --- attention -------------------------------------------------------------------------------------


def kv_append(n: NodeView, caches: Sequence[tuple[int, int]], seq_axis: int, new_len: Dim) -> Work:
    """Bytes written by an attention op that appends to its KV cache in place (module docstring).

    ``caches`` pairs (past input slot, present output slot); ``new_len`` is the number of tokens appended.
    Without any past given there is nothing to append to: the uniform charge stands (an empty Work).
    """
    pairs = {present: past for past, present in caches if n.has_input(past)}
    if not pairs:
        return ZERO
    try:
        written: Dim = 0
        for slot, name in enumerate(n.node.outputs):
            if not name:
                continue
            past = pairs.get(slot)
            if past is None:
                written = written + n.out_bytes(slot)  # the attention output (and any other), whole
                continue
            present_shape, present = n.out_shape(slot), n.out_bytes(slot)
            if tuple(present_shape) == tuple(n.in_shape(past)):  # one shared buffer of L rows: S are new
                rows = present_shape[seq_axis]
                written = written + (present // rows * new_len if isinstance(present, int) and isinstance(rows, int)
                                     and isinstance(new_len, int) else as_expr(present) * new_len / rows)
            else:
                written = written + (present - n.in_bytes(past))  # present − past: the appended rows
    except ShapeUnknown:
        return ZERO
    return Work(flops=0, bytes_written=_expanded(written), as_written=True,
                note="KV cache appended in place (the graph as written copies the whole cache into present)")


def _expanded(value: Dim) -> Dim:
    """Byte counts whose terms cancel (P·c + c − P·c) must cancel: expand symbolic ones."""
    if isinstance(value, int):
        return value
    out = sympy.expand(value)
    return int(out) if out.is_Integer else out


SOFTCAP_FLOPS_PER_SCORE = 3
"""softcap · tanh(score / softcap): divide 1 + tanh 1 + multiply 1."""


def _attention_work(q_numel: Dim, k_numel: Dim, y_numel: Dim, scores: Dim, kv_len: Dim, *,
                    softcap: bool, masked: bool) -> Work:
    """Scaled dot-product attention, as the ONNX Attention diagram writes it.

    QKᵀ: every score is a dot product over the head size, i.e. numel(Q)·T MACs over all heads;
    PV: every output element is a dot product over the T keys, i.e. numel(Y)·T MACs.
    Q and K are each scaled by sqrt(scale) (1 multiply per element); per score: softcap 3 if set,
    mask add 1 if a mask or causal bias applies, softmax 5. Masked positions are computed, not skipped.
    """
    macs = q_numel * kv_len + y_numel * kv_len  # QKᵀ + PV
    per_score = SOFTMAX_FLOPS_PER_ELEMENT + (SOFTCAP_FLOPS_PER_SCORE if softcap else 0) + (1 if masked else 0)
    scaling = q_numel + k_numel  # Q·sqrt(scale), K·sqrt(scale)
    return Work(flops=FLOPS_PER_MAC * macs + scaling + per_score * scores, macs=macs)


@rule("Attention", kind=Kind.COMPUTE)
def attention(n: NodeView) -> Work:
    """Q is [B, Hq, Sq, D] or 3-D [B, Sq, Hq·D] with ``q_num_heads``; T = past + new key length."""
    q, k = n.in_shape(0), n.in_shape(1)
    heads = q[1] if len(q) == 4 else int(n.attr("q_num_heads"))
    sq = q[2] if len(q) == 4 else q[1]
    kv_len = k[2] if len(k) == 4 else k[1]
    k_numel = numel(k)
    if n.has_input(4):  # past_key [B, Hkv, P, D] is concatenated in front of K
        kv_len = kv_len + n.in_shape(4)[2]
        k_numel = k_numel + n.in_numel(4)
    scores = q[0] * heads * sq * kv_len  # B·Hq·Sq·T
    masked = n.has_input(3) or bool(n.attr("is_causal", 0))
    new_kv = k[2] if len(k) == 4 else k[1]  # tokens appended to the cache
    return _attention_work(numel(q), k_numel, n.out_numel(0), scores, kv_len,
                           softcap=float(n.attr("softcap", 0.0)) != 0.0, masked=masked) \
        + kv_append(n, ((4, 1), (5, 2)), 2, new_kv)


@rule("FlexAttention", domain=PREVIEW, kind=Kind.COMPUTE)
def flex_attention(n: NodeView) -> Work | Unknown:
    """Attention on rank-4 Q/K/V, plus the cost of the ``score_mod``/``prob_mod`` subgraphs.

    Each modifier maps the [B, Hq, L, S] score tensor to one of the same shape; its nodes are costed
    with their own rules on the subgraph, whose symbolic input dims are bound to the real ones.
    """
    q, k = n.in_shape(0), n.in_shape(1)
    scores_shape = (q[0], q[1], q[2], k[2])
    base = _attention_work(numel(q), numel(k), n.out_numel(0), prod(scores_shape), k[2],
                           softcap=False, masked=False)
    total = base
    for label, child in n.graph.children(n.node.name):
        mod = _subgraph_work(child, n.graph.opsets, scores_shape)
        if isinstance(mod, Unknown):
            return Unknown(f"{label}: {mod.reason}")
        total = total + Work(mod.flops, mod.macs, f"{label}: {mod.flops} FLOPs")
    return total


def _subgraph_work(child: Graph, opsets: dict[str, int], input_shape: Sequence[Dim]) -> Work | Unknown:
    """Cost a one-input modifier subgraph with the op rules, binding its input dims to ``input_shape``."""
    model = onnx.helper.make_model(
        child.proto, opset_imports=[onnx.helper.make_opsetid(d, v) for d, v in opsets.items()])
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception as e:  # a subgraph onnx cannot type is a reason, not a crash
        return Unknown(f"subgraph shapes cannot be inferred ({e})")
    g = Graph(inferred.graph, opsets)
    declared = g.tensor(g.input_names[0]) if g.input_names else None
    binding = {}
    if declared is not None and declared.shape is not None:
        binding = {d: real for d, real in zip(declared.shape, input_shape, strict=False) if not isinstance(d, int)}
    total = ZERO
    for node in g.nodes():
        entry = lookup(node.domain, node.op_type)
        if entry is None:
            return Unknown(f"no cost rule for {node.domain}::{node.op_type} in the subgraph")
        view = NodeView(node, tuple(g.tensor(t) if t else None for t in node.inputs),
                        tuple(g.tensor(t) if t else None for t in node.outputs), g)
        try:
            result = entry.fn(view)
        except ShapeUnknown as e:
            return Unknown(f"subgraph node {node.op_type}: {e}")
        if isinstance(result, Unknown):
            return result
        total = total + result
    flops, macs = total.flops, total.macs
    if binding:
        flops = flops if isinstance(flops, int) else as_expr(flops).xreplace(binding)
        macs = macs if isinstance(macs, int) else as_expr(macs).xreplace(binding)
    return Work(flops=flops if not isinstance(flops, sympy.Integer) else int(flops),
                macs=macs if not isinstance(macs, sympy.Integer) else int(macs))


ROTARY_FLOPS_PER_ELEMENT = 3
"""x·cos 1 + x_pair·sin 1 + add/subtract 1, per rotated element; the rest pass through."""


@rule("RotaryEmbedding", kind=Kind.ELEMENTWISE)
def rotary_embedding(n: NodeView) -> Work:
    x = n.in_shape(0)  # [B, H, S, D] or [B, S, H·D]
    rot = int(n.attr("rotary_embedding_dim", 0))
    if rot == 0:
        rotated = numel(x)  # full rotation: every element
    elif len(x) == 4:
        rotated = prod(x[:3]) * rot  # B·H·S tokens-heads × rotated dims
    else:
        rotated = x[0] * x[1] * int(n.attr("num_heads")) * rot  # B·S·H × rotated dims
    return Work(flops=ROTARY_FLOPS_PER_ELEMENT * rotated)


@rule("LinearAttention", kind=Kind.COMPUTE)
def linear_attention(n: NodeView) -> Work:
    """The recurrent form of the spec, per token and head (state S is d_k × d_v per KV head)::

        update   S += k ⊗ v                      d_k·d_v MACs per KV head
        readout  o = scale · qᵀS                 d_k·d_v MACs + d_v multiplies per query head
        gated    S ← exp(g)·S                    d_k·d_v multiplies per KV head, + exp per decay element
        delta    v − Sᵀk, · β                    d_k·d_v MACs + 2·d_v per KV head

    Chunk-parallel kernels reorder this work; the count is that of the recurrence.
    """
    q, v = n.in_shape(0), n.in_shape(2)  # [B, T, Hq·dk], [B, T, Hkv·dv]
    hq, hkv = int(n.attr("q_num_heads")), int(n.attr("kv_num_heads"))
    dk, dv = _div(q[2], hq), _div(v[2], hkv)
    tokens = q[0] * q[1]  # B·T recurrence steps
    rule_name = str(n.attr("update_rule", "gated_delta"))
    state = dk * dv  # one state matrix
    macs = tokens * (hkv * state + hq * state)  # update + readout
    flops: Dim = tokens * hq * dv  # scale the readout
    if rule_name in ("gated", "gated_delta"):
        flops += tokens * hkv * state  # decay the state
        flops += n.in_numel(4) if n.has_input(4) else 0  # exp of each decay element
    if rule_name in ("delta", "gated_delta"):
        macs += tokens * hkv * state  # Sᵀk
        flops += tokens * hkv * 2 * dv  # v − Sᵀk, · β
    return Work(flops=FLOPS_PER_MAC * macs + flops, macs=macs)


@rule("SwiGLU", kind=Kind.ELEMENTWISE)
def swiglu(n: NodeView) -> Work:
    return Work(flops=2 * n.out_numel(0))  # Swish(A) 1 (an activation) + · B 1, per output element
