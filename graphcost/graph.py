"""The graph IR: the only module that imports networkx.

A :class:`Graph` is a networkx ``MultiDiGraph`` whose nodes are ops and whose edges are tensors
(keyed by tensor name, since one tensor can feed the same node twice), plus a tensor table holding
every value the graph names: graph inputs, initializers, constants, activations and outputs, each
with its shape, dtype and kind. Subgraphs of If/Loop/Scan are child graphs, reachable through
:meth:`Graph.children`, whose node names are path-like (``<if_node>/then_branch/<node>``).

The graph is built once from a (shape-annotated) ``ModelProto`` and never changed afterwards.
Producer/consumer tables answer the passes' neighbour queries directly; the networkx graph behind
them (:attr:`Graph.nx`) is built on first use, because importing networkx and building a
100k-node MultiDiGraph costs more than analyzing a typical model that never needs it.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np
import onnx
from onnx import numpy_helper

from graphcost import _scan
from graphcost._dims import Dim, Shape, parse_dim, symbol

DEFAULT_DOMAIN = "ai.onnx"


class TensorKind(str, enum.Enum):
    """What a value is, for accounting: parameters are weights, activations are produced at run time."""

    INPUT = "input"
    PARAMETER = "parameter"  # an initializer, or a Constant node's weight
    CONSTANT = "constant"  # small integer plumbing (shape vectors, axes) from Constant nodes
    ACTIVATION = "activation"
    OUTPUT = "output"


# ONNX element types → numpy-style names and sizes in bits. Strings have no fixed size.
_DTYPES: dict[int, tuple[str, int | None]] = {
    onnx.TensorProto.FLOAT: ("float32", 32),
    onnx.TensorProto.UINT8: ("uint8", 8),
    onnx.TensorProto.INT8: ("int8", 8),
    onnx.TensorProto.UINT16: ("uint16", 16),
    onnx.TensorProto.INT16: ("int16", 16),
    onnx.TensorProto.INT32: ("int32", 32),
    onnx.TensorProto.INT64: ("int64", 64),
    onnx.TensorProto.STRING: ("string", None),
    onnx.TensorProto.BOOL: ("bool", 8),
    onnx.TensorProto.FLOAT16: ("float16", 16),
    onnx.TensorProto.DOUBLE: ("float64", 64),
    onnx.TensorProto.UINT32: ("uint32", 32),
    onnx.TensorProto.UINT64: ("uint64", 64),
    onnx.TensorProto.COMPLEX64: ("complex64", 64),
    onnx.TensorProto.COMPLEX128: ("complex128", 128),
    onnx.TensorProto.BFLOAT16: ("bfloat16", 16),
    onnx.TensorProto.FLOAT8E4M3FN: ("float8_e4m3fn", 8),
    onnx.TensorProto.FLOAT8E4M3FNUZ: ("float8_e4m3fnuz", 8),
    onnx.TensorProto.FLOAT8E5M2: ("float8_e5m2", 8),
    onnx.TensorProto.FLOAT8E5M2FNUZ: ("float8_e5m2fnuz", 8),
    onnx.TensorProto.UINT4: ("uint4", 4),
    onnx.TensorProto.INT4: ("int4", 4),
}
for _code, _name, _bits in (("FLOAT4E2M1", "float4_e2m1", 4), ("FLOAT8E8M0", "float8_e8m0", 8),
                            ("UINT2", "uint2", 2), ("INT2", "int2", 2)):
    if hasattr(onnx.TensorProto, _code):
        _DTYPES[getattr(onnx.TensorProto, _code)] = (_name, _bits)

UNKNOWN_DTYPE = "unknown"


def dtype_name(elem_type: int) -> str:
    return _DTYPES.get(elem_type, (UNKNOWN_DTYPE, None))[0]


_BITS: dict[str, int | None] = {name: bits for name, bits in _DTYPES.values()}


def dtype_bits(dtype: str) -> int | None:
    """Bits per element, or None for strings and unknown types (their bytes cannot be counted)."""
    return _BITS.get(dtype)


@dataclass(frozen=True, slots=True)
class Tensor:
    """One value of the graph. ``shape`` is None when even the rank is unknown."""

    name: str
    shape: Shape | None
    dtype: str
    kind: TensorKind
    nbytes: Dim | None = None
    """Bytes of a value with no tensor shape whose size is known anyway (a sequence: its elements, sized by
    ``passes/_sequences.py``); None for every tensor, whose bytes its shape says."""

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)


@dataclass(frozen=True, slots=True)
class Node:
    """One op. ``inputs`` keeps empty strings for omitted optional inputs, so positions stay meaningful."""

    name: str
    op_type: str
    domain: str
    opset: int
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    index: int
    protos: Sequence[onnx.NodeProto] = field(repr=False, compare=False)
    """The node list of the graph proto this node is in (``proto`` is ``protos[index]``)."""

    @property
    def proto(self) -> onnx.NodeProto:
        """The node's ``NodeProto``, read from its graph's node list when asked: holding each node's Python
        wrapper kept 100k of them alive at synthetic-100k (about 8 MiB), for the few rules that read
        attributes."""
        return self.protos[self.index]

    @property
    def attribute_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.proto.attribute)

    def attribute(self, name: str) -> Any | None:
        """Decoded attribute value, or None when the node does not set it (schema defaults: see ops)."""
        return node_attribute(self.proto, name, None)


def unique_node_name(name: str, op_type: str, index: int, used: set[str]) -> str:
    """The name graphcost gives the ``index``-th node of a graph (its ``name`` and ``op_type`` fields): its own,
    ``<op>_<index>`` when it has none, ``_2``, ``_3``... on a repeat of a name in ``used`` (which gets the result
    added)."""
    base = name = name or f"{op_type}_{index}"
    k = 1
    while name in used:
        k += 1
        name = f"{base}_{k}"
    used.add(name)
    return name


class NodeFields(NamedTuple):
    """The fields of one ``NodeProto`` that the passes read, read out of protobuf once (:func:`read_node_fields`).

    Each read of a protobuf field builds new Python objects (a container, a str per name), and the loader's text
    check, validation, the shapes pass's census and the Graph each read the same ones: at synthetic-100k that was
    four walks of 0.35-0.6 s each over the same 100,000 nodes."""

    name: str
    op_type: str
    domain: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attributes: bool
    """Whether the node sets any attribute (most nodes of a large graph set none: their attributes are not read)."""
    graphs: bool
    """Whether an attribute holds a subgraph (type GRAPH or GRAPHS)."""


_GRAPH_TYPES = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)


def read_node_fields(graph: onnx.GraphProto) -> tuple[NodeFields, ...]:
    """The :class:`NodeFields` of each node of ``graph`` (not of its subgraphs), in node order, every string
    interned (one tensor name is read by its producer, each consumer and every table keyed by it).

    Raises TypeError when one of those strings is ``bytes``: protobuf's form of a string field that is not UTF-8,
    which the loader rewrites first (:func:`graphcost.load.clean_strings`)."""
    intern = sys.intern
    out: list[NodeFields] = []
    graph_types = _GRAPH_TYPES
    for proto in graph.node:  # one plain loop: synthetic-100k 0.47-0.53 s, the cost of a single walk
        attributes = proto.attribute
        graphs = False
        if attributes:
            for a in attributes:
                if a.type in graph_types:
                    graphs = True
                    break
        out.append(NodeFields(intern(proto.name), intern(proto.op_type), intern(proto.domain),
                              tuple(map(intern, proto.input)), tuple(map(intern, proto.output)), bool(attributes),
                              graphs))
    return tuple(out)


def node_attribute(node: onnx.NodeProto, name: str, default: Any) -> Any:
    """The decoded value of attribute ``name`` of a NodeProto, or ``default`` when the node does not set it."""
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def graph_protos(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """A GraphProto and every subgraph its nodes' attributes hold, outer first."""
    yield graph
    for node in graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from graph_protos(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    yield from graph_protos(g)


def separate_scopes(graph: onnx.GraphProto) -> int:
    """Rename, in place, each value a subgraph defines under a name that another scope of the model defines too;
    returns how many were renamed.

    ONNX scopes names per graph: sibling subgraphs may reuse them (optimum's merged decoders: an If whose two
    branches, the decoder with and without past, share 659 value names). graphcost keys types by value name,
    model-wide, so two such values would share one shape. A renamed value takes ``name@attribute`` (the
    attribute holding its subgraph: ``else_branch``, ``body``), a counter added while that is taken too; every
    use in its scope (the subgraph and the subgraphs inside it) follows. Graph outputs, and names from enclosing
    scopes, keep theirs. Done in traversal order, so the names are the same for the same file."""
    taken = set(_defined(graph))
    renamed = 0

    def visit(g: onnx.GraphProto, outer: dict[str, str]) -> None:
        nonlocal renamed
        for node in g.node:
            for attr in node.attribute:
                subs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else (
                    list(attr.graphs) if attr.type == onnx.AttributeProto.GRAPHS else [])
                for sub in subs:
                    scope = dict(outer)
                    for name in _defined(sub):
                        if name in scope and scope[name] != name:
                            del scope[name]  # redefined here: this scope's own value, not the outer one's new name
                        if name in taken:
                            new, k = f"{name}@{attr.name}", 1
                            while new in taken:
                                k += 1
                                new = f"{name}@{attr.name}{k}"
                            scope[name] = new
                            renamed += 1
                            name = new
                        taken.add(name)
                    if scope:
                        _rename_in(sub, scope)
                    visit(sub, scope)

    visit(graph, {})
    return renamed


def _defined(g: onnx.GraphProto) -> list[str]:
    """The value names graph ``g`` itself defines, each once, in file order: its inputs, initializers and node
    outputs (an order, not a set: which of two names takes a counter must not depend on hashing)."""
    names = dict.fromkeys(vi.name for vi in g.input)
    names.update(dict.fromkeys(t.name for t in g.initializer))
    names.update(dict.fromkeys(t.values.name for t in g.sparse_initializer))
    names.update(dict.fromkeys(o for node in g.node for o in node.output))
    names.pop("", None)
    return list(names)


def _rename_in(g: onnx.GraphProto, names: Mapping[str, str]) -> None:
    """Apply ``names`` to every value name graph ``g`` itself holds (its nested subgraphs are visited apart)."""
    for seq in (g.input, g.output, g.value_info):
        for vi in seq:
            if vi.name in names:
                vi.name = names[vi.name]
    for t in g.initializer:
        if t.name in names:
            t.name = names[t.name]
    for sp in g.sparse_initializer:
        if sp.values.name in names:
            sp.values.name = names[sp.values.name]
    for node in g.node:
        for field_ in (node.input, node.output):
            for i, name in enumerate(field_):
                if name in names:
                    field_[i] = names[name]


_TYPE_CACHE: dict[bytes, tuple[Shape | None, str]] = {}
_TYPE_CACHE_LIMIT = 1 << 16
_COPY_CHAIN = 16
"""Most Identity nodes :meth:`Graph.copied_from` follows (the exporter writes one; a cycle cannot hold it)."""


def _shape_of(type_proto: onnx.TypeProto, owner: str) -> tuple[Shape | None, str]:
    """Shape and dtype of a tensor type; unnamed dims become symbols named after the tensor."""
    return _shape_of_packed(type_proto.SerializeToString(), owner, type_proto)


def _shape_of_packed(key: bytes, owner: str, type_proto: onnx.TypeProto | None = None) -> tuple[Shape | None, str]:
    """:func:`_shape_of` of a serialized type (the shapes pass's table holds them so), decoded only on a miss.

    Real models repeat a handful of types thousands of times, so decoded types are cached by their
    serialized bytes (except those with unnamed dims, whose symbols are named after their tensor).
    """
    hit = _TYPE_CACHE.get(key)
    if hit is not None:
        return hit
    if type_proto is None:
        type_proto = onnx.TypeProto()
        type_proto.ParseFromString(key)
    result, owner_specific = _decode_type(type_proto, owner)
    if not owner_specific and len(_TYPE_CACHE) < _TYPE_CACHE_LIMIT:
        _TYPE_CACHE[key] = result
    return result


def _decode_type(type_proto: onnx.TypeProto, owner: str) -> tuple[tuple[Shape | None, str], bool]:
    which = type_proto.WhichOneof("value")
    if which == "tensor_type":
        tt = type_proto.tensor_type
    elif which == "sparse_tensor_type":
        tt = type_proto.sparse_tensor_type  # type: ignore[assignment]
    else:
        return (None, UNKNOWN_DTYPE), False  # sequences, maps, optionals: no tensor shape
    dtype = dtype_name(tt.elem_type)
    if not tt.HasField("shape"):
        return (None, dtype), False
    dims: list[Dim] = []
    owner_specific = False
    for i, d in enumerate(tt.shape.dim):
        if anonymous_dim(d):
            dims.append(symbol(unknown_dim_name(owner, i)))
            owner_specific = True
        elif d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        else:
            dims.append(parse_dim(d.dim_param))
    return (tuple(dims), dtype), owner_specific


def anonymous_dim(d: onnx.TensorShapeProto.Dimension) -> bool:
    """A dim with neither a size nor a name of its own: unset, negative (``-1``, as some exporters write), or
    ``?`` — how tools print an unnamed dim, which older exporters (paddle2onnx) store literally. Each such dim is
    its own unknown: read as one shared name, ``?`` would make batch, height and width one dim."""
    if d.HasField("dim_value"):
        return d.dim_value < 0
    return not d.dim_param.strip() or d.dim_param.strip() == "?"


def unknown_dim_name(tensor: str, axis: int) -> str:
    """The deterministic name of an unknown dim: ``unk__<tensor>_<axis>`` (non-alphanumerics as ``_``)."""
    safe = "".join(c if c.isalnum() else "_" for c in tensor).strip("_") or "t"
    return f"unk__{safe}_{axis}"


def name_anonymous_input_dims(graph: onnx.GraphProto) -> None:
    """Give each graph input's anonymous dim (:func:`anonymous_dim`) its :func:`unknown_dim_name`, in place, so
    every engine carries that name instead of merging ``?`` dims or minting counters."""
    for vi in graph.input:
        tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
        if tt is None or not tt.HasField("shape"):
            continue
        for axis, d in enumerate(tt.shape.dim):
            if anonymous_dim(d):
                d.dim_param = unknown_dim_name(vi.name, axis)


def _constant_is_parameter(dtype: str) -> bool:
    """Constant-node outputs are weights (paddle/caffe2 exports) unless they are int64/bool plumbing."""
    return dtype not in ("int64", "bool")


class Graph:
    """A typed, read-only view of one ONNX graph (the main graph or a subgraph)."""

    def __init__(
        self,
        graph: onnx.GraphProto,
        opsets: Mapping[str, int],
        *,
        prefix: str = "",
        parent: Graph | None = None,
        base_dir: str | None = None,
        types: Mapping[str, bytes] | None = None,
        fields: Sequence[NodeFields] | None = None,
    ) -> None:
        """``types`` (value name → serialized ``TypeProto``, the shapes pass's table for this graph and its
        subgraphs) replaces the graph's stored value_info when given. ``fields``: ``read_node_fields(graph)``
        when the caller holds them already (the loader read them), else they are read here."""
        self.proto = graph
        self.name = graph.name
        self.opsets = dict(opsets)
        self.prefix = prefix
        self.parent = parent
        self.base_dir = base_dir
        self._types = types
        self._fields = fields
        self._nx: Any = None
        self._links: tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]] | None = None
        self._tensors: dict[str, Tensor] = {}
        self._producer: dict[str, str] = {}
        self._consumers: dict[str, tuple[str, ...]] = {}
        self._nodes: dict[str, Node] = {}
        self._order: list[str] = []
        self._children: dict[str, list[tuple[str, Graph]]] = {}
        self._initializers: dict[str, int] = {}  # name → position in graph.initializer (no wrapper kept alive)
        self._constant_nodes: dict[str, onnx.NodeProto] = {}
        self.input_names = tuple(i.name for i in graph.input)
        self.output_names = tuple(o.name for o in graph.output)
        self._build()
        self._types = None  # only the children built above read it; the shapes pass keeps its own table
        self._fields = None

    # ----------------------------------------------------------------- construction
    def _build(self) -> None:
        g = self.proto
        typed: Mapping[str, bytes]
        if self._types is not None:
            typed = self._types
        else:
            stored: dict[str, bytes] = {}
            for vi in g.value_info:
                stored[vi.name] = vi.type.SerializeToString()
            for vi in g.output:
                if vi.name not in stored:
                    stored[vi.name] = vi.type.SerializeToString()
            typed = stored
        output_set = set(self.output_names)

        # Every name is interned: protobuf hands out a new str per read, and one tensor's name is read by its
        # producer, each consumer and the tables below (synthetic-100k: 193 → MiB for the Graph, measured).
        intern = sys.intern
        for position, init in enumerate(g.initializer):
            name = intern(init.name)
            self._initializers[name] = position
            self._tensors[name] = Tensor(name, tuple(init.dims), dtype_name(init.data_type), TensorKind.PARAMETER)
        for sp in g.sparse_initializer:
            name = sp.values.name
            self._tensors[name] = Tensor(name, tuple(int(d) for d in sp.dims),
                                         dtype_name(sp.values.data_type), TensorKind.PARAMETER)
        for vi in g.input:
            if vi.name in self._tensors:
                continue  # an initializer also listed as input (IR < 4): it is a parameter
            packed = typed.get(vi.name)
            shape, dtype = (_shape_of(vi.type, vi.name) if packed is None else _shape_of_packed(packed, vi.name))
            self._tensors[vi.name] = Tensor(vi.name, shape, dtype, TensorKind.INPUT)

        used_names: set[str] = set()
        prefix = self.prefix
        protos = g.node
        fields = self._fields if self._fields is not None else read_node_fields(g)
        if len(fields) != len(protos):
            raise RuntimeError(f"graph {g.name!r}: {len(fields)} node fields given for {len(protos)} nodes")
        opsets = self.opsets
        for index, f in enumerate(fields):
            full = unique_node_name(f.name, f.op_type, index, used_names)
            if prefix:
                full = prefix + full
            domain = f.domain or DEFAULT_DOMAIN
            opset = opsets.get(f.domain, opsets.get(domain, 0))
            outputs = f.outputs
            node = Node(full, f.op_type, domain, opset, f.inputs, outputs, index, protos)
            self._nodes[full] = node
            self._order.append(full)
            constant = protos[index] if f.op_type == "Constant" and domain == DEFAULT_DOMAIN else None
            for out in outputs:
                if not out:
                    continue
                self._producer[out] = full
                tp = typed.get(out)
                shape, dtype = _shape_of_packed(tp, out) if tp is not None else (None, UNKNOWN_DTYPE)
                if constant is not None:
                    self._constant_nodes[out] = constant
                    cshape, cdtype = _constant_shape(constant)
                    shape = shape if cshape is None else cshape
                    dtype = cdtype or dtype
                    kind = TensorKind.PARAMETER if _constant_is_parameter(dtype) else TensorKind.CONSTANT
                elif out in output_set:
                    kind = TensorKind.OUTPUT
                else:
                    kind = TensorKind.ACTIVATION
                self._tensors[out] = Tensor(out, shape, dtype, kind)
            if not f.graphs:
                continue  # most nodes: no attribute is read
            for attr in protos[index].attribute:
                subs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else (
                    list(attr.graphs) if attr.type == onnx.AttributeProto.GRAPHS else [])
                for j, sub in enumerate(subs):
                    label = attr.name if len(subs) == 1 else f"{attr.name}[{j}]"
                    child = Graph(sub, self.opsets, prefix=f"{full}/{label}/", parent=self,
                                  base_dir=self.base_dir, types=self._types)
                    self._children.setdefault(full, []).append((label, child))

        consumers: dict[str, list[str]] = {}
        for name in self._order:
            for t in self._nodes[name].inputs:
                if t:
                    consumers.setdefault(t, []).append(name)
        # kept as tuples: 48 B for one name against a list's 88 B (about 300k of them at 100k nodes)
        self._consumers = {k: tuple(v) for k, v in consumers.items()}
        # ConstantOfShape fed only by constants is a weight too (paddle2onnx writes weights this way).
        for name in self._order:
            node = self._nodes[name]
            if node.op_type == "ConstantOfShape" and node.domain == DEFAULT_DOMAIN and node.outputs:
                src = node.inputs[0] if node.inputs else ""
                if src and self.is_constant(src):
                    weight = self._tensors[node.outputs[0]]
                    self._tensors[weight.name] = Tensor(weight.name, weight.shape, weight.dtype, TensorKind.PARAMETER)

    # ----------------------------------------------------------------- queries
    def __len__(self) -> int:
        return len(self._order)

    def size_values(self, sizes: Mapping[str, Dim]) -> None:
        """Give the values of ``sizes`` that have no tensor shape (sequences) their bytes (:attr:`Tensor.nbytes`).
        For the shapes pass, while it builds this graph, before any pass reads it."""
        for name, b in sizes.items():
            t = self._tensors.get(name)
            if t is not None and t.shape is None:
                self._tensors[name] = Tensor(t.name, None, t.dtype, t.kind, b)

    def nodes(self) -> Iterator[Node]:
        """Nodes in graph (file) order, which ONNX requires to be topological."""
        for name in self._order:
            yield self._nodes[name]

    def node(self, name: str) -> Node:
        return self._nodes[name]

    def tensor(self, name: str) -> Tensor | None:
        """The tensor of that name, looked up through enclosing graphs (outer-scope values)."""
        t = self._tensors.get(name)
        if t is None and self.parent is not None:
            return self.parent.tensor(name)
        return t

    def tensors(self) -> Mapping[str, Tensor]:
        """Every value of this graph by name, read-only (a view, not a copy: a run asks about ten times, and a
        copy of synthetic-100k's 160k-entry table took 11 ms each, measured)."""
        return MappingProxyType(self._tensors)

    def producer(self, tensor: str) -> Node | None:
        name = self._producer.get(tensor)
        return None if name is None else self._nodes[name]

    def copied_from(self, tensor: str) -> str:
        """The tensor an ``Identity`` chain copies ``tensor`` from, or ``tensor`` itself when no Identity makes it.
        The legacy exporter stores equal initializers once and reads each further use through an Identity
        (torchvision MaxViT-T: the ``pre_norm`` BatchNorms' statistics)."""
        for _ in range(_COPY_CHAIN):
            node = self.producer(tensor)
            if node is None or node.op_type != "Identity" or node.domain != DEFAULT_DOMAIN or not node.inputs:
                return tensor
            tensor = node.inputs[0]
        return tensor

    def consumers(self, tensor: str) -> list[Node]:
        return [self._nodes[n] for n in self._consumers.get(tensor, ())]

    def successors(self, node: str) -> list[str]:
        """Nodes that consume an output of ``node`` (each once), in graph order."""
        return list(self._node_links()[0].get(node, ()))

    def predecessors(self, node: str) -> list[str]:
        """Nodes that produce an input of ``node`` (each once)."""
        return list(self._node_links()[1].get(node, ()))

    def _node_links(self) -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]:
        """(successors, predecessors) of every node, built on first use: no pass of ``analyze`` asks for them
        (only a cycle check on a graph out of order does), and both built at every load held synthetic-100k's
        Graph at 81 MiB of Python objects against 65 MiB without them (tracemalloc, measured)."""
        if self._links is None:
            succs: dict[str, list[str]] = {}
            preds: dict[str, list[str]] = {}
            for name in self._order:
                for t in self._nodes[name].inputs:
                    src = self._producer.get(t) if t else None
                    if src is not None:
                        succ = succs.setdefault(src, [])
                        if name not in succ:
                            succ.append(name)
                        pred = preds.setdefault(name, [])
                        if src not in pred:
                            pred.append(src)
            self._links = ({k: tuple(v) for k, v in succs.items()}, {k: tuple(v) for k, v in preds.items()})
        return self._links

    @property
    def nx(self) -> Any:
        """The networkx MultiDiGraph: nodes are op names (with their Node record as ``node``), edges are
        tensors keyed ``<tensor>#<input slot>`` (a tensor can feed one node twice). Built on first use."""
        if self._nx is None:
            import networkx

            g = networkx.MultiDiGraph()
            for name in self._order:
                g.add_node(name, node=self._nodes[name])
            for name in self._order:
                for slot, t in enumerate(self._nodes[name].inputs):
                    src = self._producer.get(t) if t else None
                    if src is not None:
                        g.add_edge(src, name, key=f"{t}#{slot}", tensor=t)
            self._nx = g
        return self._nx

    def topological_order(self) -> list[str]:
        """A topological order of the nodes (networkx's, which may differ from graph order).

        Raises :class:`CycleError` naming the nodes of one cycle when there is none."""
        import networkx

        try:
            return list(networkx.topological_sort(self.nx))
        except networkx.NetworkXUnfeasible:
            cycle = self.cycle()
            raise CycleError(cycle or tuple(self._order[:1])) from None

    def cycle(self) -> tuple[str, ...] | None:
        """The nodes of one cycle, in data-flow order from the first in graph order; None when there is none."""
        return find_cycle(self._order, self._node_links()[1])

    def children(self, node: str) -> list[tuple[str, Graph]]:
        """Subgraphs held by a node's attributes, as (attribute label, child graph)."""
        return list(self._children.get(node, []))

    def walk(self) -> Iterator[Graph]:
        """This graph and every subgraph below it, outer first, in node order."""
        yield self
        if not self._children:  # no subgraphs: nothing to visit. A run walks ~18 times (params, validate,
            # the report); synthetic-100k: 1.68 s → 0 for the 18 walks (measured, the node-by-node walk before)
            return
        for name in self._order:
            for _, child in self._children.get(name, ()):
                yield from child.walk()

    def is_constant(self, tensor: str) -> bool:
        """True for initializers and Constant-node outputs (values known before the run)."""
        if tensor in self._initializers or tensor in self._constant_nodes:
            return True
        t = self._tensors.get(tensor)
        if t is not None and t.kind in (TensorKind.PARAMETER, TensorKind.CONSTANT):
            return True
        return self.parent.is_constant(tensor) if self.parent is not None and t is None else False

    def constant_value(self, tensor: str) -> np.ndarray | None:
        """Value of a small constant (initializer or Constant node), or None when it is not available.

        Payloads stripped by the structure-only loader are read back from the file by offset.
        """
        position = self._initializers.get(tensor)
        if position is not None:
            return _tensor_value(self.proto.initializer[position], self.base_dir)
        proto = self._constant_nodes.get(tensor)
        if proto is not None:
            for a in proto.attribute:
                if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
                    return _tensor_value(a.t, self.base_dir)
                if a.name in ("value_int", "value_float"):
                    return np.asarray(onnx.helper.get_attribute_value(a))
                if a.name in ("value_ints", "value_floats"):
                    return np.asarray(onnx.helper.get_attribute_value(a))
            return None
        if tensor not in self._tensors and self.parent is not None:
            return self.parent.constant_value(tensor)
        return None

    def initializer_names(self) -> tuple[str, ...]:
        return tuple(self._initializers)


