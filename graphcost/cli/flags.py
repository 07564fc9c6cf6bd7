"""The flags several commands share, defined once, and their parsers: the hardware flags, the model flags
(``--dim``, ``--input-shape``, ``--input-value``), ``--format``/``--output``, and the one-line ``CliError``.

Exit codes: 0 success; 2 bad input (a file that is not a readable ONNX model, a bad flag or value), always with
one line on stderr naming the file or flag and the problem, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from graphcost.hardware import catalog
from graphcost.hardware.spec import HardwareSpec
from graphcost.report.escape import terminal_text  # error lines quote paths and names: no raw ESC, CR, LF

EXIT_OK = 0
EXIT_BAD_INPUT = 2


class CliError(Exception):
    """A user error: printed as one line, exit 2."""


class Parser(argparse.ArgumentParser):
    """``argparse`` whose errors are one line with the reason (argparse would print the whole usage first)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        """Exit 2 with one line: the reason and where the help is."""
        self.exit(EXIT_BAD_INPUT, f"graphcost: {terminal_text(message)} (see {self.prog} --help)\n")


# ------------------------------------------------------------------------------------------------ hardware flags
def hardware_flags(a: argparse.ArgumentParser) -> None:
    """``--hardware`` and the roof overrides: the one definition every command that bounds time uses, read back
    by :func:`resolve_hardware`."""
    a.add_argument("--hardware", metavar="NAME|FILE",
                   help="catalog device name, a TOML spec file, 'detect' (this machine's catalog entry or estimate) "
                        "or 'measured' (its measured roofs, cached) (default: edge-soc; measured for gap and "
                        "compare; see graphcost hardware list)")
    a.add_argument("--peak-flops", action="append", default=[], metavar="[DTYPE=]F",
                   help="override/define a peak, e.g. 2e12 or float16=4T (repeatable)")
    a.add_argument("--memory-bandwidth", metavar="B", help="DRAM bandwidth in B/s, e.g. 50e9 or 50GB/s")
    a.add_argument("--energy-per-byte", metavar="J", help="energy per DRAM byte, e.g. 160e-12 or 160pJ")
    a.add_argument("--derate", nargs="?", const="0.6,0.7", default=None, metavar="C,B",
                   help="derate peaks to sustained roofs (default placeholders 0.6 compute, 0.7 bandwidth)")
    a.add_argument("--no-capacity", action="store_true",
                   help="charge every byte at DRAM bandwidth even when the working set fits on chip")


def resolve_hardware(args: argparse.Namespace) -> HardwareSpec:
    """The HardwareSpec the hardware flags describe (shared by every subcommand that bounds time)."""
    try:
        peaks = dict(catalog.parse_peak_flops(x) for x in args.peak_flops)
        bw = catalog.parse_quantity(args.memory_bandwidth) if args.memory_bandwidth else None
        epb = catalog.parse_quantity(args.energy_per_byte) if args.energy_per_byte else None
        if args.hardware is None and (peaks or bw is not None):  # a fresh device, never half of edge-soc
            if not peaks or bw is None:
                given, missing = ("--peak-flops", "--memory-bandwidth") if peaks else ("--memory-bandwidth",
                                                                                       "--peak-flops")
                raise CliError(f"{given} without --hardware describes a new device: give {missing} too (or "
                               "--hardware NAME to override one roof of a catalog device)")
            spec = catalog.adhoc(peaks, bw, epb)
        else:
            probe = (args.hardware or "").strip().lower()
            spec = _probed(probe) if probe in ("detect", "measured") else catalog.resolve(
                args.hardware or catalog.DEFAULT_HARDWARE)
            if peaks or bw is not None or epb is not None:
                spec = catalog.override(spec, peak_flops=peaks or None, memory_bandwidth=bw, energy_per_byte=epb)
        if args.derate:
            parts = args.derate.split(",")
            if len(parts) != 2:
                raise CliError(f"--derate {args.derate!r}: expected COMPUTE,BANDWIDTH, e.g. 0.6,0.7")
            spec = spec.derated(float(parts[0]), float(parts[1]))
    except CliError:
        raise
    except ValueError as e:
        raise CliError(str(e).splitlines()[0]) from None
    return spec


def _probed(how: str) -> HardwareSpec:
    """``--hardware detect``: this machine as ``graphcost hardware detect`` sees it (a catalog match or an
    estimate). ``--hardware measured``: its roofs measured by ``graphcost hardware measure``, cached per machine
    (measured now, about a minute, when there is no cache yet)."""
    if how == "detect":
        from graphcost.hardware.detect import detect  # lazy: 0.05 s of imports, only for --hardware detect

        return detect().spec
    # lazy: the microbenchmarks import onnxruntime (0.16 s before ORT itself), only for --hardware measured
    from graphcost.hardware.measure import StderrProgress, measured_roofs

    progress = StderrProgress()  # says why it measures, each stage, and any busy-machine warning, on stderr
    try:
        return measured_roofs(progress=progress)[0]  # roofs measured busy come back uncached, with the warning
    finally:
        progress.close()


# ------------------------------------------------------------------------------ --dim, --input-shape, --input-value
def model_flags(p: argparse.ArgumentParser) -> None:
    """``--dim``, ``--input-shape`` and ``--input-value``: the one definition every subcommand that takes a model
    uses, parsed by :func:`parse_model_flags`."""
    g = p.add_argument_group("dims and inputs")
    g.add_argument("--dim", action="append", default=[], metavar="NAME=VALUE",
                   help="bind a symbolic dim (repeatable), e.g. --dim batch=8 --dim seq=512; runs (fold, bench, "
                        "gap) take sizes the model states, else 1 where the model's shapes allow it")
    g.add_argument("--input-shape", action="append", default=[], metavar="INPUT=DIMS",
                   help="fix a graph input's whole shape, e.g. input=1x3x224x224 (repeatable)")
    g.add_argument("--input-value", action="append", default=[], metavar="NAME=V",
                   help="give a graph input a constant value for shape inference (and runs): a scalar or a short "
                        "list, e.g. sr=16000 or shape=1,3,224,224 (repeatable)")


