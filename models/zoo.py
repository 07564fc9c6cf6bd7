"""The reference zoo: the same small architectures written natively in PyTorch, TensorFlow/Keras and JAX (flax.nnx).

This module is framework-neutral: it holds the architecture constants, the weights and the example inputs as numpy
arrays, and dispatches to ``zoo_torch`` / ``zoo_tf`` / ``zoo_jax``, which import their framework only when called.

=============  ================================================================  =====================================
arch           layers                                                            input (``x``), dynamic dims
=============  ================================================================  =====================================
mlp            Dense 64→128, ReLU, Dense 128→128, ReLU, Dense 128→10              [batch, 64]
cnn            stem Conv3x3 3→16 + BN + ReLU; residual block (Conv3x3 16→16 +     torch [batch, 3, 32, 32] (NCHW);
               BN + ReLU, Conv3x3 16→16 + BN, Add, ReLU); MaxPool 2x2/2;          tf, jax [batch, 32, 32, 3] (NHWC)
               global average pool; Dense 16→10. Convs "same", no bias.
transformer    one pre-LN block, d=64, 4 heads: x + Attn(LN(x)); then             [batch, seq, 64]
               h + Dense 256→64(GELU(Dense 64→256(LN(h)))). Exact (erf) GELU.
dense          one Dense in→out with bias (``features``, default 1024→1024)        [batch, features]
=============  ================================================================  =====================================

**Same weights in every framework.** :func:`weights` draws every parameter from one numpy generator seeded with
``seed`` in a fixed order, in a canonical layout (dense kernels ``[in, out]``, conv kernels ``HWIO``); each framework
copies them into its own layers (torch transposes). So the three frameworks compute the same function on the same
values (the cnn's NHWC input is the NCHW one transposed) and their outputs agree to float32 rounding. BatchNorm
running statistics are drawn away from 0/1 (mean ~ N(0, 0.5²), var ~ U(0.5, 2)) so a wrong BN fold shows. Epsilons
are set explicitly (1e-5 for BN and LN) because the frameworks' defaults differ.

Products per example, as multiply-accumulates (MACs; FLOPs are 2·MACs, biases excluded):

* mlp: 64·128 + 128·128 + 128·10 = 25,856
* cnn: 32·32·16·(3·9) + 2·32·32·16·(16·9) + 16·10 = 5,161,120 (stem, two block convs, head)
* transformer, per sequence: seq·(4·64·64 + 2·64·256) + 2·seq²·64 = 49,152·seq + 128·seq²
* dense: in·out (1,048,576 at the default 1024)
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "ARCHS",
    "CNN",
    "DEFAULT_SEED",
    "EXTRAS",
    "FRAMEWORKS",
    "LAYOUTS",
    "MLP",
    "TRANSFORMER",
    "FrameworkMissing",
    "NativeModel",
    "available",
    "build_native",
    "example_inputs",
    "require",
    "to_native",
    "to_numpy",
    "weights",
]

ARCHS = ("mlp", "cnn", "transformer", "dense")
FRAMEWORKS = ("torch", "tf", "jax")
DEFAULT_SEED = 0

EXTRAS = {"torch": "torch", "tf": "tf", "jax": "jax"}
"""The pip extra that installs each framework (``pip install 'graphcost[EXTRA]'``)."""

_MODULES = {"torch": ("torch",), "tf": ("tensorflow",), "jax": ("jax", "flax")}
"""What ``available`` needs importable to *build* a framework's models (exporters are checked by the exporters)."""

LAYOUTS = {"torch": "NCHW", "tf": "NHWC", "jax": "NHWC"}
"""The cnn's input layout in each framework (the other archs have no channel axis: layout "-")."""


@dataclass(frozen=True)
class _Mlp:
    widths: tuple[int, ...] = (64, 128, 128, 10)  # input, hidden, hidden, classes


@dataclass(frozen=True)
class _Cnn:
    image: int = 32  # input side (square)
    in_channels: int = 3
    channels: int = 16  # stem and residual block width
    kernel: int = 3  # every conv is kernel×kernel, stride 1, "same" padding
    pool: int = 2  # max pool window and stride
    classes: int = 10
    bn_eps: float = 1e-5


@dataclass(frozen=True)
class _Transformer:
    d_model: int = 64
    heads: int = 4
    mlp: int = 256  # hidden width of the GELU MLP (4·d)
    ln_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads


MLP = _Mlp()
CNN = _Cnn()
TRANSFORMER = _Transformer()

