"""Builders for the paddle2onnx real-export tests (``tests/test_paddle_exports.py``): PP-OCR's three networks with
random weights, exported locally by ``paddle.jit.save`` + ``paddle2onnx``, nothing downloaded.

paddleocr's pip package (3.x) ships inference pipelines over paddlex, not the ``ppocr.modeling`` code that builds a
network from its config, so the networks are written here after PP-OCR's published architecture, closely enough
that paddle2onnx writes the same patterns as on the shipped inference models:

* ``det`` — the DB text detector (PP-OCRv3/v4 det mobile): a PP-LCNet backbone (depthwise-separable stages, SE in the
  last), an RSE-FPN neck (1x1 and 3x3 convs with SE and a shortcut, nearest upsample x2 / x4 / x8 and Concat), a DB
  head (3x3 Conv-BN-ReLU, two ConvTranspose 2x2 stride 2, Sigmoid). Input ``[N, 3, H, W]``, all three dynamic.
* ``rec`` — the SVTR-LCNet recognizer (PP-OCRv3/v4 rec mobile): a PP-LCNet backbone with (2, 1) / (1, 2) strides and
  a closing 3x2 average pool, the SVTR mixer (``B, C, H, W = z.shape``; flatten/transpose to a sequence, multi-head
  attention whose qkv Reshape targets carry ``0`` and ``-1``, then ``reshape([0, H, W, C])`` back: Shape -> Slice ->
  Concat targets), Im2Seq (Squeeze + Transpose), a CTC head (FC + Softmax). Input ``[N, 3, 48, W]``.
* ``rec_lstm`` — PP-OCR v2's CRNN recognizer: the same backbone (x0.5), Im2Seq, a 2-layer bidirectional LSTM
  (EncoderWithRNN: paddle2onnx writes ONNX LSTMs whose initial states are Expanded to a Shape-computed batch), the
  CTC head. Input ``[N, 3, 48, W]``.
* ``cls`` — the text-direction classifier (PP-OCR v2 ``cls_mv3``): MobileNetV3-small x0.35 (expand / depthwise /
  SE with hard-sigmoid / project residual units), then ClsHead: global average pool,
  ``reshape(x, [x.shape[0], x.shape[1]])`` (Reshape target = Concat(Cast(Slice(Shape)), ...)), FC, Softmax.
  Input ``[N, 3, 48, 192]``.

They run in a child process under an interpreter with paddlepaddle and paddle2onnx (:func:`paddle_python`):
``python tests/paddle_exports.py OUTDIR`` writes ``det.onnx``, ``rec.onnx``, ``rec_lstm.onnx`` and ``cls.onnx``
there and prints one JSON line of facts (paddle/paddle2onnx versions, opset, the export's input shapes);
``python tests/paddle_exports.py probe`` only imports both and prints their versions. paddle stays out of the main
venv (its protobuf/numpy pins are its own): ``.ci/paddle.sh`` builds the side venv.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

OPSET = 14  # within paddle2onnx's 7..19 and what PP-OCR's own export docs use
EXPORT_TIMEOUT_S = 600  # a safety net against a hung export, not a speed check
MODELS = ("det", "rec", "rec_lstm", "cls")
REC_HEIGHT = 48  # PP-OCRv3/v4 rec and the direction classifier take 48-pixel-high text lines
CLS_WIDTH = 192
REC_CLASSES = 97  # a small charset (PP-OCR's English dict has 95 characters, plus blank and space)
DEFAULT_PYTHON = "/tmp/pd-venv/bin/python"


def paddle_python() -> str | None:
    """The interpreter that runs the exports: ``GRAPHCOST_PADDLE_PYTHON``, else the side venv ``.venv-paddle`` at the
    repo root (``.ci/paddle.sh``), else ``/tmp/pd-venv``; None when none of them exists."""
    root = Path(__file__).resolve().parent.parent
    for candidate in (os.environ.get("GRAPHCOST_PADDLE_PYTHON"), str(root / ".venv-paddle" / "bin" / "python"),
                      DEFAULT_PYTHON):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


def paddle_missing() -> str | None:
    """Why the paddle exports cannot run here (one line), or None when they can."""
    python = paddle_python()
    if python is None:
        return "no interpreter with paddlepaddle: set GRAPHCOST_PADDLE_PYTHON or run .ci/paddle.sh"
    proc = subprocess.run([python, str(Path(__file__).resolve()), "probe"], capture_output=True, text=True,
                          timeout=EXPORT_TIMEOUT_S, check=False)
    if proc.returncode != 0:
        tail = " | ".join(proc.stderr.strip().splitlines()[-2:])
        return f"{python} cannot import paddle and paddle2onnx: {tail}"
    return None


def build_all(out_dir: Path) -> dict[str, Any]:
    """Export the three networks into ``out_dir`` in one child process; returns its facts. Raises RuntimeError
    with the child's last stderr lines when the export fails."""
    python = paddle_python()
    if python is None:
        raise RuntimeError("no paddle interpreter")
    out_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONHASHSEED": "0", "CUDA_VISIBLE_DEVICES": "", "GLOG_minloglevel": "3",
           "FLAGS_enable_pir_api": "1"}
    proc = subprocess.run([python, str(Path(__file__).resolve()), str(out_dir)], capture_output=True, text=True,
                          timeout=EXPORT_TIMEOUT_S, check=False, env=env, cwd=out_dir)
    missing = [m for m in MODELS if not (out_dir / f"{m}.onnx").is_file()]
    if proc.returncode != 0 or missing:
        tail = " | ".join(proc.stderr.strip().splitlines()[-4:])
        raise RuntimeError(f"paddle export failed (exit {proc.returncode}, missing {missing}): {tail}")
    facts: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return facts


