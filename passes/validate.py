"""Structural validation: models that parse but cannot be costed honestly are refused or flagged, first.

ONNX's checker is not run on input (it is slow on big models and rejects some files exporters really write),
so without this pass a model whose data flow loops, or whose tensor two nodes both write, would reach the cost
passes and come back either as a crash deep inside one (``KeyError: 7``) or as a number that means nothing.
Each check is a finding with a human reason and the node it is about, one of two severities:

* **refuse** (the numbers would be ambiguous or undefined; :func:`raise_refusals` raises :class:`InvalidModel`):
  a cycle in the data flow (there is no order to run the nodes in); a tensor written by two nodes, or by a node
  and also a graph input or initializer (which one a reader sees is undefined, so its bytes and its readers'
  shapes are too).
* **warn** (the numbers stand, with the caveat said): two nodes with one name (the report tells them apart as
  ``name``, ``name_2``…); a graph output that no node produces and no input or initializer provides (it is not
  counted anywhere); an opset newer than the installed onnx knows (op semantics are taken from the newest it does).

:func:`check_binding` runs once the dims are bound: a dim whose formula has no whole-number value under the
binding (``(n - 3)**0.5`` at n = 1 is imaginary) is refused, naming the tensor, instead of failing inside a pass.

Attribute checks that make one node's cost meaningless (Conv strides 0, group 0, negative pads...) are not here:
they live in the op's cost rule (``graphcost/ops/_window.py``), which reports that node's cost as unknown with
the reason, so the rest of the model is still counted.

The scan reads the proto directly (no :class:`Graph` is built, so it costs one loop over the nodes) and names
nodes the way :class:`Graph` does: a node without a name is ``<op_type>_<index>``, a repeated name gets ``_2``...,
and a subgraph's nodes are prefixed ``<node>/<attribute>/``.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass

import onnx

from graphcost._dims import Dim, evaluate, free_names, prod, to_text
from graphcost.graph import (
    DEFAULT_DOMAIN,
    Graph,
    NodeFields,
    cycle_text,
    find_cycle,
    read_node_fields,
    unique_node_name,
)
from graphcost.load import Model


class Severity(str, enum.Enum):
    REFUSE = "refuse"  # no honest number exists: the analysis stops with the reason
    WARN = "warn"  # the numbers stand; the report carries the caveat


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem of the model: who (``node``, or None for the whole graph) and why, in a sentence."""

    severity: Severity
    node: str | None
    op_type: str | None
    reason: str
    dims: frozenset[str] = frozenset()
    """The dims the problem stands on (a binding finding: its formula's names), so a caller can tell one that
    only an unbound dim's default causes."""

    def text(self) -> str:
        """``node 'A' (Add): reason``, or the reason alone for a graph-level finding."""
        if self.node is None:
            return self.reason
        op = f" ({self.op_type})" if self.op_type else ""
        return f"node {self.node!r}{op}: {self.reason}"


@dataclass(frozen=True)
class Validation:
    """The findings of a validation, in the order found (graph order, outer graph first)."""

    findings: tuple[Finding, ...] = ()

    @property
    def refusals(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity is Severity.REFUSE)

    @property
    def warnings(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity is Severity.WARN)

    def __add__(self, other: Validation) -> Validation:
        return Validation(self.findings + other.findings)


class InvalidModel(ValueError):
    """A model the analysis refuses; the message is one line naming the node and the problem.

    ``path`` is the model file (None for bytes or an in-memory proto); the command line prefixes it."""

    def __init__(self, finding: Finding, path: str | None = None, more: int = 0) -> None:
        self.finding = finding
        self.path = path
        also = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
        super().__init__(f"invalid model: {finding.text()}{also}")


def raise_refusals(result: Validation, path: str | None = None) -> None:
    """Raise :class:`InvalidModel` for the first refusal, if there is one."""
    refusals = result.refusals
    if refusals:
        raise InvalidModel(refusals[0], path, len(refusals) - 1)


# --------------------------------------------------------------------------------------------- structure
def validate(model: Model) -> Validation:
    """The structural findings of ``model``: its main graph, every subgraph, and its opsets."""
    findings = list(_opset_findings(model.opsets))
    _graph_findings(model.proto.graph, "", frozenset(), findings, model.node_fields)
    return Validation(tuple(findings))


