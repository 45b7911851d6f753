"""Image models. They take the training input as is: uint8 [H, W, C]; scaling lives in the model."""

from __future__ import annotations

import keras
from keras import layers

from tfpipe.models.head import classifier_head
from tfpipe.models.registry import register


def build_cnn(cfg, num_classes: int) -> keras.Model:
    """The seeds' CIFAR-10 CNN: per entry of model.filters a conv3x3+relu block (max-pooled,
    except the last), then Flatten, Dense(dense_units, relu), Dropout, Dense(num_classes) and
    a float32 softmax."""
    height, width = cfg.dataset.image_size
    channels = cfg.dataset.channels
    filters = list(cfg.model.filters)

    inputs = keras.Input(shape=(height, width, channels), dtype="uint8", name="image")
    x = layers.Rescaling(1.0 / 255.0, name="rescale")(inputs)
    for i, f in enumerate(filters):
        # 'valid' as in the TF tutorial; 'same' only when the map is already smaller than the kernel.
        padding = "valid" if min(x.shape[1], x.shape[2]) >= 3 else "same"
        x = layers.Conv2D(f, 3, padding=padding, activation="relu", name=f"conv{i}")(x)
        last = i == len(filters) - 1
        if not last and min(x.shape[1], x.shape[2]) >= 2:
            x = layers.MaxPooling2D(2, name=f"pool{i}")(x)
    x = layers.Flatten(name="flatten")(x)
    outputs = classifier_head(x, cfg.model, num_classes)
    return keras.Model(inputs, outputs, name="cnn")


# ----------------------------------------------------------------------------- the fast-CIFAR ResNet


class RandomFlipCrop(layers.Layer):
    """Training-only augmentation on uint8 images: a random horizontal flip (unless flip=False) and a random crop
    of the image reflect-padded by `pad` pixels (per example). Identity at inference, so serving is unchanged.
    alternate=True flips as airbench94 does: each image mirrored every other epoch, starting from a fixed per-image
    choice, here the parity of its pixel sum (the layer holds the epoch; `set_epoch` is called before each)."""

    def __init__(self, pad: int = 4, seed=None, flip: bool = True, alternate: bool = False, **kwargs):
        super().__init__(autocast=False, **kwargs)
        self.pad = int(pad)
        self.flip = bool(flip)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)
        self.alternate = bool(alternate)
        if self.alternate:
            self.epoch = self.add_weight(
                shape=(), dtype="int32", initializer="zeros", trainable=False, name="epoch"
            )

    def set_epoch(self, epoch: int) -> bool:
        if self.alternate:
            self.epoch.assign(epoch)
        return False  # no trainable variable changed

    def call(self, images, training=None):
        import tensorflow as tf

        if not training:
            return images
        if self.alternate:  # from the image as it came, before the crop
            parity = tf.reduce_sum(tf.cast(images, tf.int32), axis=[1, 2, 3]) + tf.cast(self.epoch, tf.int32)
            flip = tf.reshape(tf.math.floormod(parity, 2) == 1, (-1, 1, 1, 1))
        shape = tf.shape(images)
        batch, height, width = shape[0], shape[1], shape[2]
        p = self.pad
        if p > 0:
            padded = tf.pad(images, [[0, 0], [p, p], [p, p], [0, 0]], mode="REFLECT")
            oy = tf.cast(keras.random.randint((batch,), 0, 2 * p + 1, seed=self.seed_generator), tf.int32)
            ox = tf.cast(keras.random.randint((batch,), 0, 2 * p + 1, seed=self.seed_generator), tf.int32)
            rows = oy[:, None] + tf.range(height)[None, :]
            cols = ox[:, None] + tf.range(width)[None, :]
            images = tf.gather(tf.gather(padded, rows, axis=1, batch_dims=1), cols, axis=2, batch_dims=1)
        if not self.flip:
            return images
        if not self.alternate:
            flip = keras.random.uniform((batch, 1, 1, 1), seed=self.seed_generator) < 0.5
        return tf.where(flip, tf.reverse(images, axis=[2]), images)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = {**super().get_config(), "pad": self.pad, "seed": self.seed, "flip": self.flip}
        return {**config, "alternate": self.alternate}


