"""Local backend: ``--jobs`` children at a time from this process (:func:`isolate.run_children`).

Biggest models start first, so a large model does not start last and leave the other cores idle.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from graphcost.audit.isolate import analyze_task, job_result, run_children

OnResult = Callable[[dict[str, Any], dict[str, Any]], None]


def _size(job: Mapping[str, Any]) -> int:
    return int(job["bytes"] or 0) + sum(int(e["bytes"] or 0) for e in job["external_data"])


def run_local(jobs: Sequence[Mapping[str, Any]], limits: Mapping[str, Any], on_result: OnResult, n: int) -> None:
    """Run every job, calling ``on_result(row, timing)`` in this thread as each one finishes."""
    order = sorted(jobs, key=lambda j: (-_size(j), j["path"]))
    run_children([analyze_task(j) for j in order], limits, n,
                 lambda i, outcome: on_result(*job_result(order[i], outcome)))
