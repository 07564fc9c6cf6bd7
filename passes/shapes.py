"""Shape inference: onnx's C++ inference first, onnx-shape-inference where shapes stay open, specialize between.

Symbolic dims are kept: ``batch``, ``seq`` and derived expressions such as ``floor((height - 1)/2) + 1``,
always written in the graph inputs' dim names. The order (measurements that decided it: ``docs/shapes.md``):

1. Fix graph inputs the user gave whole shapes for (``--input-shape``).
2. Run ``onnx.shape_inference`` with data propagation on a copy whose stored value_info and output
   shapes are cleared, so inference, not the exporter's annotation, decides. On a static graph this
   resolves everything and nothing below runs (the 100k-node synthetic graph: onnx alone).
3. Where tensors stay unresolved (no shape, a minted dim, a dim no input dim expresses), run
   onnx-shape-inference (``_engines``: a copy with plain-identifier dim names and no lazy payloads) and
   take, per tensor, the type that says more; graphcost's contrib rules (``_contrib_shapes``) take turns
   with it. onnxruntime's ``SymbolicShapeInference`` is no longer used: it was 20-40x slower on real
   dynamic exports (sympy ``simplify`` in its Resize rule), gave up on paddle2onnx Reshape targets and
   minted names that changed between runs; onnx-shape-inference resolved everything it did in the tests.
4. Still unresolved: ``infer → specialize → infer`` (bounded rounds). ``specialize`` folds
   shape-computing subgraphs that depend only on static shapes, constants and ``input_values`` into
   constants (window partitions, computed Pad amounts); its copy only feeds types.
5. When dims are bound (``--dim``) and shapes still hold unresolved dims, infer once more with the
   bound values substituted into the inputs and use those numbers where the symbolic run had none.
6. Where inference still knows nothing, fall back to what the file declares. Dims no input dim can
   express keep a name derived from the first (tensor, axis) that carries them (``unk__<tensor>_<axis>``),
   never from an engine's counter, so two processes give the same bytes.

The pass never changes its input model; it returns a new typed graph and its warnings.
"""

from __future__ import annotations

import contextvars
import re
import sys
from collections import ChainMap
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np
import onnx

from graphcost._dims import Dim, free_names, parse_dim, text_names, to_text
from graphcost._gc import release_heap
from graphcost.graph import (
    Graph,
    NodeFields,
    graph_protos,
    name_anonymous_input_dims,
    read_node_fields,
    unknown_dim_name,
)
from graphcost.load import Model, opset_lookup
from graphcost.passes import _contrib_shapes, _datadep, _engines, _sequences, _symsweep
from graphcost.passes import specialize as _specialize

InputShape = Sequence[int | str]


@dataclass(frozen=True)
class ShapeWarning:
    node: str | None
    message: str


@dataclass(frozen=True)
class ShapeResult:
    graph: Graph
    types: Mapping[str, onnx.TypeProto]
    """The chosen type of every value (main graph and subgraphs), by name (:class:`PackedTypes`)."""
    warnings: tuple[ShapeWarning, ...]
    input_dims: tuple[str, ...]
    """Names of the symbolic dims of the graph inputs (the dims a user can bind)."""
    engines: tuple[str, ...]
    """Which inference engines contributed (for the report)."""
    source: onnx.ModelProto
    """The model the graph was built from (the input, with ``input_shapes`` applied); its value_info is the file's."""
    symbolic_graph: Graph | None = None
    """When bound dims resolved shapes that stay unresolved symbolically, the graph with only the symbolic
    shapes: exact formulas come from it (``graph``'s shapes hold the bound values baked in)."""

    def model_proto(self) -> onnx.ModelProto:
        """A copy of the model with every inferred type written as value_info (for tools that want one)."""
        out = onnx.ModelProto()
        out.CopyFrom(self.source)
        _write_types(out, dict(self.types))
        return out


class PackedTypes(Mapping[str, onnx.TypeProto]):
    """A read-only type table that holds each type serialized and decodes it when asked.

    A table of ``TypeProto`` objects keeps the whole inferred model they were read from alive (protobuf frees a
    message's arena only when no part of it is referenced): synthetic-100k held 95 MiB more for it (RSS after
    the pass, heap trimmed: 391 → 296 MiB). Serialized, the types cost about 70 bytes each, and a result's table
    is read a few times at most (tests, ``model_proto``)."""

    __slots__ = ("_packed",)

    def __init__(self, types: Mapping[str, onnx.TypeProto]) -> None:
        intern = sys.intern  # the same name objects as the Graph's tables (100k names: 5.5 MiB otherwise)
        # one bytes object per distinct type: a model repeats a few types many times (synthetic-100k: 3
        # distinct among 100k, 5 MiB of copies otherwise; LLaMA-32: 53 among 8k)
        distinct: dict[bytes, bytes] = {}
        packed: dict[str, bytes] = {}
        for name, t in types.items():
            b = t.SerializeToString()
            packed[intern(name)] = distinct.setdefault(b, b)
        self._packed = packed

    def packed(self) -> Mapping[str, bytes]:
        """The serialized types by name, read-only (what :class:`Graph` decodes, through its type cache)."""
        return MappingProxyType(self._packed)

    def __getitem__(self, name: str) -> onnx.TypeProto:
        out = onnx.TypeProto()
        out.ParseFromString(self._packed[name])
        return out

    def __contains__(self, name: object) -> bool:
        return name in self._packed

    def __iter__(self) -> Iterator[str]:
        return iter(self._packed)

    def __len__(self) -> int:
        return len(self._packed)


