"""torchvision's published numbers against ``analyze --as torchvision``: every classification, quantized and
segmentation model, random weights, exported at its weights' published size (BatchNorm kept so that learnable
parameters can be compared with ``num_params``), one child process per model.

    .venv/bin/python bench/bench_torchvision_ops.py [--tv-python .venv-tv/bin/python] [--only resnet18]
        [--exporter legacy|dynamo] [--jsonl out.jsonl] [--timeout 600] [--skip vit_h_14]
    .venv/bin/python bench/bench_torchvision_ops.py --markdown legacy.jsonl dynamo.jsonl

Prints: model, published ``_ops`` (GMAC, 3 decimals), ours, match to the published rounding, ``num_params``,
learnable parameters, match, and the named cause of a known difference (``CAUSES``). Segmentation models are
built with ``aux_loss=True`` where they have an auxiliary head: their published weights (and ``num_params``) do.
The exports run in ``--tv-python``, an interpreter where ``import torchvision`` works
(``tests/real_exports.py``'s ``install_torchvision_cpu_ops`` is applied on CPU torch); the analysis runs here.
``--jsonl`` gets one line per model, a row that did not run included (its ``error`` says why); ``--markdown``
merges such files (a later line for the same model and exporter replaces an earlier one: a rerun) into the docs'
table, one row per model with both exporters' columns.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# vit_h_14 and regnet_y_128gf (633M / 645M float32 parameters) are over protobuf's 2 GB: both exporters write
# their weights as external data beside the model, which graphcost reads from the model's folder (measured here:
# under 3.3 GiB peak RSS for export and analysis together, about a minute each)
MODULES = ("classification", "quantization", "segmentation")
EXPORTERS = ("legacy", "dynamo")
CAUSES = {
    # why learnable != num_params, by model name or module (closed forms in docs/conventions.md)
    "inception_v3": "AuxLogits (3,326,696 params) runs only in training: not in an eval export",
    "quantization": "BN folded into Conv before quantization: one fused bias (C) where num_params has gamma+beta (2C)",
    # the dynamo path's constant folding (onnxscript fold_constants) stores values the model computes from its
    # parameters and shapes; closed forms in docs/conventions.md
    "maxvit_t/dynamo": "folding stores each gathered position bias (h×49²) for its table (13²×h): 168 heads × 2,232",
    "swin_t/dynamo": "folding: gathered bias for table, 138 heads × 2,232, + shift masks 2·(56²+28²+3·14²) = 9,016",
    "swin_s/dynamo": "folding: gathered bias for table, 282 heads × 2,232, + shift masks 2·(56²+28²+9·14²) = 11,368",
    "swin_b/dynamo": "folding: gathered bias for table, 376 heads × 2,232, + shift masks 2·(56²+28²+9·14²) = 11,368",
    **{f"swin_v2_{v}/dynamo": f"folding evaluates each cpb_mlp's first MatMul (225×2 by 2×512; its 230,400 MACs "
       f"leave the graph): {n} blocks × (225·512 − 2·512) + shift masks {m}" for v, n, m in
       (("t", 12, "2·(64²+32²+3·16²) = 11,776"), ("s", 24, "2·(64²+32²+9·16²) = 14,848"),
        ("b", 24, "2·(64²+32²+9·16²) = 14,848"))},
}

FAILURES = {
    # why a model does not run with an exporter, shorter than the exception the row keeps
    **{f"quantization/shufflenet_v2_{w}/legacy": "export fails: the legacy exporter's SymbolicValueError on "
       "`onnx::Slice` of the quantized channel split (torch, before graphcost sees a file)"
       for w in ("x0_5", "x1_0", "x1_5", "x2_0")},
    "quantization/dynamo": "export fails: torch.export cannot trace eager-mode quantized modules (their packed "
    "weights, a TorchBind `quantized.Conv2dPackedParamsBase`, have no `__obj_flatten__`; torch, before graphcost "
    "sees a file)",
}


def _failure(module: str, name: str, exporter: str, error: str) -> str:
    return FAILURES.get(f"{module}/{name}/{exporter}") or FAILURES.get(f"{module}/{exporter}") or error


def _child(module: str, name: str, out: str, exporter: str = "legacy") -> int:
    """Export one model in this (torchvision) interpreter with the tests' builder; print its published facts."""
    sys.path.insert(0, str(ROOT / "tests"))
    from tv_convention_exports import export

    print(json.dumps(export(module, name, exporter, out)))
    return 0


