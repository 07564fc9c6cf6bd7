"""``graphcost diff A.onnx B.onnx``: what changed in cost, structure and interface between two models."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from graphcost.cli.flags import (
    CliError,
    analysis_error,
    hardware_flags,
    model_flags,
    parse_model_flags,
    resolve_hardware,
)

NAME = "diff"
HELP = "compare two models: totals, op counts, parameters, I/O, node by node"
"""The line ``graphcost --help`` lists for this command."""


def register(subparsers: Any) -> None:
    """The ``diff`` subcommand and its flags."""
    p = subparsers.add_parser(
        NAME, help=HELP,
        description="Analyze two models with the same settings and show what changed: FLOPs, MACs, bytes, bound "
                    "time, peak memory and fusion groups (when those passes ran), op counts, parameters, graph "
                    "inputs/outputs, and node by node where the graphs line up (by name, then by op and shapes).")
    p.add_argument("a", metavar="A.onnx")
    p.add_argument("b", metavar="B.onnx")
    hardware_flags(p)
    model_flags(p)  # a dim, input shape or input value applies to each model that has it
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--top", type=int, default=20, metavar="N", help="nodes listed per section (text)")


def run(args: argparse.Namespace) -> int:
    """Analyze both models and print what changed."""
    # lazy: graphcost.diff runs the pipeline (0.52 s of imports, graphcost/cli/__init__.py)
    from graphcost.audit.rows import finite
    from graphcost.diff import diff_models, render_text

    if args.top < 0:
        raise CliError("--top must be ≥ 0")
    flags = parse_model_flags(args)
    hw = resolve_hardware(args)
    try:
        d = diff_models(args.a, args.b, hardware=hw, dims=flags.dims, capacity=not args.no_capacity,
                        input_shapes=flags.input_shapes, input_values=flags.input_values)
    except Exception as e:
        raise analysis_error(e, None) from None
    if args.format == "json":
        sys.stdout.write(json.dumps(finite(d.to_dict()), indent=2) + "\n")
    else:
        sys.stdout.write(render_text(d, top=args.top))
    return 0
