"""Specialize a model to what is known before it runs: evaluate shape-computing subgraphs, take known If branches.

Why: in a static export every shape-computing subgraph (window partition, computed Pad amounts) depends
only on static shapes and constants, yet inference engines leave many of them unresolved::

    x(1×56×56×96) ─ Shape ─ Gather ─ Div(7) ─ Concat ─┐
                                                       Reshape ─ Transpose ─ Reshape ─ MatMul
    x ────────────────────────────────────────────────┘

Each such value is a few integers, so it is evaluated here exactly with numpy (``_shape_eval``), from
known values only: small inline initializers, ``Constant`` nodes, the caller's ``input_values``, and the
``Shape``/``Size`` of tensors whose type in ``types`` is fully static. Payloads stored outside the
structure (``data_location == EXTERNAL``, which is how the loader leaves every large tensor) are never
read: a value depending on one stays unknown.

What the returned model looks like (a new proto; the input is never changed):

- an evaluated node none of whose outputs is a graph output is dropped, and every value of it that a
  remaining node (or a subgraph, by outer-scope reference) reads becomes an initializer of that name, so
  inference sees a constant where it saw a computation; ``Constant`` nodes stay as they are;
- a graph input given in ``input_values`` becomes an initializer holding that value (it is no longer an
  input: the model is specialized to it);
- an ``If`` whose condition is known is replaced by its taken branch, inlined where the If stood: the
  branch's nodes are named ``<if>/<branch>/<node>`` (the names the costs pass gives body nodes), its values
  keep their names unless one clashes with a name of the rest of the model (then ``<name>__<if>``), and
  each If output becomes the branch's value of that name (or an Identity of it, when the branch returns an
  outer value or returns one value twice). Shapes and costs then follow one branch;
- a ``Loop`` whose trip count is known (and small), whose condition stays true and which has no scan
  outputs is replaced by its body once per iteration (``torch.tensor_split`` exports as such a Loop of
  SequenceInserts: MViT's class token), and a ``SequenceAt`` at a known position of a sequence whose
  elements are known becomes an Identity of that element; only when folding (:func:`specialize`);
- every value of an evaluated and dropped node is stated as value_info with its exact type: the model
  being costed still computes it, and the folded copy no longer does;
- all other nodes keep their names, order and attributes. Subgraphs are swept the same way, with the
  values of the enclosing scopes known (a body's own inputs are not).

One call is one sweep in graph order. Within it, a node that is not evaluated still gets static output
shapes by onnx's own rule for its op (``onnx.shape_inference.infer_node_outputs``) from the static shapes
and known values of its inputs, so a Swin stage's Pad, once its amounts are known, makes the next stage's
``Shape`` evaluable in the same sweep (the static torchvision exports resolve in one sweep). Ops no rule
types (other domains) still need the engine's next inference, so the caller alternates
``infer → specialize → infer`` (:func:`specialize_fully` does it with onnx's inference).

Bounds: no tensor over ``_shape_eval.MAX_ELEMENTS`` elements is read or made, one call evaluates at
most :data:`TOTAL_ELEMENTS` elements in all (later nodes stay as they are), a Loop is unrolled only up to
:data:`UNROLL_TRIPS` iterations and one call writes at most :data:`UNROLL_NODES` unrolled body nodes.
Everything walks lists in graph order, so the same input gives the same output bytes.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx

from graphcost.graph import graph_protos
from graphcost.passes import _shape_eval
from graphcost.passes._shape_eval import MAX_ELEMENTS, NotEvaluable

__all__ = ["TOTAL_ELEMENTS", "UNROLL_NODES", "UNROLL_TRIPS", "Specialization", "onnx_types", "specialize",
           "specialize_for_costs", "specialize_fully", "specialize_model"]

TOTAL_ELEMENTS = 1_000_000
"""Most elements one sweep evaluates in all (outputs summed)."""

_DEFAULT = ("", "ai.onnx")
_UNSEEN = object()
_PLUMBING = frozenset({onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.BOOL})
_SCALARS = 8
"""Stored tensors of other types are known values up to this many elements (weights are larger)."""
_CONTROL = ("If", "Loop", "Scan", "SequenceMap")
_SEQUENCE_OPS = frozenset({"SequenceEmpty", "SequenceConstruct", "SequenceInsert", "SequenceAt", "Identity"})
UNROLL_TRIPS = 64
"""Most iterations of one Loop that a sweep unrolls."""
UNROLL_NODES = 20_000
"""Most body nodes (trips × body size) one sweep writes out by unrolling, all Loops together."""


@dataclass(frozen=True)
class Specialization:
    """What :func:`specialize_model` did, for the report."""

    model: onnx.ModelProto
    fixed_inputs: tuple[str, ...]
    """Graph inputs replaced by the given values."""
    folded: tuple[str, ...]
    """Names of the nodes evaluated and dropped (their values are initializers now)."""
    branches: tuple[tuple[str, str], ...]
    """(If node, branch label) for each If replaced by its taken branch."""
    unrolled: tuple[str, ...] = ()
    """Loops replaced by their unrolled bodies (known trip count, condition always true)."""
    static: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    """The static shape the sweep knew for each value by the end (every graph, bodies included)."""
    elems: Mapping[str, int] = field(default_factory=dict)
    """The element type the sweep knew for each value by the end."""
    limited: bool = False
    """Whether a bound (:data:`TOTAL_ELEMENTS`, :data:`UNROLL_NODES`) kept the sweep from something."""


def specialize(proto: onnx.ModelProto, *, input_values: Mapping[str, np.ndarray] | None = None,
               types: Mapping[str, onnx.TypeProto] | None = None) -> onnx.ModelProto:
    """The model with known values folded and known If branches taken (one sweep; see the module doc)."""
    return specialize_model(proto, input_values=input_values, types=types).model


def specialize_for_costs(proto: onnx.ModelProto, *, input_values: Mapping[str, np.ndarray] | None = None,
                         types: Mapping[str, onnx.TypeProto] | None = None) -> onnx.ModelProto:
    """Only the If branches taken: every other node stays, inputs stay inputs.

    Its node and value names are exactly those of :func:`specialize` on the same arguments, so types
    inferred on the folded model apply by name to this one, whose node list is the one to cost."""
    return specialize_model(proto, input_values=input_values, types=types, fold=False).model


def specialize_model(proto: onnx.ModelProto, *, input_values: Mapping[str, np.ndarray] | None = None,
                     types: Mapping[str, onnx.TypeProto] | None = None, fold: bool = True) -> Specialization:
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    opset = next((int(o.version) for o in out.opset_import if o.domain in _DEFAULT), 1)
    values = _checked_values(out.graph, input_values or {})
    graphs = list(graph_protos(out.graph))  # walked once here: each walk visits every node's attributes
    sweep = _Sweep(opset=opset, types=types or {}, fold=fold, names=_all_names(graphs),
                   defined=_definitions(out.graph, graphs), elems=_elem_types(graphs, types or {}),
                   opsets=list(out.opset_import), ir_version=int(out.ir_version) or onnx.IR_VERSION)
    g = out.graph
    known: dict[str, np.ndarray] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    for vi in g.input:
        s = _static_shape(vi.type)
        if s is not None:
            shapes[vi.name] = s
    fixed: list[str] = []
    for name, arr in values.items():
        known[name] = arr
        shapes[name] = arr.shape
        fixed.append(name)
    if fold and values:
        _fix_inputs(g, values)
    sweep.graph(g, known, shapes, body=False)
    return Specialization(out, tuple(fixed), tuple(sweep.folded), tuple(sweep.branches), tuple(sweep.unrolled),
                          sweep.static, sweep.elems, sweep.limited)


def specialize_fully(proto: onnx.ModelProto, *, input_values: Mapping[str, np.ndarray] | None = None,
                     infer: Callable[[onnx.ModelProto], Mapping[str, onnx.TypeProto]] | None = None,
                     max_rounds: int = 64) -> onnx.ModelProto:
    """``infer → specialize`` until a sweep changes nothing (at most ``max_rounds``); ``infer`` defaults to
    onnx's inference with data propagation. For tests and tools; the shapes pass drives its own rounds."""
    infer = infer or onnx_types
    current = specialize(proto, input_values=input_values, types=infer(proto))
    for _ in range(max_rounds - 1):
        nxt = specialize(current, types=infer(current))
        if nxt == current:
            break
        current = nxt
    return current


