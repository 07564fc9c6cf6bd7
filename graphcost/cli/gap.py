"""``graphcost gap MODEL``: measured time next to the roofline bound, per model, kernel and fusion group.

MODEL is an .onnx file, ``ref:FRAMEWORK/ARCH`` or ``FILE.py:FACTORY`` (a torch, JAX or TF model your code builds;
``graphcost.gap(model, example_inputs)`` is the same from Python).

The same measurement as ``graphcost bench --gap`` (see ``graphcost/cli/bench.py`` for the flags and exit codes,
``graphcost/gap.py`` for the bounds and the diagnosis bands, docs/gap.md for the report).
"""

from __future__ import annotations

import argparse
from typing import Any

from graphcost.cli.bench import add_gap_flags, add_measure_flags, measure_and_report
from graphcost.cli.flags import hardware_flags

NAME = "gap"
HELP = "how far a measured model is from its roofline bound, and why"
"""The line ``graphcost --help`` lists for this command."""


def register(subparsers: Any) -> None:
    """The ``gap`` subcommand and its flags (``bench``'s measurement flags and the gap flags)."""
    p = subparsers.add_parser(
        NAME, help=HELP,
        description="Measure the model (an .onnx file, ref:FRAMEWORK/ARCH, or FILE.py:FACTORY for a model your "
                    "code builds) in onnxruntime (and in its native framework with --native), "
                    "bound every ORT kernel and ideal fusion group, and diagnose each from measured ÷ bound: "
                    "below 1 the accounting or the timer is wrong (exit 1); ~1.2 at the roof; ~3 bytes not "
                    "counted; 20+ overhead. Use roofs measured by `graphcost hardware measure -o spec.toml` "
                    "(--hardware spec.toml) for a machine's real limits.")
    add_measure_flags(p)
    add_gap_flags(p)
    hardware_flags(p)


def run(args: argparse.Namespace) -> int:
    """Measure the model and print its gap report."""
    return measure_and_report(args, gap=True)
