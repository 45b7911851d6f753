"""The classifier head every model ends in: Dense(relu) (unless dense_units=0) -> Dropout -> Dense -> float32 softmax."""

from __future__ import annotations

from keras import layers


def classifier_head(x, model_cfg, num_classes: int):
    """Probabilities over `num_classes`; the output layers stay float32 under any precision policy."""
    if model_cfg.dense_units:  # 0: straight to the logits (resnet, ngram_bag)
        x = layers.Dense(model_cfg.dense_units, activation="relu", name="dense")(x)
    if model_cfg.dropout > 0:
        x = layers.Dropout(model_cfg.dropout, name="dropout")(x)
    x = layers.Dense(num_classes, dtype="float32", name="logits")(x)
    return layers.Activation("softmax", dtype="float32", name="probabilities")(x)