def _list() -> int:
    sys.path.insert(0, str(ROOT / "tests"))
    from real_exports import install_torchvision_cpu_ops

    install_torchvision_cpu_ops()
    import torchvision.models as tvm

    for module, names in (("classification", tvm.list_models(module=tvm)),
                          ("quantization", tvm.list_models(module=tvm.quantization)),
                          ("segmentation", tvm.list_models(module=tvm.segmentation))):
        for n in names:
            print(f"{module}/{n.removeprefix('quantized_')}")
    return 0


def _cause(module: str, name: str, exporter: str) -> str:
    """The named causes of a parameter difference: the model's own, with this exporter, then its module's (more
    than one may apply)."""
    keys = (name, f"{name}/{exporter}", module)
    return "; ".join(CAUSES[k] for k in keys if k in CAUSES)


def _rows(paths: list[str]) -> dict[tuple[str, str], dict[str, dict[str, Any]]]:
    """(module, name) -> exporter -> the last line written for it, over ``paths`` in order."""
    out: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for path in paths:
        for line in Path(path).read_text().splitlines():
            r = json.loads(line)
            out.setdefault((r["module"], r["name"]), {})[r["exporter"]] = r
    return out


def _cell(r: dict[str, Any] | None, key: str, ok: str) -> str:
    """One exporter's number in the table: ``NO`` after it when it misses, a dash when the row did not run."""
    if r is None:
        return "not run"
    if r.get("error"):
        return "—"
    text = f"{r[key]:.4f}" if key == "ours" else f"{r[key]:,}"
    return text if r[ok] else f"{text} NO"


def _markdown(paths: list[str]) -> int:
    """The docs' summary line and table: one row per model, each exporter's GMAC and learnable count."""
    rows = _rows(paths)
    order = sorted(rows, key=lambda k: (MODULES.index(k[0]), k[1]))
    parts = []
    for e in EXPORTERS:
        ran = [x[e] for x in rows.values() if e in x and not x[e].get("error")]
        parts.append(f"with the {e} exporter {len(ran)} ran: `_ops` matches at its 3 published decimals on "
                     f"{sum(r['ops_match'] for r in ran)}, learnable == `num_params` on "
                     f"{sum(r['params_match'] for r in ran)}")
    print(f"Of the {len(rows)} models listed, {'; '.join(parts)}. Every other row's difference or failure is named "
          "in its cause column.")
    print()
    print("| model | published `_ops` | legacy (GMAC) | dynamo (GMAC) | `num_params` | legacy learnable "
          "| dynamo learnable | cause |")
    print("|---|---|---|---|---|---|---|---|")
    for key in order:
        by = rows[key]
        module, name = key
        first = next((r for r in by.values() if not r.get("error")), None)
        causes = []
        for e in EXPORTERS:
            r = by.get(e)
            if r is not None and r.get("error"):
                causes.append(f"{e}: {_failure(module, name, e, r['error'])}".replace("|", "\\|"))
            elif r is not None and not (r["params_match"] and r["ops_match"]):
                cause = _cause(module, name, e) or "not named yet"
                causes.append(cause if cause not in causes else "")
        cells = [f"{module[:5]}/{name}", f"{first['ops']:.3f}" if first else "",
                 *(_cell(by.get(e), "ours", "ops_match") for e in EXPORTERS),
                 f"{first['num_params']:,}" if first else "",
                 *(_cell(by.get(e), "learnable", "params_match") for e in EXPORTERS), "; ".join(c for c in causes if c)]
        print("| " + " | ".join(cells) + " |")
    return 0


def _error_line(stderr: str) -> str:
    """The exception's own line (``torch.onnx.errors.SymbolicValueError: ...``), not the tail of the traced
    graph torch prints after it; else the last line."""
    lines = [x.strip() for x in stderr.strip().splitlines() if x.strip()]
    named = [x for x in lines if re.match(r"^[\w.]+(Error|Exception): ", x)]
    return (named or lines or [""])[-1][:160]


