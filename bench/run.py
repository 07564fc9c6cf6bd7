"""Side-by-side benchmark: graphcost against onnx-tool, onnxslim and onnxsim on the same files.

    bash bench/peers_env.sh            # once: the peers in bench/.venv-peers (not in the project venv)
    python bench/make_models.py        # once: bench/data/*.onnx
    python bench/run.py                # this: table on stdout, JSON in bench/out/

Every measurement is one fresh process under ``/usr/bin/time -f "%e %M %U %S"`` (wall seconds, peak RSS =
ru_maxrss, user+sys CPU), stdout discarded, page cache warmed by reading the model's files first. ``--runs``
rounds (default 3) each run every tool once in turn, so a burst of other load hits all tools alike; the figure
is the median. What each tool runs (the modes of shared/research/peers.md §3.4):

- graphcost:   ``graphcost analyze M --format json -o /dev/null``
- onnx-tool:   ``python -m onnx_tool -i M`` (load + shape inference + profile + per-node table)
- onnxslim:    ``onnxslim --inspect M`` (model summary)
- onnxsim:     ``ModelInfo(onnx.load(M))`` (op counts, MACs, memory access, footprint; the numbers its simplify
  summary prints)
- onnxsim-structure (external-data model only): ``ModelInfo(onnx.load(M, load_external_data=False))``, the cheap
  mode peers.md also measured; it is the lowest-RSS peer there, so it is counted as a peer in the ratios.

Acceptance (issue): on each GPT-2, graphcost time <= 0.5x the fastest peer's and peak RSS <= 0.25x the lowest
peer's; on the external-data model peak RSS < 400 MiB; the synthetic 100k-node graph in < 10 s, with time per
node flat from 10k to 100k (here: max/min of the per-node times at 10k/30k/100k <= 1.3; reported on process wall
and CPU time and on the in-process ``analyze()`` + ``to_json()`` time, which leaves out interpreter start and
imports). Results: bench/out/results-<time>.json and bench/out/latest.json; the markdown table on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "out"
PEERS_VENV = HERE / ".venv-peers"
sys.path.insert(0, str(HERE))
from make_models import SYNTHETIC_SIZES, model_path  # noqa: E402

GPT2 = ("gpt2-medium", "gpt2-large")
EXTERNAL = {"gpt2-large"}
TIME_RATIO, RSS_RATIO, EXTERNAL_RSS_MIB = 0.5, 0.25, 400.0
SYNTH_LIMIT_S, FLAT_LIMIT = 10.0, 1.3

ONNXSIM_SNIPPET = r"""
import sys, onnx
from onnxsim.model_info import ModelInfo
path, mode = sys.argv[1], sys.argv[2]
m = onnx.load(path, load_external_data=(mode == "full"))
i = ModelInfo(m)
print(dict(i.op_nums), i.model_size, i.macs, i.mem_access, i.memory_footprint)
"""

INPROC_SNIPPET = r"""
import sys, time
t0 = time.perf_counter()
import graphcost
t1, c1 = time.perf_counter(), time.process_time()
text = graphcost.analyze(sys.argv[1]).to_json()
t2, c2 = time.perf_counter(), time.process_time()
print(f"{t1 - t0:.6f} {t2 - t1:.6f} {c2 - c1:.6f} {len(text)}")
"""


@dataclass
class Measurement:
    tool: str
    model: str
    wall_s: float  # median
    rss_mib: float  # median
    cpu_s: float = float("nan")  # median user+sys CPU seconds (less sensitive to other load on the machine)
    runs: list[tuple[float, float, float]] = field(default_factory=list)  # (wall s, RSS MiB, user+sys CPU s)
    ok: bool = True
    error: str = ""
    command: str = ""


def _graphcost_bin() -> str:
    for cand in (Path(sys.executable).parent / "graphcost", ROOT / ".venv" / "bin" / "graphcost"):
        if cand.exists():
            return str(cand)
    found = shutil.which("graphcost")
    if not found:
        raise SystemExit("graphcost CLI not found: run with the project venv's python")
    return found


def _graphcost_python() -> str:
    gc = Path(_graphcost_bin())
    py = gc.parent / "python"
    return str(py) if py.exists() else sys.executable


def tool_commands(model: str, path: Path) -> dict[str, list[str]]:
    """tool name -> argv, for the tools that apply to ``model``."""
    p = str(path)
    py = str(PEERS_VENV / "bin" / "python")
    cmds = {
        "graphcost": [_graphcost_bin(), "analyze", p, "--format", "json", "-o", "/dev/null"],
        "onnx-tool": [py, "-m", "onnx_tool", "-i", p],
        "onnxslim": [str(PEERS_VENV / "bin" / "onnxslim"), "--inspect", p],
        "onnxsim": [py, "-c", ONNXSIM_SNIPPET, p, "full"],
    }
    if model in EXTERNAL:
        cmds["onnxsim-structure"] = [py, "-c", ONNXSIM_SNIPPET, p, "structure"]
    return cmds


def model_files(path: Path) -> list[Path]:
    return [f for f in path.parent.iterdir() if f.is_file()] if path.parent.name == "gpt2-large" else [path]


def warm_cache(path: Path) -> None:
    for f in model_files(path):
        with open(f, "rb") as fh:
            while fh.read(16 << 20):
                pass


def time_once(argv: list[str], timeout: float) -> tuple[float, float, float, str]:
    """(wall s, peak RSS MiB, user+sys CPU s, error) of one fresh process under /usr/bin/time."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        try:
            r = subprocess.run(["/usr/bin/time", "-f", "%e %M %U %S", "-o", tf.name, *argv], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, timeout=timeout, cwd=ROOT)
        except subprocess.TimeoutExpired:
            return float("nan"), float("nan"), float("nan"), f"timeout after {timeout:.0f} s"
        fields = tf.read().split()
    if r.returncode != 0:
        err = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
        return float("nan"), float("nan"), float("nan"), f"exit {r.returncode}: {err[:300]}"
    wall, kib, user, system = (float(x) for x in fields[-4:])
    return wall, kib / 1024.0, user + system, ""


