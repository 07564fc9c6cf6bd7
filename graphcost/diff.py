"""What changed between two models (two versions, or two exports of one model), cost first.

Node matching, top-level nodes only, each node matched at most once::

    1. by name      a name the file itself gives (not one graphcost made up for an unnamed node),
                    unique in both graphs
    2. by signature (op_type, input shapes, output shapes): the i-th unmatched node of a signature in A
                    pairs with the i-th of that signature in B, in graph order
    3. the rest     removed (only in A) or added (only in B)

A matched pair is *changed* when its op type, shapes, FLOPs, bytes or bound time differ. Totals,
op counts, parameters and graph inputs/outputs are compared whatever the matching found.

The text rendering holds one line per list entry and passes each through ``terminal_text``
(``report/escape.py``), so a name carrying a newline or ESC shows as escapes on its own line.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from graphcost.analysis import Analysis, check_dims
from graphcost.api import analyze
from graphcost.report.escape import terminal_text
from graphcost.report.model import NodeReport, Report
from graphcost.report.units import bytes_, seconds, si

DIFF_SCHEMA = "graphcost.diff/1"

TOTAL_FIELDS = ("flops", "macs", "bytes", "dram_bytes", "roofline_time_s", "unknown_nodes")
NODE_FIELDS = ("flops", "macs", "bytes", "roofline_time_s")


@dataclass(frozen=True)
class Change:
    """One number in A and B (None where a side does not have it)."""

    name: str
    a: float | int | None
    b: float | int | None

    @property
    def delta(self) -> float | int | None:
        return None if self.a is None or self.b is None else self.b - self.a

    @property
    def ratio(self) -> float | None:
        return None if self.a is None or self.b is None or self.a == 0 else self.b / self.a

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "a": self.a, "b": self.b, "delta": self.delta, "ratio": self.ratio}


@dataclass(frozen=True)
class NodePair:
    a: str
    b: str
    op_type_a: str
    op_type_b: str
    matched_by: str
    """``name`` or ``signature``."""
    changes: tuple[Change, ...]
    shapes_changed: bool

    def to_dict(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "op_type_a": self.op_type_a, "op_type_b": self.op_type_b,
                "matched_by": self.matched_by, "shapes_changed": self.shapes_changed,
                "changes": [c.to_dict() for c in self.changes]}


@dataclass(frozen=True)
class ModelDiff:
    a_path: str | None
    b_path: str | None
    totals: tuple[Change, ...]
    op_counts: tuple[Change, ...]
    """Op types whose count differs (0 where a side has none)."""
    parameters: tuple[Change, ...]
    inputs: Mapping[str, Any]
    outputs: Mapping[str, Any]
    matched: int
    matched_by_name: int
    changed: tuple[NodePair, ...]
    added: tuple[tuple[str, str], ...]
    """(name, op type) of nodes only in B."""
    removed: tuple[tuple[str, str], ...]
    """(name, op type) of nodes only in A."""
    dims_ignored: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def identical(self) -> bool:
        return not (any(c.a != c.b for c in (*self.totals, *self.parameters)) or self.op_counts or self.changed
                    or self.added or self.removed or any(self.inputs.values()) or any(self.outputs.values()))

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": DIFF_SCHEMA, "a": self.a_path, "b": self.b_path, "identical": self.identical,
            "totals": [c.to_dict() for c in self.totals],
            "op_counts": [c.to_dict() for c in self.op_counts],
            "parameters": [c.to_dict() for c in self.parameters],
            "inputs": dict(self.inputs), "outputs": dict(self.outputs),
            "nodes": {"matched": self.matched, "matched_by_name": self.matched_by_name,
                      "matched_by_signature": self.matched - self.matched_by_name,
                      "changed": [p.to_dict() for p in self.changed],
                      "added": [{"name": n, "op_type": o} for n, o in self.added],
                      "removed": [{"name": n, "op_type": o} for n, o in self.removed]},
            "dims_ignored": {k: list(v) for k, v in self.dims_ignored.items()},
        }


def _op(n: NodeReport) -> str:
    return n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}"


def _signature(n: NodeReport) -> tuple[Any, ...]:
    return (_op(n), tuple(t.shape for t in n.inputs), tuple(t.shape for t in n.outputs))


def _section_value(report: Report, section: str, *keys: str) -> float | int | None:
    s = getattr(report, section, None)
    if s is None:
        return None
    d = s.to_dict() if hasattr(s, "to_dict") else s
    for k in keys:
        v = d.get(k) if isinstance(d, Mapping) else None
        if isinstance(v, (list, tuple)):
            return len(v)
        if isinstance(v, (int, float)):
            return v
    return None


def _tensors(report: Report, which: str) -> dict[str, Any]:
    a = {t.name: t for t in getattr(report.model, which)}
    return {n: (None if t.shape is None else list(t.shape), t.dtype) for n, t in a.items()}


def _io_diff(a: Report, b: Report, which: str) -> dict[str, Any]:
    ta, tb = _tensors(a, which), _tensors(b, which)
    return {
        "added": sorted(set(tb) - set(ta)),
        "removed": sorted(set(ta) - set(tb)),
        "changed": [{"name": n, "a": {"shape": ta[n][0], "dtype": ta[n][1]},
                     "b": {"shape": tb[n][0], "dtype": tb[n][1]}}
                    for n in sorted(set(ta) & set(tb)) if ta[n] != tb[n]],
    }


def _counts(nodes: Iterable[NodeReport]) -> dict[str, int]:
    out: dict[str, int] = {}
    for n in nodes:
        out[_op(n)] = out.get(_op(n), 0) + 1
    return out


def match_nodes(a: list[NodeReport], b: list[NodeReport], named_a: set[str], named_b: set[str]
                ) -> tuple[list[tuple[NodeReport, NodeReport, str]], list[NodeReport], list[NodeReport]]:
    """(pairs with how they matched, unmatched of A, unmatched of B); see the module docstring."""
    def unique(nodes: list[NodeReport], named: set[str]) -> dict[str, NodeReport]:
        seen: dict[str, int] = {}
        for n in nodes:
            seen[n.name] = seen.get(n.name, 0) + 1
        return {n.name: n for n in nodes if n.name in named and seen[n.name] == 1}

    ua, ub = unique(a, named_a), unique(b, named_b)
    pairs: list[tuple[NodeReport, NodeReport, str]] = [(ua[k], ub[k], "name") for k in ua if k in ub]
    taken_a = {id(p[0]) for p in pairs}
    taken_b = {id(p[1]) for p in pairs}
    queues: dict[tuple[Any, ...], list[NodeReport]] = {}
    for n in b:
        if id(n) not in taken_b:
            queues.setdefault(_signature(n), []).append(n)
    rest_a = []
    for n in a:
        if id(n) in taken_a:
            continue
        q = queues.get(_signature(n))
        if q:
            m = q.pop(0)
            pairs.append((n, m, "signature"))
            taken_b.add(id(m))
        else:
            rest_a.append(n)
    rest_b = [n for n in b if id(n) not in taken_b]
    return pairs, rest_a, rest_b


def diff_reports(a: Report, b: Report, named_a: set[str] | None = None, named_b: set[str] | None = None,
                 dims_ignored: Mapping[str, tuple[str, ...]] | None = None) -> ModelDiff:
    """Compare two reports; ``named_*`` are the node names the files give (default: every node name)."""
    top_a = [n for n in a.nodes if n.depth == 0]
    top_b = [n for n in b.nodes if n.depth == 0]
    ta, tb = a.totals.to_dict(), b.totals.to_dict()
    totals = [Change(k, ta[k], tb[k]) for k in TOTAL_FIELDS]
    for name, section, keys in (("peak_activation_bytes", "memory", ("peak_activation_bytes",)),
                                ("fusion_groups", "fusion", ("group_count", "groups"))):
        va, vb = _section_value(a, section, *keys), _section_value(b, section, *keys)
        if va is not None or vb is not None:
            totals.append(Change(name, va, vb))
    totals.append(Change("nodes", len(top_a), len(top_b)))
    ca, cb = _counts(top_a), _counts(top_b)
    op_counts = tuple(Change(op, ca.get(op, 0), cb.get(op, 0)) for op in sorted(set(ca) | set(cb))
                      if ca.get(op, 0) != cb.get(op, 0))
    params = (Change("parameter_count", a.model.parameter_count, b.model.parameter_count),
              Change("parameter_bytes", a.model.parameter_bytes, b.model.parameter_bytes))
    pairs, rest_a, rest_b = match_nodes(top_a, top_b, named_a if named_a is not None else {n.name for n in top_a},
                                        named_b if named_b is not None else {n.name for n in top_b})
    changed = []
    for na, nb, how in pairs:
        cs = tuple(Change(f, getattr(na, f), getattr(nb, f)) for f in NODE_FIELDS
                   if getattr(na, f) != getattr(nb, f))
        shapes = _signature(na)[1:] != _signature(nb)[1:]
        if cs or shapes or _op(na) != _op(nb):
            changed.append(NodePair(na.name, nb.name, _op(na), _op(nb), how, cs, shapes))
    changed.sort(key=lambda p: -max((abs(c.delta or 0) for c in p.changes if c.name == "roofline_time_s"),
                                    default=0.0))
    return ModelDiff(
        a_path=a.model.path, b_path=b.model.path, totals=tuple(totals), op_counts=op_counts, parameters=params,
        inputs=_io_diff(a, b, "inputs"), outputs=_io_diff(a, b, "outputs"), matched=len(pairs),
        matched_by_name=sum(1 for p in pairs if p[2] == "name"), changed=tuple(changed),
        added=tuple((n.name, _op(n)) for n in rest_b), removed=tuple((n.name, _op(n)) for n in rest_a),
        dims_ignored=dict(dims_ignored or {}))


def diff_models(path_a: str, path_b: str, *, hardware: Any = None, dims: Mapping[str, int] | None = None,
                capacity: bool = True, input_shapes: Mapping[str, Any] | None = None,
                input_values: Mapping[str, Any] | None = None) -> ModelDiff:
    """Analyze both files with the same settings and compare. Raises LoadError for unreadable files.

    Both go through the front door (``graphcost.analysis.Analysis.of``). A ``dims`` name one model does not have
    is left out for that model (listed in ``dims_ignored``); a name neither has raises
    ``graphcost.binding.UnknownDim``. Input shapes and values apply to the models that have those inputs.
    """
    analyses = [Analysis.of(path, dims=dims, input_shapes=input_shapes, input_values=input_values,
                            unknown_dims="ignore") for path in (path_a, path_b)]
    check_dims(dims or {}, analyses)
    reports, named, ignored = [], [], {}
    for side, a in zip(("a", "b"), analyses, strict=True):
        if a.ignored_dims:
            ignored[side] = tuple(sorted(a.ignored_dims))
        reports.append(analyze(a, hardware=hardware, capacity=capacity))
        named.append({n.name for n in a.model.proto.graph.node if n.name})
    return diff_reports(reports[0], reports[1], named[0], named[1], ignored)


def _num(v: float | int | None, name: str) -> str:
    if v is None:
        return "-"
    if name.endswith("time_s"):
        return seconds(v)
    if name.endswith("bytes"):
        return bytes_(v)
    if name in ("flops", "macs"):
        return si(v)
    return f"{v:,}" if isinstance(v, int) else f"{v:.4g}"


def _delta(c: Change) -> str:
    d = c.delta
    if d is None:
        return ""
    if d == 0:
        return "="
    pct = f" ({(c.ratio - 1) * 100:+.1f}%)" if c.ratio is not None else ""
    return ("+" if d > 0 else "-") + _num(abs(d), c.name) + pct


def render_text(d: ModelDiff, top: int = 20) -> str:
    lines = [f"graphcost diff — A {d.a_path}", f"                  B {d.b_path}"]
    if d.identical:
        lines.append("no differences in cost, structure or interface")
    lines.append("")
    lines.append(f"{'':<22}{'A':>14}{'B':>14}  change")
    for c in (*d.totals, *d.parameters):
        lines.append(f"{c.name:<22}{_num(c.a, c.name):>14}{_num(c.b, c.name):>14}  {_delta(c)}")
    if d.op_counts:
        lines += ["", "op counts that changed:"]
        lines.extend(f"  {c.name:<28}{c.a:>6} → {c.b:<6} {c.b - c.a:+d}" for c in d.op_counts)  # type: ignore[operator]
    for which, io in (("inputs", d.inputs), ("outputs", d.outputs)):
        if any(io.values()):
            lines += ["", f"graph {which}:"]
            lines.extend(f"  + {n}" for n in io["added"])
            lines.extend(f"  - {n}" for n in io["removed"])
            lines.extend(f"  ~ {c['name']}: {c['a']['dtype']}{c['a']['shape']} → {c['b']['dtype']}{c['b']['shape']}"
                         for c in io["changed"])
    lines.append("")
    lines.append(f"nodes: {d.matched} matched ({d.matched_by_name} by name, {d.matched - d.matched_by_name} by "
                 f"op and shapes), {len(d.changed)} changed, {len(d.added)} added, {len(d.removed)} removed")
    for p in d.changed[:top]:
        name = p.a if p.a == p.b else f"{p.a} → {p.b}"
        op = p.op_type_a if p.op_type_a == p.op_type_b else f"{p.op_type_a} → {p.op_type_b}"
        what = "; ".join(f"{c.name} {_num(c.a, c.name)} → {_num(c.b, c.name)}" for c in p.changes)
        lines.append(f"  ~ {name} [{op}]{' shapes changed' if p.shapes_changed else ''}{': ' + what if what else ''}")
    for sign, items in (("+", d.added), ("-", d.removed)):
        lines.extend(f"  {sign} {n} [{o}]" for n, o in items[:top])
        if len(items) > top:
            lines.append(f"  {sign} … {len(items) - top} more (--format json lists all)")
    if len(d.changed) > top:
        lines.append(f"  ~ … {len(d.changed) - top} more changed (--format json lists all)")
    for side, names in d.dims_ignored.items():
        lines += ["", f"note: model {side.upper()} has no dim {', '.join(names)}; left unbound there"]
    return "\n".join(terminal_text(line) for line in lines) + "\n"
