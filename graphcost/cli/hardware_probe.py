"""``graphcost hardware detect`` and ``graphcost hardware measure``: the spec of the machine graphcost runs on.

``detect`` finds the catalog entry (or a conservative estimate) from what the OS reports; ``measure`` runs
microbenchmarks and writes measured roofs. Both print text or JSON and, with ``-o FILE.toml``, write the spec as a
file that ``--hardware FILE.toml`` reads. See docs/hardware-probe.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from graphcost.cli.flags import CliError
from graphcost.cli.output import guard, write_output
from graphcost.hardware import catalog
from graphcost.report import hardware_text
from graphcost.report.escape import terminal_text

PROBE_COMMANDS = ("detect", "measure")


def register(subparsers: Any) -> None:
    """``hardware detect`` and ``hardware measure`` under the ``hardware`` subparsers."""
    d = subparsers.add_parser(
        "detect", help="identify this machine: its catalog entry, or a conservative estimate",
        description="Identify this machine (nvidia-smi/NVML, system_profiler, /proc/cpuinfo, lscpu, /sys caches) and "
                    "match it against the catalog; an unmatched CPU gets a conservative estimate.")
    d.add_argument("--format", choices=("text", "json"), default="text", help="text (default) or json")
    d.add_argument("--output", "-o", metavar="FILE.toml", help="write the detected or estimated spec as TOML")
    m = subparsers.add_parser(
        "measure", help="measure this machine's roofs (bandwidth per cache level, GEMM/Conv peaks)",
        description="Measure streaming bandwidth over working sets from 16 KiB to past the last-level cache and "
                    "GEMM/Conv FLOP/s per dtype with numpy and onnxruntime, using every CPU; the best figures "
                    "become a spec (roofs: nothing should run faster).")
    m.add_argument("--output", "-o", metavar="FILE.toml", help="write the measured spec as TOML")
    m.add_argument("--quick", action="store_true", help="small sizes, two repeats: seconds, not for budgeting")
    m.add_argument("--threads", type=int, metavar="N", help="threads to use (default: every CPU this process may use)")
    m.add_argument("--format", choices=("text", "json"), default="text", help="text (default) or json")
    m.add_argument("--refresh", action="store_true",
                   help="measure again and replace the cached roofs `--hardware measured` uses (kept only when "
                        "the machine was quiet; busy measurements are retried, at most 3 tries)")


def run(args: argparse.Namespace) -> int:
    """Run ``detect`` or ``measure`` (``args.hw_command``)."""
    if args.hw_command == "detect":
        return _detect(args)
    return _measure(args)


def _write_spec(spec: Any, output: str) -> None:
    path = Path(output)
    write_output(output, catalog.to_toml(spec))  # atomic: a failed write leaves the old spec whole
    try:
        catalog.load_file(path)  # what we write must read back
    except catalog.HardwareError as e:
        raise CliError(f"--output {output}: the written spec does not read back ({e})") from None


def _guard(output: str | None) -> None:
    """``-o`` must be a plain file (not a directory, FIFO or device); these commands read no input file."""
    guard(output)


def _detect(args: argparse.Namespace) -> int:
    # lazy: the probes (0.05 s detect, 0.16 s measure, before ORT itself); only these commands
    from graphcost.hardware.detect import detect

    _guard(args.output)
    found = detect()
    if args.output:
        _write_spec(found.spec, args.output)
    if args.format == "json":
        sys.stdout.write(json.dumps(found.to_dict(), indent=2) + "\n")
        return 0
    lines = hardware_text.found_lines(found)
    lines += ["", catalog.describe(found.spec)]
    if args.output:
        lines.append(f"wrote {args.output} (use: graphcost analyze MODEL --hardware {args.output})")
    sys.stdout.write("\n".join(terminal_text(line) for line in lines) + "\n")
    return 0


def _measure(args: argparse.Namespace) -> int:
    # lazy: the probes (0.05 s detect, 0.16 s measure, before ORT itself); only these commands
    from graphcost.hardware.measure import measure

    if args.threads is not None and args.threads < 1:
        raise CliError(f"--threads {args.threads}: must be ≥ 1")
    _guard(args.output)  # before a minute of measuring
    if args.refresh and args.threads is not None:
        raise CliError("--refresh measures the cached roofs with every CPU; leave out --threads")

    def progress(message: str) -> None:
        print(f"  {terminal_text(message)}", file=sys.stderr, flush=True)

    try:
        result = _refreshed(args.quick, progress) if args.refresh else measure(
            quick=args.quick, threads=args.threads, progress=progress)
    except ValueError as e:
        raise CliError(str(e).splitlines()[0]) from None
    if args.output:
        _write_spec(result.spec, args.output)
    if args.format == "json":
        sys.stdout.write(json.dumps(result.to_dict(), indent=2) + "\n")
        return 0
    warnings = [s for s in result.spec.sources if s.startswith("warning:")]
    # a busy machine's warning first
    lines = [*warnings, *([""] if warnings else []), *hardware_text.measured_lines(result)]
    if args.output:
        lines.append(f"wrote {args.output} (use: graphcost analyze MODEL --hardware {args.output})")
    sys.stdout.write("\n".join(terminal_text(line) for line in lines) + "\n")
    return 0


def _refreshed(quick: bool, progress: Callable[[str], None]) -> Any:
    """``--refresh``: the cache ``--hardware measured`` reads, measured again (busy roofs are not kept)."""
    # lazy: the probes (0.05 s detect, 0.16 s measure, before ORT itself); only these commands
    from graphcost.hardware.measure import refresh_cache

    return refresh_cache(progress=progress, quick=quick)[0]
