"""The typed config: schema (structured configs held in Hydra's ConfigStore), loading and checks.

Every stage starts with `load_params()` (the DVC path: `params.yaml`), or with `overlay.load()` when given
overrides (params.yaml with the overrides on top); `compose()` is conf/ plus overrides (what `dvc exp run -S`
writes into params.yaml; tests use it). Each returns a checked `Config` or raises
`ConfigError` whose message is one line naming the key, the value and what is allowed. Checking reads no
data and builds no model, so a bad config fails in well under a second.
"""

from tfpipe.choices import (
    COMMUNICATIONS,
    DATASETS,
    LR_SCALINGS,
    LR_SCHEDULES,
    MODALITIES,
    ON_BAD_FILE,
    OPTIMIZERS,
    PRECISION_CHOICES,
    PRECISIONS,
    SHARD_POLICIES,
    SOURCES,
    TRACKING_SCHEMES,
)
from tfpipe.config.checks import DEVICE_RE
from tfpipe.config.compose import (
    CONF_DIR,
    CONFIG_NAME,
    PARAMS_FILE,
    check_overrides,
    compose,
    compose_dict,
    compose_yaml,
    load_params,
)
from tfpipe.config.keys import KEY_HINTS, schema_key, unknown_key
from tfpipe.config.load import Config, flatten, from_dict
from tfpipe.config.schema import (
    MODEL_SCHEMAS,
    CnnConfig,
    DataConfig,
    DatasetConfig,
    EmbeddingGapConfig,
    ModelConfig,
    NbsvmConfig,
    NgramBagConfig,
    PrecisionConfig,
    ResnetConfig,
    StrategyConfig,
    TrackingConfig,
)
from tfpipe.config.train_schema import LRScheduleConfig, OptimizerConfig, TrainConfig

__all__ = [
    "COMMUNICATIONS",
    "CONF_DIR",
    "CONFIG_NAME",
    "DATASETS",
    "DEVICE_RE",
    "KEY_HINTS",
    "LR_SCALINGS",
    "LR_SCHEDULES",
    "MODALITIES",
    "MODEL_SCHEMAS",
    "ON_BAD_FILE",
    "OPTIMIZERS",
    "PARAMS_FILE",
    "PRECISIONS",
    "PRECISION_CHOICES",
    "SHARD_POLICIES",
    "SOURCES",
    "TRACKING_SCHEMES",
    "CnnConfig",
    "Config",
    "DataConfig",
    "DatasetConfig",
    "EmbeddingGapConfig",
    "LRScheduleConfig",
    "ModelConfig",
    "NbsvmConfig",
    "NgramBagConfig",
    "OptimizerConfig",
    "PrecisionConfig",
    "ResnetConfig",
    "StrategyConfig",
    "TrackingConfig",
    "TrainConfig",
    "check_overrides",
    "compose",
    "compose_dict",
    "compose_yaml",
    "flatten",
    "from_dict",
    "load_params",
    "schema_key",
    "unknown_key",
]
