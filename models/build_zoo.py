"""Export the reference zoo to ``models/zoo/{framework}_{arch}.onnx`` (every export verified in onnxruntime).

    python -m graphcost.models.build_zoo [--out-dir models/zoo] [--frameworks torch,tf,jax]
        [--archs mlp,cnn,transformer]

Shipped: mlp, cnn and transformer for each framework installed here (``dense`` is 4 MB of weights at its default
width, so it is not shipped; export it with ``graphcost export ref:torch/dense``). Seed 0, opset 18, dynamic
``batch`` (and ``seq`` for the transformer), example batch 2 and seq 16; onnxruntime checks each file at those
shapes and at batch 3 / seq 19.

Exporters and BatchNorm (the cnn has three BNs with non-trivial statistics):

=========  ==============  ====================================================================================
framework  exporter        cnn BatchNorm in the file
=========  ==============  ====================================================================================
torch      torch.dynamo    kept (``keep_batchnorm=True``: exported unoptimized, then only constant folding), so
                           graphcost's BN-folding analysis has three BNs to fold; by default dynamo and legacy fold
tf         tf2onnx         folded into the Conv weights by tf2onnx's optimizer (no option to keep them)
jax        jax2onnx        kept: flax ``nnx.BatchNorm`` becomes a BatchNormalization node
=========  ==============  ====================================================================================

TF and JAX convolutions are NHWC: their files feed Conv through Transposes (input [batch, 32, 32, 3]).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from .zoo import FRAMEWORKS, available, build_native

HERE = Path(__file__).resolve().parent
ZOO_DIR = HERE / "zoo"
SHIPPED_ARCHS = ("mlp", "cnn", "transformer")


def export_options(framework: str, arch: str) -> dict[str, object]:
    """The exporter options the shipped file uses, beyond the defaults (opset 18, the model's dynamic dims)."""
    if framework == "torch" and arch == "cnn":
        return {"keep_batchnorm": True}
    return {}


def build(out_dir: Path = ZOO_DIR, frameworks: Sequence[str] = FRAMEWORKS,
          archs: Sequence[str] = SHIPPED_ARCHS) -> list[tuple[Path, str]]:
    """Export every (framework, arch) whose framework is installed; return (path, summary line) pairs."""
    from graphcost.export import export_native

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for framework in frameworks:
        if not available(framework):
            print(f"skipped {framework}: not installed", file=sys.stderr)
            continue
        for arch in archs:
            model = build_native(framework, arch)
            path = out_dir / f"{framework}_{arch}.onnx"
            result = export_native(model, path, opset=18, **export_options(framework, arch))
            _strip_node_metadata(path)
            written.append((path, result.summary()))
    return written


def _strip_node_metadata(path: Path) -> None:
    """Drop per-node metadata (torch dynamo writes stack traces with this checkout's absolute paths into every node);
    the computation is untouched, so the verified export stays verified."""
    import onnx

    model = onnx.load(str(path))
    if not any(node.metadata_props for node in model.graph.node):
        return
    for node in model.graph.node:
        del node.metadata_props[:]
    onnx.save(model, str(path))


def _names(text: str, allowed: Sequence[str], flag: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in allowed]
    if bad:
        raise SystemExit(f"{flag}: unknown {', '.join(bad)} (expected {', '.join(allowed)})")
    return names


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m graphcost.models.build_zoo", description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dir", type=Path, default=ZOO_DIR)
    p.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    p.add_argument("--archs", default=",".join(SHIPPED_ARCHS))
    a = p.parse_args(argv)
    from .zoo import ARCHS

    for path, summary in build(a.out_dir, _names(a.frameworks, FRAMEWORKS, "--frameworks"),
                               _names(a.archs, ARCHS, "--archs")):
        print(f"{summary}; {path.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
