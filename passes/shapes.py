"""Shape inference: onnx's inference with data propagation, plus onnxruntime's symbolic inference.

Symbolic dims are kept: ``batch``, ``seq`` and derived expressions such as ``batch*seq``. The order:

1. Fix graph inputs the user gave whole shapes for (``--input-shape``).
2. Run ``onnx.shape_inference`` with data propagation on a copy whose stored value_info and output
   shapes are cleared, so inference, not the exporter's annotation, decides.
3. When that leaves tensors unresolved (missing shapes or minted ``unk__`` dims), run onnxruntime's
   ``SymbolicShapeInference`` and take its shapes where they say more.
4. When dims are bound (``--dim``) and shapes still hold unresolved dims, infer once more with the
   bound values substituted into the inputs and use those numbers where the symbolic run had none.
5. Where inference still knows nothing, fall back to what the file declares.

The pass never changes its input model; it returns a new typed graph and its warnings.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import importlib.util
import io
import os
import re
import sys
import warnings as pywarnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
import onnx

from graphcost._dims import Dim, free_names, parse_dim, to_text
from graphcost.graph import Graph, graph_protos
from graphcost.load import Model, opset_lookup
from graphcost.passes import _contrib_shapes, _datadep
from graphcost.passes.specialize import onnx_types, specialize

InputShape = Sequence[int | str]


@dataclass(frozen=True)
class ShapeWarning:
    node: str | None
    message: str


@dataclass(frozen=True)
class ShapeResult:
    graph: Graph
    types: Mapping[str, onnx.TypeProto]
    """The chosen type of every value (main graph and subgraphs), by name."""
    warnings: tuple[ShapeWarning, ...]
    input_dims: tuple[str, ...]
    """Names of the symbolic dims of the graph inputs (the dims a user can bind)."""
    engines: tuple[str, ...]
    """Which inference engines contributed (for the report)."""
    source: onnx.ModelProto
    symbolic_graph: Graph | None = None
    """When bound dims resolved shapes that stay unresolved symbolically, the graph with only the symbolic
    shapes: exact formulas come from it (``graph``'s shapes hold the bound values baked in)."""

    def model_proto(self) -> onnx.ModelProto:
        """A copy of the model with every inferred type written as value_info (for tools that want one)."""
        out = onnx.ModelProto()
        out.CopyFrom(self.source)
        _write_types(out, dict(self.types))
        return out


def infer_shapes(
    model: Model,
    *,
    input_shapes: Mapping[str, InputShape] | None = None,
    dims: Mapping[str, int] | None = None,
    input_values: Mapping[str, Any] | None = None,
) -> ShapeResult:
    """Every value's type, symbolic dims kept (see the module docstring).

    ``input_values`` (constant inputs, e.g. a sample rate) only add types: the model with the values folded in
    by the specialize pre-pass (shape subgraphs computed from them become constants) is inferred too, and each
    value takes the better-resolved of the two types. The graph returned keeps every node and input of ``model``.
    """
    token = _FLAT.set(not _has_subgraphs(model.proto.graph))
    try:
        plain = _infer_shapes(model, input_shapes=input_shapes, dims=dims)
        if not input_values:
            return plain
        folded = specialize(model.proto, input_values=dict(input_values), types=onnx_types(model.proto))
        seeded = _infer_shapes(Model(folded, model.path, model.base_dir), input_shapes=input_shapes, dims=dims)
    finally:
        _FLAT.reset(token)
    types = _merge(dict(seeded.types), dict(plain.types))
    graph = Graph(plain.source.graph, opset_lookup(plain.source), base_dir=model.base_dir, types=types)
    return dataclasses.replace(plain, graph=graph, types=types, engines=(*plain.engines, "specialize"))


def _infer_shapes(
    model: Model,
    *,
    input_shapes: Mapping[str, InputShape] | None,
    dims: Mapping[str, int] | None,
) -> ShapeResult:
    warnings: list[ShapeWarning] = []
    base = with_input_shapes(model.proto, input_shapes)  # read only; the copies below are what inference may change

    declared = _collect_types(base.graph)
    stripped = strip_shapes(base)
    engines = ["onnx"]
    inferred = _onnx_infer(stripped, warnings)
    typed = _collect_types(inferred.graph)
    dep = _datadep.analyze(stripped, nested=not _FLAT.get())
    if dep.guarded:
        stripped = _seed_guarded(stripped, typed, dep)
        inferred = _onnx_infer(stripped, [])
        typed = _collect_types(inferred.graph)
        warnings.append(ShapeWarning(None, f"{len(dep.guarded)} output(s) have shapes that depend on run-time values "
                                           f"(e.g. {next(iter(dep.guarded))!r} of {next(iter(dep.guarded.values()))}); "
                                           "their dims are named unknowns"))

    # onnx, graphcost's contrib rules and ORT's symbolic inference take turns: ORT stops at the first op it
    # cannot type, so each contrib output typed in one turn lets ORT go further in the next.
    stripped, inferred, typed, seeded = _contrib_rounds(stripped, inferred, typed, complete_only=True)
    ort_notes: list[ShapeWarning] = []
    names = _tensor_names(stripped.graph)  # the same nodes in every copy of the model
    for _ in range(_ORT_TURNS):
        if not _unresolved(inferred.graph, typed, names):
            break
        ort = _ort_infer(inferred, model.base_dir, ort_notes, typed)
        if ort is None:
            break
        if "onnxruntime-symbolic" not in engines:
            engines.append("onnxruntime-symbolic")
        ort_types = _ort_assumptions_yield(_collect_types(ort.graph), inferred.graph, declared)
        for name in dep.tainted:  # never take a guess about a value-dependent shape
            ort_types.pop(name, None)
        typed = _merge(ort_types, typed)
        stripped, inferred, typed, more = _contrib_rounds(stripped, inferred, typed, complete_only=True)
        seeded = seeded or more
        if not more:
            break
    stripped, inferred, typed, more = _contrib_rounds(stripped, inferred, typed, complete_only=False)
    if seeded or more:
        engines.append("graphcost-contrib")

    bound = dict(dims or {})
    symbolic_typed: TypeTable | None = None
    if bound and _unresolved(inferred.graph, typed, names):
        concrete = onnx.ModelProto()
        concrete.CopyFrom(stripped)
        if bind_inputs(concrete, bound):
            engines.append("bound-dims")
            c_inf = _onnx_infer(concrete, [])
            c_types = _collect_types(c_inf.graph)
            if _unresolved(c_inf.graph, c_types, names):
                c_ort = _ort_infer(c_inf, model.base_dir, [], c_types)
                if c_ort is not None:
                    c_ort_types = _ort_assumptions_yield(_collect_types(c_ort.graph), c_inf.graph, declared)
                    for name in dep.tainted:
                        c_ort_types.pop(name, None)
                    c_types = _merge(c_ort_types, c_types)
            symbolic_typed = _merge(typed, declared)
            typed = _fill_unresolved(typed, c_types, set(bound))

    typed = _merge(typed, declared)
    if ort_notes and _unresolved(inferred.graph, typed, names):
        warnings.extend(ort_notes)  # only worth saying when something stayed unresolved
    _check_declared_outputs(base.graph, typed, warnings)
    graph = Graph(inferred.graph, opset_lookup(inferred), base_dir=model.base_dir, types=typed)
    symbolic_graph = None
    if symbolic_typed is not None and symbolic_typed != typed:
        symbolic_graph = Graph(inferred.graph, opset_lookup(inferred), base_dir=model.base_dir, types=symbolic_typed)
    input_dims: set[str] = set()
    for name in graph.input_names:
        t = graph.tensor(name)
        if t is not None and t.shape is not None:
            for d in t.shape:
                input_dims |= free_names(d)
    return ShapeResult(graph, typed, tuple(warnings), tuple(sorted(input_dims)), tuple(engines), inferred,
                       symbolic_graph)


# ---------------------------------------------------------------------------- input shapes
def parse_input_shape(text: str) -> tuple[str, list[int | str]]:
    """``input=1x3x224x224`` (or ``input=batch,3,224,224``) → (name, dims)."""
    if "=" not in text:
        raise ValueError(f"--input-shape {text!r}: expected NAME=DIMS, e.g. input=1x3x224x224")
    name, _, spec = text.rpartition("=")
    parts = [p for p in spec.replace(",", "x").split("x")] if spec else []
    dims: list[int | str] = []
    for p in parts:
        p = p.strip()
        if not p:
            raise ValueError(f"--input-shape {text!r}: empty dim")
        if p.lstrip("-").isdigit():
            v = int(p)
            if v < 0:
                raise ValueError(f"--input-shape {text!r}: negative dim {v}")
            dims.append(v)
        else:
            dims.append(p)
    return name.strip(), dims


def with_input_shapes(proto: onnx.ModelProto, input_shapes: Mapping[str, InputShape] | None) -> onnx.ModelProto:
    """``proto`` itself when no shapes are given, else a copy whose named graph inputs have those whole shapes.

    Raises ValueError naming an input the graph does not have."""
    if not input_shapes:
        return proto
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    input_names = {vi.name for vi in out.graph.input}
    for name, shape in input_shapes.items():
        if name not in input_names:
            raise ValueError(f"--input-shape names {name!r}, which is not a graph input "
                             f"(inputs: {', '.join(sorted(input_names)) or 'none'})")
        _set_input_shape(out, name, shape)
    return out


def _set_input_shape(model: onnx.ModelProto, name: str, dims: InputShape) -> None:
    for vi in model.graph.input:
        if vi.name != name:
            continue
        tt = vi.type.tensor_type
        tt.shape.Clear()
        tt.shape.SetInParent()
        for d in dims:
            dim = tt.shape.dim.add()
            if isinstance(d, int):
                dim.dim_value = d
            else:
                dim.dim_param = d


def bind_inputs(model: onnx.ModelProto, bound: Mapping[str, int]) -> bool:
    """Give the graph inputs' dims named in ``bound`` their values, in place; whether any changed."""
    changed = False
    for vi in model.graph.input:
        if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
            continue
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param in bound:
                d.dim_value = int(bound[d.dim_param])
                changed = True
    return changed


def _tshape(t: onnx.TypeProto | None) -> _contrib_shapes.TShape | None:
    if t is None or not t.HasField("tensor_type"):
        return None
    tt = t.tensor_type
    if not tt.HasField("shape"):
        return (tt.elem_type, None)
    dims: list[_contrib_shapes.DimT] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param and not d.dim_param.startswith("unk__"):
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return (tt.elem_type, dims)


def _type_of(name: str, shape: _contrib_shapes.TShape) -> onnx.TypeProto:
    elem, dims = shape
    t = onnx.TypeProto()
    t.tensor_type.elem_type = elem
    if dims is not None:
        t.tensor_type.shape.SetInParent()
        for i, d in enumerate(dims):
            dim = t.tensor_type.shape.dim.add()
            if isinstance(d, int):
                dim.dim_value = d
            else:
                dim.dim_param = d if isinstance(d, str) else _unknown_name(name, i)
    return t


def _contrib_rounds(stripped: onnx.ModelProto, inferred: onnx.ModelProto, typed: TypeTable, *,
                    complete_only: bool) -> tuple[onnx.ModelProto, onnx.ModelProto, TypeTable, bool]:
    """Type the outputs of ops no engine knows (``_contrib_shapes``) and let onnx carry them downstream.

    Each round walks the nodes in graph order (a chain of contrib ops is typed in one round), computes
    what the rules can from the current types, seeds those outputs as value_info and runs onnx's
    inference again; it stops when a round adds nothing (at most ``_CONTRIB_ROUNDS``).
    ``complete_only`` seeds only fully resolved shapes: a seed with unknown dims handed to ORT's symbolic
    inference would be merged with real dims and spread its placeholder names upstream."""
    nodes = [n for g in _walk_graphs(stripped.graph) for n in g.node
             if _contrib_shapes.lookup(n.domain, n.op_type) is not None]
    if not nodes:
        return stripped, inferred, typed, False
    weights: dict[str, _contrib_shapes.TShape] = {  # initializers are typed by their own dims
        t.name: (t.data_type, [int(d) for d in t.dims]) for g in _walk_graphs(stripped.graph) for t in g.initializer}
    seeded_any = False
    for _ in range(_CONTRIB_ROUNDS):
        seeds: dict[str, onnx.TypeProto] = {}
        for node in nodes:
            fn = _contrib_shapes.lookup(node.domain, node.op_type)
            assert fn is not None
            ins = [(_tshape(seeds.get(i) or typed.get(i)) or weights.get(i)) if i else None for i in node.input]
            try:
                outs = fn(node, ins)
            except Exception:
                continue
            for name, shape in zip(node.output, outs, strict=False):
                if not name or shape is None:
                    continue
                candidate = _type_of(name, shape)
                if complete_only and _type_score(candidate) > 0:
                    continue
                current = typed.get(name)
                if current is None or _type_score(candidate) < _type_score(current):
                    seeds[name] = candidate
        if not seeds:
            break
        seeded_any = True
        stripped = _with_value_info(stripped, seeds)
        inferred = _onnx_infer(stripped, [])
        typed = _merge(_collect_types(inferred.graph), {**typed, **seeds})
    return stripped, inferred, typed, seeded_any


_CONTRIB_ROUNDS = 12
_ORT_TURNS = 4


def _with_value_info(model: onnx.ModelProto, types: Mapping[str, onnx.TypeProto]) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for g in _walk_graphs(out.graph):
        produced = {o for n in g.node for o in n.output}
        existing = {vi.name: vi for vi in g.value_info}
        for name, t in types.items():
            if name not in produced:
                continue
            vi = existing.get(name)
            if vi is None:
                vi = g.value_info.add()
                vi.name = name
            vi.type.CopyFrom(t)
    return out


def _seed_guarded(model: onnx.ModelProto, typed: TypeTable, dep: _datadep.DataDependence) -> onnx.ModelProto:
    """Give each value-dependent output named unknown dims (rank when it is knowable) as value_info."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    producers: dict[str, onnx.NodeProto] = {}
    graphs: dict[str, onnx.GraphProto] = {}
    for g in _walk_graphs(out.graph):
        for n in g.node:
            for o in n.output:
                producers[o] = n
                graphs[o] = g
    for name, op in dep.guarded.items():
        node, owner = producers.get(name), graphs.get(name)
        if node is None or owner is None:
            continue
        rank: int | None = None
        elem = 0
        known = typed.get(name)
        if known is not None and known.HasField("tensor_type"):
            elem = known.tensor_type.elem_type
            if known.tensor_type.HasField("shape"):
                rank = len(known.tensor_type.shape.dim)
        if rank is None and op in _datadep.RANK_PRESERVING and node.input:
            first = typed.get(node.input[0])
            if first is not None and first.HasField("tensor_type") and first.tensor_type.HasField("shape"):
                rank = len(first.tensor_type.shape.dim)
                elem = elem or (first.tensor_type.elem_type if op != "TopK" or name == node.output[0] else 7)
        if elem == 0:
            continue
        vi = owner.value_info.add()
        vi.name = name
        vi.type.tensor_type.elem_type = elem
        if rank is not None:
            vi.type.tensor_type.shape.SetInParent()
            for i in range(rank):
                vi.type.tensor_type.shape.dim.add().dim_param = _unknown_name(name, i)
    return out


def _unknown_name(tensor: str, axis: int) -> str:
    safe = "".join(c if c.isalnum() else "_" for c in tensor).strip("_") or "t"
    return f"unk__{safe}_{axis}"


# ---------------------------------------------------------------------------- type tables
TypeTable = dict[str, onnx.TypeProto]


_FLAT: contextvars.ContextVar[bool] = contextvars.ContextVar("graphcost_flat_model", default=False)
"""True while inferring a model without subgraphs: walks then skip scanning every node's attributes."""


def _has_subgraphs(graph: onnx.GraphProto) -> bool:
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
               for node in graph.node for a in node.attribute)


