"""``graphcost bench MODEL``: measure a model in onnxruntime (and its native framework), optionally with the gap report.

MODEL is an .onnx file, ``ref:FRAMEWORK/ARCH`` for a reference model of ``graphcost.models.zoo``, or
``FILE.py:FACTORY`` (the file is imported and ``FACTORY()`` returns a torch module, a JAX function or flax.nnx
module, a Keras model or a ``tf.function`` — or a ``(model, example_inputs)`` pair; else ``--input`` gives the
example inputs, as for ``graphcost export``). A framework model is exported (and verified) into a temporary
directory first, nothing is written beside the file, and ``--native`` also times it in its own framework on the
same inputs. ``--gap`` (or the ``gap`` command) adds bounds, efficiencies and diagnoses.

Exit codes: 0 measured (and, with ``--gap``, no row faster than its bound); 1 the gap report found an accounting
error (a row measured faster than its bound); 2 bad input, one line on stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from graphcost.cli.flags import (
    CliError,
    analysis_error,
    hardware_flags,
    model_flags,
    output_flags,
    parse_model_flags,
    resolve_hardware,
)
from graphcost.cli.output import guard, hardware_input, protected_paths, write_output
from graphcost.report import bench_text
from graphcost.report.escape import terminal_text

NAME = "bench"
HELP = "measure a model in onnxruntime (per-kernel times) and its native framework"
"""The line ``graphcost --help`` lists for this command."""
EXIT_ACCOUNTING = 1


def add_measure_flags(p: argparse.ArgumentParser) -> None:
    """The model and measurement flags ``bench`` and ``gap`` share (one definition)."""
    p.add_argument("model", help="an .onnx file, ref:FRAMEWORK/ARCH (e.g. ref:torch/cnn) for a reference model, or "
                                 "FILE.py:FACTORY for a model your code builds")
    model_flags(p)
    p.add_argument("--input", action="append", default=[], metavar="NAME=DIMS[:DTYPE]",
                   help="FILE.py:FACTORY: an example input (repeatable, in call order), as for graphcost export; "
                        "named dims take their --dim size (batch 2, seq 16, others 2 by default)")
    p.add_argument("--framework", choices=("torch", "tf", "jax"),
                   help="FILE.py:FACTORY: the model's framework (inferred from the object when it can be)")
    p.add_argument("--batch", type=int, default=None, metavar="N", help="shorthand for --dim batch=N")
    p.add_argument("--provider", default="cpu", help="onnxruntime execution provider: cpu (default), cuda, tensorrt")
    p.add_argument("--threads", type=int, default=None, metavar="N", help="intra-op threads (default: ORT's)")
    p.add_argument("--warmup", type=int, default=10, metavar="N", help="discarded warm-up runs (default 10)")
    p.add_argument("--repeats", type=int, default=50, metavar="N", help="timed runs (default 50)")
    p.add_argument("--level", default="all", choices=("basic", "extended", "all"),
                   help="ORT graph optimization level (default all, ORT's own default)")
    p.add_argument("--native", action="store_true",
                   help="also time a ref: or FILE.py:FACTORY model in its own framework (torch eager, jax.jit, "
                        "tf.function)")
    p.add_argument("--compile", action="store_true", help="with --native on torch: time torch.compile too")
    p.add_argument("--seed", type=int, default=0, help="seed of the generated inputs")
    output_flags(p)


def add_gap_flags(p: argparse.ArgumentParser) -> None:
    """The flags only the gap report reads (``bench --gap`` and ``gap``)."""
    p.add_argument("--budget-ms", type=float, default=None, metavar="MS",
                   help="latency budget: checked against p99 at sustained clocks; a floor above it is a veto")
    p.add_argument("--sustained-clock", type=float, default=1.0, metavar="F",
                   help="sustained clock as a fraction of the benchmark clock (e.g. 0.72); default 1")
    p.add_argument("--residency", choices=("warm", "cold"), default="warm",
                   help="where bytes may come from (default warm: a benchmark loop on a model that fits on chip)")
    p.add_argument("--top", type=int, default=10, metavar="N", help="kernel and group rows shown (text)")


def register(subparsers: Any) -> None:
    """The ``bench`` subcommand and its flags."""
    p = subparsers.add_parser(
        NAME, help=HELP,
        description="Time a model in onnxruntime (median, p90, p99, min, spread; per-kernel times from ORT's "
                    "profiler mapped back to source nodes; measured memory) and, for ref: models with --native, "
                    "in its own framework. --gap adds the gap report (see graphcost gap --help).")
    add_measure_flags(p)
    p.add_argument("--gap", action="store_true", help="add bounds, efficiency and a diagnosis per row")
    add_gap_flags(p)
    hardware_flags(p)


def run(args: argparse.Namespace) -> int:
    """Measure the model; with ``--gap``, the gap report."""
    return measure_and_report(args, gap=bool(args.gap))


def measure_and_report(args: argparse.Namespace, *, gap: bool) -> int:
    """Measure ``args.model`` in onnxruntime (and natively), print the run or, with ``gap``, the gap
    report; 1 when a row was measured faster than its bound."""
    flags = parse_model_flags(args)
    if args.batch is not None:
        flags = dataclasses.replace(flags, dims={**flags.dims, "batch": args.batch})
    dims = flags.dims
    for flag, v in (("--warmup", args.warmup), ("--repeats", args.repeats)):
        if v < (0 if flag == "--warmup" else 1):
            raise CliError(f"{flag} {v}: must be ≥ {0 if flag == '--warmup' else 1}")
    if gap and not 0 < args.sustained_clock <= 1:
        raise CliError(f"--sustained-clock {args.sustained_clock:g}: must be in (0, 1] (e.g. 0.72)")
    if gap and args.budget_ms is not None and not args.budget_ms > 0:
        raise CliError(f"--budget-ms {args.budget_ms:g}: must be > 0")
    if args.compile and not args.native:
        raise CliError("--compile times torch.compile in the native run: it needs --native (and a torch model: "
                       "ref:torch/ARCH or FILE.py:FACTORY)")
    factory = _factory_file(args.model)
    if (args.input or args.framework) and factory is None:
        raise CliError("--input and --framework are for FILE.py:FACTORY models")
    if factory is None and not args.model.startswith("ref:") and not Path(args.model).is_file():
        raise CliError(f"{args.model}: no such file")  # before measuring roofs or exporting anything
    if factory is not None and not factory.is_file():
        raise CliError(f"{factory}: no such file")
    if args.output:  # before anything runs: never over the model, its weights, its code or the --hardware file

        model = None if args.model.startswith("ref:") or factory is not None else args.model
        code = {str(factory): "the model's code"} if factory is not None else {}
        guard(args.output, lambda: {**(protected_paths(model, args.output) if model else {}), **code,
                                    **hardware_input(args.hardware)})
    if gap and args.hardware is None and not args.peak_flops and args.memory_bandwidth is None:
        args.hardware = "measured"  # a measurement on this machine is bounded by its measured roofs
    with tempfile.TemporaryDirectory(prefix="graphcost-bench-") as tmp:
        if factory is not None:
            path, native_model = _export_factory(args, Path(tmp), dims)
            flags = dataclasses.replace(flags, dims={})  # the sizes are in the example inputs, hence in the file
        else:
            path, native_model = _resolve_model(args.model, Path(tmp), dims)
        analysis = flags.analysis(str(path))  # validated, shapes, costs, dims checked: the front door
        binding, feeds = _run_inputs(analysis, native_model, args, flags.input_values)
        _check_bounded(analysis, path, feeds, bool(flags.input_values))  # before roofs are measured (30 s)
        hw = resolve_hardware(args) if gap else None
        run_dims = {d: v for d, v in binding.values.items() if d in analysis.input_dims or d in binding.user}
        ort_run = _run_ort(path, run_dims, args, feeds, analysis, binding)
        natives = _run_natives(native_model, ort_run, args) if args.native else []
        if gap:
            # lazy: measuring pulls in onnxruntime and the pipeline (0.32 s + 0.52 s of imports); only bench/gap
            from graphcost.measure import gap_report
            from graphcost.report import gap_text

            assert hw is not None
            try:
                report = gap_report.build(str(path), ort_run, hardware=hw, natives=natives,
                                          budget_ms=args.budget_ms, sustained_clock=args.sustained_clock,
                                          residency=args.residency, label=args.model,
                                          input_values=flags.input_values)
            except ValueError as e:
                raise CliError(str(e).splitlines()[0]) from None
            text = report.to_json() + "\n" if args.format == "json" else gap_text.render(report, top=args.top)
            _say_binding(analysis, binding)  # only now: a failed run says one line, not a warning too
            _write(args, text)
            return EXIT_ACCOUNTING if report.errors else 0
        _say_binding(analysis, binding)
        _write(args, bench_text.render_json(ort_run, natives, args.model) if args.format == "json"
               else bench_text.render(ort_run, natives, args.model))
        return 0


def _factory_file(spec: str) -> Path | None:
    """The FILE.py of a ``FILE.py:FACTORY`` source (None for an .onnx file or a ref: model)."""
    file_part, sep, factory = spec.rpartition(":")
    if not sep or spec.startswith("ref:") or not file_part.endswith(".py") or not factory.isidentifier():
        return None
    return Path(file_part)


def _export_factory(args: argparse.Namespace, tmp: Path, dims: dict[str, int]) -> tuple[Path, Any]:
    """``FILE.py:FACTORY`` built, exported at its example inputs (static shapes) into ``tmp``, and verified."""
    # lazy: measuring pulls in onnxruntime and the pipeline (0.32 s + 0.52 s of imports); only bench/gap
    from graphcost import oneshot
    from graphcost.cli.export import _error as export_error
    from graphcost.cli.export import _load_factory, parse_input
    from graphcost.export import ExportError
    from graphcost.measure import FrameworkMissing

    spec = args.model
    was = sys.dont_write_bytecode
    sys.dont_write_bytecode = True  # importing the file writes no __pycache__ beside it
    try:
        built = _load_factory(spec)
    except Exception as e:
        if isinstance(e, CliError):  # _load_factory's own messages carry the export command's prefix
            raise CliError(str(e).removeprefix(str(export_error("")))) from None
        raise
    finally:
        sys.dont_write_bytecode = was
    obj, inputs = built if isinstance(built, tuple) and len(built) == 2 and not args.input else (built, None)
    if inputs is None:
        if not args.input:
            raise CliError(f"{spec}: give the example inputs with --input NAME=DIMS (e.g. --input x=batch,64), or "
                           "return (model, example_inputs) from the factory")
        import numpy as np

        # lazy: measuring pulls in onnxruntime and the pipeline (0.32 s + 0.52 s of imports); only bench/gap
        from graphcost.cli.export import _example

        rng = np.random.default_rng(args.seed)
        inputs = {}
        used: set[str] = set()
        for text in args.input:
            name, shape, dtype, named = parse_input(text, batch=dims.get("batch", 2), seq=dims.get("seq", 16))
            shape = tuple(dims.get(named[a], d) if a in named else d for a, d in enumerate(shape))
            used.update(named.values())
            if name in inputs:
                raise CliError(f"--input {name} given twice")
            inputs[name] = _example(rng, shape, dtype)
        unused = sorted(set(dims) - used)
        if unused:
            raise CliError(f"--dim {unused[0]}: no --input names that dim (the file is exported at the example "
                           "inputs' sizes)")
    elif dims:
        raise CliError(f"--dim {sorted(dims)[0]}: the factory's example inputs fix every size")
    try:
        exported = oneshot.export(obj, inputs, framework=args.framework, cache_dir=tmp)
    except (FrameworkMissing, ValueError) as e:
        raise CliError(f"{spec}: {str(e).splitlines()[0]}") from None
    except ExportError as e:
        raise CliError(f"{spec}: export failed: {str(e).splitlines()[0]}") from None
    return exported.path, exported.native


def _resolve_model(spec: str, tmp: Path, dims: dict[str, int]) -> tuple[Path, Any]:
    """The .onnx path to measure, and the native model when ``spec`` is ``ref:FRAMEWORK/ARCH``."""
    if not spec.startswith("ref:"):
        p = Path(spec)
        if not p.is_file():
            raise CliError(f"{spec}: no such file")
        return p, None
    try:
        framework, arch = spec[4:].split("/", 1)
    except ValueError:
        raise CliError(f"{spec}: expected ref:FRAMEWORK/ARCH, e.g. ref:torch/cnn") from None
    try:
        # lazy: measuring pulls in onnxruntime and the pipeline (0.32 s + 0.52 s of imports); only bench/gap
        from graphcost.export import ExportError, export_native
        from graphcost.models import zoo
    except ImportError as e:
        raise CliError(f"{spec}: {str(e).splitlines()[0]}") from None
    if framework not in zoo.FRAMEWORKS or arch not in zoo.ARCHS:
        raise CliError(f"{spec}: unknown reference model (frameworks: {', '.join(zoo.FRAMEWORKS)}; "
                       f"archs: {', '.join(zoo.ARCHS)})")
    try:
        model = zoo.build_native(framework, arch, batch=dims.get("batch", 2), seq=dims.get("seq", 16))
        out = tmp / f"{framework}_{arch}.onnx"
        export_native(model, out)
    except ImportError as e:
        raise CliError(str(e).splitlines()[0]) from None
    except ExportError as e:
        raise CliError(f"{spec}: {str(e).splitlines()[0]}") from None
    return out, model


def _run_inputs(analysis: Any, native: Any, args: argparse.Namespace, values: Mapping[str, Any]
                ) -> tuple[Any, dict[str, Any]]:
    """The run binding (``Analysis.run_binding``: a ref model's own example shapes count as known sizes, so ORT runs
    on the very inputs the native framework gets) and the arrays to feed: the ref model's inputs when they fit
    the binding, else ``graphcost.measure.make_inputs`` under it, with ``--input-value`` inputs as given."""
    # lazy: measuring pulls in onnxruntime and the pipeline (0.32 s + 0.52 s of imports); only bench/gap
    from graphcost.measure.inputs import make_inputs

    sizes: dict[str, int] = {}
    if native is not None:
        for name, axes in native.dynamic.items():
            for axis, dim in axes.items():
                if name in native.inputs:
                    sizes.setdefault(dim, int(native.inputs[name].shape[axis]))
    try:
        binding = analysis.run_binding(sizes)
    except ValueError as e:
        raise analysis_error(e, args.model) from None
    out = binding.as_dict()
    graph = analysis.model.graph()
    if native is not None and set(native.inputs) == set(graph.input_names) and all(
            int(native.inputs[n].shape[a]) == out.get(d) for n, axes in native.dynamic.items()
            for a, d in axes.items() if n in native.inputs):
        feeds = dict(native.inputs)
    else:
        source = analysis.graph if analysis.input_shapes else graph  # --input-shape: the analysed input shapes
        try:
            feeds = make_inputs(source, out, seed=args.seed)
        except ValueError as e:
            raise analysis_error(e, args.model) from None
    feeds.update(analysis.input_values)
    return binding, feeds


def _check_bounded(analysis: Any, path: Path, feeds: Mapping[str, Any], specialized: bool) -> None:
    """Refuse a model whose loops may not end (``graphcost.measure._bounded``), on the file's own graph."""
    # lazy: measuring pulls in onnxruntime and the pipeline (0.32 s + 0.52 s of imports); only bench/gap
    from graphcost.load import display_path, load
    from graphcost.measure._bounded import RunRefused, check_bounded

    model = load(path) if specialized else analysis.model  # the run executes the file, not its specialization
    try:
        check_bounded(model.proto, feeds, base_dir=model.base_dir)
    except RunRefused as e:
        raise CliError(f"{display_path(path)}: {e}") from None


