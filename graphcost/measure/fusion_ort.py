"""Compare the ideal fusion groups with what onnxruntime's graph optimizer actually fused.

ORT optimizes the model file itself (it needs the weights: it folds BatchNorm into Conv, checks constant
operands); the optimized model is saved into a temporary directory, never next to the input, with its
weights in a side file so that reading it back costs only its structure.

Mapping ORT's nodes back to source nodes goes through **tensor names**: ORT keeps the boundary tensors
of every fusion (the inputs of the first node, the outputs of the last), while node names vary and no
attribute lists the originals. Steps:

1. Resolve minted names: strip ``InsertedPrecisionFreeCast_``; an NCHWc node is named
   ``<source tensor>_nchwc`` after the tensor it computes (advanced over the Add and activation it later
   absorbed, its ``Sum`` input and ``activation`` attribute); ``ReorderInput``/``ReorderOutput`` outputs
   are their input in another layout.
2. A tensor is *known* when the source graph has it (graph input, initializer, node output), else *minted*.
   ORT nodes linked by minted activations form one unit (Reshape–Gemm–Reshape, …).
3. A unit covers the source nodes on the paths from its known outputs back to its known inputs; the walk
   stops at initializers, graph inputs and tensors that still exist in ORT's graph. Source nodes no unit
   covers were removed or folded by ORT (Identity, Dropout, constant subgraphs). A unit whose outputs are
   its inputs in a new layout or dtype is a *conversion* kernel: it covers nothing and moves its tensor twice.

ORT's bytes use graphcost's accounting on ORT's partition: each unit reads its external storages once and
writes what another executed unit reads or the graph outputs (folded weights count as the originals,
nodes ORT folded away move nothing), plus the conversions. Attributed to the ideal groups (a read to the
group of the node reading it, a write to the group of its producer, a conversion to the group producing its
tensor), so that ``total ORT − total ideal = Σ over groups of (ORT − ideal)``; µs = bytes / DRAM bandwidth.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from graphcost._dims import Dim
from graphcost.graph import Graph, Node
from graphcost.hardware.spec import HardwareSpec
from graphcost.load import load
from graphcost.measure import _ort_session
from graphcost.passes.costs import tensor_bytes
from graphcost.passes.fusion import FusionResult, Role, sum_dims
from graphcost.passes.roofline import count_value

LEVELS = ("basic", "extended", "all")
DEFAULT_LEVEL = "all"
"""onnxruntime's own default (``InferenceSession`` without options runs every level)."""
CAST_PREFIX = "InsertedPrecisionFreeCast_"
NCHWC_SUFFIX = "_nchwc"
Number = int | float


class OrtError(RuntimeError):
    """onnxruntime could not load, optimize or run the model; one line."""


@dataclass(frozen=True)
class OrtKernel:
    """One node of ORT's optimized graph."""

    name: str
    op_type: str
    domain: str
    detail: str = ""  # fused activation, NCHWc Sum input

    @property
    def label(self) -> str:
        dom = "" if self.domain in ("", "ai.onnx") else {"com.microsoft": "ms.", "com.microsoft.nchwc": "nchwc."}.get(
            self.domain, f"{self.domain}.")
        return f"{dom}{self.op_type}" + (f"({self.detail})" if self.detail else "")

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "op_type": self.op_type, "domain": self.domain, "detail": self.detail}


@dataclass(frozen=True)
class OrtUnit:
    """ORT nodes linked by minted tensors, and the source nodes they compute."""

    kernels: tuple[OrtKernel, ...]
    covers: tuple[str, ...]
    conversion_of: str | None = None  # a layout/dtype conversion of this source tensor


@dataclass(frozen=True)
class OrtMapping:
    level: str
    version: str
    units: tuple[OrtUnit, ...]
    unit_of: Mapping[str, int] = field(repr=False)
    uncovered: tuple[str, ...]  # source nodes ORT removed or folded
    overlaps: tuple[str, ...]  # source nodes two units claimed (the first keeps them)


def ort_version() -> str:
    import onnxruntime as ort

    return str(ort.__version__)


