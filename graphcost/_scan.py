"""Read an ONNX file's structure without holding its large tensor payloads in memory.

Why: for embedded weights ``onnx.load`` reads the whole file and protobuf copies every payload, so a
1.6 GB model peaks at ~3 GB, although a cost analysis needs only nodes, attributes, graph I/O,
value_info and each initializer's name, dims and dtype. This module walks the protobuf wire format
with buffered ``read``/``seek`` and copies every byte range except large tensor payloads; each one it
skips becomes an external-data reference into the *original* file. The result is a small, valid
ModelProto whose tensors can still be fetched one at a time (measured design:
``shared/research/parse-floor.md``: ~15 ms and ~2 MiB for GPT-2-medium).

Descent table (field numbers checked against ``onnx/onnx.proto``, onnx 1.23): only the
length-delimited fields below can contain a tensor, and only sub-messages longer than ``keep_bytes``
can hold a payload longer than it, so everything else is copied verbatim without being parsed::

    ModelProto         graph 7, training_info 20, functions 25
    GraphProto         node 1, initializer 5, sparse_initializer 15
    NodeProto          attribute 5
    AttributeProto     t 5, g 6, tensors 10, graphs 11, sparse_tensor 22, sparse_tensors 23
    FunctionProto      node 7, attribute_proto 11
    SparseTensorProto  values 1, indices 2
    TrainingInfoProto  initialization 1, algorithm 2

How a stripped payload is recorded (``TensorProto.external_data``, ``data_location = EXTERNAL``;
``location`` is the basename of the file's real path, ``offset``/``length`` are absolute; a basename that is
not UTF-8 cannot be a protobuf string, so it is written as :data:`OWN_FILE_PREFIX` + its percent-encoded bytes,
see :func:`own_location`):

- **no** ``encoding`` **key** - one packed ``raw_data``, ``float_data`` or ``double_data`` field: the
  range holds its payload bytes, which are fixed-width little-endian exactly as ``raw_data`` would
  be, so onnx's own loaders (``load_external_data_for_tensor``, ``numpy_helper.to_array``) read it.
- ``encoding = tensorproto-fields`` - every other payload (varint-packed ``int32_data``,
  ``int64_data``, ``uint64_data``; ``string_data``; unpacked or split repeated fields): the range
  holds the payload's TensorProto wire records, tags included, as they stand in the file. Parsed as a
  TensorProto they give the payload back, so no new decoder is needed. onnx does not know this key:
  it warns "Ignoring unknown external data key(s) ['encoding']" and would read those bytes as
  ``raw_data``, i.e. garbage. Fetch them through :func:`read_external_payload`.

Files: every open goes through :func:`open_regular` (non-blocking, then ``fstat``: a FIFO, device,
socket or directory is refused before a byte is read, so a named pipe cannot hang the scan), and every
external-data ``location`` is resolved by :func:`resolve_location`, which keeps it inside the model's folder.

Limits: payload records of one tensor that are not contiguous in the file (no known writer does
that) are kept in full; tensors already stored externally pass through unchanged; large fields
outside the table (a huge ``doc_string``, unknown fields) are copied; wire groups are rejected.
"""

from __future__ import annotations

import enum
import os
import re
import stat
import urllib.parse
from typing import BinaryIO, Final, NoReturn

import numpy as np
import onnx
from google.protobuf.message import DecodeError

__all__ = ["ENCODING_KEY", "FIELDS_ENCODING", "ScanError", "load_structure", "read_external_payload", "read_structure"]

ENCODING_KEY: Final = "encoding"
"""The external_data key this module adds when a stripped payload is not raw little-endian bytes."""
FIELDS_ENCODING: Final = "tensorproto-fields"
"""Its value: the referenced bytes are TensorProto wire records (tags included) holding the payload."""

OWN_FILE_PREFIX: Final = "graphcost-fsencoded:"
"""A ``location`` naming the model's own file by its percent-encoded bytes (a basename that is not UTF-8)."""

