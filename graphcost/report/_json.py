"""The report's JSON writer: the bytes ``json.dumps`` writes, made faster where a report is large.

Node rows are written by :class:`Rows` (one format string per row with memoized value texts, indented or
compact), indented sections by :class:`Indented` (C encoder calls for the flat parts and for tables, a column
at a time), compact sections through C encoders made once (:func:`reused`), a batch of items per call
(:func:`stream`).
Infinities and NaNs outside ``nodes`` become null (:func:`finite`).

Why not ``json.dumps(..., indent=2)``: with an indent CPython (3.11) writes through its pure-Python encoder, a
generator per container and a chunk per value; Faster R-CNN's 2.3 MB report took 0.26 s that way on a loaded
machine, where its compact text (C encoder) took 0.05 s.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import chain, islice
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from operator import attrgetter, itemgetter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # report/model.py imports this module at run time
    from graphcost.report.model import NodeReport, TensorInfo

Number = int | float


COMPACT = json.JSONEncoder(separators=(",", ":"), check_circular=False)
"""``json.dumps(..., separators=(",", ":"))`` of one value, without building a JSONEncoder per call."""


def reused(encoder: json.JSONEncoder) -> Callable[[Any], str]:
    """``encoder.encode`` with its C encoder made once. ``encode`` makes a new one on every call, about 3.5 µs of
    the 8 µs a node row's dict took (measured); synthetic-100k writes ~150k fusion groups and boundaries. The C
    encoder is made with the arguments ``JSONEncoder.iterencode`` gives it, so the text is the same (a probe
    checks it); ``encoder.encode`` itself where this Python's cannot be made so."""
    try:
        made = c_make_encoder(None, encoder.default, encode_basestring_ascii, None, encoder.key_separator,
                              encoder.item_separator, encoder.sort_keys, encoder.skipkeys, encoder.allow_nan)
        probe: Any = {"a": [1, 2.5, None, "é", -0.0], "b": True}
        if "".join(made(probe, 0)) != encoder.encode(probe):
            return encoder.encode
    except TypeError:  # no C encoder (None), or another signature
        return encoder.encode
    return lambda value: "".join(made(value, 0))


def _strict(item_separator: str, key_separator: str) -> Callable[[Any], str]:
    """A C encoder with these separators that refuses inf and nan (ValueError), for the caller to write them."""
    return reused(json.JSONEncoder(separators=(item_separator, key_separator), allow_nan=False,
                                   check_circular=False))


compact = reused(COMPACT)
strict = _strict(",", ":")

SCALARS = frozenset({str, int, float, bool, type(None)})
"""Types whose text the C encoder and the pure-Python one write alike, with nothing inside to indent."""
_STR = frozenset({str})
_DICT = frozenset({dict})

SPLIT = "\x00"
"""An item separator no encoded value holds (strings escape control characters: ``\\u0000``), so a list of
values encoded with it splits back into each value's text. :class:`Rows` and :class:`Indented` use it."""
_CUT = "\x01"
"""Another character no encoded value holds: where :meth:`Indented._column` cuts its text into items."""
_values = _strict(SPLIT, ":")
_LIST = frozenset({list})


