"""Builders for the real-export tests (``tests/test_real_exports.py``) and the shape benchmark
(``bench/bench_shapes.py``): third-party models with random weights, exported locally, nothing downloaded.

* torchvision 0.28 (``swin_t``, ``swin_v2_t``, ``mvit_v1_b``, ``fcos_resnet50_fpn``,
  ``fasterrcnn_mobilenet_v3_large_fpn``, ``resnet18``) exported **static** at their published size with the legacy
  exporter (opset 17) and, for the classifiers, the dynamo exporter. Each export also records the weights enum's
  published ``_ops`` (GMACs, despite torchvision calling them GFLOPS) and ``num_params``.
* A YOLOv8n detector with dynamic ``batch``/``height``/``width``: ultralytics' own export of ``yolov8n.yaml`` when
  an interpreter with ultralytics is at hand (``GRAPHCOST_YOLO_PYTHON``, else ``/tmp/yolo-venv/bin/python``, else
  this one), otherwise a small YOLO-style module written here (stride-2 Conv stages, C2f-like Concat, Upsample,
  a DFL head with Reshape/Concat/Split/Softmax).
* A VAD-style torch model with an ``If`` on a scalar sample-rate input (``torch.jit.script``, legacy exporter).

Every export runs in a child process (``python tests/real_exports.py KIND NAME EXPORTER OUT``): torch, the
exporters and torchvision's C++ op stand-ins stay out of the caller's process, and a big export returns its
memory to the OS. The child prints one JSON line of facts about the export (published numbers, which builder ran).

torchvision's Linux wheel on PyPI is the CUDA build: on a CPU-only torch its ``_C.so`` does not load and
``import torchvision`` fails. :func:`install_torchvision_cpu_ops` then defines the ``torchvision::`` ops itself
(``nms`` and ``roi_align`` in plain torch, the rest raising) so that the models build and trace; the ONNX
symbolics torchvision registers turn them into NonMaxSuppression and RoiAlign as usual.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

OPSET = 17
EXPORT_TIMEOUT_S = 600  # a safety net against a hung export, not a speed check

# --------------------------------------------------------------------------------------------------------------
# The cases
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TVCase:
    """One torchvision model: its builder's module and name, its weights enum and its example input."""

    name: str
    family: str  # "classification", "video" or "detection"
    weights: str  # the weights enum in torchvision.models (its DEFAULT's meta holds _ops and num_params)
    shape: tuple[int, ...]  # one example input (detection: one CHW image in a list)
    dynamo: bool  # also exported with the dynamo exporter


TV_CASES: dict[str, TVCase] = {c.name: c for c in (
    TVCase("resnet18", "classification", "ResNet18_Weights", (1, 3, 224, 224), True),
    TVCase("swin_t", "classification", "Swin_T_Weights", (1, 3, 224, 224), True),
    TVCase("swin_v2_t", "classification", "Swin_V2_T_Weights", (1, 3, 256, 256), False),
    # MViT-V2-S's legacy export was killed for memory on the 23 GB test machine; V1-B (16 x 224^2) exports in 1 GB
    TVCase("mvit_v1_b", "video", "MViT_V1_B_Weights", (1, 3, 16, 224, 224), False),
    # more families, each exported in seconds: squeeze-excite, LayerNorm over permuted channels, channel
    # shuffle, block and grid attention with relative position bias, factorized 3D convs, inception branches
    TVCase("efficientnet_b0", "classification", "EfficientNet_B0_Weights", (1, 3, 224, 224), False),
    TVCase("convnext_tiny", "classification", "ConvNeXt_Tiny_Weights", (1, 3, 224, 224), False),
    TVCase("shufflenet_v2_x1_0", "classification", "ShuffleNet_V2_X1_0_Weights", (1, 3, 224, 224), False),
    TVCase("maxvit_t", "classification", "MaxVit_T_Weights", (1, 3, 224, 224), False),
    TVCase("inception_v3", "classification", "Inception_V3_Weights", (1, 3, 299, 299), False),
    TVCase("s3d", "video", "S3D_Weights", (1, 3, 16, 224, 224), False),
    # the rest of the shifted-window family at their published sizes (window partition and computed pads at
    # other stage sizes and depths, 3D windows), and more CNN families: group-conv SE blocks, dense concats,
    # fused-MBConv, inception branches, (2+1)D video convs
    TVCase("swin_s", "classification", "Swin_S_Weights", (1, 3, 224, 224), False),
    TVCase("swin_b", "classification", "Swin_B_Weights", (1, 3, 224, 224), False),
    TVCase("swin_v2_s", "classification", "Swin_V2_S_Weights", (1, 3, 256, 256), False),
    TVCase("swin3d_t", "video", "Swin3D_T_Weights", (1, 3, 16, 224, 224), False),
    TVCase("regnet_y_400mf", "classification", "RegNet_Y_400MF_Weights", (1, 3, 224, 224), False),
    TVCase("densenet121", "classification", "DenseNet121_Weights", (1, 3, 224, 224), False),
    TVCase("efficientnet_v2_s", "classification", "EfficientNet_V2_S_Weights", (1, 3, 384, 384), False),
    TVCase("googlenet", "classification", "GoogLeNet_Weights", (1, 3, 224, 224), False),
    TVCase("r2plus1d_18", "video", "R2Plus1D_18_Weights", (1, 3, 16, 112, 112), False),
    TVCase("fcos_resnet50_fpn", "detection", "FCOS_ResNet50_FPN_Weights", (3, 320, 320), False),
    TVCase("retinanet_resnet50_fpn", "detection", "RetinaNet_ResNet50_FPN_Weights", (3, 320, 320), False),
    # SSD300 works at 300x300; its postprocess keeps up to 200 boxes per class, 90 classes, each a TopK
    TVCase("ssd300_vgg16", "detection", "SSD300_VGG16_Weights", (3, 300, 300), False),
    TVCase("fasterrcnn_mobilenet_v3_large_fpn", "detection", "FasterRCNN_MobileNet_V3_Large_FPN_Weights",
           (3, 320, 320), False),
    # their roi_heads end in Loops whose carried lists grow by one detection a trip (keypoints, pasted masks)
    TVCase("keypointrcnn_resnet50_fpn", "detection", "KeypointRCNN_ResNet50_FPN_Weights", (3, 320, 320), False),
    TVCase("maskrcnn_resnet50_fpn", "detection", "MaskRCNN_ResNet50_FPN_Weights", (3, 320, 320), False),
)}

