"""Which files are models, and what identifies each one: discovery, external-data probing, hashing.

- A model is a ``.onnx`` file found under a folder (recursively), or any file named on the command line.
- A file that another model names as its external data is part of that model, not a model of its own,
  even when it ends in ``.onnx``. Which files a model names is read from its structure in an isolated
  child (a batch of models per child; a batch that dies is retried one model per child), so a file
  that would crash or hang the scanner cannot stop discovery.
- Identity: the SHA-256 of the model file and of each external-data file it names, hashed in threads
  (hashlib releases the GIL), never written to.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from graphcost.audit.isolate import run_children
from graphcost.audit.rows import model_key

MODEL_SUFFIX = ".onnx"
PROBE_BATCH = 64
_CHUNK = 1 << 20


def find_models(paths: Sequence[str]) -> list[str]:
    """Absolute paths of the models under ``paths``, sorted, each real file once.

    Raises FileNotFoundError naming the first path that does not exist.
    """
    found: list[str] = []
    for p in paths:
        if not os.path.exists(p):
            raise FileNotFoundError(p)
        if os.path.isdir(p):
            for root, dirs, files in os.walk(p):
                dirs.sort()
                found.extend(os.path.join(root, f) for f in sorted(files) if f.lower().endswith(MODEL_SUFFIX))
        else:
            found.append(p)
    seen: set[str] = set()
    out: list[str] = []
    for f in sorted(os.path.abspath(f) for f in found):
        real = os.path.realpath(f)
        if real not in seen and os.path.isfile(real):
            seen.add(real)
            out.append(f)
    return out


def probe_externals(models: Sequence[str], limits: Mapping[str, Any], jobs: int,
                    hook: str | None = None) -> dict[str, list[str]]:
    """For each model, the absolute paths of the external-data files it names ([] when unreadable)."""
    result: dict[str, list[str]] = {}
    retry: list[str] = []

    def batches(paths: Sequence[str], size: int) -> list[dict[str, Any]]:
        return [{"kind": "probe", "paths": list(paths[i:i + size]), "hook": hook} for i in range(0, len(paths), size)]

    def collect(tasks: list[dict[str, Any]], i: int, out: dict[str, Any]) -> None:
        if out["status"] == "ok":
            result.update(out["analysis"])
        elif len(tasks[i]["paths"]) > 1:
            retry.extend(tasks[i]["paths"])  # one model per child, to find the one that kills the scanner
        else:
            result[tasks[i]["paths"][0]] = []  # its analysis will fail the same way and say why

    first = batches(models, PROBE_BATCH)
    run_children(first, limits, jobs, lambda i, out: collect(first, i, out))
    again = batches(retry, 1)
    run_children(again, limits, jobs, lambda i, out: collect(again, i, out))
    return result


def drop_external_files(models: Sequence[str], externals: Mapping[str, Iterable[str]]) -> list[str]:
    """The models that are not some other model's external data."""
    owned = {os.path.realpath(e) for m, files in externals.items() for e in files
             if os.path.realpath(e) != os.path.realpath(m)}  # payloads in a model's own file do not make it data
    return [m for m in models if os.path.realpath(m) not in owned]


def hash_file(path: str) -> tuple[str | None, int | None]:
    """(sha256 hex, size) of a file, or (None, None) when it cannot be read."""
    h = hashlib.sha256()
    size = 0
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    try:
        with open(path, "rb") as f:
            while n := f.readinto(buf):
                h.update(view[:n])
                size += n
    except OSError:
        return None, None
    return h.hexdigest(), size


def make_jobs(models: Sequence[str], externals: Mapping[str, Sequence[str]], settings: Mapping[str, Any],
              settings_key: str, jobs: int, hook: str | None = None) -> list[dict[str, Any]]:
    """One job per model: its identity (hashes, resume key) and the settings the worker needs."""
    files = sorted({*models, *(e for m in models for e in externals.get(m, ()) if os.path.isfile(e))})
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        digests = dict(zip(files, pool.map(hash_file, files), strict=True))
    out = []
    for m in models:
        sha, size = digests[m]
        base = os.path.dirname(os.path.realpath(m))
        ext = []
        for e in externals.get(m, ()):
            e_sha, e_size = digests.get(e, (None, None))
            ext.append({"location": os.path.relpath(e, base), "sha256": e_sha, "bytes": e_size})
        out.append({
            "path": m, "bytes": size, "sha256": sha, "external_data": ext, "settings_key": settings_key,
            "key": model_key(sha or "unreadable", ext, settings_key), "settings": dict(settings), "hook": hook,
        })
    return out