class Indented:
    """``json.dumps(value, indent=unit)`` of report data, as the text at depth ``level`` of an enclosing
    document, with :func:`finite`'s nulls (``nan=True``: inside ``nodes`` or a tuple, where ``finite`` leaves
    inf and nan to be written ``Infinity``/``NaN``).

    It writes what the pure-Python encoder writes, container by container: ``[]``/``{}`` when empty, else each
    item on its own line one level in, ``": "`` after keys. A container of scalars only goes through one C call
    (its item separator holds the newline and indent of its level); a list of dicts with the same keys (fusion
    groups and boundaries, the memory curve) a column at a time, a C call per key (:meth:`_table`). A value of
    another type goes to ``json.dumps`` itself (TypeError as before when it has no JSON form). Faster R-CNN's
    fusion and memory sections: 6.4 ms (thread time, best of 5, loaded machine).
    """

    def __init__(self, unit: str) -> None:
        self.unit = unit
        self._nl: list[str] = []
        self._flat: dict[int, Callable[[Any], str]] = {}
        self._split = _strict(SPLIT, ": ")
        self._keys: dict[str, str] = {}

    def nl(self, level: int) -> str:
        """A newline and ``level`` indents."""
        while len(self._nl) <= level:
            self._nl.append("\n" + self.unit * len(self._nl))
        return self._nl[level]

    def text(self, value: Any, level: int, nan: bool = False) -> str:
        """The text of ``value`` at depth ``level``."""
        out: list[str] = []
        self._write(value, level, nan, out)
        return "".join(out)

    def key(self, key: Any) -> str:
        """A dict key's text and its ``": "``. Keys that are not strings are written as ``json.dumps`` writes
        them (``1`` → ``"1"``)."""
        got = self._keys.get(key) if type(key) is str else None
        if got is None:
            got = (encode_basestring_ascii(key) if type(key) is str else json.dumps({key: None})[1:-7]) + ": "
            if type(key) is str:
                self._keys[key] = got
        return got

    def _write(self, value: Any, level: int, nan: bool, out: list[str]) -> None:
        kind = type(value)
        if kind is str:
            out.append(encode_basestring_ascii(value))
        elif value is None:
            out.append("null")
        elif value is True or value is False:
            out.append("true" if value else "false")
        elif kind is int:
            out.append(int.__repr__(value))
        elif kind is float:
            out.append(_float(value, nan))
        elif kind is dict or kind is list or kind is tuple:
            if not value:
                out.append("{}" if kind is dict else "[]")
            elif not self._flat_container(value, level, out):
                if kind is not list or not self._table(value, level, nan, out):
                    self._container(value, level, nan, out)
        else:  # subclasses of the JSON types, or a type without a JSON form
            out.append(json.dumps(value if nan else finite(value), indent=self.unit).replace("\n", self.nl(level)))

    def _flat_container(self, value: dict[Any, Any] | list[Any] | tuple[Any, ...], level: int,
                        out: list[str]) -> bool:
        """A container of scalars, in one C call; False when it holds anything else, or inf or nan."""
        if type(value) is dict:
            if not (_STR.issuperset(map(type, value)) and SCALARS.issuperset(map(type, value.values()))):
                return False
        elif not SCALARS.issuperset(map(type, value)):
            return False
        encode = self._flat.get(level)
        if encode is None:
            encode = self._flat[level] = _strict("," + self.nl(level + 1), ": ")
        try:
            text = encode(value)
        except ValueError:  # inf or nan: written item by item
            return False
        out.append(text[0] + self.nl(level + 1) + text[1:-1] + self.nl(level) + text[-1])
        return True

    def _table(self, rows: list[Any], level: int, nan: bool, out: list[str]) -> bool:
        """A list of dicts with the same keys (fusion groups and boundaries, the memory curve), a column at a
        time, then one format string per dict (:meth:`_column`); False when it is not one."""
        if not (_DICT.issuperset(map(type, rows)) and rows[0]):
            return False
        keys = tuple(rows[0])
        if not (all(map(keys.__eq__, map(tuple, rows))) and _STR.issuperset(map(type, keys))):
            return False
        cell = self.nl(level + 2)
        columns = [self._column(list(map(itemgetter(key), rows)), level + 2, nan or key == "nodes")
                   for key in keys]
        record = ("{" + cell + ("," + cell).join(self.key(key).replace("%", "%%") + "%s" for key in keys)
                  + self.nl(level + 1) + "}")
        texts = map(record.__mod__, zip(*columns, strict=True))
        out.append("[" + self.nl(level + 1) + ("," + self.nl(level + 1)).join(texts) + self.nl(level) + "]")
        return True

    def _column(self, values: list[Any], level: int, nan: bool) -> list[str]:
        """The texts of one key's values in a :meth:`_table`, at depth ``level``.

        Scalars: one C call with :data:`SPLIT` between them, split. Lists of scalars: one C call too; between
        two lists the separator follows a ``]`` (no scalar's text ends in one), inside one a scalar, so the
        first become the lists' ends and the others their items' indents. Anything else (and a column with inf
        or nan) value by value."""
        try:
            if SCALARS.issuperset(map(type, values)):
                return self._split(values)[1:-1].split(SPLIT)
            if _LIST.issuperset(map(type, values)) and SCALARS.issuperset(map(type, chain.from_iterable(values))):
                inner, close = self.nl(level + 1), self.nl(level)
                text = self._split(values).replace("]" + SPLIT + "[", f"{close}]{_CUT}[{inner}")
                text = text.replace(SPLIT, "," + inner)
                text = ("[" + inner + text[2:-2] + close + "]").replace("[" + inner + close + "]", "[]")
                return text.split(_CUT)
        except ValueError:  # inf or nan
            pass
        return [self.text(v, level, nan) for v in values]

    def _container(self, value: dict[Any, Any] | list[Any] | tuple[Any, ...], level: int, nan: bool,
                   out: list[str]) -> None:
        inner = self.nl(level + 1)
        if type(value) is dict:
            out.append("{")
            for i, (key, v) in enumerate(value.items()):
                out.append(("," if i else "") + inner + self.key(key))
                self._write(v, level + 1, nan or key == "nodes", out)  # finite leaves "nodes" as it is
            out.append(self.nl(level) + "}")
        else:
            out.append("[")
            nan = nan or type(value) is tuple  # finite copies lists, not tuples
            for i, v in enumerate(value):
                out.append(("," if i else "") + inner)
                self._write(v, level + 1, nan, out)
            out.append(self.nl(level) + "]")