def onnx_types(proto: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    """Every value's type by onnx's inference (data propagation on), main graph and subgraphs, by name."""
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, check_type=False, strict_mode=False, data_prop=True)
    except Exception:  # an engine that fails gives no types, which only means fewer Shape nodes evaluate
        return {}
    out: dict[str, onnx.TypeProto] = {}
    for g in graph_protos(inferred.graph):
        for seq in (g.input, g.value_info, g.output):
            for vi in seq:
                if vi.name not in out and vi.HasField("type"):
                    out[vi.name] = vi.type
    return out


# ---------------------------------------------------------------------------- the sweep
@dataclass
class _Sweep:
    opset: int
    types: Mapping[str, onnx.TypeProto]
    fold: bool
    names: set[str]
    """Every value and node name of the model: fresh names avoid these."""
    defined: Counter[str]
    """How often each value name is defined (node output, initializer, graph input) in the whole model."""
    elems: dict[str, int]
    """Element type of each tensor value known so far (a name is one tensor, whatever the scope)."""
    opsets: list[onnx.OperatorSetIdProto]
    ir_version: int
    budget: int = TOTAL_ELEMENTS
    unroll_budget: int = UNROLL_NODES
    folded: list[str] = field(default_factory=list)
    branches: list[tuple[str, str]] = field(default_factory=list)
    unrolled: list[str] = field(default_factory=list)
    static: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """Every graph's static shapes as its sweep ended (:attr:`Specialization.static`)."""
    limited: bool = False
    """Set when a bound refused an evaluation or an unrolling (:attr:`Specialization.limited`)."""
    evaluations: dict[tuple[object, ...], object] = field(default_factory=dict)
    """Outputs (or None: not evaluable) by (op, output count, attributes' bytes, inputs' dtype, shape and
    bytes), a Constant's by ("Constant", attributes' bytes). A static export computes the same few shapes in
    every block: Swin-T legacy's 2,438 evaluations are 493 distinct ones, and a lookup costs a fraction of
    decoding attributes and running the rule. With this memo, :attr:`inferred` and the shared types and
    initializers of ``_state_types`` / ``_drop_evaluated``, one sweep of Swin-T legacy took 0.157 s of CPU
    against 0.247 s (v2: 0.179 against 0.253; MViT-B: 0.103 against 0.156; best of 9, alternating in one
    process, the same output proto asserted)."""
    inferred: dict[tuple[object, ...], list[tuple[tuple[int, ...], int] | None]] = field(default_factory=dict)
    """:meth:`_infer_node`'s result per output slot (static shape, element type) by (op, attributes' bytes,
    output count, inputs' element type, shape and known value): the same rule on the same inputs answers
    the same, and each ``infer_node_outputs`` call builds and parses protos (Swin-T legacy: 317 distinct
    questions in one sweep)."""

    def graph(self, g: onnx.GraphProto, outer: Mapping[str, np.ndarray],
              outer_shapes: Mapping[str, tuple[int, ...]], *, body: bool,
              outer_seqs: Mapping[str, list[str]] | None = None) -> None:
        """Sweep one graph in place (``g`` belongs to the copy being built)."""
        known = dict(outer)
        shapes = dict(outer_shapes)
        for t in g.initializer:
            shapes[t.name] = tuple(int(d) for d in t.dims)
            arr = _inline_value(t)
            if arr is not None:
                known[t.name] = arr
        if body:  # a body's own inputs vary at run time, whatever an outer value of that name says
            for vi in g.input:
                known.pop(vi.name, None)
                shapes.pop(vi.name, None)
        # (node, its position in the graph as given: unnamed Ifs are named by it, as the Graph names them)
        # a deque: inlined branches and unrolled bodies go in at the front; a list's pop(0) is quadratic in the
        # node count (100,000 pops: 1.34 s against 0.017 s on the benchmark machine, loaded; Swin-T's 6,261: 2 ms)
        pending: deque[tuple[onnx.NodeProto, int]] = deque((n, k) for k, n in enumerate(g.node))
        kept: list[onnx.NodeProto] = []
        evaluated: set[int] = set()  # positions in ``kept`` of evaluated nodes
        seqs: dict[str, list[str]] = dict(outer_seqs or {})  # sequence value -> its elements' names
        if body:
            for vi in g.input:
                seqs.pop(vi.name, None)
        while pending:
            node, index = pending.popleft()
            if node.domain in _DEFAULT and node.op_type == "If":
                branch = self._taken(node, known)
                if branch is not None:
                    name = node.name or f"If_{index}"
                    inlined = self._inline(g, node, branch, name, known, shapes)
                    pending.extendleft((n, index) for n in reversed(inlined))
                    continue
            if node.domain in _DEFAULT and node.op_type == "Loop" and self.fold:
                unrolled = self._unroll(g, node, node.name or f"Loop_{index}", known, shapes)
                if unrolled is not None:
                    pending.extendleft((n, index) for n in reversed(unrolled))
                    continue
            if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
                for a in node.attribute:
                    for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                        self.graph(sub, known, shapes, body=True, outer_seqs=seqs)
                kept.append(node)
                continue
            if node.domain in _DEFAULT and node.op_type in _SEQUENCE_OPS:
                node = self._sequence(node, known, seqs)
            outs = self._evaluate(node, known, shapes)
            if outs is not None:
                for name, arr in zip(node.output, outs, strict=False):
                    if name:
                        known[name] = arr
                        shapes[name] = arr.shape
                        self.elems[name] = onnx.helper.np_dtype_to_tensor_dtype(arr.dtype)
                if node.op_type != "Constant":
                    evaluated.add(len(kept))
            else:
                self._infer_node(node, known, shapes)
            kept.append(node)
        if self.fold:
            kept = self._drop_evaluated(g, kept, evaluated, known)
        del g.node[:]
        g.node.extend(kept)
        self.static.update(shapes)

    def _evaluate(self, node: onnx.NodeProto, known: Mapping[str, np.ndarray],
                  shapes: Mapping[str, tuple[int, ...]]) -> list[np.ndarray] | None:
        if node.domain not in _DEFAULT:
            return None
        if self.budget <= 0:
            self.limited = True
            return None
        op = node.op_type
        try:
            if op == "Constant":
                found = self.evaluations.get(("Constant", tuple(a.SerializeToString() for a in node.attribute)),
                                             _UNSEEN)
                if found is _UNSEEN:
                    arr = _constant_value(node)
                    found = None if arr is None else [arr]
                    self.evaluations["Constant", tuple(a.SerializeToString() for a in node.attribute)] = found
                return found  # type: ignore[return-value]
            if op in ("Shape", "Size") and node.input and node.input[0] not in known:
                shape = shapes.get(node.input[0])
                if shape is None:
                    shape = _static_shape(self.types.get(node.input[0]))
                if shape is None:
                    return None
                attrs = _shape_eval.decode_attrs(node)
                return [_shape_eval.shape_values(shape, attrs) if op == "Shape"
                        else np.array(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)]
            if op not in _shape_eval.RULES or op in _CONTROL:
                return None
            ins: list[np.ndarray | None] = []
            for name in node.input:
                if not name:
                    ins.append(None)
                elif name in known:
                    ins.append(known[name])
                else:
                    return None
            key = (op, len(node.output), tuple(a.SerializeToString() for a in node.attribute),
                   tuple(None if x is None else (x.dtype.str, x.shape, x.tobytes()) for x in ins))
            found = self.evaluations.get(key, _UNSEEN)
            if found is _UNSEEN:
                try:
                    attrs = _shape_eval.decode_attrs(node)
                    attrs["_outputs"] = len(node.output)
                    found = _shape_eval.evaluate(op, ins, attrs, self.opset)
                except NotEvaluable:
                    found = None
                self.evaluations[key] = found
            if found is None:
                return None
            outs: list[np.ndarray] = found  # type: ignore[assignment]
        except NotEvaluable:
            return None
        if len(outs) < len([o for o in node.output if o]):
            return None
        size = sum(int(o.size) for o in outs)
        if any(o.size > MAX_ELEMENTS for o in outs):
            return None
        if size > self.budget:
            self.limited = True
            return None
        self.budget -= size
        return outs

    def _drop_evaluated(self, g: onnx.GraphProto, kept: list[onnx.NodeProto], evaluated: set[int],
                        known: Mapping[str, np.ndarray]) -> list[onnx.NodeProto]:
        """Drop evaluated nodes that make no graph output; their values that are still read become initializers."""
        outputs = {vi.name for vi in g.output}
        drop = {k for k in evaluated if not any(o in outputs for o in kept[k].output)}
        if not drop:
            return kept
        dropped_values = {o: k for k in sorted(drop) for o in kept[k].output if o}
        remaining = [n for k, n in enumerate(kept) if k not in drop]
        existing = {t.name for t in g.initializer}
        made: dict[tuple[str, tuple[int, ...], bytes], onnx.TensorProto] = {}  # blocks repeat the same values
        for name in _reads(remaining, g):
            if name in dropped_values and name not in existing and name in known:
                arr = known[name]
                key = (arr.dtype.str, arr.shape, arr.tobytes())
                template = made.get(key)
                if template is None:
                    template = made[key] = onnx.numpy_helper.from_array(arr, name)
                t = g.initializer.add()
                t.CopyFrom(template)
                t.name = name
                existing.add(name)
        for k in sorted(drop):
            self.folded.append(kept[k].name or f"{kept[k].op_type}:{kept[k].output[0]}")
        _state_types(g, [name for name in dropped_values if name in known], known)
        return remaining

    # ------------------------------------------------------------------------ If with a known condition
    def _taken(self, node: onnx.NodeProto, known: Mapping[str, np.ndarray]) -> str | None:
        if not node.input or node.input[0] not in known:
            return None
        cond = known[node.input[0]]
        if cond.size != 1:
            return None
        label = "then_branch" if bool(cond.reshape(-1)[0]) else "else_branch"
        return label if any(a.name == label and a.type == onnx.AttributeProto.GRAPH for a in node.attribute) else None

    def _inline(self, g: onnx.GraphProto, node: onnx.NodeProto, label: str, if_name: str,
                known: dict[str, np.ndarray], shapes: dict[str, tuple[int, ...]]) -> list[onnx.NodeProto]:
        """The taken branch's nodes, renamed for the parent; its initializers move to ``g``."""
        branch = next(a.g for a in node.attribute if a.name == label)
        self.branches.append((if_name, label))
        local = [o for n in branch.node for o in n.output if o] + [t.name for t in branch.initializer]
        local_set = set(local)
        inside = _definitions(branch)
        for a in node.attribute:  # the branch not taken goes away with the If
            if a.type == onnx.AttributeProto.GRAPH and a.name != label:
                inside.update(_definitions(a.g))
        rename: dict[str, str] = {}
        identities: list[tuple[str, str]] = []  # (branch value, If output)
        for k, vi in enumerate(branch.output):
            target = node.output[k] if k < len(node.output) else ""
            if not target:
                continue
            if vi.name in local_set and vi.name not in rename:
                rename[vi.name] = target
            else:
                identities.append((vi.name, target))
        for name in local:
            if name not in rename and self.defined[name] > inside[name]:
                rename[name] = self._fresh(f"{name}__{if_name}")
        self.names.update(rename.values())
        self.defined.update(rename.values())
        for t in branch.initializer:
            moved = onnx.TensorProto()
            moved.CopyFrom(t)
            moved.name = rename.get(t.name, t.name)
            self._add_initializer(g, moved, known, shapes)
        prefix = f"{if_name}/{label}/"
        nodes: list[onnx.NodeProto] = []
        for j, n in enumerate(branch.node):
            m = onnx.NodeProto()
            m.CopyFrom(n)
            m.name = prefix + (n.name or f"{n.op_type}_{j}")
            _rename_values(m, rename)
            nodes.append(m)
        for k, (src, target) in enumerate(identities):
            nodes.append(onnx.helper.make_node("Identity", [rename.get(src, src)], [target],
                                               name=f"{prefix}output_{k}"))
        return nodes

    def _add_initializer(self, g: onnx.GraphProto, t: onnx.TensorProto, known: dict[str, np.ndarray],
                         shapes: dict[str, tuple[int, ...]]) -> None:
        """Add ``t`` to ``g`` and make it known to the rest of this sweep (inlined branches, unrolled bodies)."""
        g.initializer.append(t)
        shapes[t.name] = tuple(int(d) for d in t.dims)
        self.elems[t.name] = int(t.data_type)
        arr = _inline_value(t)
        if arr is not None:
            known[t.name] = arr

    # ------------------------------------------------------------------------ static shapes within one sweep
    def _infer_node(self, node: onnx.NodeProto, known: Mapping[str, np.ndarray],
                    shapes: dict[str, tuple[int, ...]]) -> None:
        """Static output shapes of a node that is not evaluated, by onnx's own rule for the op, from the
        static shapes and known values of its inputs (so a ``Shape`` further on evaluates in this sweep,
        not after the next whole-model inference: a Swin stage's Pad feeds the next stage's Pad amounts).

        Only for default-domain ops without subgraphs whose every input has a static shape and a known
        element type; outputs already static in ``types`` are not asked again. A rule that fails or
        leaves a dim open simply adds nothing."""
        if node.domain not in _DEFAULT or not node.output:
            return
        if all(o in shapes or _static_shape(self.types.get(o)) is not None for o in node.output if o):
            for o in node.output:
                if o and o not in shapes:
                    declared = self.types[o]
                    shapes[o] = _static_shape(declared) or ()
                    self.elems.setdefault(o, declared.tensor_type.elem_type)
            return
        given: list[tuple[str, int, tuple[int, ...], np.ndarray | None]] = []
        for name in node.input:
            if not name:
                continue
            shape = shapes.get(name)
            if shape is None:
                shape = _static_shape(self.types.get(name))
            elem = self.elems.get(name)
            if shape is None or not elem:
                return
            given.append((name, elem, shape, known.get(name)))
        key = (node.op_type, len(node.output), tuple(a.SerializeToString() for a in node.attribute),
               tuple(i for i, name in enumerate(node.input) if not name),
               tuple((elem, shape, None if arr is None else (arr.dtype.str, arr.shape, arr.tobytes()))
                     for _, elem, shape, arr in given))
        results = self.inferred.get(key)
        if results is None:
            results = self.inferred[key] = self._rule_outputs(node, given)
        for name, result in zip(node.output, results, strict=False):
            if result is None or not name or name in shapes:
                continue
            shapes[name], self.elems[name] = result

    def _rule_outputs(self, node: onnx.NodeProto, given: list[tuple[str, int, tuple[int, ...], np.ndarray | None]]
                      ) -> list[tuple[tuple[int, ...], int] | None]:
        """(static shape, element type) of each output by onnx's rule for the op, None where it gives none."""
        input_types: dict[str, onnx.TypeProto] = {}
        input_data: dict[str, onnx.TensorProto] = {}
        for name, elem, shape, arr in given:
            input_types[name] = onnx.helper.make_tensor_type_proto(elem, shape)
            if arr is not None:
                input_data[name] = onnx.numpy_helper.from_array(arr, name)
        try:
            schema = onnx.defs.get_schema(node.op_type, self.opset, "")
            out = onnx.shape_inference.infer_node_outputs(schema, node, input_types, input_data,
                                                          opset_imports=self.opsets, ir_version=self.ir_version)
        except Exception:  # no schema, or the op's rule refused these inputs: nothing learned
            return [None] * len(node.output)
        results: list[tuple[tuple[int, ...], int] | None] = []
        for name in node.output:
            t = out.get(name)
            static = _static_shape(t)
            results.append(None if t is None or static is None else (static, t.tensor_type.elem_type))
        return results

    # ------------------------------------------------------------------------ sequences of known elements
    def _sequence(self, node: onnx.NodeProto, known: Mapping[str, np.ndarray],
                  seqs: dict[str, list[str]]) -> onnx.NodeProto:
        """Track which tensors a sequence holds; a ``SequenceAt`` of a tracked sequence at a known position
        becomes an ``Identity`` of that element (when folding), so its shape is the element's.

        ``torch.tensor_split`` exports as SequenceEmpty → Loop(SequenceInsert of Slices) → SequenceAt;
        once the Loop is unrolled every element is a named tensor."""
        op = node.op_type
        out = node.output[0] if node.output else ""
        ins = list(node.input)
        if op == "SequenceEmpty" and out:
            seqs[out] = []
        elif op == "SequenceConstruct" and out and all(ins):
            seqs[out] = ins
        elif op == "Identity" and out and ins and ins[0] in seqs:
            seqs[out] = list(seqs[ins[0]])
        elif op == "SequenceInsert" and out and len(ins) >= 2 and ins[0] in seqs and ins[1]:
            items = list(seqs[ins[0]])
            pos = _position(known, ins[2], len(items), insert=True) if len(ins) > 2 and ins[2] else len(items)
            if pos is not None:
                seqs[out] = [*items[:pos], ins[1], *items[pos:]]
        elif op == "SequenceAt" and out and len(ins) == 2 and ins[0] in seqs and self.fold:
            items = seqs[ins[0]]
            pos = _position(known, ins[1], len(items), insert=False)
            if pos is not None:
                return onnx.helper.make_node("Identity", [items[pos]], [out], name=node.name)
        return node

    # ------------------------------------------------------------------------ Loop with a known trip count
    def _unroll(self, g: onnx.GraphProto, node: onnx.NodeProto, loop_name: str, known: dict[str, np.ndarray],
                shapes: dict[str, tuple[int, ...]]) -> list[onnx.NodeProto] | None:
        """The body's nodes once per iteration, or None when the Loop is not unrolled.

        Unrolled: a trip count known and at most :data:`UNROLL_TRIPS`, a condition input absent or known
        true, a body that passes its condition through unchanged (or returns a constant true), no scan
        outputs, and at most :data:`UNROLL_NODES` body nodes in one sweep. Iteration ``k``'s values are
        named ``<name>__<loop>_<k>`` (with one iteration the body's names stay, unless they clash), the
        iteration number is an initializer, and each Loop output is an Identity of the last carried value."""
        body = next((a.g for a in node.attribute if a.name == "body" and a.type == onnx.AttributeProto.GRAPH), None)
        if body is None or not node.input or node.input[0] not in known or known[node.input[0]].size != 1:
            return None
        trips = int(known[node.input[0]].reshape(-1)[0])
        carried = list(node.input[2:])
        if (len(body.input) != 2 + len(carried) or len(body.output) != 1 + len(carried)
                or len(node.output) != len(carried) or not all(carried)):
            return None
        cond = node.input[1] if len(node.input) > 1 else ""
        if cond and not (cond in known and known[cond].size == 1 and bool(known[cond].reshape(-1)[0])):
            return None
        size = trips * len(body.node)
        if size > self.unroll_budget:
            self.limited = True
        if not 0 <= trips <= UNROLL_TRIPS or size > self.unroll_budget or not _keeps_going(body, known):
            return None
        self.unroll_budget -= size
        self.unrolled.append(loop_name)
        local = [o for n in body.node for o in n.output if o] + [t.name for t in body.initializer]
        inside = _definitions(body)
        nodes: list[onnx.NodeProto] = []
        for k in range(trips):
            rename = {vi.name: v for vi, v in zip(body.input[2:], carried, strict=True)}
            counter = self._fresh(f"{loop_name}/iteration_{k}")
            self.names.add(counter)
            self._add_initializer(g, onnx.numpy_helper.from_array(np.array(k, dtype=np.int64), counter),
                                  known, shapes)
            rename[body.input[0].name] = counter
            true = self._fresh(f"{loop_name}/cond_{k}")
            self.names.add(true)
            self._add_initializer(g, onnx.numpy_helper.from_array(np.array(True), true), known, shapes)
            rename[body.input[1].name] = true
            for name in local:
                if trips > 1 or self.defined[name] > inside[name]:
                    rename[name] = self._fresh(f"{name}__{loop_name}_{k}")
                    self.names.add(rename[name])
            self.defined.update(v for key, v in rename.items() if key in local)
            for t in body.initializer:
                moved = onnx.TensorProto()
                moved.CopyFrom(t)
                moved.name = rename.get(t.name, t.name)
                self._add_initializer(g, moved, known, shapes)
            for j, n in enumerate(body.node):
                m = onnx.NodeProto()
                m.CopyFrom(n)
                m.name = f"{loop_name}/iteration_{k}/{n.name or f'{n.op_type}_{j}'}"
                _rename_values(m, rename)
                nodes.append(m)
            carried = [rename.get(vi.name, vi.name) for vi in body.output[1:]]
        for j, (src, target) in enumerate(zip(carried, node.output, strict=True)):
            if target:
                nodes.append(onnx.helper.make_node("Identity", [src], [target], name=f"{loop_name}/output_{j}"))
        return nodes

    def _fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.names:
            k += 1
            name = f"{base}_{k}"
        return name


