"""File → Model: structure only, weights untouched.

Embedded weight payloads are skipped by the wire scanner (``_scan``) and replaced with offset
references into the original file, so a 1.6 GB model costs a few MB to load; external-data files are
never read, only checked to exist and be long enough. Bad input raises :class:`LoadError` with one
line that names the file and the problem. The input file is opened read-only and never written.

Files: the model path must be a regular file (a symlink to one is fine): a FIFO, socket, device or
directory is refused after one ``stat`` and before any open, and the open itself is non-blocking with an
``fstat`` re-check (``_scan.open_regular``). Every external-data ``location`` is confined to the model's
folder by :func:`external_data_path` before the file is measured; other modules that follow locations use
it (or :func:`external_files`) too. Paths in messages go through :func:`display_path`, so a file name that
is not UTF-8 (a ``str`` with surrogate escapes on POSIX) or holds control characters prints as one line.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import onnx

from graphcost import _scan
from graphcost.graph import Graph, NodeFields, graph_protos, read_node_fields, separate_scopes
from graphcost.report.escape import terminal_text

__all__ = ["LoadError", "Model", "clean_strings", "display_path", "external_data_path", "external_files",
           "external_refs", "load", "model_text", "opset_lookup"]


class LoadError(Exception):
    """A model that cannot be read; the message is one line naming the file and the problem."""


def display_path(path: str | bytes | os.PathLike[str] | os.PathLike[bytes]) -> str:
    """``path`` as one printable line of valid text, for messages and reports.

    A POSIX file name is bytes; Python hands the undecodable ones over as lone surrogates (``b"m\\xff"`` is
    ``"m\\udcff"``), which no UTF-8 stream accepts. Those, and control or bidi characters, are written as
    ``ascii()`` writes them (``\\udcff``, ``\\n``, ``\\x1b``, ``\\u202e``), so a name can neither fail an
    encode, break a one-line error nor rewrite the terminal. For reading only: open files with ``path`` itself.
    """
    return terminal_text(os.fsdecode(path))


def external_data_path(base_dir: str, location: str | bytes, *, model: str | None = None,
                       tensor: str | None = None) -> str:
    """The real path of external-data file ``location`` of a model whose real folder is ``base_dir``.

    The one gate for external data (see ``_scan.resolve_location``): refused with a one-line
    :class:`LoadError` are an empty location, a NUL byte, an absolute path or drive, a ``..`` component, a
    path that resolves (symlinks followed) outside the folder, a missing file and anything but a regular
    file, all before the target is opened or measured, and without a word about files outside the folder.
    ``model`` and ``tensor`` only name the culprit in the message.
    """
    try:
        return _scan.resolve_location(base_dir, location)
    except _scan.ScanError as e:
        where = f"{display_path(model)}: " if model is not None else ""
        which = f" (tensor {tensor!r})" if tensor is not None else ""
        raise LoadError(f"{where}{e}{which}") from None


def external_files(proto: onnx.ModelProto, path: str | os.PathLike[str]) -> list[str]:
    """Real paths of the external-data files the model at ``path`` names, its own file excluded, sorted.

    ``proto`` is that model's structure (``load(path).proto`` or ``_scan.load_structure(path)``); every
    location passes :func:`external_data_path`, so the list never reaches outside the model's folder.
    """
    real = os.path.realpath(path)
    base_dir, own = os.path.dirname(real), _scan.own_location(real)
    out: set[str] = set()
    for t, info in external_refs(proto):
        location = info.get("location", "")
        if location != own:
            out.add(external_data_path(base_dir, location, model=os.fspath(path), tensor=t.name))
    return sorted(out)


@dataclass(frozen=True)
class Model:
    """A loaded model: its structure-only proto, where it came from, and its graph."""

    proto: onnx.ModelProto = field(repr=False)
    path: str | None
    base_dir: str | None
    nodes: tuple[NodeFields, ...] | None = field(default=None, repr=False, compare=False)
    """The main graph's node fields as the loader read them (None: read on first use, :attr:`node_fields`)."""

    @functools.cached_property
    def node_fields(self) -> tuple[NodeFields, ...]:
        """``read_node_fields(proto.graph)``, read once: validation, the shapes pass and the Graph take them from
        here instead of each reading every node's fields from protobuf again."""
        return self.nodes if self.nodes is not None else read_node_fields(self.proto.graph)

    @property
    def opsets(self) -> dict[str, int]:
        return {(o.domain or "ai.onnx"): int(o.version) for o in self.proto.opset_import}

    @property
    def producer(self) -> str:
        p = self.proto
        return f"{p.producer_name} {p.producer_version}".strip()

    def graph(self) -> Graph:
        """The graph as stored in the file (shapes only where the file declares them)."""
        return Graph(self.proto.graph, _opset_lookup(self.proto), base_dir=self.base_dir, fields=self.node_fields)