def _opset_findings(opsets: Mapping[str, int]) -> Iterator[Finding]:
    known = onnx.defs.onnx_opset_version()
    version = opsets.get("ai.onnx")
    if version is not None and version > known:
        yield Finding(Severity.WARN, None, None,
                      f"opset {version} is newer than this graphcost's onnx knows ({known}); "
                      f"op semantics are taken from opset {known}")


def _graph_findings(graph: onnx.GraphProto, prefix: str, outer: frozenset[str], findings: list[Finding],
                    fields: Sequence[NodeFields] | None = None) -> None:
    """Findings of one graph, then of its subgraphs (which may read ``outer``: the enclosing graphs' values).

    One loop over the nodes' fields (``fields``: the main graph's, read by the loader; a subgraph's are read
    here); the cycle search runs only when some node reads a tensor that a later node writes."""
    if fields is None:
        fields = read_node_fields(graph)
    input_names = {vi.name for vi in graph.input}
    provided = input_names | {t.name for t in graph.initializer} | {sp.values.name for sp in graph.sparse_initializer}
    names: list[str] = []
    producer: dict[str, int] = {}  # tensor → index of the first node writing it
    used: set[str] = set()  # the names Graph gives (graph.unique_node_name)
    holders: list[int] = []
    read: set[str] = set()  # every tensor a node so far reads
    out_of_order = False  # some node reads a tensor that it or a later node writes
    for index, f in enumerate(fields):
        raw = f.name
        base = raw or f"{f.op_type}_{index}"
        if base in used:  # a repeat: Graph's own rule names it
            name = prefix + unique_node_name(raw, f.op_type, index, used)
            if raw:  # a nameless node's made-up name met a real one: nothing the user wrote is renamed
                findings.append(Finding(Severity.WARN, name, f.op_type,
                                        f"an earlier node is also named {raw!r}; this one is reported as {name!r}"))
        else:  # the common case
            used.add(base)
            name = prefix + base
        names.append(name)
        read.update(f.inputs)
        outs = f.outputs
        mine: set[str] | None = set() if len(outs) > 1 else None
        for t in outs:
            if not t:
                continue
            if mine is not None:
                if t in mine:
                    findings.append(_twice(name, f.op_type, t, "it writes twice"))
                    continue
                mine.add(t)
            first = producer.setdefault(t, index)
            if first != index:
                findings.append(_twice(name, f.op_type, t, f"node {names[first]!r} also writes"))
                continue
            if t in read:
                out_of_order = True
            if t in provided:
                findings.append(_twice(name, f.op_type, t, "a graph input" if t in input_names
                                       else "an initializer", also=True))
        if f.graphs:
            holders.append(index)
    if out_of_order:  # file order is not topological (seen as each tensor's first writer is met, from a read
        # set filled in C: no second pass over every read; synthetic-100k's pass 2–10 % faster, in-process A/B)
        preds = {names[i]: [names[producer[t]] for t in f.inputs if t in producer] for i, f in enumerate(fields)}
        cycle = find_cycle(names, preds)
        if cycle is not None:
            first = names.index(cycle[0])
            findings.append(Finding(Severity.REFUSE, cycle[0], fields[first].op_type, cycle_text(cycle)))
    scope = outer | provided | producer.keys()
    for vi in graph.output:
        if vi.name and vi.name not in scope:
            where = f"subgraph {prefix.rstrip('/')} " if prefix else ""
            findings.append(Finding(Severity.WARN, None, None,
                                    f"{where}output {vi.name!r} is produced by no node and is no input or "
                                    "initializer; it is not counted"))
    for index in holders:
        for attr in graph.node[index].attribute:
            subs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else (
                list(attr.graphs) if attr.type == onnx.AttributeProto.GRAPHS else [])
            for j, sub in enumerate(subs):
                label = attr.name if len(subs) == 1 else f"{attr.name}[{j}]"
                _graph_findings(sub, f"{names[index]}/{label}/", frozenset(scope), findings)


def _twice(name: str, op: str, tensor: str, other: str, *, also: bool = False) -> Finding:
    which = f"which is also {other}" if also else f"which {other}"
    return Finding(Severity.REFUSE, name, op, f"writes tensor {tensor!r}, {which}; which value its readers see "
                                              "is undefined, so their costs would be too")


