"""The pipeline as a short list of explicit calls: the front door (load → validate → shapes → costs → binding,
``graphcost.analysis.Analysis.of``), then liveness → roofline → fusion → batchnorm → report.

Each pass runs inside ``graphcost.analysis.stage``: an unexpected exception from it (a bug, or input no check
foresaw) reaches the caller as one :class:`PassError` line naming the pass, and the node when the error knows it,
chained to the original (``GRAPHCOST_DEBUG=1`` lets the original through untouched, for its traceback). A
ValueError is already a sentence written for the user and passes through as it is.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graphcost import oneshot
from graphcost._dims import TEXT_EXPAND_TERMS, Dim, evaluate, expand, expands_within, numel, to_text
from graphcost._gc import paused as gc_paused
from graphcost._sym import sympy
from graphcost.analysis import Analysis, PassError
from graphcost.analysis import all_dims as all_dims  # where callers found it before the front door
from graphcost.analysis import stage as _stage
from graphcost.binding import DEFAULT_DIM_VALUE, Binding, run_failed
from graphcost.graph import Graph, Tensor, TensorKind
from graphcost.hardware import catalog
from graphcost.hardware.spec import HardwareSpec
from graphcost.load import Model, load
from graphcost.params import split_parameters
from graphcost.passes.batchnorm import find_foldable
from graphcost.passes.costs import CostResult, TensorRef, count_costs, tensor_bytes
from graphcost.passes.fusion import FusionSection, Policy, fuse, fusion_section
from graphcost.passes.liveness import MemoryResult, TrainingOptions, liveness
from graphcost.passes.roofline import Bound, applied_residency, roofline
from graphcost.passes.validate import InvalidModel
from graphcost.report.model import (
    Coverage,
    ModelInfo,
    NodeReport,
    Report,
    ReportTotals,
    TensorInfo,
    Warning_,
)
from graphcost.report.sections import BatchNormSection

ModelSource = str | os.PathLike[str] | bytes | Any


def _hardware(hardware: str | HardwareSpec | None) -> HardwareSpec:
    if isinstance(hardware, HardwareSpec):
        return hardware
    return catalog.resolve(hardware or catalog.DEFAULT_HARDWARE)


def analyze(
    model: ModelSource,
    example_inputs: Any = None,
    *,
    hardware: str | HardwareSpec | None = None,
    dims: Mapping[str, int] | None = None,
    input_shapes: Mapping[str, Sequence[int | str]] | None = None,
    input_values: Mapping[str, Any] | None = None,
    derate: bool | tuple[float, float] = False,
    capacity: bool = True,
    fusion: bool = True,
    fusion_policy: Policy | str | None = None,
    memory: bool = True,
    training: TrainingOptions | bool | None = None,
    alignment: int = 64,
    batchnorm: bool = True,
    residency: str = "cold",
    framework: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> Report:
    """Analyze a model (path, bytes, ModelProto, loaded Model, or an ``Analysis`` already made) on a device.

    A framework object (a ``torch.nn.Module``, a JAX function or flax.nnx module, a Keras model or a
    ``tf.function``) with ``example_inputs`` (a tuple in call order, or ``{name: tensor}``) is first exported
    through the verified exporters into ``cache_dir`` (default ``~/.cache/graphcost/exports``; see
    ``graphcost.oneshot``), at the example shapes, and that file is analyzed. ``framework`` ("torch", "jax",
    "tf") says which framework when the object does not.

    ``dims`` binds named dims (``{"batch": 8}``); dims left unbound get ``DEFAULT_DIM_VALUE``
    (``graphcost.binding``) with a warning, and the totals also carry exact formulas in the dim names.
    ``input_shapes`` fixes whole input shapes; ``input_values`` gives constant inputs (``{"sr": 16000}``)
    to shape inference, so shapes computed from them resolve (see ``graphcost.analysis.Analysis.of``).
    ``derate`` applies the textbook efficiency placeholders (True) or the given (compute, bandwidth) factors.

    The later passes run by default and fill ``report.fusion`` (groups under ``fusion_policy``, default
    ``"ideal"``), ``report.memory`` (liveness peak, arena with ``alignment``, and ``training`` memory when
    given) and ``report.batchnorm`` (foldable batchnorms); switch each off with its flag.

    ``training=True`` is ``TrainingOptions()`` (gradients, and Adam's two moment buffers per parameter).

    ``residency`` says where a node's bytes can come from when the hardware spec knows on-chip levels:
    ``"cold"`` (default: one inference; weights, inputs and outputs cross DRAM, activations that fit stay on chip)
    or ``"warm"`` (a benchmark loop: when the model's footprint — weights plus the smallest possible activation
    peak — fits the largest on-chip level, every byte may already be there). ``report.residency`` says which
    applied; a warm request on a model that does not fit falls back to cold with a warning.
    """
    model = _onnx_source(model, example_inputs, framework=framework, cache_dir=cache_dir)
    if training is True:  # the blog's training=True: Adam's two moment buffers and gradients
        training = TrainingOptions()
    options = _Options(capacity=capacity, fusion=fusion, fusion_policy=fusion_policy, memory=memory,
                       training=training or None, alignment=alignment, batchnorm=batchnorm, residency=residency)
    with gc_paused():  # a third of the time on a 100k-node graph went to collections (graphcost/_gc.py)
        return _analyze(model, hardware=hardware, dims=dims, input_shapes=input_shapes, input_values=input_values,
                        derate=derate, options=options)


def _onnx_source(model: Any, example_inputs: Any, *, framework: str | None,
                 cache_dir: str | os.PathLike[str] | None) -> Any:
    """``model`` itself when it is an ONNX source; a framework object exported to its cache folder otherwise."""
    if not oneshot.is_framework_object(model):
        if example_inputs is not None or framework is not None:
            raise ValueError("example_inputs and framework are for framework models (a torch module, a JAX "
                             "function, a Keras model); an ONNX model takes dims= and input_shapes=")
        return model
    return oneshot.export(model, example_inputs, framework=framework, cache_dir=cache_dir).path


def gap(
    model: ModelSource,
    example_inputs: Any = None,
    *,
    hardware: str | HardwareSpec | None = None,
    framework: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    native: bool = True,
    compile: bool = False,
    provider: str = "cpu",
    threads: int | None = None,
    warmup: int = 10,
    repeats: int = 50,
    level: str = "all",
    budget_ms: float | None = None,
    sustained_clock: float = 1.0,
    residency: str = "warm",
    dims: Mapping[str, int] | None = None,
    seed: int = 0,
) -> Any:
    """Time a model natively and in onnxruntime and return its gap report (``graphcost.measure.gap_report.GapReport``):
    bound, observed, efficiency, achieved FLOP/s and B/s per model, kernel and fusion group, each with a
    diagnosis and its next steps. Render it with ``graphcost.report.gap_text.render(report)``.

    ``model`` is a framework object with ``example_inputs`` (exported as :func:`analyze` does, into
    ``cache_dir``; with ``native`` it is also timed in its framework on the same inputs: torch eager, and
    ``torch.compile`` with ``compile``; ``jax.jit`` with ``block_until_ready``; ``tf.function``), or an ONNX
    file (onnxruntime only; ``dims`` binds its symbolic dims, the rest take the sizes the model states, else 1).
    ``hardware`` is a catalog name, a TOML path, a ``HardwareSpec``, ``"detect"``, or ``"measured"`` — the
    default: this machine's measured roofs (``graphcost hardware measure``, cached; measured once when there is
    no cache yet), since a run on this machine is bounded by its own limits. ``budget_ms`` checks p99 at
    ``sustained_clock`` (``graphcost.gap.Budget``). Raises ValueError (bad input), ExportError, FrameworkMissing.
    """
    # lazy: graphcost.measure and its gap report are 0.06 s of imports (before onnxruntime itself); only gap
    from graphcost.measure import gap_report, run_ort

    hw = _run_hardware(hardware)
    natives: list[Any] = []
    run_binding: Binding | None = None  # an ONNX file's run binding, to name the dims a failed run only defaulted
    input_dims: Sequence[str] = ()
    if oneshot.is_framework_object(model):
        if dims:
            raise ValueError("dims= binds an ONNX model's symbolic dims; a framework model runs at the shapes of "
                             "its example inputs")
        exported = oneshot.export(model, example_inputs, framework=framework, cache_dir=cache_dir)
        path, feeds, run_dims = exported.path, dict(exported.native.inputs), _example_dims(exported.native)
        label = f"{exported.framework} {type(model).__name__}"
        if native:
            natives = oneshot.time_native(exported.native, compile=compile, warmup=warmup, repeats=repeats,
                                          threads=threads, device=_native_device(provider))
    else:
        if example_inputs is not None or framework is not None or compile:
            raise ValueError("example_inputs, framework and compile are for framework models; an ONNX model is "
                             "timed in onnxruntime only")
        a = Analysis.of(model, dims=dims)
        binding = run_binding = a.run_binding({})
        input_dims = a.input_dims
        run_dims = {d: v for d, v in binding.values.items() if d in a.input_dims or d in binding.user}
        if a.model.path is None:
            raise ValueError("gap times a model in onnxruntime from a file: give a path to an .onnx file")
        path, feeds, label = Path(a.model.path), None, a.model.path
    try:
        run = run_ort(path, binding=run_dims, inputs=feeds, provider=provider, threads=threads, warmup=warmup,
                      repeats=repeats, level=level, seed=seed)
    except (ValueError, RuntimeError) as e:
        refusal = None if run_binding is None else run_failed(run_binding, input_dims, str(e).split("\n")[0])
        if refusal is not None:
            raise refusal from None  # input dims that only took 1: name them
        raise
    return gap_report.build(str(path), run, hardware=hw, natives=natives, budget_ms=budget_ms,
                            sustained_clock=sustained_clock, residency=residency, label=label)


def _run_hardware(hardware: str | HardwareSpec | None) -> HardwareSpec:
    """A run's roofs: this machine's measured ones unless named (``"detect"``: the detected device)."""
    probe = hardware.strip().lower() if isinstance(hardware, str) else None
    if hardware is None or probe == "measured":
        from graphcost.hardware.measure import measured_roofs  # lazy: 0.017 s of imports, only measured roofs

        return measured_roofs()[0]
    if probe == "detect":
        from graphcost.hardware.detect import detect  # lazy: 0.009 s of imports, only for "detect"

        return detect().spec
    return _hardware(hardware)


def _example_dims(native: Any) -> dict[str, int]:
    """The sizes the example inputs give the exported file's named dims (none when it was exported static)."""
    out: dict[str, int] = {}
    for name, axes in native.dynamic.items():
        for axis, dim in axes.items():
            out.setdefault(dim, int(native.inputs[name].shape[axis]))
    return out


