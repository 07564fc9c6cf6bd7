"""The audit as a short list of steps: find → probe → hash → skip what is done → run → summarize.

Every entry found becomes a row: a model, or a skipped entry (FIFO, device, directory named ``*.onnx``,
dangling symlink...) whose row says why, and models whose row is known before analysis (external data
outside the model's folder, files that could not be hashed in time) get it without a worker. The audit
process itself never reads a model or a data file: probing and hashing run in isolated children too.

Resume: a model is done when results.jsonl has a row with its path and key (key = its content, its
external data's content and the settings; rows.py). Rows stream to disk as models finish, so a killed
audit loses only the models that were in flight, and ``--resume`` redoes exactly those.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import graphcost
from graphcost.audit.find import (
    TargetError,
    discover,
    drop_external_files,
    make_jobs,
    probe_externals,
    skipped_jobs,
)
from graphcost.audit.isolate import decided_result
from graphcost.audit.local import run_local
from graphcost.audit.progress import Progress
from graphcost.audit.rows import settings_key
from graphcost.audit.store import Store, StoreError
from graphcost.audit.summary import summarize
from graphcost.hardware.spec import HardwareSpec

RETRYABLE = ("timeout", "crashed", "oom")
"""Statuses ``--retry-failed`` runs again (they may pass with more time or memory); ``error`` is final."""


class AuditError(Exception):
    """A user error: bad paths, an output folder in use or holding other settings' results."""


@dataclass(frozen=True)
class AuditOptions:
    paths: Sequence[str]
    out_dir: str
    hardware: Mapping[str, Any]
    """The HardwareSpec as a JSON-ready dict (``HardwareSpec.to_dict(complete=True)``)."""
    dims: Mapping[str, int] = field(default_factory=dict)
    capacity: bool = True
    input_shapes: Mapping[str, Sequence[int | str]] = field(default_factory=dict)
    input_values: Mapping[str, Any] = field(default_factory=dict)
    """``--input-shape`` / ``--input-value``: applied to each model that has the input."""
    jobs: int = 1
    timeout_s: float | None = 300.0
    memory_bytes: int | None = 8 << 30
    resume: bool = False
    retry_failed: bool = False
    scheduler: str | None = None
    top: int = 10
    hook: str | None = None
    """Test hook for the workers (GRAPHCOST_AUDIT_TEST_HOOK), never from a flag."""


@dataclass(frozen=True)
class AuditResult:
    rows: list[dict[str, Any]]
    summary: dict[str, Any]
    analyzed: int
    """Rows a worker made this run."""
    skipped: int
    """Entries already done in an earlier run (``--resume``); not the rows with status ``skipped``."""
    wall_s: float
    """The whole audit: discovery, probing, hashing, warm-up, analysis, summary."""
    analyze_s: float
    """The analysis phase alone: from the first worker started to the last row written."""


def key_settings(opts: AuditOptions) -> dict[str, Any]:
    """What the resume key covers besides the files: the roofs (not the device's prose), dims, flags, version."""
    out = {"hardware": HardwareSpec.from_dict(opts.hardware).to_dict(), "dims": dict(sorted(opts.dims.items())),
           "capacity": opts.capacity, "graphcost": graphcost.__version__}
    inputs = _inputs_settings(opts)
    if inputs:  # only when given: the keys of earlier audits without them stay the same
        out.update(inputs)
    return out


def _inputs_settings(opts: AuditOptions) -> dict[str, Any]:
    """The input shapes and values as JSON-ready settings (empty when none were given)."""
    out: dict[str, Any] = {}
    if opts.input_shapes:
        out["input_shapes"] = {k: list(v) for k, v in sorted(opts.input_shapes.items())}
    if opts.input_values:
        out["input_values"] = {k: v for k, v in sorted(opts.input_values.items())}
    return out


def run_audit(opts: AuditOptions, progress_stream: Any = None, plain: bool = False) -> AuditResult:
    start = time.monotonic()
    limits = {"timeout_s": opts.timeout_s or None, "memory_bytes": opts.memory_bytes or None}
    try:
        models, skipped = discover(opts.paths)
    except TargetError as e:
        raise AuditError(str(e)) from None
    store = Store(opts.out_dir)
    try:
        store.open()
    except StoreError as e:
        raise AuditError(str(e)) from None
    try:
        skey = settings_key(key_settings(opts))
        existing = store.read_rows()
        if existing and not opts.resume:
            raise AuditError(f"--out {opts.out_dir}: holds results of an earlier audit; "
                             "pass --resume to continue it or choose another --out")
        other = {r["settings_key"] for r in existing} - {skey}
        if other:
            raise AuditError(f"--out {opts.out_dir}: holds results for other analysis settings "
                             "(hardware, dims or graphcost version); choose another --out")
        externals, problems = probe_externals(models, limits, opts.jobs, opts.hook) if models else ({}, {})
        models = drop_external_files(models, externals)
        worker_settings = {"hardware": dict(opts.hardware), "dims": dict(opts.dims), "capacity": opts.capacity,
                           **_inputs_settings(opts)}
        jobs = make_jobs(models, externals, worker_settings, skey, opts.jobs, opts.hook, limits, problems)
        jobs = sorted(jobs + skipped_jobs(skipped, skey), key=lambda j: j["path"])
        done: dict[tuple[str, str], dict[str, Any]] = {}
        for r in existing:
            if not (opts.retry_failed and r["status"] in RETRYABLE):
                done[(r["path"], r["key"])] = r
        pending = [j for j in jobs if (j["path"], j["key"]) not in done]
        fresh: dict[tuple[str, str], dict[str, Any]] = {}

        with Progress(len(pending), len(jobs) - len(pending), stream=progress_stream, force_plain=plain) as bar:
            def on_result(row: dict[str, Any], timing: dict[str, Any]) -> None:
                store.append(row, timing)
                fresh[(row["path"], row["key"])] = row
                bar.advance(row, timing)

            for job in pending:
                if "verdict" in job:
                    on_result(*decided_result(job))
            to_run = [j for j in pending if "verdict" not in j]
            analyze_start = time.monotonic()
            if to_run:
                if opts.scheduler:
                    # lazy: dask.distributed is an optional dependency (graphcost[scale]), only for --scheduler
                    from graphcost.audit.dask_backend import SchedulerError, run_dask

                    try:
                        run_dask(to_run, limits, on_result, opts.scheduler)
                    except SchedulerError as e:
                        raise AuditError(str(e)) from None
                else:
                    run_local(to_run, limits, on_result, opts.jobs)
            analyze_s = time.monotonic() - analyze_start

        rows = [fresh.get((j["path"], j["key"])) or done[(j["path"], j["key"])] for j in jobs]
        if len(existing) + len(fresh) != len(rows):
            store.rewrite_rows(rows)  # one row per model: drop rows of changed, vanished or retried files
        summary = summarize(rows, opts.top)
        store.write_summary(rows, summary)
        analyzed = len(fresh) - (len(pending) - len(to_run))  # rows a worker made (not the decided ones)
        return AuditResult(rows, summary, analyzed, len(jobs) - len(pending), time.monotonic() - start, analyze_s)
    finally:
        store.close()
