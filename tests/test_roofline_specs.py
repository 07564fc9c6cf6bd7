"""A spec works out its on-chip levels and remembers its peak per dtype once (``HardwareSpec.levels``/``peak``,
read by ``kernel_bound``): specs asked about in turn must each get their own roofs, and a spec built from another
(``derated``, ``dataclasses.replace``) must not inherit the other's."""

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


def test_a_spec_made_from_another_works_out_its_own_roofs() -> None:
    from dataclasses import replace

    assert CACHED.peak("float32") == 1e12 and CACHED.levels() == ((1000, 100e9),)  # fill the remembered peak
    half = CACHED.derated(0.5, 0.25)
    assert half.peak("float32") == 1e12 * 0.5  # compute derated by 0.5
    assert half.levels() == ((1000, 100e9 * 0.25),)  # the level's bandwidth derated by 0.25
    bigger = replace(CACHED, onchip_bytes=4000, onchip_bandwidth=50e9)
    assert bigger.levels() == ((1000, 100e9), (4000, 50e9))  # the onchip pair is larger: it is the last level
    assert CACHED.levels() == ((1000, 100e9),) and CACHED.peak("float32") == 1e12  # the original unchanged
    assert replace(CACHED) == CACHED  # the remembered peaks take no part in equality
