"""Regenerate the two tiny ONNX files shipped in ``models/`` (deterministic: same bytes on every run).

    python -m graphcost.models.build_shipped [--out-dir models] [--check]

* ``tiny_cnn.onnx``: static input ``input`` [1, 3, 32, 32] -> ``logits`` [1, 10]; BatchNormalization nodes are kept
  (exported with the exporter's constant folding off), so the file has Conv, BatchNormalization, Relu, Add, MaxPool,
  GlobalAveragePool, Flatten, Gemm. 6,340,928 conv+matmul MACs.
* ``tiny_transformer.onnx``: ``input_ids`` [batch, seq] -> ``logits`` [batch, seq, 128]; 2 pre-LN causal blocks,
  d=64, 4 heads. MACs = batch*(106496*seq + 256*seq**2), i.e. 1,769,472 at (1, 16).

Both: legacy exporter (``dynamo=False``), opset 17, weights from ``models.reference`` with seed 0. Every export is
checked against torch in onnxruntime. ``--check`` regenerates into a temporary folder and fails if the committed
files differ.
"""

from __future__ import annotations

import argparse
import filecmp
import sys
import tempfile
from pathlib import Path

from graphcost.models.export import export_reference, verify_export

HERE = Path(__file__).resolve().parent

SHIPPED_EXPORTS: dict[str, dict[str, bool]] = {
    "tiny_cnn": {"dynamic": False, "constant_folding": False},  # keeps the BatchNormalization nodes
    "tiny_transformer": {"dynamic": True, "constant_folding": True},
}


def build(out_dir: Path = HERE) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, opts in SHIPPED_EXPORTS.items():
        path = export_reference(name, out_dir / f"{name}.onnx", opset=17, **opts)
        verify_export(name, path)
        if opts["dynamic"]:
            verify_export(name, path, batch=3, seq=7)
        paths.append(path)
    return paths


def _same(built: Path, committed: Path) -> bool:
    return committed.is_file() and filecmp.cmp(built, committed, shallow=False)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m graphcost.models.build_shipped", description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dir", type=Path, default=HERE)
    p.add_argument("--check", action="store_true", help="fail if the files in --out-dir are not what we build")
    a = p.parse_args(argv)
    if not a.check:
        for path in build(a.out_dir):
            print(f"wrote {path} ({path.stat().st_size:,} bytes)")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        stale = [path.name for path in build(Path(tmp)) if not _same(path, a.out_dir / path.name)]
    if stale:
        print(f"out of date: {', '.join(stale)}; run python -m graphcost.models.build_shipped")
        return 1
    print("shipped models are up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