def _native_device(provider: str) -> str | None:
    """The native framework's device for an ORT provider: the CPU for ``cpu``, the first GPU otherwise."""
    return "cpu" if provider == "cpu" else "cuda:0"


@dataclass(frozen=True)
class _Options:
    capacity: bool
    fusion: bool
    fusion_policy: Policy | str | None
    memory: bool
    training: TrainingOptions | None
    alignment: int
    batchnorm: bool
    residency: str = "cold"


def _analyze(
    model: ModelSource,
    *,
    hardware: str | HardwareSpec | None,
    dims: Mapping[str, int] | None,
    input_shapes: Mapping[str, Sequence[int | str]] | None,
    input_values: Mapping[str, Any] | None,
    derate: bool | tuple[float, float],
    options: _Options,
) -> Report:
    hw = _hardware(hardware)
    if derate:
        hw = hw.derated(*derate) if isinstance(derate, tuple) else hw.derated()
    if isinstance(model, Analysis):
        if dims or input_shapes or input_values:
            raise ValueError("analyze: an Analysis is already bound; give dims, input shapes and input values to "
                             "Analysis.of")
        a = model
    else:
        a = Analysis.of(model, dims=dims, input_shapes=input_shapes, input_values=input_values)
    m, shapes, costs, graph = a.model, a.shapes, a.costs, a.graph
    model_dims = a.dims
    binding = a.binding.as_dict()
    defaulted = list(a.binding.defaulted)
    warnings = [Warning_(f.node, f.reason) for f in a.validation.warnings]
    warnings.extend(Warning_(w.node, w.message) for w in shapes.warnings)
    warnings.extend(_defaulted_warnings(defaulted, set(shapes.input_dims)))
    warnings.extend(_fixed_warnings(a.binding))
    if a.input_values:  # the numbers hold for these values only: say so where every reader looks
        fixed = ", ".join(f"{k}={_value_text(v)}" for k, v in sorted(a.input_values.items()))
        warnings.append(Warning_(None, f"inputs fixed (--input-value): {fixed}; shapes and If branches follow "
                                       "these values"))
    param_totals = _parameter_totals(graph)  # (count, bytes): asked by the residency and the model info
    # before the passes that keep records per node: the parameter split's tables (a digest per initializer, a
    # reader count per tensor) are freed when it returns, and the passes after it reuse that memory; built last,
    # they raised synthetic-100k's peak RSS by about 20 MiB
    model_info = _model_info(m, graph, len(costs.top_level()), param_totals)
    memory = None
    if options.memory:
        with _stage("liveness", graph):
            memory = liveness(graph, binding, alignment=options.alignment, training=options.training)
        warnings.extend(Warning_(None, f"memory: {w}") for w in memory.warnings)
    with _stage("roofline", graph):
        residency = _residency(options, hw, param_totals[1], memory, warnings)
        bounds = roofline(costs, hw, binding, graph=graph, capacity=options.capacity, residency=residency)
    warnings.extend(Warning_(w.node, w.message) for w in costs.warnings)
    formulas = {}
    if model_dims:
        with _stage("costs", graph):
            formulas = _formulas(count_costs(shapes.symbolic_graph) if shapes.symbolic_graph is not None else costs)
    t = bounds.totals
    totals = ReportTotals(
        flops=t.flops, macs=t.macs, bytes_read=t.bytes_read, bytes_written=t.bytes_written, bytes=t.bytes,
        dram_bytes=t.dram_bytes, intensity=t.intensity, compute_time_s=t.compute_time_s,
        memory_time_s=t.memory_time_s, roofline_time_s=t.roofline_time_s, bound=t.bound,
        energy_floor_j=t.energy_floor_j, unknown_nodes=t.unknown_nodes, formulas=formulas,
        bytes_as_written=_bytes_as_written(costs, bounds.nodes, binding))
    fusion = None
    if options.fusion:
        with _stage("fusion", graph):
            fusion = fusion_section(fuse(graph, costs, options.fusion_policy), hw, binding,
                                    capacity=options.capacity, residency=residency)
    batchnorm = None
    if options.batchnorm:
        with _stage("batchnorm", graph):
            batchnorm = BatchNormSection.of(find_foldable(graph, costs), hw, binding)
    nodes = _node_reports(costs, bounds.nodes, _group_ids(fusion, costs), binding)
    return Report(
        model=model_info,
        hardware=hw,
        totals=totals,
        nodes=nodes,
        warnings=tuple(warnings),
        binding=binding,
        defaulted_dims=tuple(defaulted),
        coverage=_coverage(nodes),
        shape_engines=shapes.engines,
        fusion=fusion,
        memory=memory,
        batchnorm=batchnorm,
        residency=residency,
    )


