"""One audit row per model: its schema, the resume key, and the compact summary of a Report.

A row is deterministic: the same file, settings and graphcost version give byte-identical JSON on any
machine, backend or run (keys sorted, no timestamps, no measured times; those go to the timings
sidecar). That is what lets ``--resume`` and the Dask backend be checked against a plain local run.

Row (``schema: "graphcost.audit/1"``)::

    path, bytes, sha256, external_data[{location, bytes, sha256}], settings_key, key,
    status (ok | error | timeout | crashed | oom | skipped), reason (None when fully costed),
    analysis: {model, binding, defaulted_dims, dims_ignored, totals, coverage, no_rule_ops, op_counts,
               top_nodes, memory, fusion, warnings}   (None unless status is ok)

Text from the model (op types, node and tensor names, producer) is always valid text in a row: what protobuf
hands over as ``bytes`` (a string field that is not UTF-8) and any lone surrogate are written as backslash
escapes (:func:`model_text`), so a row always serializes. The ``path`` is kept exact (``ensure_ascii`` writes
the surrogates of a non-UTF-8 file name as ``\\udcXX``, which reads back as the same name), since resume
matches rows by it.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any

from graphcost.load import model_text

ROW_SCHEMA = "graphcost.audit/1"
STATUSES = ("ok", "error", "timeout", "crashed", "oom", "skipped")
"""``skipped``: an entry named like a model that is not a regular readable file (a FIFO, device, directory,
dangling symlink, symlink loop...): its row says what it is, and nothing opened it."""
TOP_NODES = 5


def canonical_json(value: Any) -> str:
    """The one JSON spelling of a value: sorted keys, no spaces, ASCII (so even a file name that is not UTF-8
    can be written), no NaN (written as null)."""
    return json.dumps(finite(value), sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def finite(value: Any) -> Any:
    """JSON has no inf/nan (written as null) and no bytes (written as escaped text, :func:`model_text`)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, bytes):
        return model_text(value)
    if isinstance(value, Mapping):
        return {model_text(k) if isinstance(k, bytes) else str(k): finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def _clean(value: Any) -> Any:
    """:func:`finite`, with every string (keys included) passed through :func:`model_text`."""
    if isinstance(value, (str, bytes)):
        return model_text(value)
    if isinstance(value, Mapping):
        return {_clean(k) if isinstance(k, (str, bytes)) else str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return finite(value)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def settings_key(settings: Mapping[str, Any]) -> str:
    """Hash of everything besides the file that changes a row: hardware roofs, dims, flags, versions."""
    return sha256_text(canonical_json({"row_schema": ROW_SCHEMA, **settings}))


def model_key(sha256: str, external: list[dict[str, Any]], settings_key_: str) -> str:
    """The resume key: model content + each external-data file's content + the settings."""
    ext = sorted((e["location"], e["sha256"]) for e in external)
    return sha256_text(canonical_json({"sha256": sha256, "external": ext, "settings": settings_key_}))


def make_row(job: Mapping[str, Any], status: str, reason: str | None,
             analysis: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A row from the job's identity (path, hashes, keys) and what the analysis found."""
    if status not in STATUSES:
        raise ValueError(f"unknown audit status {status!r}")
    return {
        "schema": ROW_SCHEMA,
        "path": job["path"],
        "bytes": job["bytes"],
        "sha256": job["sha256"],
        "external_data": list(job["external_data"]),
        "settings_key": job["settings_key"],
        "key": job["key"],
        "status": status,
        "reason": reason,
        "analysis": None if analysis is None else dict(analysis),
    }


def row_line(row: Mapping[str, Any]) -> str:
    """The row as one JSON Lines line (with its newline)."""
    return canonical_json(row) + "\n"


def _op_key(op_type: str | bytes, domain: str | bytes) -> str:
    op_type, domain = model_text(op_type), model_text(domain)
    return op_type if domain in ("", "ai.onnx") else f"{domain}::{op_type}"


def _section(section: Any) -> dict[str, Any] | None:
    """A later pass's report section (memory, fusion) cut to its scalars, lists to their lengths.

    Those sections are written by other passes and change shape as they grow; a row keeps what is a
    single number or word and, for each list, how many entries it had (``groups`` → ``groups_count``).
    """
    if section is None:
        return None
    d = section.to_dict() if hasattr(section, "to_dict") else section
    if not isinstance(d, Mapping):
        return None
    out: dict[str, Any] = {}
    for k, v in d.items():
        if v is None or isinstance(v, (bool, int, float, str)):
            out[str(k)] = v
        elif isinstance(v, (list, tuple)):
            out[f"{k}_count"] = len(v)
    return out


def summarize_report(report: Any, dims_ignored: list[str]) -> dict[str, Any]:
    """The compact per-model part of a row: everything but the node list (only the top nodes)."""
    top = [n for n in report.nodes if n.depth == 0]
    op_counts: dict[str, int] = {}
    no_rule: dict[str, int] = {}
    for n in top:
        k = _op_key(n.op_type, n.domain)
        op_counts[k] = op_counts.get(k, 0) + 1
        if not n.has_rule:
            no_rule[k] = no_rule.get(k, 0) + 1
    model = report.model.to_dict()
    model.pop("path", None)  # the row's own path says it
    return _clean({
        "model": model,
        "binding": dict(report.binding),
        "defaulted_dims": list(report.defaulted_dims),
        "dims_ignored": list(dims_ignored),
        "totals": report.totals.to_dict(),
        "coverage": report.coverage.to_dict(),
        "no_rule_ops": no_rule,
        "op_counts": op_counts,
        "top_nodes": [
            {"name": n.name, "op_type": _op_key(n.op_type, n.domain), "flops": n.flops, "bytes": n.bytes,
             "roofline_time_s": n.roofline_time_s, "bound": n.bound}
            for n in report.top(TOP_NODES)],
        "memory": _section(getattr(report, "memory", None)),
        "fusion": _section(getattr(report, "fusion", None)),
        "warnings": len(report.warnings),
    })


def partial_reason(analysis: Mapping[str, Any]) -> str | None:
    """Why an ok row is not fully costed (ops without rules, nodes whose shapes stayed unknown)."""
    unknown = int(analysis["totals"].get("unknown_nodes") or 0)
    if not unknown:
        return None
    no_rule: Mapping[str, int] = analysis["no_rule_ops"]
    n_rule = sum(no_rule.values())
    parts = []
    if n_rule:
        ops = ", ".join(sorted(no_rule)[:5]) + (", …" if len(no_rule) > 5 else "")
        parts.append(f"{n_rule} node{'s' if n_rule != 1 else ''} without a cost rule ({ops})")
    if unknown - n_rule > 0:
        k = unknown - n_rule
        parts.append(f"{k} node{'s' if k != 1 else ''} with unknown shapes")
    return "partial: " + "; ".join(parts)
