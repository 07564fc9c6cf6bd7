"""The reference zoo in TensorFlow/Keras 3 (NHWC). Architectures and weights are defined in ``zoo``.

Every model is a Keras functional model with one input named ``x`` and no fixed batch (the transformer has no
fixed sequence either). Attention is a small layer written with TF ops (Dense q/k/v/o, reshape into heads,
softmax(q·kᵀ/√dh)·v) rather than ``keras.layers.MultiHeadAttention``, whose einsums would export as ``Einsum``
nodes while the other frameworks export ``MatMul``: written this way the three exports cost the same.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from keras import layers

from .zoo import CNN, MLP, TRANSFORMER

__all__ = ["SelfAttention", "build"]


class SelfAttention(layers.Layer):
    """Multi-head self-attention over [batch, seq, d], no mask."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        d = TRANSFORMER.d_model
        self.q = layers.Dense(d, name="q")
        self.k = layers.Dense(d, name="k")
        self.v = layers.Dense(d, name="v")
        self.o = layers.Dense(d, name="o")

    def build(self, input_shape: Any) -> None:
        for dense in (self.q, self.k, self.v, self.o):
            dense.build(input_shape)
        super().build(input_shape)

    def _heads(self, t: tf.Tensor, b: tf.Tensor, s: tf.Tensor) -> tf.Tensor:  # [b, s, d] -> [b, h, s, dh]
        t = tf.reshape(t, tf.stack([b, s, TRANSFORMER.heads, TRANSFORMER.head_dim]))
        return tf.transpose(t, [0, 2, 1, 3])

    def call(self, h: tf.Tensor) -> tf.Tensor:
        b, s = tf.shape(h)[0], tf.shape(h)[1]
        q = self._heads(self.q(h), b, s) * (1.0 / math.sqrt(TRANSFORMER.head_dim))
        k, v = self._heads(self.k(h), b, s), self._heads(self.v(h), b, s)
        p = tf.nn.softmax(tf.matmul(q, k, transpose_b=True), axis=-1)
        a = tf.reshape(tf.transpose(tf.matmul(p, v), [0, 2, 1, 3]), tf.stack([b, s, TRANSFORMER.d_model]))
        return self.o(a)

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape


def _mlp() -> keras.Model:
    x = keras.Input((MLP.widths[0],), name="x")
    h = x
    for i, width in enumerate(MLP.widths[1:]):
        last = i == len(MLP.widths) - 2
        h = layers.Dense(width, activation=None if last else "relu", name=f"fc{i + 1}")(h)
    return keras.Model(x, h, name="mlp")


def _cnn() -> keras.Model:
    c = CNN.channels

    def conv(name: str) -> layers.Conv2D:
        return layers.Conv2D(c, CNN.kernel, padding="same", use_bias=False, name=name)

    def bn(name: str) -> layers.BatchNormalization:
        return layers.BatchNormalization(epsilon=CNN.bn_eps, name=name)

    x = keras.Input((CNN.image, CNN.image, CNN.in_channels), name="x")
    h = layers.ReLU()(bn("stem_bn")(conv("stem_conv")(x)))
    r = bn("bn2")(conv("conv2")(layers.ReLU()(bn("bn1")(conv("conv1")(h)))))
    h = layers.ReLU()(layers.Add()([h, r]))
    h = layers.MaxPooling2D(CNN.pool, CNN.pool)(h)
    h = layers.GlobalAveragePooling2D()(h)
    return keras.Model(x, layers.Dense(CNN.classes, name="head")(h), name="cnn")


def _gelu(t: tf.Tensor) -> tf.Tensor:
    """Exact GELU, x·(1 + erf(x/√2))/2, written out: Keras' and tf.nn's use Erfc, which tf2onnx cannot convert."""
    return 0.5 * t * (1.0 + tf.math.erf(t * (1.0 / math.sqrt(2.0))))


def _transformer() -> keras.Model:
    d = TRANSFORMER.d_model
    x = keras.Input((None, d), name="x")
    h = x + SelfAttention(name="attn")(layers.LayerNormalization(epsilon=TRANSFORMER.ln_eps, name="ln1")(x))
    m = layers.LayerNormalization(epsilon=TRANSFORMER.ln_eps, name="ln2")(h)
    m = layers.Dense(TRANSFORMER.mlp, activation=_gelu, name="fc1")(m)
    return keras.Model(x, h + layers.Dense(d, name="fc2")(m), name="transformer")


def _dense(features: int) -> keras.Model:
    x = keras.Input((features,), name="x")
    return keras.Model(x, layers.Dense(features, name="fc")(x), name="dense")


# canonical layer name -> Keras layer path; the leaves in the order Keras' get_weights lists them
_LAYERS = {
    "mlp": {"fc1": "fc1", "fc2": "fc2", "fc3": "fc3"},
    "cnn": {"stem.conv": "stem_conv", "stem.bn": "stem_bn", "block.conv1": "conv1", "block.bn1": "bn1",
            "block.conv2": "conv2", "block.bn2": "bn2", "head": "head"},
    "transformer": {"ln1": "ln1", "attn.q": "attn/q", "attn.k": "attn/k", "attn.v": "attn/v", "attn.o": "attn/o",
                    "ln2": "ln2", "mlp.fc1": "fc1", "mlp.fc2": "fc2"},
    "dense": {"fc": "fc"},
}
_LEAVES = {"Dense": ("kernel", "bias"), "Conv2D": ("kernel",), "BatchNormalization": ("scale", "bias", "mean", "var"),
           "LayerNormalization": ("scale", "bias")}


def _load(model: keras.Model, arch: str, w: dict[str, np.ndarray]) -> None:
    """Copy the canonical weights in (Keras already uses [in, out] dense and HWIO conv kernels)."""
    for canonical, path in _LAYERS[arch].items():
        layer: Any = model
        for part in path.split("/"):
            layer = getattr(layer, part) if isinstance(layer, SelfAttention) else layer.get_layer(part)
        leaves = _LEAVES[type(layer).__name__]
        layer.set_weights([w[f"{canonical}.{leaf}"] for leaf in leaves])
    if len(model.weights) != len(w):
        raise AssertionError(f"zoo_tf {arch}: {len(model.weights)} Keras weights, {len(w)} canonical")


def build(arch: str, w: dict[str, np.ndarray], *, features: int = 1024) -> tuple[keras.Model, Callable[..., Any]]:
    """The Keras model and its forward (inference mode; wrap it in ``tf.function`` to compile)."""
    if arch == "mlp":
        model = _mlp()
    elif arch == "cnn":
        model = _cnn()
    elif arch == "transformer":
        model = _transformer()
    else:
        model = _dense(features)
    _load(model, arch, w)

    def forward(x: tf.Tensor) -> tf.Tensor:
        return model(x, training=False)

    return model, forward
