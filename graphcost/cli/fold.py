"""``graphcost fold MODEL -o OUT``: fold BatchNormalization into its neighbours, verified in onnxruntime.

Exit codes: 0 folded (or nothing to fold) and written; 1 verification failed, nothing written; 2 bad input
(unreadable model, ``-o`` missing or equal to the input, a bad flag), one line on stderr.
"""

from __future__ import annotations

import argparse
import os
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
from graphcost.cli.output import guard, hardware_input, protected_paths
from graphcost.report.escape import terminal_text
from graphcost.report.units import bytes_, seconds, si

NAME = "fold"
HELP = "fold BatchNormalization into Conv/Gemm/MatMul, verified in onnxruntime"
"""The line ``graphcost --help`` lists for this command."""
EXIT_MISMATCH = 1


def register(subparsers: Any) -> None:
    """The ``fold`` subcommand and its flags."""
    p = subparsers.add_parser(
        NAME, help=HELP,
        description="Fold every foldable BatchNormalization into its neighbouring Conv, ConvTranspose, Gemm or "
                    "MatMul, check the result against the original in onnxruntime on random inputs, and write it "
                    "only if they agree. Refused BNs are listed with the reason.")
    p.add_argument("model", help="path to an .onnx file (never modified)")
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="where to write the folded model")
    p.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance of the check (default 1e-4)")
    p.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance of the check (default 1e-5)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random verification inputs")
    model_flags(p)
    hardware_flags(p)


def _check_output(model: str, output: str, hardware: str | None) -> None:
    """Neither OUT nor the weights file written beside it (``OUT.data``) may be an input or a file it names.

    ``fold_model`` refuses the model itself; the CLI also refuses its external-data files (``-o weights.bin``
    would replace them with the folded model), through any symlink, hard link or ``..``.
    """
    if not os.path.isfile(model):
        return  # fold_model says why, in its own words
    protected = protected_paths(model)
    guard(output, {**protected, **hardware_input(hardware)}, flag="-o")
    if len(protected) > 1:  # external data: fold_model writes the folded weights to OUT.data
        guard(output + ".data", protected, flag=f"-o {output}: its data file")


def run(args: argparse.Namespace) -> int:
    """Fold, verify and write the model; 1 (nothing written) when verification fails."""
    # lazy: folding pulls in the pipeline and onnxruntime (0.44 s of imports); only fold needs it
    from graphcost.fold import FoldError, FoldMismatch, fold_model
    from graphcost.load import LoadError, display_path
    from graphcost.passes.batchnorm import time_saved_s

    flags = parse_model_flags(args)
    for flag, value in (("--rtol", args.rtol), ("--atol", args.atol)):
        if not value >= 0:
            raise CliError(f"{flag} {value}: must be ≥ 0")
    _check_output(args.model, args.output, args.hardware)
    hw = resolve_hardware(args)
    try:
        result = fold_model(args.model, args.output, dims=flags.dims, input_shapes=flags.input_shapes,
                            input_values=flags.input_values, rtol=args.rtol, atol=args.atol, seed=args.seed)
    except (LoadError, FoldError) as e:
        raise CliError(str(e).splitlines()[0]) from None
    except FoldMismatch as e:
        print(terminal_text(f"graphcost: {display_path(args.model)}: verification failed, nothing written: {e}"),
              file=sys.stderr)
        return EXIT_MISMATCH
    except ValueError as e:  # a dim the model lacks or a run cannot default, an invalid model
        raise analysis_error(e, args.model) from None

    lines: list[str] = []
    total = len(result.folded) + len(result.refused)
    lines.append(f"folded {len(result.folded)} of {total} BatchNormalization nodes: {display_path(args.model)} -> "
                 f"{display_path(args.output)}")
    for f in result.folded:
        lines.append(f"  {f.batchnorm} -> {f.into} ({f.into_op}, {f.direction})")
    if result.refused:
        lines.append(f"refused {len(result.refused)}:")
        for r in result.refused:
            lines.append(f"  {r.batchnorm}: {r.reason}")
    binding = result.binding
    shown = ", ".join(f"{k}={v}" for k, v in sorted(binding.items()))
    at = f" at {shown}" if shown else ""
    flops = result.flops_saved
    time_s = time_saved_s(result.analysis, hw, binding)
    lines.append(f"saved{at}: {bytes_(result.bytes_saved)} of memory traffic, "
                 f"{si(flops, 'FLOP')}, {seconds(time_s)} on {hw.name}")
    lines.append(f"  (time = Σ over folded BNs of max(bytes / {si(hw.memory_bandwidth, 'B/s')}, "
                 "FLOPs / peak for the BN's dtype), net of any bias the fold adds)")
    if result.bytes_saved is None or result.flops_saved is None:
        lines.append("  (a folded BN has an unknown shape, so its saving is shown as ?)")
    lines.append(f"verified in onnxruntime on random inputs{at}: max |diff| {result.max_abs_diff:.3g}, "
                 f"max |diff| / max|output| {result.max_rel_diff:.3g} (rtol {args.rtol:g}, atol {args.atol:g})")
    sys.stdout.write("".join(terminal_text(line) + "\n" for line in lines))  # names from the model: escaped
    return 0
