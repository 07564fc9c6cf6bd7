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