# --------------------------------------------------------------------------------------------- binding
def check_binding(graph: Graph, binding: Mapping[str, int], held: Collection[str] = ()) -> Validation:
    """Every symbolic dim of every tensor must be a whole number ≥ 0 under ``binding``, and every Reshape sized
    in ``held`` dims alone (the graph inputs' dims the caller gave) must keep its element count.

    A dim is a formula the model file wrote (``floor(H/2)``, ``batch*seq``); one that comes out imaginary,
    fractional or negative is not a size, and every pass that sizes the tensor would fail on it. Each distinct
    formula is evaluated once, so a big graph with a handful of dims costs a handful of evaluations.
    """
    findings: list[Finding] = []
    checked: dict[Dim, str | None] = {}
    for g in graph.walk():
        for t in g.tensors().values():
            if t.shape is None:
                continue
            for d in t.shape:
                if isinstance(d, int):
                    continue
                if d in checked:
                    continue  # each bad formula is reported once, at the first tensor that has it
                problem = checked[d] = _dim_problem(d, binding)
                if problem is not None:
                    node = g.producer(t.name)
                    what = "graph input" if t.name in g.input_names else "tensor"
                    findings.append(Finding(
                        Severity.REFUSE, None if node is None else node.name, None if node is None else node.op_type,
                        f"{what} {g.prefix + t.name!r} has dim {to_text(d)!r}, which {problem}", free_names(d)))
    if not findings:
        findings.extend(_reshape_problems(graph, binding, frozenset(held)))
    return Validation(tuple(findings))


def _reshape_problems(graph: Graph, binding: Mapping[str, int], held: frozenset[str]) -> Iterator[Finding]:
    """A Reshape whose input and output hold different numbers of elements under ``binding``: the model cannot
    run at these sizes (MaxViT partitions its map into 7x7 windows without padding: at 193x257 one Reshape asks
    395,136 of 407,680 elements, and onnxruntime refuses), so no number stands for them. Checked only where a
    shape is symbolic (a static one is as the file states it) and in ``held`` dims alone: a dim nobody gave says
    nothing of the sizes the model runs at, and a named unknown (a count only the data decides, such as Faster
    R-CNN's RoIs) may be given a what-if value that no run would pair with the others."""
    if not held:
        return
    for g in graph.walk():
        for node in g.nodes():
            if node.op_type != "Reshape" or node.domain != DEFAULT_DOMAIN or not node.inputs or not node.outputs:
                continue
            x, y = g.tensor(node.inputs[0]), g.tensor(node.outputs[0])
            if x is None or y is None or x.shape is None or y.shape is None:
                continue
            if all(isinstance(d, int) for d in (*x.shape, *y.shape)):
                continue
            names = free_names(prod(x.shape)) | free_names(prod(y.shape))
            if not names <= held:
                continue
            try:
                a, b = evaluate(prod(x.shape), binding), evaluate(prod(y.shape), binding)
            except (KeyError, TypeError, ValueError, ArithmeticError):
                continue  # a dim check above says what is wrong with the dims themselves
            if a != b:
                shown = ", ".join(f"{k}={binding[k]}" for k in sorted(names) if k in binding)
                yield Finding(Severity.REFUSE, g.prefix + node.name, node.op_type,
                              f"reshapes {int(a):,} elements into {int(b):,} under {shown}: the model cannot run "
                              "at these sizes", frozenset(names))
                return  # the first one says it


def _dim_problem(d: Dim, binding: Mapping[str, int]) -> str | None:
    shown = ", ".join(f"{k}={binding[k]}" for k in sorted(free_names(d)) if k in binding)
    under = f" under {shown}" if shown else ""
    try:
        value = evaluate(d, binding)
    except KeyError as e:
        return f"needs dim {e.args[0]!r}, which is not bound"
    except (TypeError, ValueError, ArithmeticError):  # sympy: "Cannot convert complex to float" (1/0 is zoo)
        return f"has no real value{under} (it divides by zero or goes imaginary)"
    if not math.isfinite(value) or value < 0 or value != int(value):  # NaN or infinite, negative, fractional
        return f"is {value:g}{under}, not a whole number ≥ 0"
    return None


__all__ = ["Finding", "InvalidModel", "Severity", "Validation", "check_binding", "raise_refusals", "validate"]
