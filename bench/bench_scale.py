"""Scale benchmark: graphcost, ``onnxslim --inspect`` and onnx-tool side by side on the synthetic graphs.

    python bench/bench_scale.py                                    # 10k and 100k, 3 rounds
    python bench/bench_scale.py --baseline /tmp/base --runs 2      # also an older graphcost tree

Every measurement is one fresh process under ``/usr/bin/time`` (wall s, peak RSS = ru_maxrss); each round runs
every tool once in turn, so a burst of other load hits all tools alike; the figure is the best round (the
least-disturbed one on a shared machine; the median is in the JSON). ``--baseline DIR`` runs a second
graphcost from DIR, a directory holding a ``graphcost`` package with ``passes``, ``hardware`` and ``models``
inside it (as the wheel lays them out), put first on PYTHONPATH: before and after from one run.
onnx-tool takes minutes at 100k nodes (> 300 s in issue 12): ``--slow-timeout`` (default 120 s) bounds it.

What each tool runs: graphcost ``analyze M --format json -o /dev/null``; onnxslim ``--inspect M``;
onnx-tool ``python -m onnx_tool -i M`` (from ``bench/.venv-peers``). Results: bench/out/scale-latest.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from _bytecode import compile_bytecode  # noqa: E402
from make_models import SYNTHETIC_SIZES, model_path  # noqa: E402

VENV = ROOT / ".venv" / "bin"
PEERS = HERE / ".venv-peers" / "bin"


def run_once(argv: list[str], env: dict[str, str], timeout: float) -> tuple[float, float, str]:
    """(wall s, peak RSS MiB, error) of one fresh process.

    The tool runs under ``/usr/bin/time`` in a session of its own, and a timeout kills that whole process group:
    killing only ``time`` (what ``subprocess.run(timeout=)`` does) left onnx-tool running on at 100% of a core
    through the next rounds, which slowed every tool measured after it (seen 2026-12-01)."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        proc = subprocess.Popen(["/usr/bin/time", "-f", "%e %M", "-o", tf.name, *argv], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, cwd="/tmp", env=env, start_new_session=True)
        try:
            _, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return float("nan"), float("nan"), f"killed after {timeout:.0f} s"
        fields = tf.read().split()
    if proc.returncode != 0:
        return float("nan"), float("nan"), (stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1][:200]
    return float(fields[-2]), float(fields[-1]) / 1024.0, ""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="synthetic-10k,synthetic-100k")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--baseline", help="directory holding an older graphcost package (see the docstring)")
    p.add_argument("--slow-timeout", type=float, default=120.0, help="seconds before onnx-tool counts as killed")
    p.add_argument("--timeout", type=float, default=600.0)
    a = p.parse_args(argv)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    tools: dict[str, tuple[list[str], dict[str, str]]] = {"graphcost": ([str(VENV / "graphcost"), "analyze"], env)}
    if a.baseline:
        tools["graphcost (baseline)"] = ([str(VENV / "graphcost"), "analyze"], {**env, "PYTHONPATH": a.baseline})
    tools["onnxslim --inspect"] = ([str(VENV / "onnxslim"), "--inspect"], env)
    tools["onnx-tool"] = ([str(PEERS / "python"), "-m", "onnx_tool", "-i"], env)
    compile_bytecode()  # the checkout's bytecode, as an installed copy has it
    rows: list[dict[str, object]] = []
    for model in a.models.split(","):
        path = model_path(model)
        path.read_bytes()  # page cache warm
        nodes = SYNTHETIC_SIZES[model]
        samples: dict[str, list[tuple[float, float]]] = {t: [] for t in tools}
        errors: dict[str, str] = {}
        for r in range(a.runs):
            for tool, (cmd, tool_env) in tools.items():
                if tool in errors:
                    continue
                extra = ["--format", "json", "-o", "/dev/null"] if tool.startswith("graphcost") else []
                timeout = a.slow_timeout if tool == "onnx-tool" else a.timeout
                wall, rss, err = run_once([*cmd, str(path), *extra], tool_env, timeout)
                if err:
                    errors[tool] = err
                else:
                    samples[tool].append((wall, rss))
                print(f"  {model} {tool:22s} round {r + 1}: " + (err or f"{wall:.2f} s, {rss:,.0f} MiB"),
                      file=sys.stderr, flush=True)
        for tool, got in samples.items():
            best = min(got) if got else None
            rows.append({"model": model, "nodes": nodes, "tool": tool, "runs": got, "error": errors.get(tool, ""),
                         "wall_s": best[0] if best else None, "rss_mib": min(s[1] for s in got) if got else None})
    print("| graph | tool | wall s (best) | peak RSS MiB | µs/node |\n|---|---|---:|---:|---:|")
    for row in rows:
        if row["wall_s"] is None:
            print(f"| {row['model']} | {row['tool']} | {row['error']} | | |")
            continue
        w, m, n = float(row["wall_s"]), float(row["rss_mib"]), int(row["nodes"])  # type: ignore[arg-type, call-overload]
        print(f"| {row['model']} | {row['tool']} | {w:.2f} | {m:,.0f} | {w / n * 1e6:.0f} |")
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / "scale-latest.json").write_text(json.dumps({"load_avg": os.getloadavg(), "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
