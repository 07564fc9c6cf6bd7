"""Liveness-based activation memory: hand-computed peaks, the bounds on random DAGs, reorder, arena, training.

Every expected number is derived in the test body. Sizes are float32 (4 bytes per element) unless said otherwise.
A curve lists live bytes per step; a tensor lives from its producer's step (graph inputs: step 0) through its
last consumer's step (graph outputs: the last step).
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import onnx.parser
import pytest
from onnx import TensorProto, numpy_helper

from graphcost.graph import Graph
from graphcost.load import load
from graphcost.passes._order_search import greedy_order, pack, problem
from graphcost.passes.liveness import (
    EXACT_MAX_NODES,
    MemoryResult,
    TrainingOptions,
    arena,
    liveness,
    reorder,
)
from graphcost.passes.shapes import infer_shapes

FP32 = 4


def typed(text_or_model: str | onnx.ModelProto, **weights: tuple[int, ...]) -> Graph:
    """The typed graph of a model; ``weights`` adds float32 initializers of those shapes (zeros)."""
    m = onnx.parser.parse_model(text_or_model) if isinstance(text_or_model, str) else text_or_model
    for name, shape in weights.items():
        m.graph.initializer.append(numpy_helper.from_array(np.zeros(shape, np.float32), name))
    return infer_shapes(load(m)).graph


def check_bounds(r: MemoryResult) -> None:
    assert r.min_peak_bytes <= r.peak_activation_bytes <= r.conservative_peak_bytes
    assert r.arena is not None and r.arena.bytes >= r.peak_activation_bytes
    if r.curve:
        assert max(p.live_bytes for p in r.curve) == r.peak_activation_bytes


def is_topological(g: Graph, order: tuple[str, ...]) -> bool:
    pos = {name: k for k, name in enumerate(order)}
    if sorted(pos) != sorted(n.name for n in g.nodes()):
        return False
    return all(pos[p] < pos[n.name] for n in g.nodes() for p in g.predecessors(n.name))


RESIDUAL_WEIGHTS = {"w1": (32, 16, 3, 3), "w2": (16, 32, 3, 3)}
RESIDUAL = """<ir_version: 8, opset_import: ["" : 17]>
g (float[1,16,8,8] x) => (float[1,16,8,8] y) {
  a = Conv<pads=[1,1,1,1]>(x, w1)
  b = Relu(a)
  c = Conv<pads=[1,1,1,1]>(b, w2)
  d = Add(c, x)
  y = Relu(d)
}"""
S16 = 16 * 8 * 8 * FP32  # a 16-channel 8×8 map: 4096 B
S32 = 32 * 8 * 8 * FP32  # a 32-channel 8×8 map: 8192 B


def test_residual_block() -> None:
    r = liveness(typed(RESIDUAL, **RESIDUAL_WEIGHTS), {})
    # lifetimes: x [0,3] (read by the Add: the skip), a [0,1], b [1,2], c [2,3], d [3,4], y [4,4]
    assert [p.live_bytes for p in r.curve] == [
        S16 + S32,  # step 0 Conv: x, a
        S16 + S32 + S32,  # step 1 Relu: x (skip), a, b
        S16 + S32 + S16,  # step 2 Conv: x, b, c
        S16 + S16 + S16,  # step 3 Add: x, c, d
        S16 + S16,  # step 4 Relu: d, y
    ]
    assert r.peak_activation_bytes == 20_480 and r.peak_node == "Relu_1" and r.peak_step == 1
    assert [(t.name, t.bytes, t.producer) for t in r.live_at_peak] == [
        ("x", S16, None), ("a", S32, "Conv_0"), ("b", S32, "Relu_1")]
    assert r.parameter_bytes == (32 * 16 * 9 + 16 * 32 * 9) * FP32  # w1 and w2: weights, never activations
    assert r.min_peak_bytes == S32 + S32  # the Relu's own input and output
    assert r.conservative_peak_bytes == S16 + S32 + S32 + S16 + S16 + S16  # x, a, b, c, d, y at once
    assert [t.name for t in r.top_tensors] == ["a", "b", "x"]  # largest first
    check_bounds(r)


UNET = """<ir_version: 8, opset_import: ["" : 17]>
g (float[1,8,16,16] x) => (float[1,16,16,16] y) {
  e1 = Relu(x)
  p1 = MaxPool<kernel_shape=[2,2], strides=[2,2]>(e1)
  e2 = Relu(p1)
  p2 = MaxPool<kernel_shape=[2,2], strides=[2,2]>(e2)
  m = Relu(p2)
  u2 = ConvTranspose<strides=[2,2]>(m, wt2)
  c2 = Concat<axis=1>(u2, e2)
  u1 = ConvTranspose<strides=[2,2]>(c2, wt1)
  y = Concat<axis=1>(u1, e1)
}"""


def test_unet_long_skip() -> None:
    r = liveness(typed(UNET, wt2=(8, 8, 2, 2), wt1=(16, 8, 2, 2)), {})
    full, half, quarter = 8 * 16 * 16 * FP32, 8 * 8 * 8 * FP32, 8 * 4 * 4 * FP32  # 8192, 2048, 512 B
    # e1 (the long skip) lives from step 0 to the last Concat at step 8; e2 (the short skip) from 2 to 6.
    assert [p.live_bytes for p in r.curve] == [
        full + full,  # 0 Relu: x, e1
        full + half,  # 1 MaxPool: e1, p1
        full + half + half,  # 2 Relu: e1, p1, e2
        full + half + quarter,  # 3 MaxPool: e1, e2, p2
        full + half + quarter + quarter,  # 4 Relu: e1, e2, p2, m
        full + half + quarter + half,  # 5 ConvTranspose: e1, e2, m, u2
        full + half + half + 2 * half,  # 6 Concat: e1, e2, u2, c2 (16 channels at 8×8)
        full + 2 * half + full,  # 7 ConvTranspose: e1, c2, u1
        full + full + 2 * full,  # 8 Concat: e1, u1, y (16 channels at 16×16)
    ]
    assert r.peak_activation_bytes == 32_768 and r.peak_node == "Concat_8"
    assert [t.name for t in r.live_at_peak] == ["e1", "u1", "y"]
    check_bounds(r)


def test_inputs_live_from_step_zero_outputs_to_the_end() -> None:
    g = typed("""<ir_version: 8, opset_import: ["" : 17]>
        g (float[256] a, float[256] late) => (float[256] o1, float[256] o2) {
          o1 = Relu(a)
          t = Relu(o1)
          u = Relu(t)
          o2 = Mul(u, late)
        }""")
    r = liveness(g, {})
    k = 256 * FP32  # every tensor: 1024 B
    assert [p.live_bytes for p in r.curve] == [
        3 * k,  # 0: a, late (a graph input, live before its only read at step 3), o1
        3 * k,  # 1: late, o1 (a graph output, kept to the end), t
        4 * k,  # 2: late, o1, t, u
        4 * k,  # 3: late, o1, u, o2
    ]
    assert {t.name for t in r.live_at_peak} == {"late", "o1", "t", "u"}
    check_bounds(r)


DIAMOND = """<ir_version: 8, opset_import: ["" : 17]>
g (float[1,1024] x) => (float[1,1024] y) <int64[2] s2 = {32, 32}, int64[2] s1 = {1, 1024}> {
  a = Relu(x)
  v = Reshape(a, s2)
  b = Sigmoid(v)
  w = Reshape(b, s1)
  c = Tanh(a)
  y = Add(c, w)
}"""


def test_diamond_with_views() -> None:
    r = liveness(typed(DIAMOND), {})
    k = 1024 * FP32  # every tensor: 4096 B
    # Views share storage: buffer A = {a, v} lives [0, 4] (last read: Tanh), buffer B = {b, w} lives [2, 5].
    assert [p.live_bytes for p in r.curve] == [
        2 * k,  # 0 Relu: x, A
        1 * k,  # 1 Reshape (view): A only, the view adds nothing
        2 * k,  # 2 Sigmoid: A, B
        2 * k,  # 3 Reshape (view): A, B
        3 * k,  # 4 Tanh: A, B, c
        3 * k,  # 5 Add: B, c, y
    ]
    assert r.peak_activation_bytes == 12_288 and r.peak_node == "Tanh_4"  # views as copies would give 16,384
    assert {t.name for t in r.live_at_peak} == {"a", "b", "c"}  # owners, not the view names
    assert r.parameter_bytes == 2 * 2 * 8  # the two int64[2] shape initializers
    assert r.conservative_peak_bytes == 5 * k  # x, A, B, c, y
    check_bounds(r)


def test_if_body_peak_held_at_parent() -> None:
    g = typed("""<ir_version: 8, opset_import: ["" : 17]>
        g (bool c, float[1,1024] x) => (float[1,1024] y) {
          a = Relu(x)
          y = If(c) <then_branch = g1 () => (float[1,1024] t) { t1 = Sigmoid(a)
                                                                t = Tanh(t1) },
                     else_branch = g2 () => (float[1,1024] e) { e = Neg(a) }>
        }""")
    r = liveness(g, {})
    k = 1024 * FP32
    body = 2 * k  # then branch: t1 and t live together at its Tanh; else branch: e alone (k); the larger
    assert [p.live_bytes for p in r.curve] == [
        1 + k + k,  # 0 Relu: c (bool, 1 B), x, a
        1 + k + k + body,  # 1 If: c, a (read inside the branches, so live through the If), y, the body's peak
    ]
    assert r.peak_node == "If_1" and r.peak_activation_bytes == 16_385
    assert r.live_at_peak[-1].name == "If_1/body" and r.live_at_peak[-1].bytes == body
    assert r.conservative_peak_bytes == 1 + 3 * k + body  # c, x, a, y, and the larger branch without reuse
    check_bounds(r)


def test_loop_body_counts_what_it_produces() -> None:
    g = typed("""<ir_version: 8, opset_import: ["" : 17]>
        g (int64 n, float[256] x) => (float[256] y) {
          cond = Constant<value = bool {1}>()
          y = Loop(n, cond, x) <body = b (int64 i, bool ci, float[256] s) => (bool co, float[256] s2) {
               co = Identity(ci)
               t = Relu(s)
               s2 = Sigmoid(t) }>
        }""")
    r = liveness(g, {})
    k = 256 * FP32
    # one iteration: i, ci, s are the Loop's inputs (the parent's), co is a view of ci; t and s2 live together
    body = k + k
    assert [p.live_bytes for p in r.curve] == [
        8 + k,  # 0 Constant (a bool: plumbing, not an activation): n (int64), x
        8 + k + k + body,  # 1 Loop: n, x, y and one iteration's peak
    ]
    check_bounds(r)


def test_unknown_size_is_listed_not_silent() -> None:
    g = typed("""<ir_version: 8, opset_import: ["" : 17, "custom" : 1]>
        g (float[64] x) => (y) {
          a = custom.Mystery(x)
          y = Relu(a)
        }""")
    r = liveness(g, {})
    assert {u.name for u in r.unknown_tensors} >= {"a"}
    assert r.warnings and "unknown size" in r.warnings[0]
    assert r.to_dict()["unknown_tensors"][0]["name"] in {"a", "y"}


def test_symbolic_dims_need_the_binding() -> None:
    g = typed("""<ir_version: 8, opset_import: ["" : 17]>
        g (float[batch,128] x) => (float[batch,128] y) { a = Relu(x)
          y = Relu(a) }""")
    assert liveness(g, {"batch": 4}).peak_activation_bytes == 2 * 4 * 128 * FP32  # input and output of one Relu
    r = liveness(g, {})  # unbound: sizes unknown, listed
    assert r.peak_activation_bytes == 0 and len(r.unknown_tensors) == 3


def test_reorder_lowers_the_peak_of_a_bad_order() -> None:
    g = typed("""<ir_version: 8, opset_import: ["" : 17]>
        g (float[1,256] x) => (float[1,1] y) <int64[2] rep = {1, 16}> {
          a = Tile(x, rep)
          b = Tile(x, rep)
          ra = ReduceSum(a)
          rb = ReduceSum(b)
          y = Add(ra, rb)
        }""")
    xb, big, one = 256 * FP32, 4096 * FP32, FP32  # x, each Tile's output, each sum
    r = reorder(g, {})
    assert r.graph_order_peak_bytes == xb + 2 * big  # graph order holds both Tiles at once (step 1)
    assert r.peak_activation_bytes == xb + big + one  # a, ra, b, rb: at most one Tile output alive
    assert r.exact_peak_bytes == r.greedy_peak_bytes == r.peak_activation_bytes  # greedy finds the optimum
    assert is_topological(g, r.order)
    r2 = liveness(g, {}, order=r.order)
    assert r2.peak_activation_bytes == r.peak_activation_bytes
    with pytest.raises(ValueError, match="not topological"):
        liveness(g, {}, order=tuple(reversed(r.order)))


def test_arena_aligns_and_never_undercuts() -> None:
    g = typed(RESIDUAL, **RESIDUAL_WEIGHTS)
    a = arena(g, {}, alignment=64)
    assert a.bytes >= a.peak_activation_bytes == 20_480
    # every size here is a multiple of 64 and best fit packs x, a, b exactly at the peak step
    assert a.bytes == 20_480
    odd = typed("""<ir_version: 8, opset_import: ["" : 17]>
        g (float[3] x) => (float[3] y) { a = Relu(x)
          y = Relu(a) }""")
    assert arena(odd, {}, alignment=64).bytes == 2 * 64  # two 12-byte buffers at a time, each rounded to 64
    assert arena(odd, {}, alignment=1).bytes == 2 * 12


def test_the_collector_is_left_as_it_was() -> None:
    """The pass pauses the cyclic GC while it runs (passes/liveness.py, with graphcost/_gc.py's ``paused``) and
    restores it, raise or not."""
    import gc

    g = typed(RESIDUAL, **RESIDUAL_WEIGHTS)
    before = gc.isenabled()  # graphcost.cli.main turns it off for good: tests after test_cli run without it
    try:
        gc.enable()
        with pytest.raises(ValueError, match="not topological"):
            liveness(g, {}, order=tuple(reversed([n.name for n in g.nodes()])))
        assert gc.isenabled()
        gc.disable()
        liveness(g, {})
        assert not gc.isenabled()  # a caller's choice is kept
    finally:
        (gc.enable if before else gc.disable)()


def test_training_memory() -> None:
    r = liveness(typed(RESIDUAL, **RESIDUAL_WEIGHTS), {}, training=TrainingOptions(optimizer_state_multiplier=2.0))
    t = r.training
    assert t is not None
    params = (32 * 16 * 9 + 16 * 32 * 9) * FP32  # w1, w2: 36,864 B
    assert t.parameters == params and t.gradients == params  # one gradient per parameter byte
    assert t.optimizer_state == 2 * params  # Adam: two moments
    # saved for backward: the inputs of the Convs (x, b) and Relus (a, d); the Add needs none of its inputs
    assert t.activations_kept == S16 + S32 + S32 + S16
    # kept buffers stay to the end: step 3 holds x, a, b, c, d (and step 4 x, a, b, d, y)
    assert t.activations_peak == S16 + S32 + S32 + S16 + S16
    assert t.total == params + params + 2 * params + t.activations_peak
    assert t.assumptions
    plain_sgd = TrainingOptions(optimizer_state_multiplier=0.0, gradients=False)
    no_grads = liveness(typed(RESIDUAL, **RESIDUAL_WEIGHTS), {}, training=plain_sgd).training
    assert no_grads is not None and no_grads.gradients == no_grads.optimizer_state == 0


def test_to_dict_shape() -> None:
    d = liveness(typed(RESIDUAL, **RESIDUAL_WEIGHTS), {}, training=TrainingOptions()).to_dict()
    assert set(d) == {"parameter_bytes", "peak_activation_bytes", "peak_node", "peak_step", "live_at_peak",
                      "min_peak_bytes", "conservative_peak_bytes", "curve", "top_tensors", "reorder", "arena",
                      "training", "unknown_tensors"}
    assert d["curve"][1] == {"step": 1, "node": "Relu_1", "live_bytes": 20_480}
    assert d["arena"] == {"bytes": 20_480, "alignment": 64, "buffers": 6}
    assert d["reorder"]["order"][0] == "Conv_0" and d["training"]["total"] > 0


# ----------------------------------------------------------------------------------------------- random DAGs
def random_dag(seed: int) -> onnx.ModelProto:
    """A random DAG of 6-16 nodes over [1, c] float tensors: Relu, Concat, Slice (halves), Flatten/Identity views."""
    rng = random.Random(seed)
    inits = [numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([1], np.int64), "one")]
    widths: dict[str, int] = {}
    inputs = []
    for k in range(rng.randint(1, 3)):
        widths[f"in{k}"] = rng.choice([8, 16, 32, 64])
        inputs.append(oh.make_tensor_value_info(f"in{k}", TensorProto.FLOAT, [1, widths[f"in{k}"]]))
    nodes, read = [], set()

    def pick() -> str:  # mostly one of the last few tensors, sometimes any: short and long skips
        names = list(widths)
        return names[-rng.randint(1, min(len(names), 4))] if rng.random() < 0.7 else rng.choice(names)

    for i in range(rng.randint(6, 16)):
        out, op = f"t{i}", rng.choice(["Relu", "Relu", "Concat", "Slice", "Flatten", "Identity", "Sigmoid"])
        src = pick()
        if op == "Concat":
            other = pick()
            nodes.append(oh.make_node("Concat", [src, other], [out], axis=1))
            widths[out] = widths[src] + widths[other]
            read |= {src, other}
            continue
        if op == "Slice" and widths[src] >= 2:
            end = f"end{i}"
            inits.append(numpy_helper.from_array(np.array([widths[src] // 2], np.int64), end))
            nodes.append(oh.make_node("Slice", [src, "zero", end, "one"], [out]))
            widths[out] = widths[src] // 2
        else:
            nodes.append(oh.make_node("Relu" if op == "Slice" else op, [src], [out]))
            widths[out] = widths[src]
        read.add(src)
    outs = [n for n in widths if n not in read and n.startswith("t")] or [f"t{len(nodes) - 1}"]
    graph = oh.make_graph(nodes, f"dag{seed}", inputs,
                          [oh.make_tensor_value_info(o, TensorProto.FLOAT, [1, widths[o]]) for o in outs], inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("seed", range(30))
def test_random_dag_bounds_reorder_arena(seed: int) -> None:
    g = typed(random_dag(seed))
    r = liveness(g, {}, training=TrainingOptions())
    check_bounds(r)
    assert not r.unknown_tensors
    ro = r.reorder
    assert ro is not None and is_topological(g, ro.order)
    assert ro.peak_activation_bytes <= ro.graph_order_peak_bytes == r.peak_activation_bytes  # never worse
    assert ro.peak_activation_bytes >= r.min_peak_bytes  # no order beats the largest single step
    assert len(r.order) <= EXACT_MAX_NODES and ro.exact_peak_bytes is not None
    assert ro.exact_peak_bytes <= ro.greedy_peak_bytes and ro.exact_peak_bytes == ro.peak_activation_bytes
    replay = liveness(g, {}, order=ro.order, search_order=False)  # the order reported gives the peak reported
    check_bounds(replay)
    assert replay.peak_activation_bytes == ro.peak_activation_bytes
    assert r.training is not None and r.training.activations_peak >= r.peak_activation_bytes


# ----------------------------------------------------------------------------------------------- the searches
# pack() and greedy_order() are the fast forms of two plain definitions, written out below as the reference:
# best fit over every placed block (all pairs), and list scheduling that recomputes pending readers as sets.
def all_pairs_best_fit(sizes: list[int], starts: list[int], ends: list[int]) -> int:
    placed: list[tuple[int, int, int, int]] = []  # offset, size, first step, last step
    top = 0
    for k in sorted(range(len(sizes)), key=lambda k: (-sizes[k], starts[k])):  # largest first, then earlier
        size, s, e = sizes[k], starts[k], ends[k]
        clash = sorted((off, off + sz) for off, sz, ps, pe in placed if ps <= e and pe >= s)
        cursor, best, best_gap = 0, None, None
        for lo, hi in clash:
            if lo - cursor >= size and (best_gap is None or lo - cursor < best_gap):
                best, best_gap = cursor, lo - cursor
            cursor = max(cursor, hi)
        offset = cursor if best is None else best
        placed.append((offset, size, s, e))
        top = max(top, offset + size)
    return top


@pytest.mark.parametrize("seed", range(60))
def test_pack_is_all_pairs_best_fit(seed: int) -> None:
    rng = random.Random(seed)
    steps = rng.randint(1, 40)
    count = rng.randint(0, 80)
    sizes = [rng.choice([64, 128, 192, 256, 1024, 4096]) for _ in range(count)]  # few sizes: many ties
    starts = [rng.randrange(steps) for _ in range(count)]
    ends = [min(steps - 1, s + int(rng.expovariate(0.2))) for s in starts]  # mostly short lives, a few long
    assert pack(sizes, starts, ends, steps) == all_pairs_best_fit(sizes, starts, ends)


def set_greedy(g: Graph) -> list[int]:
    """Greedy list scheduling by its definition: key = bytes kept - bytes freed, recomputed from sets."""
    p = problem(g, {})
    n = len(p.nodes)
    pending: list[set[int]] = [set() for _ in p.size]
    for i, uses in enumerate(p.uses):
        for b in uses:
            pending[b].add(i)
    consumed = [bool(r) for r in pending]
    done: set[int] = set()
    order: list[int] = []
    while len(order) < n:
        ready = [i for i in range(n) if i not in done and set(p.preds[i]) <= done]
        if not ready:
            break

        def key(i: int) -> tuple[int, int]:
            freed = sum(p.size[b] for b in p.uses[i] if pending[b] == {i} and not p.output[b])
            kept = sum(p.size[b] for b in p.defs[i] if consumed[b] or p.output[b])
            return kept - freed, i

        i = min(ready, key=key)
        done.add(i)
        order.append(i)
        for b in p.uses[i]:
            pending[b].discard(i)
    return order


CHAIN = """<ir_version: 8, opset_import: ["" : 17]>
g (float[1,64] x) => (float[1,64] y) {
  a = Relu(x)
  b = Sigmoid(a)
  c = Add(b, x)
  y = Tanh(c)
}"""


@pytest.mark.parametrize("seed", range(30))
def test_greedy_order_is_its_definition(seed: int) -> None:
    g = typed(random_dag(seed))
    assert greedy_order(problem(g, {})) == set_greedy(g)


def test_a_chain_has_one_order() -> None:
    g = typed(CHAIN)  # every node reads the one before: no search can choose
    assert greedy_order(problem(g, {})) == set_greedy(g) == [0, 1, 2, 3]
    r = reorder(g, {})
    assert r.method == "graph order" and r.greedy_peak_bytes == r.graph_order_peak_bytes


def test_arena_with_long_lifetimes_is_all_pairs_best_fit() -> None:
    """1,200 nodes with skips 50 steps back and graph outputs held to the end: the arena equals the all-pairs
    best fit over lifetimes computed here from their definition."""
    n, lines, outs = 1200, [], []
    reads: dict[str, list[int]] = {"x": []}
    for i in range(n):
        prev = f"t{i - 1}" if i else "x"
        src = f"t{i - 50}" if i >= 50 and i % 7 == 0 else prev
        lines.append(f"t{i} = Add({prev}, {src})" if src != prev else f"t{i} = Relu({prev})")
        reads[f"t{i}"] = []
        reads[prev].append(i)
        reads[src].append(i)
        if i % 300 == 299:
            outs.append(f"t{i}")
    text = ('<ir_version: 8, opset_import: ["" : 17]>\n'
            f"g (float[1,64] x) => ({', '.join(f'float[1,64] {o}' for o in outs)}) {{\n" + "\n".join(lines) + "\n}")
    r = liveness(typed(text), {})
    check_bounds(r)
    starts = [0 if t == "x" else int(t[1:]) for t in reads]
    ends = [n - 1 if t in outs else max(reads[t], default=s) for s, t in zip(starts, reads, strict=True)]
    assert r.arena is not None and r.arena.buffers == n + 1
    assert r.arena.bytes == all_pairs_best_fit([64 * FP32] * (n + 1), starts, ends)


# ----------------------------------------------------------------------------------------------- heavy
@pytest.mark.heavy
def test_resnet50_matches_ideal_liveness(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    root = Path(__file__).resolve().parent.parent
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from graphcost.models.export import export_reference

    path = tmp_path / "resnet50.onnx"
    export_reference("resnet50", path)
    g = infer_shapes(load(str(path))).graph
    r = liveness(g, {})
    check_bounds(r)
    # peers.md §3.5 ideal liveness: 9,633,792 B = 3 × a 256×56×56 float map (3,211,264 B): the first bottleneck's
    # Add reads conv3's output and the downsample's output and writes its own, all three at 56×56×256.
    assert r.peak_activation_bytes == 9_633_792 == 3 * 256 * 56 * 56 * FP32
    assert r.parameter_bytes == 25_530_472 * FP32  # folded BN: peers.md §3.5's initializer count
    assert r.arena is not None and r.arena.bytes >= r.peak_activation_bytes