def _walk_graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    if _FLAT.get():  # a model without subgraphs: no need to look at every node's attributes
        yield graph
        return
    yield from graph_protos(graph)


def _collect_types(graph: onnx.GraphProto) -> TypeTable:
    """Every typed value of the graph and its subgraphs, by name (names are unique per model)."""
    out: TypeTable = {}
    for g in _walk_graphs(graph):
        for seq in (g.input, g.value_info, g.output):
            for vi in seq:
                if vi.HasField("type") and vi.type.WhichOneof("value") is not None:
                    prev = out.get(vi.name)
                    if prev is None or _type_score(vi.type) < _type_score(prev):
                        out[vi.name] = vi.type
    return out


def strip_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy without stored intermediate shapes and with output shapes cleared (dtype kept)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for g in _walk_graphs(out.graph):
        del g.value_info[:]
        for vi in g.output:
            if vi.type.HasField("tensor_type"):
                vi.type.tensor_type.ClearField("shape")
    return out


def _onnx_infer(model: onnx.ModelProto, warnings: list[ShapeWarning]) -> onnx.ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
    except Exception as e:
        warnings.append(ShapeWarning(None, f"onnx shape inference failed: {_first_line(e)}"))
        try:
            return onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=False)
        except Exception:
            return model


_ORT_MODULE: ModuleType | None = None


