"""The seed chapter's dense-layer result, measured: batch-1 %peak far below batch 256's, against this machine's roofs.

    .venv/bin/python bench/bench_seed_shape.py                    # cached measured roofs, batches 1,16,64,256
    .venv/bin/python bench/bench_seed_shape.py --fresh-roofs --repeats 100 --rounds 5

A claim about speed, so a benchmark, not a test: on a loaded machine the roofs come out low and the runs slow, in
proportions no test can control. ``tests/test_compare.py`` checks the deterministic half (the bounds in closed
form, batch 1 memory-bound and capped by its roof, batch 256 compute-bound, %peak = compute time ÷ median).

Method: the roofs are ``graphcost hardware measure``'s (cached per machine; ``--fresh-roofs`` measures them again
first). ``graphcost compare dense`` then runs ``--rounds`` times in a row (every framework and onnxruntime at every
batch in each round, so a burst of outside load hits all runners alike), and each row keeps its best-median round:
the round least disturbed by other work. Printed: the table of the best round per row, then per runner the
batch-1 %peak, the batch-256 %peak and their ratio; the seed's shape holds when the ratio is below ``SHAPE`` (½).
Exit 1 when a runner misses the shape or a row is measured faster than its bound (an accounting error, or roofs
measured while the machine was busy: the load average is printed before and after).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile

from graphcost.measure.compare import CompareRow, Comparison, compare, render

SHAPE = 0.5
"""The seed's shape: batch-1 %peak below this fraction of batch 256's."""


def _load() -> str:
    try:
        return "load average " + " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "load average unknown"


def best_rows(rounds: list[Comparison]) -> Comparison:
    """One row per (runner, batch): the round with the smallest median (all rounds share bounds and roofs)."""
    best: dict[tuple[str, int], CompareRow] = {}
    for c in rounds:
        for r in c.rows:
            key = (r.runner, r.batch)
            if key not in best or r.median_s < best[key].median_s:
                best[key] = r
    return dataclasses.replace(rounds[0], rows=tuple(best.values()))


def main(argv: list[str] | None = None) -> int:
    from graphcost.hardware.measure import measured_roofs

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fresh-roofs", action="store_true", help="measure the roofs again (about a minute)")
    ap.add_argument("--batches", default="1,16,64,256", help="comma-separated; must include 1 and 256")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3, help="compare runs in a row; each row keeps its best round")
    args = ap.parse_args(argv)
    batches = tuple(int(b) for b in args.batches.split(","))
    if 1 not in batches or 256 not in batches or args.rounds < 1:
        ap.error("--batches must include 1 and 256, and --rounds must be ≥ 1")

    print(f"before: {_load()}", file=sys.stderr)
    roofs, path, fresh = measured_roofs(refresh=args.fresh_roofs)
    print(f"roofs: {path} ({'measured now' if fresh else 'cached'})", file=sys.stderr)
    busy = [s for s in roofs.sources if s.startswith("warning: the machine was busy")]
    with tempfile.TemporaryDirectory() as work:
        rounds = [compare("dense", hardware=roofs, batches=batches, warmup=args.warmup, repeats=args.repeats,
                          workdir=work, progress=lambda m: print(f"  {m}", file=sys.stderr))
                  for _ in range(args.rounds)]
    print(f"after: {_load()}", file=sys.stderr)
    c = best_rows(rounds)
    print(render(c), end="")
    print(*busy, sep="\n")

    failed = False
    print(f"\nseed shape: batch-1 %peak < {SHAPE:g} × batch-256 %peak (best median of {args.rounds} rounds)")
    for runner in sorted({r.runner for r in c.rows}):
        one = next(r for r in c.rows if r.runner == runner and r.batch == 1)
        big = next(r for r in c.rows if r.runner == runner and r.batch == 256)
        if one.peak_fraction is None or not big.peak_fraction:
            print(f"{runner:<12} no %peak (unknown bound)")
            failed = True
            continue
        ratio = one.peak_fraction / big.peak_fraction
        ok = ratio < SHAPE and one.bound.bound == "memory"
        failed |= not ok
        print(f"{runner:<12} batch 1 {100 * one.peak_fraction:5.1f}% ({one.bound.bound}-bound)   batch 256 "
              f"{100 * big.peak_fraction:5.1f}%   ratio {ratio:.3f}   {'ok' if ok else 'MISSES THE SHAPE'}")
    faster = [r for r in c.rows if r.diagnosis.code == "accounting"]
    for r in faster:
        print(f"faster than the bound: {r.runner} {r.shape}: {r.median_s * 1e6:.1f} µs against "
              f"{(r.bound.bound_s or 0) * 1e6:.1f} µs")
    return 1 if failed or faster else 0


if __name__ == "__main__":
    sys.exit(main())
