"""The front door: load → validate → shapes → costs → binding, once, for the report and every command.

``Analysis.of(model, dims=, input_shapes=, input_values=)`` is where every command that takes a model starts
(``analyze``, ``fusion``, ``diff``, ``audit``, ``fold``, ``bench``, ``gap``): one place turns the caller's dims,
input shapes and input values into a typed graph with costs and a :class:`~graphcost.binding.Binding`, so each
command binds dims the same way and fails with the same sentence. What comes after (liveness, roofline, fusion,
the report) starts from the frozen result.

Each pass runs inside :func:`stage`: an unexpected exception from it (a bug, or input no check foresaw) reaches
the caller as one :class:`PassError` line naming the pass, and the node when the error knows it, chained to the
original (``GRAPHCOST_DEBUG=1`` lets the original through untouched, for its traceback). A ValueError is already a
sentence written for the user and passes through as it is.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from graphcost._dims import Dim, free_names
from graphcost._gc import release_heap
from graphcost.binding import (
    DEFAULT_DIM_VALUE,
    Binding,
    UnboundDims,
    check_names,
    defaults_break,
    dim_keys,
    sizes_the_model_states,
    sizes_the_ops_fix,
)
from graphcost.graph import Graph
from graphcost.load import Model, load
from graphcost.passes.costs import CostResult, count_costs
from graphcost.passes.shapes import ShapeResult, infer_shapes, with_input_shapes
from graphcost.passes.specialize import onnx_types, specialize_for_costs
from graphcost.passes.validate import Validation, check_binding, raise_refusals, validate

MAX_INPUT_VALUE_ELEMENTS = 1024
"""An input value is a scalar or a small tensor (a sample rate, a target shape), never data."""

_VALUE_KINDS = "biuf"  # bool, signed and unsigned integers, floats


class PassError(ValueError):
    """An unexpected failure inside one pass, as one line: ``PASS: node 'X' (Op): problem`` (node when known)."""


@contextlib.contextmanager
def stage(name: str, graph: Graph | None = None) -> Iterator[None]:
    """Run one pass; turn an unexpected exception into a :class:`PassError` naming the pass (and node). After a
    pass on ``graph``, the heap it freed goes back to the OS (:func:`release_heap`, large graphs only)."""
    try:
        yield
        if graph is not None:
            release_heap(len(graph))
    except ValueError:
        raise  # the pass's own sentence for the user (InvalidModel, a bad dim...), already one line
    except Exception as e:
        if os.environ.get("GRAPHCOST_DEBUG"):
            raise
        raise PassError(f"{name}: {_node_context(e, graph)}{_problem(e)}") from e


def _node_context(e: BaseException, graph: Graph | None) -> str:
    """``node 'X' (Op): `` when the exception names a node of the graph (an attribute or a KeyError's key)."""
    name = getattr(e, "node", None)
    if name is None and isinstance(e, KeyError) and e.args and isinstance(e.args[0], str):
        name = e.args[0]
    if not isinstance(name, str) or graph is None:
        return ""
    try:
        node = graph.node(name)
    except KeyError:
        return ""
    return f"node {node.name!r} ({node.op_type}): "


def _problem(e: BaseException) -> str:
    text = str(e).strip()
    first = text.splitlines()[0] if text else "no message"
    return f"internal error ({type(e).__name__}: {first}); please report it with the model (GRAPHCOST_DEBUG=1 " \
           "shows the traceback)"


@dataclass(frozen=True)
class Analysis:
    """A model with its shapes, costs and static binding: what the report and every command start from."""

    model: Model
    validation: Validation
    shapes: ShapeResult
    costs: CostResult
    dims: frozenset[str]
    """Every dim the numbers depend on (:func:`all_dims`)."""
    binding: Binding
    """The static-analysis binding (unbound dims at ``DEFAULT_DIM_VALUE``)."""
    input_shapes: Mapping[str, tuple[int | str, ...]] = field(default_factory=dict)
    input_values: Mapping[str, np.ndarray] = field(default_factory=dict)
    ignored_dims: tuple[str, ...] = ()
    """Dims the caller bound that this model does not have (``unknown_dims="ignore"``: audit, diff, gap)."""
    ignored_inputs: tuple[str, ...] = ()
    """Inputs the caller gave shapes or values for that this model does not have (``unknown_dims="ignore"``)."""

    @property
    def graph(self) -> Graph:
        return self.shapes.graph

    @property
    def input_dims(self) -> tuple[str, ...]:
        """The graph inputs' named dims (sorted): the sizes a run's input arrays need."""
        return self.shapes.input_dims

    @classmethod
    def of(cls, model: Model | str | os.PathLike[str] | bytes | onnx.ModelProto, *,
           dims: Mapping[str, int] | None = None,
           input_shapes: Mapping[str, Sequence[int | str]] | None = None,
           input_values: Mapping[str, Any] | None = None,
           unknown_dims: str = "refuse") -> Analysis:
        """Load (unless given a Model), validate, infer shapes, count costs and bind the dims.

        ``dims`` binds named dims; a name the model does not have raises :class:`~graphcost.binding.UnknownDim`
        (``unknown_dims="ignore"`` leaves it out instead and lists it in ``ignored_dims``: an audit's dims apply
        to the models that have them; input shapes and values for inputs the model lacks are left out too, in
        ``ignored_inputs``). ``input_shapes`` fixes whole input shapes; ``input_values`` gives constant
        inputs (scalars, small int tensors) to shape inference, so shapes computed from them resolve.
        """
        if unknown_dims not in ("refuse", "ignore"):
            raise ValueError(f"unknown_dims must be 'refuse' or 'ignore', got {unknown_dims!r}")
        m = model if isinstance(model, Model) else load(model)
        shapes_given = {k: tuple(v) for k, v in (input_shapes or {}).items()}
        values_given = dict(input_values or {})
        ignored_inputs: tuple[str, ...] = ()
        if unknown_dims == "ignore":  # an audit's or a diff's inputs apply to the models that have them
            names = {vi.name for vi in m.proto.graph.input}
            ignored_inputs = tuple(dict.fromkeys(k for k in (*shapes_given, *values_given) if k not in names))
            shapes_given = {k: v for k, v in shapes_given.items() if k in names}
            values_given = {k: v for k, v in values_given.items() if k in names}
        with stage("validate"):
            checked = validate(m)
            raise_refusals(checked, m.path)
        values = input_arrays(m.proto, values_given)
        m = _specialized(m, values)
        given = dim_keys(dims)  # the model's own spelling of a dim binds it too (DynamicDimension.0)
        with stage("shapes"):
            shapes = infer_shapes(m, input_shapes=shapes_given or None, dims=given or None, input_values=values or None)
        graph = shapes.graph
        with stage("costs", graph):
            costs = count_costs(graph)
            model_dims = frozenset(all_dims(graph, costs))
        ignored: tuple[str, ...] = ()
        if unknown_dims == "ignore":
            ignored = tuple(d for d in given if d not in model_dims)
            given = {k: v for k, v in given.items() if k in model_dims}
        fixed = sizes_the_ops_fix(graph) if model_dims else {}  # a static model has no name to fix
        binding = Binding.static(model_dims, given, fixed)
        if model_dims:
            with stage("validate", graph):
                given_inputs = set(shapes.input_dims) - set(binding.defaulted)
                checked_dims = check_binding(graph, binding.values, given_inputs)
                _refuse_defaults(checked_dims, binding)
                raise_refusals(checked_dims, m.path)
        return cls(m, checked, shapes, costs, model_dims, binding, shapes_given, values, ignored, ignored_inputs)

    def run_binding(self, sizes: Mapping[str, int] | None = None) -> Binding:
        """The binding for running the model (``fold``, ``bench``, ``gap``): every input dim a concrete size.

        The user's dims, then ``sizes`` (sizes the caller knows, e.g. a reference model's example inputs), then
        sizes the model states (declared outputs, ``imgsz`` metadata), then ``DEFAULT_DIM_VALUE`` where the
        model's shapes still agree at it; otherwise :class:`~graphcost.binding.UnboundDims` names the dims to
        bind. See ``graphcost/binding.py``.
        """
        base = self.binding
        extra = {k: int(v) for k, v in (sizes or {}).items() if k in self.dims and k not in base.user}
        if extra:
            base = Binding({**base.values, **extra}, (*base.user, *extra),
                           tuple(d for d in base.defaulted if d not in extra), base.taken)
        needed = self.input_dims
        stated = sizes_the_model_states(self.model.proto, self._inferred_outputs())
        known = {d: base.values[d] for d in needed if d in base.user}
        known.update({d: v for d, (v, _) in stated.items() if d in needed and d not in known})
        candidates = [d for d in needed if d not in known]
        broken, why = defaults_break(with_input_shapes(self.model.proto, self.input_shapes), known, candidates)
        out = base.for_run(needed, stated, broken, why)
        if out.taken:
            with stage("validate", self.graph):
                raise_refusals(check_binding(self.graph, out.values, set(needed) - set(out.defaulted)),
                               self.model.path)
        return out

    def _inferred_outputs(self) -> dict[str, list[int | str | None]]:
        out: dict[str, list[int | str | None]] = {}
        for name in self.graph.output_names:
            t = self.graph.tensor(name)
            if t is not None and t.shape is not None:
                out[name] = [_bare(d) for d in t.shape]
        return out



def _refuse_defaults(checked: Validation, binding: Binding) -> None:
    """A dim that is no size only because unbound dims took the default (a VALID 3x3 Conv after a stride-2 one
    is ``ceiling(H/2) - 2``: -1 at H = 1) is a binding to ask for, not an invalid model: UnboundDims names them."""
    refusals = checked.refusals
    defaulted = sorted(refusals[0].dims & set(binding.defaulted)) if refusals else []
    if defaulted:  # the first refusal decides, as raise_refusals' would
        more = f" (and {len(refusals) - 1} more)" if len(refusals) > 1 else ""
        raise UnboundDims(defaulted, f"each unbound dim is taken as {DEFAULT_DIM_VALUE}, and then "
                                     f"{refusals[0].text()}{more}")


def _bare(d: Dim) -> int | str | None:
    """A dim as a number, the name of a bare named dim, or None for a formula."""
    if isinstance(d, int):
        return d
    return str(d) if getattr(d, "is_Symbol", False) else None


def all_dims(graph: Graph, costs: CostResult) -> set[str]:
    """Every dim name the numbers depend on: costs, trip counts, and the shapes of every tensor."""
    names: set[str] = set()
    for c in costs.nodes:
        for v in (c.flops, c.macs, c.bytes_read, c.bytes_written, c.multiplier):
            if v is not None and not isinstance(v, int):
                names |= free_names(v)
    for g in graph.walk():
        for t in g.tensors().values():
            if t.shape is not None:
                for d in t.shape:
                    if not isinstance(d, int):
                        names |= free_names(d)
    return names


# ------------------------------------------------------------------------------------------------ input values
def input_arrays(proto: onnx.ModelProto, values: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """``values`` as arrays of each graph input's own element type and rank.

    A value is a scalar or a short list of numbers (at most ``MAX_INPUT_VALUE_ELEMENTS``); it takes the input's
    declared element type (bool, an integer or a float type) and is shaped to its declared rank: a rank-0 input
    takes a scalar, a rank-1 input a list (a scalar becomes one element), a higher rank a list whose length is the
    product of its declared sizes. Raises ValueError naming the input otherwise.
    """
    inits = {t.name for t in proto.graph.initializer}
    inputs = {vi.name: vi for vi in proto.graph.input if vi.name not in inits}
    out: dict[str, np.ndarray] = {}
    for name, value in values.items():
        vi = inputs.get(name)
        if vi is None:
            raise ValueError(f"input value {name!r}: not a graph input (inputs: {', '.join(inputs) or 'none'})")
        if not vi.type.HasField("tensor_type"):
            raise ValueError(f"input value {name!r}: the input is not a tensor")
        tt = vi.type.tensor_type
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)) if tt.elem_type else None
        if dtype is None or dtype.kind not in _VALUE_KINDS:
            raise ValueError(f"input value {name!r}: the input's element type is "
                             f"{'not declared' if dtype is None else dtype}; only bool, integer and float inputs "
                             "take a value")
        raw = np.asarray(value)
        if raw.size > MAX_INPUT_VALUE_ELEMENTS or raw.dtype.kind not in _VALUE_KINDS:
            raise ValueError(f"input value {name!r}: expected a scalar or at most {MAX_INPUT_VALUE_ELEMENTS} numbers")
        try:
            arr = raw.astype(dtype)
        except (OverflowError, ValueError):
            raise ValueError(f"input value {name!r}: does not fit the input's type {dtype}") from None
        if not np.array_equal(arr.astype(raw.dtype), raw):
            raise ValueError(f"input value {name!r}: {raw.tolist()} is not a {dtype} value")
        out[name] = _shaped(name, arr, tt)
    return out


