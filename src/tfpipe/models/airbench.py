"""airbench: the CIFAR-10 speed-run network of Keller Jordan's airbench94 (2024), written for Keras.

A 2x2 patch-whitening convolution whose kernel is computed from the train split (`fit_whitening`, run by
`fit_to_train_split` before training), then per entry of model.widths a group conv3x3 -> maxpool -> BN -> GELU
-> conv3x3 -> BN -> GELU, a 3x3 max pool and a linear classifier scaled by 1/9. BatchNorm has no trained scale,
and its bias learns model.bias_lr_scale times faster. Convolutions start as partial identities. Training flips
(model.alternate_flips: each image every other epoch) and translates the images; inference averages the logits
over the mirror image and (tta_level 2) one-pixel translations. Everything serving needs (scaling,
normalisation, test-time augmentation) is inside the model.
"""

from __future__ import annotations

import math

import keras
import numpy as np
from keras import layers, ops

from tfpipe.models.image import RandomFlipCrop
from tfpipe.models.registry import register


class ScaledBias(layers.Layer):
    """x + scale * b. Under SGD, b's effective learning rate is scale^2 times the optimizer's, while decoupled
    weight decay (multiplicative) shrinks it at the common rate: airbench's faster BatchNorm biases, which Keras
    optimizers have no per-variable learning rate for."""

    def __init__(self, scale: float = 1.0, **kwargs):
        super().__init__(**kwargs)
        self.scale = float(scale)

    def build(self, input_shape):
        self.bias = self.add_weight(shape=(input_shape[-1],), initializer="zeros", name="bias")

    def call(self, x):
        return x + ops.cast(self.bias, x.dtype) * self.scale

    def get_config(self):
        return {**super().get_config(), "scale": self.scale}


