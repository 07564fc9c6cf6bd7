"""The explicit list of op-family modules; each registers its rules on import."""

import importlib

FAMILIES = (
    "linalg",
    "conv",
    "elementwise",
)

for _name in FAMILIES:
    importlib.import_module(f"graphcost.ops.{_name}")
