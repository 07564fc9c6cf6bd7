"""File → Model: structure only, weights untouched.

Embedded weight payloads are skipped by the wire scanner (``_scan``) and replaced with offset
references into the original file, so a 1.6 GB model costs a few MB to load; external-data files are
never read, only checked to exist and be long enough. Bad input raises :class:`LoadError` with one
line that names the file and the problem. The input file is opened read-only and never written.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import onnx

from graphcost import _scan
from graphcost.graph import Graph


class LoadError(Exception):
    """A model that cannot be read; the message is one line naming the file and the problem."""


@dataclass(frozen=True)
class Model:
    """A loaded model: its structure-only proto, where it came from, and its graph."""

    proto: onnx.ModelProto = field(repr=False)
    path: str | None
    base_dir: str | None

    @property
    def opsets(self) -> dict[str, int]:
        return {(o.domain or "ai.onnx"): int(o.version) for o in self.proto.opset_import}

    @property
    def producer(self) -> str:
        p = self.proto
        return f"{p.producer_name} {p.producer_version}".strip()

    def graph(self) -> Graph:
        """The graph as stored in the file (shapes only where the file declares them)."""
        return Graph(self.proto.graph, _opset_lookup(self.proto), base_dir=self.base_dir)


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
        return Model(_inline(proto, "<ModelProto>"), None, None)
    if isinstance(source, (bytes, bytearray)):
        proto = onnx.ModelProto()
        try:
            proto.ParseFromString(bytes(source))
        except Exception as e:
            raise LoadError(f"<bytes>: not an ONNX model ({_first_line(e)})") from None
        _check(proto, "<bytes>")
        return Model(_inline(proto, "<bytes>"), None, None)

    path = os.fspath(source)
    if not os.path.exists(path):
        raise LoadError(f"{path}: no such file")
    if os.path.isdir(path):
        raise LoadError(f"{path}: is a directory, not an ONNX file")
    if not os.access(path, os.R_OK):
        raise LoadError(f"{path}: permission denied")
    real = os.path.realpath(path)
    base_dir = os.path.dirname(real)
    try:
        proto = _scan.load_structure(real)
    except _scan.ScanError as e:
        raise LoadError(f"{path}: {_first_line(e)}") from None
    except OSError as e:
        raise LoadError(f"{path}: cannot read ({e.strerror or e})") from None
    _check(proto, path)
    _check_external(proto, path, base_dir, os.path.basename(real))
    return Model(_inline(proto, path), path, base_dir)


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


def _iter_tensors(graph: onnx.GraphProto):  # type: ignore[no-untyped-def]
    yield from graph.initializer
    for node in graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                yield a.t
            elif a.type == onnx.AttributeProto.GRAPH:
                yield from _iter_tensors(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    yield from _iter_tensors(g)


def _check_external(proto: onnx.ModelProto, path: str, base_dir: str, own_name: str) -> None:
    """External data must exist and be long enough; it is never read."""
    sizes: dict[str, int] = {}
    for t in _iter_tensors(proto.graph):
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in t.external_data}
        location = info.get("location", "")
        if not location:
            raise LoadError(f"{path}: tensor {t.name!r} is external but names no file")
        if location == own_name:
            continue  # a payload the scanner left in the model file itself
        target = os.path.normpath(os.path.join(base_dir, location))
        if target not in sizes:
            if not os.path.isfile(target):
                raise LoadError(f"{path}: missing external data file {location!r} (tensor {t.name!r})")
            sizes[target] = os.path.getsize(target)
        end = int(info.get("offset", "0") or 0) + int(info.get("length", "0") or 0)
        if "length" in info and end > sizes[target]:
            raise LoadError(f"{path}: external data file {location!r} is truncated "
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