def _ort_symbolic() -> ModuleType | None:
    """onnxruntime's symbolic_shape_infer, imported by file so ``onnxruntime.tools`` (which imports
    torch when installed) is never executed."""
    global _ORT_MODULE
    if _ORT_MODULE is not None:
        return _ORT_MODULE
    spec = importlib.util.find_spec("onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(next(iter(spec.submodule_search_locations)), "tools", "symbolic_shape_infer.py")
    if not os.path.isfile(path):
        return None
    mspec = importlib.util.spec_from_file_location("_graphcost_ort_symbolic_shape_infer", path)
    if mspec is None or mspec.loader is None:
        return None
    module = importlib.util.module_from_spec(mspec)
    sys.modules[mspec.name] = module
    try:
        mspec.loader.exec_module(module)
    except Exception:
        return None
    _ORT_MODULE = module
    return module


def _ort_ready(model: onnx.ModelProto, base_dir: str | None, typed: TypeTable | None = None) -> onnx.ModelProto:
    """A copy ORT's symbolic inference can read without touching the disk.

    ORT reads constant values with ``numpy_helper.to_array`` relative to the current directory. Payloads
    the structure-only loader skipped are handled here: small integer ones (possible shape values) are
    read back into the model; the rest become typed graph inputs, whose shapes are all inference needs.
    """
    from graphcost import _scan

    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    keep: list[onnx.TensorProto] = []
    as_inputs: list[onnx.TensorProto] = []
    for t in g.initializer:
        if t.data_location != onnx.TensorProto.EXTERNAL:
            keep.append(t)
            continue
        if base_dir and t.data_type in _INT_TYPES and _numel(t) <= _SMALL_INT_VALUES:
            try:
                arr = _scan.read_external_payload(t, base_dir)
                keep.append(onnx.numpy_helper.from_array(arr, t.name))
                continue
            except Exception:
                pass
        as_inputs.append(t)
    del g.initializer[:]
    g.initializer.extend(keep)
    for t in as_inputs:
        g.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    # Constant nodes whose payload was skipped: the same treatment. And contrib-domain nodes whose outputs are
    # already typed (by graphcost's own rules): ORT stops at the first op it cannot type, so they become inputs.
    nodes = list(g.node)
    del g.node[:]
    for n in nodes:
        if typed is not None and n.domain not in ("", "ai.onnx", "ai.onnx.ml") and n.output and all(
                not o or (o in typed and _type_score(typed[o]) < 1000) for o in n.output):
            for o in n.output:
                if o:
                    vi = g.input.add()
                    vi.name = o
                    vi.type.CopyFrom(typed[o])
            continue
        ext = [a for a in n.attribute if a.name == "value" and a.type == onnx.AttributeProto.TENSOR
               and a.t.data_location == onnx.TensorProto.EXTERNAL]
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx") and ext and n.output:
            t = ext[0].t
            g.input.append(onnx.helper.make_tensor_value_info(n.output[0], t.data_type, list(t.dims)))
            continue
        g.node.append(n)
    return out


_INT_TYPES = frozenset({onnx.TensorProto.INT64, onnx.TensorProto.INT32})
_SMALL_INT_VALUES = 8192
"""Integer constants up to this many elements are read back for ORT: they may be shape values."""


def _numel(t: onnx.TensorProto) -> int:
    n = 1
    for d in t.dims:
        n *= int(d)
    return n


def _ort_infer(model: onnx.ModelProto, base_dir: str | None, warnings: list[ShapeWarning],
               typed: TypeTable | None = None) -> onnx.ModelProto | None:
    """ORT's symbolic inference, keeping partial results (its public entry point discards them and
    writes a temporary file into the current directory when inference is incomplete)."""
    module = _ort_symbolic()
    if module is None:
        return None
    import logging

    logging.getLogger("_graphcost_ort_symbolic_shape_infer").setLevel(logging.CRITICAL)
    ready = _ort_ready(model, base_dir, typed)
    renamed = _ort_plain_dim_names(ready)
    try:
        # ORT's engine prints and warns (numpy RuntimeWarnings) on models it cannot type: graphcost says one line.
        with contextlib.redirect_stdout(io.StringIO()), pywarnings.catch_warnings(), np.errstate(all="ignore"):
            pywarnings.simplefilter("ignore")
            sym = module.SymbolicShapeInference(2**31 - 1, True, False, 0)
            sym._preprocess(ready)
            rounds = 0
            while sym.run_ and rounds < 64:
                sym._infer_impl()
                rounds += 1
            sym._update_output_from_vi()
        result: Any = sym.out_mp_
    except Exception as e:
        warnings.append(ShapeWarning(None, f"onnxruntime symbolic shape inference gave up: {_first_line(e)}"))
        return None
    if not isinstance(result, onnx.ModelProto):
        return None
    _ort_restore_dim_names(result, renamed)
    return result


# ---------------------------------------------------------------------------- dim names ORT may see
# A dim_param is text from the model file. ORT's symbolic inference keeps dims as sympy objects, and
# sympy turns text into an expression by evaluating it, so ORT is handed only dim names that are plain
# identifiers (evaluating an identifier calls nothing): every other dim_param is renamed to a fresh
# identifier before the hand-off and put back, inside parentheses, in whatever ORT writes from it.
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ORT_DIM_PREFIX = "gc_dim"


def _type_shapes(t: onnx.TypeProto) -> Iterator[onnx.TensorShapeProto]:
    """Every shape inside a type, through sequences, optionals and maps."""
    which = t.WhichOneof("value")
    if which in ("tensor_type", "sparse_tensor_type"):
        inner = getattr(t, which)
        if inner.HasField("shape"):
            yield inner.shape
    elif which == "sequence_type":
        yield from _type_shapes(t.sequence_type.elem_type)
    elif which == "optional_type":
        yield from _type_shapes(t.optional_type.elem_type)
    elif which == "map_type":
        yield from _type_shapes(t.map_type.value_type)


def _all_dims(graph: onnx.GraphProto) -> Iterator[onnx.TensorShapeProto.Dimension]:
    """Every dim of every typed value in the graph and all its subgraphs (no _FLAT shortcut: this is a guard)."""
    for vi in (*graph.input, *graph.value_info, *graph.output):
        for shape in _type_shapes(vi.type):
            yield from shape.dim
    for node in graph.node:
        for a in node.attribute:
            for t in (a.tp, *a.type_protos):
                for shape in _type_shapes(t):
                    yield from shape.dim
            for g in ((a.g,) if a.HasField("g") else ()) + tuple(a.graphs):
                yield from _all_dims(g)


def _ort_plain_dim_names(model: onnx.ModelProto) -> dict[str, str]:
    """Rename, in place, each dim_param that is not a plain identifier; returns new name → original."""
    dims = [d for d in _all_dims(model.graph) if d.HasField("dim_param")]
    odd = sorted({d.dim_param for d in dims if not _IDENT.fullmatch(d.dim_param)})
    if not odd:
        return {}
    taken = {m for d in dims for m in _IDENT.findall(d.dim_param[:4096])}
    clashes = [len(name) for name in taken if name.startswith(_ORT_DIM_PREFIX)]
    # Longer than every name that shares the prefix, so no name in the model starts with it.
    prefix = _ORT_DIM_PREFIX + "_" * (max(clashes) - len(_ORT_DIM_PREFIX) + 1 if clashes else 0)
    new_name = {text: f"{prefix}{i}" for i, text in enumerate(odd)}
    for d in dims:
        if d.dim_param in new_name:
            d.dim_param = new_name[d.dim_param]
    return {new: text for text, new in new_name.items()}


def _ort_restore_dim_names(model: onnx.ModelProto, renamed: Mapping[str, str]) -> None:
    """Put the original dim_params back into ORT's output, in place, wherever ORT used a renamed one."""
    if not renamed:
        return

    def original(m: re.Match[str]) -> str:
        text = renamed.get(m.group(0))
        return m.group(0) if text is None else f"({text})"

    for d in _all_dims(model.graph):
        if not d.HasField("dim_param"):
            continue
        if d.dim_param in renamed:
            d.dim_param = renamed[d.dim_param]
        elif renamed.keys() & set(_IDENT.findall(d.dim_param)):
            d.dim_param = _IDENT.sub(original, d.dim_param)


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0][:300]