def summarize(tool: str, model: str, argv: list[str], samples: list[tuple[float, float, float]],
              error: str = "") -> Measurement:
    if error or not samples:
        return Measurement(tool, model, float("nan"), float("nan"), float("nan"), samples, False,
                           error or "no samples", _show(argv))
    return Measurement(tool, model, statistics.median(s[0] for s in samples),
                       statistics.median(s[1] for s in samples), statistics.median(s[2] for s in samples),
                       samples, True, "", _show(argv))


def measure_round_robin(model: str, commands: dict[str, list[str]], runs: int, timeout: float
                        ) -> list[Measurement]:
    """``runs`` rounds, each running every tool once in turn, so a burst of other load on the machine hits
    all tools alike instead of one tool's three runs. A tool that fails is dropped from later rounds."""
    samples: dict[str, list[tuple[float, float, float]]] = {t: [] for t in commands}
    errors: dict[str, str] = {}
    for r in range(runs):
        for tool, argv in commands.items():
            if tool in errors:
                continue
            wall, rss, cpu, err = time_once(argv, timeout)
            if err:
                errors[tool] = err
                print(f"  {model:12s} {tool:18s} run {r + 1}: FAILED {err}", file=sys.stderr, flush=True)
                continue
            samples[tool].append((wall, rss, cpu))
            print(f"  {model:12s} {tool:18s} run {r + 1}: {wall:.2f} s wall, {cpu:.2f} s CPU, {rss:,.0f} MiB",
                  file=sys.stderr, flush=True)
    return [summarize(t, model, commands[t], samples[t], errors.get(t, "")) for t in commands]


def _show(argv: list[str]) -> str:
    out = []
    for a in argv:
        if "\n" in a:
            a = "<onnxsim ModelInfo snippet>"
        a = a.replace(str(ROOT) + "/", "")
        out.append(a)
    return " ".join(out)


def inprocess(path: Path, runs: int, timeout: float) -> dict[str, float]:
    """Median in-process import time and analyze()+to_json() wall and CPU time (fresh process each run)."""
    imports, work, cpu = [], [], []
    for _ in range(runs):
        r = subprocess.run([_graphcost_python(), "-c", INPROC_SNIPPET, str(path)], capture_output=True, text=True,
                           timeout=timeout, cwd=ROOT)
        if r.returncode != 0:
            raise RuntimeError(f"in-process graphcost on {path.name} failed: {r.stderr.strip()[-300:]}")
        a, b, c, _ = r.stdout.split()
        imports.append(float(a))
        work.append(float(b))
        cpu.append(float(c))
    return {"import_s": statistics.median(imports), "analyze_s": statistics.median(work),
            "analyze_cpu_s": statistics.median(cpu)}