# --------------------------------------------------------------------------------------------------------------
# The networks (run only inside the paddle interpreter)
# --------------------------------------------------------------------------------------------------------------


def _networks() -> dict[str, Any]:
    """PP-OCR's building blocks and the three networks, defined here so that paddle is imported only in the child."""
    import paddle
    import paddle.nn.functional as F
    from paddle import nn

    def divisible(v: float, d: int = 8) -> int:
        new = max(d, int(v + d / 2) // d * d)
        return new + d if new < 0.9 * v else new

    class ConvBN(nn.Layer):  # type: ignore[misc]
        def __init__(self, cin: int, cout: int, k: int, stride: Any = 1, groups: int = 1,
                     act: str | None = None) -> None:
            super().__init__()
            self.conv = nn.Conv2D(cin, cout, k, stride=stride, padding=(k - 1) // 2, groups=groups, bias_attr=False)
            self.bn = nn.BatchNorm2D(cout)
            self.act = {"hardswish": nn.Hardswish(), "relu": nn.ReLU(), None: None}[act]

        def forward(self, x: Any) -> Any:
            x = self.bn(self.conv(x))
            return x if self.act is None else self.act(x)

    class SE(nn.Layer):  # type: ignore[misc]
        def __init__(self, c: int, reduction: int = 4) -> None:
            super().__init__()
            self.pool = nn.AdaptiveAvgPool2D(1)
            self.conv1 = nn.Conv2D(c, c // reduction, 1)
            self.conv2 = nn.Conv2D(c // reduction, c, 1)

        def forward(self, x: Any) -> Any:
            s = F.relu(self.conv1(self.pool(x)))
            s = F.hardsigmoid(self.conv2(s), slope=0.2, offset=0.5)
            return paddle.multiply(x, s)

    class DepthwiseSeparable(nn.Layer):  # type: ignore[misc]
        """PP-LCNet's block: depthwise kxk (stride), optional SE, pointwise 1x1, hard-swish after each conv."""

        def __init__(self, cin: int, cout: int, k: int, stride: Any, se: bool) -> None:
            super().__init__()
            self.dw = ConvBN(cin, cin, k, stride, groups=cin, act="hardswish")
            self.se = SE(cin) if se else None
            self.pw = ConvBN(cin, cout, 1, act="hardswish")

        def forward(self, x: Any) -> Any:
            x = self.dw(x)
            if self.se is not None:
                x = self.se(x)
            return self.pw(x)

    # PP-LCNet's stages: [kernel, in, out, stride, se] (ppocr/modeling/backbones/det_pp_lcnet.py, rec_lcnetv3.py)
    lcnet_det = {
        "blocks2": [[3, 16, 32, 1, False]],
        "blocks3": [[3, 32, 64, 2, False], [3, 64, 64, 1, False]],
        "blocks4": [[3, 64, 128, 2, False], [3, 128, 128, 1, False]],
        "blocks5": [[3, 128, 256, 2, False]] + [[5, 256, 256, 1, False]] * 5,
        "blocks6": [[5, 256, 512, 2, True], [5, 512, 512, 1, True]],
    }
    lcnet_rec = {
        "blocks2": [[3, 16, 32, 1, False]],
        "blocks3": [[3, 32, 64, 1, False], [3, 64, 64, 1, False]],
        "blocks4": [[3, 64, 128, (2, 1), False], [3, 128, 128, 1, False]],
        "blocks5": [[3, 128, 256, (1, 2), False]] + [[5, 256, 256, 1, False]] * 4,
        "blocks6": [[5, 256, 512, (2, 1), True], [5, 512, 512, 1, True], [5, 512, 512, (2, 1), False],
                    [5, 512, 512, 1, False]],
    }

    class LCNet(nn.Layer):  # type: ignore[misc]
        def __init__(self, cfg: dict[str, list[list[Any]]], scale: float, det: bool) -> None:
            super().__init__()
            self.det = det
            self.conv1 = ConvBN(3, divisible(16 * scale), 3, 2, act="hardswish")
            self.stages = nn.LayerList([
                nn.Sequential(*[DepthwiseSeparable(divisible(i * scale), divisible(o * scale), k, s, se)
                                for k, i, o, s, se in cfg[name]])
                for name in ("blocks2", "blocks3", "blocks4", "blocks5", "blocks6")])
            self.out_channels = [divisible(cfg[n][-1][2] * scale) for n in ("blocks3", "blocks4", "blocks5", "blocks6")]

        def forward(self, x: Any) -> Any:
            x = self.conv1(x)
            outs = []
            for i, stage in enumerate(self.stages):
                x = stage(x)
                if i >= 1:
                    outs.append(x)
            if self.det:
                return outs
            return F.avg_pool2d(x, [3, 2])  # rec: 3 x W/4 -> 1 x W/8

    class RSELayer(nn.Layer):  # type: ignore[misc]
        def __init__(self, cin: int, cout: int, k: int) -> None:
            super().__init__()
            self.conv = nn.Conv2D(cin, cout, k, padding=k // 2, bias_attr=False)
            self.se = SE(cout)

        def forward(self, x: Any) -> Any:
            x = self.conv(x)
            return x + self.se(x)  # shortcut=True

    class RSEFPN(nn.Layer):  # type: ignore[misc]
        def __init__(self, in_channels: list[int], out: int) -> None:
            super().__init__()
            self.ins_conv = nn.LayerList([RSELayer(c, out, 1) for c in in_channels])
            self.inp_conv = nn.LayerList([RSELayer(out, out // 4, 3) for _ in in_channels])

        def forward(self, feats: list[Any]) -> Any:
            c2, c3, c4, c5 = feats
            in5, in4, in3, in2 = (self.ins_conv[i](c) for i, c in ((3, c5), (2, c4), (1, c3), (0, c2)))
            out4 = in4 + F.upsample(in5, scale_factor=2.0, mode="nearest")
            out3 = in3 + F.upsample(out4, scale_factor=2.0, mode="nearest")
            out2 = in2 + F.upsample(out3, scale_factor=2.0, mode="nearest")
            p5, p4, p3, p2 = (self.inp_conv[i](t) for i, t in ((3, in5), (2, out4), (1, out3), (0, out2)))
            p5 = F.upsample(p5, scale_factor=8.0, mode="nearest")
            p4 = F.upsample(p4, scale_factor=4.0, mode="nearest")
            p3 = F.upsample(p3, scale_factor=2.0, mode="nearest")
            return paddle.concat([p5, p4, p3, p2], axis=1)

    class DBHead(nn.Layer):  # type: ignore[misc]
        def __init__(self, c: int) -> None:
            super().__init__()
            self.conv1 = ConvBN(c, c // 4, 3, act="relu")
            self.conv2 = nn.Conv2DTranspose(c // 4, c // 4, 2, stride=2)
            self.bn2 = nn.BatchNorm2D(c // 4)
            self.conv3 = nn.Conv2DTranspose(c // 4, 1, 2, stride=2)

        def forward(self, x: Any) -> Any:
            x = self.conv1(x)
            x = F.relu(self.bn2(self.conv2(x)))
            return F.sigmoid(self.conv3(x))  # inference returns the shrink map only

    class Detector(nn.Layer):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.backbone = LCNet(lcnet_det, 0.75, det=True)
            self.neck = RSEFPN(self.backbone.out_channels, 96)
            self.head = DBHead(96)

        def forward(self, x: Any) -> Any:
            return self.head(self.neck(self.backbone(x)))

    class Attention(nn.Layer):  # type: ignore[misc]
        def __init__(self, dim: int, heads: int) -> None:
            super().__init__()
            self.heads = heads
            self.scale = (dim // heads) ** -0.5
            self.qkv = nn.Linear(dim, dim * 3)
            self.proj = nn.Linear(dim, dim)

        def forward(self, x: Any) -> Any:
            c = x.shape[-1]
            qkv = self.qkv(x).reshape((0, -1, 3, self.heads, c // self.heads)).transpose((2, 0, 3, 1, 4))
            q, k, v = qkv[0] * self.scale, qkv[1], qkv[2]
            attn = F.softmax(q.matmul(k.transpose((0, 1, 3, 2))), axis=-1)
            return self.proj(attn.matmul(v).transpose((0, 2, 1, 3)).reshape((0, -1, c)))

    class Block(nn.Layer):  # type: ignore[misc]
        def __init__(self, dim: int, heads: int) -> None:
            super().__init__()
            self.norm1 = nn.LayerNorm(dim, epsilon=1e-5)
            self.mixer = Attention(dim, heads)
            self.norm2 = nn.LayerNorm(dim, epsilon=1e-5)
            self.fc1 = nn.Linear(dim, dim * 2)
            self.fc2 = nn.Linear(dim * 2, dim)

        def forward(self, x: Any) -> Any:
            x = x + self.mixer(self.norm1(x))
            return x + self.fc2(F.swish(self.fc1(self.norm2(x))))

    class SVTREncoder(nn.Layer):  # type: ignore[misc]
        """ppocr's EncoderWithSVTR: local convs, global attention on the flattened map, back to a map, fuse."""

        def __init__(self, cin: int, dims: int = 64, hidden: int = 120, depth: int = 2, heads: int = 8) -> None:
            super().__init__()
            self.conv1 = ConvBN(cin, cin // 8, 3, act="hardswish")
            self.conv2 = ConvBN(cin // 8, hidden, 1, act="hardswish")
            self.blocks = nn.LayerList([Block(hidden, heads) for _ in range(depth)])
            self.norm = nn.LayerNorm(hidden, epsilon=1e-6)
            self.conv3 = ConvBN(hidden, cin, 1, act="hardswish")
            self.conv4 = ConvBN(2 * cin, cin // 8, 3, act="hardswish")
            self.conv1x1 = ConvBN(cin // 8, dims, 1, act="hardswish")
            self.out_channels = dims

        def forward(self, x: Any) -> Any:
            h = x
            z = self.conv2(self.conv1(x))
            _, c, hh, ww = z.shape
            z = z.flatten(2).transpose([0, 2, 1])
            for blk in self.blocks:
                z = blk(z)
            z = self.norm(z)
            z = z.reshape([0, hh, ww, c]).transpose([0, 3, 1, 2])
            z = self.conv3(z)
            z = paddle.concat((h, z), axis=1)
            return self.conv1x1(self.conv4(z))

    class RNNEncoder(nn.Layer):  # type: ignore[misc]
        """ppocr's EncoderWithRNN (PP-OCR v2's CRNN): a 2-layer bidirectional LSTM over the sequence."""

        def __init__(self, cin: int, hidden: int = 48) -> None:
            super().__init__()
            self.lstm = nn.LSTM(cin, hidden, direction="bidirectional", num_layers=2)
            self.out_channels = 2 * hidden

        def forward(self, x: Any) -> Any:
            x, _ = self.lstm(x)
            return x

    class Recognizer(nn.Layer):  # type: ignore[misc]
        """``mixer="svtr"``: PP-OCRv3/v4 rec (SVTR on the map, then Im2Seq); ``"lstm"``: PP-OCR v2's CRNN
        (Im2Seq, then a BiLSTM on the sequence)."""

        def __init__(self, mixer: str) -> None:
            super().__init__()
            self.backbone = LCNet(lcnet_rec, 0.95 if mixer == "svtr" else 0.5, det=False)
            cin = self.backbone.out_channels[-1]
            self.svtr = SVTREncoder(cin) if mixer == "svtr" else None
            self.rnn = RNNEncoder(cin) if mixer == "lstm" else None
            encoder = self.svtr if self.svtr is not None else self.rnn
            self.fc = nn.Linear(encoder.out_channels, REC_CLASSES)

        def forward(self, x: Any) -> Any:
            x = self.backbone(x)
            if self.svtr is not None:
                x = self.svtr(x)
            x = x.squeeze(axis=2).transpose([0, 2, 1])  # Im2Seq: [N, C, 1, W] -> [N, W, C]
            if self.rnn is not None:
                x = self.rnn(x)
            return F.softmax(self.fc(x), axis=2)  # CTCHead, inference

    class ResidualUnit(nn.Layer):  # type: ignore[misc]
        def __init__(self, cin: int, mid: int, cout: int, k: int, stride: Any, se: bool, act: str) -> None:
            super().__init__()
            self.shortcut = stride == 1 and cin == cout
            self.expand = ConvBN(cin, mid, 1, act=act)
            self.dw = ConvBN(mid, mid, k, stride, groups=mid, act=act)
            self.se = SE(mid) if se else None
            self.linear = ConvBN(mid, cout, 1)

        def forward(self, x: Any) -> Any:
            y = self.dw(self.expand(x))
            if self.se is not None:
                y = self.se(y)
            y = self.linear(y)
            return x + y if self.shortcut else y

    # MobileNetV3-small: [kernel, expand, out, se, act, stride] (ppocr/modeling/backbones/det_mobilenet_v3.py)
    mv3_small = [
        [3, 16, 16, True, "relu", 2], [3, 72, 24, False, "relu", 2], [3, 88, 24, False, "relu", 1],
        [5, 96, 40, True, "hardswish", 2], [5, 240, 40, True, "hardswish", 1], [5, 240, 40, True, "hardswish", 1],
        [5, 120, 48, True, "hardswish", 1], [5, 144, 48, True, "hardswish", 1], [5, 288, 96, True, "hardswish", 2],
        [5, 576, 96, True, "hardswish", 1], [5, 576, 96, True, "hardswish", 1],
    ]

    class Classifier(nn.Layer):  # type: ignore[misc]
        def __init__(self, scale: float = 0.35) -> None:
            super().__init__()
            c = divisible(16 * scale)
            self.conv = ConvBN(3, c, 3, 2, act="hardswish")
            units = []
            for k, exp, out, se, act, s in mv3_small:
                units.append(ResidualUnit(c, divisible(scale * exp), divisible(scale * out), k, s, se, act))
                c = divisible(scale * out)
            self.units = nn.Sequential(*units)
            self.last = ConvBN(c, divisible(scale * 576), 1, act="hardswish")
            self.pool = nn.AdaptiveAvgPool2D(1)
            self.fc = nn.Linear(divisible(scale * 576), 2)

        def forward(self, x: Any) -> Any:
            x = self.pool(self.last(self.units(self.conv(x))))
            x = paddle.reshape(x, shape=[x.shape[0], x.shape[1]])  # ClsHead
            return F.softmax(self.fc(x), axis=1)

    return {"det": Detector, "rec": lambda: Recognizer("svtr"), "rec_lstm": lambda: Recognizer("lstm"),
            "cls": Classifier}


INPUT_SPECS: dict[str, list[int | None]] = {
    "det": [None, 3, None, None],
    "rec": [None, 3, REC_HEIGHT, None],
    "rec_lstm": [None, 3, REC_HEIGHT, None],
    "cls": [None, 3, REC_HEIGHT, CLS_WIDTH],
}
"""The export's input shape per network (None = dynamic), as PP-OCR's ``tools/export_model.py`` writes them."""


def _export(out_dir: Path) -> dict[str, Any]:
    import paddle
    import paddle2onnx

    paddle.set_device("cpu")
    paddle.seed(0)
    networks = _networks()
    for name in MODELS:
        model = networks[name]()
        model.eval()
        spec = [paddle.static.InputSpec(shape=list(INPUT_SPECS[name]), dtype="float32", name="x")]
        prefix = out_dir / name / "inference"
        paddle.jit.save(paddle.jit.to_static(model, input_spec=spec, full_graph=True), str(prefix))
        model_file = next(p for p in (prefix.with_suffix(".json"), prefix.with_suffix(".pdmodel")) if p.is_file())
        if model_file.suffix == ".json":
            _float_scales(model_file)
        paddle2onnx.export(str(model_file), str(prefix.with_suffix(".pdiparams")), str(out_dir / f"{name}.onnx"),
                           opset_version=OPSET, enable_onnx_checker=True, verbose=False)
    return {"paddle": paddle.__version__, "paddle2onnx": paddle2onnx.__version__, "opset": OPSET,
            "inputs": INPUT_SPECS}


def _float_scales(program: Path) -> None:
    """paddle 3.3 writes an interpolation's ``scale`` list as f64 attributes; paddle2onnx 2.1's PIR reader takes
    only f32 there ("the 0th elementwise MUST be ir::FloatAttribute"). Rewrite those lists as f32, in place (the
    values are small powers of two: exact in both)."""
    data = json.loads(program.read_text())

    def fix(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("N") == "scale" and isinstance(node.get("AT"), dict) and node["AT"].get("#") == "0.a_array":
                for item in node["AT"].get("D", []):
                    if isinstance(item, dict) and item.get("#") == "0.a_f64":
                        item["#"] = "0.a_f32"
            for v in node.values():
                fix(v)
        elif isinstance(node, list):
            for v in node:
                fix(v)

    fix(data)
    program.write_text(json.dumps(data))


def main(argv: list[str]) -> int:
    if argv[:1] == ["probe"]:
        import paddle
        import paddle2onnx

        print(json.dumps({"paddle": paddle.__version__, "paddle2onnx": paddle2onnx.__version__}))
        return 0
    if len(argv) != 1:
        print("usage: paddle_exports.py OUTDIR | probe", file=sys.stderr)
        return 2
    facts = _export(Path(argv[0]))
    sys.stdout.flush()
    print(json.dumps(facts, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
