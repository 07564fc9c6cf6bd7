"""Which entries are models, which are skipped and why, and what identifies each model: discovery,
external-data probing, hashing.

- A model is a regular ``.onnx`` file found under a folder (recursively), or any regular file named on the
  command line. Every other entry named ``*.onnx`` (a FIFO, socket, device, a directory, a dangling symlink,
  a symlink loop, a file that cannot be read) is a *skipped* entry with a reason: it gets a row of its own
  (status ``skipped``), never silently dropped, and is never opened. A folder that cannot be listed is a
  skipped entry too. A command-line target that is neither a folder nor a regular file is a user error
  (:class:`TargetError`).
- A file that another model names as its external data is part of that model, not a model of its own,
  even when it ends in ``.onnx``. Which files a model names is read from its structure in an isolated
  child (a batch of models per child; a batch that dies is retried one model per child), so a file
  that would crash or hang the scanner cannot stop discovery. Locations are confined to the model's
  folder there (``load.external_data_path``): a file outside it is never listed, so never hashed.
- Identity: the SHA-256 of the model file and of each external-data file it names, hashed in isolated
  children too (batches of files; under the time limit), so no file, however large or slow, is read by
  the audit process itself. A file that cannot be hashed in time makes its model a ``timeout`` row.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import stat
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from graphcost import _scan
from graphcost.audit.isolate import run_children
from graphcost.audit.rows import model_key

MODEL_SUFFIX = ".onnx"
PROBE_BATCH = 64
HASH_BATCH_FILES = 64
HASH_BATCH_BYTES = 256 << 20
"""A hashing child takes files until it holds this many bytes (a bigger file gets a child of its own)."""
_CHUNK = 1 << 20


class TargetError(Exception):
    """A command-line target that cannot be audited: missing, or neither a folder nor a regular file."""


def _is_model_name(name: str) -> bool:
    return name.lower().endswith(MODEL_SUFFIX)


def entry_problem(path: str) -> str | None:
    """Why the entry at ``path`` is not a model to analyze (None: a readable regular file). Never opens it."""
    try:
        st = os.stat(path)  # follows symlinks: a link to a regular file is a model
    except FileNotFoundError:
        return "a symbolic link whose target does not exist" if os.path.islink(path) else "vanished during discovery"
    except ValueError:
        return "not a valid file name (NUL byte)"
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "a symbolic link loop"
        return f"cannot be read ({e.strerror or e})"
    if stat.S_ISDIR(st.st_mode):
        return "a directory named like a model, not a model file"
    kind = _scan.file_kind(st.st_mode)
    if kind is not None:
        return f"{kind}, not a regular file"
    if not os.access(path, os.R_OK):
        return "cannot be read (permission denied)"
    return None


def _target_problem(path: str) -> str | None:
    """Why a command-line target cannot be audited (None: a folder or a regular file)."""
    if os.path.isdir(path):
        return None if os.access(path, os.R_OK | os.X_OK) else "a folder that cannot be listed (permission denied)"
    problem = entry_problem(path)
    if problem is None:
        return None
    if problem == "vanished during discovery":
        return "no such file or directory"
    if problem.startswith("a symbolic link"):
        return problem.replace("a symbolic link", "is a symbolic link", 1)
    if problem.startswith("cannot be read") or problem.startswith("not a valid"):
        return problem
    return f"is {problem.replace(', not a regular file', '')}: not a folder or a regular model file"


def discover(paths: Sequence[str]) -> tuple[list[str], list[dict[str, str]]]:
    """(models, skipped): absolute paths of the models under ``paths``, sorted, each real file once; and every
    other candidate entry as ``{"path", "reason"}``, sorted by path.

    Raises :class:`TargetError` (one line, naming the path) for a target that is neither a folder nor a
    regular file.
    """
    candidates: list[str] = []
    skipped: dict[str, str] = {}
    for p in paths:
        problem = _target_problem(p)
        if problem is not None:
            raise TargetError(f"{p}: {problem}")
        if not os.path.isdir(p):
            candidates.append(p)  # named on the command line: a model whatever its name
            continue

        def unlistable(e: OSError, top: str = p) -> None:
            where = os.path.abspath(e.filename if isinstance(e.filename, str) else top)
            skipped[where] = f"a folder that cannot be listed ({e.strerror or e}); models in it were not audited"

        for root, dirs, files in os.walk(p, onerror=unlistable):
            dirs.sort()
            candidates.extend(os.path.join(root, f) for f in sorted(files) if _is_model_name(f))
            for d in dirs:
                if _is_model_name(d):
                    full = os.path.abspath(os.path.join(root, d))
                    link = os.path.islink(full)
                    skipped[full] = entry_problem(full) or "not a model file"
                    if link and skipped[full].startswith("a directory"):
                        skipped[full] = "a symbolic link to a directory named like a model (not followed)"
    seen: set[str] = set()
    models: list[str] = []
    for f in sorted({os.path.abspath(f) for f in candidates}):
        problem = entry_problem(f)
        if problem is not None:
            skipped[f] = problem
            continue
        real = os.path.realpath(f)
        if real not in seen:
            seen.add(real)
            models.append(f)
    return models, [{"path": k, "reason": skipped[k]} for k in sorted(skipped)]


def find_models(paths: Sequence[str]) -> list[str]:
    """Absolute paths of the models under ``paths``, sorted, each real file once (skipped entries left out).

    Raises FileNotFoundError naming the first path that does not exist; a target that exists but cannot be
    audited (a FIFO, a device) contributes no model here (:func:`discover` says why).
    """
    good: list[str] = []
    for p in paths:
        if not os.path.lexists(p):
            raise FileNotFoundError(p)
        if _target_problem(p) is None:
            good.append(p)
    return discover(good)[0]


def probe_externals(models: Sequence[str], limits: Mapping[str, Any], jobs: int,
                    hook: str | None = None) -> tuple[dict[str, list[str]], dict[str, str]]:
    """(externals, problems): for each model, the real paths of the external-data files it names inside its
    folder ([] when unreadable); and, for models naming a location the gate refuses, why (the first one)."""
    result: dict[str, list[str]] = {}
    problems: dict[str, str] = {}
    retry: list[str] = []

    def batches(paths: Sequence[str], size: int) -> list[dict[str, Any]]:
        return [{"kind": "probe", "paths": list(paths[i:i + size]), "hook": hook} for i in range(0, len(paths), size)]

    def collect(tasks: list[dict[str, Any]], i: int, out: dict[str, Any]) -> None:
        if out["status"] == "ok":
            for path, found in out["analysis"].items():
                result[path] = list(found["files"])
                if found.get("problem"):
                    problems[path] = str(found["problem"])
        elif len(tasks[i]["paths"]) > 1:
            retry.extend(tasks[i]["paths"])  # one model per child, to find the one that kills the scanner
        else:
            result[tasks[i]["paths"][0]] = []  # its analysis will fail the same way and say why

    first = batches(models, PROBE_BATCH)
    run_children(first, limits, jobs, lambda i, out: collect(first, i, out))
    again = batches(retry, 1)
    run_children(again, limits, jobs, lambda i, out: collect(again, i, out))
    return result, problems


def _real(path: str) -> str:
    try:
        return os.path.realpath(path)
    except ValueError:  # a NUL byte: names no file
        return path


def drop_external_files(models: Sequence[str], externals: Mapping[str, Iterable[str]]) -> list[str]:
    """The models that are not some other model's external data."""
    owned = {_real(e) for m, files in externals.items() for e in files
             if _real(e) != _real(m)}  # payloads in a model's own file do not make it data
    return [m for m in models if _real(m) not in owned]


