"""The Report: typed, frozen results assembled from the passes, and its JSON form.

The JSON contract (``schema: "graphcost.report/1"``) is documented in ``docs/json-schema.md``; a
test pins its keys. Later passes add sections (``fusion``, ``memory``, ``batchnorm``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

from graphcost.hardware.spec import HardwareSpec
from graphcost.report._json import COMPACT, Indented, Rows, dumps, stream
from graphcost.report.units import bytes_, si

if TYPE_CHECKING:  # the section types, for readers and mypy: their modules import this one, so never at run time
    from graphcost.llm import LLMSection
    from graphcost.passes.fusion import FusionSection
    from graphcost.passes.liveness import MemoryResult
    from graphcost.report.sections import BatchNormSection
    from graphcost.whatif import WhatIf

SCHEMA = "graphcost.report/1"
COMPACT_JSON_NODES = 2000

Number = int | float


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """One tensor as the report shows it: name, shape (dims or formulas; None when unknown) and dtype."""

    name: str
    shape: tuple[int | str, ...] | None
    dtype: str

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (schema ``graphcost.report``)."""
        return {"name": self.name, "shape": None if self.shape is None else list(self.shape), "dtype": self.dtype}


@dataclass(frozen=True, slots=True)
class NodeReport:
    """One node's costs: FLOPs, bytes read and written, its roofline bound and why anything is unknown."""

    name: str
    op_type: str
    domain: str
    kind: str | None
    dtype: str
    flops: Number | None
    macs: Number | None
    bytes_read: Number | None
    bytes_written: Number | None
    dram_bytes: Number | None
    intensity: float | None
    compute_time_s: float | None
    memory_time_s: float | None
    roofline_time_s: float | None
    bound: str | None
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    depth: int = 0
    parent: str | None = None
    multiplier: Number | str = 1
    note: str = ""
    unknown_reason: str | None = None
    has_rule: bool = True
    fusion_group: str | None = None
    bytes_as_written: Number | None = None
    """Bytes the graph as written moves where the node's bytes are the in-place ideal (a KV-cache append)."""

    @property
    def bytes(self) -> Number | None:
        """Bytes read plus bytes written; None when either is unknown (unknown is never zero)."""
        if self.bytes_read is None or self.bytes_written is None:
            return None
        return self.bytes_read + self.bytes_written

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (schema ``graphcost.report``)."""
        return {**self._head(), "inputs": [t.to_dict() for t in self.inputs],
                "outputs": [t.to_dict() for t in self.outputs], **self._tail()}

    def _tail(self) -> dict[str, Any]:
        """:meth:`to_dict`'s keys after ``outputs``, in order."""
        return {"bytes_as_written": self.bytes_as_written} if self.bytes_as_written is not None else {}

    def _head(self) -> dict[str, Any]:
        """:meth:`to_dict`'s keys before ``inputs``, in order."""
        return {
            "name": self.name, "op_type": self.op_type, "domain": self.domain, "kind": self.kind,
            "dtype": self.dtype, "flops": self.flops, "macs": self.macs, "bytes_read": self.bytes_read,
            "bytes_written": self.bytes_written, "dram_bytes": self.dram_bytes, "intensity": _f(self.intensity),
            "compute_time_s": _f(self.compute_time_s), "memory_time_s": _f(self.memory_time_s),
            "roofline_time_s": _f(self.roofline_time_s), "bound": self.bound, "fusion_group": self.fusion_group,
            "depth": self.depth, "parent": self.parent, "multiplier": self.multiplier, "note": self.note or None,
            "unknown_reason": self.unknown_reason,
        }


@dataclass(frozen=True)
class ModelInfo:
    """The model as loaded: path, opset, producer, inputs/outputs and parameter counts."""

    path: str | None
    ir_version: int
    opsets: Mapping[str, int]
    producer: str
    node_count: int
    parameter_count: int
    parameter_bytes: int
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    logical_parameter_count: int | None = None
    """Weights as the model computes with them: a MatMulNBits B is K·N weights (not its packed bytes), its
    scales and zero points are not weights. ``parameter_bytes`` stays the bytes stored (packed + scales +
    zero points). None when not computed."""
    parameter_split: Any = None
    """ParameterSplit: learnable vs buffers, duplicates, shared, logical (graphcost/params.py). None when not
    computed."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (schema ``graphcost.report``)."""
        return {
            "path": self.path, "ir_version": self.ir_version, "opsets": dict(self.opsets),
            "producer": self.producer, "node_count": self.node_count, "parameter_count": self.parameter_count,
            "parameter_bytes": self.parameter_bytes, "inputs": [t.to_dict() for t in self.inputs],
            "outputs": [t.to_dict() for t in self.outputs],
            "logical_parameter_count": self.logical_parameter_count,
            "parameter_split": None if self.parameter_split is None else self.parameter_split.to_dict(),
        }


