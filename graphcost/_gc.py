"""The cyclic garbage collector paused for a stretch of work, and restored as it was.

An analysis allocates a few records per node, makes no reference cycles and frees nearly nothing until it
ends; with the collector on, each full collection those allocations trigger walks the whole growing heap again.
Each caller says, where it pauses, what the pause was measured to save.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    """The collector off inside the block; on again afterwards only if it was on before (nesting is safe)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


_TRIM_NODES = 5_000
"""Graphs from this many nodes return the heap a pass freed (below it what a pass frees is a few MiB). At 20,000
synthetic-10k kept its inferred copies or not by the luck of allocation order: peak RSS 96 MiB, then 118 once the
node fields were read at load; 97-99 with the trim (``/usr/bin/time``, two runs each)."""


def release_heap(nodes: int) -> None:
    """Hand the C heap's free pages back to the operating system (glibc ``malloc_trim``) after a pass on a large
    graph: the shape pass's inferred model copies (trimmed before the Graph is built, ``passes/shapes.py``) and
    each later pass's working tables (``analysis.stage``).

    Those copies are protobuf arenas in the C heap; once freed, glibc keeps them for later ``malloc`` calls, but
    Python's small objects come from arenas of their own, so nothing after the pass reuses them and they stay in
    the peak RSS. synthetic-100k's ``analyze``: peak RSS 739 → 620 MiB with this and the pass's copies freed
    (``/usr/bin/time``, best of 2); ``malloc_trim`` itself took 14 ms there. A no-op off glibc and under
    ``_TRIM_NODES``."""
    if nodes < _TRIM_NODES:
        return
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc (macOS, musl): nothing to hand back this way
        return