# ---------------------------------------------------------------------------- scoring and merging
def _dims_of(t: onnx.TypeProto) -> list[onnx.TensorShapeProto.Dimension] | None:
    if not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
        return None
    return list(t.tensor_type.shape.dim)


def _dim_unresolved(d: onnx.TensorShapeProto.Dimension, known: frozenset[str] | None = None) -> bool:
    """A dim is resolved when it is a number or an expression in the graph inputs' dim names only."""
    if d.HasField("dim_value"):
        return False
    if not d.HasField("dim_param") or not d.dim_param:
        return True
    names = free_names(parse_dim(d.dim_param))
    if known is None:
        return any(n.startswith("unk__") for n in names)
    return not names <= known


def _type_score(t: onnx.TypeProto, known: frozenset[str] | None = None) -> int:
    """Lower is better: 1000 for no shape, 1 per unresolved dim."""
    dims = _dims_of(t)
    if dims is None:
        return 1000 if t.HasField("tensor_type") else 0
    return sum(1 for d in dims if _dim_unresolved(d, known))


def _tensor_names(graph: onnx.GraphProto) -> list[str]:
    names: list[str] = []
    for g in _walk_graphs(graph):
        for n in g.node:
            names.extend(o for o in n.output if o)
    return names


def _input_dim_names(graph: onnx.GraphProto) -> frozenset[str]:
    names: set[str] = set()
    for vi in graph.input:
        for d in _dims_of(vi.type) or []:
            if d.HasField("dim_param") and d.dim_param:
                names |= free_names(parse_dim(d.dim_param))
    return frozenset(names)