def optimize(path: str | os.PathLike[str], level: str = DEFAULT_LEVEL) -> Graph:
    """ORT's optimized graph (structure only) at ``level``, saved into and read back from a temp dir."""
    import onnxruntime as ort

    if level not in LEVELS:
        raise ValueError(f"unknown ORT optimization level {level!r} (one of {', '.join(LEVELS)})")
    so = _ort_session.options()  # quiet: the NCHWc "hardware specific" serialization warning is expected
    so.graph_optimization_level = {"basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
                                   "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
                                   "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}[level]
    with tempfile.TemporaryDirectory(prefix="graphcost-ort-") as tmp:
        out = os.path.join(tmp, "optimized.onnx")
        so.optimized_model_filepath = out
        so.add_session_config_entry("session.optimized_model_external_initializers_file_name", "optimized.data")
        so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "64")
        try:
            _ort_session.session(path, so)
        except Exception as e:  # ORT raises its own exception types
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise OrtError(f"onnxruntime could not load {os.fspath(path)}: {first}") from e
        return load(out).graph()


def map_back(source: Graph, optimized: Graph, level: str = DEFAULT_LEVEL) -> OrtMapping:
    """Which source nodes each of ORT's kernels computes (see the module docstring)."""
    src_nodes = list(source.nodes())
    produced = {t for n in src_nodes for t in n.outputs if t}
    known = produced | set(source.input_names) | set(source.initializer_names())
    alias: dict[str, str] = {}

    def res(t: str) -> str:
        seen: set[str] = set()
        while True:
            while t.startswith(CAST_PREFIX):
                t = t[len(CAST_PREFIX):]
            if t not in alias or t in seen:
                return t
            seen.add(t)
            t = alias[t]

    opt_nodes = list(optimized.nodes())
    for n in opt_nodes:
        out = n.outputs[0] if n.outputs else ""
        if not out or res(out) in known:
            if n.op_type == "ReorderOutput" and n.inputs and res(n.inputs[0]) not in known and out:
                alias[n.inputs[0]] = res(out)
            continue
        if n.name.endswith(NCHWC_SUFFIX) and n.name[:-len(NCHWC_SUFFIX)] in produced:
            alias[out] = _absorbed(source, n, n.name[:-len(NCHWC_SUFFIX)])
        elif n.op_type == "ReorderInput" and n.inputs:
            alias[out] = res(n.inputs[0])
    opt_init = set(optimized.initializer_names()) | {t for t in optimized.tensors() if optimized.is_constant(t)}
    exists = {res(t) for n in opt_nodes for t in n.outputs if t} | {res(t) for t in opt_init} | \
        set(optimized.input_names)

    parent = list(range(len(opt_nodes)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    where = {n.name: i for i, n in enumerate(opt_nodes)}
    for i, n in enumerate(opt_nodes):
        for t in n.outputs:
            if t and res(t) not in known and t not in opt_init:
                for c in optimized.consumers(t):
                    parent[find(where[c.name])] = find(i)
    members: dict[int, list[Node]] = {}
    for i, n in enumerate(opt_nodes):
        members.setdefault(find(i), []).append(n)

    units: list[OrtUnit] = []
    unit_of: dict[str, int] = {}
    overlaps: list[str] = []
    for nodes in members.values():
        k_in = {res(t) for n in nodes for t in n.inputs if t and t not in opt_init and res(t) in known}
        k_out = {res(t) for n in nodes for t in n.outputs if t and res(t) in known}
        kernels = tuple(OrtKernel(n.name, n.op_type, n.domain, _detail(n)) for n in nodes)
        if k_out and k_out <= k_in:
            units.append(OrtUnit(kernels, (), sorted(k_out)[0]))
            continue
        covered = _walk(source, k_out, k_in, exists)
        for s in covered:
            if s in unit_of:
                overlaps.append(s)
            else:
                unit_of[s] = len(units)
        units.append(OrtUnit(kernels, tuple(s for s in covered if unit_of.get(s) == len(units))))
    uncovered = tuple(n.name for n in src_nodes if n.name not in unit_of)
    return OrtMapping(level, ort_version(), tuple(units), unit_of, uncovered, tuple(overlaps))


def _absorbed(source: Graph, node: Node, tensor: str) -> str:
    """The source tensor an NCHWc node really outputs: its name's tensor, moved over a Sum-Add and activation."""
    if len(node.inputs) > 3 and node.inputs[3]:
        cons = source.consumers(tensor)
        if len(cons) == 1 and cons[0].op_type == "Add" and cons[0].outputs:
            tensor = cons[0].outputs[0]
    act = node.attribute("activation")
    if act:
        act = act.decode() if isinstance(act, bytes) else str(act)
        cons = source.consumers(tensor)
        if len(cons) == 1 and cons[0].op_type == act and cons[0].outputs:
            tensor = cons[0].outputs[0]
    return tensor


def _detail(n: Node) -> str:
    parts = []
    if n.domain == "com.microsoft.nchwc" and len(n.inputs) > 3 and n.inputs[3]:
        parts.append("+Sum")
    act = n.attribute("activation")
    if act:
        parts.append(act.decode() if isinstance(act, bytes) else str(act))
    return ",".join(parts)


def _walk(source: Graph, outputs: set[str], inputs: set[str], exists: set[str]) -> list[str]:
    """Source nodes on the paths from a unit's known outputs back to its known inputs."""
    stack = [p.name for o in sorted(outputs - inputs) if (p := source.producer(o)) is not None]
    graph_inputs = set(source.input_names)
    seen: list[str] = []
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.append(name)
        for t in source.node(name).inputs:
            if not t or t in inputs or t in graph_inputs or source.is_constant(t):
                continue
            if t in exists and t not in outputs:
                continue
            p = source.producer(t)
            if p is not None:
                stack.append(p.name)
    return seen


# --------------------------------------------------------------------------- per-group comparison
@dataclass(frozen=True)
class GroupVsOrt:
    """One ideal group and how ORT computed it."""

    id: str
    nodes: tuple[str, ...]
    kernels: tuple[OrtKernel, ...]
    status: str  # same | less | more | less+more | folded | no kernel
    bytes_unfused: Number | None
    bytes_ideal: Number | None
    bytes_ort: Number | None
    time_left_s: float | None

    @property
    def bytes_left(self) -> Number | None:
        """Bytes ORT moves beyond the ideal group (negative: ORT fused across an ideal boundary)."""
        if self.bytes_ort is None or self.bytes_ideal is None:
            return None
        return self.bytes_ort - self.bytes_ideal

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "nodes": list(self.nodes), "kernels": [k.to_dict() for k in self.kernels],
                "status": self.status, "bytes_unfused": self.bytes_unfused, "bytes_ideal": self.bytes_ideal,
                "bytes_ort": self.bytes_ort, "bytes_left": self.bytes_left, "time_left_s": self.time_left_s}


STATUS_TEXT = {"same": "as ideal", "less": "ORT fused less", "more": "ORT fused across it",
               "less+more": "ORT split it and fused across it", "folded": "ORT folded it away",
               "no kernel": "views/constants only"}


@dataclass(frozen=True)
class OrtTotals:
    groups: int
    bytes_unfused: Number
    bytes_ideal: Number
    bytes_ort: Number
    bytes_left: Number
    time_left_s: float
    groups_less: int
    groups_more: int
    unknown_groups: int

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class OrtComparison:
    engine: str
    version: str
    level: str
    groups: tuple[GroupVsOrt, ...]
    totals: OrtTotals
    ort_kernels: int
    uncovered: tuple[str, ...]
    overlaps: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "version": self.version, "level": self.level,
                "groups": [g.to_dict() for g in self.groups], "totals": self.totals.to_dict(),
                "ort_kernels": self.ort_kernels, "uncovered": list(self.uncovered), "overlaps": list(self.overlaps)}