class Whitening(layers.Layer):
    """A size x size 'valid' convolution onto 2 x size^2 x channels maps. Its kernel (not trained) is set from the
    data by `fit_whitening`; its bias is trained for the first `bias_epochs` epochs (0: the whole run)."""

    def __init__(self, size: int = 2, bias_epochs: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.size = int(size)
        self.bias_epochs = int(bias_epochs)

    def build(self, input_shape):
        k, c = self.size, int(input_shape[-1])
        self.kernel = self.add_weight(
            shape=(k, k, c, 2 * k * k * c), initializer="zeros", trainable=False, name="kernel"
        )
        self.bias = self.add_weight(shape=(2 * k * k * c,), initializer="zeros", name="bias")

    def call(self, x):
        return ops.conv(x, ops.cast(self.kernel, x.dtype), padding="valid") + ops.cast(self.bias, x.dtype)

    def set_epoch(self, epoch: int) -> bool:
        """Called before each epoch (tfpipe.training.epochs): the bias stops training from epoch `bias_epochs` on,
        as airbench freezes it after 3. True when its trainability changed (the train step is traced anew)."""
        trainable = not self.bias_epochs or epoch < self.bias_epochs
        changed = self.bias.trainable != trainable
        self.bias.trainable = trainable
        return changed

    def get_config(self):
        return {**super().get_config(), "size": self.size, "bias_epochs": self.bias_epochs}


def torch_default_init(seed=None) -> keras.initializers.Initializer:
    """PyTorch's default Conv / Linear initialisation: uniform within 1/sqrt(fan_in), as airbench starts from."""
    return keras.initializers.VarianceScaling(1.0 / 3.0, "fan_in", "uniform", seed=seed)


@keras.saving.register_keras_serializable(package="tfpipe")
class PartialIdentity(keras.initializers.Initializer):
    """PyTorch's default conv initialisation (uniform, limit 1/sqrt(fan_in)) with the first in_channels filters
    set to the identity (Dirac) at the kernel's centre, as airbench starts its convolutions."""

    def __init__(self, seed=None):
        self.seed = seed

    def __call__(self, shape, dtype=None):
        kernel = torch_default_init(self.seed)(shape, dtype="float32")
        kh, kw, cin, cout = shape
        eye = np.zeros(shape, dtype="float32")
        n = min(cin, cout)
        eye[kh // 2, kw // 2, np.arange(n), np.arange(n)] = 1.0
        mask = np.zeros(shape, dtype="float32")
        mask[..., :n] = 1.0
        return ops.cast(kernel * (1.0 - mask) + eye, dtype or "float32")

    def get_config(self):
        return {"seed": self.seed}


class TTAExpand(layers.Layer):
    """At inference, the batch followed by its views: level 1 the mirror images; level 2 also the images
    translated by one pixel up-left and down-right (reflect-padded) and their mirrors ([B * views, ...])."""

    def __init__(self, level: int = 2, **kwargs):
        super().__init__(autocast=False, **kwargs)
        self.level = int(level)

    def call(self, images, training=None):
        if training or self.level == 0:
            return images
        views = [images, ops.flip(images, axis=2)]
        if self.level == 2:
            h, w = images.shape[1], images.shape[2]
            padded = ops.pad(images, [[0, 0], [1, 1], [1, 1], [0, 0]], mode="reflect")
            for shifted in (padded[:, :h, :w], padded[:, 2 : h + 2, 2 : w + 2]):
                views += [shifted, ops.flip(shifted, axis=2)]
        return ops.concatenate(views, axis=0)

    def compute_output_shape(self, input_shape):
        return (None, *input_shape[1:])

    def get_config(self):
        return {**super().get_config(), "level": self.level}


class TTAMerge(layers.Layer):
    """At inference, each image's logits averaged over its views: the image and its mirror weigh 1/4 each and
    the four translated views 1/8 each (level 2, airbench's weights), or 1/2 each (level 1)."""

    def __init__(self, level: int = 2, **kwargs):
        super().__init__(**kwargs)
        self.level = int(level)

    def call(self, logits, training=None):
        if training or self.level == 0:
            return logits
        views = 2 if self.level == 1 else 6
        parts = ops.split(logits, views, axis=0)
        weights = [0.5, 0.5] if self.level == 1 else [0.25, 0.25, 0.125, 0.125, 0.125, 0.125]
        return sum(w * p for w, p in zip(weights, parts))

    def compute_output_shape(self, input_shape):
        return (None, *input_shape[1:])

    def get_config(self):
        return {**super().get_config(), "level": self.level}


def _conv_group(x, width: int, name: str, bn_momentum: float, bias_scale: float, seed: int):
    for i in (1, 2):
        init = PartialIdentity(seed=seed + i)
        x = layers.Conv2D(
            width, 3, padding="same", use_bias=False, kernel_initializer=init, name=f"{name}_conv{i}"
        )(x)
        if i == 1:
            x = layers.MaxPooling2D(2, name=f"{name}_pool")(x)
        # bn_momentum is the running statistics' weight (Keras' convention; airbench's 0.6 passes 1 - 0.6 to
        # PyTorch, whose momentum is the new batch's weight).
        x = layers.BatchNormalization(
            momentum=bn_momentum, epsilon=1e-12, center=False, scale=False, name=f"{name}_bn{i}"
        )(x)
        x = ScaledBias(bias_scale, name=f"{name}_bias{i}")(x)
        x = layers.Activation("gelu", name=f"{name}_gelu{i}")(x)
    return x


def build_airbench(cfg, num_classes: int, normalization: dict) -> keras.Model:
    """The airbench network on uint8 images (module docstring); `normalization`: the manifest's per-channel
    mean/std of the train split."""
    m = cfg.model
    height, width = cfg.dataset.image_size
    channels = cfg.dataset.channels
    if not normalization:
        raise ValueError(
            "airbench: needs the train split's per-channel mean/std (the manifest's normalization)"
        )
    inputs = keras.Input(shape=(height, width, channels), dtype="uint8", name="image")
    x = inputs
    if m.translate or m.flip:
        x = RandomFlipCrop(
            pad=int(m.translate),
            flip=bool(m.flip),
            seed=int(cfg.train.seed),
            alternate=bool(m.alternate_flips),
            name="augment",
        )(x)
    x = layers.Rescaling(1.0 / 255.0, name="rescale")(x)
    mean, std = list(normalization["mean"]), list(normalization["std"])
    x = layers.Normalization(mean=mean, variance=[s * s for s in std], name="normalize")(x)
    x = TTAExpand(int(m.tta_level), name="tta_expand")(x)
    x = Whitening(2, bias_epochs=int(m.whiten_bias_epochs), name="whiten")(x)
    x = layers.Activation("gelu", name="whiten_gelu")(x)
    seed = int(cfg.train.seed)
    for i, w in enumerate(m.widths, start=1):
        x = _conv_group(
            x, int(w), f"block{i}", float(m.bn_momentum), math.sqrt(m.bias_lr_scale), seed + 10 * i
        )
    x = layers.GlobalMaxPooling2D(name="pool")(x)
    x = layers.Dense(
        num_classes,
        use_bias=False,
        kernel_initializer=torch_default_init(seed),
        dtype="float32",
        name="logits",
    )(x)
    x = layers.Rescaling(float(m.logit_scale), dtype="float32", name="logit_scale")(x)
    x = TTAMerge(int(m.tta_level), dtype="float32", name="tta_merge")(x)
    outputs = layers.Activation("softmax", dtype="float32", name="probabilities")(x)
    return keras.Model(inputs, outputs, name="airbench")


def fit_whitening(model: keras.Model, batches, examples: int, eps: float = 5e-4) -> dict:
    """Set the whitening kernel from the first `examples` train images: the eigenvectors of the covariance of
    their size x size patches (after the model's own scaling and normalisation), each divided by the square
    root of its eigenvalue + eps, and their negatives. `batches`: (uint8 images, labels) over the train split."""
    rescale, normalize, whiten = (model.get_layer(n) for n in ("rescale", "normalize", "whiten"))
    images, seen = [], 0
    for features, _ in batches:
        images.append(np.asarray(normalize(rescale(ops.cast(features, "float32"))), dtype="float64"))
        seen += len(images[-1])
        if seen >= examples:
            break
    x = np.concatenate(images)[:examples]
    k = whiten.size
    h, w, c = x.shape[1:]
    # Every k x k patch flattened in the kernel's (row, column, channel) order.
    patches = np.stack(
        [x[:, i : h - k + 1 + i, j : w - k + 1 + j, :] for i in range(k) for j in range(k)], axis=3
    )
    patches = patches.reshape(-1, k * k * c)
    covariance = patches.T @ patches / len(patches)
    eigenvalues, eigenvectors = np.linalg.eigh(covariance)
    order = np.argsort(eigenvalues)[::-1]  # largest first, as airbench orders them
    scaled = eigenvectors[:, order] / np.sqrt(eigenvalues[order] + eps)
    kernel = np.concatenate([scaled, -scaled], axis=1).reshape(k, k, c, 2 * k * k * c)
    whiten.kernel.assign(kernel.astype("float32"))
    return {
        "whitening_examples": int(len(x)),
        "eigenvalue_range": [float(eigenvalues.min()), float(eigenvalues.max())],
    }


def _fit(model: keras.Model, model_cfg, batches, num_classes: int) -> dict:
    return fit_whitening(model, batches, int(model_cfg.whitening_examples))


@register("airbench", fit=_fit, normalized=True)
def _airbench(cfg, inputs) -> keras.Model:
    return build_airbench(cfg, inputs.num_classes, inputs.normalization)