YOLO_IMGSZ = 320
VAD_SAMPLES = 512  # example audio length (the export keeps batch and samples dynamic)
VAD_RATE = 16000  # the If's then-branch sample rate (any other rate takes the else branch)

# --------------------------------------------------------------------------------------------------------------
# Running a builder in a child process
# --------------------------------------------------------------------------------------------------------------


def build(kind: str, name: str, exporter: str, out: Path) -> dict[str, Any]:
    """Export ``kind``/``name`` with ``exporter`` ("legacy" or "dynamo") to ``out`` in a child process.

    Returns the child's facts (published ``ops``/``num_params`` for torchvision, ``builder`` for YOLO). Raises
    RuntimeError with the child's last stderr lines when the export fails.
    """
    python = {"yolo": _yolo_python, "torchvision": torchvision_python}.get(kind, lambda: sys.executable)()
    cmd = [python, str(Path(__file__).resolve()), kind, name, exporter, str(out)]
    env = {**os.environ, "YOLO_OFFLINE": "1", "PYTHONHASHSEED": "0"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=EXPORT_TIMEOUT_S, check=False, env=env,
                          cwd=out.parent)
    if proc.returncode != 0 and kind == "yolo" and python != sys.executable:
        cmd[0] = sys.executable  # ultralytics could not run there: the hand-written YOLO-style model instead
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=EXPORT_TIMEOUT_S, check=False, env=env,
                              cwd=out.parent)
    if proc.returncode != 0 or not out.is_file():
        tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
        raise RuntimeError(f"export of {kind}/{name} ({exporter}) failed (exit {proc.returncode}): {tail}")
    facts: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return facts


def torchvision_python() -> str:
    """The interpreter that runs torchvision exports: ``GRAPHCOST_TV_PYTHON``, else the side venv ``.venv-tv`` at the
    repo root (``.ci/torchvision.sh`` makes it: it sees the main venv's packages plus torchvision, which must stay
    out of the main venv, where it breaks ``import transformers``), else this one."""
    explicit = os.environ.get("GRAPHCOST_TV_PYTHON")
    if explicit:
        return explicit
    venv = Path(__file__).resolve().parent.parent / ".venv-tv" / "bin" / "python"
    return str(venv) if venv.is_file() else sys.executable


