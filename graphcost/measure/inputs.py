"""Random inputs that a model accepts: right dtype, right shape, and integer values that index validly.

Rules, in order, for each graph input (initializers listed as inputs are skipped):

- **shape**: the input's declared shape, named dims taken from ``binding``; a dim left unbound (including the
  ``unk__<input>_<axis>`` names given to unnamed dims) is an error naming it.
- **floats**: seeded standard normal × ``FLOAT_SCALE`` (small, so that exp/softmax/GELU stay in range).
- **integers** feeding a ``Gather``/``GatherElements`` as indices (directly or through value-preserving views:
  Cast, Reshape, Flatten, (Un)squeeze, Transpose, Expand, Identity): uniform in [0, n) where n is the smallest
  size of a gathered axis (embedding tables: the vocabulary). An axis whose size is unknown counts as 1 (index 0
  is valid for any non-empty axis).
- **integers** whose name says mask (``attention_mask``, ``mask``…): ones.
- **other integers**: uniform in {0, 1} — small, non-negative, valid as a count, a flag or a position.
- **bools**: True.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from graphcost._dims import evaluate
from graphcost.graph import Graph, Node, TensorKind

FLOAT_SCALE = 0.1
"""Standard deviation of float inputs."""

_FLOATS = {"float16": np.float16, "float32": np.float32, "float64": np.float64}
_INTS: dict[str, type[np.integer[Any]]] = {"int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
         "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64}
_VIEWS = frozenset({"Cast", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Expand", "Identity"})
_GATHERS = frozenset({"Gather", "GatherElements"})


def make_inputs(graph: Graph, binding: Mapping[str, int], *, seed: int = 0) -> dict[str, np.ndarray]:
    """One array per graph input, named as the graph names them (see the module docstring for the rules)."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for name in graph.input_names:
        t = graph.tensor(name)
        if t is None or t.kind is TensorKind.PARAMETER:
            continue
        shape = input_shape(graph, name, binding)
        if t.dtype in _FLOATS:
            out[name] = (rng.standard_normal(shape) * FLOAT_SCALE).astype(_FLOATS[t.dtype])
        elif t.dtype in _INTS:
            high = index_bound(graph, name, binding)
            if high is None and "mask" in name.lower():
                out[name] = np.ones(shape, dtype=_INTS[t.dtype])
            else:
                dtype = _INTS[t.dtype]
                high = min(2 if high is None else high, int(np.iinfo(dtype).max) + 1)
                out[name] = rng.integers(0, high, size=shape).astype(dtype)
        elif t.dtype == "bool":
            out[name] = np.ones(shape, dtype=np.bool_)
        else:
            raise ValueError(f"input {name!r}: cannot make {t.dtype} values (supported: float16/32/64, "
                             "integers, bool); pass this input yourself")
    return out


def input_shape(graph: Graph, name: str, binding: Mapping[str, int]) -> tuple[int, ...]:
    """The concrete shape of graph input ``name`` under ``binding``."""
    t = graph.tensor(name)
    if t is None or t.shape is None:
        raise ValueError(f"input {name!r} has no declared shape; pass this input yourself")
    dims: list[int] = []
    for axis, d in enumerate(t.shape):
        try:
            v = evaluate(d, binding)
        except KeyError as e:
            raise ValueError(f"input {name!r} axis {axis}: dim {e.args[0]!r} is unbound "
                             f"(bind it, e.g. {e.args[0]}=1)") from None
        if not float(v).is_integer() or v < 0:
            raise ValueError(f"input {name!r} axis {axis}: dim {d} evaluates to {v}, not a size")
        dims.append(int(v))
    return tuple(dims)


def index_bound(graph: Graph, name: str, binding: Mapping[str, int]) -> int | None:
    """Exclusive upper bound for values of ``name`` used as gather indices; None if it indexes nothing."""
    bounds: list[int] = []
    seen: set[str] = set()
    stack = [name]
    while stack:
        tensor = stack.pop()
        if tensor in seen:
            continue
        seen.add(tensor)
        for node in graph.consumers(tensor):
            if node.op_type in _VIEWS and node.inputs and node.inputs[0] == tensor:
                stack.extend(o for o in node.outputs[:1] if o)
            elif node.op_type in _GATHERS and len(node.inputs) > 1 and node.inputs[1] == tensor:
                bounds.append(_axis_size(graph, node, binding))
    return max(1, min(bounds)) if bounds else None


def _axis_size(graph: Graph, node: Node, binding: Mapping[str, int]) -> int:
    """Size of the axis a gather indexes; 1 when it cannot be known."""
    data = graph.tensor(node.inputs[0])
    if data is None or data.shape is None:
        return 1
    axis = node.attribute("axis")
    axis = 0 if axis is None else int(axis)
    if axis < 0:
        axis += len(data.shape)
    if not 0 <= axis < len(data.shape):
        return 1
    try:
        size = evaluate(data.shape[axis], binding)
    except KeyError:
        return 1
    return int(size) if float(size).is_integer() and size >= 1 else 1


__all__ = ["FLOAT_SCALE", "index_bound", "input_shape", "make_inputs"]