def _unresolved(graph: onnx.GraphProto, types: TypeTable, names: list[str] | None = None) -> bool:
    """True when some value has no shape or a dim that is not expressed in the inputs' dims."""
    known = _input_dim_names(graph)
    for name in names if names is not None else _tensor_names(graph):
        t = types.get(name)
        if t is None:
            return True
        dims = _dims_of(t)
        if dims is None:
            if t.HasField("tensor_type"):
                return True
            continue
        if any(_dim_unresolved(d, known) for d in dims):
            return True
    return False


def _merge(primary: TypeTable, secondary: TypeTable) -> TypeTable:
    """Per value, the better-resolved type; ties go to ``primary``."""
    out = dict(secondary)
    for name, t in primary.items():
        other = out.get(name)
        if other is None or _type_score(t) <= _type_score(other):
            out[name] = t
    return out


def _fill_unresolved(symbolic: TypeTable, concrete: TypeTable, bound: set[str]) -> TypeTable:
    """Where the symbolic shape has dims beyond the bound input dims, take the concrete numbers."""
    out = dict(symbolic)
    for name, c in concrete.items():
        s = out.get(name)
        if s is None:
            out[name] = c
            continue
        sd = _dims_of(s)
        cd = _dims_of(c)
        if cd is None:
            continue
        if sd is None:
            out[name] = c
            continue
        needs = False
        for d in sd:
            if d.HasField("dim_value"):
                continue
            if not d.HasField("dim_param") or not d.dim_param:
                needs = True
                break
            if free_names(parse_dim(d.dim_param)) - bound:
                needs = True
                break
        if needs and _type_score(c) == 0:
            out[name] = c
    return out