def _rename_values(node: onnx.NodeProto, rename: Mapping[str, str]) -> None:
    """Rename references in a node and, for outer-scope reads, in its subgraphs."""
    if not rename:
        return
    for i, name in enumerate(node.input):
        if name in rename:
            node.input[i] = rename[name]
    for i, name in enumerate(node.output):
        if name in rename:
            node.output[i] = rename[name]
    for a in node.attribute:
        for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else
                    list(a.graphs) if a.type == onnx.AttributeProto.GRAPHS else []):
            for inner in sub.node:
                _rename_values(inner, rename)
            for vi in sub.output:
                if vi.name in rename:
                    vi.name = rename[vi.name]


# ---------------------------------------------------------------------------- helpers
def _checked_values(g: onnx.GraphProto, values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The given input values as arrays of each input's declared type; ValueError naming the input otherwise."""
    inputs = {vi.name: vi for vi in g.input}
    out: dict[str, np.ndarray] = {}
    for name in sorted(values):
        vi = inputs.get(name)
        if vi is None:
            raise ValueError(f"input value for {name!r}: the model has no graph input of that name "
                             f"(inputs: {', '.join(sorted(inputs)) or 'none'})")
        tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
        if tt is None or tt.elem_type in (0, onnx.TensorProto.STRING):
            raise ValueError(f"input value for {name!r}: the input is not a numeric tensor")
        arr = np.asarray(values[name])
        if arr.size > MAX_ELEMENTS:
            raise ValueError(f"input value for {name!r}: {arr.size} elements, more than the {MAX_ELEMENTS} allowed")
        try:
            arr = arr.astype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type))
        except (TypeError, ValueError) as e:
            raise ValueError(f"input value for {name!r}: cannot be read as the input's type ({e})") from None
        if tt.HasField("shape"):
            declared = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
            if arr.ndim == 0 and len(declared) == 1 and declared[0] in (None, 1):
                arr = arr.reshape(1)  # a scalar given for a [1] input
            if len(declared) != arr.ndim or any(d is not None and d != s for d, s in zip(declared, arr.shape,
                                                                                        strict=True)):
                shown = "x".join("?" if d is None else str(d) for d in declared) or "scalar"
                raise ValueError(f"input value for {name!r}: shape {list(arr.shape)} does not fit the input's "
                                 f"declared shape {shown}")
        out[name] = arr
    return out


