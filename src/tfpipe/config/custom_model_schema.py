"""The schema of a team's own model (`model.builder` set): the name is theirs, the network is their function's.

`conf/model/<name>.yaml` with `builder: package.module:function` (or `package.module.function`) and `params:` (the
function's keyword arguments) is the whole of it; `tfpipe.models.custom` calls the function. `fit:` optionally names
a second function that sets parameters counted from the train split before training."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from tfpipe.config.model_base import BUILT_IN, ModelConfig
from tfpipe.errors import ConfigError

_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}$")  # it names runs and the registered model
_TARGET = re.compile(r"[A-Za-z_][\w.]*[:.][A-Za-z_]\w*$")


@dataclass
class CustomModelConfig(ModelConfig):
    name: str = "custom"
    builder: str = ""  # package.module:function returning a keras.Model from the task's inputs to logits
    params: Dict[str, Any] = field(default_factory=dict)  # keyword arguments of the builder
    fit: Optional[str] = None  # package.module:function(model, batches, num_classes), run before training

    def check(self, cfg) -> None:
        if not _NAME.match(self.name) or self.name in BUILT_IN:
            raise ConfigError(
                f"model.name={self.name!r}: a model with a builder needs its own name: lower-case letters, digits "
                f"and _, at most 40, not one of the built-in models ({', '.join(BUILT_IN)})"
            )
        if not _TARGET.match(self.builder):
            raise ConfigError(
                f"model.builder={self.builder!r}: expected package.module:function (a function returning a "
                "keras.Model)"
            )
        if self.fit is not None and not _TARGET.match(self.fit):
            raise ConfigError(
                f"model.fit={self.fit!r}: expected package.module:function (called with the model, the train "
                "split's batches and the class count before training), or null"
            )
