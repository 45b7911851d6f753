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
