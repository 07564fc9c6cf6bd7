"""Measurement: onnxruntime runs with per-kernel times, and native-framework latency (see docs/measure.md).

Nothing here imports torch, TensorFlow or JAX until a native runner is called.
"""

from graphcost.measure.inputs import make_inputs
from graphcost.measure.native import (
    FrameworkMissing,
    NativeRun,
    installed_frameworks,
    time_jax,
    time_tf,
    time_torch,
)
from graphcost.measure.ort import KernelTime, OrtRun, available_providers, run_ort
from graphcost.measure.stats import Timing, timing

__all__ = [
    "FrameworkMissing",
    "KernelTime",
    "NativeRun",
    "OrtRun",
    "Timing",
    "available_providers",
    "installed_frameworks",
    "make_inputs",
    "run_ort",
    "time_jax",
    "time_tf",
    "time_torch",
    "timing",
]