def infer_shapes(
    model: Model,
    *,
    input_shapes: Mapping[str, InputShape] | None = None,
    dims: Mapping[str, int] | None = None,
    input_values: Mapping[str, Any] | None = None,
) -> ShapeResult:
    """Type every value of ``model`` (see the module docstring for the order of the engines).

    ``input_values`` (graph input → value, scalars and small int tensors) are handed to the
    specialize pre-pass, which evaluates shape-computing subgraphs with them."""
    flat, contrib, names, graph_ops, slots = _census(model.proto.graph, model.node_fields)
    token = _FLAT.set(flat)
    holders = _GRAPH_OPS.set(graph_ops)
    candidates = _SLOTS.set(slots)
    scores = _SCORES.set({})
    rules = _CONTRIB.set(contrib)
    given = _NAMES.set(names)
    verdicts = _VERDICTS.set({})
    try:
        chosen = _choose_types(model, input_shapes=input_shapes, dims=dims, input_values=input_values)
    finally:
        _VERDICTS.reset(verdicts)
        _NAMES.reset(given)
        _CONTRIB.reset(rules)
        _SCORES.reset(scores)
        _SLOTS.reset(candidates)
        _GRAPH_OPS.reset(holders)
        _FLAT.reset(token)
    # Every inferred copy is unreferenced now (the engines' tables above point into them; the chosen types are
    # packed), so the C heap they held goes back to the OS before the Graph's Python objects are allocated,
    # which never reuse it. synthetic-100k: the Graph built next to the copies made the pass's peak (533 MiB).
    release_heap(len(chosen.base.graph.node))
    return _result(model, chosen)


class _Census(NamedTuple):
    flat: bool
    """Whether the model has no subgraph."""
    contrib: bool
    """Whether any node (subgraphs included) is an op graphcost's contrib rules type."""
    names: list[str] | None
    """For a model without subgraphs, every node output's name in graph order (what ``_tensor_names``
    gives); None otherwise."""
    holders: frozenset[str] | None
    """For a model with subgraphs, the op types of the nodes that hold one; None otherwise."""
    slots: _datadep.Candidates | None
    """For a model without subgraphs, each node's shape-carrying input slots (``_datadep.candidate``)."""


def _census(graph: onnx.GraphProto, fields: Sequence[NodeFields] | None = None) -> _Census:
    """One walk over the nodes for what several steps of the pass ask of them (see :class:`_Census`). Every
    copy the pass infers has the same nodes, or (specialized: inlined branches, unrolled bodies) nodes taken
    from these graphs, so the answers hold for all of them. synthetic-100k: one walk instead of four (subgraph
    test, contrib node list, output names, the data-dependence candidates), over the node fields the loader
    read (``fields``, else read here): 0.34 s when it read them from protobuf itself."""
    if fields is None:
        fields = read_node_fields(graph)
    ops: set[tuple[str, str]] = set()
    names: list[str] = []
    slots: _datadep.Candidates = []
    flat = True
    graph_types = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
    candidate, shape_ops = _datadep.candidate, _datadep.SHAPE_SLOTS
    protos = graph.node
    for index, f in enumerate(fields):  # plain loops, no generators: 0.23 s against 0.44 at 100,000 nodes (measured)
        op, domain = f.op_type, f.domain
        ops.add((domain, op))
        names.extend(f.outputs)
        if op in shape_ops:  # a call per node would cost 0.1 s at 100,000 nodes
            node = protos[index]
            found = candidate(node, op, domain)
            if found is not None:
                slots.append((node, found))
        if f.graphs:
            flat = False
    if "" in names:  # an omitted optional output
        names = [n for n in names if n]
    graph_ops: frozenset[str] | None = None
    if not flat:
        holders: set[str] = set()
        ops = set()
        for g in graph_protos(graph):
            for n in g.node:
                ops.add((n.domain, n.op_type))
                if any(a.type in graph_types for a in n.attribute):
                    holders.add(n.op_type)
        graph_ops = frozenset(holders)
    contrib = any(_contrib_shapes.lookup(domain, op) is not None for domain, op in ops)
    return _Census(flat, contrib, names if flat else None, graph_ops, slots if flat else None)


def _result(model: Model, chosen: _Chosen) -> ShapeResult:
    """The Graph with the chosen types, built on ``base`` (the caller's model, or its copy with input shapes),
    which outlives this pass anyway."""
    base, types, symbolic = chosen.base, chosen.types, chosen.symbolic
    fields = model.node_fields  # base is the model's proto, or its copy with input shapes: the same nodes
    graph = Graph(base.graph, opset_lookup(base), base_dir=model.base_dir, types=types.packed(), fields=fields)
    symbolic_graph = None
    if symbolic is not None and symbolic.packed() != types.packed():
        symbolic_graph = Graph(base.graph, opset_lookup(base), base_dir=model.base_dir, types=symbolic.packed(),
                               fields=fields)
    for g in (graph, symbolic_graph):
        if g is not None and _sequences.has_sequences(g):
            _size_sequences(g)
    input_dims: set[str] = set()
    for name in graph.input_names:
        t = graph.tensor(name)
        if t is not None and t.shape is not None:
            for d in t.shape:
                input_dims |= free_names(d)
    return ShapeResult(graph, types, chosen.warnings, tuple(sorted(input_dims)), chosen.engines, base,
                       symbolic_graph)


def _size_sequences(graph: Graph) -> None:
    """Size the sequence values of ``graph`` and of its subgraphs (``passes/_sequences.py``)."""
    graph.size_values(_sequences.sequence_bytes(graph))
    for node in graph.nodes():
        for _, child in graph.children(node.name):
            _size_sequences(child)


@dataclass(frozen=True)
class _Chosen:
    """What the engines decided: the type of every value (and, with bound dims, the symbolic-only types)."""

    base: onnx.ModelProto
    types: PackedTypes
    symbolic: PackedTypes | None
    warnings: tuple[ShapeWarning, ...]
    engines: tuple[str, ...]


