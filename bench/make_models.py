"""Build the benchmark models into bench/data/ (gitignored).

    python bench/make_models.py                 # everything that is missing
    python bench/make_models.py --only synthetic --force

Models (all random weights, deterministic seeds):

- ``gpt2-medium.onnx``: GPT-2-medium (24 layers, d 1024, 16 heads, vocab 50257, 354.8 M unique params) from
  ``models.reference``'s GPT-2 building blocks, exported with the legacy exporter (``models.export``) at batch 1,
  seq 128, opset 17, weights embedded. With constant folding on (the default) the tied LM head becomes a second,
  transposed copy of wte, so the file holds 406.3 M floats = 1.62 GB, under the 2 GiB protobuf limit; if it ever
  went over, the script re-exports with constant folding off (one wte, plus a Transpose node).
- ``gpt2-large/model.onnx``: GPT-2-large (36 layers, d 1280, 20 heads, 774 M unique params), same exporter.
  It is over 2 GiB, so the legacy exporter writes the weights as external data: one file per tensor next to
  ``model.onnx`` (3.35 GB in all). This is the layout shared/research/peers.md §3.4 measured the peers on.
- ``synthetic-{10k,30k,100k}.onnx``: exactly N nodes of a transformer-ish block repeated N/10 times (LayerNorm,
  MatMul, Add, Relu, Reshape, Transpose, Softmax, Transpose, Reshape, residual Add) on [1, 8, 32] activations,
  each block with its own small initializers (a 32x32 weight of 4 KiB and five tiny ones), built with onnx.helper.

Each torch export runs in a child process of its own, so the big exports never share a process (and their
memory is returned to the OS between them). GPT-2-large peaks at about 4.3 GiB RSS while exporting (measured):
run it alone, not next to other heavy jobs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DATA = HERE / "data"
PROTOBUF_LIMIT = 2**31  # 2 GiB

SYNTHETIC_SIZES = {"synthetic-10k": 10_000, "synthetic-30k": 30_000, "synthetic-100k": 100_000}
GPT2_CONFIGS = {
    "gpt2-medium": dict(n_embd=1024, n_layer=24, n_head=16),
    "gpt2-large": dict(n_embd=1280, n_layer=36, n_head=20),
}
ALL = ("gpt2-medium", "gpt2-large", *SYNTHETIC_SIZES)


def model_path(name: str) -> Path:
    """Where ``name`` lives in bench/data (shared with bench/run.py)."""
    if name == "gpt2-large":
        return DATA / "gpt2-large" / "model.onnx"
    return DATA / f"{name}.onnx"


# ----------------------------------------------------------------------------------------------------------------
# GPT-2 (torch, legacy exporter)
# ----------------------------------------------------------------------------------------------------------------


def build_gpt2(name: str, seed: int = 0):  # type: ignore[no-untyped-def]
    """GPT-2 of the given size from models.reference's own blocks (its factory only builds the small config)."""
    sys.path.insert(0, str(ROOT))
    from graphcost.models.reference import GPT2Config, GPT2LMHeadModel, _seeded

    cfg = GPT2Config(**GPT2_CONFIGS[name])
    return _seeded(lambda: GPT2LMHeadModel(cfg), seed)


def export_gpt2(name: str) -> None:
    import torch

    sys.path.insert(0, str(ROOT))
    from graphcost.models.export import export_reference
    from graphcost.models.reference import param_count

    torch.set_num_threads(2)
    out = model_path(name)
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    model = build_gpt2(name)
    print(f"[{name}] built: {param_count(model):,} unique params in {time.perf_counter() - t0:.1f} s", flush=True)
    t0 = time.perf_counter()
    # "gpt2_small" only supplies the spec (input/output names, vocab for the example input); the model is ours.
    export_reference("gpt2_small", out, model=model, batch=1, seq=128, opset=17, constant_folding=True)
    size = _model_bytes(out)
    print(f"[{name}] exported in {time.perf_counter() - t0:.1f} s: {size / 1e9:.3f} GB "
          f"({len(list(out.parent.iterdir())) if name == 'gpt2-large' else 1} files)", flush=True)
    if name == "gpt2-medium" and out.stat().st_size >= PROTOBUF_LIMIT:
        print(f"[{name}] {out.stat().st_size:,} B is over the 2 GiB protobuf limit: re-exporting with constant "
              "folding off (the tied LM head then stays one tensor)", flush=True)
        export_reference("gpt2_small", out, model=model, batch=1, seq=128, opset=17, constant_folding=False)
    if name == "gpt2-medium" and out.stat().st_size >= PROTOBUF_LIMIT:
        raise SystemExit(f"{out}: still over 2 GiB")
    _check_layout(name, out)


def _model_bytes(path: Path) -> int:
    if path.parent.name == "gpt2-large":
        return sum(p.stat().st_size for p in path.parent.iterdir() if p.is_file())
    return path.stat().st_size


def _check_layout(name: str, path: Path) -> None:
    """Structure-only sanity check: node count, and embedded vs external weights as intended."""
    import onnx

    m = onnx.load(str(path), load_external_data=False) if name == "gpt2-large" else None
    if m is not None:
        n_ext = sum(1 for t in m.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL)
        print(f"[{name}] {len(m.graph.node)} nodes, {len(m.graph.initializer)} initializers, {n_ext} external; "
              f"model.onnx itself {path.stat().st_size / 1e6:.2f} MB", flush=True)
        if n_ext == 0:
            raise SystemExit(f"{path}: expected external data")
    else:
        print(f"[{name}] {path.stat().st_size:,} B embedded (limit {PROTOBUF_LIMIT:,})", flush=True)