LAYER_ATTRIBUTES: dict[str, dict[str, str]] = {
    "mlp": {"fc1": "fc1", "fc2": "fc2", "fc3": "fc3"},
    "cnn": {"stem.conv": "stem_conv", "stem.bn": "stem_bn", "block.conv1": "conv1", "block.bn1": "bn1",
            "block.conv2": "conv2", "block.bn2": "bn2", "head": "head"},
    "transformer": {"ln1": "ln1", "attn.q": "q", "attn.k": "k", "attn.v": "v", "attn.o": "o", "ln2": "ln2",
                    "mlp.fc1": "fc1", "mlp.fc2": "fc2"},
    "dense": {"fc": "fc"},
}
"""Canonical layer name (the keys of ``weights()``) → the attribute that holds the layer in the torch and flax
modules (the same names in both)."""


class FrameworkMissing(ImportError):
    """A framework (or its exporter) is not installed; the message names the extra to install, in one line."""


def require(framework: str, *modules: str) -> None:
    """Raise FrameworkMissing unless every module is importable (``modules`` default to the framework's own)."""
    _check_framework(framework)
    for name in modules or _MODULES[framework]:
        if importlib.util.find_spec(name) is None:
            raise FrameworkMissing(f"{name} is not installed (pip install 'graphcost[{EXTRAS[framework]}]')")


def available(framework: str) -> bool:
    """Whether ``framework``'s reference models can be built here (without importing the framework)."""
    try:
        require(framework)
    except FrameworkMissing:
        return False
    return True


@dataclass(frozen=True)
class NativeModel:
    """One reference model in one framework, ready to run or export.

    ``forward`` takes framework-native tensors positionally, in the order of ``inputs``, and returns one native
    tensor: plain eager for torch (eval mode, no autograd), a ``jax.jit``-able function for JAX, a
    ``tf.function``-able function for TF. ``module`` is what exporters take (``nn.Module``, ``keras.Model``,
    ``nnx.Module``).
    """

    framework: str
    arch: str
    forward: Callable[..., Any] = field(repr=False)
    module: Any = field(repr=False)
    inputs: dict[str, np.ndarray] = field(repr=False)
    dynamic: dict[str, dict[int, str]]
    layout: str


def _check_framework(framework: str) -> None:
    if framework not in FRAMEWORKS:
        raise ValueError(f"unknown framework {framework!r}: expected one of {', '.join(FRAMEWORKS)}")


def _check_arch(arch: str) -> None:
    if arch not in ARCHS:
        raise ValueError(f"unknown architecture {arch!r}: expected one of {', '.join(ARCHS)}")


def _dense(rng: np.random.Generator, out: dict[str, np.ndarray], name: str, n_in: int, n_out: int) -> None:
    out[f"{name}.kernel"] = (rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)).astype(np.float32)
    out[f"{name}.bias"] = (0.1 * rng.standard_normal(n_out)).astype(np.float32)


def _conv(rng: np.random.Generator, out: dict[str, np.ndarray], name: str, cin: int, cout: int, k: int) -> None:
    fan_in = k * k * cin
    out[f"{name}.kernel"] = (rng.standard_normal((k, k, cin, cout)) * np.sqrt(2.0 / fan_in)).astype(np.float32)


def _batchnorm(rng: np.random.Generator, out: dict[str, np.ndarray], name: str, c: int) -> None:
    out[f"{name}.scale"] = rng.uniform(0.5, 1.5, c).astype(np.float32)
    out[f"{name}.bias"] = (0.1 * rng.standard_normal(c)).astype(np.float32)
    out[f"{name}.mean"] = (0.5 * rng.standard_normal(c)).astype(np.float32)  # away from 0 ...
    out[f"{name}.var"] = rng.uniform(0.5, 2.0, c).astype(np.float32)  # ... and from 1, so folding shows


def _layernorm(rng: np.random.Generator, out: dict[str, np.ndarray], name: str, d: int) -> None:
    out[f"{name}.scale"] = rng.uniform(0.8, 1.2, d).astype(np.float32)
    out[f"{name}.bias"] = (0.1 * rng.standard_normal(d)).astype(np.float32)


