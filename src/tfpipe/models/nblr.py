"""NBLR: an L2-regularised logistic regression over naive Bayes-scaled n-gram features.

The features are nbsvm's (tfpipe.models.text): the review's distinct unigrams and hashed n-grams, each
feature f carrying its fixed naive Bayes log-count ratios r[f, c] (counted from the train split by
`fit_nb_ratios` before training, the same layer names as nbsvm). Where NBSVM++ starts from the naive Bayes
solution and trains (w[f] + 0.4) / 10 for one epoch, NBLR learns one coefficient u[f] per feature from 0
with an L2 penalty on u (Wang & Manning 2012's NB features in a regularised logistic regression, as in
Mesnil et al. 2014's NBSVM baseline): logit c = sum over the review's features of u[f] r[f, c] + bias.
Same int token input as the other text models, so the raw-string serving signature is unchanged.
"""

from __future__ import annotations

import keras
from keras import layers

from tfpipe.models.text import DistinctIds, _ngram_input, class_document_counts, nb_log_ratios


class FeatureIndex(layers.Layer):
    """Feature ids [B, T] (unigrams and hashed n-grams, `size` of them) -> compact ids [B, T] of the
    features kept at fit time (1..n; 0 for padding and the features not kept), through a fixed int32 table
    (set by `fit_nblr`). The coefficient tables then hold the kept features only, so an optimizer step
    touches ~200k rows instead of every hash bucket."""

    def __init__(self, size: int, **kwargs):
        super().__init__(autocast=False, **kwargs)
        self.size = int(size)

    def build(self, input_shape):
        self.index = self.add_weight(
            shape=(self.size,), initializer="zeros", dtype="int32", trainable=False, name="index"
        )

    def call(self, ids):
        import tensorflow as tf

        return tf.cast(tf.gather(self.index, ids), tf.int64)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "size": self.size}


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
    inputs, ids, table_size = _ngram_input(cfg, vocab_size)
    ids = DistinctIds(name="distinct")(ids)
    ids = FeatureIndex(table_size, name="feature_index")(ids)
    rows = int(cfg.model.max_features) + 1  # row 0: padding and the features not kept
    u = layers.Embedding(
        rows,
        1,
        embeddings_initializer="zeros",
        embeddings_regularizer=keras.regularizers.L2(float(cfg.model.l2)) if cfg.model.l2 else None,
        dtype="float32",
        name="weights",
    )(ids)
    r = layers.Embedding(
        rows,
        num_classes,
        embeddings_initializer="zeros",
        trainable=False,
        dtype="float32",
        name="nb_ratios",
    )(ids)
    logits = NBScaledLogits(dtype="float32", name="logits")(u, r, ids)
    outputs = layers.Activation("softmax", dtype="float32", name="probabilities")(logits)
    return keras.Model(inputs, outputs, name="nblr")


def fit_nblr(model: keras.Model, batches, num_classes: int, min_documents: int, max_features: int) -> dict:
    """Count the features of (token ids, labels) batches of the train split, keep those in >= `min_documents`
    documents (the `max_features` most frequent of them if more), give them compact ids 1..n in feature-id
    order (model layer "feature_index") and set their naive Bayes log-count ratios (nbsvm's, over every
    feature seen). Deterministic. Returns counts for the log."""
    import numpy as np

    index = model.get_layer("feature_index").index
    counts, documents = class_document_counts(model, batches, num_classes, int(index.shape[0]))
    ratios = nb_log_ratios(counts)
    totals = counts.sum(axis=0)
    kept = np.flatnonzero(totals >= max(int(min_documents), 1))
    if len(kept) > max_features:  # the most frequent ones (ties: lower id), back in id order
        kept = np.sort(kept[np.argsort(-totals[kept], kind="stable")[:max_features]])
    compact = np.zeros(index.shape[0], np.int32)
    compact[kept] = np.arange(1, len(kept) + 1, dtype=np.int32)
    table = np.zeros((max_features + 1, num_classes), np.float32)
    table[1 : len(kept) + 1] = ratios[:, kept].T
    index.assign(compact)
    model.get_layer("nb_ratios").embeddings.assign(table)
    return {"documents": documents, "features_seen": int((totals > 0).sum()), "features_kept": len(kept)}
