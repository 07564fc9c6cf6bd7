"""The hardware catalog: named device specs shipped as TOML, user spec files, and command-line overrides.

Each catalog entry is a ``[[device]]`` table in ``catalog/<family>.toml``; a user file has the same schema and one
device (see docs/hardware.md). Values are SI numbers (ops/s, B/s, B, J/B, W). A value may also be a string with a
unit, such as ``"3.35TB/s"``, read by :func:`parse_quantity`, so numbers can be copied from a datasheet as written.

Peaks are keyed by the dtype names that :meth:`HardwareSpec.peak_for` looks up (:data:`DTYPES`); the usual short
spellings (``fp16``, ``bf16``...) are accepted and normalised, and anything else is an error rather than a key that
would silently never be read.
"""

from __future__ import annotations

import difflib
import functools
import json
import math
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .spec import DEFAULT_ENERGY_PER_BYTE, HardwareSpec

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on Python 3.10
    import tomli as tomllib

__all__ = [
    "DEFAULT_HARDWARE",
    "DTYPES",
    "KINDS",
    "HardwareError",
    "adhoc",
    "aliases_of",
    "describe",
    "get",
    "list_specs",
    "load_file",
    "override",
    "parse_peak_flops",
    "parse_quantity",
    "resolve",
    "to_toml",
]

DEFAULT_HARDWARE = "edge-soc"
"""The device a bound is computed against when none is named: the roofline chapter's reference edge SoC."""

DTYPES = ("float64", "float32", "float16", "bfloat16", "float8", "int8", "int4")
"""Keys a ``peak_flops`` table may have: exactly the names ``HardwareSpec.peak_for`` looks up."""

KINDS = ("gpu", "cpu", "soc", "npu", "custom", "measured")

_DTYPE_ALIASES = {
    "fp64": "float64", "f64": "float64", "double": "float64",
    "fp32": "float32", "f32": "float32", "float": "float32",
    "fp16": "float16", "f16": "float16", "half": "float16",
    "bf16": "bfloat16",
    "fp8": "float8", "f8": "float8",
    "i8": "int8", "i4": "int4",
}  # fmt: skip

_FIELDS = (
    "name", "aliases", "kind", "description", "peak_flops", "memory_bandwidth", "onchip_bytes",
    "onchip_bandwidth", "cache_levels", "energy_per_byte", "sustained_power_w", "sources",
)  # fmt: skip

# Unit conversions for describe() only; specs stay in SI units.
TERA = 1e12
GIGA = 1e9
PICO = 1e-12
MIB = 2**20
KIB = 2**10


class HardwareError(ValueError):
    """A bad hardware name, file or value. The message is one line, written for the person who typed it."""


# ---------------------------------------------------------------------------------------------------------------
# Quantities


_SI_PREFIX = {"k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
              "m": 1e-3, "u": 1e-6, "µ": 1e-6, "n": 1e-9, "p": 1e-12}  # fmt: skip
_BINARY_PREFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_OP_UNITS = {"flops", "flop/s", "flop", "ops", "op/s", "op"}  # matched case-insensitively
_OTHER_UNITS = {"B", "B/s", "Bps", "J", "J/B", "W", "Hz", "/s"}  # case matters: b would be bits
_QUANTITY = re.compile(r"(?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(?P<rest>.*)")


def _is_unit(text: str) -> bool:
    return text == "" or text.lower() in _OP_UNITS or text in _OTHER_UNITS


def parse_quantity(text: str) -> float:
    """A non-negative number with an optional SI or binary prefix and unit: ``2e12``, ``2T``, ``989.4 TFLOPS``,
    ``50GB/s``, ``160pJ``, ``40MiB``, ``1.5e-10``.

    Prefixes are case-sensitive where SI makes them so (``m`` milli, ``M`` mega; ``p`` pico, ``P`` peta). Units
    only document the number: ``2TFLOPS`` and ``2T`` are both 2e12.
    """
    match = _QUANTITY.fullmatch(text.strip())
    if match is None:
        raise HardwareError(f"not a quantity: {text!r} (expected a number with optional prefix/unit, e.g. 50GB/s)")
    value = float(match["number"])
    rest = "".join(match["rest"].split())
    if _is_unit(rest):
        scale = 1.0
    elif rest[:2] in _BINARY_PREFIX and _is_unit(rest[2:]):
        scale = float(_BINARY_PREFIX[rest[:2]])
    elif rest[:1] in _SI_PREFIX and _is_unit(rest[1:]):
        scale = _SI_PREFIX[rest[:1]]
    else:
        raise HardwareError(f"not a quantity: {text!r} (unknown prefix or unit {rest!r})")
    result = value * scale
    if not math.isfinite(result):
        raise HardwareError(f"not a finite quantity: {text!r}")
    return result


