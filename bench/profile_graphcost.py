"""Profile graphcost on one model: where the time goes, by stage and by function.

    python bench/profile_graphcost.py bench/data/gpt2-medium.onnx [--top 25]

Prints (1) wall time of each stage of ``graphcost.analyze`` + ``to_json`` (imports, load, shape inference,
cost counting, roofline, fusion, liveness, batchnorm folding, report assembly, JSON), measured without the
profiler, with the RSS after each stage and the peak so far, and (2) a cProfile of a second run (imports
excluded), top functions by cumulative and by own time.
The raw profile goes to bench/out/<model>.prof (open with ``python -m pstats`` or snakeviz).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import pstats
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


STAGES = ("load", "validate", "infer_shapes", "count_costs", "roofline", "fuse", "fusion_section", "liveness",
          "find_foldable", "_model_info")
"""Functions that graphcost.api and graphcost.analysis (``Analysis.of``) call one after the other; each is timed
where those modules look it up (names that a given graphcost version lacks are skipped), so the breakdown
follows the pipeline as it is. The cyclic garbage collector is off throughout, as the CLI runs
(``graphcost.cli.main``): with it on, a 100k-node profile charges ~4 s of collections to whichever function
allocates when one triggers (``GroupNumbers.to_dict``, 70k calls), a cost no CLI run pays."""


def _rss_mib() -> float:
    """Resident set size now (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096 / 2**20
    except OSError:
        return 0.0


def _peak_mib() -> float:
    """Peak resident set size of this process so far."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def stages(path: str) -> list[tuple[str, float]]:
    t = time.perf_counter()
    import graphcost
    from graphcost import api

    try:
        from graphcost import analysis
        modules = [api, analysis]
    except ImportError:  # versions before Analysis.of
        modules = [api]
    out: list[tuple[str, float]] = [("import graphcost", time.perf_counter() - t)]
    spent: dict[str, float] = {}
    memory: dict[str, tuple[float, float]] = {"import graphcost": (_rss_mib(), _peak_mib())}
    originals = []
    for module in modules:
        for name in STAGES:
            fn = getattr(module, name, None)
            if fn is None:
                continue
            originals.append((module, name, fn))

            def timed(*args, _fn=fn, _name=name, **kwargs):  # type: ignore[no-untyped-def]
                t0 = time.perf_counter()
                try:
                    return _fn(*args, **kwargs)
                finally:
                    spent[_name] = spent.get(_name, 0.0) + time.perf_counter() - t0
                    memory[_name] = (_rss_mib(), _peak_mib())

            setattr(module, name, timed)
    try:
        t = time.perf_counter()
        report = graphcost.analyze(path)
        whole = time.perf_counter() - t
    finally:
        for module, name, fn in originals:
            setattr(module, name, fn)
    out += [(f"  {name}  (RSS after {memory[name][0]:.0f} MiB, peak so far {memory[name][1]:.0f} MiB)", spent[name])
            for name in STAGES if name in spent]
    out.append(("  rest of analyze() (report assembly, dims, warnings)", whole - sum(spent.values())))
    out.append(("analyze(), whole", whole))
    t = time.perf_counter()
    text = report.to_json()
    spent_json = time.perf_counter() - t
    out.append((f"Report.to_json ({len(text) / 1e6:.1f} MB; RSS after {_rss_mib():.0f} MiB, "
                f"peak {_peak_mib():.0f} MiB)", spent_json))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model")
    p.add_argument("--top", type=int, default=25)
    a = p.parse_args(argv)
    gc.disable()  # as graphcost.cli.main runs (see STAGES)
    for name, s in stages(a.model):
        print(f"{s:8.3f} s  {name}")

    import graphcost

    prof = cProfile.Profile()
    prof.enable()
    graphcost.analyze(a.model).to_json()
    prof.disable()
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    dump = out / (Path(a.model).stem if Path(a.model).stem != "model" else Path(a.model).parent.name)
    prof.dump_stats(str(dump.with_suffix(".prof")))
    for key in ("cumulative", "tottime"):
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats(key).print_stats(a.top)
        text = buf.getvalue()
        print(f"\n===== by {key} =====")
        print(text[text.find("   ncalls"):].rstrip())
    print(f"\nprofile written to {dump.with_suffix('.prof')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
