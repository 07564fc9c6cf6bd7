"""Bare ``graphcost analyze`` from two source trees side by side with ``onnxslim --inspect``, in one run.

    python bench/bench_trees.py --tree before=/tmp/h3/base --tree after=. --runs 3 M1.onnx M2.onnx ...

Each tree is a checkout of this repository (graphcost/, passes/, hardware/, models/): ``graphcost``,
``graphcost.passes``, ``graphcost.hardware`` and ``graphcost.models`` are imported from it, not from the
editable install. A round runs every tree then onnxslim on the same file, so a burst of other load hits all
alike; each figure is the best of ``--runs`` rounds: wall seconds, CPU seconds (user + sys of the child) and
peak RSS. ``--linear-packed-weight`` swaps ``graphcost.params._packed_weight`` for an equivalent linear version
(same answers): the shipped one walks the whole graph once per initializer, which is quadratic on the synthetic
graphs (86 s of 94 s at 10k nodes, 2026-12-01) and would hide every other stage. ``--check`` asserts the trees'
JSON outputs are byte-identical. This is a benchmark, never a test: the numbers depend on the machine's load.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_RUNNER = r'''
import importlib.abc, importlib.machinery, importlib.util, os, sys
SRC = os.environ["BENCH_TREE"]
MAP = {"graphcost": SRC + "/graphcost", "graphcost.passes": SRC + "/passes",
       "graphcost.hardware": SRC + "/hardware", "graphcost.models": SRC + "/models"}
class Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name in MAP:
            return importlib.util.spec_from_file_location(name, MAP[name] + "/__init__.py",
                                                          submodule_search_locations=[MAP[name]])
        parent = name.rpartition(".")[0]
        if parent in MAP:
            return importlib.machinery.PathFinder.find_spec(name, [MAP[parent]])
        return None
sys.meta_path.insert(0, Finder())
sys.path.insert(0, SRC)
if os.environ.get("BENCH_LINEAR_PW") == "1":
    import graphcost.params as P
    _memo = {}
    def _packed_weight(graph, name):
        hit = _memo.get(id(graph))
        if hit is None or hit[0] is not graph:
            names = set()
            for g in graph.walk():
                for node in g.nodes():
                    slot = P._PACKED_WEIGHT_SLOT.get((node.domain, node.op_type))
                    if slot is not None and slot < len(node.inputs):
                        names.add(node.inputs[slot])
            hit = _memo[id(graph)] = (graph, names)
        return name in hit[1]
    P._packed_weight = _packed_weight
from graphcost.cli import main
raise SystemExit(main(sys.argv[1:]))
'''


def _measure(cmd: list[str], env: dict[str, str]) -> tuple[float, float, float, int]:
    """(wall s, cpu s, peak RSS MiB, exit code) of one child process (its own rusage, from wait4)."""
    t = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, p.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+", type=Path)
    ap.add_argument("--tree", action="append", required=True, metavar="LABEL=PATH")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--linear-packed-weight", action="store_true")
    ap.add_argument("--check", action="store_true", help="assert the trees' JSON outputs are byte-identical")
    ap.add_argument("--dim", action="append", default=[], help="passed to graphcost (NAME=VALUE)")
    args = ap.parse_args()
    trees = [(t.split("=", 1)[0], str(Path(t.split("=", 1)[1]).resolve())) for t in args.tree]
    slim = str(Path(sys.executable).with_name("onnxslim"))
    runner = tempfile.NamedTemporaryFile("w", suffix=".py", delete=False)
    runner.write(_RUNNER)
    runner.close()
    out_dir = Path(tempfile.mkdtemp(prefix="bench_trees_"))
    print(f"# load average at start: {os.getloadavg()[0]:.1f}; best of {args.runs}; wall s / CPU s / peak MiB")
    print("| model | " + " | ".join(lbl for lbl, _ in trees) + " | onnxslim --inspect | "
          + " | ".join(f"{lbl} / onnxslim (wall)" for lbl, _ in trees) + " |")
    print("|---" * (2 + 2 * len(trees)) + "|")
    for model in args.models:
        with model.open("rb") as f:  # page cache warm, in pieces: a child forked from a big parent would
            while f.read(1 << 24):     # count the parent's pages in its peak RSS
                pass
        best: dict[str, tuple[float, float, float, int]] = {}
        for _ in range(args.runs):
            for label, tree in trees:
                env = {**os.environ, "BENCH_TREE": tree, "BENCH_LINEAR_PW": "1" if args.linear_packed_weight else "0"}
                out = out_dir / f"{label}-{model.stem}.json"
                cmd = [sys.executable, runner.name, "analyze", str(model), *(f"--dim={d}" for d in args.dim),
                       "--format", "json", "-o", str(out)]
                m = _measure(cmd, env)
                if label not in best or m[0] < best[label][0]:
                    best[label] = m
            m = _measure([slim, "--inspect", str(model)], dict(os.environ))
            if "onnxslim" not in best or m[0] < best["onnxslim"][0]:
                best["onnxslim"] = m
        if args.check and len(trees) > 1 and all(best[lbl][3] == 0 for lbl, _ in trees):
            texts = {(out_dir / f"{lbl}-{model.stem}.json").read_bytes() for lbl, _ in trees}
            assert len(texts) == 1, f"{model.name}: the trees' JSON differ"
        cell = {k: (f"{v[0]:.2f} / {v[1]:.2f} / {v[2]:.0f}" if v[3] == 0 else f"exit {v[3]}") for k, v in best.items()}
        ratio = [f"{best[lbl][0] / best['onnxslim'][0]:.2f}" for lbl, _ in trees]
        print(f"| {model.name} | " + " | ".join(cell[lbl] for lbl, _ in trees) + f" | {cell['onnxslim']} | "
              + " | ".join(ratio) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
