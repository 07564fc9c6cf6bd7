"""The parent side of isolation: one throw-away child per task, killed at the time limit, and however it
ended turned into an outcome. Nothing a model does can take the audit down with it.

:func:`run_children` is the one place children are started, watched and reaped: a single-threaded loop
over ``multiprocessing.connection.wait`` (pipes, process sentinels, deadlines), at most ``n`` children at a
time. Which start method:

- **fork** (Linux, the local backend): the audit process has imported and warmed up the analysis stack
  (``_preload.warm_up``) and has no other threads, so each child is a fork of it: milliseconds to start, no
  second interpreter, no re-import of the caller's ``__main__``.
- **forkserver** (:func:`run_isolated`, called from Dask worker threads, where forking a threaded process
  is unsafe; and the local backend off Linux): a server that imported the stack once forks each child.
- **subprocess** ``python -m graphcost.audit.worker``: where this process may not have multiprocessing
  children at all (a Dask worker is daemonic by default), or with ``GRAPHCOST_AUDIT_LAUNCHER=subprocess``.

How a child ended → status::

    sent an outcome                         the child's own status (ok, error, oom from MemoryError)
    still running at the time limit         timeout   (killed by us)
    SIGALRM / SIGXCPU (its own backstops)   timeout
    SIGKILL not sent by us, while the
      kernel's OOM killer ran               oom       ("killed by SIGKILL: the kernel's OOM killer ran ...")
    SIGKILL not sent by us, otherwise       crashed   ("killed by SIGKILL (cause unknown; out of memory is
                                                       one possibility)")
    a fault (SIGSEGV, SIGABRT, SIGBUS...)   crashed   ("worker crashed (SIGSEGV)")
    any other signal (SIGTERM, SIGHUP...)   crashed   ("worker killed by SIGTERM")
    exit status without an outcome          crashed

"The OOM killer ran" is read from the kernel's counters, before the child started and after it ended:
``oom_kill`` in the audit's cgroup (``memory.events``, cgroup v2) or in ``/proc/vmstat``. They count every
OOM kill in that cgroup or machine, so the reason says the killer ran meanwhile, not that it chose this
child; where neither counter can be read, a SIGKILL's cause is unknown and the reason says so. The
``--memory-limit`` itself (``RLIMIT_AS``) never kills: it makes an allocation fail, which the child reports
as a ``MemoryError`` (status ``oom``, "exceeded the memory limit").
"""

from __future__ import annotations

import json
import multiprocessing
import multiprocessing.connection
import multiprocessing.context
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from graphcost.audit.rows import make_row

LAUNCHER_ENV = "GRAPHCOST_AUDIT_LAUNCHER"
_REAP_GRACE_S = 5.0
_TICK_S = 0.5

Outcome = dict[str, Any]
"""``{status, reason, analysis, peak_rss_bytes, elapsed_s}``."""

_lock = threading.Lock()
_contexts: dict[str, multiprocessing.context.BaseContext] = {}


def context(method: str | None = None) -> multiprocessing.context.BaseContext:
    """The start method's context: fork on Linux for the local loop, else forkserver (preloaded), else spawn."""
    available = multiprocessing.get_all_start_methods()
    if method is None:
        method = "fork" if sys.platform.startswith("linux") else "forkserver"
    if method not in available:
        method = "forkserver" if "forkserver" in available else "spawn"
    with _lock:
        if method not in _contexts:
            ctx = multiprocessing.get_context(method)
            if method == "forkserver":
                ctx.set_forkserver_preload(["graphcost.audit._preload"])
            _contexts[method] = ctx
        return _contexts[method]


def warm_up(ctx: multiprocessing.context.BaseContext) -> None:
    """Before forking from this process: load what every child needs once, here, and move what is loaded out
    of the cycle collector's reach (``gc.freeze``), so children do not copy every page it would touch."""
    if ctx.get_start_method() == "fork":
        import gc

        # lazy: the warm-up (the analysis stack, about 0.5 s) runs only where children are forked from
        from graphcost.audit import _preload  # noqa: F401  (imports and warms up on first import)

        gc.collect()
        gc.freeze()


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def _time_reason(timeout: float | None) -> str:
    return f"exceeded the time limit ({timeout:g} s)"


_FAULTS = frozenset({signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT, signal.SIGTRAP,
                     signal.SIGSYS})
"""Signals a process gets from its own fault (or ``abort()``): the worker *crashed*, rather than was killed."""


def _counter(path: str, key: str) -> int | None:
    try:
        with open(path, encoding="ascii") as f:
            for line in f:
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
    except (OSError, ValueError):
        pass
    return None