def _choose_types(
    model: Model,
    *,
    input_shapes: Mapping[str, InputShape] | None,
    dims: Mapping[str, int] | None,
    input_values: Mapping[str, Any] | None,
) -> _Chosen:
    warnings: list[ShapeWarning] = []
    base = with_input_shapes(model.proto, input_shapes)  # read only; the copies below are what inference may change

    declared = _collect_types(base.graph)
    stripped = strip_shapes(base)
    engines = ["onnx"]
    inferred = _onnx_infer(stripped, warnings)
    typed = _collect_types(inferred.graph)
    dep = _datadep.analyze(stripped, nested=not _FLAT.get(), holders=_GRAPH_OPS.get(), candidates=_SLOTS.get())
    guarded_at = len(warnings)  # where the run-time-values warning goes, once the engines have had their say
    if dep.guarded:
        stripped = _seed_guarded(stripped, _guarded_seeds(stripped, typed, dep))
        inferred = _onnx_infer(stripped, [])
        typed = _collect_types(inferred.graph)

    # onnx, graphcost's contrib rules and the symbolic engine take turns: each contrib output typed in one
    # turn is seeded as value_info, so the engines carry it downstream in the next.
    stripped, inferred, typed, seeded = _contrib_rounds(stripped, inferred, typed, complete_only=True)
    notes: list[ShapeWarning] = []
    names = _NAMES.get() or _tensor_names(stripped.graph)  # the same nodes in every copy of the model
    known = _input_dim_names(stripped.graph)
    # the engines never decide a value-dependent shape (dep.tainted): those do not keep them running
    open_names = [n for n in names if n not in dep.tainted] if dep.tainted else names  # one list: one verdict
    swept = False
    if not input_values and _unresolved(inferred.graph, typed, open_names):
        # graphcost's sweep first: where it closes everything (HF decoders in symbolic batch/seq), nothing is
        # left to specialize (LLaMA-32 legacy: 0.2 s of folding and one more onnx run saved)
        stripped, inferred, typed, swept = _sweep_rounds(stripped, inferred, typed, known, dep, names)
    # specialize next: on a static graph every shape-computing subgraph folds exactly, and the symbolic
    # engine then reasons only about what is left (Faster R-CNN: minutes of sympy otherwise)
    if _unresolved(inferred.graph, typed, names):  # all names: given input values decide value-dependent shapes
        typed, specialized = _specialize_rounds(stripped, typed, names, known, model.base_dir, dep, input_values,
                                                notes)
        if specialized:
            engines.append("specialize")
    if _unresolved(inferred.graph, typed, open_names):
        stripped, inferred, typed, more = _sweep_rounds(stripped, inferred, typed, known, dep, names)
        swept = swept or more
    if swept:
        engines.append("graphcost-sweep")
    stripped, inferred, typed, used = _symbolic_turns(stripped, inferred, typed, open_names, known, model.base_dir,
                                                      dep, notes)
    if used:
        engines.append("onnx-shape-inference")
    stripped, inferred, typed, more = _contrib_rounds(stripped, inferred, typed, complete_only=False)
    seeded = seeded or more
    if seeded:
        engines.append("graphcost-contrib")
    if unstable := _unstable_carries(stripped.graph, typed):
        stripped, inferred, typed, dep = _reseed_carries(stripped, typed, dep, unstable)
        warnings.append(ShapeWarning(None, f"{len(unstable)} Loop-carried value(s) change shape across iterations "
                                           f"(e.g. {next(iter(unstable))!r}); the axes that change are named "
                                           "unknowns"))

    bound = dict(dims or {})
    symbolic_typed: TypeTable | None = None
    if bound and _unresolved(inferred.graph, typed, names):
        concrete = onnx.ModelProto()
        concrete.CopyFrom(stripped)
        if bind_inputs(concrete, bound):
            engines.append("bound-dims")
            c_inf = _onnx_infer(concrete, [])
            c_types = _collect_types(c_inf.graph)
            c_known = _input_dim_names(concrete.graph)
            # the bound copy goes through the same steps: on an export whose dims are all bound it is a static
            # graph, which specialize folds exactly (dynamic Swin-T: its shifted-window masks)
            concrete, c_inf, c_types, _ = _sweep_rounds(concrete, c_inf, c_types, c_known, dep, names)
            if _unresolved(c_inf.graph, c_types, names):
                c_types, _ = _specialize_rounds(concrete, c_types, names, c_known, model.base_dir, dep, input_values,
                                                [])
            *_, c_types, _ = _symbolic_turns(concrete, c_inf, c_types, names, c_known, model.base_dir, dep, [])
            symbolic_typed = _final_names(_merge(typed, declared), names, base.graph)
            typed = _fill_unresolved(typed, c_types, set(bound))

    typed = _final_names(_merge(typed, declared), names, base.graph)
    if dep.guarded and (still := _still_guarded(dep.guarded, typed, _input_dim_names(base.graph))):
        name, op = still[0]
        text = (f"{len(still)} output(s) have shapes that depend on run-time values (e.g. {name!r} of {op}); "
                "their dims are named unknowns")
        warnings.insert(guarded_at, ShapeWarning(None, text))
    if notes and _unresolved(inferred.graph, typed, names):
        warnings.extend(notes)  # only worth saying when something stayed unresolved
    _check_declared_outputs(base.graph, typed, warnings)
    if base.graph.value_info or not _FLAT.get():
        _check_declared_values(base.graph, typed, warnings)
    # packed here, so that no TypeProto of the inferred copies outlives this call (see PackedTypes)
    return _Chosen(base, PackedTypes(typed), None if symbolic_typed is None else PackedTypes(symbolic_typed),
                   tuple(warnings), tuple(engines))


def _symbolic_turns(stripped: onnx.ModelProto, inferred: onnx.ModelProto, typed: TypeTable, names: list[str],
                    known: frozenset[str], base_dir: str | None, dep: _datadep.DataDependence,
                    notes: list[ShapeWarning]) -> tuple[onnx.ModelProto, onnx.ModelProto, TypeTable, bool]:
    """onnx-shape-inference where onnx's inference left something unresolved, alternating with the
    contrib rules while each turn types more (at most ``_SYMBOLIC_TURNS``). Returns the models and table
    as the contrib rounds left them, and whether the engine ran. Skipped outright when nothing is
    unresolved (large static graphs).

    The turns run without the engine's constraint pass (``_engines.symbolic_infer``): on wav2vec2's
    dynamo export it spent 1.6 s of 1.8 in sympy ``simplify`` and resolved nothing the turns did not
    (``docs/shapes.md``). Only when something is still unresolved after the turns does one more run
    take it, and only when the last turn's run saw a symbolic dim: the constraint pass rewrites symbolic
    dims of shaped values and nothing else, so after a run with none (a static model where a value stays
    shapeless, e.g. behind an op no engine knows) it would give the same types again at the cost of a
    whole second run."""
    used = False
    symbolic = True  # whether the last run, on the model as it is now, wrote a symbolic dim
    for _ in range(_SYMBOLIC_TURNS):
        if not _unresolved(inferred.graph, typed, names):
            break
        typed, symbolic = _engine_types(stripped, base_dir, dep, typed, names, known, notes, constraints=False)
        used = True
        stripped, inferred, typed, more = _contrib_rounds(stripped, inferred, typed, complete_only=True)
        if more:
            symbolic = True  # the model changed since that run: nothing is known about the next one
        else:
            break
    if used and symbolic and _unresolved(inferred.graph, typed, names):
        typed, _ = _engine_types(stripped, base_dir, dep, typed, names, known, notes, constraints=True)
    return stripped, inferred, typed, used


