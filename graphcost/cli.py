"""Command line: argument parsing and exit codes only; the analysis lives in the API.

Exit codes: 0 success; 2 bad input (a file that is not a readable ONNX model, a bad flag or value),
always with one line on stderr naming the file or flag and the problem, never a traceback.
Set GRAPHCOST_DEBUG=1 to see tracebacks.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import os
import re
import stat
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from graphcost.report.escape import terminal_text  # error lines quote paths and names: no raw ESC, CR, LF

EXIT_OK = 0
EXIT_BAD_INPUT = 2


class CliError(Exception):
    """A user error: printed as one line, exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # One line with the reason (argparse would print the whole usage first).
        self.exit(EXIT_BAD_INPUT, f"graphcost: {terminal_text(message)} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="graphcost", description="Static cost analysis of ONNX models.")
    p.add_argument("--version", action="store_true", help="print the version and exit")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)

    a = sub.add_parser("analyze", help="FLOPs, bytes and roofline bound of a model",
                       description="Per-node FLOPs, MACs, bytes and roofline bounds of an ONNX model.")
    a.add_argument("model", help="path to an .onnx file")
    _hardware_flags(a)
    model_flags(a)
    a.add_argument("--format", choices=("text", "json", "csv", "html"), default="text",
                   help="text (default), json, csv (one row per node), or html (a self-contained offline page)")
    a.add_argument("--output", "-o", metavar="FILE", help="write the report to FILE instead of stdout")
    a.add_argument("--top", type=int, default=10, metavar="N", help="nodes in the top-N table (text, html)")
    a.add_argument("--fusion-policy", default="ideal", metavar="NAME",
                   help="fusion policy for report.fusion: ideal (default) or none")
    a.add_argument("--no-fusion", action="store_true", help="skip the fusion pass")
    a.add_argument("--no-memory", action="store_true", help="skip the liveness pass")
    a.add_argument("--alignment", type=int, default=64, metavar="B", help="arena alignment in bytes (default 64)")
    a.add_argument("--training", action="store_true",
                   help="add training memory: weights + gradients + optimizer state + kept activations")
    a.add_argument("--optimizer-state-multiplier", type=float, default=2.0, metavar="K",
                   help="optimizer state as K × weight bytes (default 2, Adam)")
    a.add_argument("--no-gradients", action="store_true", help="training memory without gradient buffers")
    a.add_argument("--no-batchnorm", action="store_true", help="skip the batchnorm folding analysis")
    a.add_argument("--as", dest="as_convention", metavar="TOOL",
                   help="print the totals another tool would report: torch, torchvision, fvcore, ptflops, thop, "
                        "onnx-tool, onnxsim (docs/conventions.md)")
    from graphcost.whatif import add_flags as _whatif_flags

    _whatif_flags(a)  # --budget-ms, --fps, --sustained-clock, --p99-factor, --power-envelope, --weights, --sweep…

    for module in _command_modules():
        module.register(sub, _hardware_flags)

    h = sub.add_parser("hardware", help="list or show device specs; detect this machine or measure its roofs")
    hs = h.add_subparsers(dest="hw_command", parser_class=_Parser)
    hs.add_parser("list", help="list catalog devices")
    show = hs.add_parser("show", help="show one device (name or TOML file)")
    show.add_argument("name")
    probe = _probe_module()
    if probe is not None:
        probe.register(hs, _hardware_flags)  # hardware detect | measure
    return p


COMMAND_MODULES = ("graphcost._cmd_fusion", "graphcost._cmd_fold", "graphcost._cmd_audit", "graphcost._cmd_diff",
                   "graphcost._cmd_export", "graphcost._cmd_bench", "graphcost._cmd_gap", "graphcost._cmd_compare",
                   "graphcost._cmd_llm", "graphcost._cmd_budget", "graphcost._cmd_train", "graphcost._cmd_explain")
"""Subcommands that live in their own modules: each has ``register(subparsers, hardware_flags)`` and
``run(args) -> int`` (raising CliError for user errors)."""


def _command_modules() -> list:  # type: ignore[type-arg]
    out = []
    for name in COMMAND_MODULES:
        module = _optional_module(name)
        if module is not None:
            out.append(module)
    return out


