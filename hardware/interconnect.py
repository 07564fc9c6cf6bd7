"""Links between devices and cluster specs: the bandwidths collective communication is bounded by.

The catalog is ``interconnects/*.toml`` (a folder of its own: every TOML in ``catalog/`` is loaded as a device).
Each file holds ``[[link]]`` tables (``name``, ``aliases``, ``description``, ``bandwidth`` per direction, optional
``bidirectional_bandwidth``, ``sources``) and may hold ``[[cluster]]`` tables (``name``, ``devices_per_node``,
``intra`` and ``inter`` naming links or inline ``{ bandwidth = ... }`` tables, ``sources``). Values are SI numbers or
strings with units (``"450GB/s"``), read by :func:`graphcost.hardware.catalog.parse_quantity`.

A collective over ``n`` devices runs at the intra-node link when the group fits in one node, else at the
inter-node link (the slower hop bounds a ring). Latency is not modelled: times are bandwidth-only lower bounds.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from .catalog import HardwareError, parse_quantity

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on Python 3.10
    import tomli as tomllib

MAX_FILE_BYTES = 1 << 20
DEFAULT_CLUSTER = "dgx-h100"


@dataclass(frozen=True)
class Link:
    name: str
    bandwidth: float
    """Bytes per second, per direction: what one device can send while it receives as much."""
    description: str = ""
    bidirectional_bandwidth: float | None = None
    sources: tuple[str, ...] = ()


@dataclass(frozen=True)
class Cluster:
    name: str
    devices_per_node: int
    intra: Link
    inter: Link
    description: str = ""
    sources: tuple[str, ...] = ()

    def link_for(self, group: int, *, spans_nodes: bool | None = None) -> Link:
        """The link that bounds a collective over ``group`` devices (placed in as few nodes as possible)."""
        across = group > self.devices_per_node if spans_nodes is None else spans_nodes
        return self.inter if across else self.intra


def _quantity(value: Any, origin: str, key: str) -> float:
    try:
        out = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else \
            parse_quantity(str(value))
    except (HardwareError, ValueError) as e:
        raise HardwareError(f"{origin}: {key}: {e}") from None
    if not out > 0:
        raise HardwareError(f"{origin}: {key} must be > 0")
    return out


def _link(table: Mapping[str, Any], origin: str) -> Link:
    if not isinstance(table, Mapping):
        raise HardwareError(f"{origin}: a link must be a table")
    unknown = sorted(set(table) - {"name", "aliases", "description", "bandwidth", "bidirectional_bandwidth",
                                   "sources"})
    if unknown:
        raise HardwareError(f"{origin}: unknown link key {unknown[0]!r}")
    if "bandwidth" not in table:
        raise HardwareError(f"{origin}: link {table.get('name', '?')!r} has no bandwidth")
    bidi = table.get("bidirectional_bandwidth")
    return Link(str(table.get("name", "link")), _quantity(table["bandwidth"], origin, "bandwidth"),
                str(table.get("description", "")),
                None if bidi is None else _quantity(bidi, origin, "bidirectional_bandwidth"),
                tuple(str(s) for s in table.get("sources", ())))


def _load(text: str, origin: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise HardwareError(f"{origin}: invalid TOML: {str(e).splitlines()[0]}") from None
    except RecursionError:
        raise HardwareError(f"{origin}: invalid file: tables nested too deeply") from None


@dataclass(frozen=True)
class _Catalog:
    links: Mapping[str, Link]
    clusters: Mapping[str, Mapping[str, Any]]


def _key(name: str) -> str:
    return "-".join(name.strip().lower().replace("_", " ").split())


@functools.cache
def _catalog() -> _Catalog:
    links: dict[str, Link] = {}
    clusters: dict[str, Mapping[str, Any]] = {}
    folder = resources.files(__package__ or "graphcost.hardware").joinpath("interconnects")
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".toml"):
            continue
        origin = f"interconnects/{entry.name}"
        data = _load(entry.read_text(encoding="utf-8"), origin)
        for table in data.get("link", ()):
            link = _link(table, origin)
            if not link.sources:
                raise HardwareError(f"{origin}: link {link.name!r} has no sources")
            for key in map(_key, (link.name, *table.get("aliases", ()))):
                if key in links:
                    raise HardwareError(f"{origin}: {key!r} names two links")
                links[key] = link
        for table in data.get("cluster", ()):
            clusters[_key(str(table.get("name", "")))] = table
    return _Catalog(links, clusters)


def links() -> tuple[Link, ...]:
    """Every catalog link, once each, in catalog order."""
    return tuple({id(v): v for v in _catalog().links.values()}.values())


def link(name: str) -> Link:
    """A catalog link by name or alias (case, spaces and underscores do not matter)."""
    found = _catalog().links.get(_key(name))
    if found is None:
        known = ", ".join(sorted({v.name for v in _catalog().links.values()}))
        raise HardwareError(f"unknown interconnect {name!r} (catalog: {known})")
    return found


def _cluster(table: Mapping[str, Any], origin: str) -> Cluster:
    unknown = sorted(set(table) - {"name", "description", "devices_per_node", "intra", "inter", "sources"})
    if unknown:
        raise HardwareError(f"{origin}: unknown cluster key {unknown[0]!r}")
    per_node = table.get("devices_per_node")
    if not isinstance(per_node, int) or isinstance(per_node, bool) or per_node < 1:
        raise HardwareError(f"{origin}: devices_per_node must be a whole number ≥ 1")
    ends = []
    for key in ("intra", "inter"):
        value = table.get(key)
        if isinstance(value, str):
            ends.append(link(value))
        elif isinstance(value, Mapping):
            ends.append(_link({"name": key, **value}, origin))
        else:
            raise HardwareError(f"{origin}: {key} must name a catalog link or be a table with bandwidth")
    return Cluster(str(table.get("name", "cluster")), per_node, ends[0], ends[1], str(table.get("description", "")),
                   tuple(str(s) for s in table.get("sources", ())))


def cluster(name: str = DEFAULT_CLUSTER) -> Cluster:
    table = _catalog().clusters.get(_key(name))
    if table is None:
        raise HardwareError(f"unknown cluster {name!r} (catalog: {', '.join(sorted(_catalog().clusters))})")
    return _cluster(table, f"cluster {name}")


def load_cluster(path: str | Path) -> Cluster:
    """A user's cluster file: one ``[[cluster]]`` (or ``[cluster]``) table; bad input raises HardwareError."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise HardwareError(f"{path}: cannot read cluster file: {e.strerror or e}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise HardwareError(f"{path}: cluster file is larger than 1 MiB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise HardwareError(f"{path}: cluster file is not UTF-8 text") from None
    data = _load(text, str(path))
    tables = data.get("cluster")
    if isinstance(tables, Mapping):
        tables = [tables]
    if not isinstance(tables, list) or len(tables) != 1 or not isinstance(tables[0], Mapping):
        raise HardwareError(f"{path}: expected exactly one [[cluster]] table")
    return _cluster(tables[0], str(path))


def resolve_cluster(name_or_file: str | None) -> Cluster:
    """A catalog cluster name, a TOML file, or the default (DGX H100)."""
    if not name_or_file:
        return cluster()
    if name_or_file.endswith(".toml") or Path(name_or_file).is_file():
        return load_cluster(name_or_file)
    return cluster(name_or_file)


__all__ = ["DEFAULT_CLUSTER", "Cluster", "Link", "cluster", "link", "links", "load_cluster", "resolve_cluster"]