def hash_file(path: str) -> tuple[str | None, int | None]:
    """(sha256 hex, size) of a regular file, or (None, None) when it cannot be read (or is not a regular file:
    opened non-blocking and checked with fstat, so a FIFO swapped in cannot hang it)."""
    h = hashlib.sha256()
    size = 0
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    try:
        with cast(io.FileIO, _scan.open_regular(path)) as f:  # unbuffered: readinto fills our buffer
            while n := f.readinto(buf):
                h.update(view[:n])
                size += n
    except (OSError, ValueError):  # ScanError (not a regular file) is a ValueError, as is a NUL byte
        return None, None
    return h.hexdigest(), size


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except (OSError, ValueError):
        return 0


def hash_files(files: Sequence[str], limits: Mapping[str, Any], jobs: int, hook: str | None = None
               ) -> tuple[dict[str, tuple[str | None, int | None]], dict[str, tuple[str, str]]]:
    """(digests, failures): hash ``files`` in isolated children under ``limits``, batched by size; a batch that
    times out or dies is retried one file per child, and a file that fails alone gets ``(status, reason)``."""
    digests: dict[str, tuple[str | None, int | None]] = {}
    failures: dict[str, tuple[str, str]] = {}
    retry: list[str] = []
    first: list[dict[str, Any]] = []
    batch: list[str] = []
    held = 0
    for f in files:
        n = _size(f)
        if batch and (len(batch) >= HASH_BATCH_FILES or held + n > HASH_BATCH_BYTES):
            first.append({"kind": "hash", "paths": batch, "hook": hook})
            batch, held = [], 0
        batch.append(f)
        held += n
    if batch:
        first.append({"kind": "hash", "paths": batch, "hook": hook})

    def collect(tasks: list[dict[str, Any]], i: int, out: dict[str, Any]) -> None:
        if out["status"] == "ok":
            for path, (sha, size) in out["analysis"].items():
                digests[path] = (sha, size)
        elif len(tasks[i]["paths"]) > 1:
            retry.extend(tasks[i]["paths"])
        else:
            failures[tasks[i]["paths"][0]] = (out["status"], str(out["reason"]))

    run_children(first, limits, jobs, lambda i, out: collect(first, i, out))
    again = [{"kind": "hash", "paths": [f], "hook": hook} for f in retry]
    run_children(again, limits, jobs, lambda i, out: collect(again, i, out))
    return digests, failures


