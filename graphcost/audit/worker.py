"""The child side of isolation: what runs inside the throw-away process that analyzes one model.

Two entry points reach the same :func:`child_main`:

- a multiprocessing child (forked from the audit, or from a forkserver): ``child_main(task, limits, conn)``
  sends the outcome on a pipe;
- ``python -m graphcost.audit.worker`` (inside a Dask worker, whose daemonic process may not fork
  multiprocessing children): the task comes as JSON on stdin, the outcome goes back as JSON on stdout.

The child limits itself before it touches the model: address space (``RLIMIT_AS``, so an allocation
past the limit is a ``MemoryError`` → status ``oom``), death with its parent (Linux), a CPU-time
backstop and an alarm (so no child outlives the time limit, parent or not), SIGINT ignored (the
parent decides), its stdout/stderr sent to /dev/null (so library chatter cannot break the progress
bar or the protocol).

Three kinds of task: ``analyze`` (one model), ``probe`` (which external-data files a batch of models names,
each location passed through the one confinement gate, ``load.external_data_path``) and ``hash`` (the SHA-256
of a batch of files, for the resume key: hashing reads whole files, so it runs here, under the time limit,
never in the parent).

Text in a model that is not UTF-8 (protobuf hands it over as ``bytes``) is rewritten as backslash escapes
(:func:`clean_strings`) before the analysis sees it, so an op type ``Z\\xffz`` is an op without a cost rule, not
a failure, and every row serializes.

Test hooks (``task["hook"]``, set only through the GRAPHCOST_AUDIT_TEST_HOOK environment variable of the
parent; comma-separated): ``abort:NAME`` calls ``os.abort()``, ``sleep:NAME`` hangs, ``delay:NAME`` sleeps
0.5 s, ``alloc:NAME`` allocates past any limit, ``raise:NAME`` raises a RuntimeError, ``sigterm:NAME`` and
``sigkill:NAME`` send the worker that signal — each only while analyzing a model whose file name contains
NAME; ``probe-abort:NAME`` aborts the discovery probe instead, ``hash-sleep:NAME`` hangs the hashing.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from collections.abc import Mapping
from typing import Any

# Imported here (not lazily) so the process children are forked from holds the whole analysis stack and each child
# forks with it in memory: this is what makes one process per model cheap.
import onnx

import graphcost.api
from graphcost import _scan
from graphcost.analysis import Analysis
from graphcost.audit.find import hash_file
from graphcost.audit.rows import partial_reason, summarize_report
from graphcost.hardware.spec import HardwareSpec
from graphcost.load import LoadError, clean_strings, external_data_path, external_refs, load, model_text
from graphcost.report.units import bytes_

ALARM_GRACE_S = 5
"""Seconds past the time limit after which a child kills itself, should its parent be gone."""


# ----------------------------------------------------------------------------------------------------------------
# hardware spec ⇄ JSON (tasks cross process and machine boundaries as plain JSON-ready dicts)
# ----------------------------------------------------------------------------------------------------------------


# ----------------------------------------------------------------------------------------------------------------
# the work itself
# ----------------------------------------------------------------------------------------------------------------


def _one_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _hook(task: Mapping[str, Any], path: str, stage: str = "") -> None:
    for hook in str(task.get("hook") or "").split(","):
        action, _, name = hook.strip().partition(":")
        if action and action.startswith(stage) and name in os.path.basename(path):
            _fire(action[len(stage):])


def _fire(action: str) -> None:
    if action == "abort":
        os.abort()
    elif action == "sleep":
        while True:
            time.sleep(60)
    elif action == "delay":
        time.sleep(0.5)
    elif action == "alloc":
        hog = []
        while True:
            hog.append(bytearray(256 << 20))
    elif action == "raise":
        raise RuntimeError("test hook raised")
    elif action == "sigterm":
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(60)
    elif action == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)


def analyze_task(task: Mapping[str, Any], limits: Mapping[str, Any]) -> dict[str, Any]:
    """Analyze one model; every outcome (including bugs) is ``{status, reason, analysis}``.

    Settings dims the model does not have are left out (a zoo mixes models with and without a ``seq`` dim) and
    listed in ``dims_ignored``; input shapes and values apply to the models that have those inputs
    (``graphcost.analysis.Analysis.of`` with ``unknown_dims="ignore"``).
    """
    try:
        _hook(task, task["path"])
        model = load(task["path"])
        clean_strings(model.proto)
        front = Analysis.of(model, dims=task["dims"], input_shapes=task.get("input_shapes") or None,
                            input_values=task.get("input_values") or None, unknown_dims="ignore")
        ignored = sorted(front.ignored_dims)
        report = graphcost.api.analyze(front, hardware=HardwareSpec.from_dict(task["hardware"]),
                                       capacity=task.get("capacity", True))
        analysis = summarize_report(report, ignored)
        return {"status": "ok", "reason": partial_reason(analysis), "analysis": analysis}
    except LoadError as e:  # its message starts with the path, which the row already holds
        reason = _one_line(e)
        prefix = f"{task['path']}: "
        return {"status": "error", "reason": reason[len(prefix):] if reason.startswith(prefix) else reason,
                "analysis": None}
    except MemoryError:
        return {"status": "oom", "reason": oom_reason(limits.get("memory_bytes")), "analysis": None}
    except RecursionError:
        return {"status": "error", "reason": "analysis failed (graph nested too deeply: RecursionError)",
                "analysis": None}
    except ValueError as e:
        return {"status": "error", "reason": f"analysis failed ({_one_line(e)})", "analysis": None}
    except Exception as e:  # a bug in graphcost: still just this model's row
        return {"status": "error", "reason": f"internal error ({type(e).__name__}: {_one_line(e)})",
                "analysis": None}


def oom_reason(limit: int | None) -> str:
    return f"exceeded the memory limit ({bytes_(limit)})" if limit else "out of memory"


def probe_task(task: Mapping[str, Any]) -> dict[str, Any]:
    """For each model: the external-data files it names and the first location refused, read from its structure.

    ``{path: {"files": [real paths inside the model's folder], "problem": str | None}}``. Every location goes
    through ``load.external_data_path``, the one confinement gate (no NUL byte, not absolute, no ``..``, no
    symlink out of the folder, a regular file), so a file outside the model's folder is never listed, and so
    never hashed. A location that is not UTF-8 text is refused here (protobuf strings must be UTF-8). Run
    isolated like an analysis: discovery must survive a file that would crash or hang the scanner.
    """
    found: dict[str, dict[str, Any]] = {}
    for path in task["paths"]:
        _hook(task, path, stage="probe-")
        try:
            proto = _scan.load_structure(path)
        except Exception:
            found[path] = {"files": [], "problem": None}  # its analysis fails the same way and says why
            continue
        found[path] = confined_externals(proto, path)
    return {"status": "ok", "reason": None, "analysis": found}


def confined_externals(proto: onnx.ModelProto, path: str) -> dict[str, Any]:
    """``{"files": [...], "problem": ...}`` for one model (see :func:`probe_task`)."""
    real = os.path.realpath(path)
    base, own = os.path.dirname(real), _scan.own_location(real)
    files: set[str] = set()
    problem: str | None = None
    for _, info in external_refs(proto):
        if "location" not in info:
            continue  # names no file: the analysis refuses it and says so
        loc = info["location"]
        if isinstance(loc, bytes):
            problem = problem or f"external data location {model_text(loc)!r} is not UTF-8 text"
            continue
        if loc == own:
            continue  # a payload the scanner left in the model file itself
        try:
            files.add(external_data_path(base, loc))
        except LoadError as e:
            problem = problem or _one_line(e)
    return {"files": sorted(files), "problem": problem}


def hash_task(task: Mapping[str, Any]) -> dict[str, Any]:
    """``{path: [sha256 hex, size] or [None, None]}`` for each file of the batch (regular files only)."""
    out: dict[str, list[Any]] = {}
    for path in task["paths"]:
        _hook(task, path, stage="hash-")
        out[path] = list(hash_file(path))
    return {"status": "ok", "reason": None, "analysis": out}


# ----------------------------------------------------------------------------------------------------------------
# process setup and entry points
# ----------------------------------------------------------------------------------------------------------------


def _die_with_parent() -> None:
    """Linux: SIGKILL this child when its parent (the audit, the forkserver, or the Dask worker) dies."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # the alarm below still bounds its life


def _limit_self(limits: Mapping[str, Any]) -> None:
    import resource

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a forked child inherits the audit's handler, which would
    # turn a SIGTERM into KeyboardInterrupt and "exited with status 1": let the signal say what it was
    _die_with_parent()
    mem = limits.get("memory_bytes")
    if mem:
        # what the model's work may add to the address space this child starts with: a fork inherits its
        # parent's mappings (a Python session that imported torch is past 1 GiB of it), which are not the model's
        want = mem + (_address_space_bytes() or 0)
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        soft = want if hard == resource.RLIM_INFINITY else min(want, hard)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    timeout = limits.get("timeout_s")
    if timeout:
        signal.alarm(math.ceil(timeout) + ALARM_GRACE_S)  # default action: terminate
        cpu = math.ceil(timeout) + ALARM_GRACE_S
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        if hard == resource.RLIM_INFINITY or hard > cpu:
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, hard))
    import faulthandler

    faulthandler.disable()  # a crash is reported by the parent, as the model's row; no traceback noise
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(devnull)


def _address_space_bytes() -> int | None:
    """This process's virtual size now (VmSize), or None where /proc is absent."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def peak_rss_bytes() -> int | None:
    """This process's peak resident set (VmHWM), or None where /proc is absent."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def run_task(task: Mapping[str, Any], limits: Mapping[str, Any]) -> dict[str, Any]:
    kind = task.get("kind")
    out = probe_task(task) if kind == "probe" else hash_task(task) if kind == "hash" else analyze_task(task, limits)
    out["peak_rss_bytes"] = peak_rss_bytes()
    return out


def child_main(task: dict[str, Any], limits: dict[str, Any], conn: Any) -> None:
    """Forkserver child: limit self, run, send the outcome, exit."""
    _limit_self(limits)
    conn.send(run_task(task, limits))
    conn.close()


def _stdio_main() -> int:
    """``python -m graphcost.audit.worker``: {task, limits} as JSON on stdin → outcome JSON on stdout."""
    request = json.loads(sys.stdin.buffer.read())
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    _limit_self(request["limits"])
    out.write(json.dumps(run_task(request["task"], request["limits"])))
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(_stdio_main())