def _residency(options: _Options, hw: HardwareSpec, parameter_bytes: int, memory: MemoryResult | None,
               warnings: list[Warning_]) -> str:
    """The residency the bounds use: warm only when the model's smallest possible footprint fits on chip."""
    footprint = parameter_bytes + (memory.min_peak_bytes if memory is not None else 0)
    applied, why = applied_residency(options.residency, hw, footprint, capacity=options.capacity)
    if why:
        warnings.append(Warning_(None, why))
    return applied


def _group_ids(fusion: FusionSection | None, costs: CostResult) -> dict[str, str]:
    if fusion is None:
        return {}
    ids = [g.id for g in fusion.groups]  # fusion.group_of, without its per-node lookups and KeyError
    index = fusion.result.index
    return {c.name: ids[index[c.name]] for c in costs.nodes if c.name in index}


def _value_text(v: Any) -> str:
    """An input value as the user wrote it: a scalar, or comma-separated elements (at most 8 shown)."""
    flat = [x.item() if hasattr(x, "item") else x for x in getattr(v, "flat", [v])]
    text = ",".join(str(x) for x in flat[:8])
    return text + (",…" if len(flat) > 8 else "")


def _fixed_warnings(binding: Binding) -> list[Warning_]:
    """Say which dims an op's contract sized (``binding.taken``), and which given sizes contradict one."""
    out = [Warning_(None, f"dim {d} = {binding.values[d]}: {where}") for d, where in binding.taken.items()]
    out.extend(Warning_(None, f"dim {d} = {binding.values[d]} as given, but {where}: the numbers use "
                              f"{binding.values[d]}, which that op cannot run at")
               for d, (_, where) in binding.contradicted.items())
    return out