class CycleError(ValueError):
    """A graph whose data flow loops back on itself: it has no order to run in, so nothing can be counted."""

    def __init__(self, nodes: tuple[str, ...]) -> None:
        self.nodes = nodes
        super().__init__(cycle_text(nodes))


def cycle_text(nodes: Sequence[str]) -> str:
    """``graph has a cycle through nodes 'A' → 'B' → 'A'`` (long cycles shortened in the middle)."""
    shown = [repr(n) for n in nodes]
    if len(shown) > 8:
        shown = [*shown[:4], f"… {len(shown) - 6} more …", *shown[-2:]]
    return f"graph has a cycle through nodes {' → '.join([*shown, repr(nodes[0])])}"


def find_cycle(order: Sequence[str], preds: Mapping[str, Sequence[str]]) -> tuple[str, ...] | None:
    """One cycle of the graph whose nodes are ``order`` and whose edges are ``preds`` (node → its producers).

    Kahn's algorithm removes every node that is on no cycle; each node left has a producer that is left too,
    so walking producers from the first one left must come back to a node already seen: that loop is a cycle.
    Linear in nodes and edges, iterative (a 100k-node chain needs no recursion).
    """
    indegree = dict.fromkeys(order, 0)
    succ: dict[str, list[str]] = {}
    for name in order:
        for p in preds.get(name, ()):
            if p in indegree:
                indegree[name] += 1
                succ.setdefault(p, []).append(name)
    ready = [n for n in order if not indegree[n]]
    while ready:
        for s in succ.get(ready.pop(), ()):
            indegree[s] -= 1
            if not indegree[s]:
                ready.append(s)
    left = {n for n, d in indegree.items() if d}
    if not left:
        return None
    start = next(n for n in order if n in left)
    path, seen = [start], {start: 0}
    while True:
        here = next(p for p in preds.get(path[-1], ()) if p in left)
        if here in seen:
            loop = path[seen[here]:][::-1]  # producers walked backwards: reverse for data-flow order
            members = set(loop)
            first = loop.index(next(n for n in order if n in members))  # start where the file does
            return tuple(loop[first:] + loop[:first])
        seen[here] = len(path)
        path.append(here)


