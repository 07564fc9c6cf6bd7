"""Audit throughput and worker memory: ``--jobs 1`` against ``--jobs 2`` on a zoo of 100 small models.

    python bench/bench_audit.py                 # builds the zoo in a temp dir, prints the table, JSON in bench/out/
    python bench/bench_audit.py --models 40     # a smaller zoo

The zoo: 100 models built with onnx.helper from a fixed seed, four kinds in turn (MLP, conv net, attention
stack, residual MLP), about 100-450 nodes and 100-1000 KB of float32 weights each (the shipped
models/tiny_transformer.onnx: 321 nodes, 540 KB).
Each run is one fresh ``graphcost audit`` process (new output folder, page cache warmed by a first read of the
zoo); the settings alternate ``--repeat`` times (default 3) and the speed-up is the ratio of the best wall
times, start-up included (the best is the run least disturbed by other work on a shared machine). Peak RSS
per worker is each child's VmHWM (timings.jsonl). Then, when ``bench/data/gpt2-large/model.onnx`` exists
(``python bench/make_models.py --only gpt2-large``; 3.2 GB of external data), the same for one audit of it.

Acceptance (issue): on 2 cores, ``--jobs 2`` at least 1.7x faster than ``--jobs 1``; worker memory bounded on
the large model.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
from onnx import TensorProto, numpy_helper

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
LARGE = HERE / "data" / "gpt2-large" / "model.onnx"
SPEEDUP_TARGET = 1.7

CLI = (
    "import sys, graphcost.cli as c\n"
    "sys.exit(c.main(sys.argv[1:]))\n"
)


class _Builder:
    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.n = 0

    def name(self, base: str) -> str:
        self.n += 1
        return f"{base}{self.n}"

    def weight(self, *shape: int) -> str:
        name = self.name("w")
        self.inits.append(numpy_helper.from_array(self.rng.standard_normal(shape).astype(np.float32), name))
        return name

    def op(self, op: str, inputs: list[str], **attrs: object) -> str:
        out = self.name(op.lower())
        self.nodes.append(oh.make_node(op, inputs, [out], name=self.name(op), **attrs))
        return out


def _mlp(b: _Builder, x: str, width: int, blocks: int, residual: bool) -> str:
    for _ in range(blocks):
        h = b.op("Relu", [b.op("Add", [b.op("MatMul", [x, b.weight(width, width)]), b.weight(width)])])
        x = b.op("Add", [x, h]) if residual else h
    return x


def _conv(b: _Builder, x: str, channels: int, blocks: int) -> str:
    for _ in range(blocks):
        y = b.op("Conv", [x, b.weight(channels, channels, 3, 3), b.weight(channels)], pads=[1, 1, 1, 1])
        x = b.op("Relu", [b.op("BatchNormalization", [y, b.weight(channels), b.weight(channels), b.weight(channels),
                                                      b.weight(channels)])])
    return b.op("GlobalAveragePool", [x])


def _attention(b: _Builder, x: str, d: int, blocks: int) -> str:
    for _ in range(blocks):
        q, k, v = (b.op("MatMul", [x, b.weight(d, d)]) for _ in range(3))
        kt = b.op("Transpose", [k], perm=[0, 2, 1])
        s = b.op("Softmax", [b.op("MatMul", [q, kt])], axis=-1)
        o = b.op("MatMul", [b.op("MatMul", [s, v]), b.weight(d, d)])
        x = b.op("LayerNormalization", [b.op("Add", [x, o]), b.weight(d), b.weight(d)], axis=-1)
    return x


def make_model(i: int) -> onnx.ModelProto:
    """Model i of the zoo: kind i % 4, width and depth from a seed (about 100-450 nodes, like small exports)."""
    rng = np.random.default_rng(i)
    b = _Builder(rng)
    kind = i % 4
    if kind == 0 or kind == 3:
        width = int(rng.choice([24, 32, 48]))
        shape: list[object] = ["batch", width]
        out = _mlp(b, "x", width, int(rng.integers(30, 100)), residual=kind == 3)
        out_shape: list[object] = ["batch", width]
    elif kind == 1:
        c = int(rng.choice([8, 12, 16]))
        shape = ["batch", c, 16, 16]
        out = _conv(b, "x", c, int(rng.integers(35, 110)))
        out_shape = ["batch", c, 1, 1]
    else:
        d = int(rng.choice([24, 32, 48]))
        shape = ["batch", 32, d]
        out = _attention(b, "x", d, int(rng.integers(10, 35)))
        out_shape = ["batch", 32, d]
    b.nodes.append(oh.make_node("Identity", [out], ["y"], name="out"))
    g = oh.make_graph(b.nodes, f"zoo{i}", [oh.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                      [oh.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], b.inits)
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)], producer_name="bench_audit")


def build_zoo(folder: Path, n: int) -> int:
    total = 0
    for i in range(n):
        path = folder / f"kind{i % 4}" / f"model{i:03d}.onnx"
        path.parent.mkdir(parents=True, exist_ok=True)
        onnx.save(make_model(i), str(path))
        total += path.stat().st_size
    return total


def run_audit(paths: list[str], out: Path, jobs: int) -> dict[str, object]:
    cmd = [sys.executable, "-c", CLI, "audit", *paths, "--out", str(out), "--jobs", str(jobs)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"audit failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    timings = [json.loads(line) for line in (out / "timings.jsonl").read_text().splitlines()]
    rss = [t["peak_rss_bytes"] for t in timings if t.get("peak_rss_bytes")]
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    phase = re.search(r"analyzed \d+ this run in ([0-9.]+) s", proc.stdout)
    return {"jobs": jobs, "wall_s": round(wall, 3), "analyze_s": float(phase.group(1)) if phase else None,
            "models": len(rows),
            "ok": sum(r["status"] == "ok" for r in rows),
            "worker_elapsed_s_median": round(statistics.median(t["elapsed_s"] for t in timings), 4),
            "worker_peak_rss_mib_max": round(max(rss) / 2**20, 1) if rss else None,
            "worker_peak_rss_mib_median": round(statistics.median(rss) / 2**20, 1) if rss else None}


def _warm(folder: Path) -> None:
    for p in folder.rglob("*"):
        if p.is_file():
            with open(p, "rb") as f:
                while f.read(1 << 24):
                    pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each setting; the best of each is compared")
    ap.add_argument("--no-large", action="store_true", help="skip the external-data model")
    args = ap.parse_args()
    result: dict[str, object] = {"cpus": len(os.sched_getaffinity(0)), "load_avg_before": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="bench-audit-") as tmp:
        zoo = Path(tmp) / "zoo"
        size = build_zoo(zoo, args.models)
        _warm(zoo)
        print(f"zoo: {args.models} models, {size / 2**20:.1f} MiB ({size / args.models / 1024:.0f} KiB each)")
        runs: list[dict[str, object]] = []
        for rep in range(args.repeat):  # alternate, so a load change on a shared machine hits both settings
            for j in (1, 2):
                r = run_audit([str(zoo)], Path(tmp) / f"out-j{j}-{rep}", j)
                runs.append(r)
                print(f"--jobs {j}: {r['wall_s']:7.2f} s wall ({r['analyze_s']} s analysis phase), "
                      f"{r['ok']}/{r['models']} ok, worker median "
                      f"{r['worker_elapsed_s_median']} s, worker peak RSS median {r['worker_peak_rss_mib_median']} "
                      f"MiB, max {r['worker_peak_rss_mib_max']} MiB", flush=True)
        same = sorted((Path(tmp) / "out-j1-0" / "results.jsonl").read_text().splitlines()) == \
            sorted((Path(tmp) / "out-j2-0" / "results.jsonl").read_text().splitlines())
        best = {j: min(float(r["wall_s"]) for r in runs if r["jobs"] == j) for j in (1, 2)}  # type: ignore[arg-type]
        phase = {j: min(float(r["analyze_s"] or "nan") for r in runs if r["jobs"] == j) for j in (1, 2)}  # type: ignore[arg-type]
        speedup = best[1] / best[2]
        print(f"speed-up --jobs 2 vs 1 (best of {args.repeat} each): {best[1]:.2f} s / {best[2]:.2f} s = "
              f"{speedup:.2f}x end to end (target ≥ {SPEEDUP_TARGET}x); analysis phase {phase[1]:.2f} s / "
              f"{phase[2]:.2f} s = {phase[1] / phase[2]:.2f}x; rows identical: {same}")
        result.update({"zoo_models": args.models, "zoo_bytes": size, "runs": runs, "best_wall_s": best,
                       "best_analyze_s": phase, "speedup": round(speedup, 3),
                       "analysis_phase_speedup": round(phase[1] / phase[2], 3), "rows_identical": same})
        if LARGE.exists() and not args.no_large:
            _warm(LARGE.parent)
            large = run_audit([str(LARGE)], Path(tmp) / "out-large", 1)
            print(f"large external-data model {LARGE.relative_to(HERE.parent)}: {large['wall_s']} s wall, "
                  f"worker peak RSS {large['worker_peak_rss_mib_max']} MiB")
            result["large"] = {"path": str(LARGE.relative_to(HERE.parent)), **large}
        else:
            why = "--no-large" if args.no_large else "not built"
            print(f"large external-data model: skipped ({LARGE.relative_to(HERE.parent)}: {why})")
    result["load_avg_after"] = os.getloadavg()
    OUT.mkdir(exist_ok=True)
    (OUT / "audit.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0 if speedup >= SPEEDUP_TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