def make_jobs(models: Sequence[str], externals: Mapping[str, Sequence[str]], settings: Mapping[str, Any],
              settings_key: str, jobs: int, hook: str | None = None, limits: Mapping[str, Any] | None = None,
              problems: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """One job per model: its identity (hashes, resume key) and the settings the worker needs.

    A job whose row is known before any analysis carries ``verdict: [status, reason]``: a model naming
    external data the gate refuses (``problems``, from the probe: ``error``), or one whose files could not be
    hashed within the limits (``timeout``, ``crashed``...).
    """
    problems = problems or {}
    files = sorted({*models, *(e for m in models for e in externals.get(m, ()))})
    digests, failures = hash_files(files, limits or {}, jobs, hook)
    out = []
    for m in models:
        sha, size = digests.get(m, (None, None))
        base = os.path.dirname(_real(m))
        ext = []
        for e in externals.get(m, ()):
            e_sha, e_size = digests.get(e, (None, None))
            ext.append({"location": os.path.relpath(e, base), "sha256": e_sha, "bytes": e_size})
        job: dict[str, Any] = {
            "path": m, "bytes": size, "sha256": sha, "external_data": ext, "settings_key": settings_key,
            "key": model_key(sha or "unreadable", ext, settings_key), "settings": dict(settings), "hook": hook,
        }
        failed = [(f, failures[f]) for f in (m, *externals.get(m, ())) if f in failures]
        if m in problems:
            job["verdict"] = ["error", problems[m]]
        elif failed:
            f, (status, reason) = failed[0]
            which = "the model file" if f == m else f"external data file {os.path.relpath(f, base)!r}"
            job["verdict"] = [status, f"hashing {which} (for the resume key): {reason}"]
        out.append(job)
    return out


def skipped_jobs(skipped: Sequence[Mapping[str, str]], settings_key: str) -> list[dict[str, Any]]:
    """A job for each skipped entry: no hashes, its row decided (``skipped`` with the reason)."""
    return [{"path": s["path"], "bytes": None, "sha256": None, "external_data": [], "settings_key": settings_key,
             "key": model_key(f"skipped: {s['reason']}", [], settings_key), "settings": {}, "hook": None,
             "verdict": ["skipped", s["reason"]]} for s in skipped]
