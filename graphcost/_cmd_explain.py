"""``graphcost explain MODEL --against TOOL``: per op type, graphcost's FLOPs, the other tool's count and the
rule that makes them differ; the rows add up to both totals exactly (``graphcost/conventions.py``)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from graphcost.report.escape import terminal_text

NAME = "explain"


def register(subparsers: Any, hardware_flags: Callable[[argparse.ArgumentParser], None]) -> None:
    from graphcost.cli import model_flags
    from graphcost.conventions import CONVENTIONS

    p = subparsers.add_parser(
        NAME, help="why another tool's FLOP count differs: per op type, both counts and the rule",
        description="Count the model as graphcost does and as TOOL does (its rules over graphcost's node records, "
                    "docs/conventions.md), and print per op type both counts and the rule behind the difference. "
                    "The rows add up to both totals.")
    p.add_argument("model", help="path to an .onnx file")
    p.add_argument("--against", required=True, metavar="TOOL", help=f"one of {', '.join(CONVENTIONS)}")
    hardware_flags(p)
    model_flags(p)
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--output", "-o", metavar="FILE", help="write the table to FILE instead of stdout")


def _result(report: Any, name: str) -> Any:
    from graphcost.cli import CliError
    from graphcost.conventions import as_convention

    try:
        return as_convention(report, name)
    except ValueError as e:
        raise CliError(str(e)) from None


def convention_text(report: Any, name: str, fmt: str = "text") -> str:
    """``analyze --as NAME``: the tool's total (json: its per-op-type rows too)."""
    r = _result(report, name)
    if fmt == "json":
        return json.dumps(r.to_dict(), indent=2) + "\n"
    return (f"{r.convention}: {r.total:,} {r.unit}s"
            + (f" ({r.unknown_nodes} nodes unknown, not added)" if r.unknown_nodes else "")
            + f"\ngraphcost: {report.totals.flops:,} FLOPs, {report.totals.macs:,} MACs\n"
            + "".join(f"note: {terminal_text(n)}\n" for n in r.notes))


def explain_text(report: Any, name: str) -> str:
    r = _result(report, name)
    rows = r.rows()
    width = max([len("op type")] + [len(terminal_text(x.op_type)) for x in rows])
    lines = [f"graphcost FLOPs (a MAC is 2) against {r.convention} {r.unit}s",
             *(f"note: {terminal_text(n)}" for n in r.notes),
             f"{'op type':<{width}}  {'nodes':>5}  {'graphcost':>17}  {r.convention:>17}  rule"]
    for x in rows:
        rule = "; ".join(x.rules)
        lines.append(f"{terminal_text(x.op_type):<{width}}  {x.count:>5}  {x.graphcost_flops:>17,}  {x.tool:>17,}  "
                     f"{rule}")
    lines.append(f"{'total':<{width}}  {sum(x.count for x in rows):>5}  {r.graphcost_flops:>17,}  {r.total:>17,}")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    from graphcost.api import analyze
    from graphcost.cli import CliError, analysis_error, parse_model_flags, resolve_hardware, write_output
    from graphcost.conventions import CONVENTIONS

    if args.against not in CONVENTIONS:
        raise CliError(f"--against {args.against!r}: expected one of {', '.join(CONVENTIONS)}")
    if args.output:
        from graphcost._outpath import guard, hardware_input, protected_paths

        guard(args.output, lambda: {**protected_paths(args.model), **hardware_input(args.hardware)})
    flags = parse_model_flags(args)
    hw = resolve_hardware(args)
    try:
        report = analyze(flags.analysis(args.model), hardware=hw, capacity=not args.no_capacity, fusion=False,
                         memory=False, batchnorm=False)
    except ValueError as e:
        raise analysis_error(e, args.model) from None
    if args.format == "json":
        text = convention_text(report, args.against, "json")
    else:
        text = explain_text(report, args.against)
    write_output(args.output, text)
    return 0