def _fix_inputs(g: onnx.GraphProto, values: Mapping[str, np.ndarray]) -> None:
    """Fixed inputs become initializers (replacing an IR<4 default of the same name)."""
    kept = [vi for vi in g.input if vi.name not in values]
    del g.input[:]
    g.input.extend(kept)
    inits = [t for t in g.initializer if t.name not in values]
    del g.initializer[:]
    g.initializer.extend(inits)
    for name in sorted(values):
        g.initializer.append(onnx.numpy_helper.from_array(values[name], name))


def _state_types(g: onnx.GraphProto, names: list[str], known: Mapping[str, np.ndarray]) -> None:
    """Write each folded value's exact type as value_info: the model being costed still computes these
    values (the folded copy only feeds types), and inference of the folded copy sees initializers or
    nothing where they were, so it would state no type for them."""
    stated = set(names)
    kept = [vi for vi in g.value_info if vi.name not in stated]
    del g.value_info[:]
    g.value_info.extend(kept)
    made: dict[tuple[str, tuple[int, ...]], onnx.TypeProto] = {}  # a few distinct types for thousands of values
    for name in names:
        arr = known[name]
        key = (arr.dtype.str, arr.shape)
        t = made.get(key)
        if t is None:
            t = made[key] = onnx.helper.make_tensor_type_proto(onnx.helper.np_dtype_to_tensor_dtype(arr.dtype),
                                                               list(arr.shape))
        vi = g.value_info.add()
        vi.name = name
        vi.type.CopyFrom(t)


