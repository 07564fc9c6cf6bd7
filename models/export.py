"""Export the reference models to ONNX with torch's legacy (TorchScript) exporter, and check them in onnxruntime.

CLI (from the repo root)::

    python -m graphcost.models.export NAME OUT.onnx [--dynamic] [--batch N] [--seq N] [--image N] [--opset 17]
                                          [--no-constant-folding] [--no-verify]

NAME is one of ``models.reference.MODELS`` (resnet18, resnet50, mobilenet_v2, bert_base, gpt2_small, tiny_cnn,
tiny_transformer). Dynamic exports name their dims ``batch`` and, for the text models, ``seq``; ``--spatial``
also makes an image model's ``height`` and ``width`` dynamic.

BERT-base and GPT-2 exports with random weights are 0.4-0.7 GB: write them somewhere temporary, not into the repo.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from graphcost.models.reference import MODELS, build, example_inputs

__all__ = ["ExportMismatch", "dynamic_axes_for", "export_reference", "main", "verify_export"]


class ExportMismatch(AssertionError):
    """onnxruntime's output differs from torch's by more than the tolerance."""


def dynamic_axes_for(name: str, *, spatial: bool = False) -> dict[str, dict[int, str]]:
    """The ``dynamic_axes`` for ``name``: ``batch`` (and ``seq``) on inputs and outputs; ``spatial`` adds H, W."""
    spec = MODELS[name]
    if spec.kind == "text":
        axes = {spec.input_name: {0: "batch", 1: "seq"}}
        for out in spec.output_names:
            axes[out] = {0: "batch"} if out == "pooler_output" else {0: "batch", 1: "seq"}
        return axes
    image_axes = {0: "batch", 2: "height", 3: "width"} if spatial else {0: "batch"}
    return {spec.input_name: image_axes, **{out: {0: "batch"} for out in spec.output_names}}


def export_reference(
    name: str,
    path: str | os.PathLike[str],
    *,
    dynamic: bool = False,
    batch: int = 1,
    seq: int | None = None,
    image: int | None = None,
    opset: int = 17,
    spatial: bool = False,
    constant_folding: bool = True,
    model: nn.Module | None = None,
) -> Path:
    """Export reference model ``name`` to ``path`` with ``torch.onnx.export(..., dynamo=False)``.

    ``seq``/``image`` default to the model's own default (128 for BERT/GPT-2, 16 for tiny_transformer, 224 for the
    torchvision CNNs, 32 for tiny_cnn). With ``dynamic`` the exported dims are named ``batch``/``seq`` (and
    ``height``/``width`` with ``spatial``); otherwise every dim is fixed at the export shape.

    ``constant_folding`` is the exporter's ``do_constant_folding``. On (the default), BatchNorm is folded into the
    preceding Conv, Linear weights are stored pre-transposed, and GPT-2's tied LM head becomes a second, transposed
    copy of the token embedding (the file holds 163,037,184 weights, not 124,439,808). Off, BatchNormalization
    nodes stay, the tie stays (one initializer plus a Transpose node), and shape arithmetic is left unfolded.

    ``model`` lets the caller pass an already built model (``build(name)`` or equivalent). Returns the path.
    """
    spec = MODELS[name]
    path = Path(path)
    model = model if model is not None else build(name)
    model.eval()
    args = example_inputs(name, batch=batch, seq=seq, image=image)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # legacy-exporter deprecation and TracerWarnings
        torch.onnx.export(
            model,
            args,
            str(path),
            dynamo=False,
            opset_version=opset,
            input_names=[spec.input_name],
            output_names=list(spec.output_names),
            dynamic_axes=dynamic_axes_for(name, spatial=spatial) if dynamic else None,
            do_constant_folding=constant_folding,
        )
    return path


def _ort_session(path: Path):  # type: ignore[no-untyped-def]
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = min(2, os.cpu_count() or 1)
    so.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def verify_export(
    name: str,
    path: str | os.PathLike[str],
    model: nn.Module | None = None,
    *,
    batch: int = 1,
    seq: int | None = None,
    image: int | None = None,
    rtol: float = 1e-3,
    input_seed: int = 1,
) -> float:
    """Run the export in onnxruntime and torch on the same inputs; return the worst relative error.

    The error of one output is ``max|ort - torch| / max(1, max|torch|)``. Raises ``ExportMismatch`` if any output's
    error exceeds ``rtol`` or the output shapes differ. For a dynamic export, call it at a second shape too.
    """
    path = Path(path)
    spec = MODELS[name]
    model = model if model is not None else build(name)
    model.eval()
    args = example_inputs(name, batch=batch, seq=seq, image=image, seed=input_seed)
    with torch.no_grad():
        ref = model(*args)
    refs = ref if isinstance(ref, tuple) else (ref,)
    sess = _ort_session(path)
    got = sess.run(list(spec.output_names), {spec.input_name: args[0].numpy()})
    del sess
    worst = 0.0
    for out_name, r, g in zip(spec.output_names, refs, got, strict=True):
        r_np = r.numpy()
        if r_np.shape != g.shape:
            raise ExportMismatch(f"{name}: output {out_name} has shape {g.shape} in ORT, {r_np.shape} in torch")
        err = float(np.max(np.abs(r_np - g))) / max(1.0, float(np.max(np.abs(r_np))))
        worst = max(worst, err)
        if not err <= rtol:
            raise ExportMismatch(f"{name}: output {out_name} differs by {err:.3g} (relative) > {rtol:g}")
    return worst


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m graphcost.models.export", description=__doc__.split("\n\n")[0])
    p.add_argument("name", choices=sorted(MODELS))
    p.add_argument("out", type=Path)
    p.add_argument("--dynamic", action="store_true", help="named dynamic dims: batch (and seq for text models)")
    p.add_argument("--spatial", action="store_true", help="with --dynamic: image height/width dynamic too")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=None, help="sequence length (default: the model's, 128 / 16)")
    p.add_argument("--image", type=int, default=None, help="image side (default: the model's, 224 / 32)")
    p.add_argument("--opset", type=int, default=17)
    p.add_argument("--no-constant-folding", action="store_true",
                   help="keep BatchNormalization nodes and weight Transposes (exporter's do_constant_folding=False)")
    p.add_argument("--no-verify", action="store_true", help="skip the onnxruntime-vs-torch check")
    a = p.parse_args(argv)

    spec = MODELS[a.name]
    model = build(a.name)
    t0 = time.perf_counter()
    export_reference(a.name, a.out, dynamic=a.dynamic, batch=a.batch, seq=a.seq, image=a.image, opset=a.opset,
                     spatial=a.spatial, constant_folding=not a.no_constant_folding, model=model)
    t1 = time.perf_counter()
    size_mb = a.out.stat().st_size / 1e6
    print(f"exported {a.name} -> {a.out} ({size_mb:.1f} MB) in {t1 - t0:.1f} s")
    if a.no_verify:
        return 0
    checks = [(a.batch, a.seq, a.image)]
    if a.dynamic:  # a second shape exercises the dynamic dims
        size = (a.seq if spec.kind == "text" else a.image) or spec.default_size
        other = max(1, size // 2 + 3)
        if spec.kind == "text":
            checks.append((a.batch + 1, other, a.image))
        else:
            checks.append((a.batch + 1, a.seq, other if a.spatial else a.image))
    for b, s, im in checks:
        err = verify_export(a.name, a.out, model, batch=b, seq=s, image=im)
        shape = f"seq={s or spec.default_size}" if spec.kind == "text" else f"image={im or spec.default_size}"
        print(f"verified in onnxruntime at batch={b} {shape}: max relative diff {err:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