_BUFFER: Final = 64 * 1024  # read window when scanning on; the page cache behind it never counts towards our RSS
_PROBE: Final = 4 * 1024  # read window after a jump past a payload: usually one tensor header, then another jump
_MAX_DEPTH: Final = 100  # protobuf's own default recursion limit; deeper nesting is hostile input


class ScanError(ValueError):
    """The file cannot be read as an ONNX model. The message is one line, meant for a human."""


# -- files ------------------------------------------------------------------------------------------------------
_KINDS: Final = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"),
                 (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))
_DRIVE: Final = re.compile(r"^[A-Za-z]:")  # C:foo, C:\foo: a Windows drive, absolute or not, is never inside the folder


def file_kind(mode: int) -> str | None:
    """None for a regular file; otherwise what ``mode`` (``st_mode``) describes, for an error message."""
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """``path`` opened read-only, unbuffered, refused with :class:`ScanError` unless it is a regular file.

    ``O_NONBLOCK`` makes opening a FIFO return at once instead of waiting for a writer; ``fstat`` on the opened
    descriptor then decides, so a file swapped for a pipe or device after an earlier ``stat`` is still caught.
    Symlinks are followed: a link to a regular file is a regular file. ``OSError`` if it cannot be opened.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags)
    try:
        kind = file_kind(os.fstat(fd).st_mode)
        if kind is not None:
            raise ScanError(f"is {kind}, not a regular file")
        return os.fdopen(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise


def own_location(real_path: str) -> str:
    """The ``location`` that names the model file ``real_path`` itself: its basename, or, when that is not UTF-8
    (a protobuf string must be), :data:`OWN_FILE_PREFIX` and the basename's percent-encoded bytes."""
    name = os.path.basename(real_path)
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return OWN_FILE_PREFIX + urllib.parse.quote(os.fsencode(name), safe="")
    return name


def resolve_location(base_dir: str, location: str | bytes) -> str:
    """The real path of the external-data file ``location`` of a model in ``base_dir``, confined to that folder.

    Refused with :class:`ScanError`, in this order and before the target is opened or measured: a location
    that is not UTF-8 text (upb returns such a proto2 string as ``bytes``), an empty one, a NUL byte, an
    absolute path or a Windows drive, any ``..`` component (``/`` or ``\\``), a path whose real path (symlinks
    resolved) is not inside the real ``base_dir``, and a target that is not a regular file. Only the last two
    look at the disk, and only inside the folder: nothing in a message tells the size or the existence of a
    file outside it (onnx and onnxruntime refuse the same locations).
    """
    shown = repr(location)
    if not isinstance(location, str):  # upb hands a proto2 string that is not UTF-8 over as bytes
        raise ScanError(f"external data location {shown} is not UTF-8 text")
    if location.startswith(OWN_FILE_PREFIX):
        location = os.fsdecode(urllib.parse.unquote_to_bytes(location[len(OWN_FILE_PREFIX):]))
    if not location:
        raise ScanError("external data location is empty")
    if "\0" in location:
        raise ScanError(f"external data location {shown} contains a NUL byte")
    if os.path.isabs(location) or location.startswith(("/", "\\")) or _DRIVE.match(location):
        raise ScanError(f"external data location {shown} is an absolute path, not relative to the model's folder")
    if ".." in re.split(r"[/\\]", location):
        raise ScanError(f"external data location {shown} has a '..' component; it must stay in the model's folder")
    folder = os.path.realpath(base_dir)
    target = os.path.realpath(os.path.join(folder, location))
    try:
        inside = os.path.commonpath([folder, target]) == folder
    except ValueError:  # Windows: another drive
        inside = False
    if not inside:
        raise ScanError(f"external data location {shown} resolves outside the model's folder")
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        raise ScanError(f"missing external data file {shown}") from None
    except OSError as e:
        raise ScanError(f"external data file {shown} cannot be read ({e.strerror or e})") from None
    kind = file_kind(mode)
    if kind is not None:
        raise ScanError(f"external data location {shown} is {kind}, not a regular file")
    return target