def torchvision_missing() -> str | None:
    """Why torchvision exports cannot run (None when they can): the export interpreter itself is asked to import
    torchvision (with the CPU stand-ins), not the caller's process."""
    python = torchvision_python()
    try:
        proc = subprocess.run([python, str(Path(__file__).resolve()), "probe", "torchvision", "-", "-"],
                              capture_output=True, text=True, timeout=EXPORT_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{python}: {e}"
    if proc.returncode != 0:
        tail = " | ".join(proc.stderr.strip().splitlines()[-1:])
        return f"{python} cannot import torchvision ({tail}); run .ci/torchvision.sh or set GRAPHCOST_TV_PYTHON"
    return None


def _yolo_python() -> str:
    explicit = os.environ.get("GRAPHCOST_YOLO_PYTHON")
    if explicit:
        return explicit
    venv = Path("/tmp/yolo-venv/bin/python")
    return str(venv) if venv.is_file() else sys.executable


# --------------------------------------------------------------------------------------------------------------
# torchvision
# --------------------------------------------------------------------------------------------------------------

_TV_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width, "
    "int sampling_ratio, bool aligned) -> Tensor",
    "qroi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width, "
    "int sampling_ratio, bool aligned) -> Tensor",
    "_roi_align_backward(Tensor grad, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width, "
    "SymInt batch_size, SymInt channels, SymInt height, SymInt width, int sampling_ratio, bool aligned) -> Tensor",
    "roi_pool(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width) "
    "-> (Tensor, Tensor)",
    "_roi_pool_backward(Tensor grad, Tensor rois, Tensor argmax, float spatial_scale, SymInt pooled_height, "
    "SymInt pooled_width, SymInt batch_size, SymInt channels, SymInt height, SymInt width) -> Tensor",
    "ps_roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width, "
    "int sampling_ratio) -> (Tensor, Tensor)",
    "_ps_roi_align_backward(Tensor grad, Tensor rois, Tensor channel_mapping, float spatial_scale, "
    "SymInt pooled_height, SymInt pooled_width, int sampling_ratio, SymInt batch_size, SymInt channels, "
    "SymInt height, SymInt width) -> Tensor",
    "ps_roi_pool(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width) "
    "-> (Tensor, Tensor)",
    "_ps_roi_pool_backward(Tensor grad, Tensor rois, Tensor channel_mapping, float spatial_scale, "
    "SymInt pooled_height, SymInt pooled_width, SymInt batch_size, SymInt channels, SymInt height, SymInt width) "
    "-> Tensor",
    "deform_conv2d(Tensor input, Tensor weight, Tensor offset, Tensor mask, Tensor bias, SymInt stride_h, "
    "SymInt stride_w, SymInt pad_h, SymInt pad_w, SymInt dilation_h, SymInt dilation_w, SymInt groups, "
    "SymInt offset_groups, bool use_mask) -> Tensor",
    "_deform_conv2d_backward(Tensor grad, Tensor input, Tensor weight, Tensor offset, Tensor mask, Tensor bias, "
    "SymInt stride_h, SymInt stride_w, SymInt pad_h, SymInt pad_w, SymInt dilation_h, SymInt dilation_w, "
    "SymInt groups, SymInt offset_groups, bool use_mask) -> (Tensor, Tensor, Tensor, Tensor, Tensor)",
    "_cuda_version() -> int",
)
_TV_LIBRARY: list[Any] = []  # keeps the torch.library.Library alive


def _nms(dets: Any, scores: Any, iou_threshold: float) -> Any:
    """Greedy NMS, as torchvision's CPU kernel: indices of the kept boxes, by decreasing score."""
    import torch

    order = scores.argsort(descending=True)
    x1, y1, x2, y2 = dets.unbind(1)
    area = (x2 - x1) * (y2 - y1)
    suppressed = torch.zeros(len(order), dtype=torch.bool)
    keep: list[int] = []
    for k in range(len(order)):
        if suppressed[k]:
            continue
        i, rest = order[k], order[k + 1:]
        keep.append(int(i))
        w = (torch.minimum(x2[i], x2[rest]) - torch.maximum(x1[i], x1[rest])).clamp(min=0)
        h = (torch.minimum(y2[i], y2[rest]) - torch.maximum(y1[i], y1[rest])).clamp(min=0)
        inter = w * h
        suppressed[k + 1:] |= inter / (area[i] + area[rest] - inter) > iou_threshold
    return torch.tensor(keep, dtype=torch.int64)


def _roi_align(*args: Any) -> Any:
    from torchvision.ops.roi_align import _roi_align as pure_torch

    return pure_torch(*args)


def _unsupported(*_args: Any, **_kwargs: Any) -> Any:
    raise NotImplementedError("this torchvision C++ op has no CPU stand-in (its wheel is the CUDA build)")


