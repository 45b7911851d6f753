"""How text is standardised before whitespace splitting (dataset.standardize). prepare builds vocab.txt
with it and records it in the manifest; training and the exported serving graph vectorise with the
manifest's choice, so a model always sees text cut the way its vocabulary was."""

from __future__ import annotations

from tfpipe.choices import STANDARDIZERS  # noqa: E402,F401 - the names live in choices

DEFAULT = "strip_punctuation"

# Marks that become tokens of their own under split_punctuation (sentiment cues: "!", "?", quotes...).
_PUNCTUATION = r"""([!"#$%&()*+,\-./:;<=>?@\[\\\]^_`{|}~])"""


def split_punctuation(text):
    """Lower-case, drop HTML line breaks (IMDb's `<br />`) and put spaces around punctuation marks, so
    "great!" is two tokens, "great" and "!" (the apostrophe stays: "don't" is one token)."""
    import tensorflow as tf

    text = tf.strings.lower(text)
    text = tf.strings.regex_replace(text, r"<br\s*/?>", " ")
    return tf.strings.regex_replace(text, _PUNCTUATION, r" \1 ")


def standardizer(name: str):
    """dataset.standardize -> the `standardize` argument of keras.layers.TextVectorization."""
    if name == "strip_punctuation":
        return "lower_and_strip_punctuation"  # Keras' default: lower-case, remove punctuation marks
    if name == "split_punctuation":
        return split_punctuation
    raise ValueError(f"dataset.standardize={name!r}: expected one of {', '.join(STANDARDIZERS)}")
