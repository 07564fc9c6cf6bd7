"""``graphcost audit``: every model in a folder tree, each in isolation, resumable, local or on Dask.

    find.py       which entries are models, which are skipped and why (external-data files are not models),
                  their content hashes (hashed in children)
    worker.py     the child side: analyze one model, probe external data or hash files, under limits
    isolate.py    the parent side: one child per task, time limit, crash/oom/timeout/signal → a row
    rows.py       the row schema, the resume key, the compact per-model summary
    local.py      --jobs threads, each waiting on one child
    dask_backend  the same per-model function as Dask tasks (--scheduler)
    store.py      results.jsonl (append + fsync per row), timings sidecar, summary files, lock
    summary.py    the zoo summary (counts, totals, top models, ops without rules)
    progress.py   rich bar on a terminal, plain lines otherwise
    run.py        the steps in order
"""

from graphcost.audit.run import AuditError, AuditOptions, AuditResult, run_audit

__all__ = ["AuditError", "AuditOptions", "AuditResult", "run_audit"]