def versions() -> dict[str, object]:
    code = ("import json,sys\nfrom importlib.metadata import version as v, PackageNotFoundError as E\nout={}\n"
            "for p in sys.argv[1:]:\n  try: out[p]=v(p)\n  except E: out[p]=None\nprint(json.dumps(out))")
    ours = subprocess.run([_graphcost_python(), "-c", code, "graphcost", "onnx", "protobuf", "numpy", "sympy",
                           "networkx", "onnxruntime"], capture_output=True, text=True).stdout
    peers = subprocess.run([str(PEERS_VENV / "bin" / "python"), "-c", code, "onnx-tool", "onnxslim", "onnxsim",
                            "onnx-shape-inference", "onnx-ir", "onnx", "protobuf", "numpy", "sympy"],
                           capture_output=True, text=True).stdout
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "--", "graphcost", "passes",
                            "hardware"], capture_output=True, text=True, cwd=ROOT)
    return {"project_venv": json.loads(ours or "{}"), "peers_venv": json.loads(peers or "{}"),
            "python": platform.python_version(), "graphcost_commit": git.stdout.strip(),
            "graphcost_uncommitted": sorted(line[3:] for line in dirty.stdout.splitlines())}


def machine() -> dict[str, object]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = int(line.split()[1]) // 1024
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "mem_mib": mem, "kernel": platform.release(),
            "load_avg_at_start": os.getloadavg()}


def _fmt_s(x: float) -> str:
    return "n/a" if x != x else (f"{x:.2f}" if x < 100 else f"{x:.0f}")


def _fmt_mib(x: float) -> str:
    return "n/a" if x != x else (f"{x:,.0f}" if x >= 10 else f"{x:.1f}")


def gpt2_rows(results: list[Measurement], model: str) -> dict[str, object]:
    mine = next(m for m in results if m.model == model and m.tool == "graphcost")
    peers = [m for m in results if m.model == model and m.tool != "graphcost" and m.ok]
    out: dict[str, object] = {"model": model, "graphcost_ok": mine.ok}
    if not peers or not mine.ok:
        out["verdict"] = "incomplete"
        return out
    fastest = min(peers, key=lambda m: m.wall_s)
    lowest = min(peers, key=lambda m: m.rss_mib)
    t_ratio, m_ratio = mine.wall_s / fastest.wall_s, mine.rss_mib / lowest.rss_mib
    out.update(fastest_peer=fastest.tool, fastest_peer_s=fastest.wall_s, lowest_peer=lowest.tool,
               lowest_peer_mib=lowest.rss_mib, time_ratio=t_ratio, rss_ratio=m_ratio,
               time_pass=t_ratio <= TIME_RATIO, rss_pass=m_ratio <= RSS_RATIO)
    # The same ratios against the peers' default (full-load) modes only, for reference.
    default = [m for m in peers if m.tool != "onnxsim-structure"]
    if len(default) != len(peers):
        lo = min(default, key=lambda m: m.rss_mib)
        out.update(lowest_default_peer=lo.tool, rss_ratio_default=mine.rss_mib / lo.rss_mib)
    if model in EXTERNAL:
        out["external_rss_pass"] = mine.rss_mib < EXTERNAL_RSS_MIB
    return out


def _verdict(ok: object) -> str:
    return "PASS" if ok else "FAIL"