class _Msg(enum.Enum):
    MODEL = "ModelProto"
    GRAPH = "GraphProto"
    NODE = "NodeProto"
    ATTRIBUTE = "AttributeProto"
    FUNCTION = "FunctionProto"
    SPARSE = "SparseTensorProto"
    TRAINING = "TrainingInfoProto"
    TENSOR = "TensorProto"


_CHILDREN: Final[dict[_Msg, dict[int, _Msg]]] = {
    _Msg.MODEL: {7: _Msg.GRAPH, 20: _Msg.TRAINING, 25: _Msg.FUNCTION},
    _Msg.GRAPH: {1: _Msg.NODE, 5: _Msg.TENSOR, 15: _Msg.SPARSE},
    _Msg.NODE: {5: _Msg.ATTRIBUTE},
    _Msg.ATTRIBUTE: {5: _Msg.TENSOR, 6: _Msg.GRAPH, 10: _Msg.TENSOR, 11: _Msg.GRAPH, 22: _Msg.SPARSE, 23: _Msg.SPARSE},
    _Msg.FUNCTION: {7: _Msg.NODE, 11: _Msg.ATTRIBUTE},
    _Msg.SPARSE: {1: _Msg.TENSOR, 2: _Msg.TENSOR},
    _Msg.TRAINING: {1: _Msg.GRAPH, 2: _Msg.GRAPH},
}

# TensorProto fields. Payloads: float_data 4, int32_data 5, string_data 6, int64_data 7, raw_data 9,
# double_data 10, uint64_data 11. Of those, raw, float and double are fixed-width little-endian when packed.
_PAYLOAD_FIELDS: Final = frozenset({4, 5, 6, 7, 9, 10, 11})
_RAW_LAYOUT_FIELDS: Final = frozenset({4, 9, 10})
_EXTERNAL_DATA_FIELD: Final = 13
_DATA_LOCATION_FIELD: Final = 14
_EXTERNAL: Final = 1  # TensorProto.DataLocation.EXTERNAL
_DATA_LOCATION_EXTERNAL_RECORD: Final = bytes([_DATA_LOCATION_FIELD << 3, _EXTERNAL])  # varint field 14 = 1

_MODEL_IR_VERSION: Final = 1
_MODEL_GRAPH: Final = 7
_MODEL_FUNCTIONS: Final = 25


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _record(field: int, body: bytes) -> bytes:
    """One length-delimited field: tag, length, body."""
    return _varint_bytes(field << 3 | 2) + _varint_bytes(len(body)) + body


def _entry(key: str, value: str) -> bytes:
    """One ``TensorProto.external_data`` record: a StringStringEntryProto (key 1, value 2)."""
    return _record(_EXTERNAL_DATA_FIELD, _record(1, key.encode()) + _record(2, value.encode()))


_FIELDS_ENCODING_ENTRY: Final = _entry(ENCODING_KEY, FIELDS_ENCODING)


