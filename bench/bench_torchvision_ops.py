"""torchvision's published numbers against ``analyze --as torchvision``: every classification, quantized and
segmentation model, random weights, exported at its weights' published size (legacy exporter, BatchNorm kept so
that learnable parameters can be compared with ``num_params``), one child process per model.

    .venv/bin/python bench/bench_torchvision_ops.py [--tv-python .venv-tv/bin/python] [--only resnet18]

Prints: model, published ``_ops`` (GMAC, 3 decimals), ours, match to the published rounding, ``num_params`` and
learnable parameters. The exports run in ``--tv-python``, an interpreter where ``import torchvision`` works
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
GIANT = ("vit_h_14", "regnet_y_128gf")  # tens of GB to export on CPU


def _child(module: str, name: str, out: str) -> int:
    sys.path.insert(0, str(ROOT / "tests"))
    from real_exports import install_torchvision_cpu_ops

    install_torchvision_cpu_ops()
    import torch
    import torchvision.models as tvm

    mod = {"classification": tvm, "quantization": tvm.quantization, "segmentation": tvm.segmentation}[module]
    weights = tvm.get_model_weights(f"quantized_{name}" if module == "quantization" else name).DEFAULT
    kwargs = {"weights": None, "quantize": True} if module == "quantization" else {"weights": None}
    if module == "segmentation":
        kwargs["weights_backbone"] = None
    torch.manual_seed(0)
    model = getattr(mod, name)(**kwargs).eval()
    size = weights.transforms().crop_size if hasattr(weights.transforms(), "crop_size") else [520]
    side = size[0] if isinstance(size, list) else size
    x = torch.rand(1, 3, side, side)
    with torch.no_grad():
        torch.onnx.export(model, (x,), out, dynamo=False, opset_version=17, do_constant_folding=False)
    print(json.dumps({"ops": weights.meta["_ops"], "num_params": weights.meta["num_params"]}))
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


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--only", default="")
    p.add_argument("--skip", default=",".join(GIANT))
    p.add_argument("--tv-python", default=str(ROOT / ".venv-tv" / "bin" / "python"))
    p.add_argument("--child", nargs=3, metavar=("MODULE", "NAME", "OUT"))
    p.add_argument("--list", action="store_true")
    args = p.parse_args()
    if args.child:
        return _child(*args.child)
    if args.list:
        return _list()
    from graphcost.api import analyze
    from graphcost.conventions import as_convention

    only = {x for x in args.only.split(",") if x}
    skip = {x for x in args.skip.split(",") if x}
    listing = subprocess.run([args.tv_python, __file__, "--list"], capture_output=True, text=True, check=True)
    cases = [tuple(x.split("/", 1)) for x in listing.stdout.split()]
    print(f"{'model':<36} {'_ops':>9} {'ours':>12} {'match':>5} {'num_params':>12} {'learnable':>12}")
    for module, name in cases:
        label = f"{module[:5]}/{name}"
        if (only and name not in only) or name in skip:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            out = str(Path(tmp) / "m.onnx")
            proc = subprocess.run([args.tv_python, __file__, "--child", module, name, out], capture_output=True,
                                  text=True, check=False)
            if proc.returncode != 0:
                print(f"{label:<36} export failed: {(proc.stderr.strip().splitlines() or ['?'])[-1][:80]}")
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
        print(f"{label:<36} {facts['ops']:>9.3f} {ours:>12.4f} {match:>5} {facts['num_params']:>12,} {learn:>12,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