def markdown(results: list[Measurement], summary: list[dict[str, object]], synth: list[dict[str, object]],
             synth_verdict: dict[str, object]) -> str:
    lines: list[str] = []
    if results:
        lines += ["| model | tool | wall s (median) | CPU s (user+sys) | peak RSS MiB | graphcost ÷ this "
                  "(wall / RSS) |", "|---|---|---:|---:|---:|---|"]
    for model in GPT2:
        rows = [m for m in results if m.model == model]
        gc = next((m for m in rows if m.tool == "graphcost"), None)
        for m in rows:
            if not m.ok:
                lines.append(f"| {model} | {m.tool} | failed | | | {m.error} |")
                continue
            ratio = ""
            if gc is not None and gc.ok and m is not gc:
                ratio = f"{gc.wall_s / m.wall_s:.3f} / {gc.rss_mib / m.rss_mib:.3f}"
            lines.append(f"| {model} | {'**graphcost**' if m is gc else m.tool} | {_fmt_s(m.wall_s)} | "
                         f"{_fmt_s(m.cpu_s)} | {_fmt_mib(m.rss_mib)} | {ratio} |")
    if summary:
        lines += ["", "| acceptance line | measured | target | verdict |", "|---|---|---|---|"]
    for s in summary:
        if s.get("verdict") == "incomplete":
            lines.append(f"| {s['model']} | incomplete | | n/a |")
            continue
        lines.append(f"| {s['model']}: wall time vs fastest peer ({s['fastest_peer']}, "
                     f"{_fmt_s(s['fastest_peer_s'])} s) | {s['time_ratio']:.3f}× | ≤ {TIME_RATIO}× | "
                     f"{_verdict(s['time_pass'])} |")
        lines.append(f"| {s['model']}: peak RSS vs lowest peer ({s['lowest_peer']}, "
                     f"{_fmt_mib(s['lowest_peer_mib'])} MiB) | {s['rss_ratio']:.3f}× | ≤ {RSS_RATIO}× | "
                     f"{_verdict(s['rss_pass'])} |")
        if "rss_ratio_default" in s:
            lines.append(f"| {s['model']}: peak RSS vs lowest full-load peer ({s['lowest_default_peer']}), "
                         f"for reference | {s['rss_ratio_default']:.3f}× | ≤ {RSS_RATIO}× | "
                         f"{_verdict(s['rss_ratio_default'] <= RSS_RATIO).lower()} |")
        if "external_rss_pass" in s:
            gc = next(m for m in results if m.model == s["model"] and m.tool == "graphcost")
            lines.append(f"| {s['model']}: graphcost peak RSS | {_fmt_mib(gc.rss_mib)} MiB | "
                         f"< {EXTERNAL_RSS_MIB:.0f} MiB | {_verdict(s['external_rss_pass'])} |")
    if synth:
        if lines:
            lines.append("")
        lines += ["| synthetic graph | nodes | graphcost wall s | CPU s | peak RSS MiB | µs/node wall | µs/node CPU "
                  "| in-process analyze+to_json: wall s / CPU s | µs/node in-process CPU |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for s in synth:
            lines.append(f"| {s['model']} | {s['nodes']:,} | {_fmt_s(s['wall_s'])} | {_fmt_s(s['cpu_s'])} | "
                         f"{_fmt_mib(s['rss_mib'])} | {s['us_per_node_wall']:.0f} | {s['us_per_node_cpu']:.0f} | "
                         f"{_fmt_s(s['analyze_s'])} / {_fmt_s(s['analyze_cpu_s'])} | "
                         f"{s['us_per_node_analyze_cpu']:.0f} |")
        v = synth_verdict
        lines += ["", "| acceptance line | measured | target | verdict |", "|---|---|---|---|"]
        if "wall_100k_s" in v:
            lines.append(f"| 100k-node graph, wall | {v['wall_100k_s']:.2f} s | < {SYNTH_LIMIT_S:.0f} s | "
                         f"{_verdict(v['wall_100k_pass'])} |")
        for key, label in (("wall", "process wall"), ("cpu", "process CPU"), ("analyze", "in-process wall"),
                           ("analyze_cpu", "in-process CPU")):
            if f"flat_{key}" in v:
                lines.append(f"| time/node flat 10k→100k (max/min of µs/node, {label}) | {v[f'flat_{key}']:.2f} | "
                             f"≤ {FLAT_LIMIT} | {_verdict(v[f'flat_{key}_pass'])} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join((*GPT2, *SYNTHETIC_SIZES)),
                   help="comma-separated subset of the models (default: all)")
    p.add_argument("--tools", default="graphcost,onnx-tool,onnxslim,onnxsim,onnxsim-structure",
                   help="comma-separated subset of the tools for the GPT-2 models")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per run before it counts as failed")
    a = p.parse_args(argv)
    models = [m.strip() for m in a.models.split(",") if m.strip()]
    tools = {t.strip() for t in a.tools.split(",") if t.strip()}
    if not Path("/usr/bin/time").exists():
        raise SystemExit("/usr/bin/time missing: apt-get install time")
    if tools - {"graphcost"} and not (PEERS_VENV / "bin" / "python").exists():
        raise SystemExit("bench/.venv-peers missing: bash bench/peers_env.sh")
    for m in models:
        if not model_path(m).exists():
            raise SystemExit(f"{model_path(m)} missing: python bench/make_models.py --only {m}")

    started = time.strftime("%Y-%m-%dT%H:%M:%S")
    versions_at_start = versions()
    machine_at_start = machine()
    results: list[Measurement] = []
    for model in (m for m in models if m in GPT2):
        path = model_path(model)
        warm_cache(path)
        commands = {t: argv_ for t, argv_ in tool_commands(model, path).items() if t in tools}
        results += measure_round_robin(model, commands, a.runs, a.timeout)

    synth: list[dict[str, object]] = []
    for model in (m for m in models if m in SYNTHETIC_SIZES):
        path = model_path(model)
        n = SYNTHETIC_SIZES[model]
        warm_cache(path)
        m = measure_round_robin(model, {"graphcost": tool_commands(model, path)["graphcost"]}, a.runs, a.timeout)[0]
        if not m.ok:
            print(f"  {model}: graphcost failed: {m.error}", file=sys.stderr)
            continue
        try:
            ip = inprocess(path, a.runs, a.timeout)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            print(f"  {model}: {e}", file=sys.stderr)
            continue
        synth.append({"model": model, "nodes": n, "wall_s": m.wall_s, "cpu_s": m.cpu_s, "rss_mib": m.rss_mib,
                      "runs": m.runs, "us_per_node_cpu": m.cpu_s / n * 1e6,
                      "us_per_node_wall": m.wall_s / n * 1e6, **ip, "us_per_node_analyze": ip["analyze_s"] / n * 1e6,
                      "us_per_node_analyze_cpu": ip["analyze_cpu_s"] / n * 1e6})
        print(f"  {model:14s} graphcost {m.wall_s:.2f} s, {m.rss_mib:,.0f} MiB; analyze()+to_json() "
              f"{ip['analyze_s']:.2f} s wall, {ip['analyze_cpu_s']:.2f} s CPU", file=sys.stderr, flush=True)

    summary = [gpt2_rows(results, m) for m in GPT2 if any(r.model == m for r in results)
               if any(r.model == m and r.tool == "graphcost" for r in results)]
    synth_verdict: dict[str, object] = {}
    by = {s["model"]: s for s in synth}
    if "synthetic-100k" in by:
        w = float(by["synthetic-100k"]["wall_s"])  # type: ignore[arg-type]
        synth_verdict.update(wall_100k_s=w, wall_100k_pass=w < SYNTH_LIMIT_S)
    if len(synth) >= 2 and "synthetic-10k" in by and "synthetic-100k" in by:
        for key in ("wall", "cpu", "analyze", "analyze_cpu"):
            per = [float(s[f"us_per_node_{key}"]) for s in synth]  # type: ignore[arg-type]
            synth_verdict[f"flat_{key}"] = max(per) / min(per)
            synth_verdict[f"flat_{key}_pass"] = max(per) / min(per) <= FLAT_LIMIT

    table = markdown(results, summary, synth, synth_verdict)
    OUT.mkdir(parents=True, exist_ok=True)
    versions_at_end = versions()
    if versions_at_end != versions_at_start:
        print("warning: graphcost changed during the run (commit or working tree); see versions_at_start/_end",
              file=sys.stderr)
    doc = {"started": started, "finished": time.strftime("%Y-%m-%dT%H:%M:%S"), "runs": a.runs,
           "machine": {**machine_at_start, "load_avg_at_end": os.getloadavg()}, "versions": versions_at_start,
           "versions_at_end": versions_at_end, "measurements": [asdict(m) for m in results],
           "summary": summary, "synthetic": synth, "synthetic_verdict": synth_verdict, "markdown": table}
    stamp = started.replace(":", "").replace("-", "")
    for name in (f"results-{stamp}.json", "latest.json"):
        (OUT / name).write_text(json.dumps(doc, indent=1) + "\n")
    print(table)
    print(f"\nwritten: {(OUT / 'latest.json').relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