class _Scanner:
    """One pass over one file. Positions are absolute file offsets; ``_buf`` is a window starting at ``_base``."""

    def __init__(self, f: BinaryIO, size: int, keep: int, location: str) -> None:
        self._f = f
        self._size = size
        self._keep = keep
        # StringStringEntryProto records (key 1, value 2) under TensorProto.external_data, the same for every tensor.
        self._location_entry = _entry("location", location)
        self._buf = b""
        self._base = 0
        self.reads = 0
        self.stripped = 0
        # An ONNX writer emits fields in number order, so a real model starts with ir_version's tag (0x08).
        # Whether a file that breaks off looks "truncated" or "not ONNX at all" hangs on that first byte.
        self._plausible = self._read(0, 1) == b"\x08"
        self.top_fields: list[tuple[int, int, int]] = []  # (field, wire type, offset) at the top level

    # -- low-level reading ------------------------------------------------------------------------------
    def _window(self, pos: int, need: int) -> int:
        """Index of ``pos`` in ``_buf``, refilled so ``need`` bytes (or all up to the file end) are there."""
        rel = pos - self._base
        have = len(self._buf)
        if rel < 0 or (rel + need > have and self._base + have < self._size):
            self._f.seek(pos)
            self._buf = self._f.read(max(need, _BUFFER if 0 <= rel <= have else _PROBE))
            self._base = pos
            self.reads += 1
            rel = 0
        return rel

    def _read(self, start: int, end: int) -> bytes:
        """The file's bytes ``[start, end)``: from the window when there, else with one read."""
        n = end - start
        if n <= 0:
            return b""
        rel = start - self._base
        if rel < 0 or end - self._base > len(self._buf):
            if n <= _BUFFER:
                rel = self._window(start, n)
            else:  # a long verbatim run: read it directly rather than through the window
                self._f.seek(start)
                data = self._f.read(n)
                self.reads += 1
                if len(data) != n:
                    self._fail(f"file shrank while reading: wanted {n} bytes at offset {start}", truncated=True)
                return data
        data = self._buf[rel : rel + n]
        if len(data) != n:
            self._fail(f"{n} bytes wanted at offset {start} but the file ends at {self._size}", truncated=True)
        return data

    def _varint(self, pos: int, end: int) -> tuple[int, int]:
        """Decode a varint at ``pos`` that must end by ``end``; returns (value, position after it)."""
        buf = self._buf
        rel = pos - self._base
        if rel < 0 or rel + 10 > len(buf):
            rel = self._window(pos, 10)
            buf = self._buf
        byte = buf[rel] if rel < len(buf) else 0x80
        if byte < 0x80 and pos < end:  # fast path: tags and short lengths are one byte
            return byte, pos + 1
        result = 0
        shift = 0
        while True:
            if rel >= len(buf) or self._base + rel >= end:
                self._overrun(f"varint at offset {pos}", end)
            byte = buf[rel]
            rel += 1
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                return result, self._base + rel
            shift += 7
            if shift >= 70:
                self._fail(f"varint longer than 10 bytes at offset {pos}")

    # -- errors -------------------------------------------------------------------------------------------
    def _fail(self, detail: str, truncated: bool = False) -> NoReturn:
        if truncated and self._plausible:
            raise ScanError(f"truncated: {detail}")
        raise ScanError(f"not an ONNX model: {detail}")

    def _overrun(self, what: str, end: int) -> NoReturn:
        if end >= self._size:
            self._fail(f"{what} runs past the end of the file at {self._size}", truncated=True)
        self._fail(f"{what} runs past the end of its enclosing message at {end}")

    def _claim(self, field: int, n: int, offset: int, end: int) -> NoReturn:
        if end >= self._size:
            self._fail(f"field {field} claims {n} bytes at offset {offset} but the file ends at {self._size}", True)
        self._fail(f"field {field} claims {n} bytes at offset {offset} but its message ends at {end}")

    def _bad_wire(self, wire: int, offset: int) -> NoReturn:
        if wire in (3, 4):
            self._fail(f"protobuf group (wire type {wire}) at byte {offset}; ONNX uses none")
        self._fail(f"invalid wire type {wire} at byte {offset}")

    # -- messages -----------------------------------------------------------------------------------------
    def message(self, start: int, end: int, kind: _Msg, depth: int) -> bytearray:
        """Copy ``[start, end)`` as message ``kind``, descending only where a large payload can hide.

        Verbatim fields accumulate into one pending span (``span``..current field) that is copied with a
        single read when a field needs rewriting or the message ends.
        """
        if depth > _MAX_DEPTH:
            self._fail(f"messages nested deeper than {_MAX_DEPTH} at byte {start}")
        children = _CHILDREN[kind]
        keep = self._keep
        out = bytearray()
        span = start
        pos = start
        while pos < end:
            field_start = pos
            tag, pos = self._varint(pos, end)
            field, wire = tag >> 3, tag & 7
            if field == 0:
                self._fail(f"field number 0 at byte {field_start}")
            if depth == 0:
                self.top_fields.append((field, wire, field_start))
            if wire == 2:
                n, pos = self._varint(pos, end)
                body_end = pos + n
                if body_end > end:
                    self._claim(field, n, pos, end)
                child = children.get(field)
                if child is not None and n > keep:
                    out += self._read(span, field_start)
                    if child is _Msg.TENSOR:
                        sub = self.tensor(pos, body_end)
                    else:
                        sub = self.message(pos, body_end, child, depth + 1)
                    out += _varint_bytes(tag)
                    out += _varint_bytes(len(sub))
                    out += sub
                    span = body_end
                pos = body_end
            elif wire == 0:
                pos = self._varint(pos, end)[1]
            elif wire == 1:
                pos += 8
            elif wire == 5:
                pos += 4
            else:
                self._bad_wire(wire, field_start)
            if pos > end:
                self._overrun(f"field {field} at byte {field_start}", end)
        out += self._read(span, end)
        return out

    def tensor(self, start: int, end: int) -> bytes | bytearray:
        """Copy a TensorProto, replacing its payload records by an external-data reference if they are long.

        Only a few numbers per tensor are kept (not one entry per record), so a tensor written as a million
        unpacked records costs time but no memory.
        """
        external = False
        prefix = b""  # the fields before the first payload record, read while they are still in the window
        count = 0  # payload records seen
        first = last = 0  # span of the payload records: first tag .. end of the last body
        total = 0  # their summed length; equals last - first when nothing else sits between them
        field0 = wire0 = body0 = 0  # the first payload record, for the raw fast path
        pos = start
        while pos < end:
            field_start = pos
            tag, pos = self._varint(pos, end)
            field, wire = tag >> 3, tag & 7
            if field == 0:
                self._fail(f"field number 0 at byte {field_start}")
            body = pos
            if wire == 2:
                n, body = self._varint(pos, end)
                pos = body + n
                if pos > end:
                    self._claim(field, n, body, end)
            elif wire == 0:
                value, pos = self._varint(pos, end)
                if field == _DATA_LOCATION_FIELD:
                    external = value == _EXTERNAL
            elif wire == 1:
                pos += 8
            elif wire == 5:
                pos += 4
            else:
                self._bad_wire(wire, field_start)
            if pos > end:
                self._overrun(f"field {field} at byte {field_start}", end)
            if field in _PAYLOAD_FIELDS:
                if count == 0:
                    first, field0, wire0, body0 = field_start, field, wire, body
                    prefix = self._read(start, first)
                count += 1
                last = pos
                total += pos - field_start
        if external or total <= self._keep or total != last - first:
            return self._read(start, end)  # small, already external, or interleaved: keep as is
        out = bytearray(prefix)
        out += self._read(last, end)
        out += self._location_entry
        if count == 1 and wire0 == 2 and field0 in _RAW_LAYOUT_FIELDS:  # the payload bytes themselves
            out += _entry("offset", str(body0))
            out += _entry("length", str(last - body0))
        else:  # the records, tags included
            out += _entry("offset", str(first))
            out += _entry("length", str(last - first))
            out += _FIELDS_ENCODING_ENTRY
        out += _DATA_LOCATION_EXTERNAL_RECORD  # after any DEFAULT already there: the last value wins
        self.stripped += 1
        return out

    def check_model_shape(self) -> None:
        """Reject what scanned cleanly but is no model: random bytes often form valid protobuf by chance."""
        for field, wire, offset in self.top_fields:
            if field == _MODEL_IR_VERSION and wire != 0:
                self._fail(f"ir_version (field 1) at byte {offset} has wire type {wire}, not a varint")
        if not any(f in (_MODEL_GRAPH, _MODEL_FUNCTIONS) and w == 2 for f, w, _ in self.top_fields):
            self._fail("no graph (field 7) or functions (field 25) at the top level")


