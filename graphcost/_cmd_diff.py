"""``graphcost diff A.onnx B.onnx``: what changed in cost, structure and interface between two models."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

NAME = "diff"


def register(subparsers: Any, hardware_flags: Any) -> None:
    p = subparsers.add_parser(
        NAME, help="compare two models: totals, op counts, parameters, I/O, node by node",
        description="Analyze two models with the same settings and show what changed: FLOPs, MACs, bytes, bound "
                    "time, peak memory and fusion groups (when those passes ran), op counts, parameters, graph "
                    "inputs/outputs, and node by node where the graphs line up (by name, then by op and shapes).")
    p.add_argument("a", metavar="A.onnx")
    p.add_argument("b", metavar="B.onnx")
    hardware_flags(p)
    p.add_argument("--dim", action="append", default=[], metavar="NAME=VALUE",
                   help="bind a symbolic dim in each model that declares it (repeatable)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--top", type=int, default=20, metavar="N", help="nodes listed per section (text)")


def run(args: argparse.Namespace) -> int:
    from graphcost.cli import CliError, parse_dims, resolve_hardware
    from graphcost.diff import diff_models, render_text
    from graphcost.load import LoadError

    if args.top < 0:
        raise CliError("--top must be ≥ 0")
    dims = parse_dims(args.dim)
    hw = resolve_hardware(args)
    try:
        d = diff_models(args.a, args.b, hardware=hw, dims=dims, capacity=not args.no_capacity)
    except LoadError as e:
        raise CliError(str(e)) from None
    except ValueError as e:
        raise CliError(str(e).splitlines()[0]) from None
    if args.format == "json":
        from graphcost.audit.rows import finite

        sys.stdout.write(json.dumps(finite(d.to_dict()), indent=2) + "\n")
    else:
        sys.stdout.write(render_text(d, top=args.top))
    return 0
