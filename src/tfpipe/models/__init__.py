"""Keras model builders (image, text) and the SavedModel export on raw inputs.

Every model ends in a float32 softmax over `num_classes` (IMDb too: 2 classes), so losses,
metrics and the serving output are uniform across datasets and precision policies.
"""

from __future__ import annotations

from typing import Callable, Dict, Optional

import keras

from tfpipe.models import custom
from tfpipe.models.airbench import build_airbench, fit_whitening
from tfpipe.models.backbones import APPLICATIONS, build_backbone
from tfpipe.models.export import export_saved_model, load_class_names
from tfpipe.models.image import build_cnn, build_resnet
from tfpipe.models.nblr import build_nblr, fit_nblr
from tfpipe.models.text import (
    NUM_SPECIAL_TOKENS,
    build_embedding_gap,
    build_nbsvm,
    build_ngram_bag,
    fit_nb_ratios,
    make_text_vectorizer,
)

__all__ = [
    "MODEL_BUILDERS",
    "NUM_SPECIAL_TOKENS",
    "build_model",
    "fit_to_train_split",
    "export_saved_model",
    "load_class_names",
    "make_text_vectorizer",
]

MODEL_BUILDERS: Dict[str, Callable[..., keras.Model]] = {
    "cnn": lambda cfg, num_classes, vocab_size, norm: build_cnn(cfg, num_classes),
    "embedding_gap": lambda cfg, num_classes, vocab_size, norm: build_embedding_gap(
        cfg, num_classes, vocab_size
    ),
    "resnet": lambda cfg, num_classes, vocab_size, norm: build_resnet(cfg, num_classes, norm),
    "airbench": lambda cfg, num_classes, vocab_size, norm: build_airbench(cfg, num_classes, norm),
    "ngram_bag": lambda cfg, num_classes, vocab_size, norm: build_ngram_bag(cfg, num_classes, vocab_size),
    "nbsvm": lambda cfg, num_classes, vocab_size, norm: build_nbsvm(cfg, num_classes, vocab_size),
    "nblr": lambda cfg, num_classes, vocab_size, norm: build_nblr(cfg, num_classes, vocab_size),
    **dict.fromkeys(
        APPLICATIONS, lambda cfg, num_classes, vocab_size, norm: build_backbone(cfg, num_classes)
    ),
}


def fit_to_train_split(model: keras.Model, model_cfg, batches, num_classes: int) -> Optional[dict]:
    """Set the parameters a model computes from the train split before training (nbsvm: its naive Bayes
    ratios, nblr's too; airbench's whitening kernel); None for models that have none. `batches`: (model input, labels) over the whole split."""
    if model_cfg.name == "nblr":
        return fit_nblr(
            model, batches, num_classes, int(model_cfg.min_documents), int(model_cfg.max_features)
        )
    if model_cfg.name == "airbench":
        return fit_whitening(model, batches, int(model_cfg.whitening_examples))
    if model_cfg.name == "nbsvm":
        return fit_nb_ratios(model, batches, num_classes, min_documents=int(model_cfg.min_documents))
    return None


def build_model(
    cfg, num_classes: int, vocab_size: Optional[int] = None, normalization: Optional[dict] = None
) -> keras.Model:
    """cfg.model.name -> a keras.Model on the training input (uint8 images / int token ids),
    built under the current dtype policy and (if any) the current strategy scope. `normalization`: the
    manifest's per-channel {"mean", "std"} of the train split (resnet and airbench normalise with it)."""
    builder = custom.build if getattr(cfg.model, "builder", None) else MODEL_BUILDERS.get(cfg.model.name)
    if builder is None:
        raise ValueError(
            f"model.name={cfg.model.name!r}: unknown model; valid names: {', '.join(MODEL_BUILDERS)}"
        )
    if num_classes < 2:
        raise ValueError(f"num_classes={num_classes!r}: need at least 2 classes")
    return builder(cfg, int(num_classes), vocab_size, normalization)  # custom.build: a team's own model
