"""NBLR: an L2-regularised logistic regression over naive Bayes-scaled n-gram features.

The features are nbsvm's (tfpipe.models.text): the review's distinct unigrams and hashed n-grams, each
feature f carrying its fixed naive Bayes log-count ratios r[f, c] (counted from the train split by
`fit_nblr` before training, nbsvm's formula). Only the features kept at fit time have a row in the tables
(`FeatureIndex`), so the n-grams can be hashed into ~2^31 ids. Where NBSVM++ starts from the naive Bayes
solution and trains (w[f] + 0.4) / 10 for one epoch, NBLR learns one coefficient u[f] per feature from 0
with an L2 penalty on u (Wang & Manning 2012's NB features in a regularised logistic regression, as in
Mesnil et al. 2014's NBSVM baseline): logit c = sum over the review's features of u[f] r[f, c] + bias.
Same int token input as the other text models, so the raw-string serving signature is unchanged.
"""

from __future__ import annotations

import keras
from keras import layers

from tfpipe.models.registry import register
from tfpipe.models.text import (
    NB_SMOOTHING,
    NUM_SPECIAL_TOKENS,
    DistinctIds,
    class_feature_ids,
    nb_ratio_table,
    ngram_input,
)


class FeatureIndex(layers.Layer):
    """Feature ids [B, T] (unigrams and hashed n-grams) -> compact ids [B, T]: 1 + the position of the id in
    the sorted ids of the features kept at fit time (`keys`, int64 [max_features], set by `fit_nblr`; unused
    slots hold a sentinel above every id), 0 for padding and the features not kept. A binary search, so the
    n-grams can be hashed into ~2^31 ids (no collisions to speak of) without a table of that size, and the
    coefficient tables hold the kept features only."""

    def __init__(self, max_features: int, **kwargs):
        super().__init__(autocast=False, **kwargs)
        self.max_features = int(max_features)

    def build(self, input_shape):
        self.keys = self.add_weight(
            shape=(self.max_features,), initializer="zeros", dtype="int64", trainable=False, name="keys"
        )

    def call(self, ids):
        import tensorflow as tf

        ids = tf.cast(ids, tf.int64)
        flat = tf.reshape(ids, [1, -1])
        pos = tf.searchsorted(self.keys[None, :], flat, side="left", out_type=tf.int64)
        pos = tf.minimum(pos, self.max_features - 1)
        found = tf.logical_and(tf.equal(tf.gather(self.keys, pos), flat), tf.not_equal(flat, 0))
        return tf.reshape(tf.where(found, pos + 1, tf.zeros_like(pos)), tf.shape(ids))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "max_features": self.max_features}


class NBScaledLogits(layers.Layer):
    """Logits [B, C]: sum over the non-padding positions t of u[t] * r[t, c], plus a per-class bias.
    u [B, T, 1] is trained; r [B, T, C] holds the fixed naive Bayes log-count ratios."""

    def build(self, u_shape, r_shape=None, ids_shape=None):
        self.bias = self.add_weight(shape=(r_shape[-1],), initializer="zeros", name="bias")

    def call(self, u, r, ids):
        import tensorflow as tf

        mask = tf.cast(tf.not_equal(ids, 0), u.dtype)[:, :, None]
        return tf.reduce_sum(u * r * mask, axis=1) + self.bias

    def compute_output_shape(self, u_shape, r_shape=None, ids_shape=None):
        return (u_shape[0], r_shape[-1])


def build_nblr(cfg, num_classes: int, vocab_size: int) -> keras.Model:
    """NBLR over unigrams and hashed n-grams up to model.ngrams: the review's distinct features, each with a
    trained coefficient u (Embedding [kept features, 1], zeros, L2 penalty model.l2 on the whole table)
    times its fixed naive Bayes ratios r (Embedding [kept features, classes], not trainable), summed into
    logits and a float32 softmax. `fit_nblr` picks the kept features (in >= model.min_documents train
    reviews, at most model.max_features of them) and sets r."""
    inputs, ids, _ = ngram_input(cfg, vocab_size)
    ids = DistinctIds(name="distinct")(ids)
    ids = FeatureIndex(cfg.model.max_features, name="feature_index")(ids)
    rows = int(cfg.model.max_features) + 1  # row 0: padding and the features not kept
    u = layers.Embedding(
        rows,
        1,
        embeddings_initializer="zeros",
        embeddings_regularizer=keras.regularizers.L2(float(cfg.model.l2)) if cfg.model.l2 else None,
        dtype="float32",
        name="weights",
    )(ids)
    r = nb_ratio_table(rows, num_classes)(ids)
    logits = NBScaledLogits(dtype="float32", name="logits")(u, r, ids)
    outputs = layers.Activation("softmax", dtype="float32", name="probabilities")(logits)
    return keras.Model(inputs, outputs, name="nblr")


def fit_nblr(model: keras.Model, batches, num_classes: int, min_documents: int, max_features: int) -> dict:
    """Count the features of (token ids, labels) batches of the train split, keep those in >= `min_documents`
    documents (the `max_features` most frequent of them if more), store their sorted ids (layer
    "feature_index", compact ids 1..n) and set their naive Bayes log-count ratios (nbsvm's: smoothed, the
    norms over every feature seen). Deterministic. Returns counts for the log."""
    import numpy as np

    ids, counts, documents = _document_counts(model, batches, num_classes)
    totals = counts.sum(axis=0)
    kept = np.flatnonzero(totals >= max(int(min_documents), 1))
    if len(kept) > max_features:  # the most frequent ones (ties: lower id), back in id order
        kept = np.sort(kept[np.argsort(-totals[kept], kind="stable")[:max_features]])
    # p: this class's document counts, q: the other classes', both + smoothing, normalised over the seen
    p_norm = counts.sum(axis=1, keepdims=True) + NB_SMOOTHING * len(ids)
    q_norm = (totals.sum() - counts.sum(axis=1, keepdims=True)) + NB_SMOOTHING * len(ids)
    p = counts[:, kept] + NB_SMOOTHING
    q = totals[kept] - counts[:, kept] + NB_SMOOTHING
    keys = np.full(max_features, np.iinfo(np.int64).max, np.int64)  # sentinel: above every id
    keys[: len(kept)] = ids[kept]
    table = np.zeros((max_features + 1, num_classes), np.float32)
    table[1 : len(kept) + 1] = (np.log(p / p_norm) - np.log(q / q_norm)).T
    model.get_layer("feature_index").keys.assign(keys)
    model.get_layer("nb_ratios").embeddings.assign(table)
    return {"documents": documents, "features_seen": len(ids), "features_kept": len(kept)}


def _document_counts(model: keras.Model, batches, num_classes: int):
    """(sorted distinct feature ids seen, [classes, ids] float64 counts of each class's documents holding
    each, number of documents) over (token ids, labels) batches, from the model's "distinct" layer."""
    import numpy as np

    class_ids, documents = class_feature_ids(model, batches, num_classes)
    ids = np.unique(np.concatenate(class_ids))
    counts = np.zeros((num_classes, len(ids)))
    for c, values in enumerate(class_ids):
        found, n = np.unique(values, return_counts=True)
        counts[c, np.searchsorted(ids, found)] = n
    return ids, counts, documents


def _fit(model: keras.Model, model_cfg, batches, num_classes: int) -> dict:
    return fit_nblr(model, batches, num_classes, int(model_cfg.min_documents), int(model_cfg.max_features))


@register("nblr", fit=_fit)
def _nblr(cfg, inputs) -> keras.Model:
    return build_nblr(cfg, inputs.num_classes, inputs.vocab_size - NUM_SPECIAL_TOKENS)