def _position(known: Mapping[str, np.ndarray], name: str, length: int, *, insert: bool) -> int | None:
    """A known sequence position as a non-negative index, or None: ``[-n, n-1]`` for SequenceAt, and
    ``[-n, n]`` for SequenceInsert (``n`` appends), as the ONNX spec says."""
    arr = known.get(name)
    if arr is None or arr.size != 1 or arr.dtype.kind not in "iu":
        return None
    pos = int(arr.reshape(-1)[0])
    pos = pos + length if pos < 0 else pos
    return pos if 0 <= pos < length + int(insert) else None


def _keeps_going(body: onnx.GraphProto, known: Mapping[str, np.ndarray]) -> bool:
    """Whether a Loop body's condition output is always true given a true condition input: the input
    itself, or an Identity of it or of a known true outer value (torch's export), or a constant true."""
    def true(name: str) -> bool:
        return name == body.input[1].name or (name in known and known[name].size == 1
                                              and bool(known[name].reshape(-1)[0]))

    out = body.output[0].name
    producer = next((n for n in body.node if out in n.output), None)
    if producer is None:
        return true(out) and out not in {vi.name for vi in body.input[2:]}
    if producer.domain not in _DEFAULT:
        return False
    if producer.op_type == "Identity":
        return len(producer.input) == 1 and true(producer.input[0])
    if producer.op_type == "Constant":
        value = _constant_value(producer)
        return value is not None and value.size == 1 and bool(value.reshape(-1)[0])
    return False