def _engine_types(stripped: onnx.ModelProto, base_dir: str | None, dep: _datadep.DataDependence, typed: TypeTable,
                  names: list[str], known: frozenset[str], notes: list[ShapeWarning], *,
                  constraints: bool) -> tuple[TypeTable, bool]:
    """``typed`` with what one onnx-shape-inference run says better (never a value-dependent shape), and
    whether the run saw a symbolic dim (on a graph input or in any type it wrote).

    The engine is handed only the nodes that decide the values of ``names`` still open
    (``_engines.open_cone``), or the whole model when those are most of it; it is not run at all when no
    open value is left in the model it would be handed (the nodes of value-dependent shapes are taken out
    first). MViT-B legacy: its six open values sit in If nodes that read value-dependent ones, and four
    whole-model runs (1.37 s on a loaded machine) typed nothing."""
    handed = _datadep.without_tainted(stripped, dep)
    present = set(_tensor_names(handed.graph))
    open_values = [n for n in names if n in present and ((t := typed.get(n)) is None or _type_score(t, known) > 0)]
    if not open_values:  # every open value went with a value-dependent node (MViT's If branches): nothing to decide
        return typed, False
    cone = _engines.open_cone(handed, typed, open_values, known)
    run = _engines.symbolic_infer(cone or handed, base_dir, constraints=constraints)
    if cone is not None and not run.types:  # the cone could not be read (a malformed model): the whole one
        run = _engines.symbolic_infer(handed, base_dir, constraints=constraints)
    else:
        handed = cone or handed
    if run.note is not None and run.note not in {n.message for n in notes}:
        notes.append(ShapeWarning(None, run.note))
    sym = run.types
    symbolic = _has_symbolic_dim(sym.values()) or any(
        _has_symbolic_dim(vi.type for vi in g.input) for g in _walk_graphs(handed.graph))
    for name in dep.tainted:  # never take a guess about a value-dependent shape
        sym.pop(name, None)
    if grown := _unstable_carries(handed.graph, ChainMap(sym, typed), unshaped=False, bodies=False):
        # the engine typed a Loop output as one iteration's shape: neither it nor what stands on it is taken
        for name in _datadep.downstream(handed, grown):
            sym.pop(name, None)
    return _merge(sym, typed, known), symbolic


def _has_symbolic_dim(types: Iterable[onnx.TypeProto]) -> bool:
    return any(d.HasField("dim_param") for t in types for shape in _engines.type_shapes(t) for d in shape.dim)


def _specialize_rounds(stripped: onnx.ModelProto, typed: TypeTable, names: list[str], known: frozenset[str],
                       base_dir: str | None, dep: _datadep.DataDependence, input_values: Mapping[str, Any] | None,
                       notes: list[ShapeWarning]) -> tuple[TypeTable, bool]:
    """infer → specialize → infer until nothing changes (at most ``_SPECIALIZE_ROUNDS``).

    ``specialize`` replaces shape-computing subgraphs that depend only on static shapes, constants and the
    given input values by constants; the engines then see constant Reshape/Pad/Slice targets. The
    specialized copy only feeds types: the returned graph keeps every original node."""
    work = stripped
    changed = False
    values = {k: np.asarray(v) for k, v in input_values.items()} if input_values else None
    work_print = _fingerprint(work)
    for _ in range(_SPECIALIZE_ROUNDS):
        try:  # given values become initializers in the first round, so only that round takes them
            result = _specialize.specialize_model(work, input_values=values if work is stripped else None, types=typed)
        except Exception as e:
            notes.append(ShapeWarning(None, f"specialize gave up: {_first_line(e)}"))
            break
        spec = result.model
        spec_print = _fingerprint(spec)
        if spec is work or spec_print == work_print:
            break
        changed = True
        work, work_print = spec, spec_print
        inf = _onnx_infer(work, [])
        typed = _merge(_collect_types(inf.graph), typed, known)
        work, inf, typed, _ = _sweep_rounds(work, inf, typed, known, dep, names)
        # the engine never decides a tainted shape, nor one of a value this copy no longer computes (a branch
        # not taken, a folded node): those do not keep it running on the copy
        present = set(_tensor_names(work.graph))
        open_names = [n for n in names if n not in dep.tainted and n in present]
        *_, typed, _ = _symbolic_turns(work, inf, typed, open_names, known, base_dir, dep, notes)
        if not _unresolved(inf.graph, typed, names) or _settled(result, typed):
            break
    return typed, changed


def _settled(sweep: _specialize.Specialization, typed: TypeTable) -> bool:
    """Whether a sweep of the specialized copy with ``typed`` would change nothing, so the round can stop
    without running it (it would find the same node and initializer counts, :func:`_fingerprint`).

    A sweep folds a node, takes a branch or unrolls a Loop only from what it knows: values, static shapes
    and element types. The next sweep runs on this one's output, where every folded value is an initializer
    of the same value, shape and type (a float one over ``_SCALARS`` elements is no longer a known value:
    knowing less folds less), and it knows what ``typed`` says. So when no bound held this sweep back and
    ``typed`` states no static shape or element type this sweep did not end with, the next one asks every
    node the same questions with at most the same knowledge, and each node it could fold, take or unroll
    this one already did. Faster R-CNN and FCOS legacy: their value-dependent shapes keep the rounds going,
    and the second sweep was work that changed nothing (Faster R-CNN 0.023-0.050 s, FCOS 0.033-0.043 s CPU,
    measured in one process on a loaded machine); MViT-B legacy's sweep is not settled and keeps its rounds."""
    if sweep.limited:
        return False
    static, elems = sweep.static, sweep.elems
    for name, t in typed.items():
        if not t.HasField("tensor_type"):
            continue
        elem = t.tensor_type.elem_type
        if elem and elems.get(name) != elem:
            return False
        shape = _specialize._static_shape(t)
        if shape is not None and static.get(name) != shape:
            return False
    return True