def _optional_module(name: str):  # type: ignore[no-untyped-def]
    import importlib

    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name != name:
            raise
        return None


PROBE_MODULE = "graphcost._cmd_hardware_probe"
"""``hardware detect`` and ``hardware measure``: ``register(hardware_subparsers, hardware_flags)`` and
``run(args) -> int`` for ``args.hw_command`` in ``PROBE_COMMANDS``."""


def _probe_module():  # type: ignore[no-untyped-def]
    return _optional_module(PROBE_MODULE)


def _hardware_flags(a: argparse.ArgumentParser) -> None:
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


def _parse_dims(items: Sequence[str]) -> dict[str, int]:
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


def _probed(how: str):  # type: ignore[no-untyped-def]
    """``--hardware detect``: this machine as ``graphcost hardware detect`` sees it (a catalog match or an
    estimate). ``--hardware measured``: its roofs measured by ``graphcost hardware measure``, cached per machine
    (measured now, about a minute, when there is no cache yet)."""
    if how == "detect":
        from graphcost.hardware.detect import detect

        return detect().spec
    from graphcost.hardware.measure import StderrProgress, measured_roofs

    progress = StderrProgress()  # says why it measures, each stage, and any busy-machine warning, on stderr
    try:
        return measured_roofs(progress=progress)[0]  # roofs measured busy come back uncached, with the warning
    finally:
        progress.close()


