"""``graphcost analyze MODEL``: per-node FLOPs, MACs, bytes and roofline bounds, as text, JSON, CSV or HTML."""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Iterable
from typing import Any

from graphcost.cli.flags import (
    CliError,
    analysis_error,
    hardware_flags,
    model_flags,
    output_flags,
    parse_model_flags,
    resolve_hardware,
)
from graphcost.cli.output import guard, hardware_input, protected_paths, write_output

NAME = "analyze"
HELP = "FLOPs, bytes and roofline bound of a model"
"""The line ``graphcost --help`` lists for this command."""


def register(subparsers: Any) -> None:
    """The ``analyze`` subcommand and its flags."""
    # lazy: graphcost.whatif (its flags and the what-ifs) pulls in the roofline and onnx, 0.4 s of imports
    from graphcost import whatif

    a = subparsers.add_parser(NAME, help=HELP,
                              description="Per-node FLOPs, MACs, bytes and roofline bounds of an ONNX model.")
    a.add_argument("model", help="path to an .onnx file")
    hardware_flags(a)
    model_flags(a)
    output_flags(a, ("text", "json", "csv", "html"),
                 format_help="text (default), json, csv (one row per node), or html (a self-contained offline page)")
    a.add_argument("--top", type=int, default=10, metavar="N", help="nodes in the top-N table (text, html)")
    a.add_argument("--fusion-policy", default="ideal", metavar="NAME",
                   help="fusion policy for report.fusion: ideal (default) or none")
    a.add_argument("--no-fusion", action="store_true", help="skip the fusion pass")
    a.add_argument("--no-memory", action="store_true", help="skip the liveness pass")
    a.add_argument("--alignment", type=int, default=64, metavar="B", help="arena alignment in bytes (default 64)")
    a.add_argument("--training", action="store_true",
                   help="add training memory: weights + gradients + optimizer state + kept activations")
    a.add_argument("--optimizer-state-multiplier", type=float, default=2.0, metavar="K",
                   help="optimizer state as K × weight bytes (default 2, Adam)")
    a.add_argument("--no-gradients", action="store_true", help="training memory without gradient buffers")
    a.add_argument("--no-batchnorm", action="store_true", help="skip the batchnorm folding analysis")
    a.add_argument("--as", dest="as_convention", metavar="TOOL",
                   help="print the totals another tool would report: torch, torchvision, fvcore, ptflops, thop, "
                        "onnx-tool, onnxsim (docs/conventions.md)")
    whatif.add_flags(a)  # --budget-ms, --fps, --sustained-clock, --p99-factor, --power-envelope, --weights, --sweep…


def run(args: argparse.Namespace) -> int:
    """Analyze ``args.model`` and write the report in ``args.format``."""
    # lazy: the pipeline (graphcost.api: onnx, numpy, the passes, the op rules) is 0.52 s of imports
    from graphcost import whatif
    from graphcost.api import analyze
    from graphcost.passes.liveness import TrainingOptions

    flags = parse_model_flags(args)
    if args.top < 0:
        raise CliError("--top must be ≥ 0")
    if args.output:  # before anything runs: never over the model, its weights or the --hardware file
        guard(args.output, lambda: {**protected_paths(args.model, args.output), **hardware_input(args.hardware)})
    hw = resolve_hardware(args)
    if args.alignment <= 0:
        raise CliError("--alignment must be a positive number of bytes")
    if args.optimizer_state_multiplier < 0:
        raise CliError("--optimizer-state-multiplier must be ≥ 0")
    if args.fusion_policy not in ("ideal", "none"):
        raise CliError(f"--fusion-policy {args.fusion_policy!r}: expected ideal or none")
    training = TrainingOptions(optimizer_state_multiplier=args.optimizer_state_multiplier,
                               gradients=not args.no_gradients) if args.training else None
    try:
        report = analyze(flags.analysis(args.model), hardware=hw, capacity=not args.no_capacity,
                         fusion=not args.no_fusion, fusion_policy=args.fusion_policy, memory=not args.no_memory,
                         training=training, alignment=args.alignment, batchnorm=not args.no_batchnorm)
        report = whatif.apply_args(report, args)  # the what-if flags, over the finished report
    except ValueError as e:
        raise analysis_error(e, args.model) from None
    if args.as_convention is not None:
        from graphcost.report import convention_text  # lazy: the other tools' rules, only for --as

        try:
            text = convention_text.totals(report, args.as_convention, args.format)
        except ValueError as e:
            raise CliError(str(e)) from None
        write_output(args.output, text)
        return 0
    out: str | Iterable[str]
    if args.format == "json":
        out = itertools.chain(report.json_chunks(), ("\n",))  # streamed: a 100k-node report is never one string
    elif args.format == "csv":
        out = report.to_csv()
    elif args.format == "html":
        # lazy: the HTML renderer (charts, templates) loads only for --format html
        from graphcost.report.html import render_html

        out = render_html(report, top=args.top)
    else:
        out = report.to_text(top=args.top)
    write_output(args.output, out)
    return 0
