"""HardwareSpec.to_dict: the one dict form of a spec (report view and the complete, round-trippable form)."""

from __future__ import annotations

import json

from graphcost.hardware.spec import HardwareSpec

SPEC = HardwareSpec("dev", peak_flops={"float32": 2e12, "float16": 8e12}, memory_bandwidth=50e9,
                    onchip_bytes=4 << 20, onchip_bandwidth=500e9, cache_levels=((64 << 10, 2e12),),
                    sustained_power_w=15.0, kind="soc", description="a test device", sources=("made up",),
                    derating=(0.6, 0.7), memory_bytes=8 << 30)


def test_report_view_states_roofs_and_ridge_points() -> None:
    d = SPEC.to_dict()
    assert list(d) == ["name", "peak_flops", "memory_bandwidth", "ridge_point", "onchip_bytes",
                       "onchip_bandwidth", "cache_levels", "energy_per_byte", "derating"]
    assert d["ridge_point"] == {"float32": 2e12 / 50e9,  # 40 FLOP/B: fp32 peak ÷ DRAM bandwidth
                                "float16": 8e12 / 50e9}  # 160 FLOP/B
    assert d["cache_levels"] == [{"bytes": 64 << 10, "bandwidth": 2e12}]
    assert d["derating"] == {"compute": 0.6, "bandwidth": 0.7}


def test_complete_form_round_trips_every_field_through_json() -> None:
    back = HardwareSpec.from_dict(json.loads(json.dumps(SPEC.to_dict(complete=True))))
    assert back == SPEC


def test_audit_task_keeps_memory_bytes() -> None:
    # regression: the audit worker's own dict form left memory_bytes out, so a task's spec lost its capacity
    back = HardwareSpec.from_dict(json.loads(json.dumps(SPEC.to_dict(complete=True))))
    assert back.memory_bytes == 8 << 30  # 8 GiB, as given
    assert back == SPEC
