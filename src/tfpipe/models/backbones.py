"""keras.applications networks as image models: uint8 images in, the network's own input scaling (ImageNet's,
part of the pretrained weights) inside, global average pooling, then tfpipe's classifier head."""

from __future__ import annotations

import keras
from keras import layers

from tfpipe.models.head import classifier_head
from tfpipe.models.registry import register

# model.name -> the keras.applications class and the arguments that keep its preprocessing inside the model
APPLICATIONS = {
    "mobilenet_v3_small": ("MobileNetV3Small", {"include_preprocessing": True}),
    "efficientnet_b0": ("EfficientNetB0", {}),  # its Rescaling + Normalization are always inside
}


def build_backbone(cfg, num_classes: int) -> keras.Model:
    """cfg.model.name's network without its ImageNet classifier (`model.pretrained=imagenet`: Keras downloads
    the ImageNet weights; null: random), on [H, W, 3] uint8 images taken as 0..255 floats."""
    height, width = cfg.dataset.image_size
    class_name, extra = APPLICATIONS[cfg.model.name]
    network = getattr(keras.applications, class_name)(
        input_shape=(height, width, 3),
        include_top=False,
        weights=cfg.model.pretrained,
        pooling="avg",
        **extra,
    )
    inputs = keras.Input(shape=(height, width, 3), dtype="uint8", name="image")
    x = layers.Rescaling(1.0, name="to_float")(inputs)  # uint8 -> the policy's float, values kept 0..255
    x = network(x)
    outputs = classifier_head(x, cfg.model, num_classes)
    return keras.Model(inputs, outputs, name=cfg.model.name)


@register(*APPLICATIONS)
def _backbone(cfg, inputs) -> keras.Model:
    return build_backbone(cfg, inputs.num_classes)
