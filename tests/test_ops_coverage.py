"""Every op of onnx's node test cases has a rule; rules run on all of them; fallbacks match the schemas.

The onnx backend node tests are the widest catalogue of real op usages at hand (1,800+ small models,
every domain onnx defines). Collecting them takes several seconds, so it is done once per session.
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
import warnings
from collections.abc import Iterator

import onnx
import onnx.defs
import pytest
from ophelp import cost_of

from graphcost.graph import Graph
from graphcost.ops import Kind, NodeView, ShapeUnknown, Unknown, Work, lookup, registered
from graphcost.ops._families import FAMILIES

EXPECTED_UNKNOWN = {
    ("ai.onnx", "ImageDecoder"): "decoding work depends on the encoded bytes (data)",
    ("ai.onnx.preview.training", "Gradient"): "its work is the backward pass of a graph the node only names",
}
"""Ops whose rule answers Unknown by design, with the reason. Every other Unknown on a test case must
come from a shape onnx could not infer (the model's gap, not the rule's)."""


def _walk(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    for node in graph.node:
        yield node
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _walk(a.g)
            for g in a.graphs:
                yield from _walk(g)


@functools.lru_cache(maxsize=1)
def _cases() -> tuple[onnx.ModelProto, ...]:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the generators overflow casts on purpose
        return tuple(c.model for c in collect_testcases() if c.model is not None)


def _test_case_ops() -> set[tuple[str, str]]:
    ops: set[tuple[str, str]] = set()
    for model in _cases():
        for node in _walk(model.graph):
            ops.add((node.domain or "ai.onnx", node.op_type))
        for fn in model.functions:  # ops used only inside model-local function bodies
            for node in fn.node:
                ops.add((node.domain or "ai.onnx", node.op_type))
    return ops


def test_every_op_in_onnx_test_cases_has_a_rule() -> None:
    missing = sorted(f"{d}::{op}" for d, op in _test_case_ops() if lookup(d, op) is None)
    print("ops in onnx node test cases without a rule:", missing)
    assert not missing, f"{len(missing)} ops have no rule: {', '.join(missing)}"


def test_every_op_defined_by_onnx_has_a_rule() -> None:
    """Beyond the test cases: every schema onnx.defs knows (deprecated ones included, exporters use them)."""
    schemas = {(s.domain or "ai.onnx", s.name) for s in onnx.defs.get_all_schemas()}
    missing = sorted(f"{d}::{op}" for d, op in schemas if lookup(d, op) is None)
    print("ops defined by onnx.defs without a rule:", missing)
    assert not missing, f"{len(missing)} ops have no rule: {', '.join(missing)}"


@functools.lru_cache(maxsize=1)
def _results() -> dict[str, list[tuple[str, str, object]]]:
    """Every node of every test case, costed with its rule: family → [(op, model, result or exception)]."""
    out: dict[str, list[tuple[str, str, object]]] = {}
    for model in _cases():
        try:
            typed = onnx.shape_inference.infer_shapes(model, data_prop=True)
        except Exception:
            typed = model
        g = Graph(typed.graph, {o.domain: o.version for o in typed.opset_import})
        for node in g.nodes():
            entry = lookup(node.domain, node.op_type)
            if entry is None or entry.kind is Kind.CONTROL:
                continue
            view = NodeView(node, tuple(g.tensor(t) if t else None for t in node.inputs),
                            tuple(g.tensor(t) if t else None for t in node.outputs), g)
            try:
                result: object = entry.fn(view)
            except ShapeUnknown as e:
                result = Unknown(f"shape unknown: {e}")
            except Exception as e:
                result = e
            family = entry.fn.__module__.rsplit(".", 1)[-1]
            out.setdefault(family, []).append((node.op_type, typed.graph.name, result))
    return out


# control rules are not run alone: the costs pass costs If/Loop/Scan through their bodies.
@pytest.mark.parametrize("family", [f for f in FAMILIES if f != "control"])
def test_rules_run_on_every_onnx_test_case(family: str) -> None:
    """No rule raises on a real usage, and only EXPECTED_UNKNOWN ops (or unknown shapes) answer Unknown."""
    problems = []
    for op, model, result in _results().get(family, []):
        if isinstance(result, Exception):
            problems.append(f"{model}: {op} raised {type(result).__name__}: {result}")
        elif isinstance(result, Unknown):
            by_design = any(op == o for _, o in EXPECTED_UNKNOWN)
            if not by_design and not result.reason.startswith("shape unknown"):
                problems.append(f"{model}: {op} -> Unknown({result.reason})")
        else:
            assert isinstance(result, Work)
    assert not problems, "\n".join(problems[:20])


# --- attribute defaults ------------------------------------------------------------------------------

MY_FAMILIES = ("pool", "norm", "reduce", "movement", "misc")


def _attr_fallbacks(fn: object, module: object) -> list[tuple[str, object]]:
    """(name, literal default) of every ``n.attr("name", literal)`` in ``fn`` and the module helpers it calls."""
    found: list[tuple[str, object]] = []
    seen: set[str] = set()
    todo = [fn]
    while todo:
        f = todo.pop()
        name = getattr(f, "__name__", "")
        if name in seen:
            continue
        seen.add(name)
        tree = ast.parse(textwrap.dedent(inspect.getsource(f)))  # type: ignore[arg-type]
        for call in (c for c in ast.walk(tree) if isinstance(c, ast.Call)):
            func = call.func
            if isinstance(func, ast.Attribute) and func.attr == "attr" and len(call.args) == 2:
                key, default = call.args
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    try:
                        found.append((key.value, ast.literal_eval(default)))
                    except ValueError:
                        pass  # a computed default
            if isinstance(func, ast.Name) and inspect.isfunction(getattr(module, func.id, None)):
                todo.append(getattr(module, func.id))
    return found


@functools.lru_cache(maxsize=1)
def _all_schemas() -> dict[tuple[str, str], list[onnx.defs.OpSchema]]:
    by_op: dict[tuple[str, str], list[onnx.defs.OpSchema]] = {}
    for s in onnx.defs.get_all_schemas_with_history():
        by_op.setdefault((s.domain or "ai.onnx", s.name), []).append(s)
    return by_op


def _schema_defaults(domain: str, op: str, attr: str) -> list[object] | None:
    """The attribute's default in every version of the op's schema (None: the op has no such attribute)."""
    values: list[object] = []
    known = False
    for s in _all_schemas().get((domain, op), []):
        if attr not in s.attributes:
            continue
        known = True
        a = s.attributes[attr]
        if a.default_value.name:
            v = onnx.helper.get_attribute_value(a.default_value)
            values.append(v.decode() if isinstance(v, bytes) else v)
    return values if known else None


def test_rule_fallback_defaults_agree_with_onnx_schemas() -> None:
    """A rule's literal fallback in ``n.attr(name, fallback)`` is only a safety net: NodeView.attr answers
    with the schema default first. The two must agree (with some version of the op), or the rule would
    say one thing for ops outside onnx.defs and another inside."""
    import importlib

    disagreements = []
    for (domain, op), entry in registered().items():
        family = entry.fn.__module__.rsplit(".", 1)[-1]
        if family not in MY_FAMILIES:
            continue
        module = importlib.import_module(entry.fn.__module__)
        for name, fallback in _attr_fallbacks(entry.fn, module):
            defaults = _schema_defaults(domain, op, name)
            if defaults is None or not defaults:
                continue  # the attribute is another op's (a shared rule), or required
            if not any(d == fallback or (isinstance(d, list) and list(d) == fallback) for d in defaults):
                disagreements.append(f"{domain}::{op}.{name}: rule says {fallback!r}, schema says {defaults!r}")
    assert not disagreements, "\n".join(disagreements)


@pytest.mark.parametrize(("text", "expected"), [
    # AveragePool: count_include_pad is absent; NodeView.attr reads the schema's 0.
    ('<ir_version: 10, opset_import: ["" : 19]> g (float[1,1,4,4] X) => (Y) '
     '{ Y = AveragePool <kernel_shape: ints = [2, 2]> (X) }', 9 * 4 + 9),
    # Resize: mode absent; the schema's "nearest" makes it a copy.
    ('<ir_version: 10, opset_import: ["" : 19]> g (float[1,1,4,4] X) => (Y) <float[4] s = {1, 1, 2, 2}> '
     '{ Y = Resize (X, , s) }', 0),
    # ReduceSum: noop_with_empty_axes absent; the schema's 0 reduces every axis.
    ('<ir_version: 10, opset_import: ["" : 19]> g (float[2,3] X) => (Y) { Y = ReduceSum (X) }', 6),
    # LpNormalization: p absent; the schema's 2 adds a sqrt per row.
    ('<ir_version: 10, opset_import: ["" : 19]> g (float[2,3] X) => (Y) { Y = LpNormalization (X) }', 3 * 6 + 2),
])
def test_costs_follow_schema_defaults(text: str, expected: int) -> None:
    w = cost_of(text)
    assert isinstance(w, Work), w
    assert w.flops == expected


def test_average_pool_count_include_pad_default_comes_from_the_schema() -> None:
    schema = onnx.defs.get_schema("AveragePool", 19)
    assert onnx.helper.get_attribute_value(schema.attributes["count_include_pad"].default_value) == 0
    g_text = ('<ir_version: 10, opset_import: ["" : 19]> g (float[1,1,4,4] X) => (Y) '
              '{ Y = AveragePool <kernel_shape: ints = [2, 2]> (X) }')
    model = onnx.shape_inference.infer_shapes(onnx.parser.parse_model(g_text))
    g = Graph(model.graph, {o.domain: o.version for o in model.opset_import})
    node = next(iter(g.nodes()))
    view = NodeView(node, (g.tensor("X"),), (g.tensor("Y"),), g)
    assert view.attr("count_include_pad", 99) == 0  # the schema wins over the caller's fallback