def ort_bytes_by_group(result: FusionResult, mapping: OrtMapping) -> dict[str, Dim | None]:
    """ORT's bytes attributed to each ideal group (symbolic like the costs); they sum to ORT's total."""
    ran = set(mapping.unit_of)
    per: dict[str, list[Dim | None]] = {g.id: [] for g in result.groups}
    for unit in mapping.units:
        if unit.conversion_of is not None:
            home = _conversion_home(result, unit.conversion_of)
            if home is not None:
                b = tensor_bytes(result.graph.tensor(unit.conversion_of))
                per[home].append(None if b is None else 2 * b)  # read it, write it in the new layout/dtype
            continue
        if not unit.covers:
            continue
        control = [n for n in unit.covers if result.infos[n].role is Role.CONTROL]
        if control:  # opaque: the node's own (body) bytes, as in the ideal accounting
            for n in control:
                c = result.costs[n]
                per[result.group_of(n).id].append(
                    None if c.bytes_read is None or c.bytes_written is None else c.bytes_read + c.bytes_written)
            continue
        crossing = result.crossing(unit.covers, runs=ran.__contains__)
        for _, node, b in (*crossing.reads, *crossing.writes):
            per[result.group_of(node).id].append(b)
    return {gid: sum_dims(vals) for gid, vals in per.items()}