def _cgroup_events() -> str | None:
    try:
        with open("/proc/self/cgroup", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("0::"):
                    return os.path.join("/sys/fs/cgroup", line[3:].strip().lstrip("/"), "memory.events")
    except OSError:
        pass
    return None


def oom_kills() -> tuple[int | None, int | None]:
    """The kernel's OOM-kill counters that can be read here: (this cgroup's, the machine's); None where not."""
    events = _cgroup_events()
    return (_counter(events, "oom_kill") if events else None), _counter("/proc/vmstat", "oom_kill")


def oom_killer_ran(before: tuple[int | None, int | None], after: tuple[int | None, int | None]) -> bool | None:
    """Whether an OOM kill was counted between the two readings; None when no counter could be compared."""
    pairs = [(b, a) for b, a in zip(before, after, strict=True) if b is not None and a is not None]
    if not pairs:
        return None
    return any(a > b for b, a in pairs)


def classify_exit(returncode: int | None, timed_out: bool, limits: Mapping[str, Any],
                  oom_killed: bool | None = None) -> tuple[str, str]:
    """(status, reason) for a child that ended without sending an outcome.

    ``oom_killed``: whether the kernel's OOM killer ran while the child lived (None: unknown).
    """
    timeout = limits.get("timeout_s")
    if timed_out:
        return "timeout", _time_reason(timeout)
    if returncode is None:
        return "crashed", "worker vanished"
    if returncode < 0:
        sig = -returncode
        if sig in (signal.SIGALRM, signal.SIGXCPU):
            return "timeout", _time_reason(timeout)
        if sig == signal.SIGKILL:
            if oom_killed:
                return "oom", "worker killed by SIGKILL: the kernel's OOM killer ran meanwhile (out of memory)"
            return "crashed", "worker killed by SIGKILL (cause unknown; out of memory is one possibility)"
        if sig in _FAULTS:
            return "crashed", f"worker crashed ({_signal_name(sig)})"
        return "crashed", f"worker killed by {_signal_name(sig)}"
    return "crashed", f"worker exited with status {returncode} without a result"


def _failed(status: str, reason: str) -> Outcome:
    return {"status": status, "reason": reason, "analysis": None, "peak_rss_bytes": None}


@dataclass
class _Child:
    index: int
    proc: Any
    reader: Any
    started: float
    deadline: float | None
    oom_before: tuple[int | None, int | None] = (None, None)
    outcome: Outcome | None = None
    timed_out: bool = False


def run_children(tasks: Sequence[Mapping[str, Any]], limits: Mapping[str, Any], n: int,
                 on_outcome: Callable[[int, Outcome], None],
                 ctx: multiprocessing.context.BaseContext | None = None) -> None:
    """Run each task in a child of its own, ``n`` at a time; ``on_outcome(task index, outcome)`` as each ends.

    Tasks start in the order given. On any exception (Ctrl-C included) every running child is killed
    before it propagates; tasks that had not finished get no outcome.
    """
    # lazy: the worker's analysis stack (onnx and the pipeline, about 0.5 s) loads only when children run
    from graphcost.audit import worker

    ctx = ctx or context()
    warm_up(ctx)
    timeout = limits.get("timeout_s")
    todo = list(range(len(tasks)))[::-1]
    running: dict[Any, _Child] = {}  # by reader and by sentinel
    children: list[_Child] = []
    try:
        while todo or children:
            while todo and len(children) < max(1, n):
                i = todo.pop()
                reader, writer = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=worker.child_main, args=(dict(tasks[i]), dict(limits), writer),  # type: ignore[attr-defined]
                                   name="graphcost-audit-child", daemon=False)
                now = time.monotonic()
                oom_before = oom_kills()
                try:
                    proc.start()
                except OSError as e:  # fork refused (no memory, process limit): this task's outcome, not the end
                    writer.close()
                    reader.close()
                    on_outcome(i, {**_failed("crashed", f"could not start a worker ({e.strerror or e})"),
                                   "elapsed_s": 0.0})
                    continue
                writer.close()
                child = _Child(i, proc, reader, now, now + timeout if timeout else None, oom_before)
                children.append(child)
                running[reader] = running[proc.sentinel] = child
            deadlines = [c.deadline for c in children if c.deadline is not None]
            wait_s = max(0.0, min(deadlines) - time.monotonic()) if deadlines else _TICK_S
            ready = multiprocessing.connection.wait(list(running), timeout=min(wait_s, _TICK_S))
            now = time.monotonic()
            for obj in ready:
                got = running.pop(obj, None)
                if got is not None and obj is got.reader:
                    conn: Any = obj
                    try:
                        got.outcome = conn.recv()
                    except (EOFError, OSError):
                        pass  # died before sending: its exit code says how
            for child in list(children):
                if child.deadline is not None and now >= child.deadline and child.outcome is None \
                        and child.reader in running:
                    child.timed_out = True
                    child.proc.kill()
                done = child.reader not in running and child.proc.sentinel not in running
                if child.outcome is not None or child.timed_out or done:
                    running.pop(child.reader, None)
                    running.pop(child.proc.sentinel, None)
                    children.remove(child)
                    _finish(child, limits, on_outcome)
    finally:
        for child in children:
            child.proc.kill()
        for child in children:
            child.proc.join(_REAP_GRACE_S)
            child.reader.close()