def _dtype(text: str) -> str:
    key = text.strip().lower()
    key = _DTYPE_ALIASES.get(key, key)
    if key not in DTYPES:
        raise HardwareError(
            f"unknown dtype {text!r} for a peak{_suggest(key, DTYPES)}; expected one of {', '.join(DTYPES)}"
        )
    return key


def parse_peak_flops(text: str) -> tuple[str, float]:
    """``[DTYPE=]F`` from the command line, e.g. ``2T`` (float32) or ``int8=8TOPS``."""
    dtype_text, sep, value_text = text.partition("=")
    dtype = _dtype(dtype_text) if sep else "float32"
    value = parse_quantity(value_text if sep else dtype_text)
    if value <= 0:
        raise HardwareError(f"peak {text!r} must be > 0")
    return dtype, value


def _first_line(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    return text.splitlines()[0]


def _suggest(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=3, cutoff=0.6)
    return f" (did you mean {', '.join(close)}?)" if close else ""


# ---------------------------------------------------------------------------------------------------------------
# Reading device tables


def _number(table: Mapping[str, Any], field: str, where: str, *, required: bool = False) -> float | None:
    """A positive finite number from a TOML table; strings go through parse_quantity."""
    raw = table.get(field)
    if raw is None:
        if required:
            raise HardwareError(f"{where}: field {field!r}: required")
        return None
    return _positive(raw, f"{where}: field {field!r}")


def _positive(raw: object, where: str) -> float:
    if isinstance(raw, str):
        try:
            value = parse_quantity(raw)
        except HardwareError as err:
            raise HardwareError(f"{where}: {err}") from None
    elif isinstance(raw, (int, float)) and not isinstance(raw, bool):
        value = float(raw)
    else:
        raise HardwareError(f"{where}: expected a number, got {type(raw).__name__}")
    if not (math.isfinite(value) and value > 0):
        raise HardwareError(f"{where}: must be a finite number > 0, got {raw!r}")
    return value


def _strings(table: Mapping[str, Any], field: str, where: str) -> tuple[str, ...]:
    raw = table.get(field, [])
    if not isinstance(raw, list) or not all(isinstance(item, str) and item.strip() for item in raw):
        raise HardwareError(f"{where}: field {field!r}: expected a list of non-empty strings")
    return tuple(raw)


def _text(table: Mapping[str, Any], field: str, where: str, default: str) -> str:
    raw = table.get(field, default)
    if not isinstance(raw, str):
        raise HardwareError(f"{where}: field {field!r}: expected a string, got {type(raw).__name__}")
    return raw


def _peaks(raw: object, where: str) -> dict[str, float]:
    if not isinstance(raw, Mapping) or not raw:
        raise HardwareError(f"{where}: field 'peak_flops': required, a table of dtype = ops/s")
    peaks: dict[str, float] = {}
    for key, value in raw.items():
        try:
            dtype = _dtype(str(key))
        except HardwareError as err:
            raise HardwareError(f"{where}: field 'peak_flops': {err}") from None
        if dtype in peaks:
            raise HardwareError(f"{where}: field 'peak_flops': {dtype} given twice")
        peaks[dtype] = _positive(value, f"{where}: field 'peak_flops.{dtype}'")
    return peaks


def _parse_device(
    table: Mapping[str, Any], origin: str, *, require_sources: bool
) -> tuple[HardwareSpec, tuple[str, ...]]:
    """One ``[[device]]`` table to a spec and its aliases; every error names the origin, device and field."""
    name = table.get("name")
    if not isinstance(name, str) or not name.strip():
        raise HardwareError(f"{origin}: field 'name': required, a non-empty string")
    where = f"{origin}: device {name!r}"
    for field in table:
        if field not in _FIELDS:
            raise HardwareError(f"{where}: unknown field {field!r}{_suggest(field, _FIELDS)}")
    kind = _text(table, "kind", where, "custom")
    if kind not in KINDS:
        raise HardwareError(f"{where}: field 'kind': {kind!r} is not one of {', '.join(KINDS)}")
    onchip_bytes = _number(table, "onchip_bytes", where)
    if onchip_bytes is not None and onchip_bytes != int(onchip_bytes):
        raise HardwareError(f"{where}: field 'onchip_bytes': must be a whole number of bytes")
    onchip_bandwidth = _number(table, "onchip_bandwidth", where)
    if onchip_bandwidth is not None and onchip_bytes is None:
        raise HardwareError(f"{where}: field 'onchip_bandwidth': needs onchip_bytes (what fits on chip)")
    levels = _cache_levels(table.get("cache_levels"), where)
    energy = _number(table, "energy_per_byte", where)
    sources = _strings(table, "sources", where)
    if require_sources and not sources:
        raise HardwareError(f"{where}: field 'sources': catalog entries must cite their numbers")
    bandwidth = _number(table, "memory_bandwidth", where, required=True)
    assert bandwidth is not None  # required=True
    try:
        spec = HardwareSpec(
            name=name.strip(),
            peak_flops=_peaks(table.get("peak_flops"), where),
            memory_bandwidth=bandwidth,
            onchip_bytes=None if onchip_bytes is None else int(onchip_bytes),
            onchip_bandwidth=onchip_bandwidth,
            cache_levels=levels,
            energy_per_byte=DEFAULT_ENERGY_PER_BYTE if energy is None else energy,
            sustained_power_w=_number(table, "sustained_power_w", where),
            kind=kind,
            description=_text(table, "description", where, ""),
            sources=sources,
        )
    except HardwareError:
        raise
    except ValueError as err:  # HardwareSpec's own checks; the ones above should have caught it first
        raise HardwareError(f"{where}: {err}") from err
    return spec, _strings(table, "aliases", where)


def _cache_levels(raw: object, where: str) -> tuple[tuple[int, float], ...]:
    """``cache_levels = [[capacity_bytes, bandwidth], ...]``, smallest first."""
    if raw is None:
        return ()
    field = f"{where}: field 'cache_levels'"
    if not isinstance(raw, list):
        raise HardwareError(f"{field}: a list of [capacity_bytes, bandwidth] pairs, smallest first")
    out: list[tuple[int, float]] = []
    for i, pair in enumerate(raw):
        if not (isinstance(pair, list) and len(pair) == 2):
            raise HardwareError(f"{field}[{i}]: expected [capacity_bytes, bandwidth]")
        cap = _positive(pair[0], f"{field}[{i}] capacity")
        if cap != int(cap):
            raise HardwareError(f"{field}[{i}] capacity: must be a whole number of bytes")
        out.append((int(cap), _positive(pair[1], f"{field}[{i}] bandwidth")))
        if i and out[i][0] <= out[i - 1][0]:
            raise HardwareError(f"{field}: capacities must grow, smallest level first")
    return tuple(out)


MAX_FILE_BYTES = 1 << 20
"""A hardware file is a few dozen lines; anything past 1 MiB is refused unread (the catalog's largest is ~10 KiB)."""


def _device_tables(text: str, origin: str) -> list[Mapping[str, Any]]:
    """The device tables of a TOML document: ``[[device]]`` entries, or one device written at top level.

    tomllib only parses (it never evaluates a value), but it recurses once per level of nested arrays and
    inline tables: a file nested thousands deep exhausts Python's stack, which is an invalid file too."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise HardwareError(f"{origin}: invalid TOML: {_first_line(err)}") from None
    except RecursionError:
        raise HardwareError(f"{origin}: invalid hardware file: arrays or tables nested too deeply") from None
    if "device" not in data:
        return [data]
    extra = sorted(set(data) - {"device"})
    if extra:
        raise HardwareError(f"{origin}: unexpected top-level key {extra[0]!r} beside [[device]]")
    devices = data["device"]
    if not isinstance(devices, list) or not all(isinstance(d, dict) for d in devices):
        raise HardwareError(f"{origin}: 'device' must be an array of tables ([[device]])")
    return devices


def load_file(path: str | Path) -> HardwareSpec:
    """A user's spec file: one device, same schema as the catalog (sources optional)."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)  # never more than the cap, whatever the file's size
    except OSError as err:
        raise HardwareError(f"{path}: cannot read hardware file: {err.strerror or err}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise HardwareError(f"{path}: hardware file is larger than {MAX_FILE_BYTES // MIB} MiB; a spec is a few "
                            "lines of TOML (see docs/hardware.md)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise HardwareError(f"{path}: hardware file is not UTF-8 text (byte {err.start}): not a TOML spec") from None
    tables = _device_tables(text, str(path))
    if len(tables) != 1:
        raise HardwareError(f"{path}: expected exactly one device, found {len(tables)}")
    return _parse_device(tables[0], str(path), require_sources=False)[0]


# ---------------------------------------------------------------------------------------------------------------
# The catalog


def _key(name: str) -> str:
    """Lookup key: case, spaces and underscores do not matter ("H100 SXM" finds h100-sxm)."""
    return re.sub(r"[\s_]+", "-", name.strip().lower())


@dataclass(frozen=True)
class _Catalog:
    specs: tuple[HardwareSpec, ...]
    index: Mapping[str, HardwareSpec]
    aliases: Mapping[str, tuple[str, ...]]


CATALOG_DIR = Path(__file__).resolve().parent / "catalog"
"""The shipped ``<family>.toml`` files: package data beside this module (a plain path, not
``importlib.resources``, whose import alone took 8–11 ms of a 3-node model's 0.35 s start-up budget)."""


@functools.cache
def _catalog_files() -> tuple[Path, ...]:
    return tuple(sorted((p for p in CATALOG_DIR.iterdir() if p.name.endswith(".toml")), key=lambda p: p.name))


@functools.cache
def _file_text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


@functools.cache
def _file_devices(path: Path) -> tuple[tuple[HardwareSpec, tuple[str, ...]], ...]:
    """Each device of one catalog file with its aliases, parsed once: the full catalog and :func:`get`'s
    one-file lookup share these objects, so a device is one object however it was found."""
    origin = f"catalog/{path.name}"
    return tuple(_parse_device(table, origin, require_sources=True)
                 for table in _device_tables(_file_text(path), origin))


@functools.cache
def _catalog() -> _Catalog:
    specs: list[HardwareSpec] = []
    index: dict[str, HardwareSpec] = {}
    aliases: dict[str, tuple[str, ...]] = {}
    for path in _catalog_files():
        origin = f"catalog/{path.name}"
        for spec, names in _file_devices(path):
            for key in map(_key, (spec.name, *names)):
                if key in index:
                    raise HardwareError(f"{origin}: {key!r} names both {index[key].name} and {spec.name}")
                index[key] = spec
            specs.append(spec)
            aliases[spec.name] = names
    specs.sort(key=lambda s: s.name)
    return _Catalog(tuple(specs), index, aliases)


def _find_in_one_file(key: str) -> HardwareSpec | None:
    """The device ``key`` names, parsing only the catalog files whose text holds it.

    Every key is ``_key`` of a string written in a file, and ``_key`` maps the text around an unescaped string
    the way it maps the string, so a file whose ``_key``-ed text lacks the key cannot define it. Naming the
    default device parses ``edge.toml`` alone: 2.2–2.4 ms against 6.1–6.5 ms for the four files (measured).
    A name not found here (or one written with TOML escapes) goes to the full catalog, which also checks
    that no key names two devices (tests load it whole)."""
    for path in _catalog_files():
        if key not in _key(_file_text(path)):
            continue
        for spec, names in _file_devices(path):
            if key in map(_key, (spec.name, *names)):
                return spec
    return None


def list_specs() -> list[HardwareSpec]:
    """Every catalog device, sorted by name."""
    return list(_catalog().specs)


def get(name: str) -> HardwareSpec:
    """A catalog device by name or alias, ignoring case; an unknown name lists the closest ones."""
    spec = _find_in_one_file(_key(name))
    if spec is not None:
        return spec
    catalog = _catalog()
    spec = catalog.index.get(_key(name))
    if spec is None:
        hint = _suggest(_key(name), catalog.index)
        raise HardwareError(f"unknown hardware {name!r}{hint}; `graphcost hardware list` shows all devices")
    return spec


def aliases_of(name: str) -> tuple[str, ...]:
    """The aliases of a catalog device (for listings)."""
    return _catalog().aliases[get(name).name]


def resolve(name_or_path: str) -> HardwareSpec:
    """What ``--hardware`` accepts: a path to a spec file, else a catalog name."""
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return load_file(path)
    if name_or_path.endswith(".toml") or "/" in name_or_path or "\\" in name_or_path:
        raise HardwareError(f"{name_or_path}: no such hardware file")
    return get(name_or_path)


# ---------------------------------------------------------------------------------------------------------------
# Specs from the command line


def adhoc(
    peak_flops: dict[str, float] | float,
    memory_bandwidth: float,
    energy_per_byte: float | None = None,
    name: str = "custom",
) -> HardwareSpec:
    """A fresh spec from bare numbers (``--peak-flops 2T --memory-bandwidth 50GB/s``); a bare peak is float32's.

    Nothing comes from a catalog device: dtypes without a peak fall back as ``HardwareSpec.peak_for`` says (fp16
    to fp32), so no dtype is bounded slower than the peak the user gave."""
    where = f"hardware {name!r}"
    if isinstance(peak_flops, (int, float)) and not isinstance(peak_flops, bool):
        peak_flops = {"float32": float(peak_flops)}
    return HardwareSpec(
        name=name,
        peak_flops=_peaks(peak_flops, where),
        memory_bandwidth=_positive(memory_bandwidth, f"{where}: memory_bandwidth"),
        energy_per_byte=(
            DEFAULT_ENERGY_PER_BYTE if energy_per_byte is None else _positive(energy_per_byte, f"{where}: energy")
        ),
        kind="custom",
        description="ad-hoc spec from command-line values",
        sources=("user-supplied values",),
    )


_NARROWER = (("float16", "float32"), ("bfloat16", "float32"), ("int8", "float16"), ("int8", "float32"))
"""(narrow, wide) dtype pairs whose peaks a real device orders narrow ≥ wide on the parts graphcost catalogs."""


def override(
    spec: HardwareSpec,
    *,
    peak_flops: dict[str, float] | None = None,
    memory_bandwidth: float | None = None,
    energy_per_byte: float | None = None,
) -> HardwareSpec:
    """``spec`` with some roofs replaced (peaks merge per dtype), named ``<name>+overrides``.

    Each replaced value is recorded in ``sources``. With nothing to override, ``spec`` itself is returned.
    Override before derating: a derated spec's values are already scaled, and an override is taken as given.
    """
    where = f"override of {spec.name!r}"
    notes: list[str] = []
    peaks = dict(spec.peak_flops)
    if peak_flops:
        given = _peaks(peak_flops, where)
        for dtype, value in given.items():
            peaks[dtype] = value
            notes.append(f"override: peak_flops.{dtype} = {value:g}")
        for narrow, wide in _NARROWER:  # a kept narrow peak now below an overridden wide one: say so
            if wide in given and narrow not in given and narrow in peaks and peaks[narrow] < peaks[wide]:
                notes.append(f"warning: peak_flops.{narrow} ({peaks[narrow]:g}, kept from {spec.name}) is below the "
                             f"overridden {wide} peak: {narrow} nodes are bounded slower than {wide} ones; override "
                             f"{narrow} too")
    bandwidth = spec.memory_bandwidth
    if memory_bandwidth is not None:
        bandwidth = _positive(memory_bandwidth, f"{where}: memory_bandwidth")
        notes.append(f"override: memory_bandwidth = {bandwidth:g}")
    energy = spec.energy_per_byte
    if energy_per_byte is not None:
        energy = _positive(energy_per_byte, f"{where}: energy_per_byte")
        notes.append(f"override: energy_per_byte = {energy:g}")
    if not notes:
        return spec
    name = spec.name if spec.name.endswith("+overrides") else f"{spec.name}+overrides"
    return replace(
        spec,
        name=name,
        peak_flops=peaks,
        memory_bandwidth=bandwidth,
        energy_per_byte=energy,
        sources=(*spec.sources, *notes),
    )


# ---------------------------------------------------------------------------------------------------------------
# Reports


def _ordered_peaks(spec: HardwareSpec) -> list[tuple[str, float]]:
    rank = {dtype: i for i, dtype in enumerate(DTYPES)}
    return sorted(spec.peak_flops.items(), key=lambda item: rank.get(item[0], len(rank)))


def _bytes(n: int) -> str:
    return f"{n / MIB:g} MiB" if n >= MIB else f"{n / KIB:g} KiB"


def describe(spec: HardwareSpec) -> str:
    """A human description for ``graphcost hardware show``: roofs, ridge points and where the numbers come from."""
    lines = [f"{spec.name} ({spec.kind})"]
    if spec.description:
        lines.append(f"  {spec.description}")
    names = _catalog().aliases.get(spec.name)
    if names:
        lines.append(f"  aliases: {', '.join(names)}")
    lines.append("  peak compute (dense)          ridge point (peak / DRAM bandwidth)")
    for dtype, peak in _ordered_peaks(spec):
        op = "OP" if dtype.startswith("int") else "FLOP"
        ridge = peak / spec.memory_bandwidth
        lines.append(f"    {dtype:<9} {peak / TERA:>9.4g} T{op}/s{'':<{5 - len(op)}} {ridge:>9.4g} {op}/B")
    lines.append(f"  DRAM bandwidth: {spec.memory_bandwidth / GIGA:.4g} GB/s")
    if spec.onchip_bytes is None:
        lines.append("  on-chip: not given (bounds use DRAM bandwidth only)")
    elif spec.onchip_bandwidth is None:
        lines.append(f"  on-chip: {_bytes(spec.onchip_bytes)}, bandwidth not given")
    else:
        lines.append(f"  on-chip: {_bytes(spec.onchip_bytes)} at {spec.onchip_bandwidth / GIGA:.4g} GB/s")
    if spec.cache_levels:
        lines.append("  on-chip levels: " + ", ".join(f"{_bytes(cap)} at {bw / GIGA:.4g} GB/s"
                                                       for cap, bw in spec.cache_levels))
    lines.append(f"  energy: {spec.energy_per_byte / PICO:.4g} pJ per DRAM byte")
    power = "not given" if spec.sustained_power_w is None else f"{spec.sustained_power_w:g} W"
    lines.append(f"  sustained power: {power}")
    if spec.derating is not None:
        lines.append(f"  derated: compute × {spec.derating[0]:g}, bandwidth × {spec.derating[1]:g}")
    if spec.sources:
        lines.append("  sources:")
        lines.extend(f"    - {source}" for source in spec.sources)
    return "\n".join(lines)


def _toml_float(v: float) -> str:
    """The shortest exact spelling, in engineering form for large and small values (989.4e12, 160e-12)."""
    if v == 0 or 1e-3 <= abs(v) < 1e6:
        return repr(v)
    exponent = 3 * math.floor(math.log10(abs(v)) / 3)
    mantissa = v / 10.0**exponent
    for digits in range(1, 18):
        text = f"{mantissa:.{digits}g}e{exponent}"
        if text.count("e") == 1 and float(text) == v:
            return text
    return repr(v)


def to_toml(spec: HardwareSpec, aliases: Iterable[str] = ()) -> str:
    """``spec`` as a one-device file that :func:`load_file` reads back: a starting point for a user's own device."""

    def value(v: object) -> str:
        if isinstance(v, str):
            return json.dumps(v, ensure_ascii=False)  # a JSON string is a valid TOML basic string
        if isinstance(v, list) and all(isinstance(item, (int, float)) for item in v):
            return "[" + ", ".join(value(item) for item in v) + "]"  # a number pair: one line
        if isinstance(v, list):
            return "[" + "".join(f"\n    {value(item)}," for item in v) + "\n]" if v else "[]"
        if isinstance(v, float):
            return _toml_float(v)
        return repr(v)

    d = spec.to_dict(complete=True)
    fields: list[tuple[str, object]] = [
        ("name", d["name"]),
        ("aliases", list(aliases)),
        ("kind", d["kind"]),
        ("description", d["description"]),
        ("memory_bandwidth", float(d["memory_bandwidth"])),
        ("onchip_bytes", d["onchip_bytes"]),
        ("onchip_bandwidth", d["onchip_bandwidth"]),
        ("cache_levels", [[cap, float(bw)] for cap, bw in d["cache_levels"]] or None),
        ("energy_per_byte", float(d["energy_per_byte"])),
        ("sustained_power_w", d["sustained_power_w"]),
        ("sources", d["sources"]),
    ]
    lines = ["[[device]]"]
    lines += [f"{key} = {value(v)}" for key, v in fields if v is not None]
    lines += ["", "[device.peak_flops]"]
    lines += [f"{dtype} = {_toml_float(float(peak))}" for dtype, peak in _ordered_peaks(spec)]
    return "\n".join(lines) + "\n"
