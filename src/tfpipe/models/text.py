"""Text models. They take int token ids [sequence_length]; tokenisation runs in tf.data (training)
or inside the exported graph (serving), with the layer from `make_text_vectorizer`."""

from __future__ import annotations

from typing import Sequence

import keras
from keras import layers

from tfpipe.models.head import classifier_head

NUM_SPECIAL_TOKENS = 2  # padding '' and OOV '[UNK]', prepended by TextVectorization


def make_text_vectorizer(vocab_tokens: Sequence[str], sequence_length: int) -> layers.TextVectorization:
    """TextVectorization over vocab.txt's tokens (no special tokens in the file; the layer adds
    '' and '[UNK]', so its vocabulary size is len(vocab_tokens) + 2). Default standardisation
    (lower_and_strip_punctuation) and whitespace split, as the manifest's vocabulary was built."""
    return layers.TextVectorization(
        vocabulary=list(vocab_tokens),
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
        raise ValueError(f"vocab_size={vocab_size!r}: the text model needs the vocabulary size (tokens in vocab.txt)")
    inputs = keras.Input(shape=(cfg.dataset.sequence_length,), dtype="int64", name="tokens")
    x = layers.Embedding(vocab_size + NUM_SPECIAL_TOKENS, cfg.model.embedding_dim, mask_zero=False, name="embedding")(inputs)
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
                nxt = ids[:, k:k + span]
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


def build_ngram_bag(cfg, num_classes: int, vocab_size: int) -> keras.Model:
    """A fastText-style classifier (Joulin et al. 2016): the mean embedding of the review's unigrams
    and hashed n-grams up to model.ngrams (model.hash_buckets ids), dropout, the classifier head
    (model.dense_units=0: linear) and a float32 softmax. Takes the same int token ids as
    embedding_gap, so the input pipeline and the raw-string serving signature are unchanged."""
    if not vocab_size or vocab_size <= 0:
        raise ValueError(f"vocab_size={vocab_size!r}: the text model needs the vocabulary size (tokens in vocab.txt)")
    base = vocab_size + NUM_SPECIAL_TOKENS
    ngrams = int(cfg.model.ngrams or 1)
    buckets = int(cfg.model.hash_buckets or 0) if ngrams > 1 else 0
    inputs = keras.Input(shape=(cfg.dataset.sequence_length,), dtype="int64", name="tokens")
    ids = HashedNgrams(base, ngrams, buckets, name="ngrams")(inputs) if ngrams > 1 else inputs
    x = layers.Embedding(base + buckets, cfg.model.embedding_dim, name="embedding")(ids)
    x = MaskedMean(name="pool")(x, ids)
    outputs = classifier_head(x, cfg.model, num_classes)
    return keras.Model(inputs, outputs, name="ngram_bag")
