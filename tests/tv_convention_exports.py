"""Child process for ``tests/test_conventions_torchvision.py``: build one torchvision model with random weights
(seed 0; torchvision's own init, so BatchNorm's gamma/beta are ones/zeros), export it at its weights' published
size with BatchNorm kept, and print one JSON line of facts.

    python tests/tv_convention_exports.py MODULE NAME EXPORTER OUT

MODULE is ``classification``, ``quantization`` or ``segmentation``; EXPORTER ``legacy`` (opset 17, no constant
folding: the eval peephole that fuses BN into Conv only runs with folding) or ``dynamo`` (opset 18, ``optimize=
False`` then onnxscript's constant folding, as ``graphcost.export`` keeps BN) or ``dynamo-raw`` (the dynamo
exporter's own output, no folding). Facts: the published ``ops`` and
``num_params``; for a quantized model also ``float_params`` (the same model unquantized, unfused) and
``model_params`` (the quantized model's own logical count: each packed weight's elements and each bias).
"""

from __future__ import annotations

import inspect
import json
import sys
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _quantized_count(model: Any) -> int:
    """Elements of the quantized model's weights as it computes with them (``weight()``/``bias()`` of packed
    modules) and of any float parameters left."""
    total = 0
    for m in model.modules():
        total += sum(p.numel() for p in m.parameters(recurse=False))
        for attr in ("weight", "bias"):
            fn = getattr(m, attr, None)
            if callable(fn) and not isinstance(fn, type):
                value = fn()
                total += 0 if value is None else value.numel()
    return total


def export(module: str, name: str, exporter: str, out: str) -> dict[str, Any]:
    from real_exports import install_torchvision_cpu_ops

    install_torchvision_cpu_ops()
    import torch
    import torchvision.models as tvm

    mod = {"classification": tvm, "quantization": tvm.quantization, "segmentation": tvm.segmentation}[module]
    weights = tvm.get_model_weights(f"quantized_{name}" if module == "quantization" else name).DEFAULT
    kwargs: dict[str, Any] = {"weights": None}
    if module == "quantization":
        kwargs["quantize"] = True
    if module == "classification" and name.startswith("vit_"):
        kwargs["image_size"] = weights.meta["min_size"][0]  # what vit_*(weights=...) sets (vision_transformer.py):
        # the default 224 would refuse vit_h_14's 518 (SWAG_E2E); equal to the default for the other ViTs
    if module == "segmentation":
        kwargs["weights_backbone"] = None
        if "aux_loss" in inspect.signature(getattr(mod, name)).parameters:
            kwargs["aux_loss"] = True  # the published weights carry the auxiliary head
    torch.backends.mha.set_fastpath_enabled(False)  # eval nn.MultiheadAttention's fused kernel has no symbolic
    torch.manual_seed(0)
    model = getattr(mod, name)(**kwargs).eval()
    crop = getattr(weights.transforms(), "crop_size", None) or getattr(weights.transforms(), "resize_size", None)
    side = int(crop[0]) if isinstance(crop, list) else int(crop or 224)
    x = torch.rand(1, 3, side, side, generator=torch.Generator().manual_seed(0))
    facts: dict[str, Any] = {"ops": weights.meta["_ops"], "num_params": weights.meta["num_params"], "side": side}
    if module == "quantization":
        facts["model_params"] = _quantized_count(model)
        plain = getattr(mod, name)(weights=None, quantize=False)
        facts["float_params"] = sum(p.numel() for p in plain.parameters())
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        if exporter in ("dynamo", "dynamo-raw"):
            program = torch.onnx.export(model, (x,), dynamo=True, opset_version=18, optimize=False, verbose=False)
            if program is None:
                raise RuntimeError("torch.onnx.export returned no program")
            if exporter == "dynamo":  # graphcost.export's path; "dynamo-raw" is the exporter's own output
                import onnxscript.optimizer

                onnxscript.optimizer.fold_constants(program.model)
                onnxscript.optimizer.remove_unused_nodes(program.model)
            program.save(out, external_data=False)
        else:
            torch.onnx.export(model, (x,), out, dynamo=False, opset_version=17, do_constant_folding=False)
    return facts


if __name__ == "__main__":
    print(json.dumps(export(*sys.argv[1:5])))
