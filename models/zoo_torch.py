"""The reference zoo in PyTorch (NCHW). Architectures and weights are defined in ``zoo``; this file only builds layers.

Attention is written out (Linear q/k/v/o, ``view`` into heads, softmax(q·kᵀ/√dh)·v, ``reshape`` back) rather
than ``nn.MultiheadAttention``, whose legacy export bakes the sequence length into Reshape constants. The exact
spelling matters to the legacy (tracing) exporter: with ``flatten(2)`` for the merge it bakes a Reshape shape
(onnxruntime fails at a second seq), and with ``unflatten`` for the split the file runs but onnxruntime's symbolic
shape inference gives up on it. ``view(*shape[:-1], h, dh)`` and ``reshape(*shape[:-2], d)`` keep ``batch`` and
``seq`` dynamic in both exporters and analyzable.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from .zoo import CNN, LAYER_ATTRIBUTES, MLP, TRANSFORMER

__all__ = ["Cnn", "Dense", "Mlp", "TransformerBlock", "build"]


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        w = MLP.widths
        self.fc1 = nn.Linear(w[0], w[1])
        self.fc2 = nn.Linear(w[1], w[2])
        self.fc3 = nn.Linear(w[2], w[3])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def _conv(cin: int, cout: int) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, CNN.kernel, padding=CNN.kernel // 2, bias=False)


class Cnn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        c = CNN.channels
        self.stem_conv = _conv(CNN.in_channels, c)
        self.stem_bn = nn.BatchNorm2d(c, eps=CNN.bn_eps)
        self.conv1 = _conv(c, c)
        self.bn1 = nn.BatchNorm2d(c, eps=CNN.bn_eps)
        self.conv2 = _conv(c, c)
        self.bn2 = nn.BatchNorm2d(c, eps=CNN.bn_eps)
        self.pool = nn.MaxPool2d(CNN.pool, CNN.pool)
        self.head = nn.Linear(c, CNN.classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.stem_bn(self.stem_conv(x)))
        r = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(h)))))
        h = torch.relu(h + r)
        h = self.pool(h).mean(dim=(2, 3))  # global average pool
        return self.head(h)


class TransformerBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        d = TRANSFORMER.d_model
        self.ln1 = nn.LayerNorm(d, eps=TRANSFORMER.ln_eps)
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.o = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d, eps=TRANSFORMER.ln_eps)
        self.fc1 = nn.Linear(d, TRANSFORMER.mlp)
        self.fc2 = nn.Linear(TRANSFORMER.mlp, d)

    def _heads(self, t: torch.Tensor) -> torch.Tensor:  # [b, s, d] -> [b, h, s, dh]
        return t.view(*t.shape[:-1], TRANSFORMER.heads, TRANSFORMER.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        q = self._heads(self.q(h)) * (1.0 / math.sqrt(TRANSFORMER.head_dim))
        k, v = self._heads(self.k(h)), self._heads(self.v(h))
        p = torch.softmax(q @ k.transpose(-1, -2), dim=-1)
        a = (p @ v).transpose(1, 2)
        a = a.reshape(*a.shape[:-2], TRANSFORMER.d_model)  # [b, s, d]
        x = x + self.o(a)
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))


class Dense(nn.Module):
    def __init__(self, features: int) -> None:
        super().__init__()
        self.fc = nn.Linear(features, features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)




def _load(module: nn.Module, arch: str, w: dict[str, np.ndarray]) -> None:
    """Copy the canonical weights in: dense [in, out] → weight [out, in]; conv HWIO → OIHW."""
    targets: dict[str, torch.Tensor] = {}
    for key, value in w.items():
        layer_name, _, leaf = key.rpartition(".")
        layer = module.get_submodule(LAYER_ATTRIBUTES[arch][layer_name])
        if leaf == "kernel":
            targets[f"{LAYER_ATTRIBUTES[arch][layer_name]}.weight"] = torch.from_numpy(
                value.transpose(3, 2, 0, 1).copy() if value.ndim == 4 else value.T.copy())
        elif isinstance(layer, nn.BatchNorm2d):
            attr = {"scale": "weight", "bias": "bias", "mean": "running_mean", "var": "running_var"}[leaf]
            targets[f"{LAYER_ATTRIBUTES[arch][layer_name]}.{attr}"] = torch.from_numpy(value.copy())
        else:
            attr = {"scale": "weight", "bias": "bias"}[leaf]
            targets[f"{LAYER_ATTRIBUTES[arch][layer_name]}.{attr}"] = torch.from_numpy(value.copy())
    state = module.state_dict()
    missing = {k for k in state if not k.endswith("num_batches_tracked")} - set(targets)
    if missing:
        raise AssertionError(f"zoo_torch {arch}: no canonical weight for {sorted(missing)}")
    state.update(targets)
    module.load_state_dict(state)


def build(arch: str, w: dict[str, np.ndarray], *, features: int = 1024) -> tuple[nn.Module, Callable[..., Any]]:
    """The module (eval mode) and its forward: eager, under ``torch.no_grad``."""
    module: nn.Module
    with torch.random.fork_rng(devices=[]):  # the default init is overwritten; leave the caller's RNG alone
        if arch == "mlp":
            module = Mlp()
        elif arch == "cnn":
            module = Cnn()
        elif arch == "transformer":
            module = TransformerBlock()
        else:
            module = Dense(features)
    _load(module, arch, w)
    module.eval()

    def forward(*xs: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return module(*xs)  # type: ignore[no-any-return]

    return module, forward
