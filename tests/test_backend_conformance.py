"""Every node test case onnx ships analyzes without a crash, and never states a wrong shape.

The cases (``onnx.backend.test.case.node.collect_testcases()``, about 1,900 models) come with their
expected outputs. We clear the declared output shapes first, so what is compared is graphcost's own
inference: wherever it gives a number it must equal the expected output's dim; a value-dependent
dim (NonZero, a Split whose sizes are a graph input) must come back as a named unknown, not a guess.
"""

from __future__ import annotations

import warnings
from functools import lru_cache

import numpy as np
import onnx
import pytest

import graphcost
from graphcost.hardware.spec import HardwareSpec
from graphcost.ops import lookup

EDGE = HardwareSpec("edge-test", {"float32": 2e12}, 50e9)


@lru_cache(maxsize=1)
def _cases() -> list:  # type: ignore[type-arg]
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return list(collect_testcases())


def _strip_output_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for o in out.graph.output:
        if o.type.HasField("tensor_type"):
            o.type.tensor_type.ClearField("shape")
    return out


def test_all_node_cases_analyze_and_no_inferred_dim_is_wrong() -> None:
    cases = _cases()
    assert len(cases) > 1500
    crashes: list[str] = []
    wrong: list[str] = []
    exact = 0
    for case in cases:
        try:
            report = graphcost.analyze(_strip_output_shapes(case.model), hardware=EDGE)
        except Exception as e:
            crashes.append(f"{case.name}: {type(e).__name__}: {e}")
            continue
        if not case.data_sets:
            continue
        expected_outputs = case.data_sets[0][1]
        for info, value in zip(report.model.outputs, expected_outputs, strict=False):
            if not isinstance(value, np.ndarray) or info.shape is None:
                continue
            if len(info.shape) != value.ndim:
                wrong.append(f"{case.name}/{info.name}: rank {len(info.shape)} vs expected {value.ndim}")
                continue
            for got, want in zip(info.shape, value.shape, strict=True):
                if isinstance(got, int) and got != want:
                    wrong.append(f"{case.name}/{info.name}: {info.shape} vs expected {value.shape}")
                    break
            else:
                exact += all(isinstance(d, int) for d in info.shape)
    assert not crashes, "\n".join(crashes[:20])
    assert not wrong, "\n".join(wrong[:20])
    assert exact > 1500  # most outputs are fully determined by shapes and constants


def test_rule_coverage_of_node_case_op_types() -> None:
    """Every op type the cases exercise has a cost rule (reported in docs/coverage.md)."""
    ops: set[tuple[str, str]] = set()

    def visit(graph: onnx.GraphProto) -> None:
        for n in graph.node:
            ops.add((n.domain or "ai.onnx", n.op_type))
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    visit(a.g)
                elif a.type == onnx.AttributeProto.GRAPHS:
                    for g in a.graphs:
                        visit(g)

    for case in _cases():
        visit(case.model.graph)
        for f in case.model.functions:
            for n in f.node:
                ops.add((n.domain or "ai.onnx", n.op_type))
    ops = {(d, o) for d, o in ops if d in ("ai.onnx", "ai.onnx.ml", "ai.onnx.preview.training")}
    missing = sorted(f"{d}::{o}" for d, o in ops if lookup(d, o) is None)
    print(f"\nop types with a cost rule: {len(ops) - len(missing)} of {len(ops)} covered by the node cases")
    assert not missing, f"no rule for: {', '.join(missing)}"


@pytest.mark.parametrize("name", ["test_nonzero_example", "test_unique_sorted_with_axis"])
def test_data_dependent_outputs_are_named_unknowns(name: str) -> None:
    case = next(c for c in _cases() if c.name == name)
    report = graphcost.analyze(_strip_output_shapes(case.model), hardware=EDGE)
    shape = report.model.outputs[0].shape
    assert shape is not None and any(isinstance(d, str) for d in shape), shape
