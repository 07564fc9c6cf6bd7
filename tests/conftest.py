"""Fixtures shared by test files: this machine's measured roofs (heavy tests only; measured once per session)."""

from __future__ import annotations

import pytest

from graphcost.hardware.spec import HardwareSpec


@pytest.fixture(scope="session")
def measured_roofs() -> HardwareSpec:
    """A full ``graphcost hardware measure`` of this machine (about 20-40 s), for checks against real roofs."""
    from graphcost.hardware.measure import measure

    return measure().spec