def _defaulted_warnings(defaulted: list[str], input_dims: set[str]) -> list[Warning_]:
    """Say which dims the numbers assumed: the inputs' named dims, and dims inference could not resolve."""
    out: list[Warning_] = []
    named = [d for d in defaulted if d in input_dims or d.startswith("trips_")]
    other = [d for d in defaulted if d not in named]
    if named:
        shown = ", ".join(f"{d}={DEFAULT_DIM_VALUE}" for d in named[:8])
        more = f" and {len(named) - 8} more" if len(named) > 8 else ""
        out.append(Warning_(None, f"unbound dims: numbers use {shown}{more}; bind them with --dim NAME=VALUE "
                                  "(exact formulas are in totals.formulas)"))
    if other:
        shown = ", ".join(other[:5])
        more = f" and {len(other) - 5} more" if len(other) > 5 else ""
        out.append(Warning_(None, f"{len(other)} dim(s) no inference engine could express in the input dims "
                                  f"({shown}{more}) are taken as {DEFAULT_DIM_VALUE}; the numbers that use them "
                                  "are lower bounds of unknown slack (bind them with --dim if you know them)"))
    return out


def _node_reports(costs: CostResult, bounds: Sequence[Bound], groups: Mapping[str, str],
                  binding: Mapping[str, int]) -> tuple[NodeReport, ...]:
    """One report row per cost row, with its bounds and fusion group.

    A tensor read by many nodes is one ``TensorRef``, converted once (by its id); a shape of plain ints is
    its own report form. Arguments are positional, in ``NodeReport``'s field order (a test pins the order).
    Written as one loop rather than a generator of keyword calls: synthetic-100k 1.22 → 0.91 s, in-process A/B
    on a loaded machine; most of what is left is ``NodeReport``'s frozen-dataclass ``__init__`` (~4.5 µs a row)."""
    seen: dict[int, TensorInfo] = {}

    def infos(refs: tuple[TensorRef, ...]) -> tuple[TensorInfo, ...]:
        out = []
        for ref in refs:
            t = seen.get(id(ref))
            if t is None:
                t = seen[id(ref)] = TensorInfo(ref.name, _shape_out(ref.shape), ref.dtype)
            out.append(t)
        return tuple(out)

    rows = []
    for c, b in zip(costs.nodes, bounds, strict=True):
        multiplier = c.multiplier
        written = c.bytes_as_written
        rows.append(NodeReport(
            c.name, c.op_type, c.domain, c.kind, c.dtype, b.flops, b.macs, b.bytes_read, b.bytes_written,
            b.dram_bytes, b.intensity, b.compute_time_s, b.memory_time_s, b.roofline_time_s, b.bound,
            infos(c.inputs), infos(c.outputs), c.depth, c.parent,
            multiplier if isinstance(multiplier, int) else to_text(multiplier), c.note, c.unknown_reason,
            c.has_rule, groups.get(c.name), None if written is None else evaluate(written, binding)))
    return tuple(rows)