def _float(value: float, nan: bool) -> str:
    """A float as the pure-Python encoder writes it (``float.__repr__``, ``Infinity``...); null for inf and nan
    where :func:`finite` makes them None."""
    if math.isfinite(value):
        return float.__repr__(value)
    if not nan:
        return "null"
    return "NaN" if value != value else "Infinity" if value > 0 else "-Infinity"


ROW_KEYS = ("name", "op_type", "domain", "kind", "dtype", "flops", "macs", "bytes_read", "bytes_written",
            "dram_bytes", "intensity", "compute_time_s", "memory_time_s", "roofline_time_s", "bound",
            "fusion_group", "depth", "parent", "multiplier", "note", "unknown_reason")
""":meth:`NodeReport.to_dict`'s keys before ``inputs``, in order (a test checks them against it)."""
MID = ROW_KEYS[1:15]
"""The keys from ``op_type`` to ``bound``: one text per distinct tuple of their values (:meth:`Rows._same`)."""
TAIL = ROW_KEYS[16:]
"""The keys after ``fusion_group``: as :data:`MID`."""
_MID, _TAIL = attrgetter(*MID), attrgetter(*TAIL)
TIMES = frozenset({"intensity", "compute_time_s", "memory_time_s", "roofline_time_s"})
"""The keys ``to_dict`` writes null when they are not finite (``_f``); counts are written ``Infinity``/``NaN``."""


