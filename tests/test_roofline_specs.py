"""``kernel_bound`` reads a spec's peaks and levels once (``passes/roofline.py _Roofs``): specs asked about in
turn must each get their own roofs."""

from __future__ import annotations

from graphcost.hardware.spec import HardwareSpec
from graphcost.passes.roofline import kernel_bound

FAST = HardwareSpec("fast-test", {"float32": 4e12, "float16": 8e12}, 100e9)
SLOW = HardwareSpec("slow-test", {"float32": 1e12}, 10e9)
CACHED = HardwareSpec("cached-test", {"float32": 1e12}, 10e9, cache_levels=((1000, 100e9),))


def test_specs_asked_in_turn_each_get_their_own_peaks_and_levels() -> None:
    flops, moved = 8e9, 2_000  # a kernel of 8 GFLOP moving 2,000 bytes
    for _ in range(2):
        fast = kernel_bound(flops, moved, FAST, dtype="float16")
        assert fast.compute_s == 8e9 / 8e12  # FLOPs at the float16 peak
        assert fast.memory_s == 2_000 / 100e9  # every byte at DRAM: no on-chip levels
        slow = kernel_bound(flops, moved, SLOW, dtype="float16")
        assert slow.compute_s == 8e9 / 1e12  # no float16 peak: the float32 one
        cached = kernel_bound(flops, moved, CACHED, dtype="float32", resident=1_500)
        assert cached.dram_bytes == 2_000  # 2,000 B exceed the 1,000 B level: every byte crosses DRAM
        assert cached.memory_s == max(2_000 / 10e9, 2_000 / 100e9)  # DRAM, and the level all bytes pass
        assert kernel_bound(flops, moved, CACHED, dtype="float32", capacity=False).memory_s == 2_000 / 10e9
