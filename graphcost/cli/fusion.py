"""``graphcost fusion MODEL [--against ort[:basic|extended|all]]``: ideal fusion groups, and ORT's.

Without ``--against`` it prints the groups of the policy (default ``ideal``) with their bytes and times and
the boundaries by reason. With ``--against ort`` it also runs onnxruntime's graph optimizer on the file and
prints, group by group, ORT's kernels, bytes ideal vs ORT, and the bytes and µs ORT leaves on the table.
The text is ``report/fusion_text.py``'s (node names whole and escaped); ``--format csv`` writes one row per group
through ``report/csv.py`` (``csv_text``: spreadsheet-safe cells), like ``analyze --format csv``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from graphcost.cli.flags import CliError, hardware_flags, model_flags, parse_model_flags, resolve_hardware

NAME = "fusion"
HELP = "ideal fusion groups, and how onnxruntime's fusions compare"
"""The line ``graphcost --help`` lists for this command."""


def register(subparsers: Any) -> None:
    """The ``fusion`` subcommand and its flags."""
    p = subparsers.add_parser(
        NAME, help=HELP,
        description="Group nodes into the kernels an ideal fusing compiler would run; with --against ort, "
                    "compare with the kernels onnxruntime's graph optimizer produces.")
    p.add_argument("model", help="path to an .onnx file")
    p.add_argument("--against", metavar="ort[:LEVEL]",
                   help="compare with onnxruntime's optimizer at LEVEL basic, extended or all (default: all, "
                        "ORT's own default)")
    p.add_argument("--policy", default="ideal", metavar="NAME", help="fusion policy: ideal (default) or none")
    p.add_argument("--format", choices=("text", "json", "csv"), default="text",
                   help="text (default), json, or csv: one row per group, spreadsheet-safe (as analyze's)")
    model_flags(p)
    hardware_flags(p)


def parse_against(value: str | None, levels: tuple[str, ...], default_level: str) -> str | None:
    """``ort`` → ORT's default level; ``ort:extended`` → that level; None → no comparison."""
    if value is None:
        return None
    engine, _, level = value.partition(":")
    if engine.strip().lower() not in ("ort", "onnxruntime"):
        raise CliError(f"--against {value!r}: only 'ort' (onnxruntime) is supported, e.g. --against ort:extended")
    level = level.strip().lower() or default_level
    if level not in levels:
        raise CliError(f"--against {value!r}: level must be one of {', '.join(levels)}")
    return level


def run(args: argparse.Namespace) -> int:
    """Fuse ``args.model`` and print the groups (and ORT's, with ``--against``)."""
    # lazy: the fusion pass and its text pull in the pipeline (0.52 s of imports, graphcost/cli/__init__.py)
    from graphcost.measure.fusion_ort import DEFAULT_LEVEL, LEVELS, OrtError, compare, map_back, optimize
    from graphcost.passes.fusion import fuse, fusion_section
    from graphcost.report.csv import render_fusion_csv
    from graphcost.report.fusion_text import render_text

    flags = parse_model_flags(args)
    level = parse_against(args.against, LEVELS, DEFAULT_LEVEL)
    hw = resolve_hardware(args)
    analysis = flags.analysis(args.model)  # validated, shapes and costs, every dim bound (the front door)
    graph, costs = analysis.graph, analysis.costs
    binding, defaulted = analysis.binding.as_dict(), list(analysis.binding.defaulted)
    try:
        result = fuse(graph, costs, args.policy)
    except ValueError as e:
        raise CliError(f"--policy {args.policy}: {e}") from None
    section = fusion_section(result, hw, binding)
    comparison = None
    if level is not None:
        try:
            comparison = compare(result, map_back(graph, optimize(args.model, level), level), hw, binding)
        except OrtError as e:
            raise CliError(str(e)) from None
    if args.format == "json":
        doc: dict[str, Any] = {"schema": "graphcost.fusion/1", "model": args.model, "hardware": hw.name,
                               "binding": binding, "defaulted_dims": defaulted, "fusion": section.to_dict()}
        if comparison is not None:
            doc["against"] = comparison.to_dict()
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    elif args.format == "csv":
        sys.stdout.write(render_fusion_csv(section, comparison))
    else:
        sys.stdout.write(render_text(args.model, hw, section, comparison, defaulted))
    return 0