class Rows:
    """The text of node rows, each the text ``json.dumps(row.to_dict(), ...)`` writes at its depth in the report:
    compact (``unit`` None) or indented by ``unit``, as items of the report's ``nodes`` (one ``Rows`` per
    :meth:`Report.json_chunks`).

    A row is one format string, the indents of its depth baked in, whose pieces are C calls or dict hits: each
    distinct value's text is written once (op types, dtypes, sizes and times repeat from row to row, and a
    float's repr is the dearest text there is), each TensorInfo's once (the report shares one per tensor
    between its producer's and consumers' rows). Every piece is the text ``json.dumps`` writes: strings
    through its own escaper; ints and finite floats by ``int.__repr__`` and ``float.__repr__``, as both its
    encoders write them; anything else (inf and nan in counts, which it writes ``Infinity``/``NaN``) through
    ``json.dumps`` itself. Floats are memoized apart from ints (``1 == 1.0`` as dict keys) and zeros never
    (``0.0 == -0.0``). Indented, a row costs about what a compact one does: Faster R-CNN 8.6 against 7.8 µs
    (thread time, best of 40, loaded machine). A column-at-a-time writer (a batch of rows' values per C call,
    memo maps, one ``str.join``) was tried and measured no faster (7.2 against 7.0 µs a row compact,
    synthetic-10k): not kept. So was a batch of rows as dicts through one C encoder call (synthetic-100k 0.84
    against 0.61 s: the C encoder writes every float's repr again, where the memo writes each once).

    The run of keys from ``op_type`` to ``bound`` and the keys after ``fusion_group`` are written once per
    distinct tuple of values (:meth:`_same`), and a tensor list whose texts are all known is joined from
    them by id in C: synthetic-100k's rows 0.58 → 0.55 s cold, 0.51 → 0.43 s with every text known (CPU
    time, best of 7, one process each, interleaved).
    """

    BATCH = 512
    """Rows per chunk of :meth:`chunks`."""

    def __init__(self, unit: str | None) -> None:
        self.unit = unit
        # a row sits at depth 2 (the report, its "nodes"), its keys at 3, its tensors at 4, their keys at 5
        if unit is None:
            key, n2, n3, n4, n5 = ":", "", "", "", ""
            self._shape: Callable[[list[int | str]], str] = compact
            self._one: Callable[[Any], str] = compact
        else:
            indented = Indented(unit)
            key = ": "
            n2, n3, n4, n5 = (indented.nl(level) for level in (2, 3, 4, 5))
            self._shape = lambda dims: indented.text(dims, 5)
            self._one = lambda value: json.dumps(value, indent=unit).replace("\n", n3)
        self._sep = "," + n2
        fields = ("," + n3).join
        # name, the MID keys' text, fusion_group, the TAIL keys' text, inputs, outputs, then bytes_as_written
        # when set (the last %s)
        self._row = ("{" + n3 + fields((f'"name"{key}%s', "%s", f'"fusion_group"{key}%s', "%s", f'"inputs"{key}%s',
                                        f'"outputs"{key}%s')) + "%s" + n2 + "}")
        self._mid = fields(f'"{k}"{key}%s' for k in MID)
        self._tail = fields(f'"{k}"{key}%s' for k in TAIL)
        self._mids: dict[Any, tuple[str, tuple[tuple[int, bool], ...]]] = {}
        self._tails: dict[Any, tuple[str, tuple[tuple[int, bool], ...]]] = {}
        self._extra = f',{n3}"bytes_as_written"{key}'
        self._open, self._tensor_sep, self._close = "[" + n4, "," + n4, n3 + "]"
        self._tensor = "{" + n5 + f'"name"{key}%s,{n5}"shape"{key}%s,{n5}"dtype"{key}%s' + n4 + "}"
        self._strings: dict[str | None, str] = {None: "null"}
        self._floats: dict[float, str] = {}
        self._shapes: dict[tuple[int | str, ...] | None, str] = {None: "null"}
        self._tensors: dict[int, str] = {}

    def chunks(self, nodes: Sequence[NodeReport]) -> Iterator[str]:
        """The rows' texts joined as items of one array (no brackets), :attr:`BATCH` rows a chunk."""
        for start in range(0, len(nodes), self.BATCH):
            yield (self._sep if start else "") + self._sep.join(map(self.row, nodes[start:start + self.BATCH]))

    def row(self, n: NodeReport) -> str:
        """One row's text."""
        written = n.bytes_as_written
        return self._row % (
            encode_basestring_ascii(n.name), self._same(self._mids, _MID(n), self._mid_text),
            self.string(n.fusion_group), self._same(self._tails, _TAIL(n), self._tail_text),
            self._list(n.inputs), self._list(n.outputs), "" if written is None else self._extra + self.number(written))

    @staticmethod
    def _same(memo: dict[Any, tuple[str, tuple[tuple[int, bool], ...]]], values: tuple[Any, ...],
              write: Callable[[tuple[Any, ...]], str]) -> str:
        """The text of ``values`` (a row's :data:`MID` or :data:`TAIL` values), written once per distinct tuple.

        Rows repeat them: synthetic-100k has 8 distinct MID tuples in 100k rows, LLaMA-32 77 in 8k, SSD300 206
        in 3.3k. The key holds the values' types (``1 == 1.0 == True`` as keys); a zero float's sign (``0.0 ==
        -0.0``) is kept with the text and checked on a hit, and a row whose signs differ is written afresh."""
        key = (values, tuple(map(type, values)))
        try:
            got = memo.get(key)
        except TypeError:  # a value no dict can hold (only a hand-made row): written as it is
            return write(values)
        if got is None:
            zeros = tuple((i, math.copysign(1.0, v) < 0) for i, v in enumerate(values) if type(v) is float and not v)
            got = memo[key] = (write(values), zeros)
        text, zeros = got
        for i, negative in zeros:
            if (math.copysign(1.0, values[i]) < 0) is not negative:
                return write(values)
        return text

    def _mid_text(self, v: tuple[Any, ...]) -> str:
        s, x, time = self.string, self.number, self.time
        return self._mid % (s(v[0]), s(v[1]), s(v[2]), s(v[3]), x(v[4]), x(v[5]), x(v[6]), x(v[7]), x(v[8]),
                            time(v[9]), time(v[10]), time(v[11]), time(v[12]), s(v[13]))

    def _tail_text(self, v: tuple[Any, ...]) -> str:
        depth, parent, multiplier, note, reason = v
        return self._tail % (self.number(depth), self.string(parent),
                             self.string(multiplier) if isinstance(multiplier, str) else self.number(multiplier),
                             self.string(note or None), self.string(reason))

    def string(self, value: str | None) -> str:
        got = self._strings.get(value)
        if got is None:
            got = self._strings[value] = encode_basestring_ascii(value)  # type: ignore[arg-type]
        return got

    def number(self, value: Number | None) -> str:
        kind = type(value)
        if kind is int:
            return int.__repr__(value)  # type: ignore[arg-type]
        if value is None:
            return "null"
        if kind is float:
            got = self._floats.get(value)  # type: ignore[arg-type]
            if got is not None:
                return got
            if math.isfinite(value):  # type: ignore[arg-type]
                got = float.__repr__(value)  # type: ignore[arg-type]
                if value:
                    self._floats[value] = got  # type: ignore[index]
                return got
        return self._one(value)

    def time(self, value: float | None) -> str:
        """A float that is written null when it is not finite (``_f``)."""
        if type(value) is float:
            got = self._floats.get(value)
            if got is not None:
                return got
        return "null" if value is None or not math.isfinite(value) else self.number(value)

    def _list(self, tensors: tuple[TensorInfo, ...]) -> str:
        if not tensors:
            return "[]"
        known = list(map(self._tensors.get, map(id, tensors)))  # the texts seen before, by id, in C
        if None in known:  # a first sight (a producer's outputs; no exception: one per row cost 0.1 s at 100k)
            return self._open + self._tensor_sep.join(map(self.tensor, tensors)) + self._close
        return self._open + self._tensor_sep.join(known) + self._close  # type: ignore[arg-type]

    def tensor(self, t: TensorInfo) -> str:
        """One TensorInfo's ``to_dict()`` text at its depth, once per TensorInfo."""
        got = self._tensors.get(id(t))
        if got is None:
            shape = self._shapes.get(t.shape)
            if shape is None:
                shape = self._shapes[t.shape] = self._shape(list(t.shape))  # type: ignore[arg-type]
            got = self._tensors[id(t)] = self._tensor % (encode_basestring_ascii(t.name), shape,
                                                         self.string(t.dtype))
        return got


