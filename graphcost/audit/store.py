"""The output folder: rows stream to disk as each model finishes, and survive a kill -9 at any instant.

    OUT/results.jsonl   one deterministic row per model (rows.py), appended + flushed + fsynced one by one
    OUT/timings.jsonl   sidecar: elapsed_s and peak RSS per model (not compared, not part of a row)
    OUT/summary.csv     one line per model, rewritten from the rows at the end
    OUT/summary.json    the zoo summary (summary.py), rewritten at the end
    OUT/summary.html    the same rows as one sortable offline page with a small roofline per model
    OUT/.lock           locked (lockf) while an audit writes here (a second audit on OUT is refused)

A kill can leave at most one partial line at the end of results.jsonl: reading drops it and truncates
the file back to the last whole row before anything is appended. The summary files are replaced
atomically (write to a temporary file, fsync, rename).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

from graphcost.audit.rows import ROW_SCHEMA, canonical_json, row_line
from graphcost.report.csv import csv_text
from graphcost.report.html_audit import render_audit_html

RESULTS = "results.jsonl"
TIMINGS = "timings.jsonl"
SUMMARY_CSV = "summary.csv"
SUMMARY_JSON = "summary.json"
SUMMARY_HTML = "summary.html"
LOCK = ".lock"

CSV_COLUMNS = (
    "path", "status", "reason", "flops", "macs", "bytes", "roofline_time_s", "bound", "unknown_nodes",
    "peak_activation_bytes", "parameter_count", "node_count", "producer", "sha256",
)


class StoreError(Exception):
    """The output folder cannot be used (locked, unwritable, holds another audit's results)."""


class Store:
    def __init__(self, out_dir: str) -> None:
        self.dir = out_dir
        self._lock_fd: int | None = None

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def open(self) -> None:
        """Create OUT and take its lock (held until close or process death)."""
        import fcntl

        try:
            os.makedirs(self.dir, exist_ok=True)
            fd = os.open(self.path(LOCK), os.O_CREAT | os.O_RDWR, 0o644)
        except OSError as e:
            raise StoreError(f"--out {self.dir}: cannot write ({e.strerror or e})") from None
        try:  # a POSIX record lock: owned by this process, not inherited by the workers it forks
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise StoreError(f"--out {self.dir}: another audit is writing there") from None
        self._lock_fd = fd

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the lock
            self._lock_fd = None

    def read_rows(self) -> list[dict[str, Any]]:
        """Every whole row in results.jsonl, in file order; a partial last line is cut off the file."""
        path = self.path(RESULTS)
        if not os.path.exists(path):
            return []
        rows: list[dict[str, Any]] = []
        good_end = 0
        with open(path, "rb") as f:
            data = f.read()
        pos = 0
        while pos < len(data):
            nl = data.find(b"\n", pos)
            if nl < 0:
                break  # no newline: a write the kill interrupted
            try:
                row = json.loads(data[pos:nl])
            except ValueError:
                row = None
            if isinstance(row, dict) and row.get("schema") == ROW_SCHEMA and "key" in row:
                rows.append(row)
            pos = good_end = nl + 1
        if good_end < len(data):
            with open(path, "r+b") as f:
                f.truncate(good_end)
                f.flush()
                os.fsync(f.fileno())
        return rows

    def append(self, row: Mapping[str, Any], timing: Mapping[str, Any] | None = None) -> None:
        """Append one row durably (one write, then fsync), then its timing (best effort)."""
        _append_line(self.path(RESULTS), row_line(row).encode("utf-8"), sync=True)
        if timing is not None:
            _append_line(self.path(TIMINGS), (canonical_json(timing) + "\n").encode("utf-8"), sync=False)

    def rewrite_rows(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Replace results.jsonl atomically (drops rows of files that changed, vanished or were retried)."""
        _replace(self.path(RESULTS), "".join(row_line(r) for r in rows))

    def write_summary(self, rows: Iterable[Mapping[str, Any]], summary: Mapping[str, Any]) -> None:
        rows = list(rows)
        _replace(self.path(SUMMARY_CSV), render_csv(rows))
        _replace(self.path(SUMMARY_JSON), json.dumps(summary, indent=2, sort_keys=True) + "\n")
        # the human-readable page, one row per model
        _replace(self.path(SUMMARY_HTML), render_audit_html(rows))


def _append_line(path: str, data: bytes, *, sync: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def _replace(path: str, text: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8", errors="surrogateescape", newline="") as f:  # non-UTF-8 names as they are
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def csv_record(row: Mapping[str, Any]) -> dict[str, Any]:
    a = row.get("analysis") or {}
    t = a.get("totals") or {}
    m = a.get("model") or {}
    mem = a.get("memory") or {}
    return {
        "path": row["path"], "status": row["status"], "reason": row.get("reason"),
        "flops": t.get("flops"), "macs": t.get("macs"), "bytes": t.get("bytes"),
        "roofline_time_s": t.get("roofline_time_s"), "bound": t.get("bound"), "unknown_nodes": t.get("unknown_nodes"),
        "peak_activation_bytes": mem.get("peak_activation_bytes"), "parameter_count": m.get("parameter_count"),
        "node_count": m.get("node_count"), "producer": m.get("producer"), "sha256": row.get("sha256"),
    }


def render_csv(rows: Iterable[Mapping[str, Any]]) -> str:
    """summary.csv: one row per model, sorted by path, through the report's one spreadsheet-safe CSV writer."""
    records = [csv_record(r) for r in sorted(rows, key=lambda r: r["path"])]
    return csv_text(CSV_COLUMNS, ([rec[k] for k in CSV_COLUMNS] for rec in records))
