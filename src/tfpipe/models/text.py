"""Text models. They take int token ids [sequence_length]; tokenisation runs once per input pipeline before
training (tfpipe.data.inputs, the ids then read from memory) or inside the exported graph (serving), with the
layer from `make_text_vectorizer`."""

from __future__ import annotations

from typing import Sequence

import keras
from keras import layers

from tfpipe import textnorm
from tfpipe.models.head import classifier_head
from tfpipe.models.registry import register

NUM_SPECIAL_TOKENS = 2  # padding '' and OOV '[UNK]', prepended by TextVectorization


def make_text_vectorizer(
    vocab_tokens: Sequence[str], sequence_length: int, standardize: str = textnorm.DEFAULT
) -> layers.TextVectorization:
    """TextVectorization over vocab.txt's tokens (no special tokens in the file; the layer adds
    '' and '[UNK]', so its vocabulary size is len(vocab_tokens) + 2). `standardize` (tfpipe.textnorm)
    and whitespace split, as the manifest says the vocabulary was built."""
    return layers.TextVectorization(
        vocabulary=list(vocab_tokens),
        standardize=textnorm.standardizer(standardize),
        output_mode="int",
        output_sequence_length=int(sequence_length),
        dtype="string",
        name="vectorizer",
    )


def build_embedding_gap(cfg, num_classes: int, vocab_size: int) -> keras.Model:
    """The seeds' IMDb model: Embedding -> GlobalAveragePooling1D -> Dense(relu) -> Dropout ->
    Dense(num_classes) with a float32 softmax. `vocab_size` counts the file's tokens; two more
    ids are reserved for padding and OOV."""
    if not vocab_size or vocab_size <= 0:
        raise ValueError(
            f"vocab_size={vocab_size!r}: the text model needs the vocabulary size (tokens in vocab.txt)"
        )
    inputs = keras.Input(shape=(cfg.dataset.sequence_length,), dtype="int64", name="tokens")
    x = layers.Embedding(
        vocab_size + NUM_SPECIAL_TOKENS, cfg.model.embedding_dim, mask_zero=False, name="embedding"
    )(inputs)
    x = layers.GlobalAveragePooling1D(name="pool")(x)
    outputs = classifier_head(x, cfg.model, num_classes)
    return keras.Model(inputs, outputs, name="embedding_gap")


# ----------------------------------------------------------------------------- bag of hashed n-grams

_HASH_MULTIPLIER = 1_000_003
_HASH_MODULUS = 2_147_483_647  # 2^31 - 1: keeps the rolling hash inside int64 for any n


class HashedNgrams(layers.Layer):
    """int token ids [B, L] -> ids [B, L + (L-1) + ... ] of the unigrams followed by every n-gram
    (2 <= n <= `ngrams`) hashed into `buckets` ids after the unigram vocabulary (`base`). An n-gram
    touching padding (id 0) becomes 0, so padding stays padding. Runs in the graph: serving unchanged."""

    def __init__(self, base: int, ngrams: int, buckets: int, **kwargs):
        super().__init__(autocast=False, **kwargs)
        self.base, self.ngrams, self.buckets = int(base), int(ngrams), int(buckets or 1)

    def call(self, ids):
        import tensorflow as tf

        ids = tf.cast(ids, tf.int64)
        length = tf.shape(ids)[1]
        out = [ids]
        for n in range(2, self.ngrams + 1):
            span = length - n + 1
            h = ids[:, :span]
            valid = tf.not_equal(h, 0)
            for k in range(1, n):
                nxt = ids[:, k : k + span]
                h = (h * _HASH_MULTIPLIER + nxt) % _HASH_MODULUS
                valid = tf.logical_and(valid, tf.not_equal(nxt, 0))
            out.append(tf.where(valid, self.base + h % self.buckets, tf.zeros_like(h)))
        return tf.concat(out, axis=1)

    def compute_output_shape(self, input_shape):
        length = input_shape[1]
        total = None if length is None else sum(max(length - n + 1, 0) for n in range(1, self.ngrams + 1))
        return (input_shape[0], total)

    def get_config(self):
        return {**super().get_config(), "base": self.base, "ngrams": self.ngrams, "buckets": self.buckets}


class MaskedMean(layers.Layer):
    """Mean of the embeddings [B, T, D] over the positions whose id [B, T] is not padding (0)."""

    def call(self, embeddings, ids):
        import tensorflow as tf

        mask = tf.cast(tf.not_equal(ids, 0), embeddings.dtype)[:, :, None]
        total = tf.reduce_sum(embeddings * mask, axis=1)
        count = tf.maximum(tf.reduce_sum(mask, axis=1), tf.cast(1.0, embeddings.dtype))
        return total / count

    def compute_output_shape(self, embeddings_shape, ids_shape=None):
        return (embeddings_shape[0], embeddings_shape[2])