def dumps(value: dict[str, Any], indent: int | None) -> str:
    """``json.dumps`` of report data, infinities and NaNs outside ``nodes`` written as null (:func:`finite`).

    The copy that ``finite`` makes is needed only when there is one: a first try refuses them
    (``allow_nan=False``) and the copy is made when it does."""
    separators = None if indent else (",", ":")
    try:
        return json.dumps(value, indent=indent, separators=separators, allow_nan=False)
    except ValueError:
        return json.dumps(finite(value), indent=indent, separators=separators)


def stream(value: Any) -> Iterator[str]:
    """Compact JSON of a section, the text of ``dumps`` of it, in pieces: a dict holding iterators (the lazy
    fusion section) is written key by key and each iterator as an array, so its rows are never all held as
    dicts, nor as one string.

    An iterator's items go to the C encoder :data:`BATCH` at a time, one call per batch (:func:`items`)."""
    if isinstance(value, dict) and any(isinstance(v, Iterator) for v in value.values()):
        for i, (key, v) in enumerate(value.items()):
            yield f'{"{" if not i else ","}{COMPACT.encode(key)}:'
            yield from stream(v)
        yield "}"
    elif isinstance(value, Iterator):
        yield "["
        yield from items(value)
        yield "]"
    else:
        yield dumps_any(value)


BATCH = 256
"""Items per C encoder call in :func:`items`: synthetic-10k's fusion and memory items (15k) in 52 ms one call
each, 20 ms in batches (side by side, best of 3)."""


def items(values: Iterable[Any]) -> Iterator[str]:
    """The items of an array, compact and comma-separated (no brackets), a batch per C encoder call; a batch
    holding inf or nan item by item through :func:`dumps_any`."""
    it = iter(values)
    first = True
    while batch := list(islice(it, BATCH)):
        try:
            text = strict(batch)[1:-1]
        except ValueError:
            text = ",".join(map(dumps_any, batch))
        yield text if first else "," + text
        first = False


def dumps_any(value: Any) -> str:
    """:func:`dumps` of any JSON value, compact."""
    try:
        return strict(value)
    except ValueError:
        return COMPACT.encode(finite(value))


def finite(value: Any) -> Any:
    """JSON has no inf/nan: write them as null (node rows are checked as they are built)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: (v if k == "nodes" else finite(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value
