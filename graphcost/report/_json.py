"""The report's JSON writer: the text ``json.dumps`` writes, made faster where a report is large.

Node rows are written by :class:`Texts` (one format string per row in ``report/model.py``), sections through C
encoders made once (:func:`reused`); infinities and NaNs outside ``nodes`` become null (:func:`finite`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # report/model.py imports this module at run time
    from graphcost.report.model import TensorInfo

Number = int | float


COMPACT = json.JSONEncoder(separators=(",", ":"), check_circular=False)
"""``json.dumps(..., separators=(",", ":"))`` of one value, without building a JSONEncoder per call."""


def reused(encoder: json.JSONEncoder) -> Callable[[Any], str]:
    """``encoder.encode`` with its C encoder made once. ``encode`` makes a new one on every call, about 3.5 µs of
    the 8 µs a node row's dict took (measured); synthetic-100k writes ~150k fusion groups and boundaries one by
    one. The C encoder is made with the arguments ``JSONEncoder.iterencode`` gives it, so the text is the same
    (a probe checks it); ``encoder.encode`` itself where this Python's cannot be made so."""
    try:
        made = c_make_encoder(None, encoder.default, encode_basestring_ascii, None, encoder.key_separator,
                              encoder.item_separator, encoder.sort_keys, encoder.skipkeys, encoder.allow_nan)
        probe: Any = {"a": [1, 2.5, None, "é", -0.0], "b": True}
        if "".join(made(probe, 0)) != encoder.encode(probe):
            return encoder.encode
    except TypeError:  # no C encoder (None), or another signature
        return encoder.encode
    return lambda value: "".join(made(value, 0))


compact = reused(COMPACT)

class Texts:
    """The JSON text of node rows' values, each distinct value written once (one ``Texts`` per
    :meth:`Report.json_chunks`).

    A row is one format string whose pieces are C calls or dict hits: 13.7 µs per row against 21.0 µs for the
    row's dict through a C encoder made once (synthetic-10k; swin_t 14.1 against 17.6; measured side by side on
    a loaded machine), and 0.63× the whole ``to_json`` of before at synthetic-10k and -100k. Every piece is the
    text ``json.dumps`` writes: strings through its own escaper; ints and finite floats by ``int.__repr__`` and
    ``float.__repr__``, as its C encoder writes them; anything else (inf and nan in counts, which it writes
    ``Infinity``/``NaN``) through ``compact`` itself. Floats are memoized apart from ints (``1 == 1.0`` as dict
    keys) and zeros never (``0.0 == -0.0``).
    """

    def __init__(self) -> None:
        self._strings: dict[str | None, str] = {None: "null"}
        self._floats: dict[float, str] = {}
        self._shapes: dict[tuple[int | str, ...] | None, str] = {None: "null"}
        self._tensors: dict[int, str] = {}

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
        return compact(value)

    def time(self, value: float | None) -> str:
        """A float that is written null when it is not finite (``_f``)."""
        if type(value) is float:
            got = self._floats.get(value)
            if got is not None:
                return got
        return "null" if value is None or not math.isfinite(value) else self.number(value)

    def tensor(self, t: TensorInfo) -> str:
        """One TensorInfo's ``to_dict()`` text, once per TensorInfo (the report shares one per tensor between its
        producer's and consumers' rows)."""
        got = self._tensors.get(id(t))
        if got is None:
            shape = self._shapes.get(t.shape)
            if shape is None:
                shape = self._shapes[t.shape] = compact(list(t.shape))  # type: ignore[arg-type]
            got = self._tensors[id(t)] = (f'{{"name":{encode_basestring_ascii(t.name)},"shape":{shape},'
                                          f'"dtype":{self.string(t.dtype)}}}')
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
    fusion section) is written key by key and each iterator as an array item by item, so its rows are never
    all held as dicts, nor as one string.

    Each item goes to the C encoder (:func:`dumps_any`): a fusion group's dict in 4.7 µs, where writing it
    from a format string with memoized key and value texts in Python took 9.2 µs (measured, synthetic-10k)."""
    if isinstance(value, dict) and any(isinstance(v, Iterator) for v in value.values()):
        for i, (key, v) in enumerate(value.items()):
            yield f'{"{" if not i else ","}{COMPACT.encode(key)}:'
            yield from stream(v)
        yield "}"
    elif isinstance(value, Iterator):
        yield "["
        for i, item in enumerate(value):
            yield ("," if i else "") + dumps_any(item)
        yield "]"
    else:
        yield dumps_any(value)


def dumps_any(value: Any) -> str:
    """:func:`dumps` of any JSON value, compact."""
    try:
        return strict(value)
    except ValueError:
        return COMPACT.encode(finite(value))


strict = reused(json.JSONEncoder(separators=(",", ":"), allow_nan=False))


def finite(value: Any) -> Any:
    """JSON has no inf/nan: write them as null (node rows are checked as they are built)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: (v if k == "nodes" else finite(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value
