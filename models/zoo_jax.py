"""The reference zoo in JAX with flax.nnx (NHWC). Architectures and weights are defined in ``zoo``.

Written for jax2onnx: attention uses ``jnp.matmul`` (MatMul nodes, like the other frameworks) rather than
``nnx.MultiHeadAttention``'s einsums; pooling is ``nnx.max_pool`` called with keywords (positional arguments break
jax2onnx's patched version, and a raw ``lax.reduce_window`` exports an invalid MaxPool); GELU is the exact (erf) one,
like torch's and Keras' defaults (``jax.nn.gelu`` defaults to the tanh approximation).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from .zoo import CNN, LAYER_ATTRIBUTES, MLP, TRANSFORMER

__all__ = ["Cnn", "Dense", "Mlp", "TransformerBlock", "build"]


class Mlp(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        w = MLP.widths
        self.fc1 = nnx.Linear(w[0], w[1], rngs=rngs)
        self.fc2 = nnx.Linear(w[1], w[2], rngs=rngs)
        self.fc3 = nnx.Linear(w[2], w[3], rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.fc3(jax.nn.relu(self.fc2(jax.nn.relu(self.fc1(x)))))


class Cnn(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        c, k = CNN.channels, (CNN.kernel, CNN.kernel)

        def conv(cin: int) -> nnx.Conv:
            return nnx.Conv(cin, c, k, padding="SAME", use_bias=False, rngs=rngs)

        def bn() -> nnx.BatchNorm:
            return nnx.BatchNorm(c, use_running_average=True, epsilon=CNN.bn_eps, rngs=rngs)

        self.stem_conv, self.stem_bn = conv(CNN.in_channels), bn()
        self.conv1, self.bn1 = conv(c), bn()
        self.conv2, self.bn2 = conv(c), bn()
        self.head = nnx.Linear(c, CNN.classes, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        h = jax.nn.relu(self.stem_bn(self.stem_conv(x)))
        r = self.bn2(self.conv2(jax.nn.relu(self.bn1(self.conv1(h)))))
        h = jax.nn.relu(h + r)
        h = nnx.max_pool(h, window_shape=(CNN.pool, CNN.pool), strides=(CNN.pool, CNN.pool))
        return self.head(jnp.mean(h, axis=(1, 2)))  # global average pool


class TransformerBlock(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        d = TRANSFORMER.d_model
        self.ln1 = nnx.LayerNorm(d, epsilon=TRANSFORMER.ln_eps, rngs=rngs)
        self.q = nnx.Linear(d, d, rngs=rngs)
        self.k = nnx.Linear(d, d, rngs=rngs)
        self.v = nnx.Linear(d, d, rngs=rngs)
        self.o = nnx.Linear(d, d, rngs=rngs)
        self.ln2 = nnx.LayerNorm(d, epsilon=TRANSFORMER.ln_eps, rngs=rngs)
        self.fc1 = nnx.Linear(d, TRANSFORMER.mlp, rngs=rngs)
        self.fc2 = nnx.Linear(TRANSFORMER.mlp, d, rngs=rngs)

    @staticmethod
    def _heads(t: jax.Array) -> jax.Array:  # [b, s, d] -> [b, h, s, dh]
        b, s = t.shape[0], t.shape[1]
        return jnp.transpose(t.reshape(b, s, TRANSFORMER.heads, TRANSFORMER.head_dim), (0, 2, 1, 3))

    def __call__(self, x: jax.Array) -> jax.Array:
        h = self.ln1(x)
        q = self._heads(self.q(h)) * (1.0 / math.sqrt(TRANSFORMER.head_dim))
        k, v = self._heads(self.k(h)), self._heads(self.v(h))
        p = jax.nn.softmax(jnp.matmul(q, jnp.swapaxes(k, -1, -2)), axis=-1)
        a = jnp.transpose(jnp.matmul(p, v), (0, 2, 1, 3))
        a = a.reshape(x.shape[0], x.shape[1], TRANSFORMER.d_model)
        x = x + self.o(a)
        return x + self.fc2(jax.nn.gelu(self.fc1(self.ln2(x)), approximate=False))


class Dense(nnx.Module):
    def __init__(self, features: int, rngs: nnx.Rngs) -> None:
        self.fc = nnx.Linear(features, features, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.fc(x)


_LEAVES = {"kernel": "kernel", "bias": "bias", "scale": "scale", "mean": "mean", "var": "var"}


def _load(module: nnx.Module, arch: str, w: dict[str, np.ndarray]) -> None:
    """Copy the canonical weights in (flax already uses [in, out] dense and HWIO conv kernels)."""
    for key, value in w.items():
        layer_name, _, leaf = key.rpartition(".")
        variable = getattr(getattr(module, LAYER_ATTRIBUTES[arch][layer_name]), _LEAVES[leaf])
        if tuple(variable.get_value().shape) != value.shape:
            raise AssertionError(f"zoo_jax {arch}: {key} is {variable.get_value().shape}, canonical {value.shape}")
        variable.set_value(jnp.asarray(value))
    n_vars = len(jax.tree_util.tree_leaves(nnx.state(module)))
    if n_vars != len(w):
        raise AssertionError(f"zoo_jax {arch}: {n_vars} flax variables, {len(w)} canonical")


def build(arch: str, w: dict[str, np.ndarray], *, features: int = 1024) -> tuple[nnx.Module, Callable[..., Any]]:
    """The nnx module (inference mode: BatchNorm uses its running averages) and a ``jax.jit``-able forward.

    ``forward`` rebuilds the module from its graph definition and state inside the call, so under ``jax.jit`` the
    parameters are ordinary closed-over arrays and nothing is mutated.
    """
    rngs = nnx.Rngs(0)  # the default init is overwritten by the canonical weights
    module: nnx.Module
    if arch == "mlp":
        module = Mlp(rngs)
    elif arch == "cnn":
        module = Cnn(rngs)
    elif arch == "transformer":
        module = TransformerBlock(rngs)
    else:
        module = Dense(features, rngs)
    _load(module, arch, w)
    graphdef, state = nnx.split(module)

    def forward(*xs: jax.Array) -> jax.Array:
        return nnx.merge(graphdef, state)(*xs)  # type: ignore[no-any-return, operator]

    return module, forward
