"""One door for every model: a name -> `Entry(build, fit)`, the built-in models' and a team's alike.

A model module registers its builders where it defines them (`@register("cnn")`); nothing else names a model.
`build(cfg, inputs)` gets the composed Config and a `ModelInputs` (what the task knows: modality, class count,
image shape or vocabulary and sequence length, the train split's normalisation statistics) and returns a
keras.Model on the training input ending in the float32 softmax. The optional `fit(model, model_cfg, batches,
num_classes)` sets what a model counts from the train split before training (nbsvm's and nblr's naive Bayes
ratios, airbench's whitening) and returns a short summary for the log. A config with `model.builder` is a
team's model, whatever its name: `tfpipe.models.model_entry` hands it to `tfpipe.models.custom`. What this
module does not know: which names config accepts (`tfpipe.choices`, TensorFlow-free, checked against this
registry by tests/test_config.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import keras

Builder = Callable[[Any, "ModelInputs"], keras.Model]
Fitter = Callable[[keras.Model, Any, Any, int], Optional[dict]]


@dataclass(frozen=True)
class ModelInputs:
    modality: str  # image | text
    num_classes: int
    image_shape: Optional[tuple] = None  # images: (height, width, channels) of uint8 pixels
    vocab_size: Optional[int] = None  # texts: token ids run 0..vocab_size-1 (0 pads, 1 is out-of-vocabulary)
    sequence_length: Optional[int] = None  # texts: ids per example
    normalization: Optional[dict] = None  # images: the train split's per-channel {"mean", "std"}, 0..1 scale

    def input(self) -> keras.KerasTensor:
        """A fresh keras.Input of the training input's shape and dtype."""
        if self.modality == "image":
            return keras.Input(shape=self.image_shape, dtype="uint8", name="image")
        return keras.Input(shape=(self.sequence_length,), dtype="int64", name="tokens")


@dataclass(frozen=True)
class Entry:
    build: Builder
    fit: Optional[Fitter] = None
    # builds on the manifest's normalisation statistics (prepare writes them for images)
    normalized: bool = False


ENTRIES: dict = {}  # model.name -> Entry, filled by the model modules as they are imported


def register(
    *names: str, fit: Optional[Fitter] = None, normalized: bool = False
) -> Callable[[Builder], Builder]:
    """Decorator: the builder (and its `fit`) under each of `names`; `normalized`: it needs ModelInputs.normalization."""

    def _register(build: Builder) -> Builder:
        for name in names:
            ENTRIES[name] = Entry(build, fit, normalized)
        return build

    return _register


def entry(name: str) -> Entry:
    """The entry registered under `name` (a team's model, with `model.builder`, is `tfpipe.models.custom`'s)."""
    if name not in ENTRIES:
        raise ValueError(f"model.name={name!r}: unknown model; valid names: {', '.join(ENTRIES)}")
    return ENTRIES[name]
