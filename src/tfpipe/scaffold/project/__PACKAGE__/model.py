"""The team's model: a function from what the task knows to a keras.Model that returns one logit per class.

tfpipe calls it with a `tfpipe.models.custom.ModelInputs` (modality, num_classes, image_shape or vocab_size and
sequence_length, the train split's normalization, and input(): a fresh keras.Input of the raw training input) and
conf/model/__MODEL__.yaml's `params` as keyword arguments. It appends the float32 softmax, builds under the precision
policy and the strategy's scope, and exports the model serving raw input."""

import keras


def build(inputs, width: int = 32, dropout: float = 0.0):
    x = inputs.input()
    if inputs.modality == "image":  # uint8 pixels [height, width, channels]
        h = keras.layers.Rescaling(1.0 / 255)(x)
        h = keras.layers.Conv2D(width, 3, activation="relu")(h)
        h = keras.layers.GlobalAveragePooling2D()(h)
    else:  # int64 token ids [sequence_length]: 0 pads
        h = keras.layers.Embedding(inputs.vocab_size, width, mask_zero=True)(x)
        h = keras.layers.GlobalAveragePooling1D()(h)
    h = keras.layers.Dropout(dropout)(h)
    return keras.Model(x, keras.layers.Dense(inputs.num_classes)(h))