# ----------------------------------------------------------------------------------------------------------------
# Synthetic graphs (onnx.helper)
# ----------------------------------------------------------------------------------------------------------------

SEQ, D, HEADS = 8, 32, 4
NODES_PER_BLOCK = 10


def build_synthetic(n_nodes: int, seed: int = 0):  # type: ignore[no-untyped-def]
    """A valid opset-17 model with exactly ``n_nodes`` nodes (a multiple of 10)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    if n_nodes % NODES_PER_BLOCK:
        raise ValueError(f"n_nodes must be a multiple of {NODES_PER_BLOCK}")
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    x = "x"
    split_shape = np.array([1, SEQ, HEADS, D // HEADS], dtype=np.int64)
    merge_shape = np.array([1, SEQ, D], dtype=np.int64)
    for b in range(n_nodes // NODES_PER_BLOCK):
        p = f"b{b}"
        inits += [
            numpy_helper.from_array(rng.uniform(0.8, 1.2, D).astype(np.float32), f"{p}.ln.scale"),
            numpy_helper.from_array(rng.normal(0, 0.02, D).astype(np.float32), f"{p}.ln.bias"),
            numpy_helper.from_array(rng.normal(0, 0.02, (D, D)).astype(np.float32), f"{p}.fc.weight"),
            numpy_helper.from_array(rng.normal(0, 0.02, D).astype(np.float32), f"{p}.fc.bias"),
            numpy_helper.from_array(split_shape, f"{p}.split_shape"),
            numpy_helper.from_array(merge_shape, f"{p}.merge_shape"),
        ]
        t = [f"{p}.t{i}" for i in range(NODES_PER_BLOCK)]
        nodes += [
            helper.make_node("LayerNormalization", [x, f"{p}.ln.scale", f"{p}.ln.bias"], [t[0]], f"{p}/ln",
                             axis=-1, epsilon=1e-5),
            helper.make_node("MatMul", [t[0], f"{p}.fc.weight"], [t[1]], f"{p}/fc/MatMul"),
            helper.make_node("Add", [t[1], f"{p}.fc.bias"], [t[2]], f"{p}/fc/Add"),
            helper.make_node("Relu", [t[2]], [t[3]], f"{p}/relu"),
            helper.make_node("Reshape", [t[3], f"{p}.split_shape"], [t[4]], f"{p}/split"),
            helper.make_node("Transpose", [t[4]], [t[5]], f"{p}/to_heads", perm=[0, 2, 1, 3]),
            helper.make_node("Softmax", [t[5]], [t[6]], f"{p}/softmax", axis=-1),
            helper.make_node("Transpose", [t[6]], [t[7]], f"{p}/from_heads", perm=[0, 2, 1, 3]),
            helper.make_node("Reshape", [t[7], f"{p}.merge_shape"], [t[8]], f"{p}/merge"),
            helper.make_node("Add", [t[8], x], [t[9]], f"{p}/residual"),
        ]
        x = t[9]
    graph = helper.make_graph(
        nodes, f"synthetic_{n_nodes}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, SEQ, D])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, SEQ, D])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="graphcost-bench")
    model.ir_version = 8
    return model


def make_synthetic(name: str) -> None:
    import onnx

    n = SYNTHETIC_SIZES[name]
    t0 = time.perf_counter()
    model = build_synthetic(n)
    onnx.checker.check_model(model)
    out = model_path(name)
    out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(out))
    print(f"[{name}] {len(model.graph.node):,} nodes, {len(model.graph.initializer):,} initializers, "
          f"{out.stat().st_size / 1e6:.1f} MB in {time.perf_counter() - t0:.1f} s", flush=True)


# ----------------------------------------------------------------------------------------------------------------


def make_one(name: str) -> None:
    if name in SYNTHETIC_SIZES:
        make_synthetic(name)
    else:
        export_gpt2(name)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default=",".join(ALL), help=f"comma-separated subset of: {', '.join(ALL)}")
    p.add_argument("--force", action="store_true", help="rebuild even if the file exists")
    p.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)  # the child's own flag
    a = p.parse_args(argv)
    names = [n.strip() for n in a.only.split(",") if n.strip()]
    unknown = sorted(set(names) - set(ALL))
    if unknown:
        p.error(f"unknown model(s): {', '.join(unknown)}")
    if a.in_process:
        for n in names:
            make_one(n)
        return 0
    DATA.mkdir(parents=True, exist_ok=True)
    for n in names:
        path = model_path(n)
        if path.exists() and not a.force:
            print(f"[{n}] exists: {path.relative_to(ROOT)} (use --force to rebuild)")
            continue
        if n == "gpt2-large" and path.parent.exists():  # stale external-data files from an earlier export
            for f in path.parent.iterdir():
                f.unlink()
        # One child process per model: torch exports never share a process or its memory.
        r = subprocess.run([sys.executable, __file__, "--in-process", "--only", n], env={**os.environ})
        if r.returncode != 0:
            print(f"[{n}] failed (exit {r.returncode})", file=sys.stderr)
            return r.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