def _fingerprint(model: onnx.ModelProto) -> tuple[int, ...]:
    """Cheap change test for a specialize round: node and initializer counts of every graph."""
    return tuple(n for g in _walk_graphs(model.graph) for n in (len(g.node), len(g.initializer)))


def _final_names(types: TypeTable, names: list[str], graph: onnx.GraphProto) -> TypeTable:
    """Minted dim names made deterministic (see ``_engines.name_minted_dims``).

    The table itself when no type's bytes hold ``unk__`` or ``_d``: a dim_param is stored verbatim in them,
    so no dim can then carry a minted name and the rename would return the table unchanged. Serializing a
    type costs 0.35 us against the rename's own test walking its dims, 2.4 us (synthetic-100k, CPU: 0.43 s
    with that test alone, 0.12 s with this one first)."""
    if not any(b"unk__" in (b := t.SerializeToString()) or b"_d" in b for t in types.values()):
        return types
    return _engines.name_minted_dims(types, names, graph)


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
                dim.dim_param = d if isinstance(d, str) else unknown_dim_name(name, i)
    return t


def _contrib_rounds(stripped: onnx.ModelProto, inferred: onnx.ModelProto, typed: TypeTable, *,
                    complete_only: bool) -> tuple[onnx.ModelProto, onnx.ModelProto, TypeTable, bool]:
    """Type the outputs of ops no engine knows (``_contrib_shapes``) and let onnx carry them downstream.

    Each round walks the nodes in graph order (a chain of contrib ops is typed in one round), computes
    what the rules can from the current types, seeds those outputs as value_info and runs onnx's
    inference again; it stops when a round adds nothing (at most ``_CONTRIB_ROUNDS``).
    ``complete_only`` seeds only fully resolved shapes: a seed with unknown dims handed to the symbolic
    engine would be merged with real dims and spread its placeholder names upstream."""
    if not _CONTRIB.get():  # no node of the model is an op the rules know (``_census``)
        return stripped, inferred, typed, False
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


def _sweep_rounds(stripped: onnx.ModelProto, inferred: onnx.ModelProto, typed: TypeTable, known: frozenset[str],
                  dep: _datadep.DataDependence,
                  names: list[str]) -> tuple[onnx.ModelProto, onnx.ModelProto, TypeTable, bool]:
    """graphcost's symbolic sweep (``_symsweep``) and onnx's inference in turn: each sweep states the open
    shapes it can in the input dims, onnx carries them downstream, until a sweep adds nothing (at most
    ``_SWEEP_ROUNDS``). Only whole shapes are seeded. LLaMA-32 legacy: the 1,284 values onnx leaves open
    (Reshape -1 against a symbolic numel, rotate_half Slices, Range) close without onnx-shape-inference.

    A sweep that leaves nothing open returns its table without writing its seeds into the model and running
    onnx again (LLaMA-32: 0.1 s of both): every later step reads types from the table, and a later onnx run
    on the returned model (the contrib rounds) is merged under it, so the seeds are never lost."""
    opset = opset_lookup(stripped).get("", 0)
    seeded = False
    for _ in range(_SWEEP_ROUNDS):
        if not _unresolved(inferred.graph, typed, names):
            break
        seeds = _symsweep.sweep(stripped.graph, typed, known, opset, dep.tainted)
        seeds = {k: t for k, t in seeds.items()
                 if (c := typed.get(k)) is None or _type_score(t, known) < _type_score(c, known)}
        if not seeds:
            break
        seeded = True
        if not _unresolved(inferred.graph, merged := {**typed, **seeds}, names):
            return stripped, inferred, merged, seeded
        stripped = _with_value_info(stripped, seeds)
        inferred = _onnx_infer(stripped, [])
        typed = _merge(_collect_types(inferred.graph), {**typed, **seeds}, known)
    return stripped, inferred, typed, seeded


_SWEEP_ROUNDS = 6
_CONTRIB_ROUNDS = 12
_SYMBOLIC_TURNS = 4
_SPECIALIZE_ROUNDS = 4


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


Seed = tuple[int, tuple["int | str | None", ...] | None]
"""A guarded value's element type and dims (None: a named unknown on that axis; no tuple: rank unknown)."""