def _shape_out(shape: tuple[Dim, ...] | None) -> tuple[int | str, ...] | None:
    if shape is None:
        return None
    for d in shape:
        if type(d) is not int:
            return tuple(d if isinstance(d, int) else to_text(d) for d in shape)
    return shape  # every dim a plain int: already the report's form


def _formulas(costs: CostResult) -> dict[str, str]:
    """Exact totals over top-level nodes of known cost, as formulas in the dim names.

    The text is ``to_text`` of each total, written faster: a total of plain ints is ``str`` of it (no sympy);
    ``bytes`` is the sum of the other two totals' expansions (``expand(a + b)`` is ``expand(a) + expand(b)``,
    and it skips expanding again every term that :func:`graphcost._dims.expand` cannot vouch for); and a
    sum's terms are put in the printer's order by :func:`_ordered_terms`. SSD300 (371 data-dependent dims,
    ~640 terms a total) 0.21 → 0.13 s, dynamic Swin-V2-T 0.19 → 0.15-0.17 s (first call in a fresh process,
    after the analysis, one run after the other; same text)."""
    totals: dict[str, Any] = {}
    top = costs.top_level()
    for key in ("flops", "macs", "bytes_read", "bytes_written"):
        terms: list[Dim] = [getattr(c, key) for c in top if getattr(c, key) is not None]
        ints = sum(t for t in terms if isinstance(t, int))
        symbolic = [t for t in terms if not isinstance(t, int)]
        totals[key] = sympy.Add(ints, *symbolic) if symbolic else ints
    totals["bytes"] = totals["bytes_read"] + totals["bytes_written"]
    if any(c.bytes_as_written is not None for c in top):  # the graph as written copies a KV cache
        totals["bytes_as_written"] = sympy.Add(*(
            c.bytes_as_written if c.bytes_as_written is not None else c.bytes_read + c.bytes_written
            for c in top if c.bytes_read is not None and c.bytes_written is not None))
    expanded: dict[str, Any] = {}
    out: dict[str, str] = {}
    for key, value in totals.items():
        if isinstance(value, int):
            out[key] = str(value)  # to_text of sympy.Integer(value)
            continue
        if not expands_within(value, TEXT_EXPAND_TERMS):
            out[key] = to_text(value)  # written as it stands
            continue
        parts = [expanded.get(k, totals[k]) for k in ("bytes_read", "bytes_written")] if key == "bytes" else None
        expanded[key] = e = sympy.Add(*parts) if parts is not None and all(
            k in expanded or isinstance(totals[k], int) for k in ("bytes_read", "bytes_written")) else expand(value)
        ordered = _ordered_terms(e)
        out[key] = to_text(value) if ordered is None else _sum_text(e, ordered)
    return out