def _shaped(name: str, arr: np.ndarray, tt: onnx.TypeProto.Tensor) -> np.ndarray:
    if not tt.HasField("shape"):
        return arr
    dims = tt.shape.dim
    if len(dims) == 0:
        if arr.size != 1:
            raise ValueError(f"input value {name!r}: the input is a scalar, got {arr.size} numbers")
        return arr.reshape(())
    if len(dims) == 1:
        flat = arr.reshape(-1)
        if dims[0].HasField("dim_value") and dims[0].dim_value != flat.size:
            raise ValueError(f"input value {name!r}: the input has {dims[0].dim_value} elements, got {flat.size}")
        return flat
    sizes = [d.dim_value if d.HasField("dim_value") else None for d in dims]
    if any(s is None for s in sizes) or int(np.prod(sizes)) != arr.size:  # type: ignore[arg-type]
        raise ValueError(f"input value {name!r}: the input has rank {len(dims)}; give a scalar or a list for a "
                         "rank-0 or rank-1 input, or exactly as many numbers as its static shape holds")
    return arr.reshape(sizes)  # type: ignore[arg-type]


def _specialized(m: Model, values: Mapping[str, np.ndarray]) -> Model:
    """With input values: the model whose node list is the one to cost (``passes.specialize.specialize_for_costs``:
    an If whose condition the values decide is replaced by its taken branch; inputs stay inputs)."""
    if not values:
        return m
    with stage("specialize"):
        proto = specialize_for_costs(m.proto, input_values=dict(values), types=onnx_types(m.proto))
    return Model(proto, m.path, m.base_dir)


def check_dims(dims: Mapping[str, int], analyses: Sequence[Analysis]) -> None:
    """Refuse a dim none of ``analyses`` has (``diff``: each model ignores the dims it lacks, but a dim neither
    has is a typo)."""
    known = set().union(*(a.dims for a in analyses)) if analyses else set()
    check_names(dim_keys(dims), known, owner="models A and B" if len(analyses) > 1 else "the model")


__all__ = ["Analysis", "PassError", "all_dims", "check_dims", "input_arrays", "stage"]