def _seed_guarded(model: onnx.ModelProto, seeds: Mapping[str, Seed]) -> onnx.ModelProto:
    """A copy with each seeded value typed as its seed says, named unknown dims where it has no dim: as
    value_info, or in place for a body's input (a Loop's carried input). The seeds are value-dependent outputs'
    (:func:`_guarded_seeds`) or unstable Loop carries' (:func:`_unstable_carries`)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graphs: dict[str, onnx.GraphProto] = {}
    body_inputs: dict[str, onnx.ValueInfoProto] = {}
    for g in _walk_graphs(out.graph):
        if g is not out.graph:
            body_inputs.update((vi.name, vi) for vi in g.input)
        for n in g.node:
            for o in n.output:
                graphs[o] = g
    for name, (elem, dims) in seeds.items():
        if elem == 0:
            continue
        vi = body_inputs.get(name)
        if vi is None:
            owner = graphs.get(name)
            if owner is None:
                continue
            vi = owner.value_info.add()
            vi.name = name
        vi.type.Clear()
        vi.type.tensor_type.elem_type = elem
        if dims is not None:
            vi.type.tensor_type.shape.SetInParent()
            for i, d in enumerate(dims):
                dim = vi.type.tensor_type.shape.dim.add()
                if isinstance(d, int):
                    dim.dim_value = d
                else:
                    dim.dim_param = d if d is not None else unknown_dim_name(name, i)
    return out


def _guarded_seeds(model: onnx.ModelProto, typed: TypeTable, dep: _datadep.DataDependence) -> dict[str, Seed]:
    """The seed of each guarded output that has a producer (:func:`_guarded_dims`)."""
    producers: dict[str, onnx.NodeProto] = {}
    consts: dict[str, onnx.TensorProto] = {}
    for g in _walk_graphs(model.graph):
        consts.update((t.name, t) for t in g.initializer)
        for n in g.node:
            if n.op_type == "Constant" and n.output and n.attribute and n.attribute[0].name == "value":
                consts[n.output[0]] = n.attribute[0].t
            for o in n.output:
                producers[o] = n
    return {name: _guarded_dims(name, op, producers[name], typed, consts)
            for name, op in dep.guarded.items() if name in producers}


def _guarded_dims(name: str, op: str, node: onnx.NodeProto, typed: TypeTable,
                  consts: Mapping[str, onnx.TensorProto]) -> Seed:
    """The seed of one guarded output: its element type, and its rank when knowable (from its own type, or
    from input 0 for a rank-preserving op). On a Slice with constant axes, a Split or a TopK, the axes the op
    does not touch keep input 0's dims (Keypoint R-CNN's ``Slice`` of (R, 17, 56, 56) heatmaps on axis 0)."""
    rank: int | None = None
    elem = 0
    known = typed.get(name)
    if known is not None and known.HasField("tensor_type"):
        elem = known.tensor_type.elem_type
        if known.tensor_type.HasField("shape"):
            rank = len(known.tensor_type.shape.dim)
    first = typed.get(node.input[0]) if node.input else None
    first_dims = _dims_of(first) if first is not None else None
    if op in _datadep.RANK_PRESERVING and first is not None and first.HasField("tensor_type"):
        elem = elem or (first.tensor_type.elem_type if op != "TopK" or name == node.output[0] else 7)
        if rank is None and first_dims is not None:
            rank = len(first_dims)
    if rank is None:
        return elem, None
    dims: list[int | str | None] = [None] * rank
    touched = _touched_axes(op, node, rank, consts)
    if touched is not None and first_dims is not None and len(first_dims) == rank:
        for i, d in enumerate(first_dims):
            if i not in touched:
                dims[i] = _entry(d)
    return elem, tuple(dims)


def _touched_axes(op: str, node: onnx.NodeProto, rank: int, consts: Mapping[str, onnx.TensorProto]) -> set[int] | None:
    """The axes a rank-preserving op may resize, when its attributes or constant inputs say (else None)."""
    if op in ("Split", "TopK"):
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0 if op == "Split" else -1)
        return {axis % rank}
    if op == "Slice" and len(node.input) > 3 and node.input[3] in consts:
        axes = onnx.numpy_helper.to_array(consts[node.input[3]]).reshape(-1)
        return {int(a) % rank for a in axes}
    return None


def _unstable_carries(graph: onnx.GraphProto, typed: Mapping[str, onnx.TypeProto], *, unshaped: bool = True,
                      bodies: bool = True) -> dict[str, Seed]:
    """Loop-carried values whose Loop output was typed as one iteration's shape although that shape differs
    from the initial value's: the value grows (a Concat onto a carried tensor; R-CNN exports append a row per
    detection), so its final shape depends on the trip count. onnx-shape-inference types a Loop's output as its
    body's output. A Loop unrolled by the specialize pass is exact and reads differently (the final shape,
    not the body's), so it is left alone. Each such output, and the body's carried input, is seeded with
    the initial value's dims on the axes that agree and a named unknown on the others (:func:`_growth`).
    ``unshaped``: also a Loop output with no shape at all; ``bodies``: also each body's carried input."""
    out: dict[str, Seed] = {}
    holders = _GRAPH_OPS.get()
    if _FLAT.get() or (holders is not None and "Loop" not in holders):
        return out  # no Loop anywhere (the census says): no walk
    for g in _walk_graphs(graph):
        for node in g.node:
            if node.op_type != "Loop" or node.domain not in ("", "ai.onnx"):
                continue
            body = next((a.g for a in node.attribute if a.name == "body"), None)
            if body is None:
                continue
            for k, init in enumerate(list(node.input)[2:]):
                if k >= len(node.output) or k + 1 >= len(body.output) or not node.output[k]:
                    continue
                t_init, t_out = typed.get(init), typed.get(node.output[k])
                t_body = typed.get(body.output[k + 1].name)
                seed = _growth(t_init, t_out, t_body, unshaped)
                if seed is not None:
                    out[node.output[k]] = seed
                    if bodies and k + 2 < len(body.input):
                        out[body.input[k + 2].name] = seed
    return out


def _reseed_carries(stripped: onnx.ModelProto, typed: TypeTable, dep: _datadep.DataDependence,
                    unstable: Mapping[str, Seed]
                    ) -> tuple[onnx.ModelProto, onnx.ModelProto, TypeTable, _datadep.DataDependence]:
    """The model, table and data dependence with the ``unstable`` carries guarded and seeded, and everything
    downstream of them typed again by onnx alone (what the engines said of it stood on one iteration's shape).
    One onnx pass, not a second run of the whole pass: Keypoint R-CNN 1.9 s with this, 2.7 s with a rerun."""
    closure = _datadep.downstream(stripped, unstable)
    dep = _datadep.DataDependence({**dep.guarded, **dict.fromkeys(unstable, "Loop")}, dep.tainted | closure)
    cleared = onnx.ModelProto()
    cleared.CopyFrom(stripped)
    for g in _walk_graphs(cleared.graph):  # no stale seed of a downstream value may reach onnx
        keep = [vi for vi in g.value_info if vi.name not in closure]
        if len(keep) != len(g.value_info):
            del g.value_info[:]
            g.value_info.extend(keep)
    seeded = _seed_guarded(cleared, unstable)
    inferred = _onnx_infer(seeded, [])
    fresh = _collect_types(inferred.graph)
    out = {k: v for k, v in typed.items() if k not in closure}
    out.update((k, fresh[k]) for k in closure if k in fresh)
    return seeded, inferred, out, dep