def _write_types(model: onnx.ModelProto, types: TypeTable) -> None:
    """Store the chosen type of every intermediate value as value_info (outputs keep their entry)."""
    for g in _walk_graphs(model.graph):
        graph_io = {vi.name for vi in g.input} | {vi.name for vi in g.output}
        del g.value_info[:]
        for n in g.node:
            for o in n.output:
                if o and o not in graph_io and o in types:
                    vi = g.value_info.add()
                    vi.name = o
                    vi.type.CopyFrom(types[o])
        for vi in g.output:
            t = types.get(vi.name)
            if t is not None and (_type_score(t) < _type_score(vi.type) or not _dims_of(vi.type)):
                vi.type.CopyFrom(t)


_ORT_ASSUMED_OUTPUTS = {("com.microsoft", "GroupQueryAttention"): (1, 2)}
"""Outputs whose shape ORT's symbolic inference assumes rather than infers: GroupQueryAttention's present K/V
copy past's shape (a buffer shared with past, at its maximum length), though GQA also writes a present of
past + new tokens. Where the file declares such an output, the declaration wins."""


def _ort_assumptions_yield(ort_types: TypeTable, graph: onnx.GraphProto, declared: TypeTable) -> TypeTable:
    """``ort_types`` with each output ORT only assumed (``_ORT_ASSUMED_OUTPUTS``) replaced by its declared type."""
    out = dict(ort_types)
    for node in graph.node:
        for i in _ORT_ASSUMED_OUTPUTS.get((node.domain, node.op_type), ()):
            name = node.output[i] if i < len(node.output) else ""
            if name and name in declared and _dims_of(declared[name]) is not None:
                out[name] = declared[name]
    return out


def _check_declared_outputs(graph: onnx.GraphProto, types: TypeTable, warnings: list[ShapeWarning]) -> None:
    """Warn when the file's declared output shape contradicts inference; inference wins."""
    for vi in graph.output:
        declared = _dims_of(vi.type)
        t = types.get(vi.name)
        inferred = _dims_of(t) if t is not None else None
        if declared is None or inferred is None:
            continue
        if len(declared) != len(inferred):
            warnings.append(ShapeWarning(None, f"output {vi.name!r}: declared rank {len(declared)} but inferred "
                                               f"rank {len(inferred)}; using the inferred shape"))
            continue
        for i, (a, b) in enumerate(zip(declared, inferred, strict=True)):
            if a.HasField("dim_value") and b.HasField("dim_value") and a.dim_value != b.dim_value:
                warnings.append(ShapeWarning(None, f"output {vi.name!r}: declared dim {i} = {a.dim_value} but "
                                                   f"inferred {b.dim_value}; using the inferred shape"))
                break


def describe_dim(d: Dim) -> str:
    return to_text(d)
