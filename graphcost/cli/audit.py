"""``graphcost audit PATH...``: analyze every model under PATH in parallel, survive bad ones, resume.

Exit 0 when the audit ran, however many models failed (their rows say why); 2 for bad flags or paths;
130 on Ctrl-C (finished rows are kept: rerun with --resume).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
from typing import Any

from graphcost.cli.flags import CliError, hardware_flags, model_flags, parse_model_flags, resolve_hardware
from graphcost.cli.output import guard, hardware_input

NAME = "audit"
HELP = "analyze every model in folders: parallel, isolated, resumable"
"""The line ``graphcost --help`` lists for this command."""
HOOK_ENV = "GRAPHCOST_AUDIT_TEST_HOOK"

_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "kb": 10**3, "m": 1 << 20, "mib": 1 << 20,
               "mb": 10**6, "g": 1 << 30, "gib": 1 << 30, "gb": 10**9, "t": 1 << 40, "tib": 1 << 40, "tb": 10**12}


def parse_size(text: str) -> int | None:
    """'8GiB', '8G' (binary), '8GB' (decimal), '512MiB', a byte count; 0 or 'none' → no limit."""
    if text.strip().lower() in ("0", "none", "off"):
        return None
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _SIZE_UNITS:
        raise ValueError(f"--memory-limit {text!r}: expected a size like 8GiB, 512MiB or 0 for none")
    return int(float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # finished rows are on disk; the CLI exits 130 and --resume continues


def _default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def register(subparsers: Any) -> None:
    """The ``audit`` subcommand and its flags."""
    p = subparsers.add_parser(
        NAME, help=HELP,
        description="Analyze every .onnx model under the given folders, each in its own worker process with a "
                    "time and memory limit. Rows stream to OUT/results.jsonl; --resume skips models already "
                    "done. Exit 0 even when models fail: their rows say why.")
    p.add_argument("paths", nargs="+", metavar="PATH", help="folders (searched recursively) or model files")
    p.add_argument("--jobs", "-j", type=int, default=None, metavar="N",
                   help="models analyzed at once (default: the CPUs this process may use)")
    hardware_flags(p)
    model_flags(p)  # a dim, input shape or input value applies to every model that has it
    p.add_argument("--out", default="graphcost-audit", metavar="DIR",
                   help="output folder: results.jsonl, summary.csv, summary.json (default ./graphcost-audit)")
    p.add_argument("--resume", action="store_true", help="continue the audit in OUT, skipping models already done")
    p.add_argument("--retry-failed", action="store_true",
                   help="with --resume, run again models that timed out, crashed or ran out of memory")
    p.add_argument("--timeout", type=float, default=300.0, metavar="S",
                   help="per-model time limit in seconds; the worker is killed past it (default 300, 0: none)")
    p.add_argument("--memory-limit", default="8GiB", metavar="SIZE",
                   help="per-model address-space limit, e.g. 8GiB, 512MiB (default 8GiB, 0: none)")
    p.add_argument("--scheduler", metavar="ADDR",
                   help="run on a Dask cluster, e.g. tcp://host:8786 (needs graphcost[scale]; shared filesystem)")
    p.add_argument("--top", type=int, default=10, metavar="N", help="models in each top list of the summary")


def _check_out(out: str, paths: list[str], hardware: str | None) -> None:
    """No file the audit writes in OUT (results.jsonl is appended to and truncated) may be an audited model or the
    --hardware file, under any name (symlink, hard link, ``..``); OUT itself may not be one of them either.

    The external-data files of the models are not known here (they are probed in isolated workers, since a
    hostile model may crash the scanner); a row file that is a hard link or symlink is refused outright instead.
    """
    # lazy: the audit's scheduler and store (0.22 s of imports); only audit needs them
    from graphcost.audit.find import find_models
    from graphcost.audit.store import LOCK, RESULTS, SUMMARY_CSV, SUMMARY_HTML, SUMMARY_JSON, TIMINGS

    try:
        models = find_models(paths)
    except FileNotFoundError:
        return  # run_audit names the missing path
    protected = {**{m: f"the audited model {m}" for m in models}, **hardware_input(hardware)}
    if os.path.lexists(out) and not os.path.isdir(out):
        guard(out, protected, flag="--out")
        raise CliError(f"--out {out}: is a file, not a folder")
    for name in (RESULTS, TIMINGS, SUMMARY_CSV, SUMMARY_JSON, SUMMARY_HTML, LOCK):
        path = os.path.join(out, name)
        guard(path, protected, flag="--out")
        if name in (RESULTS, TIMINGS) and os.path.lexists(path) and (
                os.path.islink(path) or os.stat(path).st_nlink > 1):
            raise CliError(f"--out {path}: is a symlink or hard link; refusing to append to it")


def run(args: argparse.Namespace) -> int:
    """Audit every model under ``args.paths`` into ``args.out``; 0 however many models failed."""
    # lazy: the audit's scheduler and store (0.22 s of imports); only audit needs them
    from graphcost.audit import AuditError, AuditOptions, run_audit
    from graphcost.audit.summary import render_text

    jobs = _default_jobs() if args.jobs is None else args.jobs
    if jobs < 1:
        raise CliError("--jobs must be ≥ 1")
    if args.timeout < 0:
        raise CliError("--timeout must be ≥ 0 (0: no limit)")
    if args.top < 0:
        raise CliError("--top must be ≥ 0")
    if args.retry_failed and not args.resume:
        raise CliError("--retry-failed needs --resume")
    try:
        memory = parse_size(args.memory_limit)
    except ValueError as e:
        raise CliError(str(e)) from None
    flags = parse_model_flags(args)
    _check_out(args.out, args.paths, args.hardware)
    opts = AuditOptions(
        paths=args.paths, out_dir=args.out, hardware=resolve_hardware(args).to_dict(complete=True),
        dims=flags.dims, input_shapes=flags.input_shapes, input_values=flags.input_values,
        capacity=not args.no_capacity, jobs=jobs, timeout_s=args.timeout or None,
        memory_bytes=memory, resume=args.resume, retry_failed=args.retry_failed, scheduler=args.scheduler,
        top=args.top, hook=os.environ.get(HOOK_ENV) or None)
    previous = signal.signal(signal.SIGTERM, _terminate)  # so the children are killed on the way out
    try:
        result = run_audit(opts)
    except AuditError as e:
        raise CliError(str(e)) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    sys.stdout.write(render_text(result.summary, wall_s=result.wall_s, analyze_s=result.analyze_s,
                                 analyzed=result.analyzed))
    sys.stdout.write(f"\nresults in {os.path.join(args.out, 'results.jsonl')} (summary.csv, summary.json beside)\n")
    return 0
