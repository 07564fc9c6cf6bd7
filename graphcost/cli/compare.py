"""``graphcost compare``: a dense layer (or a reference model) across every installed framework and onnxruntime.

Exit codes: 0 printed; 1 printed, but a row was measured faster than its bound (the accounting or the roofs are
wrong); 2 bad input (an unknown model, no framework installed to build it), one line on stderr.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from typing import Any

from graphcost.cli.flags import CliError, hardware_flags, output_flags, resolve_hardware
from graphcost.cli.output import guard, hardware_input, write_output

NAME = "compare"
HELP = "one workload across torch, JAX, TF and onnxruntime, side by side with its roofline"
"""The line ``graphcost --help`` lists for this command."""


def register(subparsers: Any) -> None:
    """The ``compare`` subcommand and its flags."""
    p = subparsers.add_parser(
        NAME, help=HELP,
        description="Time the seed chapter's dense layer (1024→1024 at batch 1, 16, 64, 256) or a reference "
                    "model in every installed framework and in onnxruntime; print FLOPs, MB moved, intensity, "
                    "median ms, ±ms, efficiency against the bound, a roofline bar, GFLOP/s, GB/s and what bounds "
                    "it. Frameworks that are not installed are skipped with a note.")
    p.add_argument("--model", default="dense", metavar="ARCH",
                   help="dense (default) or a reference architecture: mlp, cnn, transformer")
    p.add_argument("--batch", action="append", type=int, default=[], metavar="N",
                   help="batch sizes (repeatable; default 1 16 64 256 for dense, 1 16 for the others)")
    p.add_argument("--features", type=int, default=1024, metavar="N", help="dense layer width (default 1024)")
    p.add_argument("--seq", type=int, default=16, metavar="N", help="sequence length of the transformer")
    p.add_argument("--frameworks", default="torch,jax,tf,onnxruntime", metavar="LIST",
                   help="comma-separated runners (default torch,jax,tf,onnxruntime)")
    p.add_argument("--warmup", type=int, default=10, metavar="N")
    p.add_argument("--repeats", type=int, default=50, metavar="N")
    p.add_argument("--threads", type=int, default=None, metavar="N", help="intra-op threads for torch and ORT")
    output_flags(p, what="table")
    hardware_flags(p)


def run(args: argparse.Namespace) -> int:
    """Time the workload in every installed runner and print the table; 1 on an accounting error."""
    import json

    # lazy: the runners pull in onnxruntime and the pipeline (0.27 s of imports); only compare
    from graphcost.measure.compare import DENSE_BATCHES, RUNNERS, compare, render

    frameworks = tuple(f.strip() for f in args.frameworks.split(",") if f.strip())
    bad = [f for f in frameworks if f not in RUNNERS]
    if bad:
        raise CliError(f"--frameworks: unknown runner {bad[0]!r} (one of {', '.join(RUNNERS)})")
    try:
        # lazy: the runners pull in onnxruntime and the pipeline (0.27 s of imports); only compare
        from graphcost.models import zoo
    except ImportError as e:  # pragma: no cover - the package ships with graphcost
        raise CliError(str(e)) from None
    if args.model not in zoo.ARCHS:
        raise CliError(f"--model {args.model}: unknown architecture (one of {', '.join(zoo.ARCHS)})")
    batches = tuple(args.batch) or (DENSE_BATCHES if args.model == "dense" else (1, 16))
    if any(b < 1 for b in batches) or args.features < 1 or args.seq < 1 or args.repeats < 1:
        raise CliError("--batch, --features, --seq and --repeats must be ≥ 1")

    guard(args.output, hardware_input(args.hardware))  # before anything is timed
    if args.hardware is None and not args.peak_flops and args.memory_bandwidth is None:
        args.hardware = "measured"  # the rows run on this machine: bound them by its measured roofs
    hw = resolve_hardware(args)

    def progress(msg: str) -> None:
        if sys.stderr.isatty():
            print(f"  timing {msg}…", file=sys.stderr)

    with tempfile.TemporaryDirectory(prefix="graphcost-compare-") as tmp:
        try:
            result = compare(args.model, hardware=hw, batches=batches, frameworks=frameworks,
                             features=args.features, seq=args.seq, warmup=args.warmup, repeats=args.repeats,
                             threads=args.threads, workdir=tmp, progress=progress)
        except ValueError as e:
            raise CliError(str(e).splitlines()[0]) from None
    text = json.dumps(result.to_dict(), indent=2) + "\n" if args.format == "json" else render(result)
    write_output(args.output, text)
    return 1 if any(r.diagnosis.code == "accounting" for r in result.rows) else 0
