"""``graphcost hardware list | show NAME | detect | measure``: the device catalog, and this machine.

``list`` and ``show`` read the catalog (``hardware/catalog``); ``detect`` and ``measure`` are
``graphcost/cli/hardware_probe.py``'s.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from graphcost.cli import hardware_probe
from graphcost.cli.flags import EXIT_OK, CliError, Parser
from graphcost.hardware import catalog
from graphcost.report.escape import terminal_text

NAME = "hardware"
HELP = "list or show device specs; detect this machine or measure its roofs"
"""The line ``graphcost --help`` lists for this command."""


def register(subparsers: Any) -> None:
    """The ``hardware`` subcommand and its own subcommands."""
    h = subparsers.add_parser(NAME, help=HELP)
    hs = h.add_subparsers(dest="hw_command", parser_class=Parser)
    hs.add_parser("list", help="list catalog devices")
    show = hs.add_parser("show", help="show one device (name or TOML file)")
    show.add_argument("name")
    hardware_probe.register(hs)  # hardware detect | measure


def run(args: argparse.Namespace) -> int:
    """List the catalog, show one device, or run ``detect``/``measure``."""
    if args.hw_command is None:
        raise CliError("hardware: expected 'list', 'show NAME', 'detect' or 'measure'")
    if args.hw_command in hardware_probe.PROBE_COMMANDS:
        return hardware_probe.run(args)
    if args.hw_command == "show":
        try:
            spec = catalog.resolve(args.name)
        except ValueError as e:
            raise CliError(str(e).splitlines()[0]) from None
        sys.stdout.write("\n".join(terminal_text(line) for line in catalog.describe(spec).rstrip("\n").splitlines())
                         + "\n")
        return EXIT_OK
    rows = []
    for s in catalog.list_specs():
        f32 = s.peak_flops.get("float32")
        rows.append(f"{s.name:<22} {s.kind:<5} fp32 {('%.2f' % (f32 / 1e12)) if f32 else '   -':>7} TFLOP/s  "
                    f"DRAM {s.memory_bandwidth / 1e9:8.1f} GB/s  {s.description}")
    sys.stdout.write("\n".join(terminal_text(r) for r in rows) + "\n")
    return EXIT_OK