def ngram_input(cfg, vocab_size: int):
    """(token input [sequence_length], ids of its unigrams and hashed n-grams up to model.ngrams, table size):
    the input side shared by ngram_bag and nbsvm."""
    if not vocab_size or vocab_size <= 0:
        raise ValueError(
            f"vocab_size={vocab_size!r}: the text model needs the vocabulary size (tokens in vocab.txt)"
        )
    base = vocab_size + NUM_SPECIAL_TOKENS
    ngrams = int(cfg.model.ngrams)
    buckets = int(cfg.model.hash_buckets) if ngrams > 1 else 0
    inputs = keras.Input(shape=(cfg.dataset.sequence_length,), dtype="int64", name="tokens")
    ids = HashedNgrams(base, ngrams, buckets, name="ngrams")(inputs) if ngrams > 1 else inputs
    return inputs, ids, base + buckets


def build_ngram_bag(cfg, num_classes: int, vocab_size: int) -> keras.Model:
    """A fastText-style classifier (Joulin et al. 2016): the mean embedding of the review's unigrams
    and hashed n-grams up to model.ngrams (model.hash_buckets ids), dropout, the classifier head
    (model.dense_units=0: linear) and a float32 softmax. Takes the same int token ids as
    embedding_gap, so the input pipeline and the raw-string serving signature are unchanged."""
    inputs, ids, table_size = ngram_input(cfg, vocab_size)
    x = layers.Embedding(table_size, cfg.model.embedding_dim, name="embedding")(ids)
    x = MaskedMean(name="pool")(x, ids)
    outputs = classifier_head(x, cfg.model, num_classes)
    return keras.Model(inputs, outputs, name="ngram_bag")


# ----------------------------------------------------------------------------- NBSVM-style n-gram model

# NBSVM++ constants (Wang & Manning 2012, as in fast.ai's NBSVM++): the logit of class c sums, over the
# review's distinct n-grams f, (w_f + W_ADJ) * r[f, c] / R_ADJ. With w = 0 that is a scaled naive
# Bayes classifier; training w moves each feature's weight away from its naive Bayes value.
W_ADJ = 0.4
R_ADJ = 10.0
NB_SMOOTHING = 1.0  # additive (Laplace) smoothing of the per-class document frequencies


class DistinctIds(layers.Layer):
    """ids [B, T] -> ids [B, T] sorted per row with every repeat set to 0 (padding): a binarised bag
    of features, as NBSVM counts each n-gram once per document."""

    def __init__(self, **kwargs):
        super().__init__(autocast=False, **kwargs)

    def call(self, ids):
        import tensorflow as tf

        ids = tf.sort(tf.cast(ids, tf.int32), axis=1)  # ids < 2^31 (HashedNgrams' modulus)
        first = tf.concat([tf.ones_like(ids[:, :1], tf.bool), tf.not_equal(ids[:, 1:], ids[:, :-1])], axis=1)
        return tf.cast(tf.where(first, ids, tf.zeros_like(ids)), tf.int64)

    def compute_output_shape(self, input_shape):
        return input_shape


class NBLogits(layers.Layer):
    """Logits [B, C] of the NBSVM++ model: sum over the non-padding positions t of
    (w[t] + W_ADJ) * r[t, c] / R_ADJ, plus a per-class bias. w [B, T, 1] is trained; r [B, T, C] holds
    the fixed naive Bayes log-count ratios (fit_nb_ratios)."""

    def build(self, w_shape, r_shape=None, ids_shape=None):
        self.bias = self.add_weight(shape=(r_shape[-1],), initializer="zeros", name="bias")

    def call(self, w, r, ids):
        import tensorflow as tf

        mask = tf.cast(tf.not_equal(ids, 0), w.dtype)[:, :, None]
        return tf.reduce_sum((w + W_ADJ) * r * mask, axis=1) / R_ADJ + self.bias

    def compute_output_shape(self, w_shape, r_shape=None, ids_shape=None):
        return (w_shape[0], r_shape[-1])


def build_nbsvm(cfg, num_classes: int, vocab_size: int) -> keras.Model:
    """NBSVM++ over unigrams and hashed n-grams up to model.ngrams: the review's distinct features, each
    with a trained weight w (Embedding [features, 1]) scaling its fixed naive Bayes log-count ratios r
    (Embedding [features, classes], not trainable, set from the train split by `fit_nb_ratios` before
    training), summed into logits and a float32 softmax. Same int token input as the other text models."""
    inputs, ids, table_size = ngram_input(cfg, vocab_size)
    ids = DistinctIds(name="distinct")(ids)
    w = layers.Embedding(
        table_size,
        1,
        embeddings_initializer=keras.initializers.RandomUniform(-0.1, 0.1),
        dtype="float32",
        name="weights",
    )(ids)
    r = nb_ratio_table(table_size, num_classes)(ids)
    logits = NBLogits(dtype="float32", name="logits")(w, r, ids)
    outputs = layers.Activation("softmax", dtype="float32", name="probabilities")(logits)
    return keras.Model(inputs, outputs, name="nbsvm")