def _opset_lookup(proto: onnx.ModelProto) -> dict[str, int]:
    out: dict[str, int] = {}
    for o in proto.opset_import:
        out[o.domain] = int(o.version)
        if o.domain == "":
            out["ai.onnx"] = int(o.version)
    return out


def opset_lookup(proto: onnx.ModelProto) -> dict[str, int]:
    return _opset_lookup(proto)


def load(source: str | os.PathLike[str] | onnx.ModelProto | bytes) -> Model:
    """Load a model's structure from a path, serialized bytes or an in-memory ModelProto."""
    if isinstance(source, onnx.ModelProto):
        proto = onnx.ModelProto()
        proto.CopyFrom(source)
        _check(proto, "<ModelProto>")
        return _model(proto, _as_text(proto), "<ModelProto>", None, None)
    if isinstance(source, (bytes, bytearray)):
        proto = onnx.ModelProto()
        try:
            proto.ParseFromString(bytes(source))
        except Exception as e:
            raise LoadError(f"<bytes>: not an ONNX model ({_first_line(e)})") from None
        _check(proto, "<bytes>")
        return _model(proto, _as_text(proto), "<bytes>", None, None)

    path = os.fspath(source)
    shown = display_path(path)
    try:
        mode = os.stat(path).st_mode  # follows symlinks: a link to a regular file is fine
    except (FileNotFoundError, NotADirectoryError):
        raise LoadError(f"{shown}: no such file") from None
    except PermissionError:
        raise LoadError(f"{shown}: permission denied") from None
    except OSError as e:
        raise LoadError(f"{shown}: cannot read ({e.strerror or e})") from None
    except ValueError:  # an embedded NUL byte
        raise LoadError(f"{shown}: not a valid file name (NUL byte)") from None
    kind = _scan.file_kind(mode)
    if kind is not None:  # a FIFO would block the open, a device never ends: refused before any open
        raise LoadError(f"{shown}: is {kind}, not a regular ONNX file")
    if not os.access(path, os.R_OK):
        raise LoadError(f"{shown}: permission denied")
    real = os.path.realpath(path)
    base_dir = os.path.dirname(real)
    try:
        proto = _scan.load_structure(real)
    except _scan.ScanError as e:
        raise LoadError(f"{shown}: {_first_line(e)}") from None
    except OSError as e:
        raise LoadError(f"{shown}: cannot read ({e.strerror or e})") from None
    _check(proto, shown)
    fields = _as_text(proto)
    _check_external(proto, shown, base_dir, _scan.own_location(real), fields)
    return _model(proto, fields, shown, path, base_dir)


def _model(proto: onnx.ModelProto, fields: tuple[NodeFields, ...], where: str, path: str | None,
           base_dir: str | None) -> Model:
    """The Model, its local functions inlined; the node fields read by the text check go with it when inlining
    left the nodes as they were."""
    inlined = _inline(proto, where)
    if inlined is not proto or any(f.graphs for f in fields):  # values are typed by name: one name, one scope
        separate_scopes(inlined.graph)
    return Model(inlined, path, base_dir, fields if inlined is proto else None)


