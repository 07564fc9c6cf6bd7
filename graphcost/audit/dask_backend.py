"""Dask backend: the same per-model function (:func:`graphcost.audit.isolate.audit_one`) as Dask tasks.

Why Dask rather than Ray: the unit of work is a plain function of a small dict, with no shared state and
no actors, which is exactly a ``Client.submit``; ``distributed`` is a pure-Python wheel that connects to
``tcp://host:port`` as the flag spells it, ``LocalCluster`` tests it on one machine, and ``as_completed``
streams results back so rows reach disk as each model finishes. Ray would bring a large binary wheel,
its own object store and daemons, and ``ray://`` addresses, for nothing this job needs.

Each task still runs its model in a child process of the Dask worker (``python -m
graphcost.audit.worker``: Dask workers are daemonic and may not have multiprocessing children), so a
crashing model costs one task, never a worker. Workers must see the model files at the same paths
(shared filesystem) and run the same graphcost version (checked before anything is submitted).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import graphcost
from graphcost.audit.isolate import audit_one
from graphcost.audit.local import OnResult
from graphcost.audit.rows import make_row


class SchedulerError(Exception):
    """The scheduler cannot be reached or its workers cannot run this audit."""


def _worker_version() -> str:
    return graphcost.__version__


def run_dask(jobs: Sequence[Mapping[str, Any]], limits: Mapping[str, Any], on_result: OnResult,
             address: str, connect_timeout_s: float = 10.0) -> None:
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise SchedulerError("--scheduler needs dask.distributed: pip install 'graphcost[scale]'") from None

    try:
        client = Client(address, timeout=connect_timeout_s)
    except Exception as e:
        raise SchedulerError(f"--scheduler {address}: cannot connect ({type(e).__name__}: {e})") from None
    try:
        versions = set(client.run(_worker_version).values())
        if not versions:
            raise SchedulerError(f"--scheduler {address}: the cluster has no workers")
        if versions != {graphcost.__version__}:
            raise SchedulerError(f"--scheduler {address}: workers run graphcost {', '.join(sorted(versions))}, "
                                 f"this client {graphcost.__version__}; results would not be comparable")
        by_key = {}
        futures = []
        for job in jobs:
            fut = client.submit(audit_one, dict(job), dict(limits), pure=False)
            by_key[fut.key] = job
            futures.append(fut)
        try:
            for fut in as_completed(futures):
                job = by_key[fut.key]
                if fut.status == "finished":
                    row, timing = fut.result()
                else:  # the task itself failed (worker lost repeatedly): still the model's row
                    exc = fut.exception()
                    reason = f"dask task failed ({type(exc).__name__}: {exc})"
                    row = make_row(job, "crashed", reason)
                    timing = {"path": job["path"], "key": job["key"], "status": "crashed", "elapsed_s": None,
                              "peak_rss_bytes": None}
                on_result(row, timing)
        except BaseException:
            client.cancel(futures)
            raise
    finally:
        client.close()
