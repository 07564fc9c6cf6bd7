"""Command line: one module per command, argument parsing and exit codes only; the analysis lives in the API.

Each command module (``analyze``, ``fusion``, ``fold``, …) has ``NAME``, ``HELP``, ``register(subparsers)`` and
``run(args) -> int`` (raising :class:`CliError` for user errors); the flags several commands share are
``graphcost/cli/flags.py``'s, the output-path guard and the atomic write ``graphcost/cli/output.py``'s. Text
renderers live in ``graphcost/report/``.

Exit codes: 0 success; 2 bad input (a file that is not a readable ONNX model, a bad flag or value),
always with one line on stderr naming the file or flag and the problem, never a traceback.
Set GRAPHCOST_DEBUG=1 to see tracebacks.

Start-up: the command modules import only what their flags need, and only the named command's flags are
registered (:func:`build_parser`), so ``graphcost --help``, ``--version`` and ``hardware list`` load neither onnx
nor the pipeline. What a command runs (the pipeline, onnxruntime, the exporters) is imported inside it, each
such import marked ``# lazy:`` with its cost, measured with ``python -X importtime -c 'import M'`` (cumulative,
best of two, on the loaded two-core development machine): ``graphcost.api`` (the pipeline: onnx, numpy, the
passes, the op rules) 0.52 s, ``graphcost.whatif`` 0.40 s (it imports the roofline, hence onnx),
``graphcost.analysis`` (the front door) 0.37 s, ``graphcost.load`` 0.26 s, ``graphcost.measure`` 0.32 s,
``graphcost.audit`` 0.22 s, ``graphcost.fold`` 0.44 s, ``graphcost.conventions`` 0.09 s. ``tests/test_startup.py``
pins what each kind of command imports.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections.abc import Sequence

from graphcost import __version__
from graphcost._gc import paused as gc_paused
from graphcost.cli import (
    analyze,
    audit,
    bench,
    budget,
    compare,
    diff,
    explain,
    export,
    fold,
    fusion,
    gap,
    hardware,
    llm,
    train,
)
from graphcost.cli.flags import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    CliError,
    ModelFlags,
    Parser,
    analysis_error,
    hardware_flags,
    model_flags,
    parse_dims,
    parse_model_flags,
    resolve_hardware,
)
from graphcost.cli.output import write_output
from graphcost.report.escape import terminal_text

COMMANDS = (analyze, fusion, fold, audit, diff, export, bench, gap, compare, llm, budget, train, explain, hardware)
"""Every subcommand, in the order ``graphcost --help`` lists them."""


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``graphcost`` parser. With no ``command``, every subcommand and its flags; with one, that subcommand
    alone, so a run imports what its own flags need and no other command's (``analyze``'s what-if flags import
    the roofline, ``explain``'s the other tools' rules); with a word that names none ("" included: ``graphcost
    --help``), every subcommand by name and help line only, for the listing and the invalid-choice error."""
    p = Parser(prog="graphcost", description="Static cost analysis of ONNX models.")
    p.add_argument("--version", action="store_true", help="print the version and exit")
    sub = p.add_subparsers(dest="command", parser_class=Parser)
    known = command is not None and any(c.NAME == command for c in COMMANDS)
    for c in COMMANDS:
        if command is None or c.NAME == command:
            c.register(sub)
        elif not known:
            sub.add_parser(c.NAME, help=c.HELP)
    return p


def _command_in(argv: Sequence[str]) -> str:
    """The subcommand ``argv`` names: its first word that is not an option (the top-level options take no
    value), or "" when there is none (``graphcost --help``, ``--version``): no command's flags are needed."""
    return next((a for a in argv if not a.startswith("-")), "")


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``graphcost ARGV`` and return its exit code (never raises for bad input: one line on stderr)."""
    with gc_paused():  # a CLI run is short and frees little until it exits: the collector only costs time
        return _main(argv)


def entry() -> None:
    """The process entry point (the ``graphcost`` script, ``python -m graphcost``): :func:`main`, then exit.

    The collector stays off to the end and every object the run made is frozen first (``gc.freeze``): the
    interpreter's finalization runs one full collection even with the collector off, and re-enabling it makes
    the next allocation collect every object made since it was paused. Either walk visits the whole heap just
    before the process frees it: measured 0.10-0.15 s of YOLOv8n's 0.8 s cold ``analyze``, same-minute A/B.
    A caller inside a longer-lived process uses :func:`main`, which restores the collector instead."""
    gc.disable()
    code = _main(None)
    gc.freeze()
    raise SystemExit(code)


def _main(argv: Sequence[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_command_in(argv))
    args, extra = parser.parse_known_args(argv)
    if extra:  # argparse would name the top-level parser; point at the subcommand's help instead
        where = " ".join(x for x in ("graphcost", args.command, getattr(args, "hw_command", None)) if x)
        print(terminal_text(f"graphcost: unrecognized arguments: {' '.join(extra)} (see {where} --help)"),
              file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.version:
        print(f"graphcost {__version__}")
        return EXIT_OK
    try:
        for command in COMMANDS:
            if args.command == command.NAME:
                return int(command.run(args))
        parser.print_help(sys.stderr)
        return EXIT_BAD_INPUT
    except CliError as e:
        print(f"graphcost: {terminal_text(str(e))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("graphcost: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as e:  # the last resort: one line, never a traceback (unless asked)
        if os.environ.get("GRAPHCOST_DEBUG"):
            raise
        target = getattr(args, "model", None)
        where = f"{target}: " if target else ""
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(terminal_text(f"graphcost: {where}cannot analyze ({type(e).__name__}: {msg})"), file=sys.stderr)
        return EXIT_BAD_INPUT


__all__ = ["COMMANDS", "EXIT_BAD_INPUT", "EXIT_OK", "CliError", "ModelFlags", "analysis_error", "build_parser",
           "entry", "hardware_flags", "main", "model_flags", "parse_dims", "parse_model_flags", "resolve_hardware",
           "write_output"]

if __name__ == "__main__":
    entry()