def read_structure(path: str | os.PathLike[str], keep_bytes: int = 1024) -> bytes:
    """Serialized ModelProto of ``path`` with every tensor payload longer than ``keep_bytes`` left in the file.

    Stripped payloads become external-data references (see the module docstring) whose ``location`` is
    :func:`own_location` of ``os.path.realpath(path)``: resolve them against that real file's directory, since
    onnx refuses external data reached through a symlink. Raises :class:`ScanError` for a file that is
    not a regular file or not an ONNX model, and ``OSError`` if it cannot be opened.
    """
    if keep_bytes < 0:
        raise ValueError(f"keep_bytes must be >= 0, got {keep_bytes}")
    real = os.path.realpath(path)
    with open_regular(real) as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            raise ScanError("empty file")
        scanner = _Scanner(f, size, keep_bytes, own_location(real))
        out = scanner.message(0, size, _Msg.MODEL, 0)
        scanner.check_model_shape()
    return bytes(out)


def load_structure(path: str | os.PathLike[str], keep_bytes: int = 1024) -> onnx.ModelProto:
    """:func:`read_structure`, parsed. Protobuf's own rejections become :class:`ScanError` too."""
    data = read_structure(path, keep_bytes)
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except DecodeError as e:
        detail = " ".join(str(e).split()) or type(e).__name__
        raise ScanError(f"not an ONNX model: protobuf cannot parse it ({detail})") from e
    return model