def _growth(t_init: onnx.TypeProto | None, t_out: onnx.TypeProto | None, t_body: onnx.TypeProto | None,
            unshaped: bool) -> Seed | None:
    """The seed of a Loop output that took its body's one-iteration shape where the initial value differs, or
    that no engine shaped at all (a Loop whose trips are the data's, which the engines leave to onnx, and onnx
    drops a carried shape that changes; Keypoint R-CNN's ``xy_preds``): the carried value keeps its rank."""
    if t_init is None or not t_init.HasField("tensor_type"):
        return None
    d_init = _dims_of(t_init)
    if d_init is None:
        return None
    elem = t_init.tensor_type.elem_type
    d_out = _dims_of(t_out) if t_out is not None and t_out.HasField("tensor_type") else None
    d_body = _dims_of(t_body) if t_body is not None and t_body.HasField("tensor_type") else None
    if d_out is None and not unshaped:
        return None
    if d_out is None:  # unshaped: the axes where one iteration's output agrees with the initial value are kept
        if t_out is not None and t_out.WhichOneof("value") not in (None, "tensor_type"):
            return None  # a sequence or optional carry: not a tensor to seed
        agree = d_body if d_body is not None and len(d_body) == len(d_init) else [None] * len(d_init)
        return elem, tuple(_entry(a) if a == b else None for a, b in zip(d_init, agree, strict=True))
    if d_body is None or len(d_init) != len(d_out):
        return None
    if d_out != d_body or d_out == d_init:  # stable, or typed by something that knew the trips
        return None
    return elem, tuple(_entry(a) if a == b else None for a, b in zip(d_init, d_out, strict=True))


def _entry(d: onnx.TensorShapeProto.Dimension) -> int | str | None:
    """A dim as a seed holds it: its number, its name, or None (a named unknown) for an anonymous one."""
    return d.dim_value if d.HasField("dim_value") else (d.dim_param or None)


# ---------------------------------------------------------------------------- type tables
TypeTable = dict[str, onnx.TypeProto]


_FLAT: contextvars.ContextVar[bool] = contextvars.ContextVar("graphcost_flat_model", default=False)
"""True while inferring a model without subgraphs: walks then skip scanning every node's attributes."""


_CONTRIB: contextvars.ContextVar[bool] = contextvars.ContextVar("graphcost_contrib_ops", default=True)
"""False while inferring a model none of whose nodes a contrib rule types: the contrib rounds do nothing."""

_NAMES: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("graphcost_output_names", default=None)
"""While inferring a model without subgraphs: its node outputs' names in graph order (``_census``)."""


_GRAPH_OPS: contextvars.ContextVar[frozenset[str] | None] = contextvars.ContextVar("graphcost_graph_ops",
                                                                                     default=None)
"""While inferring a model with subgraphs: the op types of its nodes that hold one (``_census``)."""

_SLOTS: contextvars.ContextVar[_datadep.Candidates | None] = contextvars.ContextVar("graphcost_shape_slots",
                                                                                    default=None)
"""While inferring a model without subgraphs: its nodes' shape-carrying input slots (``_census``)."""


def _walk_graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``graph`` and its subgraphs, outer first (``graph_protos``' order).

    Within :func:`infer_shapes` only nodes of an op type that holds a subgraph somewhere in the model are
    looked into: every copy the pass walks has the model's nodes or nodes taken from its graphs, plus
    Identity nodes specialize makes. Faster R-CNN legacy (1,573 nodes, 5 graphs): a walk reads 1,573 op
    types instead of every node's attributes."""
    if _FLAT.get():  # a model without subgraphs: no need to look at every node's attributes
        yield graph
        return
    holders = _GRAPH_OPS.get()
    if holders is None:
        yield from graph_protos(graph)
        return
    yield from _holder_walk(graph, holders)


def _holder_walk(graph: onnx.GraphProto, holders: frozenset[str]) -> Iterator[onnx.GraphProto]:
    yield graph
    for node in graph.node:
        if node.op_type in holders:
            for a in node.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    yield from _holder_walk(a.g, holders)
                elif a.type == onnx.AttributeProto.GRAPHS:
                    for g in a.graphs:
                        yield from _holder_walk(g, holders)


def _collect_types(graph: onnx.GraphProto) -> TypeTable:
    """Every typed value of the graph and its subgraphs, by name (names are unique per model)."""
    out: TypeTable = {}
    for g in _walk_graphs(graph):
        for seq in (g.input, g.value_info, g.output):
            for vi in seq:
                t = vi.type  # an unset type reads as an empty one: no value kind either
                if t.WhichOneof("value") is not None:
                    name = vi.name
                    prev = out.get(name)
                    if prev is None or _type_score(t) < _type_score(prev):
                        out[name] = t
    return out


def strip_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy without stored intermediate shapes and with output shapes cleared (dtype kept), each anonymous
    input dim named (``graph.name_anonymous_input_dims``: ``?`` dims stay apart)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    name_anonymous_input_dims(out.graph)
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


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0][:300]


# ---------------------------------------------------------------------------- scoring and merging
def _dims_of(t: onnx.TypeProto) -> list[onnx.TensorShapeProto.Dimension] | None:
    if not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
        return None
    return list(t.tensor_type.shape.dim)


def _dim_unresolved(d: onnx.TensorShapeProto.Dimension, known: frozenset[str] | None = None) -> bool:
    """A dim is resolved when it is a number or an expression in the graph inputs' dim names only
    (without ``known``: when it uses no engine-minted name)."""
    if d.HasField("dim_value"):
        return False
    if not d.HasField("dim_param") or not d.dim_param:
        return True
    names = text_names(d.dim_param)
    if known is None:
        return any(n.startswith("unk__") or _OSI_MINTED.fullmatch(n) for n in names)
    return not names <= known


_OSI_MINTED = re.compile(r"_d[0-9]+")
"""onnx-shape-inference's name for a dim it cannot express."""


def _type_score(t: onnx.TypeProto, known: frozenset[str] | None = None) -> int:
    """Lower is better: 1000 for no shape, 1 per unresolved dim."""
    memo = _SCORES.get()
    if memo is None:
        return _score(t, known)
    key = (t.SerializeToString(), known)
    score = memo.get(key)
    if score is None:
        score = memo[key] = _score(t, known)
    return score