def parse_dims(items: Sequence[str]) -> dict[str, int]:
    """``--dim NAME=VALUE`` items as a dict (one-line CliError naming the item on bad syntax)."""
    out: dict[str, int] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise CliError(f"--dim {item!r}: expected NAME=VALUE, e.g. batch=8")
        try:
            v = int(value)
        except ValueError:
            raise CliError(f"--dim {item!r}: value must be a whole number") from None
        if v < 0:
            raise CliError(f"--dim {item!r}: value must be ≥ 0")
        out[name.strip()] = v
    return out


@dataclass(frozen=True)
class ModelFlags:
    """What ``--dim``, ``--input-shape`` and ``--input-value`` said, parsed."""

    dims: dict[str, int]
    input_shapes: dict[str, list[int | str]]
    input_values: dict[str, Any]

    def analysis(self, model: Any, **kw: Any) -> Any:
        """``Analysis.of(model, ...)`` with these flags; a problem with them or the model as a CliError."""
        # lazy: the front door (onnx, numpy, the shape engine) is 0.37 s of imports; only commands with a model
        from graphcost.analysis import Analysis

        try:
            return Analysis.of(model, dims=self.dims, input_shapes=self.input_shapes,
                               input_values=self.input_values, **kw)
        except Exception as e:
            raise analysis_error(e, model) from None


def parse_model_flags(args: argparse.Namespace) -> ModelFlags:
    """The one parser of the shared model flags (one-line CliError naming the flag on bad syntax)."""
    dims = parse_dims(getattr(args, "dim", []) or [])
    shape_items = getattr(args, "input_shape", []) or []
    shapes: dict[str, list[int | str]] = {}
    if shape_items:
        from graphcost.passes.shapes import parse_input_shape  # lazy: the shape engine, 0.23 s of imports

        try:
            shapes = dict(parse_input_shape(x) for x in shape_items)
        except ValueError as e:
            raise CliError(str(e)) from None
    values = dict(_parse_input_value(x) for x in getattr(args, "input_value", []) or [])
    return ModelFlags(dims, shapes, values)


def _parse_input_value(item: str) -> tuple[str, Any]:
    """``sr=16000`` → ("sr", 16000); ``shape=1,3,224,224`` → ("shape", [1, 3, 224, 224]); ``flag=true``."""
    # lazy: the front door (0.37 s of imports) loads only when a command is given --input-value
    from graphcost.analysis import MAX_INPUT_VALUE_ELEMENTS  # a scalar or a short list, never data

    name, sep, text = item.partition("=")
    if not sep or not name.strip() or not text.strip():
        raise CliError(f"--input-value {item!r}: expected NAME=V, e.g. sr=16000 or shape=1,3,224,224")
    parts = [p.strip() for p in text.split(",")]
    if len(parts) > MAX_INPUT_VALUE_ELEMENTS:
        raise CliError(f"--input-value {item!r}: at most {MAX_INPUT_VALUE_ELEMENTS} numbers")
    out: list[int | float | bool] = []
    for p in parts:
        if re.fullmatch(r"[-+]?[0-9]+", p):
            out.append(int(p))
        elif p.lower() in ("true", "false"):
            out.append(p.lower() == "true")
        elif re.fullmatch(r"[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?", p):
            out.append(float(p))
        else:
            raise CliError(f"--input-value {item!r}: {p!r} is not a number (whole numbers, decimals, true/false)")
    return name.strip(), out[0] if len(parts) == 1 else out


def analysis_error(e: Exception, model: Any) -> CliError:
    """An exception from the front door as the CLI's one line: flag wording added to the binding's errors."""
    # lazy: graphcost.binding and graphcost.load import onnx (0.26 s); only a failed run reaches here
    from graphcost.binding import UnboundDims, UnknownDim
    from graphcost.load import LoadError, display_path

    where = f"{display_path(model)}: " if isinstance(model, (str, os.PathLike)) else ""
    if isinstance(e, UnknownDim):
        return CliError(f"{where}--dim {e.name}: {e}")
    if isinstance(e, UnboundDims):
        flags = " ".join(f"--dim {d}=N" for d in e.names)
        return CliError(f"{where}{e.head}; pass {flags} ({e.why})")
    if isinstance(e, CliError):
        return e
    if isinstance(e, LoadError):
        return CliError(str(e))
    if isinstance(e, ValueError):
        return CliError(f"{where}{str(e).splitlines()[0] if str(e).strip() else type(e).__name__}")
    raise e


# ----------------------------------------------------------------------------------------------- --format, --output
def output_flags(p: argparse.ArgumentParser, formats: Sequence[str] = ("text", "json"), *,
                 format_help: str | None = None, what: str = "report") -> None:
    """``--format`` (one of ``formats``, the first the default) and ``--output``/``-o FILE``, in that order, as
    the commands that print a report spell them; the file is written by ``graphcost.cli.output.write_output``."""
    p.add_argument("--format", choices=tuple(formats), default=formats[0], help=format_help)
    p.add_argument("--output", "-o", metavar="FILE", help=f"write the {what} to FILE instead of stdout")