def nb_ratio_table(rows: int, num_classes: int):
    """The frozen table of naive Bayes log-count ratios (one row per feature; set before training)."""
    return layers.Embedding(
        rows, num_classes, embeddings_initializer="zeros", trainable=False, dtype="float32", name="nb_ratios"
    )


def fit_nb_ratios(model: keras.Model, batches, num_classes: int, min_documents: int = 1) -> dict:
    """Set the model's naive Bayes log-count ratios from (token ids, labels) batches of the train split:
    r[f, c] = log(p_c[f] / |p_c|) - log(q_c[f] / |q_c|), where p_c[f] counts the class-c documents holding
    feature f and q_c[f] the other classes' (both + NB_SMOOTHING; the norms run over the features seen).
    Features in fewer than `min_documents` documents, and unseen ones, get r = 0. Deterministic, so every worker of a
    multi-worker job sets the same values. Returns counts for the log."""
    table = model.get_layer("nb_ratios").embeddings
    counts, documents = class_document_counts(model, batches, num_classes, int(table.shape[0]))
    ratios = nb_log_ratios(counts)
    totals = counts.sum(axis=0)
    ratios[:, totals < min_documents] = 0.0  # rare features: noise the weights would only overfit
    table.assign(ratios.T.astype("float32"))
    return {
        "documents": documents,
        "features_seen": int((totals > 0).sum()),
        "features": int(counts.shape[1]),
    }


def class_feature_ids(model: keras.Model, batches, num_classes: int) -> tuple:
    """(per class: the feature ids of the model's "distinct" layer in each of its documents, concatenated,
    padding 0 left out; number of documents) over (token ids, labels) batches."""
    import numpy as np

    features = keras.Model(model.inputs, model.get_layer("distinct").output)
    per_class: list[list[np.ndarray]] = [[] for _ in range(num_classes)]
    documents = 0
    for tokens, labels in batches:
        ids = np.asarray(features(tokens, training=False))
        labels = np.asarray(labels)
        documents += len(labels)
        for c in range(num_classes):
            rows = ids[labels == c]
            per_class[c].append(rows[rows > 0])
    return [np.concatenate(c) if c else np.zeros(0, np.int64) for c in per_class], documents


def class_document_counts(model: keras.Model, batches, num_classes: int, size: int):
    """([classes, size] float64 counts of the documents of each class holding each feature id (< size) of
    the model's "distinct" layer (padding 0 not counted), number of documents) over (token ids, labels) batches."""
    import numpy as np

    per_class, documents = class_feature_ids(model, batches, num_classes)
    counts = np.stack([np.bincount(ids, minlength=size)[:size] for ids in per_class]).astype(np.float64)
    counts[:, 0] = 0.0  # padding is not a feature
    return counts, documents


def nb_log_ratios(counts):
    """[classes, features] naive Bayes log-count ratios of `counts` (class_document_counts), normalised over
    the features seen (not a hash table's empty buckets); 0 for unseen features."""
    import numpy as np

    totals = counts.sum(axis=0, keepdims=True)
    seen = totals[0] > 0
    p = counts[:, seen] + NB_SMOOTHING
    q = (totals[:, seen] - counts[:, seen]) + NB_SMOOTHING
    ratios = np.zeros_like(counts)
    ratios[:, seen] = np.log(p / p.sum(axis=1, keepdims=True)) - np.log(q / q.sum(axis=1, keepdims=True))
    return ratios


def _fit_nbsvm(model: keras.Model, model_cfg, batches, num_classes: int) -> dict:
    return fit_nb_ratios(model, batches, num_classes, min_documents=int(model_cfg.min_documents))


# The registry's inputs count the padding and out-of-vocabulary ids; these builders take vocab.txt's tokens.
@register("embedding_gap")
def _embedding_gap(cfg, inputs) -> keras.Model:
    return build_embedding_gap(cfg, inputs.num_classes, inputs.vocab_size - NUM_SPECIAL_TOKENS)


@register("ngram_bag")
def _ngram_bag(cfg, inputs) -> keras.Model:
    return build_ngram_bag(cfg, inputs.num_classes, inputs.vocab_size - NUM_SPECIAL_TOKENS)


@register("nbsvm", fit=_fit_nbsvm)
def _nbsvm(cfg, inputs) -> keras.Model:
    return build_nbsvm(cfg, inputs.num_classes, inputs.vocab_size - NUM_SPECIAL_TOKENS)