class FlipTTAExpand(layers.Layer):
    """Test-time flip, part 1: at inference the batch is followed by its mirror images ([2B, ...])."""

    def __init__(self, **kwargs):
        super().__init__(autocast=False, **kwargs)

    def call(self, images, training=None):
        import tensorflow as tf

        if training:
            return images
        return tf.concat([images, tf.reverse(images, axis=[2])], axis=0)

    def compute_output_shape(self, input_shape):
        return (None, *input_shape[1:])


class FlipTTAMerge(layers.Layer):
    """Test-time flip, part 2: the mean of the probabilities of each image and its mirror ([B, K])."""

    def call(self, probabilities, training=None):
        import tensorflow as tf

        if training:
            return probabilities
        half = tf.shape(probabilities)[0] // 2
        return (probabilities[:half] + probabilities[half:]) * 0.5

    def compute_output_shape(self, input_shape):
        return (None, *input_shape[1:])


def _conv_bn(x, filters: int, name: str, pool: bool = False):
    x = layers.Conv2D(filters, 3, padding="same", use_bias=False, name=f"{name}_conv")(x)
    if pool:
        x = layers.MaxPooling2D(2, name=f"{name}_pool")(x)
    x = layers.BatchNormalization(momentum=0.9, epsilon=1e-5, name=f"{name}_bn")(x)
    return layers.Activation("relu", name=f"{name}_relu")(x)


def build_resnet(cfg, num_classes: int, normalization: dict) -> keras.Model:
    """A small residual network in the fast-CIFAR style (Page's ResNet-9, Jordan's airbench):
    stem conv3x3(filters[0]); per further entry of model.filters a block conv3x3 -> maxpool -> BN -> ReLU
    followed by a residual conv3x3 -> BN -> ReLU; global max pooling; the classifier head
    (model.dense_units=0: logits straight from the pooled features) with a float32 softmax.
    Preprocessing stays inside the model: uint8 in, scaling and normalisation by `normalization` (the
    train split's per-channel mean/std that prepare stored in the manifest);
    model.augment adds RandomFlipCrop (training only), model.tta_flip averages the prediction over
    the image and its mirror at inference (evaluation and the exported SavedModel)."""
    height, width = cfg.dataset.image_size
    channels = cfg.dataset.channels
    filters = list(cfg.model.filters)
    inputs = keras.Input(shape=(height, width, channels), dtype="uint8", name="image")
    x = inputs
    if cfg.model.augment:
        x = RandomFlipCrop(pad=4, seed=int(cfg.train.seed), name="augment")(x)
    tta = bool(cfg.model.tta_flip)
    if tta:
        x = FlipTTAExpand(name="tta_expand")(x)
    x = layers.Rescaling(1.0 / 255.0, name="rescale")(x)
    if not normalization:
        raise ValueError(
            "resnet: needs the train split's per-channel mean/std (the manifest's normalization)"
        )
    mean, std = list(normalization["mean"]), list(normalization["std"])
    if len(mean) != channels or len(std) != channels:
        raise ValueError(f"normalization: {len(mean)} channel means for {channels}-channel images")
    x = layers.Normalization(mean=mean, variance=[s * s for s in std], name="normalize")(x)
    x = _conv_bn(x, filters[0], "stem")
    for i, f in enumerate(filters[1:], start=1):
        x = _conv_bn(x, f, f"block{i}", pool=min(x.shape[1], x.shape[2]) >= 2)
        x = layers.Add(name=f"block{i}_add")([x, _conv_bn(x, f, f"block{i}_res")])
    x = layers.GlobalMaxPooling2D(name="pool")(x)
    # Max-pooled ReLU features are large: scaled down, the linear classifier's logits start small and
    # stay stable at high learning rates (airbench's 1/9 logit scale does the same).
    x = layers.Rescaling(0.125, name="feature_scale")(x)
    outputs = classifier_head(x, cfg.model, num_classes)
    if tta:
        outputs = FlipTTAMerge(dtype="float32", name="tta_merge")(outputs)
    return keras.Model(inputs, outputs, name="resnet")


@register("cnn")
def _cnn(cfg, inputs) -> keras.Model:
    return build_cnn(cfg, inputs.num_classes)


@register("resnet", normalized=True)
def _resnet(cfg, inputs) -> keras.Model:
    return build_resnet(cfg, inputs.num_classes, inputs.normalization)