def weights(arch: str, *, seed: int = DEFAULT_SEED, features: int = 1024) -> dict[str, np.ndarray]:
    """Every parameter of ``arch`` in the canonical layout, drawn in a fixed order from ``default_rng(seed)``.

    Dense kernels are ``[in, out]``, conv kernels ``[kh, kw, cin, cout]`` (HWIO). The same seed gives the same arrays
    on every run and machine (numpy's PCG64 stream is stable).
    """
    _check_arch(arch)
    rng = np.random.default_rng(seed)
    w: dict[str, np.ndarray] = {}
    if arch == "mlp":
        for i, (a, b) in enumerate(zip(MLP.widths, MLP.widths[1:], strict=False)):
            _dense(rng, w, f"fc{i + 1}", a, b)
    elif arch == "cnn":
        c, k = CNN.channels, CNN.kernel
        _conv(rng, w, "stem.conv", CNN.in_channels, c, k)
        _batchnorm(rng, w, "stem.bn", c)
        _conv(rng, w, "block.conv1", c, c, k)
        _batchnorm(rng, w, "block.bn1", c)
        _conv(rng, w, "block.conv2", c, c, k)
        _batchnorm(rng, w, "block.bn2", c)
        _dense(rng, w, "head", c, CNN.classes)
    elif arch == "transformer":
        d = TRANSFORMER.d_model
        _layernorm(rng, w, "ln1", d)
        for name in ("q", "k", "v", "o"):
            _dense(rng, w, f"attn.{name}", d, d)
        _layernorm(rng, w, "ln2", d)
        _dense(rng, w, "mlp.fc1", d, TRANSFORMER.mlp)
        _dense(rng, w, "mlp.fc2", TRANSFORMER.mlp, d)
    else:
        _dense(rng, w, "fc", features, features)
    return w


def example_inputs(arch: str, *, layout: str = "NCHW", batch: int = 2, seq: int = 16, features: int = 1024,
                   seed: int = DEFAULT_SEED) -> dict[str, np.ndarray]:
    """The example input ``{"x": array}`` (float32), drawn from a stream separate from the weights'.

    The cnn's image is drawn NCHW and transposed for ``layout="NHWC"``, so both layouts hold the same values.
    """
    _check_arch(arch)
    for name, v in (("batch", batch), ("seq", seq), ("features", features)):
        if v < 1:
            raise ValueError(f"{name} must be ≥ 1, got {v}")
    rng = np.random.default_rng([seed, 1])
    if arch == "mlp":
        x = rng.standard_normal((batch, MLP.widths[0]))
    elif arch == "cnn":
        x = rng.standard_normal((batch, CNN.in_channels, CNN.image, CNN.image))
        if layout == "NHWC":
            x = x.transpose(0, 2, 3, 1)
    elif arch == "transformer":
        x = rng.standard_normal((batch, seq, TRANSFORMER.d_model))
    else:
        x = rng.standard_normal((batch, features))
    return {"x": np.ascontiguousarray(x, dtype=np.float32)}


def _dynamic(arch: str) -> dict[str, dict[int, str]]:
    return {"x": {0: "batch", 1: "seq"}} if arch == "transformer" else {"x": {0: "batch"}}


def build_native(framework: str, arch: str, *, batch: int = 2, seq: int = 16, features: int = 1024,
                 seed: int = DEFAULT_SEED) -> NativeModel:
    """Build reference model ``arch`` in ``framework`` with deterministic weights and example inputs.

    Raises FrameworkMissing when the framework is not installed, ValueError for an unknown framework or arch.
    """
    _check_framework(framework)
    _check_arch(arch)
    require(framework)
    layout = LAYOUTS[framework] if arch == "cnn" else "-"
    w = weights(arch, seed=seed, features=features)
    inputs = example_inputs(arch, layout=layout, batch=batch, seq=seq, features=features, seed=seed)
    if framework == "torch":
        from .zoo_torch import build as build_fw
    elif framework == "tf":
        from .zoo_tf import build as build_fw
    else:
        from .zoo_jax import build as build_fw
    module, forward = build_fw(arch, w, features=features)
    return NativeModel(framework=framework, arch=arch, forward=forward, module=module, inputs=inputs,
                       dynamic=_dynamic(arch), layout=layout)


def to_native(framework: str, array: np.ndarray) -> Any:
    """A numpy array as ``framework``'s tensor (what ``NativeModel.forward`` takes)."""
    _check_framework(framework)
    if framework == "torch":
        import torch

        return torch.from_numpy(np.ascontiguousarray(array))
    if framework == "tf":
        import tensorflow as tf

        return tf.convert_to_tensor(array)
    import jax.numpy as jnp

    return jnp.asarray(array)


def to_numpy(framework: str, tensor: Any) -> np.ndarray:
    """A ``forward()`` output (a framework tensor) as a numpy array."""
    _check_framework(framework)
    if framework == "torch":
        return np.asarray(tensor.detach().cpu().numpy())
    if framework == "tf":
        return np.asarray(tensor.numpy() if hasattr(tensor, "numpy") else tensor)
    return np.asarray(tensor)