def install_torchvision_cpu_ops() -> bool:
    """Make ``import torchvision`` work on a CPU-only torch. Returns True when the stand-ins were installed."""
    import importlib.util

    import torch

    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError("torchvision is not installed")
    so = Path(spec.origin).parent / "_C.so"
    try:
        torch.ops.load_library(str(so))
        return False
    except OSError:
        pass
    lib = torch.library.Library("torchvision", "DEF")
    _TV_LIBRARY.append(lib)
    kernels: dict[str, tuple[Callable[..., Any], str]] = {"nms": (_nms, "CPU"), "roi_align": (_roi_align, "CPU"),
               "_cuda_version": (lambda: -1, "CompositeExplicitAutograd")}
    for schema in _TV_SCHEMAS:
        lib.define(schema)
        name = schema.split("(", 1)[0]
        fn, key = kernels.get(name, (_unsupported, "CompositeExplicitAutograd"))
        lib.impl(name, fn, key)
    real = torch.ops.load_library

    def skip_c_extension(path: str) -> None:  # torchvision.extension's load: the ops are defined above
        if Path(path) != so:
            real(path)

    torch.ops.load_library = skip_c_extension  # type: ignore[method-assign]
    try:
        import torchvision  # noqa: F401
    finally:
        torch.ops.load_library = real  # type: ignore[method-assign]
    return True


DYNAMIC_HW = ("batch", "height", "width")
"""The dims a ``legacy-dynhw`` export of a classifier keeps dynamic: its input's axes 0, 2 and 3."""


def export_torchvision(name: str, path: Path, *, dynamo: bool, dynamic_hw: bool = False) -> dict[str, Any]:
    """Build ``name`` with random weights (seed 0) and export it static (``dynamic_hw``: legacy, with the input's
    batch, height and width dynamic, as :data:`DYNAMIC_HW` names them); return its published numbers."""
    install_torchvision_cpu_ops()
    import torch
    import torchvision.models as tvm
    import torchvision.models.detection as det
    import torchvision.models.video as video

    case = TV_CASES[name]
    module = {"classification": tvm, "video": video, "detection": det}[case.family]
    torch.manual_seed(0)
    kwargs = {"weights": None, "weights_backbone": None} if case.family == "detection" else {"weights": None}
    model = getattr(module, name)(**kwargs).eval()
    x = torch.rand(*case.shape, generator=torch.Generator().manual_seed(0))
    args: tuple[Any, ...] = ([x],) if case.family == "detection" else (x,)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        if dynamo:
            torch.onnx.export(model, args, str(path), dynamo=True, opset_version=OPSET, external_data=False,
                              verbose=False)
        elif dynamic_hw:
            torch.onnx.export(model, args, str(path), dynamo=False, opset_version=OPSET, input_names=["x"],
                              dynamic_axes={"x": dict(zip((0, 2, 3), DYNAMIC_HW, strict=True))})
        else:
            torch.onnx.export(model, args, str(path), dynamo=False, opset_version=OPSET)
    meta = getattr(module, case.weights).DEFAULT.meta
    return {"ops": meta["_ops"], "num_params": meta["num_params"]}


# --------------------------------------------------------------------------------------------------------------
# YOLO
# --------------------------------------------------------------------------------------------------------------


def export_yolo(path: Path) -> dict[str, Any]:
    """ultralytics' YOLOv8n (from its yaml: random weights), dynamic batch/height/width; else a YOLO-style module."""
    try:
        from ultralytics import YOLO
    except ImportError:
        export_yolo_style(path)
        return {"builder": "yolo-style"}
    model = YOLO("yolov8n.yaml")
    written = Path(model.export(format="onnx", dynamic=True, imgsz=YOLO_IMGSZ, simplify=False))
    written.replace(path)
    return {"builder": "ultralytics"}