def _ordered_terms(e: Any) -> list[Any] | None:
    """The terms of the expanded sum ``e`` in the order sympy's printer writes them (``as_ordered_terms``), or
    None where this does not apply (then ``to_text`` orders them itself).

    sympy sorts the terms by their exponent vectors over every base in the sum, dense: 640 terms × 640 bases
    for an SSD300 total, most of its printing time. The same order comes from the vectors' nonzero entries
    in base order, ``(index, -exponent)``, closed by ``(len(bases), 0)`` (lexicographic order of the dense
    vectors, the larger exponent first), then the coefficient. It applies when every term is written as it
    stands (already expanded), its coefficient is rational and its other factors are commutative, not
    numbers, with positive integer exponents; sympy's special case of two terms is left to it."""
    from sympy.core.exprtools import decompose_power
    from sympy.core.sorting import default_sort_key

    if not e.is_Add or len(e.args) <= 2:
        return None
    one = sympy.S.One
    rows: list[tuple[Any, float, dict[Any, int]]] = []
    bases: set[Any] = set()
    for term in e.args:
        if expand(term) is not term:
            return None
        coeff, rest = term.as_coeff_Mul()
        if not coeff.is_Rational:
            return None
        powers: dict[Any, int] = {}
        if rest is not one:
            for factor in sympy.Mul.make_args(rest):
                if factor.is_number or not factor.is_commutative:
                    return None
                base, exp = decompose_power(factor)
                if exp <= 0 or base in powers:
                    return None
                powers[base] = exp
        bases.update(powers)
        try:  # complex(coeff).real, without sympy's evalf: both the double nearest p/q
            rows.append((term, int(coeff.p) / int(coeff.q), powers))
        except OverflowError:
            return None
    index = {b: i for i, b in enumerate(sorted(bases, key=default_sort_key))}
    end = (len(index), 0)

    def key(row: tuple[Any, float, dict[Any, int]]) -> tuple[Any, ...]:
        _, re, powers = row
        return (*sorted((index[b], -x) for b, x in powers.items()), end), re

    return [row[0] for row in sorted(rows, key=key)]


def _sum_text(e: Any, terms: list[Any]) -> str:
    """The text ``StrPrinter._print_Add`` writes for ``e``, its terms in the order given, each written by ``to_text``
    (an expanded term's text: what the printer writes for it)."""
    from sympy.printing.precedence import precedence

    prec = precedence(e)
    parts: list[str] = []
    for term in terms:
        t = to_text(term)
        if t.startswith("-") and not term.is_Add:
            sign, t = "-", t[1:]
        else:
            sign = "+"
        parts += [sign, f"({t})" if precedence(term) < prec or term.is_Add else t]
    sign = parts.pop(0)
    return ("" if sign == "+" else sign) + " ".join(parts)


def _bytes_as_written(costs: CostResult, bounds: Sequence[Any], binding: Mapping[str, int]) -> int | float | None:
    """Total bytes of the graph as written (KV caches copied into ``present``), None when it equals ``bytes``."""
    if not any(c.bytes_as_written is not None for c in costs.top_level()):
        return None
    total: int | float = 0
    for c, b in zip(costs.nodes, bounds, strict=True):
        if c.depth != 0:
            continue
        if c.bytes_as_written is not None:
            total += evaluate(c.bytes_as_written, binding)
        else:
            total += (b.bytes_read or 0) + (b.bytes_written or 0)
    return total