def _elem_types(graphs: list[onnx.GraphProto], types: Mapping[str, onnx.TypeProto]) -> dict[str, int]:
    """Element type of every tensor the model (``graphs``: its graph and subgraphs) or ``types`` states one for."""
    out: dict[str, int] = {name: t.tensor_type.elem_type for name, t in types.items()
                           if t.HasField("tensor_type") and t.tensor_type.elem_type}
    for sub in graphs:
        for seq in (sub.input, sub.value_info, sub.output):
            for vi in seq:
                if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
                    out.setdefault(vi.name, vi.type.tensor_type.elem_type)
        for t in sub.initializer:
            out[t.name] = int(t.data_type)
    return out


def _static_shape(t: onnx.TypeProto | None) -> tuple[int, ...] | None:
    if t is None or not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
        return None
    dims: list[int] = []
    for d in t.tensor_type.shape.dim:
        if not d.HasField("dim_value") or d.dim_value < 0:
            return None
        dims.append(int(d.dim_value))
    return tuple(dims)


def _numel(dims: object) -> int:
    n = 1
    for d in dims:  # type: ignore[attr-defined]
        n *= int(d)
    return n


def _inline_value(t: onnx.TensorProto) -> np.ndarray | None:
    """A stored tensor's value when it is shape plumbing, inline and small; never reads external data.

    Plumbing is what ``graph.py`` calls it: int64, int32 and bool tensors, and scalars of any type (an
    epsilon, a scale). Other tensors are weights: a node over them does real work that must stay costed
    (a Cast or Transpose of a weight), so they are never known values here."""
    if t.data_location == onnx.TensorProto.EXTERNAL or t.external_data or _numel(t.dims) > MAX_ELEMENTS:
        return None
    if t.data_type not in _PLUMBING and _numel(t.dims) > _SCALARS:
        return None
    if t.data_type in (onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED):
        return None
    try:
        return onnx.numpy_helper.to_array(t)
    except Exception:  # a malformed payload is simply not a known value
        return None