def _conversion_home(result: FusionResult, tensor: str) -> str | None:
    """The ideal group a conversion of ``tensor`` is charged to: its producer's, else its first reader's."""
    owner = result.graph.producer(tensor)
    readers = result.graph.consumers(tensor)
    node = owner.name if owner is not None else (readers[0].name if readers else None)
    return None if node is None else result.group_of(node).id


def compare(result: FusionResult, mapping: OrtMapping, hw: HardwareSpec,
            binding: Mapping[str, int]) -> OrtComparison:
    """Group by group of ``result``: ORT's kernels, status, bytes ideal vs ORT, µs left (bytes / bandwidth)."""
    ort = ort_bytes_by_group(result, mapping)
    conversions: dict[str, list[OrtKernel]] = {}
    for unit in mapping.units:
        home = None if unit.conversion_of is None else _conversion_home(result, unit.conversion_of)
        if home is not None:
            conversions.setdefault(home, []).extend(unit.kernels)
    rows: list[GroupVsOrt] = []
    t_unf: Number = 0
    t_ideal: Number = 0
    t_ort: Number = 0
    less = more = unknown = 0
    for g in result.groups:
        kernel_nodes = [n for n in g.nodes if result.infos[n].kernel]
        touched = sorted({mapping.unit_of[n] for n in kernel_nodes if n in mapping.unit_of})
        listed = sorted({mapping.unit_of[n] for n in g.nodes if n in mapping.unit_of})
        if not kernel_nodes:
            status = "no kernel"
        elif not touched:
            status = "folded"
        else:
            is_less = len(touched) > 1
            is_more = any(result.infos[s].kernel and result.index[s] != result.index[kernel_nodes[0]]
                          for u in touched for s in mapping.units[u].covers)
            status = {(False, False): "same", (True, False): "less", (False, True): "more",
                      (True, True): "less+more"}[(is_less, is_more)]
            less += is_less
            more += is_more
        kernels = tuple(k for u in listed for k in mapping.units[u].kernels) + tuple(conversions.get(g.id, ()))
        unf, ideal, ob = (count_value(x, binding) for x in (g.bytes_unfused, g.bytes_fused, ort[g.id]))
        left = None if ob is None or ideal is None else (ob - ideal) / hw.memory_bandwidth
        rows.append(GroupVsOrt(g.id, g.nodes, kernels, status, unf, ideal, ob, left))
        if unf is None or ideal is None or ob is None:
            unknown += 1
            continue
        t_unf += unf
        t_ideal += ideal
        t_ort += ob
    totals = OrtTotals(len(rows), t_unf, t_ideal, t_ort, t_ort - t_ideal, (t_ort - t_ideal) / hw.memory_bandwidth,
                       less, more, unknown)
    return OrtComparison("onnxruntime", mapping.version, mapping.level, tuple(rows), totals,
                         sum(len(u.kernels) for u in mapping.units), mapping.uncovered, mapping.overlaps)


__all__ = [
    "DEFAULT_LEVEL",
    "LEVELS",
    "STATUS_TEXT",
    "GroupVsOrt",
    "OrtComparison",
    "OrtError",
    "OrtKernel",
    "OrtMapping",
    "OrtTotals",
    "OrtUnit",
    "compare",
    "map_back",
    "optimize",
    "ort_bytes_by_group",
]
