"""Image models. They take the training input as is: uint8 [H, W, C]; scaling lives in the model."""

from __future__ import annotations

import keras
from keras import layers

from tfpipe.models.head import classifier_head


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
