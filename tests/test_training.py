"""Training-step cost, saved activations, blocks and checkpointing: every expected number derived in the test body.

The GPT-style decoder is written with onnx.helper (pre-norm GPT-2 layers, no embedding and no head, so every
parameter is a non-embedding parameter); sizes are float16 (2 bytes per element) unless said otherwise.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import onnx.parser
import pytest
from clihelp import run_cli
from onnx import TensorProto, numpy_helper

from graphcost.analysis import Analysis
from graphcost.hardware.catalog import resolve
from graphcost.passes._blocks import find_blocks
from graphcost.passes.checkpointing import checkpoint, parse_policy, segments_for, tradeoff
from graphcost.passes.training import LAYERNORM_BACKWARD, STATS_BYTES_PER_ROW, TrainingCost, training_cost

FP16 = 2
FP32 = 4


def gpt_decoder(layers: int = 2, b: int = 2, s: int = 16, h: int = 64, a: int = 4, *, prefixed: bool = True,
                elem: int = TensorProto.FLOAT16) -> onnx.ModelProto:
    """Pre-norm GPT-2 layers: LN → QKV (MatMul + bias) → split heads → QKᵀ · 1/√d → Softmax → ·V → merge →
    proj (+ bias) → residual Add → LN → fc (+ bias) → Gelu → fc2 (+ bias) → residual Add. ``prefixed`` names
    the nodes ``/h.i/...`` as exporters do; otherwise ``n0, n1, ...`` (blocks must be found by the residual rule)."""
    d = h // a
    np_t = onnx.helper.tensor_dtype_to_np_dtype(elem)
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def w(name: str, *shape: int) -> str:
        inits.append(numpy_helper.from_array(np.zeros(shape, dtype=np_t), name))
        return name

    def i64(name: str, values: list[int]) -> str:
        inits.append(numpy_helper.from_array(np.array(values, dtype=np.int64), name))
        return name

    def node(op: str, ins: list[str], name: str, n_out: int = 1, **attrs: object) -> list[str]:
        name = name if prefixed else f"n{len(nodes)}"
        outs = [f"{name}_output_{k}" for k in range(n_out)]
        nodes.append(oh.make_node(op, ins, outs, name=name, **attrs))
        return outs

    heads, merged, split = i64("heads_shape", [b, s, a, d]), i64("merged_shape", [b, s, h]), i64("split", [h] * 3)
    scale = w("scale")  # a one-element 1/√d: a constant scale, not trained
    x = "x"
    for i in range(layers):
        p = f"/h.{i}"
        ln1 = node("LayerNormalization", [x, w(f"{p}.ln1.g", h), w(f"{p}.ln1.b", h)], f"{p}/ln_1/LN", axis=-1)[0]
        qkv = node("MatMul", [ln1, w(f"{p}.attn.w", h, 3 * h)], f"{p}/attn/c_attn/MatMul")[0]
        qkv = node("Add", [qkv, w(f"{p}.attn.b", 3 * h)], f"{p}/attn/c_attn/Add")[0]
        q, k, v = node("Split", [qkv, split], f"{p}/attn/Split", n_out=3, axis=-1)
        q = node("Transpose", [node("Reshape", [q, heads], f"{p}/attn/Rq")[0]], f"{p}/attn/Tq", perm=[0, 2, 1, 3])[0]
        k = node("Transpose", [node("Reshape", [k, heads], f"{p}/attn/Rk")[0]], f"{p}/attn/Tk", perm=[0, 2, 3, 1])[0]
        v = node("Transpose", [node("Reshape", [v, heads], f"{p}/attn/Rv")[0]], f"{p}/attn/Tv", perm=[0, 2, 1, 3])[0]
        scores = node("Mul", [node("MatMul", [q, k], f"{p}/attn/QK")[0], scale], f"{p}/attn/Scale")[0]
        probs = node("Softmax", [scores], f"{p}/attn/Softmax", axis=-1)[0]
        ctx = node("Transpose", [node("MatMul", [probs, v], f"{p}/attn/AV")[0]], f"{p}/attn/Tc", perm=[0, 2, 1, 3])[0]
        ctx = node("Reshape", [ctx, merged], f"{p}/attn/Rc")[0]
        proj = node("MatMul", [ctx, w(f"{p}.proj.w", h, h)], f"{p}/attn/c_proj/MatMul")[0]
        proj = node("Add", [proj, w(f"{p}.proj.b", h)], f"{p}/attn/c_proj/Add")[0]
        res1 = node("Add", [x, proj], f"{p}/Add")[0]
        ln2 = node("LayerNormalization", [res1, w(f"{p}.ln2.g", h), w(f"{p}.ln2.b", h)], f"{p}/ln_2/LN",
                   axis=-1)[0]
        fc = node("MatMul", [ln2, w(f"{p}.fc.w", h, 4 * h)], f"{p}/mlp/c_fc/MatMul")[0]
        fc = node("Add", [fc, w(f"{p}.fc.b", 4 * h)], f"{p}/mlp/c_fc/Add")[0]
        act = node("Gelu", [fc], f"{p}/mlp/Gelu")[0]
        out = node("MatMul", [act, w(f"{p}.fc2.w", 4 * h, h)], f"{p}/mlp/c_proj/MatMul")[0]
        out = node("Add", [out, w(f"{p}.fc2.b", h)], f"{p}/mlp/c_proj/Add")[0]
        x = node("Add", [res1, out], f"{p}/Add_1")[0]
    graph = oh.make_graph(nodes, "gpt", [oh.make_tensor_value_info("x", elem, [b, s, h])],
                          [oh.make_tensor_value_info(x, elem, None)], initializer=inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 20)])


def analysed(model: onnx.ModelProto | str) -> Analysis:
    m = onnx.parser.parse_model(model) if isinstance(model, str) else model
    return Analysis.of(m.SerializeToString())


def cost_of(a: Analysis, hardware: bool = False) -> TrainingCost:
    return training_cost(a.graph, a.costs, a.binding.values, resolve("h100-sxm") if hardware else None)


# ------------------------------------------------------------------------------------------------ backward rules
def test_matmul_backward_is_two_products_and_saves_the_activation_operand() -> None:
    a = analysed("""<ir_version: 8, opset_import: ["" : 18]>
        g (float[8, 32] x) => (float[8, 16] y) <float[32, 16] w = {0.0}> { y = MatMul(x, w) }""")
    [row] = cost_of(a).nodes
    assert row.forward_flops == 2 * 8 * 32 * 16  # one MAC per output element per k, 2 FLOPs a MAC
    assert row.backward_flops == 2 * (2 * 8 * 32 * 16)  # dX = dY·Wᵀ and dW = Xᵀ·dY, each the forward's size
    assert row.saved == ("x",)  # dW needs X; W is a parameter, resident anyway
    # backward bytes: dY read (8·16) + X read (8·32) + W read for dX (32·16) + dX and dW written (8·32 + 32·16)
    assert row.backward_bytes == FP32 * (8 * 16 + 8 * 32 + 32 * 16 + 8 * 32 + 32 * 16)


def test_product_of_two_activations_saves_both_and_a_constant_scale_nothing() -> None:
    a = analysed("""<ir_version: 8, opset_import: ["" : 18]>
        g (float[4, 8] q, float[8, 4] k) => (float[4, 4] y) <float c = {0.5}> { s = MatMul(q, k)  y = Mul(s, c) }""")
    qk, scale = cost_of(a).nodes
    assert qk.category == "attention" and qk.saved == ("q", "k")  # dQ needs K, dK needs Q
    assert qk.backward_flops == 2 * (2 * 4 * 8 * 4)  # two products of the forward's size
    assert scale.saved == ()  # dS = dY·c needs only the constant; c is not trained
    assert scale.backward_flops == 4 * 4  # one multiply per element, no gradient for c (no broadcast sum)


def test_norm_softmax_relu_rules() -> None:
    a = analysed("""<ir_version: 8, opset_import: ["" : 18]>
        g (float[6, 10] x) => (float[6, 10] y) <float[10] gm = {1.0}, float[10] bt = {0.0}> {
            n = LayerNormalization<axis = -1>(x, gm, bt)  s = Softmax<axis = -1>(n)  y = Relu(s) }""")
    ln, sm, relu = cost_of(a).nodes
    assert ln.backward_flops == LAYERNORM_BACKWARD * 60 and LAYERNORM_BACKWARD == 13  # 13 per element (docstring)
    assert ln.saved == ("x",) and ln.extra_saved_bytes == 6 * STATS_BYTES_PER_ROW  # x + mean, 1/σ per row
    assert sm.backward_flops == 4 * 60 and sm.saved == ("s",)  # Y ⊙ (dY − Σ dY⊙Y) reads the output
    assert relu.backward_flops == 60 and relu.saved == ("y",)  # one mask-select per element, from the output


def test_op_without_backward_rule_is_unknown_never_zero() -> None:
    a = analysed("""<ir_version: 8, opset_import: ["" : 18]>
        g (float[4, 4] x) => (float[4, 4] y) { y = Sin(x) }""")
    cost = cost_of(a)
    [row] = cost.nodes
    assert row.backward_flops is None and row.backward_bytes is None
    assert "no backward rule" in (row.unknown_reason or "") and "Sin" in (row.unknown_reason or "")
    assert [n.name for n in cost.unknown] == [row.name]
    assert cost.to_dict()["unknown"][0]["op_type"] == "Sin"


def test_integer_plumbing_has_no_backward() -> None:
    a = analysed("""<ir_version: 8, opset_import: ["" : 18]>
        g (float[4, 4] x) => (int64[2] y) { y = Shape(x) }""")
    [row] = cost_of(a).nodes
    assert row.backward_flops == 0 and row.saved == () and row.unknown_reason is None


# ------------------------------------------------------------------------------------------------ GPT acceptance
def test_gpt_training_flops_are_6NT_plus_the_attention_term() -> None:
    L, b, s, h, a = 2, 2, 32, 256, 4
    cost = cost_of(analysed(gpt_decoder(L, b, s, h, a)))
    T = b * s  # tokens per step
    n_weights = L * (h * 3 * h + h * h + h * 4 * h + 4 * h * h)  # QKV, proj, fc, fc2 matrices: 12h² per layer
    n_all = n_weights + L * (3 * h + h + 4 * h + h + 4 * h)  # + biases (9h) + LayerNorm γ, β (4h): 13h per layer
    # dense products: forward 2·N_w·T, backward two products of that size: 6·N_w·T exactly
    assert cost.category_flops("dense") == 6 * n_weights * T
    # attention products per layer: QKᵀ and ·V, each 2·b·s²·h forward (a heads of d = h/a), ×3 with backward
    assert cost.category_flops("attention") == L * 3 * (2 * (2 * b * s * s * h))
    # 6·N·T (N with biases and norms) agrees with the step's FLOPs once the attention term is set apart
    rest = cost.training_flops - cost.category_flops("attention")
    assert abs(rest - 6 * n_all * T) / (6 * n_all * T) < 0.02
    assert cost.training_flops == cost.category_flops("dense") + cost.category_flops("attention") + \
        cost.category_flops("other")


def test_kept_activations_per_layer_vs_korthikanti() -> None:
    """Korthikanti et al. (2022), 16-bit, no recomputation: s·b·h·(34 + 5·a·s/h) bytes per layer, term by term."""
    L, b, s, h, a = 2, 2, 16, 64, 4
    g = analysed(gpt_decoder(L, b, s, h, a))
    cost = cost_of(g)
    sbh, as2b = s * b * h, a * s * s * b
    by_node = {n.name: n for n in cost.nodes}
    # the Korthikanti terms this export contains, each found on the node that saves it (layer 1)
    terms = {
        "/h.1/ln_1/LN": 2 * sbh,  # LayerNorm 1 input
        "/h.1/attn/c_attn/MatMul": 2 * sbh,  # QKV projection input
        "/h.1/attn/QK": 4 * sbh,  # Q and K for QKᵀ
        "/h.1/attn/Softmax": 2 * as2b,  # softmax output
        "/h.1/attn/AV": 2 * sbh,  # V (the probabilities it also reads are the softmax output, already counted)
        "/h.1/attn/c_proj/MatMul": 2 * sbh,  # output projection input
        "/h.1/ln_2/LN": 2 * sbh,  # LayerNorm 2 input
        "/h.1/mlp/c_fc/MatMul": 2 * sbh,  # fc input
        "/h.1/mlp/Gelu": 8 * sbh,  # GeLU input (4h wide)
        "/h.1/mlp/c_proj/MatMul": 8 * sbh,  # fc2 input (GeLU output)
    }
    seen: set[str] = set()
    for name, expected in terms.items():
        fresh = [t for t in by_node[name].saved if t not in seen]
        seen.update(fresh)
        assert sum(cost.sizes[t] for t in fresh) == expected, name
    blocks = find_blocks(g.graph)
    layer = blocks.blocks[1]
    kept = {t for n in layer.nodes for t in by_node[n].saved}
    stats = 2 * (s * b) * STATS_BYTES_PER_ROW  # named difference: LayerNorm mean and 1/σ (float32, per row)
    layer_bytes = sum(cost.sizes[t] for t in kept) + sum(by_node[n].extra_saved_bytes for n in layer.nodes)
    korthikanti = sbh * (34 + 5 * a * s // h)
    # named differences (an inference export has no dropout): the attention-probability dropout mask (a·s²·b, 1 B)
    # and its output (2·a·s²·b: ·V reads the softmax output instead), the attention and MLP dropout masks (sbh each)
    absent = as2b + 2 * as2b + sbh + sbh
    assert layer_bytes == korthikanti - absent + stats


# ------------------------------------------------------------------------------------------------ blocks
def test_blocks_by_name_prefix_and_by_residual_period() -> None:
    for prefixed, rule in ((True, "name prefix 'h'"), (False, "residual period 2")):
        found = find_blocks(analysed(gpt_decoder(3, prefixed=prefixed)).graph)
        assert found.rule == rule
        assert len(found.blocks) == 3  # one per layer
        assert all(len(b.nodes) == 26 and b.residual_adds == 2 for b in found.blocks)  # 26 nodes, 2 residual adds
        assert found.blocks[0].inputs == ("x",)  # the residual stream is the only activation entering


# ------------------------------------------------------------------------------------------------ checkpointing
def test_full_recompute_of_blocks_keeps_block_inputs_and_adds_one_forward() -> None:
    L, b, s, h, a = 2, 2, 16, 64, 4
    g = analysed(gpt_decoder(L, b, s, h, a))
    cost = cost_of(g, hardware=True)
    blocks = find_blocks(g.graph)
    none = checkpoint(parse_policy("none"), g.graph, cost, blocks)
    full = checkpoint(parse_policy("blocks"), g.graph, cost, blocks, state_bytes=1000, hardware=resolve("h100"))
    assert none.kept_bytes == cost.kept_bytes and none.recompute_flops == 0
    assert full.kept_bytes == L * FP16 * b * s * h  # each block's input: the residual stream, s·b·h in 16 bits
    block_forward = sum(n.forward_flops or 0 for n in cost.nodes if n.name in set(blocks.blocks[0].nodes))
    assert full.recompute_flops == L * block_forward == cost.forward_flops  # one forward of every block
    per_layer = (cost.kept_bytes - 0) // L  # layers are identical: what one block saves without checkpointing
    # while one block's backward runs its recomputed saves are live; its input is already kept
    assert full.peak_activation_bytes == full.kept_bytes + per_layer - FP16 * b * s * h
    assert full.peak_memory_bytes == 1000 + full.peak_activation_bytes
    assert full.time_added_s is not None and full.time_added_s > 0 and cost.bound is not None
    assert full.step_time_s == pytest.approx(cost.bound.step_time_s + full.time_added_s)


CHAIN = """<ir_version: 8, opset_import: ["" : 18]>
    g (float[4, 4] x) => (float[4, 4] y) {
        a = Relu(x)  b = Relu(a)  c = Relu(b)  d = Relu(c)  e = Relu(d)  f = Relu(e)  g2 = Relu(f)  y = Relu(g2) }"""


def test_every_k_sqrt_and_keep_policies_on_a_chain() -> None:
    g = analysed(CHAIN)
    cost = cost_of(g)
    blocks = find_blocks(g.graph)
    t = 16 * FP32  # every tensor is 4×4 float32
    assert cost.kept_bytes == 8 * t  # each Relu keeps its output: a..y
    every2 = checkpoint(parse_policy("every:2"), g.graph, cost, blocks)
    assert every2.segments == 4  # 8 nodes in runs of 2
    assert every2.kept_bytes == 4 * t  # segment inputs: x, b, d, g... the input of each run
    assert every2.peak_activation_bytes == 4 * t + 2 * t  # + one run's two outputs, recomputed
    assert every2.recompute_flops == 8 * 16  # every Relu once more: one op per element
    sqrt = checkpoint(parse_policy("sqrt"), g.graph, cost, blocks)
    assert sqrt.segments == 3  # k = ⌈√8⌉ = 3: runs of 3, 3, 2
    keep = checkpoint(parse_policy("keep:c,f"), g.graph, cost, blocks)
    assert keep.segments == 3  # cut after c's and f's producers: [a b c] [d e f] [g2 y]
    assert keep.kept_bytes == 3 * t  # x, c, f
    assert [sorted(s) for s in segments_for(parse_policy("keep:c"), g.graph, cost, blocks)] == \
        [[f"Relu_{i}" for i in range(3)], [f"Relu_{i}" for i in range(3, 8)]]  # the nodes producing a..c, d..y
    rows = tradeoff([parse_policy(p) for p in ("none", "blocks", "every:2")], g.graph, cost, blocks)
    assert [r.policy for r in rows] == ["none", "every:2"]  # no blocks in a chain: that row is left out


@pytest.mark.parametrize("text", ["every:0", "every:x", "keep:", "bogus", "sqrt:3"])
def test_bad_policy_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError, match="policy"):
        parse_policy(text)


def test_keep_policy_names_an_unknown_tensor() -> None:
    g = analysed(CHAIN)
    with pytest.raises(ValueError, match="'nope'"):
        checkpoint(parse_policy("keep:nope"), g.graph, cost_of(g), find_blocks(g.graph))


# ------------------------------------------------------------------------------------------------ CLI
def test_cli_train_text_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "gpt.onnx"
    onnx.save(gpt_decoder(), path)
    code, out, err = run_cli(capsys, "train", str(path), "--tokens", "32", "--checkpoint", "blocks")
    assert code == 0, err
    assert "checkpointing trade-off" in out and "6·N·T" in out and "blocks: 2 (name prefix 'h')" in out
    code, out, err = run_cli(capsys, "train", str(path), "--format", "json", "--tensor-parallel", "2")
    assert code == 0, err
    data = json.loads(out)
    assert set(data) == {"model", "training", "parallel"}
    assert data["training"]["blocks"]["count"] == 2 and data["parallel"]["tensor_parallel"] == 2
    assert [r["policy"] for r in data["training"]["checkpointing"]] == ["none", "blocks", "sqrt"]


@pytest.mark.parametrize("flags, needle", [
    (["--checkpoint", "every:0"], "every:K"),
    (["--tensor-parallel", "0"], "tensor must be"),
    (["--cluster", "nowhere-cluster"], "unknown cluster"),
    (["--tokens", "0"], "--tokens"),
])
def test_cli_train_bad_flags_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str],
                                             needle: str) -> None:
    path = tmp_path / "gpt.onnx"
    onnx.save(gpt_decoder(1), path)
    before = path.read_bytes()
    code, out, err = run_cli(capsys, "train", str(path), *flags)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and needle in err
    assert path.read_bytes() == before


def test_cli_train_pipeline_without_blocks_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "chain.onnx"
    onnx.save(onnx.parser.parse_model(CHAIN), path)
    code, _, err = run_cli(capsys, "train", str(path), "--pipeline-parallel", "2")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "blocks" in err
