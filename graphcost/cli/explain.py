"""``graphcost explain MODEL --against TOOL``: per op type, graphcost's FLOPs, the other tool's count and the
rule that makes them differ; the rows add up to both totals exactly (``graphcost/conventions.py``, rendered by
``graphcost/report/convention_text.py``)."""

from __future__ import annotations

import argparse
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

NAME = "explain"
HELP = "why another tool's FLOP count differs: per op type, both counts and the rule"
"""The line ``graphcost --help`` lists for this command."""


def register(subparsers: Any) -> None:
    """The ``explain`` subcommand and its flags."""
    from graphcost.conventions import CONVENTIONS  # lazy: the other tools' rules (0.09 s), only for explain

    p = subparsers.add_parser(
        NAME, help=HELP,
        description="Count the model as graphcost does and as TOOL does (its rules over graphcost's node records, "
                    "docs/conventions.md), and print per op type both counts and the rule behind the difference. "
                    "The rows add up to both totals.")
    p.add_argument("model", help="path to an .onnx file")
    p.add_argument("--against", required=True, metavar="TOOL", help=f"one of {', '.join(CONVENTIONS)}")
    hardware_flags(p)
    model_flags(p)
    output_flags(p, what="table")


def run(args: argparse.Namespace) -> int:
    """Analyze ``args.model`` and print the per-op-type table against ``args.against``."""
    # lazy: the pipeline is 0.52 s of imports (graphcost/cli/__init__.py), the other tools' rules 0.09 s
    from graphcost.api import analyze
    from graphcost.conventions import CONVENTIONS
    from graphcost.report import convention_text

    if args.against not in CONVENTIONS:
        raise CliError(f"--against {args.against!r}: expected one of {', '.join(CONVENTIONS)}")
    if args.output:
        guard(args.output, lambda: {**protected_paths(args.model, args.output), **hardware_input(args.hardware)})
    flags = parse_model_flags(args)
    hw = resolve_hardware(args)
    try:
        report = analyze(flags.analysis(args.model), hardware=hw, capacity=not args.no_capacity, fusion=False,
                         memory=False, batchnorm=False)
    except ValueError as e:
        raise analysis_error(e, args.model) from None
    try:
        if args.format == "json":
            text = convention_text.totals(report, args.against, "json")
        else:
            text = convention_text.table(report, args.against)
    except ValueError as e:
        raise CliError(str(e)) from None
    write_output(args.output, text)
    return 0
