"""Progress: a rich bar (counts, rate, ETA) on a terminal, one plain line per model otherwise.

Both write to stderr, so stdout carries only the summary and pipes stay clean. The bar refreshes when a
model finishes, not from a thread of its own: the local backend forks its workers from this process,
which must have no other threads when it does.

A file name or reason is shown through ``terminal_text`` (``report/escape.py``): a newline, CR or ESC in a
file name is printed as an escape, so it can neither split a progress line nor overwrite or restyle one.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import IO, Any

from graphcost.report.escape import terminal_text


class Progress:
    """``with Progress(total, done_before) as p: p.advance(row, timing)``."""

    def __init__(self, total: int, done_before: int = 0, stream: IO[str] | None = None,
                 force_plain: bool = False) -> None:
        self.total = total
        self.done_before = done_before
        self.count = 0
        self.failed = 0
        self.stream = stream or sys.stderr
        self._start = time.monotonic()
        self._rich: Any = None
        self._task: Any = None
        self.plain = force_plain or not _is_terminal(self.stream)

    def __enter__(self) -> Progress:
        if self.done_before:
            self.note(f"resuming: {self.done_before} of {self.total + self.done_before} models already done")
        if not self.plain and self.total:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TaskProgressColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.progress import (
                Progress as RichProgress,
            )

            self._rich = RichProgress(
                TextColumn("audit"), BarColumn(), MofNCompleteColumn(), TaskProgressColumn(),
                TextColumn("{task.fields[failed]} failed"), TextColumn("{task.fields[rate]}"),
                TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                console=Console(file=self.stream), transient=False, auto_refresh=False)
            self._rich.start()
            self._task = self._rich.add_task("audit", total=self.total, failed=0, rate="")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._rich is not None:
            self._rich.stop()

    def note(self, text: str) -> None:
        if self._rich is not None:
            self._rich.console.print(terminal_text(text), markup=False, highlight=False)
        else:
            print(terminal_text(text), file=self.stream, flush=True)

    def rate(self) -> float:
        dt = time.monotonic() - self._start
        return self.count / dt if dt > 0 else 0.0

    def advance(self, row: Mapping[str, Any], timing: Mapping[str, Any] | None = None) -> None:
        self.count += 1
        self.failed += row["status"] != "ok"
        rate = self.rate()
        if self._rich is not None:
            self._rich.update(self._task, advance=1, failed=self.failed, rate=f"{rate:.2f} models/s", refresh=True)
            if row["status"] != "ok":
                self._rich.console.print(terminal_text(f"{row['status']}: {row['path']}: {row.get('reason')}"),
                                         markup=False, highlight=False)
            return
        left = self.total - self.count
        eta = f"{left / rate:.0f} s" if rate > 0 else "?"
        took = f"{timing['elapsed_s']:.2f} s" if timing else ""
        reason = f"  ({terminal_text(str(row['reason']))})" if row.get("reason") else ""
        path = terminal_text(row["path"])
        width = len(str(self.total))
        print(f"[{self.count:>{width}}/{self.total}] {row['status']:<7} {took:>8}  {path}{reason}  "
              f"| {rate:.2f} models/s, ETA {eta}", file=self.stream, flush=True)


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
