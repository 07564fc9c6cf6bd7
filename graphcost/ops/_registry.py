"""The op-rule registry: one explicit table from (domain, op_type) to a cost rule.

A rule is a small pure function ``rule(n: NodeView) -> Work | Unknown``. It reads shapes and
attributes through the view and returns the arithmetic work of one execution of the node. Bytes are
charged by the costs pass, each distinct input once and each output once, unless the rule states the
node's compulsory traffic itself (``Work.bytes_read`` / ``bytes_written``): a Gather reads the rows it
gathers, not its whole table; a KV-cache append writes the new token, not a copy of the cache. A rule
that states the ideal where the graph as written copies more says so (``as_written=True``), and the
uniform charge is kept beside it as the node's ``bytes_as_written``.

Ops that compute nothing are registered on purpose with :func:`register_free`. An op that is not in
the table has no rule: its FLOPs are unknown, never zero.

Users add rules for custom ops with the same decorator::

    from graphcost.ops import rule, Work, Kind

    @rule("MyGelu", domain="com.example", kind=Kind.ELEMENTWISE)
    def my_gelu(n):
        return Work(flops=8 * n.out_numel(0))   # 8 FLOPs per output element, by our count
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Union

import numpy as np
import onnx

from graphcost._dims import Dim, Shape, numel, simplify_dim
from graphcost._sym import sympy
from graphcost.graph import DEFAULT_DOMAIN, Graph, Node, Tensor, dtype_bits

FLOPS_PER_MAC = 2
"""One multiply-accumulate is two floating-point operations: a multiply and an add."""


class Kind(str, enum.Enum):
    """Op kinds as data; the fusion pass decides groups from these."""

    COMPUTE = "compute"  # Conv, MatMul, Gemm and quantized forms: the anchors of a kernel
    ELEMENTWISE = "elementwise"  # one output element from the same-index input elements
    REDUCTION = "reduction"  # Reduce*, pooling, ArgMax, Softmax-like
    NORMALIZATION = "normalization"  # BatchNorm, LayerNorm, InstanceNorm, GroupNorm...
    MOVEMENT = "movement"  # Transpose, Concat, Gather, Slice, Pad, Resize...: copies data
    VIEW = "view"  # Reshape, Squeeze, Flatten, Identity: aliases its input, moves no bytes
    FREE = "free"  # Shape, Size, Constant: metadata only, moves no bytes
    CONTROL = "control"  # If, Loop, Scan: cost is that of their bodies
    RECURRENT = "recurrent"  # LSTM, GRU, RNN


class ShapeUnknown(Exception):
    """Raised inside a rule when a shape it needs is not known; the dispatcher turns it into Unknown."""


def tensor_bytes(t: Tensor | None) -> Dim | None:
    """Bytes of a tensor: elements × bits / 8; None when shape or element size is unknown. A value with no
    tensor shape has the bytes it was sized at, if any (a sequence: :attr:`Tensor.nbytes`)."""
    if t is None:
        return None
    if t.shape is None:
        return t.nbytes
    bits = dtype_bits(t.dtype)
    if bits is None:
        return None
    shape = t.shape
    n = 1
    for d in shape:
        if type(d) is not int:
            return _symbolic_bytes(shape, bits)
        n *= d
    if bits % 8 == 0:
        return n * (bits // 8)
    return (n * bits + 7) // 8  # sub-byte types are packed, rounded up to whole bytes


@functools.lru_cache(maxsize=65536)
def _symbolic_bytes(shape: Shape, bits: int) -> Dim:
    """:func:`tensor_bytes` of a shape with a symbolic dim, cached: the costs pass, fusion and liveness each
    ask for the same tensors, and every call multiplied sympy expressions anew (FCOS with ORT-minted dims,
    each of its 2,496 shaped tensors asked 3 times: 0.136 s CPU before, 0.048 s cached)."""
    n = numel(shape)
    if bits % 8 == 0:
        return n * (bits // 8)
    if isinstance(n, int):
        return (n * bits + 7) // 8  # sub-byte types are packed, rounded up to whole bytes
    return simplify_dim(sympy.ceiling(n * bits / sympy.Integer(8)))


def _add_optional(a: Dim | None, b: Dim | None) -> Dim | None:
    if a is None:
        return b
    return a if b is None else a + b


@dataclass(frozen=True, slots=True)
class Work:
    """Arithmetic work of one node. ``macs`` counts multiply-accumulates only; ``flops`` counts all.

    ``flops`` already includes ``FLOPS_PER_MAC * macs``. Both may be symbolic.

    ``bytes_read`` / ``bytes_written``, when given, are the node's compulsory traffic and replace the uniform
    charge (every distinct input read, every output written); None leaves the uniform charge. ``as_written``
    says the uniform charge is what the graph as written moves (a whole-cache copy the ideal does in place),
    so the costs pass keeps it beside the ideal. Adding two Works adds their overrides (None counts as none).
    """

    flops: Dim
    macs: Dim = 0
    note: str = ""
    bytes_read: Dim | None = None
    bytes_written: Dim | None = None
    as_written: bool = False

    def __add__(self, other: Work) -> Work:
        note = "; ".join(x for x in (self.note, other.note) if x)
        return Work(self.flops + other.flops, self.macs + other.macs, note,
                    _add_optional(self.bytes_read, other.bytes_read),
                    _add_optional(self.bytes_written, other.bytes_written),
                    self.as_written or other.as_written)


ZERO = Work(0, 0)


@dataclass(frozen=True)
class Unknown:
    """A node whose cost cannot be stated, with the human reason."""

    reason: str


RuleResult = Union[Work, Unknown]
RuleFn = Callable[["NodeView"], RuleResult]
WindowFn = Callable[["NodeView"], dict[int, Dim]]
"""The bytes an op reads of each input slot it reads only in part, by slot (a gather's rows, a slice's window);
raises ShapeUnknown when a count it needs is unknown."""


@dataclass(frozen=True)
class RuleEntry:
    op_type: str
    domain: str
    kind: Kind
    fn: RuleFn
    free_inputs: frozenset[int] = field(default_factory=frozenset)
    """Input slots whose data the op never reads (Shape reads only metadata): they cost no bytes."""
    window: WindowFn | None = None
    """For an op that reads some inputs only in part: the bytes it reads of each (:data:`WindowFn`). The node's
    uniform charge and the bytes crossing a node set (``passes/_storage.py``) both take these, never the whole
    tensor; every other input is read whole."""


_RULES: dict[tuple[str, str], RuleEntry] = {}


def _norm_domain(domain: str) -> str:
    return DEFAULT_DOMAIN if domain in ("", "ai.onnx") else domain


def rule(
    op_type: str | Iterable[str],
    *,
    domain: str = DEFAULT_DOMAIN,
    kind: Kind,
    free_inputs: Iterable[int] = (),
    window: WindowFn | None = None,
    replace: bool = False,
) -> Callable[[RuleFn], RuleFn]:
    """Register ``fn`` as the cost rule of one op type (or several sharing the rule); ``window`` as in
    :class:`RuleEntry`."""
    names = [op_type] if isinstance(op_type, str) else list(op_type)

    def deco(fn: RuleFn) -> RuleFn:
        for name in names:
            key = (_norm_domain(domain), name)
            if key in _RULES and not replace:
                raise ValueError(f"a rule for {key[0]}::{name} is already registered (pass replace=True)")
            _RULES[key] = RuleEntry(name, key[0], kind, fn, frozenset(free_inputs), window)
        return fn

    return deco


def _zero(_: NodeView) -> Work:
    return ZERO


def register_free(
    op_types: Iterable[str], *, domain: str = DEFAULT_DOMAIN, kind: Kind, free_inputs: Iterable[int] = (),
    window: WindowFn | None = None,
) -> None:
    """Register ops that compute nothing, on purpose (zero FLOPs, bytes as their kind says)."""
    rule(list(op_types), domain=domain, kind=kind, free_inputs=free_inputs, window=window)(_zero)


def windows(entry: RuleEntry | None, view: NodeView) -> dict[str, Dim]:
    """The bytes the node of ``view`` reads of each input it reads only in part, by tensor name (``entry``'s
    :attr:`~RuleEntry.window`); empty when the op reads every input whole, or a count the window needs is
    unknown (then the whole tensor is charged). A tensor the node also reads through another slot is read whole
    there, so it is not listed."""
    if entry is None or entry.window is None:
        return {}
    try:
        parts = entry.window(view)
    except ShapeUnknown:
        return {}
    names = view.node.inputs
    out: dict[str, Dim] = {}
    for slot, b in parts.items():
        name = names[slot] if slot < len(names) else ""
        if name and all(t != name for i, t in enumerate(names) if i != slot and i not in entry.free_inputs):
            out[name] = b
    return out


def lookup(domain: str, op_type: str) -> RuleEntry | None:
    return _RULES.get((_norm_domain(domain), op_type))


def registered() -> dict[tuple[str, str], RuleEntry]:
    """A copy of the whole table, for docs and coverage reports."""
    return dict(_RULES)


def unregister(op_type: str, domain: str = DEFAULT_DOMAIN) -> None:
    _RULES.pop((_norm_domain(domain), op_type), None)


_MISSING = object()


def schema_default(node: Node, name: str) -> Any:
    """The ONNX schema's default for an attribute at the node's opset, or ``_MISSING``."""
    return _schema_default(node.op_type, node.opset, node.domain, name)


@functools.lru_cache(maxsize=4096)
def _schema_default(op_type: str, opset: int, domain: str, name: str) -> Any:
    try:
        schema = onnx.defs.get_schema(op_type, max(opset, 1), "" if domain == DEFAULT_DOMAIN else domain)
    except Exception:
        return _MISSING
    attr = schema.attributes.get(name)
    if attr is None or not attr.default_value.name:
        return _MISSING
    return onnx.helper.get_attribute_value(attr.default_value)


@dataclass(frozen=True, slots=True)
class NodeView:
    """What a rule sees of a node: typed inputs/outputs (None where omitted or unknown) and attributes."""

    node: Node
    inputs: tuple[Tensor | None, ...]
    outputs: tuple[Tensor | None, ...]
    graph: Graph

    @property
    def op_type(self) -> str:
        return self.node.op_type

    @property
    def opset(self) -> int:
        return self.node.opset

    def attr(self, name: str, default: Any = _MISSING) -> Any:
        """Attribute value: the node's, else the ONNX schema default, else ``default``."""
        value = self.node.attribute(name)
        if value is not None:
            if isinstance(value, bytes):
                return value.decode("utf-8", "replace")
            return value
        sd = schema_default(self.node, name)
        if sd is not _MISSING:
            return sd.decode("utf-8", "replace") if isinstance(sd, bytes) else sd
        if default is _MISSING:
            return None
        return default

    def has_input(self, i: int) -> bool:
        return i < len(self.node.inputs) and bool(self.node.inputs[i])

    def in_shape(self, i: int) -> Shape:
        t = self.inputs[i] if i < len(self.inputs) else None
        if t is None or t.shape is None:
            raise ShapeUnknown(f"shape of input {i} ({self._in_name(i)}) is unknown")
        return t.shape

    def out_shape(self, i: int = 0) -> Shape:
        t = self.outputs[i] if i < len(self.outputs) else None
        if t is None or t.shape is None:
            name = self.node.outputs[i] if i < len(self.node.outputs) else "?"
            raise ShapeUnknown(f"shape of output {i} ({name}) is unknown")
        return t.shape

    def in_numel(self, i: int) -> Dim:
        return numel(self.in_shape(i))

    def out_numel(self, i: int = 0) -> Dim:
        return numel(self.out_shape(i))

    def in_dtype(self, i: int) -> str:
        t = self.inputs[i] if i < len(self.inputs) else None
        return "unknown" if t is None else t.dtype

    def in_bytes(self, i: int) -> Dim:
        """Bytes of input ``i`` (0 when omitted); ShapeUnknown when its shape or element size is unknown."""
        if not self.has_input(i):
            return 0
        b = tensor_bytes(self.inputs[i] if i < len(self.inputs) else None)
        if b is None:
            raise ShapeUnknown(f"bytes of input {i} ({self._in_name(i)}) are unknown")
        return b

    def out_bytes(self, i: int = 0) -> Dim:
        """Bytes of output ``i`` (0 when omitted); ShapeUnknown when its shape or element size is unknown."""
        if i >= len(self.node.outputs) or not self.node.outputs[i]:
            return 0
        b = tensor_bytes(self.outputs[i] if i < len(self.outputs) else None)
        if b is None:
            raise ShapeUnknown(f"bytes of output {i} ({self.node.outputs[i]}) are unknown")
        return b

    def is_constant(self, i: int) -> bool:
        """Input ``i`` is known before the run (an initializer or a Constant node's output)."""
        return self.has_input(i) and self.graph.is_constant(self.node.inputs[i])

    def const_value(self, i: int) -> np.ndarray | None:
        """Value of input ``i`` when it is a constant the graph holds (initializer or Constant node)."""
        if not self.has_input(i):
            return None
        return self.graph.constant_value(self.node.inputs[i])

    def _in_name(self, i: int) -> str:
        return self.node.inputs[i] if i < len(self.node.inputs) else "?"
