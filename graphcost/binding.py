"""Which size each dim takes: the one place that decides it, for every command.

A model's numbers depend on named dims (``batch``, ``seq``, and the names inference gives sizes no input dim
expresses). A :class:`Binding` records the value each takes and why:

* **user** — the caller bound it (``dims=``, ``--dim``);
* **taken** — an op's contract fixes it (a KV cache's last axis is the attention's head size, a Concat's other
  axes match: :func:`sizes_the_ops_fix`, for every command), or a run needs a concrete size and the model states
  it (see :func:`sizes_the_model_states`);
* **defaulted** — nobody said: ``DEFAULT_DIM_VALUE``, and the report or the command says so.

Two rules use it:

* **static analysis** (``analyze``, ``fusion``, ``diff``, ``audit``; :meth:`Binding.static`): every dim nobody
  bound and no op fixes is ``DEFAULT_DIM_VALUE``; the numbers carry a warning and the formulas stay exact in the
  dim names.
* **runs** (``fold``, ``bench``, ``gap``; :meth:`Binding.for_run`): the graph inputs' dims become real arrays, so
  a size must be right, not merely stated. The user's value, else a size the model states, else
  ``DEFAULT_DIM_VALUE`` — but only where the model's shapes still agree at that size (:func:`defaults_break`:
  onnx's strict shape inference with the size substituted). A YOLO-style model (stride-2 Conv, Resize ×2, Concat
  with the skip branch) does not agree at height 1, so instead of failing inside onnxruntime the run is refused
  with :class:`UnboundDims` naming the dims to bind.

Messages here speak of dims and models, never of command-line flags: the CLI adds those (``--dim NAME=N``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import onnx

from graphcost._dims import parse_dim, to_text
from graphcost._sym import sympy
from graphcost.graph import Graph, anonymous_dim
from graphcost.passes.shapes import bind_inputs, strip_shapes

DEFAULT_DIM_VALUE = 1
"""The value of a dim nobody bound (static analysis), always said with a warning; the only definition."""

MAX_STATED_SIZE = 1 << 15
"""A size read from metadata above this is not taken (an image side of 32768 is no export's default)."""


class UnknownDim(ValueError):
    """A dim was bound that the model does not have; ``known`` lists the ones it has."""

    def __init__(self, name: str, known: Iterable[str], *, owner: str = "the model") -> None:
        self.name = name
        self.known = tuple(sorted(known))
        shown = ", ".join(self.known) or "none, all shapes are static"
        verb = "have" if owner.startswith("models") else "has"
        super().__init__(f"{owner} {verb} no dim named {name!r} (no input dim of that name, and no dim of that name "
                         f"in its inferred shapes or costs; its dims: {shown})")


class UnboundDims(ValueError):
    """A run needs concrete sizes the model does not state and ``DEFAULT_DIM_VALUE`` would break; ``names`` are
    the dims to bind, ``why`` says what breaks."""

    def __init__(self, names: Sequence[str], why: str) -> None:
        self.names = tuple(names)
        self.why = why
        super().__init__(f"{self.head} ({why})")

    @property
    def head(self) -> str:
        """``dims height, width are not bound`` (``dim height is not bound`` for one)."""
        if len(self.names) == 1:
            return f"dim {self.names[0]} is not bound"
        return f"dims {', '.join(self.names)} are not bound"


def dim_key(name: str) -> str:
    """The name a caller's dim binds: a dim as the model spells it (``DynamicDimension.0``, paddle2onnx's) is the
    symbol graphcost reads it as (``DynamicDimension_0``), so both spellings bind it; anything that does not read
    as one plain name stays as given (and is refused by :func:`check_names` if the model lacks it)."""
    d = parse_dim(name)
    return to_text(d) if isinstance(d, sympy.Symbol) else name


def dim_keys(dims: Mapping[str, int] | None) -> dict[str, int]:
    """``dims`` with each name through :func:`dim_key` (the caller's order kept)."""
    return {dim_key(k): v for k, v in (dims or {}).items()}


def check_names(dims: Mapping[str, int], known: Iterable[str], *, owner: str = "the model") -> None:
    """Raise :class:`UnknownDim` for the first name of ``dims`` (in the caller's order) not in ``known``."""
    have = set(known)
    for name in dims:
        if name not in have:
            raise UnknownDim(name, have, owner=owner)


@dataclass(frozen=True)
class Binding:
    """Every dim the numbers depend on, with its value; which the caller bound, which were taken, which defaulted."""

    values: Mapping[str, int]
    user: tuple[str, ...] = ()
    defaulted: tuple[str, ...] = ()
    taken: Mapping[str, str] = field(default_factory=dict)
    """dim → where its size came from (``metadata imgsz``, ``declared output 'y'``)."""
    contradicted: Mapping[str, tuple[int, str]] = field(default_factory=dict)
    """dim the caller bound → (the size an op's contract fixes instead, where): kept as given, and said."""

    def value(self, name: str) -> int:
        """The value of ``name``; :class:`UnknownDim` when the model has no such dim."""
        try:
            return self.values[name]
        except KeyError:
            raise UnknownDim(name, self.values) from None

    def as_dict(self) -> dict[str, int]:
        return dict(self.values)

    @classmethod
    def static(cls, model_dims: Iterable[str], dims: Mapping[str, int] | None = None,
               fixed: Mapping[str, tuple[int, str]] | None = None) -> Binding:
        """The static-analysis binding: the caller's values, then the sizes an op's contract fixes (``fixed``:
        :func:`sizes_the_ops_fix`, taken), ``DEFAULT_DIM_VALUE`` for every other dim."""
        known = set(model_dims)
        given = dict(dims or {})
        check_names(given, known)
        fixed = fixed or {}
        taken = {d: v for d, v in fixed.items() if d in known and d not in given}
        defaulted = sorted(known - set(given) - set(taken))
        values = {**dict.fromkeys(defaulted, DEFAULT_DIM_VALUE), **{d: v for d, (v, _) in taken.items()}, **given}
        contradicted = {d: fixed[d] for d in given if d in fixed and given[d] != fixed[d][0]}
        return cls(values, tuple(given), tuple(defaulted), {d: where for d, (_, where) in taken.items()},
                   contradicted)

    def for_run(self, needed: Iterable[str], stated: Mapping[str, tuple[int, str]],
                broken: Sequence[str] = (), why: str = "") -> Binding:
        """This binding made concrete for a run of the model.

        ``needed`` are the dims the run's inputs have (the graph inputs' dims); ``stated`` the sizes the model
        states (dim → (size, where)); ``broken`` the needed dims that ``DEFAULT_DIM_VALUE`` would break
        (:func:`defaults_break`), refused with :class:`UnboundDims` unless the user or the model gave them.
        """
        user = set(self.user)
        taken = {d: stated[d] for d in needed if d not in user and d in stated}
        refused = [d for d in broken if d not in user and d not in taken]
        if refused:
            raise UnboundDims(refused, why)
        values = {**self.values, **{d: v for d, (v, _) in taken.items()}}
        return Binding(values, self.user, tuple(d for d in self.defaulted if d not in taken),
                       {d: where for d, (_, where) in taken.items()})


def run_failed(binding: Binding, input_dims: Iterable[str], error: str) -> UnboundDims | None:
    """A run that failed with ``error`` under ``binding``: when input dims only took ``DEFAULT_DIM_VALUE``
    (nobody sized them), the refusal naming them, since a size of 1 is the likeliest cause (a stride-32 detector
    at 1×1 concatenates an upsampled 2 with a 1); None when every input dim was sized, and the error stands.

    Static checks (:func:`defaults_break`) catch most of these before a run; this is the net for what only the
    run shows (e.g. a Concat whose inputs an engine assumed equal).
    """
    defaulted = [d for d in input_dims if d in binding.defaulted]
    if not defaulted:
        return None
    at = ", ".join(f"{d}={DEFAULT_DIM_VALUE}" for d in defaulted)
    said = error.removeprefix("onnxruntime failed running the model: ")
    return UnboundDims(defaulted, f"onnxruntime cannot run the model at {at}: {said}")


# ------------------------------------------------------------------------------------------ what an op's contract fixes
_KV_CACHES = {("com.microsoft", "GroupQueryAttention"): (3, 4), ("com.microsoft", "MultiHeadAttention"): (6, 7)}
"""Attention ops reading a KV cache: their past key and past value input slots, each ``[batch, heads, past, head]``."""


def sizes_the_ops_fix(graph: Graph) -> dict[str, tuple[int, str]]:
    """Sizes of named dims an operator's contract fixes: dim → (size, why).

    GroupQueryAttention and MultiHeadAttention (com.microsoft) read their past key and value as ``[batch, heads,
    past, head size]``. When such a cache input's last axis is a bare name (onnxruntime-genai's builder writes
    ``kv_cache_dim``, so that one export also serves a compressed cache) and the cache has the query's element type
    (not a compressed one), the name can only be the head size the query implies: ``hidden / num_heads``, or for
    GroupQueryAttention's packed QKV (no key input) ``hidden / (num_heads + 2·kv_num_heads)``."""
    out: dict[str, tuple[int, str]] = {}
    for g in graph.walk():
        for node in g.nodes():
            if node.op_type == "Concat" and node.domain == "ai.onnx":
                _concat_fixes(g, node, out)
                continue
            slots = _KV_CACHES.get((node.domain, node.op_type))
            if slots is None:
                continue
            head = _head_size(g, node)
            query = g.tensor(node.inputs[0]) if node.inputs and node.inputs[0] else None
            if head is None or query is None:
                continue
            for slot in slots:
                past = g.tensor(node.inputs[slot]) if slot < len(node.inputs) and node.inputs[slot] else None
                if past is None or past.shape is None or len(past.shape) != 4 or past.dtype != query.dtype:
                    continue
                d = past.shape[3]
                if getattr(d, "is_Symbol", False) and str(d) not in out:
                    out[str(d)] = (head, f"{node.op_type} {node.name!r} reads its cache as [batch, heads, past, "
                                         f"head size {head}]")
    return out


def _concat_fixes(g: Graph, node: Any, out: dict[str, tuple[int, str]]) -> None:
    """A Concat's inputs agree on every axis but the joined one: a bare name there beside a number is that number
    (a decoder's past cache ``[batch, heads, past, kv_cache_dim]`` joined with the new keys ``[.., .., seq, 16]``)."""
    shapes = [t.shape for i in node.inputs if i and (t := g.tensor(i)) is not None and t.shape is not None]
    if len(shapes) < 2 or len({len(s) for s in shapes}) != 1:
        return
    rank = len(shapes[0])
    axis = node.attribute("axis")
    if not isinstance(axis, int) or not -rank <= axis < rank:
        return
    for k in range(rank):
        if k == axis % rank:
            continue
        numbers = {d[k] for d in shapes if isinstance(d[k], int)}
        if len(numbers) != 1:
            continue  # none to go by, or a model that cannot run
        (size,) = numbers
        for d in shapes:
            if getattr(d[k], "is_Symbol", False) and str(d[k]) not in out:
                out[str(d[k])] = (size, f"Concat {node.name!r} joins it with a {size} on axis {k}")


def _head_size(g: Graph, node: Any) -> int | None:
    """The head size a GroupQueryAttention's or MultiHeadAttention's query implies (a number), else None."""
    heads = node.attribute("num_heads")
    q = g.tensor(node.inputs[0])
    if not heads or q is None or q.shape is None:
        return None
    shape = q.shape
    if node.op_type == "GroupQueryAttention":
        kv = node.attribute("kv_num_heads")
        packed = not (len(node.inputs) > 1 and node.inputs[1])
        n = heads + 2 * kv if packed and kv else heads
        if len(shape) != 3 or not isinstance(shape[2], int) or (packed and not kv) or shape[2] % n:
            return None
        return shape[2] // n
    if len(shape) == 5 and isinstance(shape[4], int):  # MultiHeadAttention's packed QKV [B, S, N, 3, H]
        return shape[4]
    if len(shape) == 3 and isinstance(shape[2], int) and shape[2] % heads == 0:
        return shape[2] // heads
    return None


# ------------------------------------------------------------------------------------------- what the model states
def sizes_the_model_states(proto: onnx.ModelProto, inferred_outputs: Mapping[str, Sequence[Any]]
                           ) -> dict[str, tuple[int, str]]:
    """Sizes of input dims the file states: dim → (size, where), the first source found winning.

    1. **Declared outputs.** A graph output whose declared dim is a number where its inferred shape
       (``inferred_outputs``: output name → dims, a bare named dim as its name) has a bare dim pins that dim:
       declared ``[1, 3, 320, 320]``, inferred ``[batch, 3, height, width]``.
    2. **Metadata.** ``imgsz`` in ``metadata_props`` (ultralytics writes ``[640, 640]``, or one number for a
       square) gives the last two axes of the image input (the one rank-4 input whose last two dims are named);
       ``batch`` gives its first axis. Values are parsed as whole numbers, never evaluated.
    """
    out: dict[str, tuple[int, str]] = {}
    declared = {vi.name: vi for vi in proto.graph.output}
    for name, shape in inferred_outputs.items():
        vi = declared.get(name)
        if vi is None or not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
            continue
        dims = vi.type.tensor_type.shape.dim
        if len(dims) != len(shape):
            continue
        for d, inferred in zip(dims, shape, strict=True):
            if d.HasField("dim_value") and d.dim_value > 0 and isinstance(inferred, str) and inferred not in out:
                out[inferred] = (int(d.dim_value), f"declared output {name!r}")
    meta = {p.key: p.value for p in proto.metadata_props}
    image = _image_input(proto)
    if image is not None:
        batch, height, width = image
        sides = _whole_numbers(meta.get("imgsz", ""))
        if len(sides) == 1:
            sides = sides * 2
        if len(sides) == 2:
            for dim, size in ((height, sides[0]), (width, sides[1])):
                if dim is not None:
                    out.setdefault(dim, (size, "metadata imgsz"))
        first = _whole_numbers(meta.get("batch", ""))
        if batch is not None and len(first) == 1:
            out.setdefault(batch, (first[0], "metadata batch"))
    return out


def _image_input(proto: onnx.ModelProto) -> tuple[str | None, str | None, str | None] | None:
    """(batch, height, width) dim names of the one rank-4 graph input whose last two dims are named."""
    inits = {t.name for t in proto.graph.initializer}
    found = []
    for vi in proto.graph.input:
        if vi.name in inits or not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
            continue
        dims = vi.type.tensor_type.shape.dim
        if len(dims) == 4 and not any(anonymous_dim(d) or not d.dim_param for d in dims[2:]):
            found.append(tuple(None if anonymous_dim(d) or not d.dim_param else d.dim_param
                               for d in (dims[0], dims[2], dims[3])))
    return found[0] if len(found) == 1 else None  # type: ignore[return-value]


def _whole_numbers(text: str) -> list[int]:
    """``"[640, 640]"`` → [640, 640]; anything but 1–2 whole numbers in (0, MAX_STATED_SIZE] → []."""
    if len(text) > 64 or not re.fullmatch(r"[\s\[\](),0-9]*", text):
        return []
    values = [int(v) for v in re.findall(r"[0-9]+", text)]
    return values if 1 <= len(values) <= 2 and all(0 < v <= MAX_STATED_SIZE for v in values) else []


# ------------------------------------------------------------------------------------------- do defaults break it?
def defaults_break(proto: onnx.ModelProto, bound: Mapping[str, int], candidates: Sequence[str]
                   ) -> tuple[list[str], str]:
    """The ``candidates`` (input dims nobody sized) at which ``DEFAULT_DIM_VALUE`` makes the model's shapes disagree.

    onnx's shape inference runs in strict mode on a copy whose inputs carry ``bound`` and the candidates at
    ``DEFAULT_DIM_VALUE`` (declared value_info and output shapes cleared, so only the graph decides). When that
    fails, each candidate is tried alone (the others left symbolic), and the ones that fail alone are returned;
    if none fails alone, all are. When the model does not pass strict inference with its dims symbolic, nothing
    can be learned this way and nothing is returned (the run then says what onnxruntime says). Returns (dims,
    the inference error's first line).
    """
    if not candidates or _strict_error(proto, bound) is not None:
        return [], ""
    everything = {**bound, **dict.fromkeys(candidates, DEFAULT_DIM_VALUE)}
    why = _strict_error(proto, everything)
    if why is None:
        return [], ""
    alone = [d for d in candidates if _strict_error(proto, {**bound, d: DEFAULT_DIM_VALUE}) is not None]
    names = alone or list(candidates)
    at = ", ".join(f"{d}={DEFAULT_DIM_VALUE}" for d in names)
    return names, f"at {at} the model's shapes disagree: {why}"


def _strict_error(proto: onnx.ModelProto, values: Mapping[str, int]) -> str | None:
    m = strip_shapes(proto)
    bind_inputs(m, values)
    try:
        onnx.shape_inference.infer_shapes(m, check_type=False, strict_mode=True, data_prop=True)
    except Exception as e:  # onnx raises InferenceError, ValidationError or RuntimeError depending on the op
        text = " ".join(str(e).split())
        text = text.replace("[ShapeInferenceError] ", "").replace("Inference error(s): ", "")
        text = re.sub(r"\(op_type:([A-Za-z0-9_]+)(, node name: ([^)]*))?\): ", r"\1 \3: ", text).replace(" :", ":")
        return text[:200] or type(e).__name__
    return None


__all__ = ["DEFAULT_DIM_VALUE", "Binding", "UnboundDims", "UnknownDim", "check_names", "defaults_break",
           "dim_key", "dim_keys", "run_failed", "sizes_the_model_states", "sizes_the_ops_fix"]
