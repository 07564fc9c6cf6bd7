"""``graphcost budget``: the budget check of a model measured elsewhere (no model file; the chapter's Problem 4).

The rule is ``graphcost/budget.py``'s, the same one ``gap`` and ``analyze --budget-ms`` use: p99 at sustained
clocks against the slice; a known floor above the slice is a veto. Exit 0 with the verdict (fits, misses or
VETO are answers, not errors); 2 for a bad flag.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from graphcost.budget import frame_slice_s, measured
from graphcost.cli.flags import EXIT_OK, CliError

NAME = "budget"
HELP = "does a measured model fit its latency budget? (p99 at sustained clocks; no model file)"
"""The line ``graphcost --help`` lists for this command."""


def register(subparsers: Any) -> None:
    """The ``budget`` subcommand and its flags."""
    # lazy: the flag types live in graphcost.whatif, which pulls in the roofline and onnx (0.4 s of imports)
    from graphcost.whatif import _factor, _fraction, _positive

    p = subparsers.add_parser(
        NAME, help=HELP,
        description="Check a measured latency against a budget the way the roofline chapter does: p99 (the mean × "
                    "--p99-factor, or --p99-ms) stretched by the sustained clock, against the slice (--budget-ms, "
                    "or the whole frame at --fps). Prints fits / misses with the speed-up needed / VETO when "
                    "--floor-ms (the roofline bound at sustained clocks) alone exceeds the slice.")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--mean-ms", type=_positive("--mean-ms"), metavar="MS", help="measured mean latency (ms)")
    g.add_argument("--p99-ms", type=_positive("--p99-ms"), metavar="MS", help="measured p99 latency (ms)")
    p.add_argument("--p99-factor", type=_factor, default=1.0, metavar="K",
                   help="p99 as K × the mean (e.g. 1.35); default 1; with --mean-ms only")
    p.add_argument("--sustained-clock", type=_fraction, default=1.0, metavar="F",
                   help="sustained clock as a fraction of the clock measured at (e.g. 0.72); default 1")
    s = p.add_mutually_exclusive_group(required=True)
    s.add_argument("--budget-ms", type=_positive("--budget-ms"), metavar="MS", help="the model's slice (ms)")
    s.add_argument("--fps", type=_positive("--fps"), metavar="F", help="the slice is the whole frame: 1000/F ms")
    p.add_argument("--floor-ms", type=float, default=None, metavar="MS",
                   help="the roofline bound at sustained clocks, if known (ms): a veto when above the slice")
    p.add_argument("--format", choices=("text", "json"), default="text")


def run(args: argparse.Namespace) -> int:
    """Print the verdict (text or JSON)."""
    if args.p99_ms is not None and args.p99_factor != 1.0:
        raise CliError("--p99-factor scales --mean-ms; with --p99-ms the p99 is already measured")
    if args.floor_ms is not None and not args.floor_ms >= 0:
        raise CliError(f"--floor-ms {args.floor_ms:g}: must be ≥ 0")
    slice_s = args.budget_ms / 1e3 if args.budget_ms is not None else frame_slice_s(args.fps)
    b = measured(mean_s=None if args.mean_ms is None else args.mean_ms / 1e3, p99_factor=args.p99_factor,
                 p99_s=None if args.p99_ms is None else args.p99_ms / 1e3, sustained_clock=args.sustained_clock,
                 budget_s=slice_s, floor_s=None if args.floor_ms is None else args.floor_ms / 1e3)
    if args.format == "json":
        print(json.dumps({"budget": {**b.to_dict(), "mean_s": None if args.mean_ms is None else args.mean_ms / 1e3,
                                     "p99_factor": args.p99_factor}}, indent=2))
        return EXIT_OK
    where = (f"{args.budget_ms:g} ms" if args.budget_ms is not None
             else f"1000/{args.fps:g} fps = {slice_s * 1e3:.3g} ms")
    p99 = (f"mean {args.mean_ms:g} ms × p99 factor {args.p99_factor:g} = p99 {b.p99_s * 1e3:.4g} ms"
           if args.mean_ms is not None else f"p99 {b.p99_s * 1e3:.4g} ms")
    print(f"budget {where}: {p99} at the measured clock; ÷ sustained clock {args.sustained_clock:g} = "
          f"{b.p99_sustained_s * 1e3:.4g} ms")
    print(b.verdict)
    return EXIT_OK