def _score(t: onnx.TypeProto, known: frozenset[str] | None) -> int:
    if not t.HasField("tensor_type"):
        return 0
    tt = t.tensor_type
    if not tt.HasField("shape"):
        return 1000
    return sum(1 for d in tt.shape.dim if not d.HasField("dim_value") and _dim_unresolved(d, known))


_SCORES: contextvars.ContextVar[dict[tuple[bytes, frozenset[str] | None], int] | None] = \
    contextvars.ContextVar("graphcost_type_scores", default=None)
"""While :func:`infer_shapes` runs: each type's score, by the type's serialized bytes (a score is a function
of the bytes and ``known`` alone).

The pass scores every value's type several times (every merge scores both sides of every value, every
unresolved-test every value), and reading a dim out of a protobuf message from Python costs microseconds
while serializing a type costs a third of one; real models repeat a few hundred distinct types. Per type,
on synthetic-10k's 10,001 inferred types: walking the dims 2.2-3.4 us, ``SerializeToString`` 0.35 us
(measured in one process). Keyed by bytes, a type is scored once per distinct type, not once per object
(the memo of the object's id it replaces rescored every new table's objects)."""


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
                names |= text_names(d.dim_param)
    return frozenset(names)


def _still_guarded(guarded: Mapping[str, str], types: TypeTable, known: frozenset[str]) -> list[tuple[str, str]]:
    """The (value, op) pairs of ``guarded`` (outputs whose shape depends on run-time values) whose final type
    still has no shape or a dim the input dims do not express. A static export's guarded Slice inside a Loop
    body, which the specialize pass then resolves from the unrolled trips (MViT's class token), is not one."""
    return [(name, op) for name, op in guarded.items()
            if (t := types.get(name)) is None or _type_score(t, known) > 0]


def _unresolved(graph: onnx.GraphProto, types: TypeTable, names: list[str] | None = None) -> bool:
    """True when some value has no shape or a dim that is not expressed in the inputs' dims."""
    known = _input_dim_names(graph)
    memo = _VERDICTS.get()
    key = (id(types), id(names), known)
    if memo is not None and names is not None:
        hit = memo.get(key)
        if hit is not None and hit[0] is types and hit[1] is names:
            return hit[2]
    verdict = False
    for name in names if names is not None else _tensor_names(graph):
        t = types.get(name)
        if t is None or _type_score(t, known) > 0:  # no shape scores 1000; a type without one (a sequence) 0
            verdict = True
            break
    if memo is not None and names is not None:
        memo[key] = (types, names, verdict)
    return verdict


_VERDICTS: contextvars.ContextVar[dict[tuple[int, int, frozenset[str]], tuple[TypeTable, list[str], bool]] | None] = \
    contextvars.ContextVar("graphcost_unresolved_verdicts", default=None)
"""While :func:`infer_shapes` runs: :func:`_unresolved`'s answer by the table and name list objects (kept, so
their ids stay theirs). The pass asks it of one table up to four times (before specialize, at each symbolic
turn, before binding dims); no table or name list is changed in place once made. synthetic-100k: the second
ask cost 0.08 s, every type serialized again to be scored."""


def _merge(primary: TypeTable, secondary: TypeTable, known: frozenset[str] | None = None) -> TypeTable:
    """Per value, the better-resolved type (scored against the input dims ``known`` when given);
    ties go to ``primary``."""
    out = dict(secondary)
    for name, t in primary.items():
        other = out.get(name)
        if other is None or _type_score(t, known) <= _type_score(other, known):
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


def _check_declared_outputs(graph: onnx.GraphProto, types: TypeTable, warnings: list[ShapeWarning]) -> None:
    """Warn when the file's declared output shape contradicts inference; inference wins."""
    for vi in graph.output:
        found = _contradiction(vi, types)
        if found is None:
            continue
        declared, inferred, axis = found
        if axis is None:
            warnings.append(ShapeWarning(None, f"output {vi.name!r}: declared rank {len(declared)} but inferred "
                                               f"rank {len(inferred)}; using the inferred shape"))
        else:
            warnings.append(ShapeWarning(None, f"output {vi.name!r}: declared dim {axis} = "
                                               f"{declared[axis].dim_value} but inferred {inferred[axis].dim_value}; "
                                               "using the inferred shape"))


def _check_declared_values(graph: onnx.GraphProto, types: TypeTable, warnings: list[ShapeWarning]) -> None:
    """One warning when intermediate shapes the file declares (value_info) contradict inference: a rank or a
    number that differs. Inference wins; a wrong declaration says the exporter is broken (jax2onnx wrote a
    transposed [batch,16,16,8] for a [batch,8,16,16] Relu output and rank 0 for a BatchNormalization's)."""
    wrong: list[str] = []
    for g in _walk_graphs(graph):
        for vi in g.value_info:
            found = _contradiction(vi, types)
            if found is not None:
                declared, inferred, _ = found
                wrong.append(f"{vi.name!r} declared {_shape_text(declared)}, inferred {_shape_text(inferred)}")
    if wrong:
        more = f" and {len(wrong) - 1} more" if len(wrong) > 1 else ""
        warnings.append(ShapeWarning(None, f"the file declares shapes that inference contradicts ({wrong[0]}{more}); "
                                           "the inferred shapes are used"))


Dims = list[onnx.TensorShapeProto.Dimension]


def _contradiction(vi: onnx.ValueInfoProto, types: TypeTable) -> tuple[Dims, Dims, int | None] | None:
    """(declared dims, inferred dims, first axis whose numbers differ) when ``vi``'s declared shape contradicts
    the inferred one; the axis is None when the ranks differ. None when they agree or either is unknown."""
    declared = _dims_of(vi.type)
    t = types.get(vi.name)
    inferred = _dims_of(t) if t is not None else None
    if declared is None or inferred is None:
        return None
    if len(declared) != len(inferred):
        return declared, inferred, None
    for i, (a, b) in enumerate(zip(declared, inferred, strict=True)):
        if a.HasField("dim_value") and b.HasField("dim_value") and a.dim_value != b.dim_value:
            return declared, inferred, i
    return None


def _shape_text(dims: Sequence[onnx.TensorShapeProto.Dimension]) -> str:
    return "[" + ",".join(str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in dims) + "]"


def describe_dim(d: Dim) -> str:
    return to_text(d)