def _tensor_info(t: Tensor | None, name: str) -> TensorInfo:
    if t is None:
        return TensorInfo(name, None, "unknown")
    return TensorInfo(name, _shape_out(t.shape), t.dtype)


def _model_info(m: Model, graph: Graph, node_count: int, param_totals: tuple[int, int] | None = None) -> ModelInfo:
    """``param_totals``: :func:`_parameter_totals` of ``graph`` when the caller has it (a walk over every tensor:
    synthetic-100k, 0.4 s under cProfile each time)."""
    params, param_bytes = param_totals if param_totals is not None else _parameter_totals(graph)
    p = m.proto
    logical = _logical_parameter_count(graph)
    return ModelInfo(
        path=m.path, ir_version=int(p.ir_version), opsets=m.opsets, producer=m.producer, node_count=node_count,
        parameter_count=params, parameter_bytes=param_bytes,
        inputs=tuple(_tensor_info(graph.tensor(n), n) for n in graph.input_names),
        outputs=tuple(_tensor_info(graph.tensor(n), n) for n in graph.output_names),
        logical_parameter_count=logical, parameter_split=split_parameters(graph, p, logical))


_BLOCK_QUANTIZED = {
    # op (com.microsoft): (weight slot, its logical element count from the node, metadata slots: not weights)
    "MatMulNBits": (1, lambda n: int(n.attribute("K")) * int(n.attribute("N")), (2, 3, 4)),  # K·N; scales, zp, g_idx
    "MatMulBnb4": (1, lambda n: int(n.attribute("K")) * int(n.attribute("N")), (2,)),  # K·N; absmax
    "GatherBlockQuantized": (0, None, (2, 3)),  # data unpacked (8 / bits per uint8); scales, zero points
}


def _logical_parameter_count(graph: Graph) -> int:
    """Parameters as the model computes with them: a block-quantized weight is its logical K·N elements (not
    its packed bytes), and its scales and zero points are quantization metadata, not weights."""
    total = 0
    for g in graph.walk():
        logical: dict[str, int] = {}
        for node in g.nodes():
            spec = _BLOCK_QUANTIZED.get(node.op_type) if node.domain == "com.microsoft" else None
            if spec is None:
                continue
            slot, count, metadata = spec
            for i in metadata:
                if i < len(node.inputs) and node.inputs[i]:
                    logical[node.inputs[i]] = 0
            if slot < len(node.inputs) and node.inputs[slot]:
                t = g.tensor(node.inputs[slot])
                if count is not None and all(node.attribute(a) is not None for a in ("K", "N")):
                    logical[node.inputs[slot]] = count(node)
                elif t is not None and t.shape is not None and isinstance(numel(t.shape), int):
                    per = 8 // int(node.attribute("bits") or 4) if t.dtype == "uint8" else 1  # packed in uint8
                    logical[node.inputs[slot]] = int(numel(t.shape)) * per
        for t in g.tensors().values():
            if t.kind != TensorKind.PARAMETER or t.shape is None:
                continue
            n = numel(t.shape)
            total += logical.get(t.name, n if isinstance(n, int) else 0)
    return total


def _parameter_totals(graph: Graph) -> tuple[int, int]:
    """(count, bytes) of the parameters of the graph and its child graphs (static shapes only)."""
    params = 0
    param_bytes = 0
    for g in graph.walk():
        for t in g.tensors().values():
            if t.kind != TensorKind.PARAMETER or t.shape is None:
                continue
            n = numel(t.shape)
            b = tensor_bytes(t)
            if isinstance(n, int):
                params += n
            if isinstance(b, int):
                param_bytes += b
    return params, param_bytes


def _coverage(nodes: tuple[NodeReport, ...]) -> Coverage:
    top = [n for n in nodes if n.depth == 0]
    unknown: dict[str, int] = {}
    bytes_all: float = 0
    bytes_rule: float = 0
    with_rule = 0
    for n in top:
        b = n.bytes or 0
        bytes_all += b
        if n.flops is not None:
            with_rule += 1
            bytes_rule += b
        else:
            key = n.op_type if n.domain == "ai.onnx" else f"{n.domain}::{n.op_type}"
            unknown[key] = unknown.get(key, 0) + 1
    return Coverage(len(top), with_rule, bytes_all, bytes_rule, dict(sorted(unknown.items())))


__all__ = ["InvalidModel", "PassError", "analyze", "gap", "load"]
