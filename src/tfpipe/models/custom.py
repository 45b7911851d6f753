"""A team's own model (`model.builder`): their function builds the network, tfpipe adds what every run needs.

The function is imported from its path and called with a `ModelInputs` (what the task knows) and `model.params`
as keyword arguments. It returns a keras.Model from the training input (`ModelInputs.input`: uint8 images
[height, width, channels], or int64 token ids [sequence_length]) to one logit per class. tfpipe appends the
float32 softmax that the metrics, the export and the serving signature expect; the precision policy and the
strategy scope are the caller's, as for the built-in models. It does not fit anything to the train split."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import keras

from tfpipe.errors import ConfigError, one_line


@dataclass(frozen=True)
class ModelInputs:
    modality: str  # image | text
    num_classes: int
    image_shape: Optional[tuple] = None  # images: (height, width, channels) of uint8 pixels
    vocab_size: Optional[int] = None  # texts: token ids run 0..vocab_size-1 (0 pads, 1 is out-of-vocabulary)
    sequence_length: Optional[int] = None  # texts: ids per example
    normalization: Optional[dict] = None  # images: the train split's per-channel {"mean", "std"} (0..255)

    def input(self) -> keras.KerasTensor:
        """A fresh keras.Input of the training input's shape and dtype."""
        if self.modality == "image":
            return keras.Input(shape=self.image_shape, dtype="uint8", name="image")
        return keras.Input(shape=(self.sequence_length,), dtype="int64", name="tokens")


def _function(target: str):
    """The builder named by `package.module:function` (or a dot), located as train.hooks' classes are (Hydra)."""
    from hydra.errors import HydraException
    from hydra.utils import get_object

    try:
        return get_object(target.replace(":", "."))
    except (HydraException, ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(f"model.builder={target}: cannot be imported ({one_line(exc, 200)})") from None


def build(cfg, num_classes: int, vocab_size: Optional[int], normalization: Optional[dict]) -> keras.Model:
    """The team's network on the training input, ending in tfpipe's float32 softmax over `num_classes`."""
    from tfpipe.models.text import NUM_SPECIAL_TOKENS

    target, image = cfg.model.builder, cfg.dataset.modality == "image"
    inputs = ModelInputs(
        modality=cfg.dataset.modality,
        num_classes=num_classes,
        image_shape=(*cfg.dataset.image_size, cfg.dataset.channels) if image else None,
        vocab_size=None if image else int(vocab_size) + NUM_SPECIAL_TOKENS,
        sequence_length=None if image else int(cfg.dataset.sequence_length),
        normalization=normalization,
    )
    try:
        network = _function(target)(inputs, **dict(cfg.model.params))
    except TypeError as exc:  # a model.params key the function does not take, or one it needs
        raise ConfigError(
            f"model.builder={target}: {one_line(exc, 200)} (model.params are its arguments)"
        ) from None
    if not isinstance(network, keras.Model):
        raise ConfigError(f"model.builder={target}: returned {type(network).__name__}, not a keras.Model")
    x = inputs.input()
    logits = network(x)
    if tuple(logits.shape[1:]) != (num_classes,):
        raise ConfigError(
            f"model.builder={target}: the model's output is {tuple(logits.shape[1:])} per example; "
            f"expected ({num_classes},): one logit per class"
        )
    probabilities = keras.layers.Activation("softmax", dtype="float32", name="probabilities")(logits)
    return keras.Model(x, probabilities, name=cfg.model.name)