def model_text(value: str | bytes) -> str:
    """Text from a model as valid UTF-8: bytes that are not UTF-8 and lone surrogates as backslash escapes
    (``b"Z\\xffz"`` → ``"Z\\\\xffz"``). Idempotent on valid text."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


def clean_strings(message: Any) -> int:
    """Rewrite, in place, every string field of ``message`` (recursively) that is not UTF-8 as escaped text
    (:func:`model_text`); returns how many fields were rewritten.

    protobuf hands a string field that is not UTF-8 over as ``bytes``, which no report, JSON writer or name lookup
    expects. The rewrite is a function of the bytes, so names that referred to each other still do. ``bytes``
    fields (``AttributeProto.s``, tensor payloads) are data and left alone.
    """
    fixed = 0
    for fd, value in message.ListFields():
        if fd.type == fd.TYPE_STRING:
            if _repeated(fd):
                if any(isinstance(v, bytes) for v in value):
                    clean = [model_text(v) for v in value]
                    del value[:]
                    value.extend(clean)
                    fixed += 1
            elif isinstance(value, bytes):
                setattr(message, fd.name, model_text(value))
                fixed += 1
        elif fd.type == fd.TYPE_MESSAGE:
            if fd.message_type.GetOptions().map_entry:
                continue  # no map fields in onnx.proto; a map would need its keys rebuilt
            for m in (value if _repeated(fd) else (value,)):
                fixed += clean_strings(m)
    return fixed


def _repeated(fd: Any) -> bool:
    is_repeated = getattr(fd, "is_repeated", None)  # protobuf ≥ 6; older ones only have ``label``
    return bool(is_repeated) if is_repeated is not None else fd.label == fd.LABEL_REPEATED


def _as_text(proto: onnx.ModelProto) -> tuple[NodeFields, ...]:
    """Make every string of a freshly parsed proto valid text (:func:`clean_strings`), walking the whole message
    only when a cheap look at the strings graphcost reads most finds raw bytes: the full walk costs about 0.5 s on
    a 100k-node graph (bench/data/synthetic-100k.onnx). Returns the main graph's node fields: the look at its nodes
    is their read (:func:`~graphcost.graph.read_node_fields`, which refuses bytes)."""
    try:
        fields: tuple[NodeFields, ...] | None = read_node_fields(proto.graph)
    except TypeError:  # a node's name, op type, domain, input or output is bytes: not UTF-8
        fields = None
    if fields is None or proto.functions or _raw_bytes_in(proto.graph, fields) \
            or type(proto.producer_name) is bytes or type(proto.producer_version) is bytes \
            or any(type(o.domain) is bytes for o in proto.opset_import):
        clean_strings(proto)
        fields = read_node_fields(proto.graph)
    return fields


def _raw_bytes_in(graph: onnx.GraphProto, fields: Sequence[NodeFields]) -> bool:
    """Whether a string the look reads is bytes, in the main graph (its nodes' ``fields``, read as text already) and
    in every subgraph of every node (``graph_protos``: GRAPH and GRAPHS attributes of any op; a subgraph the look
    skipped reached validation with bytes in it). It reads graph names, value names, and each node's name, op
    type, domain and tensor names; attribute names are not looked at (a bytes attribute name is only never
    matched, it breaks nothing)."""
    if _raw_names_in(graph):
        return True
    if not any(f.graphs for f in fields):
        return False
    subgraphs = graph_protos(graph)
    next(subgraphs)  # the main graph itself, looked at above
    return any(_raw_names_in(g) or _raw_nodes_in(g) for g in subgraphs)


def _raw_names_in(graph: onnx.GraphProto) -> bool:
    return type(graph.name) is bytes or any(
        type(vi.name) is bytes for vi in (*graph.input, *graph.output, *graph.value_info, *graph.initializer))


def _raw_nodes_in(graph: onnx.GraphProto) -> bool:
    return any(type(n.op_type) is bytes or type(n.name) is bytes or type(n.domain) is bytes
               or any(type(x) is bytes for x in n.input) or any(type(x) is bytes for x in n.output)
               for n in graph.node)


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0]


def _check(proto: onnx.ModelProto, where: str) -> None:
    """Reject protobufs that parsed but are not models (random bytes often parse as *something*)."""
    if not proto.HasField("graph"):
        raise LoadError(f"{where}: not an ONNX model (no graph)")
    if proto.ir_version <= 0 or proto.ir_version > 64:
        raise LoadError(f"{where}: not an ONNX model (ir_version {proto.ir_version})")
    if not proto.opset_import and proto.ir_version >= 3:
        raise LoadError(f"{where}: not an ONNX model (no opset_import)")
    if len(proto.graph.node) == 0 and len(proto.graph.output) == 0:
        raise LoadError(f"{where}: ONNX graph is empty (no nodes, no outputs)")


def _iter_tensors(graph: onnx.GraphProto, fields: Sequence[NodeFields] | None = None
                  ) -> Iterator[onnx.TensorProto]:
    """Every TensorProto a graph holds: initializers (sparse ones too) and node attributes, subgraphs included.
    ``fields``: the graph's node fields, so that only the nodes with attributes are read again."""
    yield from graph.initializer
    for s in graph.sparse_initializer:
        yield s.values
        yield s.indices
    nodes = graph.node
    yield from _node_tensors(nodes if fields is None else (nodes[i] for i, f in enumerate(fields) if f.attributes))


def _node_tensors(nodes: Iterable[onnx.NodeProto]) -> Iterator[onnx.TensorProto]:
    for node in nodes:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                yield a.t
            elif a.type == onnx.AttributeProto.TENSORS:
                yield from a.tensors
            elif a.type == onnx.AttributeProto.SPARSE_TENSOR:
                yield a.sparse_tensor.values
                yield a.sparse_tensor.indices
            elif a.type == onnx.AttributeProto.SPARSE_TENSORS:
                for st in a.sparse_tensors:
                    yield st.values
                    yield st.indices
            elif a.type == onnx.AttributeProto.GRAPH:
                yield from _iter_tensors(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    yield from _iter_tensors(g)


def external_refs(proto: onnx.ModelProto, fields: Sequence[NodeFields] | None = None
                  ) -> Iterator[tuple[onnx.TensorProto, dict[str, str]]]:
    """Each externally stored tensor of the model (graph, local functions, training graphs) with its entries;
    ``fields``: the main graph's node fields when the caller has them (:func:`_iter_tensors`)."""
    tensors: list[Iterable[onnx.TensorProto]] = [_iter_tensors(proto.graph, fields)]
    tensors += [_node_tensors(f.node) for f in proto.functions]
    tensors += [_iter_tensors(g) for ti in proto.training_info for g in (ti.initialization, ti.algorithm)]
    for group in tensors:
        for t in group:
            if t.data_location == onnx.TensorProto.EXTERNAL:
                yield t, {e.key: e.value for e in t.external_data}


def _check_external(proto: onnx.ModelProto, shown: str, base_dir: str, own_location: str,
                    fields: Sequence[NodeFields]) -> None:
    """External data must stay in the model's folder, be regular files and be long enough; it is never read."""
    sizes: dict[str, int] = {}
    for t, info in external_refs(proto, fields):
        location = info.get("location", "")
        if not location:
            raise LoadError(f"{shown}: tensor {t.name!r} is external but names no file")
        if location == own_location:
            continue  # a payload the scanner left in the model file itself
        target = external_data_path(base_dir, location, model=shown, tensor=t.name)  # before any size is taken
        if target not in sizes:
            try:
                sizes[target] = os.stat(target).st_size
            except OSError as e:
                raise LoadError(f"{shown}: external data file {location!r} cannot be read "
                                f"({e.strerror or e}) (tensor {t.name!r})") from None
        try:
            end = int(info.get("offset", "0") or 0) + int(info.get("length", "0") or 0)
        except ValueError:
            raise LoadError(f"{shown}: tensor {t.name!r}: external data offset/length is not a number") from None
        if "length" in info and end > sizes[target]:
            raise LoadError(f"{shown}: external data file {location!r} is truncated "
                            f"(tensor {t.name!r} needs bytes up to {end}, file has {sizes[target]})")


def _inline(proto: onnx.ModelProto, where: str) -> onnx.ModelProto:
    """Inline model-local functions so their bodies are costed node by node."""
    if not proto.functions:
        return proto
    try:
        import onnx.inliner

        return onnx.inliner.inline_local_functions(proto)
    except Exception as e:
        raise LoadError(f"{where}: cannot inline local functions ({_first_line(e)})") from None
