"""Keras model builders (image, text) and the SavedModel export on raw inputs.

Every model ends in a float32 softmax over `num_classes` (IMDb too: 2 classes), so losses,
metrics and the serving output are uniform across datasets and precision policies.
"""

from __future__ import annotations

from typing import Optional

import keras

from tfpipe.models import airbench, backbones, custom, image, nblr, text  # noqa: F401 - each registers its models
from tfpipe.models.export import export_saved_model, load_class_names
from tfpipe.models.registry import ENTRIES, Entry, ModelInputs, entry
from tfpipe.models.text import NUM_SPECIAL_TOKENS, make_text_vectorizer

__all__ = [
    "ENTRIES",
    "NUM_SPECIAL_TOKENS",
    "build_model",
    "fit_to_train_split",
    "export_saved_model",
    "load_class_names",
    "make_text_vectorizer",
    "model_entry",
    "model_inputs",
]


def model_inputs(
    cfg, num_classes: int, vocab_size: Optional[int] = None, normalization: Optional[dict] = None
) -> ModelInputs:
    """What the task knows, as every builder gets it. `vocab_size`: the tokens of vocab.txt (texts), to which
    the padding and out-of-vocabulary ids are added."""
    is_image = cfg.dataset.modality == "image"
    if not is_image and (vocab_size is None or vocab_size <= 0):
        raise ValueError(
            f"vocab_size={vocab_size!r}: the text model needs the vocabulary size (tokens in vocab.txt)"
        )
    return ModelInputs(
        modality=cfg.dataset.modality,
        num_classes=int(num_classes),
        image_shape=(*cfg.dataset.image_size, cfg.dataset.channels) if is_image else None,
        vocab_size=None if is_image or vocab_size is None else int(vocab_size) + NUM_SPECIAL_TOKENS,
        sequence_length=None if is_image else int(cfg.dataset.sequence_length),
        normalization=normalization,
    )


def model_entry(model_cfg) -> Entry:
    """The registry's entry for cfg.model: a team's builder (and fit) when `model.builder` is set, whatever the
    name; else the built-in registered under model.name."""
    if getattr(model_cfg, "builder", None):
        return Entry(custom.build, custom.fitter(model_cfg))
    return entry(model_cfg.name)


def build_model(
    cfg, num_classes: int, vocab_size: Optional[int] = None, normalization: Optional[dict] = None
) -> keras.Model:
    """The registry's model for cfg.model (tfpipe.models.registry) on the training input (uint8 images / int token
    ids), built under the current dtype policy and (if any) the current strategy scope. `normalization`: the
    manifest's per-channel {"mean", "std"} of the train split (resnet and airbench normalise with it)."""
    build = model_entry(cfg.model).build  # before the class count: an unknown name is the first thing to say
    if num_classes < 2:
        raise ValueError(f"num_classes={num_classes!r}: need at least 2 classes")
    return build(cfg, model_inputs(cfg, num_classes, vocab_size, normalization))


def fit_to_train_split(model: keras.Model, model_cfg, batches, num_classes: int) -> Optional[dict]:
    """The model's registered `fit` on the train split before training (nbsvm's and nblr's naive Bayes ratios,
    airbench's whitening kernel, a team's `model.fit`); None for models that have none. `batches`: (model input,
    labels) over the whole split."""
    fit = model_entry(model_cfg).fit
    return None if fit is None else fit(model, model_cfg, batches, num_classes)
