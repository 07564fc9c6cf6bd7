"""Report sections that wrap a pass result with numbers for the chosen hardware and binding."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from graphcost.hardware.spec import HardwareSpec
from graphcost.passes.batchnorm import BatchNormResult, Foldable, Refusal, bind, time_saved_s

Number = int | float


@dataclass(frozen=True)
class BatchNormSection:
    """Foldable batchnorms and refusals, with what folding saves as numbers under the binding."""

    foldable: tuple[Foldable, ...]
    refused: tuple[Refusal, ...]
    bytes_saved: Number | None
    flops_saved: Number | None
    time_saved_s: float | None
    result: BatchNormResult = field(repr=False, compare=False)

    @classmethod
    def of(cls, result: BatchNormResult, hw: HardwareSpec, binding: Mapping[str, int]) -> BatchNormSection:
        def num(v: Any) -> Number | None:
            return None if v is None else bind(v, binding)

        return cls(result.foldable, result.refused, num(result.bytes_saved), num(result.flops_saved),
                   time_saved_s(result, hw, binding), result)

    def to_dict(self) -> dict[str, Any]:
        return {
            "foldable": [{"batchnorm": f.batchnorm, "into": f.into, "direction": f.direction, "into_op": f.into_op}
                         for f in self.foldable],
            "refused": [r.to_dict() for r in self.refused],
            "bytes_saved": self.bytes_saved,
            "flops_saved": self.flops_saved,
            "time_saved_s": self.time_saved_s,
        }
