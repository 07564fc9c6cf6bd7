"""torchvision's published numbers against ``analyze --as torchvision``: every classification, quantized and
segmentation model, random weights, exported at its weights' published size (legacy exporter, BatchNorm kept so
that learnable parameters can be compared with ``num_params``), one child process per model.

    .venv/bin/python bench/bench_torchvision_ops.py [--tv-python .venv-tv/bin/python] [--only resnet18]
        [--exporter legacy|dynamo] [--jsonl out.jsonl] [--timeout 600]

Prints: model, published ``_ops`` (GMAC, 3 decimals), ours, match to the published rounding, ``num_params``,
learnable parameters, match, and the named cause of a known difference (``CAUSES``). Segmentation models are
built with ``aux_loss=True`` where they have an auxiliary head: their published weights (and ``num_params``) do.
The exports run in ``--tv-python``, an interpreter where ``import torchvision`` works
(``tests/real_exports.py``'s ``install_torchvision_cpu_ops`` is applied on CPU torch); the analysis runs here.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GIANT = ("vit_h_14", "regnet_y_128gf")  # 632M / 644M float32 parameters: over protobuf's 2 GB, tens of GB to export
CAUSES = {
    # why learnable != num_params, by model name or module (closed forms in docs/conventions.md)
    "inception_v3": "AuxLogits (3,326,696 params) runs only in training: not in an eval export",
    "quantization": "BN folded into Conv before quantization: one fused bias (C) where num_params has gamma+beta (2C)",
}


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


def _cause(module: str, name: str) -> str:
    """The named causes of a parameter difference: the model's own, then its module's (both may apply)."""
    return "; ".join(c for c in (CAUSES.get(name, ""), CAUSES.get(module, "")) if c)


def _markdown(path: str) -> int:
    print("| model | exporter | published `_ops` | ours (GMAC) | match | `num_params` | learnable | match | cause |")
    print("|---|---|---|---|---|---|---|---|---|")
    for line in Path(path).read_text().splitlines():
        r = json.loads(line)
        label = f"{r['module'][:5]}/{r['name']}"
        cause = "" if r["params_match"] else _cause(r["module"], r["name"])
        print(f"| {label} | {r['exporter']} | {r['ops']:.3f} | {r['ours']:.4f} | {'yes' if r['ops_match'] else 'NO'} "
              f"| {r['num_params']:,} | {r['learnable']:,} | {'yes' if r['params_match'] else 'NO'} | {cause} |")
    return 0


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--only", default="")
    p.add_argument("--modules", default="classification,quantization,segmentation")
    p.add_argument("--skip", default=",".join(GIANT))
    p.add_argument("--tv-python", default=str(ROOT / ".venv-tv" / "bin" / "python"))
    p.add_argument("--child", nargs=4, metavar=("MODULE", "NAME", "OUT", "EXPORTER"))
    p.add_argument("--exporter", choices=("legacy", "dynamo"), default="legacy")
    p.add_argument("--jsonl", default="", help="also append one JSON line per model to this file")
    p.add_argument("--timeout", type=float, default=600.0, help="per-model export limit, seconds")
    p.add_argument("--list", action="store_true")
    p.add_argument("--markdown", metavar="JSONL", help="print a --jsonl file as the docs' markdown table and exit")
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
        if module not in args.modules.split(","):
            continue
        if (only and name not in only) or name in skip:
            if name in skip:
                print(f"{label:<36} skipped: too big to export here (GIANT)", flush=True)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            out = str(Path(tmp) / "m.onnx")
            try:
                proc = subprocess.run([args.tv_python, __file__, "--child", module, name, out, args.exporter],
                                      capture_output=True, text=True, check=False, timeout=args.timeout)
            except subprocess.TimeoutExpired:
                print(f"{label:<36} export did not finish in {args.timeout:.0f} s", flush=True)
                continue
            if proc.returncode != 0:
                print(f"{label:<36} export failed: {(proc.stderr.strip().splitlines() or ['?'])[-1][:80]}",
                      flush=True)
                continue
            facts = json.loads(proc.stdout.strip().splitlines()[-1])
            try:
                r = analyze(out, fusion=False, memory=False, batchnorm=False)
            except Exception as e:
                print(f"{label:<36} analyze failed: {str(e)[:80]}")
                continue
        ours = as_convention(r, "torchvision").total / 1e9
        learn = r.model.parameter_split.learnable_count
        match = "yes" if round(ours, 3) == facts["ops"] else "NO"
        pmatch = "yes" if learn == facts["num_params"] else "NO"
        cause = _cause(module, name) if pmatch == "NO" else ""
        print(f"{label:<36} {facts['ops']:>9.3f} {ours:>12.4f} {match:>5} {facts['num_params']:>12,} {learn:>12,} "
              f"{pmatch:>5} {cause[:60]}", flush=True)
        if args.jsonl:
            with open(args.jsonl, "a") as f:
                f.write(json.dumps({"module": module, "name": name, "exporter": args.exporter, "ops": facts["ops"],
                                    "ours": ours, "ops_match": match == "yes", "num_params": facts["num_params"],
                                    "learnable": learn, "params_match": pmatch == "yes",
                                    "merged": r.model.parameter_split.merged_count, "cause": cause}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