def _constant_shape(proto: onnx.NodeProto) -> tuple[Shape | None, str | None]:
    for a in proto.attribute:
        if a.type == onnx.AttributeProto.TENSOR:
            t = a.t  # one wrapper; its dims are Python ints already
            return tuple(t.dims), dtype_name(t.data_type)
        if a.type == onnx.AttributeProto.SPARSE_TENSOR:
            return tuple(int(d) for d in a.sparse_tensor.dims), dtype_name(a.sparse_tensor.values.data_type)
        if a.name == "value_int":
            return (), "int64"
        if a.name == "value_float":
            return (), "float32"
        if a.name == "value_ints":
            return (len(a.ints),), "int64"
        if a.name == "value_floats":
            return (len(a.floats),), "float32"
        if a.name == "value_string":
            return (), "string"
        if a.name == "value_strings":
            return (len(a.strings),), "string"
    return None, None


def _tensor_value(t: onnx.TensorProto, base_dir: str | None) -> np.ndarray | None:
    """The tensor's values, or None when they cannot be had (no folder to read from, or an unreadable payload).

    External payloads are read by ``_scan.read_external_payload``: it confines the location to the model's
    folder, refuses pipes and devices, and decodes the scanner's own payload encoding.
    """
    try:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            if base_dir is None:
                return None
            return _scan.read_external_payload(t, base_dir)
        return numpy_helper.to_array(t)
    except Exception:
        return None