def read_external_payload(tensor: onnx.TensorProto, base_dir: str) -> np.ndarray:
    """The values of one tensor, fetching its payload from disk if it is stored externally.

    Handles this module's two encodings as well as ordinary external data (and embedded tensors, which
    are simply converted). ``base_dir`` is the directory of the model's real path; the file is found with
    :func:`resolve_location` (confined to that folder) and opened with :func:`open_regular`, so a hostile
    location never reaches outside the folder, a pipe or a device. Reads only this tensor's bytes; the input
    proto is not modified. Raises :class:`ScanError` with one line naming the tensor.
    """
    if not onnx.external_data_helper.uses_external_data(tensor):
        return onnx.numpy_helper.to_array(tensor)
    info = {e.key: e.value for e in tensor.external_data}  # the last value of a repeated key wins, as in onnx
    encoding = info.get(ENCODING_KEY)
    if encoding not in (None, FIELDS_ENCODING):
        raise ScanError(f"tensor {tensor.name!r}: unknown external_data {ENCODING_KEY} {encoding!r}")
    try:
        offset = int(info.get("offset") or 0)
        length = int(info["length"]) if info.get("length") else None
    except ValueError:
        raise ScanError(f"tensor {tensor.name!r}: external data offset/length is not a number") from None
    if offset < 0 or (length is not None and length < 0):
        raise ScanError(f"tensor {tensor.name!r}: negative external data offset/length")
    try:
        path = resolve_location(base_dir, info.get("location", ""))
    except ScanError as e:
        raise ScanError(f"tensor {tensor.name!r}: {e}") from None
    try:
        with open_regular(path) as f:
            size = os.fstat(f.fileno()).st_size
            end = size if length is None else offset + length
            if end > size or offset > size:
                raise ScanError(f"tensor {tensor.name!r}: external data needs bytes up to {end}, "
                                f"its file has {size}")
            f.seek(offset)
            data = f.read(end - offset)
    except OSError as e:
        raise ScanError(f"tensor {tensor.name!r}: cannot read its external data ({e.strerror or e})") from None
    loaded = onnx.TensorProto()
    loaded.CopyFrom(tensor)
    loaded.data_location = onnx.TensorProto.DEFAULT
    del loaded.external_data[:]
    if encoding == FIELDS_ENCODING:
        try:
            loaded.MergeFromString(data)  # the payload records fill float_data, int64_data, string_data...
        except DecodeError as e:
            detail = " ".join(str(e).split()) or type(e).__name__
            raise ScanError(f"tensor {tensor.name!r}: external payload records do not parse ({detail})") from e
    else:
        loaded.raw_data = data  # the payload bytes, fixed-width little-endian exactly as raw_data holds them
    return onnx.numpy_helper.to_array(loaded)