def export_yolo_style(path: Path) -> Path:
    """A small YOLO-style detector, legacy export, dims ``batch``/``height``/``width``.

    Conv-BN-SiLU stride-2 stages, C2f-like split/concat blocks, an FPN top-down path with ``nn.Upsample(scale 2)``
    (Resize with computed sizes) and a DFL head: per level Reshape(b, 4, 16, h*w) -> Softmax -> 1x1 Conv, the levels
    concatenated along the anchors and split into boxes and classes.
    """
    import torch
    from torch import nn

    def conv(c_in: int, c_out: int, stride: int = 1) -> nn.Module:
        return nn.Sequential(nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False), nn.BatchNorm2d(c_out), nn.SiLU())

    class C2f(nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            self.a, self.b, self.out = conv(c // 2, c // 2), conv(c // 2, c // 2), nn.Conv2d(2 * c, c, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y0, y1 = x.chunk(2, 1)
            y2 = self.a(y1)
            return self.out(torch.cat([y0, y1, y2, self.b(y2)], 1))

    reg, classes = 16, 8

    class Yolo(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(conv(3, 8, 2), conv(8, 16, 2))
            self.p3 = nn.Sequential(conv(16, 32, 2), C2f(32))
            self.p4 = nn.Sequential(conv(32, 64, 2), C2f(64))
            self.p5 = nn.Sequential(conv(64, 64, 2), C2f(64))
            self.up = nn.Upsample(scale_factor=2.0, mode="nearest")
            self.fuse4, self.fuse3 = conv(128, 64), conv(96, 32)
            self.heads = nn.ModuleList(nn.Conv2d(c, 4 * reg + classes, 1) for c in (32, 64, 64))
            self.dfl = nn.Conv2d(reg, 1, 1, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            p3 = self.p3(self.stem(x))
            p4 = self.p4(p3)
            p5 = self.p5(p4)
            f4 = self.fuse4(torch.cat([self.up(p5), p4], 1))
            f3 = self.fuse3(torch.cat([self.up(f4), p3], 1))
            b = x.shape[0]
            levels = [h(f).view(b, 4 * reg + classes, -1) for h, f in zip(self.heads, (f3, f4, p5), strict=True)]
            out = torch.cat(levels, 2)
            box, cls = out.split((4 * reg, classes), 1)
            box = self.dfl(box.view(b, 4, reg, -1).transpose(2, 1).softmax(1)).view(b, 4, -1)
            return torch.cat([box, cls.sigmoid()], 1)

    torch.manual_seed(0)
    model = Yolo().eval()
    x = torch.rand(1, 3, YOLO_IMGSZ, YOLO_IMGSZ)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), str(path), dynamo=False, opset_version=OPSET, input_names=["images"],
                          output_names=["output0"],
                          dynamic_axes={"images": {0: "batch", 2: "height", 3: "width"},
                                        "output0": {0: "batch", 2: "anchors"}})
    return path


# --------------------------------------------------------------------------------------------------------------
# VAD-style If on a scalar input
# --------------------------------------------------------------------------------------------------------------

VAD_CHANNELS = 16


def export_vad_if(path: Path) -> Path:
    """``if sr == 16000: conv stack A else: conv stack B`` (torch.jit.script, legacy exporter): one If on ``sr``.

    Inputs: ``audio`` [batch, samples] float and ``sr`` (int64 scalar). Both branches end in an LSTM over the
    strided frames, so an unresolved branch leaves Conv and LSTM unknown.
    """
    import torch
    from torch import nn

    class Branch(nn.Module):
        def __init__(self, stride: int) -> None:
            super().__init__()
            self.conv = nn.Conv1d(1, VAD_CHANNELS, 8, stride=stride)
            self.lstm = nn.LSTM(VAD_CHANNELS, VAD_CHANNELS, batch_first=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.relu(self.conv(x.unsqueeze(1))).transpose(1, 2)
            out, _ = self.lstm(y)
            return out.mean(1)

    class Vad(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wide, self.narrow = Branch(4), Branch(2)
            self.out = nn.Linear(VAD_CHANNELS, 1)

        def forward(self, audio: torch.Tensor, sr: torch.Tensor) -> torch.Tensor:
            if bool(sr == 16000):  # VAD_RATE (TorchScript cannot read a module global)
                h = self.wide(audio)
            else:
                h = self.narrow(audio)
            return torch.sigmoid(self.out(h))

    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scripted = torch.jit.script(Vad().eval())
        with torch.no_grad():
            torch.onnx.export(scripted, (torch.randn(1, VAD_SAMPLES), torch.tensor(VAD_RATE)), str(path),
                              dynamo=False, opset_version=OPSET, input_names=["audio", "sr"], output_names=["speech"],
                              dynamic_axes={"audio": {0: "batch", 1: "samples"}, "speech": {0: "batch"}})
    return path


# --------------------------------------------------------------------------------------------------------------
# The child process
# --------------------------------------------------------------------------------------------------------------


def _main(argv: list[str]) -> int:
    kind, name, exporter, out = argv
    path = Path(out)
    if kind == "torchvision":
        facts = export_torchvision(name, path, dynamo=exporter == "dynamo", dynamic_hw=exporter == "legacy-dynhw")
    elif kind == "yolo":
        facts = export_yolo(path)
    elif kind == "probe":  # can this interpreter build torchvision models?
        install_torchvision_cpu_ops()
        facts = {}
    elif kind == "vad_if":
        export_vad_if(path)
        facts = {}
    else:
        print(f"unknown kind {kind!r}", file=sys.stderr)
        return 2
    print(json.dumps(facts))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