def _say_binding(analysis: Any, binding: Any) -> None:
    """After a run that worked: which input dims took 1 (a warning) and which took a size the model states."""
    # lazy: measuring pulls in onnxruntime and the pipeline (0.32 s + 0.52 s of imports); only bench/gap
    from graphcost.binding import DEFAULT_DIM_VALUE

    defaulted = [d for d in analysis.input_dims if d in binding.defaulted]
    if defaulted:
        shown = ", ".join(f"{d}={DEFAULT_DIM_VALUE}" for d in defaulted)
        print(terminal_text(f"graphcost: warning: unbound dims {shown} (bind them with --dim NAME=VALUE)"),
              file=sys.stderr)
    if binding.taken:
        shown = ", ".join(f"{d}={binding.values[d]} ({where})" for d, where in binding.taken.items())
        print(terminal_text(f"graphcost: note: sizes the model states: {shown}"), file=sys.stderr)


def _run_ort(path: Path, dims: dict[str, int], args: argparse.Namespace, inputs: Any, analysis: Any,
             binding: Any) -> Any:
    # lazy: measuring pulls in onnxruntime and the pipeline (0.32 s + 0.52 s of imports); only bench/gap
    from graphcost.binding import run_failed
    from graphcost.measure import run_ort

    try:
        return run_ort(path, binding=dims, inputs=inputs, provider=args.provider, threads=args.threads,
                       warmup=args.warmup, repeats=args.repeats, level=args.level, seed=args.seed)
    except (ValueError, RuntimeError, OSError) as e:
        said = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        refusal = run_failed(binding, analysis.input_dims, said)  # dims that only took 1: name them
        if refusal is not None:
            raise analysis_error(refusal, args.model) from None
        raise CliError(f"{path}: {said}") from None


def _run_natives(model: Any, ort_run: Any, args: argparse.Namespace) -> list[Any]:
    """The native framework's runs on the inputs ORT used (the ref model's own input order)."""
    # lazy: measuring pulls in onnxruntime and the pipeline (0.32 s + 0.52 s of imports); only bench/gap
    from graphcost.measure import time_jax, time_tf, time_torch

    if model is None:
        raise CliError("--native needs a ref:FRAMEWORK/ARCH or FILE.py:FACTORY model (an .onnx file has no native "
                       "framework)")
    inputs = list(model.inputs.values())
    kw = {"warmup": args.warmup, "repeats": args.repeats}
    if model.framework == "torch":
        runs = [time_torch(model.forward, inputs, threads=args.threads, **kw)]
        if args.compile:
            runs.append(time_torch(model.forward, inputs, compile=True, threads=args.threads, **kw))
        return runs
    if model.framework == "jax":
        return [time_jax(model.forward, inputs, **kw)]
    return [time_tf(model.forward, inputs, **kw)]


def _write(args: argparse.Namespace, text: str) -> None:
    write_output(args.output, text)