def _finish(child: _Child, limits: Mapping[str, Any], on_outcome: Callable[[int, Outcome], None]) -> None:
    child.proc.join(_REAP_GRACE_S)
    if child.proc.exitcode is None:
        child.proc.kill()
        child.proc.join()
    child.reader.close()
    outcome = child.outcome
    if outcome is None:
        ran = oom_killer_ran(child.oom_before, oom_kills()) if child.proc.exitcode == -signal.SIGKILL else None
        outcome = _failed(*classify_exit(child.proc.exitcode, child.timed_out, limits, ran))
    outcome["elapsed_s"] = time.monotonic() - child.started
    child.proc.close()
    on_outcome(child.index, outcome)


def _use_subprocess() -> bool:
    if os.environ.get(LAUNCHER_ENV) == "subprocess":
        return True
    return bool(multiprocessing.current_process().daemon)


def _run_subprocess(task: Mapping[str, Any], limits: Mapping[str, Any]) -> Outcome:
    request = json.dumps({"task": task, "limits": limits}).encode()
    start = time.monotonic()
    oom_before = oom_kills()
    proc = subprocess.Popen([sys.executable, "-m", "graphcost.audit.worker"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        timed_out = False
        try:
            out, _ = proc.communicate(request, timeout=limits.get("timeout_s"))
        except subprocess.TimeoutExpired:
            timed_out = True
            proc.kill()
            out, _ = proc.communicate()
        result: Outcome | None = None
        if not timed_out and proc.returncode == 0 and out:
            try:
                result = json.loads(out)
            except ValueError:
                result = None
        if result is None:
            ran = oom_killer_ran(oom_before, oom_kills()) if proc.returncode == -signal.SIGKILL else None
            result = _failed(*classify_exit(proc.returncode, timed_out, limits, ran))
        result["elapsed_s"] = time.monotonic() - start
        return result
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def run_isolated(task: Mapping[str, Any], limits: Mapping[str, Any]) -> Outcome:
    """One task in a child of its own, from any thread (a Dask task): forkserver, or a subprocess where
    this process may not have multiprocessing children."""
    if _use_subprocess():
        return _run_subprocess(task, limits)
    got: list[Outcome] = []
    run_children([task], limits, 1, lambda _, outcome: got.append(outcome), context("forkserver"))
    return got[0]


def analyze_task(job: Mapping[str, Any]) -> dict[str, Any]:
    """The worker task for a job: its path and settings (the hashes stay with the parent)."""
    return {"kind": "analyze", "path": job["path"], **job["settings"], "hook": job.get("hook")}


def job_result(job: Mapping[str, Any], out: Outcome) -> tuple[dict[str, Any], dict[str, Any]]:
    """A job and its child's outcome → (row, timing)."""
    row = make_row(job, out["status"], out["reason"], out.get("analysis"))
    timing = {"path": job["path"], "key": job["key"], "status": out["status"],
              "elapsed_s": round(float(out.get("elapsed_s") or 0.0), 4), "peak_rss_bytes": out.get("peak_rss_bytes")}
    return row, timing


def audit_one(job: Mapping[str, Any], limits: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """One model → (row, timing), from any thread: the unit of work a Dask task runs.

    Never raises: even a failure to start the child becomes the model's row.
    """
    try:
        out = run_isolated(analyze_task(job), limits)
    except Exception as e:  # could not even start a child (fork failed, no /dev/shm, ...)
        out = {**_failed("crashed", f"could not start a worker ({type(e).__name__}: {e})"), "elapsed_s": 0.0}
    return job_result(job, out)


def decided_result(job: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A job whose row was decided before any analysis (``job["verdict"]``: a skipped entry, a model whose
    external data is refused, a file that could not be hashed) → (row, timing), without a worker."""
    status, reason = job["verdict"]
    return job_result(job, {**_failed(status, reason), "elapsed_s": 0.0})