def _record(path: str, row: dict[str, Any]) -> None:
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--only", default="")
    p.add_argument("--modules", default=",".join(MODULES))
    p.add_argument("--skip", default="", help="comma-separated model names not to export")
    p.add_argument("--tv-python", default=str(ROOT / ".venv-tv" / "bin" / "python"))
    p.add_argument("--child", nargs=4, metavar=("MODULE", "NAME", "OUT", "EXPORTER"))
    p.add_argument("--exporter", choices=(*EXPORTERS, "dynamo-raw"), default="legacy")  # raw: no onnxscript folding
    p.add_argument("--jsonl", default="", help="also append one JSON line per model to this file")
    p.add_argument("--timeout", type=float, default=600.0, help="per-model export limit, seconds")
    p.add_argument("--list", action="store_true")
    p.add_argument("--markdown", nargs="+", metavar="JSONL",
                   help="print --jsonl files (legacy and dynamo) as the docs' summary line and table, and exit")
    args = p.parse_args()
    if args.child:
        return _child(*args.child)
    if args.list:
        return _list()
    if args.markdown:
        return _markdown(args.markdown)
    from graphcost.api import analyze
    from graphcost.conventions import as_convention

    only = {x for x in args.only.split(",") if x}
    skip = {x for x in args.skip.split(",") if x}
    listing = subprocess.run([args.tv_python, __file__, "--list"], capture_output=True, text=True, check=True)
    cases = [tuple(x.split("/", 1)) for x in listing.stdout.split()]
    print(f"{'model':<36} {'_ops':>9} {'ours':>12} {'match':>5} {'num_params':>12} {'learnable':>12} {'match':>5}",
          flush=True)
    for module, name in cases:
        label = f"{module[:5]}/{name}"
        if module not in args.modules.split(",") or (only and name not in only):
            continue
        row: dict[str, Any] = {"module": module, "name": name, "exporter": args.exporter}
        if name in skip:
            print(f"{label:<36} skipped (--skip): no line in --jsonl, so a merged table keeps an earlier one",
                  flush=True)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            out = str(Path(tmp) / "m.onnx")
            try:
                proc = subprocess.run([args.tv_python, __file__, "--child", module, name, out, args.exporter],
                                      capture_output=True, text=True, check=False, timeout=args.timeout)
            except subprocess.TimeoutExpired:
                print(f"{label:<36} export did not finish in {args.timeout:.0f} s", flush=True)
                _record(args.jsonl, {**row, "error": f"export did not finish in {args.timeout:.0f} s"})
                continue
            if proc.returncode != 0:
                why = _error_line(proc.stderr) or f"exit {proc.returncode}"
                print(f"{label:<36} export failed: {why}", flush=True)
                _record(args.jsonl, {**row, "error": f"export fails: {why}"})
                continue
            facts = json.loads(proc.stdout.strip().splitlines()[-1])
            try:
                r = analyze(out, fusion=False, memory=False, batchnorm=False)
            except Exception as e:
                print(f"{label:<36} analyze failed: {str(e)[:80]}", flush=True)
                _record(args.jsonl, {**row, "error": f"analyze fails: {str(e)[:120]}"})
                continue
        ours = as_convention(r, "torchvision").total / 1e9
        learn = r.model.parameter_split.learnable_count
        match = "yes" if round(ours, 3) == facts["ops"] else "NO"
        pmatch = "yes" if learn == facts["num_params"] else "NO"
        cause = _cause(module, name, args.exporter) if pmatch == "NO" else ""
        print(f"{label:<36} {facts['ops']:>9.3f} {ours:>12.4f} {match:>5} {facts['num_params']:>12,} {learn:>12,} "
              f"{pmatch:>5} {cause[:60]}", flush=True)
        _record(args.jsonl, {**row, "ops": facts["ops"], "ours": ours, "ops_match": match == "yes",
                             "num_params": facts["num_params"], "learnable": learn, "params_match": pmatch == "yes",
                             "merged": r.model.parameter_split.merged_count, "cause": cause,
                             "buffers": r.model.parameter_split.buffers_by_kind})
    return 0


if __name__ == "__main__":
    sys.exit(main())