def _constant_value(node: onnx.NodeProto) -> np.ndarray | None:
    for a in node.attribute:
        if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
            return _inline_value(a.t)
        if a.name == "value_int":
            return np.array(a.i, dtype=np.int64)
        if a.name == "value_ints":
            return np.array(list(a.ints), dtype=np.int64) if len(a.ints) <= MAX_ELEMENTS else None
        if a.name == "value_float":
            return np.array(a.f, dtype=np.float32)
        if a.name == "value_floats":
            return np.array(list(a.floats), dtype=np.float32) if len(a.floats) <= _SCALARS else None
    return None


def _all_names(graphs: list[onnx.GraphProto]) -> set[str]:
    """Every value and node name of ``graphs`` (a model's graph and its subgraphs)."""
    names: set[str] = set()
    for sub in graphs:
        names.update(vi.name for vi in sub.input)
        names.update(vi.name for vi in sub.output)
        names.update(t.name for t in sub.initializer)
        for n in sub.node:
            names.update(n.input)
            names.update(n.output)
            if n.name:
                names.add(n.name)
    names.discard("")
    return names


def _definitions(g: onnx.GraphProto, graphs: list[onnx.GraphProto] | None = None) -> Counter[str]:
    """How often each value name is defined in ``g`` and its subgraphs (``graphs``, when the caller has them)."""
    out: Counter[str] = Counter()
    for sub in graphs if graphs is not None else graph_protos(g):
        out.update(vi.name for vi in sub.input)
        out.update(t.name for t in sub.initializer)
        out.update(o for n in sub.node for o in n.output if o)
    return out


def _reads(nodes: list[onnx.NodeProto], g: onnx.GraphProto) -> list[str]:
    """Names the nodes read, their subgraphs included (outer-scope reads), and the graph's outputs, in order."""
    out: list[str] = []
    for n in nodes:
        out.extend(n.input)
        for a in n.attribute:
            for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else
                        list(a.graphs) if a.type == onnx.AttributeProto.GRAPHS else []):
                for inner in graph_protos(sub):
                    for m in inner.node:
                        out.extend(m.input)
                    out.extend(vi.name for vi in inner.output)
    out.extend(vi.name for vi in g.output)
    return out
