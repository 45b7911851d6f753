"""A team's own model (`model.builder`): their function builds the network, tfpipe adds what every run needs.

The function is imported from its path and called with a `ModelInputs` (what the task knows) and `model.params`
as keyword arguments. It returns a keras.Model from the training input (`ModelInputs.input`: uint8 images
[height, width, channels], or int64 token ids [sequence_length]) to one logit per class. tfpipe appends the
float32 softmax that the metrics, the export and the serving signature expect; the precision policy and the
strategy scope are the caller's, as for the built-in models. `model.fit`, when set, names a function called with
(model, the train split's batches, the class count) before training, as nbsvm's ratios are counted."""

from __future__ import annotations

import logging
from typing import Optional

import keras

from tfpipe.errors import ConfigError, one_line
from tfpipe.models.registry import Fitter, ModelInputs

__all__ = ["ModelInputs", "build", "fitter"]  # ModelInputs: the registry's, named here for teams' builders

log = logging.getLogger(__name__)
NAME_UIDS = "object_name_uids"  # Keras' counters of automatic layer names (keras.src.utils.naming)


def _function(target: str, key: str = "model.builder"):
    """The function named by `package.module:function` (or a dot), located as train.hooks' classes are (Hydra)."""
    from hydra.errors import HydraException
    from hydra.utils import get_object

    try:
        return get_object(target.replace(":", "."))
    except (HydraException, ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(f"{key}={target}: cannot be imported ({one_line(exc, 200)})") from None


def check_arguments(model_cfg) -> None:
    """model.builder (and model.fit) importable, and model.params arguments the builder takes: what can refuse a
    team's model without building it (`check_build` then builds it, symbolically)."""
    import inspect

    target = model_cfg.builder
    function = _function(target)
    fitter(model_cfg)
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # no Python signature (a C function): the call itself says
        return
    try:
        signature.bind(None, **dict(model_cfg.params or {}))
    except TypeError as exc:  # said as the call says it: "build() got an unexpected keyword argument ..."
        said = f"{getattr(function, '__name__', 'the builder')}() {one_line(exc, 200)}"
        raise ConfigError(f"model.builder={target}: {said} (model.params are its arguments)") from None


def check_build(cfg, inputs: ModelInputs) -> None:
    """The team's model built once before the stage opens its run, for what only a build can refuse (an output of
    another width than the classes, not a keras.Model). Symbolic: under keras.StatelessScope with no variable
    initialised, so no weights are allocated and TensorFlow's runtime is not started (a strategy still configures
    its devices afterwards); Keras' layer-name counters are put back, so the training's build names its layers
    (its weights' paths, weights.sha256) as without this one. Anything else the builder raises here (a builder
    that makes a variable from an array cannot build symbolically) is left to the training's build, as before."""
    from keras.src.backend.common import global_state

    names = global_state.get_global_attribute(NAME_UIDS)
    kept = None if names is None else names.copy()
    try:
        with keras.StatelessScope(initialize_variables=False):
            build(cfg, inputs)
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - not a refusal: the real build decides
        log.debug("model.builder=%s: no symbolic build (%s)", cfg.model.builder, one_line(exc, 200))
    finally:
        global_state.set_global_attribute(NAME_UIDS, kept)


def build(cfg, inputs: ModelInputs) -> keras.Model:
    """The team's network on the training input, ending in tfpipe's float32 softmax over the classes."""
    target, num_classes = cfg.model.builder, inputs.num_classes
    try:
        network = _function(target)(inputs, **dict(cfg.model.params))
    except TypeError as exc:  # a model.params key the function does not take, or one it needs
        raise ConfigError(
            f"model.builder={target}: {one_line(exc, 200)} (model.params are its arguments)"
        ) from None
    if not isinstance(network, keras.Model):
        raise ConfigError(f"model.builder={target}: returned {type(network).__name__}, not a keras.Model")
    x = inputs.input()
    logits = network(x)
    if tuple(logits.shape[1:]) != (num_classes,):
        raise ConfigError(
            f"model.builder={target}: the model's output is {tuple(logits.shape[1:])} per example; "
            f"expected ({num_classes},): one logit per class"
        )
    probabilities = keras.layers.Activation("softmax", dtype="float32", name="probabilities")(logits)
    return keras.Model(x, probabilities, name=cfg.model.name)


def fitter(model_cfg) -> Optional[Fitter]:
    """The registry's fit for `model.fit` (None when unset): the team's function gets the model, the batches of
    the train split and the class count; what it returns (a dict, or None) is logged."""
    target = getattr(model_cfg, "fit", None)
    if not target:
        return None
    function = _function(target, "model.fit")

    def fit(model, _model_cfg, batches, num_classes: int) -> Optional[dict]:
        return function(model, batches, num_classes)

    return fit