@dataclass(frozen=True)
class ReportTotals:
    """Whole-model sums of the nodes' FLOPs, bytes and bound, with how much of it has a cost rule."""

    flops: Number
    macs: Number
    bytes_read: Number
    bytes_written: Number
    bytes: Number
    dram_bytes: Number
    intensity: float | None
    compute_time_s: float
    memory_time_s: float
    roofline_time_s: float
    bound: str
    energy_floor_j: float
    unknown_nodes: int
    formulas: Mapping[str, str] = field(default_factory=dict)
    """Exact totals as formulas in the dim names, for each count that depends on unbound dims."""
    bytes_as_written: Number | None = None
    """Total bytes as the graph is written (KV cache copied into ``present``), where it differs from ``bytes``."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (schema ``graphcost.report``)."""
        return {
            "flops": self.flops, "macs": self.macs, "bytes_read": self.bytes_read,
            "bytes_written": self.bytes_written, "bytes": self.bytes, "dram_bytes": self.dram_bytes,
            "intensity": self.intensity, "compute_time_s": self.compute_time_s,
            "memory_time_s": self.memory_time_s, "roofline_time_s": self.roofline_time_s, "bound": self.bound,
            "energy_floor_j": self.energy_floor_j, "unknown_nodes": self.unknown_nodes,
            "formulas": dict(self.formulas),
            **({"bytes_as_written": self.bytes_as_written} if self.bytes_as_written is not None else {}),
        }


@dataclass(frozen=True)
class Coverage:
    """How much of the model has a cost rule: share of nodes and of bytes moved."""

    nodes: int
    nodes_with_rule: int
    bytes: Number
    bytes_with_rule: Number
    unknown_ops: Mapping[str, int]

    @property
    def node_share(self) -> float:
        """Share of nodes that have a cost rule (1.0 for an empty model)."""
        return self.nodes_with_rule / self.nodes if self.nodes else 1.0

    @property
    def byte_share(self) -> float:
        """Share of bytes moved by nodes that have a cost rule (1.0 when no bytes move)."""
        return self.bytes_with_rule / self.bytes if self.bytes else 1.0

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (schema ``graphcost.report``)."""
        return {"nodes": self.nodes, "nodes_with_rule": self.nodes_with_rule, "node_share": self.node_share,
                "bytes": self.bytes, "bytes_with_rule": self.bytes_with_rule, "byte_share": self.byte_share,
                "unknown_ops": dict(self.unknown_ops)}


@dataclass(frozen=True)
class Warning_:
    """One warning: the node it is about (None for the whole model) and a human reason."""

    node: str | None
    message: str

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (schema ``graphcost.report``)."""
        return {"node": self.node, "message": self.message}


@dataclass(frozen=True)
class OpTypeRow:
    """Totals of one op type: node count, FLOPs, MACs, bytes, bound time and its share of the whole."""

    op_type: str
    domain: str
    count: int
    flops: Number | None
    macs: Number
    bytes: Number
    roofline_time_s: float
    share_time: float