def resolve_hardware(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """The HardwareSpec the hardware flags describe (shared by every subcommand that bounds time)."""
    return _resolve_hardware(args)


def parse_dims(items: Sequence[str]) -> dict[str, int]:
    return _parse_dims(items)


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


@dataclass(frozen=True)
class ModelFlags:
    """What ``--dim``, ``--input-shape`` and ``--input-value`` said, parsed."""

    dims: dict[str, int]
    input_shapes: dict[str, list[int | str]]
    input_values: dict[str, Any]

    def analysis(self, model: Any, **kw: Any) -> Any:
        """``Analysis.of(model, ...)`` with these flags; a problem with them or the model as a CliError."""
        from graphcost.analysis import Analysis

        try:
            return Analysis.of(model, dims=self.dims, input_shapes=self.input_shapes,
                               input_values=self.input_values, **kw)
        except Exception as e:
            raise analysis_error(e, model) from None


def parse_model_flags(args: argparse.Namespace) -> ModelFlags:
    """The one parser of the shared model flags (one-line CliError naming the flag on bad syntax)."""
    from graphcost.passes.shapes import parse_input_shape

    dims = _parse_dims(getattr(args, "dim", []) or [])
    try:
        shapes = dict(parse_input_shape(x) for x in getattr(args, "input_shape", []) or [])
    except ValueError as e:
        raise CliError(str(e)) from None
    values = dict(_parse_input_value(x) for x in getattr(args, "input_value", []) or [])
    return ModelFlags(dims, shapes, values)


def _parse_input_value(item: str) -> tuple[str, Any]:
    """``sr=16000`` → ("sr", 16000); ``shape=1,3,224,224`` → ("shape", [1, 3, 224, 224]); ``flag=true``."""
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


def _resolve_hardware(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from graphcost.hardware import catalog

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


def _cmd_analyze(args: argparse.Namespace) -> int:
    from graphcost.api import analyze

    flags = parse_model_flags(args)
    if args.top < 0:
        raise CliError("--top must be ≥ 0")
    if args.output:  # before anything runs: never over the model, its weights or the --hardware file
        from graphcost._outpath import guard, hardware_input, protected_paths

        guard(args.output, lambda: {**protected_paths(args.model), **hardware_input(args.hardware)})
    hw = _resolve_hardware(args)
    if args.alignment <= 0:
        raise CliError("--alignment must be a positive number of bytes")
    if args.optimizer_state_multiplier < 0:
        raise CliError("--optimizer-state-multiplier must be ≥ 0")
    if args.fusion_policy not in ("ideal", "none"):
        raise CliError(f"--fusion-policy {args.fusion_policy!r}: expected ideal or none")
    from graphcost.passes.liveness import TrainingOptions

    training = TrainingOptions(optimizer_state_multiplier=args.optimizer_state_multiplier,
                               gradients=not args.no_gradients) if args.training else None
    try:
        report = analyze(flags.analysis(args.model), hardware=hw, capacity=not args.no_capacity,
                         fusion=not args.no_fusion, fusion_policy=args.fusion_policy, memory=not args.no_memory,
                         training=training, alignment=args.alignment, batchnorm=not args.no_batchnorm)
        from graphcost.whatif import apply_args

        report = apply_args(report, args)  # the what-if flags, over the finished report
    except ValueError as e:
        raise analysis_error(e, args.model) from None
    if args.as_convention is not None:
        from graphcost._cmd_explain import convention_text

        write_output(args.output, convention_text(report, args.as_convention, args.format))
        return EXIT_OK
    text: str | Iterable[str]
    if args.format == "json":
        text = itertools.chain(report.json_chunks(), ("\n",))  # streamed: a 100k-node report is never one string
    elif args.format == "csv":
        text = report.to_csv()
    elif args.format == "html":
        from graphcost.report.html import render_html

        text = render_html(report, top=args.top)
    else:
        text = report.to_text(top=args.top)
    write_output(args.output, text)
    return EXIT_OK


def write_output(output: str | None, text: str | Iterable[str]) -> None:
    """A report (one string, or its pieces in order) to ``--output FILE`` (one-line error when it cannot be
    written) or to stdout.

    The file is written atomically: a temporary file beside the target (the symlink's target when FILE is a
    symlink), then ``os.replace``, so a failed run never leaves a truncated report, a hard link to FILE keeps its
    old content, and a FIFO is refused rather than opened (a character device such as /dev/null is written in
    place). Callers check FILE against their inputs first (``graphcost._outpath.guard``), before they run
    anything.
    """
    pieces = (text,) if isinstance(text, str) else text
    if not output:
        sys.stdout.writelines(pieces)
        return
    import tempfile

    from graphcost._outpath import guard

    guard(output)  # a directory, FIFO, block device or socket: refused here too, whatever the caller checked
    target = os.path.realpath(output)
    try:
        st = os.stat(target)
    except OSError:
        st = None
    if st is not None and stat.S_ISCHR(st.st_mode):  # -o /dev/null, a terminal: written in place, never replaced
        try:
            with open(target, "w", encoding="utf-8") as f:
                f.writelines(pieces)
        except OSError as e:
            raise CliError(f"--output {output}: cannot write ({e.strerror or e})") from None
        return
    mode = st.st_mode & 0o7777 if st is not None else 0o666 & ~_umask()  # an existing report keeps its mode
    tmp = ""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp",
                                   dir=os.path.dirname(target))
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.writelines(pieces)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except OSError as e:
        if tmp:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        raise CliError(f"--output {output}: cannot write ({e.strerror or e})") from None


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _cmd_hardware(args: argparse.Namespace) -> int:
    from graphcost.hardware import catalog

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


def main(argv: Sequence[str] | None = None) -> int:
    # A CLI run is short and frees little until it exits: the cyclic collector only costs time here.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _main(argv)
    finally:
        if was_enabled:
            gc.enable()


def _main(argv: Sequence[str] | None) -> int:
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # argparse would name the top-level parser; point at the subcommand's help instead
        where = " ".join(x for x in ("graphcost", args.command, getattr(args, "hw_command", None)) if x)
        print(terminal_text(f"graphcost: unrecognized arguments: {' '.join(extra)} (see {where} --help)"),
              file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.version:
        from graphcost import __version__

        print(f"graphcost {__version__}")
        return EXIT_OK
    try:
        if args.command == "analyze":
            return _cmd_analyze(args)
        for module in _command_modules():
            if args.command == module.NAME:
                return int(module.run(args))
        if args.command == "hardware":
            if args.hw_command is None:
                raise CliError("hardware: expected 'list', 'show NAME', 'detect' or 'measure'")
            probe = _probe_module()
            if probe is not None and args.hw_command in probe.PROBE_COMMANDS:
                return int(probe.run(args))
            return _cmd_hardware(args)
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


if __name__ == "__main__":
    sys.exit(main())