@dataclass(frozen=True)
class Report:
    """Everything one analysis found. Frozen; render with to_json / to_csv / to_text."""

    model: ModelInfo
    hardware: HardwareSpec
    totals: ReportTotals
    nodes: tuple[NodeReport, ...]
    warnings: tuple[Warning_, ...]
    binding: Mapping[str, int]
    """The value used for every dim in the numbers (given with --dim or defaulted)."""
    defaulted_dims: tuple[str, ...]
    """Dims no one bound: the numbers use the stated default for these."""
    coverage: Coverage
    shape_engines: tuple[str, ...] = ()
    schema: str = SCHEMA
    fusion: FusionSection | None = None
    """FusionSection: groups, boundaries with reasons, fused/unfused bytes and times (passes/fusion.py)."""
    memory: MemoryResult | None = None
    """MemoryResult: liveness peak, live set, bounds, reorder, arena, training (passes/liveness.py)."""
    batchnorm: BatchNormSection | None = None
    """BatchNormSection: foldable batchnorms and refusals with reasons, and the time folding saves
    (report/sections.py over passes/batchnorm.py)."""
    residency: str = "cold"
    """Where the bounds assume bytes come from: cold (one inference) or warm (a benchmark loop; passes/roofline.py)."""
    llm: LLMSection | None = None
    """LLMSection: prefill/decode floors, KV-cache bytes per token, tokens/s per context (graphcost/llm.py)."""
    whatif: WhatIf | None = None
    """WhatIf: budget verdict, power, % of peak, precision, sweep and fusion what-ifs (graphcost/whatif.py)."""

    def by_op_type(self) -> list[OpTypeRow]:
        """Top-level nodes grouped by (domain, op_type), slowest first."""
        groups: dict[tuple[str, str], list[NodeReport]] = {}
        for n in self.nodes:
            if n.depth == 0:
                groups.setdefault((n.domain, n.op_type), []).append(n)
        total_t = self.totals.roofline_time_s or 0.0
        rows = []
        for (domain, op), ns in groups.items():
            known = [n.flops for n in ns if n.flops is not None]
            flops = sum(known) if len(known) == len(ns) else None
            t = sum(n.roofline_time_s or 0.0 for n in ns)
            rows.append(OpTypeRow(op, domain, len(ns), flops, sum(n.macs or 0 for n in ns),
                                  sum(n.bytes or 0 for n in ns), t, t / total_t if total_t else 0.0))
        rows.sort(key=lambda r: (-r.roofline_time_s, r.op_type))
        return rows

    def header_lines(self, *, aligned: bool = False) -> list[str]:
        """What was analyzed, on what: producer and opsets, size, inputs, dims, hardware roofs (text and HTML
        headers). ``aligned`` pads the labels into a column for the terminal."""
        m, hw = self.model, self.hardware
        gap = " " if aligned else ""
        opsets = ", ".join(f"{k} {v}" for k, v in sorted(m.opsets.items()))
        lines = [f"producer {m.producer or '?'} · IR {m.ir_version} · opsets {opsets}",
                 f"{m.node_count} nodes · {m.parameter_count:,} parameters ({bytes_(m.parameter_bytes)})"]
        for i in m.inputs:
            shape = "?" if i.shape is None else "×".join(str(d) for d in i.shape)
            lines.append(f"input {gap}{i.name}: {i.dtype}[{shape}]")
        if self.binding:
            dims = ", ".join(f"{k}={v}" for k, v in sorted(self.binding.items()))
            lines.append(f"dims {gap * 2}{dims}" + (f"{gap} (defaulted: {', '.join(self.defaulted_dims)})"
                                                    if self.defaulted_dims else ""))
        peaks = ", ".join(f"{k} {si(v, 'FLOP/s')}" for k, v in hw.peak_flops.items())
        lines.append(f"hardware {hw.name}: {peaks}; DRAM {si(hw.memory_bandwidth, 'B/s')}; "
                     f"ridge {hw.ridge_point('float32'):.1f} FLOP/B (float32)")
        return lines

    def top(self, n: int = 10) -> list[NodeReport]:
        """The ``n`` top-level nodes with the largest bound time."""
        tops = [x for x in self.nodes if x.depth == 0 and x.roofline_time_s is not None]
        return sorted(tops, key=lambda x: -(x.roofline_time_s or 0.0))[:n]

    def node(self, name: str) -> NodeReport:
        """The node report named ``name``; KeyError when the report has none."""
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def to_dict(self, *, nodes: bool = True, lazy: bool = False) -> dict[str, Any]:
        """The report as plain data; ``nodes=False`` leaves the rows out (``"nodes": None``, key kept in place);
        ``lazy`` leaves the fusion section's group and boundary lists and the memory curve as iterators (for
        :meth:`json_chunks`)."""
        return {
            "schema": self.schema,
            "model": self.model.to_dict(),
            "hardware": self.hardware.to_dict(),
            "binding": dict(self.binding),
            "defaulted_dims": list(self.defaulted_dims),
            "residency": self.residency,
            "totals": self.totals.to_dict(),
            "coverage": self.coverage.to_dict(),
            "shape_inference": list(self.shape_engines),
            "nodes": [n.to_dict() for n in self.nodes] if nodes else None,
            "warnings": [w.to_dict() for w in self.warnings],
            **({} if self.fusion is None else {"fusion": self.fusion.to_dict(lazy=lazy)}),
            **({} if self.memory is None else {"memory": self.memory.to_dict(lazy=lazy)}),
            **{key: section.to_dict() for key, section in
               (("batchnorm", self.batchnorm), ("llm", self.llm), ("whatif", self.whatif)) if section is not None},
        }

    def to_json(self, indent: int | None = None) -> str:
        """The report as JSON. ``indent=None`` (the default) picks 2 for small reports and compact
        output past ``COMPACT_JSON_NODES`` nodes, where indentation would cost more than the analysis."""
        return "".join(self.json_chunks(indent))

    def write_json(self, fp: IO[str], indent: int | None = None) -> None:
        """:meth:`to_json` written to ``fp`` piece by piece: the whole text is never held at once."""
        for chunk in self.json_chunks(indent):
            fp.write(chunk)

    def json_chunks(self, indent: int | None = None) -> Iterator[str]:
        """The text of :meth:`to_json`, in pieces: the sections, then the node rows a batch at a time.

        The bytes are those of ``json.dumps(report.to_dict(), indent=indent)`` (inf and nan outside ``nodes`` as
        null), written without it: node rows by :class:`~graphcost.report._json.Rows`, sections by
        :class:`~graphcost.report._json.Indented` or, compact, the C encoder a section or a batch of its items
        at a time, so the dict of every row and every tensor of every row is never alive at once
        (synthetic-100k: peak RSS of ``analyze`` 1,183 → 1,035 MiB when rows stopped being dicts).
        """
        if indent is None and len(self.nodes) <= COMPACT_JSON_NODES:
            indent = 2
        if indent:
            yield from self._indented(" " * indent)
            return
        head, tail = self._sections()
        yield dumps(head, None)[:-1] + ',"nodes":['
        yield from Rows(None).chunks(self.nodes)
        yield "],"
        for i, (key, value) in enumerate(tail.items()):
            yield f'{"," if i else ""}{COMPACT.encode(key)}:'
            yield from stream(value)
        yield "}"

    def _indented(self, unit: str) -> Iterator[str]:
        """:meth:`json_chunks` indented by ``unit``."""
        sections = Indented(unit)
        for i, (key, value) in enumerate(self.to_dict(nodes=False).items()):
            yield ("{" if not i else ",") + sections.nl(1) + sections.key(key)
            if key != "nodes":
                yield sections.text(value, 1)
            elif not self.nodes:
                yield "[]"
            else:
                yield "[" + sections.nl(2)
                yield from Rows(unit).chunks(self.nodes)
                yield sections.nl(1) + "]"
        yield "\n}"

    def _sections(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """:meth:`to_dict` without ``nodes``: the keys before it and the keys after it, in order."""
        d = self.to_dict(nodes=False, lazy=True)
        keys = list(d)
        at = keys.index("nodes")
        return {k: d[k] for k in keys[:at]}, {k: d[k] for k in keys[at + 1:]}

    def to_csv(self) -> str:
        """One row per node (``report/csv.py``: spreadsheet-safe cells)."""
        # lazy: the renderers import this module for their types only; loaded when a format is asked for
        from graphcost.report.csv import render_csv

        return render_csv(self)

    def to_text(self, top: int = 10, width: int = 120) -> str:
        """The terminal report (``report/text.py``), then the what-ifs when they ran."""
        # lazy: rich, the table renderer, is 0.03 s of imports that JSON and CSV never need
        from graphcost.report.text import render_text

        text = render_text(self, top=top, width=width)
        if self.whatif is not None:
            from graphcost.report.whatif_text import render_whatif  # lazy: as render_text, only for text

            text += render_whatif(self.whatif)
        return text


def _f(value: float | None) -> float | None:
    return value if value is None or math.isfinite(value) else None
