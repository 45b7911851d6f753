"""The typed config schema, and loading + validating it.

Every stage starts with `load_params()` (the DVC path: `params.yaml`) or `compose()` (the
Hydra path: `conf/` plus overrides, as `mlflow run` and tests use). Both return a validated
`Config` or raise `ConfigError` whose message is one line naming the key, the value and what
is allowed. Validation reads no data and builds no model, so a bad config fails in well
under a second.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, List, Optional

import yaml

from tfpipe.errors import ConfigError

CONF_DIR = "conf"
CONFIG_NAME = "config"
PARAMS_FILE = "params.yaml"

DATASETS = ("cifar10", "imdb")
MODALITIES = ("image", "text")
IMAGE_MODELS = ("cnn", "resnet")
TEXT_MODELS = ("embedding_gap", "ngram_bag", "nbsvm")
MODELS = IMAGE_MODELS + TEXT_MODELS
STRATEGIES = ("one_device", "auto", "mirrored", "central_storage", "multi_worker_mirrored", "parameter_server", "tpu")
MULTI_PROCESS_STRATEGIES = ("multi_worker_mirrored", "parameter_server")
COMMUNICATIONS = ("auto", "ring", "nccl")
LR_SCALINGS = ("none", "linear")
PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")
PRECISION_CHOICES = PRECISIONS + ("auto",)  # auto: resolved from the hardware at start (tfpipe.precision)
OPTIMIZERS = ("adam", "adamw", "sgd")
LR_SCHEDULES = ("constant", "cosine", "onecycle")
SOURCES = ("tfds", "directory")
ON_BAD_FILE = ("fail", "skip")
SHARD_POLICIES = ("auto", "file", "data")  # mirrors tfpipe.data.inputs.SHARD_POLICIES
# tracking.uri schemes MLflow's own stores understand (a plain folder path is allowed too)
TRACKING_SCHEMES = ("sqlite", "file", "http", "https", "databricks", "postgresql", "mysql", "mssql")
# a tf.distribute device string: [/job:J][/replica:R][/task:T]/[device:]TYPE[:INDEX]
DEVICE_RE = re.compile(
    r"^(?:/job:[A-Za-z0-9_-]+)?(?:/replica:\d+)?(?:/task:\d+)?/?(?:device:)?(?P<type>cpu|gpu|tpu)(?::(?P<index>\d+))?$",
    re.IGNORECASE,
)
# keys people type that the schema calls otherwise: unknown key -> the key to use (and why)
KEY_HINTS = {
    "train.batch_size": ("train.batch_size_per_replica", "the batch is set per replica; global = per replica x replicas"),
    "train.global_batch_size": (
        "train.batch_size_per_replica",
        "the batch is set per replica; global = per replica x replicas, so it always divides evenly",
    ),
    "train.lr": ("train.optimizer.learning_rate", None),
    "train.learning_rate": ("train.optimizer.learning_rate", None),
    "train.optimizer.lr": ("train.optimizer.learning_rate", None),
    "train.precision": ("precision.policy", None),
    "train.strategy": ("strategy.name", None),
    "precision.name": ("precision.policy", None),
    "data.batch_size": ("train.batch_size_per_replica", "the batch is set per replica"),
}


@dataclass
class DatasetConfig:
    name: str = "cifar10"
    modality: str = "image"
    tfds_name: str = "cifar10"
    image_size: Optional[List[int]] = None
    channels: Optional[int] = None
    max_tokens: Optional[int] = None
    sequence_length: Optional[int] = None
    standardize: Optional[str] = None  # text only: tfpipe.textnorm.STANDARDIZERS


@dataclass
class ModelConfig:
    name: str = "cnn"
    filters: Optional[List[int]] = None
    dense_units: int = 64
    dropout: float = 0.0
    embedding_dim: Optional[int] = None
    ngrams: Optional[int] = None  # ngram_bag: longest token n-gram (1: unigrams only)
    hash_buckets: Optional[int] = None  # ngram_bag, nbsvm: hashed ids for the n-grams longer than 1
    min_documents: Optional[int] = None  # nbsvm: features in fewer train documents get no weight
    augment: bool = False  # resnet: random flip + crop while training (inside the model)
    tta_flip: bool = False  # resnet: average predictions over the image and its mirror at inference


@dataclass
class DataConfig:
    source: str = "tfds"
    path: str = "data/raw"
    tfds_data_dir: Optional[str] = None
    train_split: str = "train"
    test_split: str = "test"
    validation_split: Optional[str] = None
    validation_fraction: float = 0.1
    max_examples_per_split: Optional[int] = None
    examples_per_shard: int = 10000
    on_bad_file: str = "fail"
    output_dir: str = "data/prepared"
    seed: int = 42


@dataclass
class StrategyConfig:
    name: str = "one_device"
    device: Optional[str] = "/cpu:0"
    devices: Optional[List[str]] = None  # mirrored/central_storage: explicit device list
    num_logical_cpus: int = 0  # >1: split the CPU into N logical devices (replicas) at process start
    communication: str = "auto"  # multi_worker_mirrored collectives: auto | ring | nccl
    num_workers: int = 2  # local launcher: worker processes (multi_worker_mirrored, parameter_server)
    num_ps: int = 1  # local launcher: parameter-server processes (parameter_server)
    min_shard_bytes: int = 262144  # parameter_server partitioner: smallest variable shard
    max_shards: int = 1  # parameter_server partitioner: 1 = no partitioning
    tpu: Optional[str] = None  # tpu: TPUClusterResolver name/address ('' or null: local TPU)
    max_restarts: int = 0  # local launcher: restarts of the whole job after a process dies (resumes from the checkpoint)
    stop_grace_seconds: float = 10.0  # local launcher: SIGTERM -> SIGKILL delay when stopping the other processes


@dataclass
class PrecisionConfig:
    policy: str = "float32"


@dataclass
class OptimizerConfig:
    name: str = "adam"
    learning_rate: float = 1e-3
    weight_decay: float = 0.0
    momentum: float = 0.9
    nesterov: bool = False  # sgd only


@dataclass
class LRScheduleConfig:
    name: str = "constant"
    warmup_epochs: float = 0.0


@dataclass
class TrainConfig:
    epochs: int = 3
    batch_size_per_replica: int = 64
    steps_per_epoch: Optional[int] = None
    seed: int = 42
    deterministic: bool = True
    shuffle_buffer: int = 10000
    cache: bool = True
    label_smoothing: float = 0.0
    checkpoint_every_steps: int = 500
    max_checkpoints_to_keep: int = 3
    log_every_steps: int = 50
    lr_scaling: str = "none"
    grad_accumulation_steps: int = 1
    steps_per_execution: int = 10  # optimizer steps per compiled call (fewer Python round trips)
    shard_policy: str = "auto"  # how workers split the train split: auto | file | data
    tensorboard: bool = True  # monitoring: TensorBoard summaries (tfpipe.monitoring)
    tensorboard_dir: str = "tensorboard"  # relative to models/<dataset>/ (absolute: as given)
    histogram_every_epochs: int = 1  # weight histograms every N epochs; 0: none
    profile_steps: Optional[str] = None  # 'FIRST-LAST' global steps to trace with the profiler
    log_device_placement: bool = False  # tf.debugging.set_log_device_placement while training
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    lr_schedule: LRScheduleConfig = field(default_factory=LRScheduleConfig)


@dataclass
class TrackingConfig:
    uri: Optional[str] = None
    experiment_name: str = "tfpipe"
    artifact_location: Optional[str] = "mlartifacts"
    log_model: bool = True
    run_file: str = "run.json"


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    data: DataConfig = field(default_factory=DataConfig)
    strategy: StrategyConfig = field(default_factory=StrategyConfig)
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def flat(self) -> dict:
        """Dotted keys -> values, e.g. {'train.optimizer.learning_rate': 0.001}."""
        return flatten(self.to_dict())


def flatten(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out


# ----------------------------------------------------------------------------- loading


def load_params(path: str | os.PathLike = PARAMS_FILE) -> Config:
    """Read and validate a composed config file (DVC's `params.yaml`)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found (run from the project root, or compose one from conf/)")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0]
        raise ConfigError(f"{path}: not valid YAML ({first})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of config sections, got {type(raw).__name__}")
    return from_dict(raw, origin=str(path))


def compose(overrides: list[str] | tuple[str, ...] = (), config_dir: str | os.PathLike = CONF_DIR) -> Config:
    """Compose `conf/` with Hydra overrides (the same grammar as `dvc exp run -S`), then validate."""
    return from_dict(compose_dict(overrides, config_dir), origin="conf/")


def compose_dict(overrides: list[str] | tuple[str, ...] = (), config_dir: str | os.PathLike = CONF_DIR) -> dict:
    """The resolved composition as plain containers, exactly as DVC dumps it into params.yaml."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    config_dir = Path(config_dir).resolve()
    if not config_dir.is_dir():
        raise ConfigError(f"{config_dir}: Hydra config directory not found")
    check_overrides(overrides, config_dir)
    try:
        with initialize_config_dir(str(config_dir), version_base=None):
            cfg = hydra_compose(config_name=CONFIG_NAME, overrides=list(overrides))
        OmegaConf.resolve(cfg)
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        raise _hydra_error(exc, overrides) from None
    return OmegaConf.to_container(cfg)


_OVERRIDE = re.compile(r"^(?P<prefix>~|\+\+|\+)?(?P<key>[^=~+][^=]*?)(?:@[^=]*)?(?:=(?P<value>.*))?$", re.S)


def check_overrides(overrides, config_dir: str | os.PathLike = CONF_DIR) -> None:
    """Refuse, before Hydra runs, what Hydra would report badly: a malformed override, an option that is not in
    its config group, a key the schema does not have (with a did-you-mean)."""
    config_dir = Path(config_dir)
    for override in overrides:
        match = _OVERRIDE.match(override)
        if match is None or (match["value"] is None and match["prefix"] != "~"):
            raise ConfigError(f"override {override!r}: expected KEY=VALUE (e.g. train.epochs=1), +KEY=VALUE or ~KEY")
        prefix, key, value = match["prefix"] or "", match["key"].strip(), match["value"]
        if key.startswith("hydra.") or key == "hydra":
            continue
        if "." not in key and (config_dir / key).is_dir():  # a config group: the option must exist
            if prefix == "~":
                continue
            options = sorted(p.stem for p in (config_dir / key).glob("*.yaml"))
            if value not in options:
                drop = f" (or ~{key} to drop it)" if key == "experiment" else ""
                hint = difflib.get_close_matches(value, options, n=1)
                did_you_mean = f" (did you mean '{hint[0]}'?)" if hint else ""
                raise ConfigError(
                    f"{key}={value!r}: no such option in config group '{key}'{did_you_mean}; allowed: {', '.join(options)}{drop}"
                )
            continue
        schema_key(key, value=value)


def schema_key(dotted: str, value: Any = None) -> Any:
    """The schema type at a dotted key, or ConfigError naming the unknown part (with a did-you-mean)."""
    tp: Any = Config
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        parent = ".".join(parts[:i])
        if not dataclasses.is_dataclass(tp):
            raise ConfigError(f"{dotted}: unknown config key; '{parent}' is a value, not a section")
        fields = [f.name for f in dataclasses.fields(tp)]
        if part not in fields:
            raise unknown_key(".".join(parts[: i + 1]), fields, value=value, typed=dotted)
        tp = _type_hints(tp)[part]
    return tp


def unknown_key(dotted: str, allowed: list, value: Any = None, typed: Optional[str] = None) -> ConfigError:
    """'<key>=<value>: unknown config key (did you mean ...?); allowed keys under <parent>: ...'

    `dotted` is the key up to the unknown part, `typed` the whole key as given (may go deeper)."""
    typed = typed or dotted
    rest = typed[len(dotted):]  # '.epochs' when 'trian.epochs' was typed
    parent, _, leaf = dotted.rpartition(".")
    prefix = f"{parent}." if parent else ""
    hint = KEY_HINTS.get(typed) or KEY_HINTS.get(dotted)
    if hint:
        suggestion, why = hint
        did_you_mean = f" (did you mean '{suggestion}'?{' ' + why if why else ''})"
    else:
        close = difflib.get_close_matches(leaf, allowed, n=1)
        did_you_mean = f" (did you mean '{prefix}{close[0]}{rest}'?)" if close else ""
    shown = f"{typed}={value}" if value not in (None, "") else typed
    return ConfigError(
        f"{shown}: unknown config key{did_you_mean}; allowed keys under '{parent or '<root>'}': {', '.join(allowed)}"
    )


def _hydra_error(exc: BaseException, overrides) -> ConfigError:
    """Hydra/OmegaConf composition errors -> one line naming the override."""
    text = _one_line(exc)
    match = re.search(r"Could not override '([^']+)'", text)
    if match:
        key = match.group(1)
        value = next((o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0].lstrip("+~") == key), "")
        group = key.split(".", 1)[0]
        return ConfigError(
            f"{key}={value}: this key is not set by the selected '{group}' config option; add it with "
            f"+{key}={value}, or pick a {group} option that has it"
        )
    text = re.sub(r"\s*full_key: \S+.*$", "", text)  # OmegaConf appends key/object details
    key = None
    for err in (exc, exc.__cause__, exc.__context__):
        key = key or getattr(err, "full_key", None)
    if key:
        value = next((o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0].lstrip("+~") == key), None)
        return ConfigError(f"{key}={value}: {text}" if value is not None else f"{key}: {text}")
    bad = getattr(exc, "override", None) or getattr(exc.__cause__, "override", None)
    interpolated = [o for o in overrides if "${" in o]
    if bad is None and "interpolation" in text.lower() and len(interpolated) == 1:
        return ConfigError(f"{interpolated[0].lstrip('+~')}: {text}")
    if bad is not None:
        return ConfigError(f"override {str(bad)!r}: {text}")
    return ConfigError(f"override {' '.join(overrides) or '(none)'}: {text}")


def compose_yaml(overrides: list[str] | tuple[str, ...] = (), config_dir: str | os.PathLike = CONF_DIR) -> str:
    """params.yaml text for these overrides (what `dvc exp run -S` writes)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(OmegaConf.create(compose_dict(overrides, config_dir)))


def from_dict(raw: dict, origin: str = "config") -> Config:
    """Build a Config from nested dicts, refusing unknown keys and wrong types, then validate."""
    cfg = _build(Config, raw, prefix="", origin=origin)
    validate(cfg)
    return cfg


def _build(cls, raw: Any, prefix: str, origin: str):
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{prefix.rstrip('.') or '<root>'}: expected a mapping, got {raw!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in raw:
        if key not in fields:
            shown = raw[key] if isinstance(raw[key], (str, int, float, bool)) else None
            raise unknown_key(f"{prefix}{key}", list(fields), value=shown)
    values = {}
    hints = _type_hints(cls)
    for name, f in fields.items():
        key = f"{prefix}{name}"
        tp = hints[name]
        if name not in raw:
            continue
        value = raw[name]
        if dataclasses.is_dataclass(tp):
            values[name] = _build(tp, value, key + ".", origin)
        else:
            values[name] = _coerce(key, value, tp)
    return cls(**values)


def _type_hints(cls) -> dict:
    import typing

    return typing.get_type_hints(cls)


def _coerce(key: str, value: Any, tp: Any) -> Any:
    import typing

    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union and type(None) in args:
        if value is None:
            return None
        inner = [a for a in args if a is not type(None)][0]
        return _coerce(key, value, inner)
    if value is None:
        raise ConfigError(f"{key}: must not be null; expected {_type_name(tp)}")
    if origin in (list, List):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}={value!r}: expected a list of {_type_name(args[0])}")
        return [_coerce(f"{key}[{i}]", v, args[0]) for i, v in enumerate(value)]
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}={value!r}: expected true or false")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{key}={value!r}: expected an integer")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"{key}={value!r}: expected a number")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{key}={value!r}: expected a string")
    return value


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def _one_line(text: str) -> str:
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


# ----------------------------------------------------------------------------- validation


def _choice(key: str, value: Any, allowed: tuple) -> None:
    if value not in allowed:
        hint = difflib.get_close_matches(str(value), allowed, n=1)
        did_you_mean = f" (did you mean '{hint[0]}'?)" if hint else ""
        raise ConfigError(f"{key}={value!r}: not allowed{did_you_mean}; allowed: {', '.join(allowed)}")


def _positive(key: str, value: Any, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if value is None or value <= 0:
        raise ConfigError(f"{key}={value!r}: must be > 0")


def _non_negative(key: str, value: float) -> None:
    if value < 0:
        raise ConfigError(f"{key}={value!r}: must be >= 0")


def _device(key: str, value: str) -> None:
    """A tf.distribute device string (whether the device exists is checked at stage start: tfpipe.preflight)."""
    if not DEVICE_RE.match(str(value).strip()):
        raise ConfigError(
            f"{key}={value!r}: not a device name; allowed: /cpu:N, /gpu:N, /tpu:N "
            "(or the long form /job:J/replica:R/task:T/device:GPU:N)"
        )


def _tracking_uri(key: str, uri: Optional[str]) -> None:
    """Refuse a tracking URI MLflow would choke on late (typo in the scheme, no host)."""
    if uri is None or not str(uri).strip():
        return
    uri = str(uri).strip()
    if uri.startswith("databricks") or "://" not in uri:
        if uri.startswith(("sqlite:", "http:", "https:")):  # scheme without '//'
            raise ConfigError(f"{key}={uri!r}: missing '//' after the scheme; e.g. sqlite:///mlflow.db, http://host:5000")
        return  # a folder path (file store), file:PATH or databricks[://profile]
    scheme = uri.split("://", 1)[0].lower()
    base = scheme.split("+", 1)[0]  # postgresql+psycopg2
    if base not in TRACKING_SCHEMES:
        hint = difflib.get_close_matches(base, TRACKING_SCHEMES, n=1)
        did_you_mean = f" (did you mean '{hint[0]}'?)" if hint else ""
        raise ConfigError(
            f"{key}={uri!r}: unknown scheme '{scheme}'{did_you_mean}; allowed: {', '.join(TRACKING_SCHEMES)} "
            "or a folder path"
        )
    if base in ("http", "https") and not uri.split("://", 1)[1].split("/", 1)[0]:
        raise ConfigError(f"{key}={uri!r}: no host; allowed: http(s)://HOST[:PORT]")


def validate(cfg: Config) -> None:
    """Semantic checks: allowed names, ranges and cross-field consistency."""
    ds, model, data, tr = cfg.dataset, cfg.model, cfg.data, cfg.train
    _choice("dataset.name", ds.name, DATASETS)
    _choice("dataset.modality", ds.modality, MODALITIES)
    if ds.modality == "image":
        if not ds.image_size or len(ds.image_size) != 2 or min(ds.image_size) <= 0:
            raise ConfigError(f"dataset.image_size={ds.image_size!r}: expected [height, width] of positive integers")
        if ds.channels not in (1, 3):
            raise ConfigError(f"dataset.channels={ds.channels!r}: allowed: 1, 3")
    else:
        _positive("dataset.max_tokens", ds.max_tokens)
        _positive("dataset.sequence_length", ds.sequence_length)
        from tfpipe.textnorm import STANDARDIZERS

        _choice("dataset.standardize", ds.standardize, STANDARDIZERS)

    _choice("model.name", model.name, MODELS)
    wanted = IMAGE_MODELS if ds.modality == "image" else TEXT_MODELS
    if model.name not in wanted:
        raise ConfigError(
            f"model.name={model.name!r}: is not a {ds.modality} model, but dataset {ds.name!r} is {ds.modality}; "
            f"allowed: {', '.join(wanted)}"
        )
    if model.name in IMAGE_MODELS and (not model.filters or min(model.filters) <= 0):
        raise ConfigError(f"model.filters={model.filters!r}: expected a non-empty list of positive integers")
    if model.name in TEXT_MODELS and model.name != "nbsvm":
        _positive("model.embedding_dim", model.embedding_dim)
    if model.name == "nbsvm":
        _positive("model.min_documents", model.min_documents)
    if model.name in ("ngram_bag", "nbsvm"):
        if model.ngrams is None or model.ngrams < 1:
            raise ConfigError(f"model.ngrams={model.ngrams!r}: must be >= 1")
        if model.ngrams > 1:
            _positive("model.hash_buckets", model.hash_buckets)
    if model.name in ("resnet", "ngram_bag", "nbsvm"):  # 0: no hidden dense layer in the head
        _non_negative("model.dense_units", model.dense_units)
    else:
        _positive("model.dense_units", model.dense_units)
    if not 0.0 <= model.dropout < 1.0:
        raise ConfigError(f"model.dropout={model.dropout!r}: must be in [0, 1)")

    _choice("data.source", data.source, SOURCES)
    if data.source == "tfds" and not ds.tfds_name:
        raise ConfigError("dataset.tfds_name: empty; the tfds source needs the TensorFlow Datasets name (e.g. cifar10)")
    _choice("data.on_bad_file", data.on_bad_file, ON_BAD_FILE)
    if data.source == "directory" and not data.path:
        raise ConfigError("data.path: empty; the directory source needs the folder holding the split folders")
    if not data.train_split or not data.test_split:
        raise ConfigError("data.train_split / data.test_split: must name a split")
    if data.validation_split is None and not 0.0 < data.validation_fraction < 1.0:
        raise ConfigError(f"data.validation_fraction={data.validation_fraction!r}: must be in (0, 1)")
    _positive("data.max_examples_per_split", data.max_examples_per_split, allow_none=True)
    _positive("data.examples_per_shard", data.examples_per_shard)
    if not data.output_dir:
        raise ConfigError("data.output_dir: empty; name the folder for the prepared TFRecords")

    _choice("strategy.name", cfg.strategy.name, STRATEGIES)
    st = cfg.strategy
    _choice("strategy.communication", st.communication, COMMUNICATIONS)
    _non_negative("strategy.num_logical_cpus", st.num_logical_cpus)
    _positive("strategy.num_workers", st.num_workers)
    _positive("strategy.min_shard_bytes", st.min_shard_bytes)
    _positive("strategy.max_shards", st.max_shards)
    if st.name == "parameter_server":
        _positive("strategy.num_ps", st.num_ps)
    _non_negative("strategy.max_restarts", st.max_restarts)
    _positive("strategy.stop_grace_seconds", st.stop_grace_seconds)
    if st.devices is not None and not st.devices:
        raise ConfigError("strategy.devices=[]: give at least one device, or null for all devices")
    if st.device is not None:
        _device("strategy.device", st.device)
    for i, device in enumerate(st.devices or []):
        _device(f"strategy.devices[{i}]", device)
    if st.devices and len(set(d.lower() for d in st.devices)) != len(st.devices):
        raise ConfigError(f"strategy.devices={st.devices!r}: lists a device twice; allowed: distinct devices")
    _choice("precision.policy", cfg.precision.policy, PRECISION_CHOICES)
    if st.name == "tpu" and cfg.precision.policy == "mixed_float16":
        raise ConfigError(
            "precision.policy='mixed_float16': TPUs compute in bfloat16, not float16 (strategy.name=tpu); "
            "allowed with tpu: mixed_bfloat16, float32"
        )

    _positive("train.epochs", tr.epochs)
    _positive("train.batch_size_per_replica", tr.batch_size_per_replica)
    _positive("train.steps_per_epoch", tr.steps_per_epoch, allow_none=True)
    _positive("train.shuffle_buffer", tr.shuffle_buffer)
    if not isinstance(tr.deterministic, bool):
        raise ConfigError(f"train.deterministic={tr.deterministic!r}: allowed: true, false")
    _positive("train.checkpoint_every_steps", tr.checkpoint_every_steps)
    _positive("train.max_checkpoints_to_keep", tr.max_checkpoints_to_keep)
    _positive("train.log_every_steps", tr.log_every_steps)
    _choice("train.lr_scaling", tr.lr_scaling, LR_SCALINGS)
    _positive("train.grad_accumulation_steps", tr.grad_accumulation_steps)
    _positive("train.steps_per_execution", tr.steps_per_execution)
    _choice("train.shard_policy", tr.shard_policy, SHARD_POLICIES)
    if not tr.tensorboard_dir:
        raise ConfigError("train.tensorboard_dir: empty; name the TensorBoard log folder (relative to models/<dataset>)")
    _non_negative("train.histogram_every_epochs", tr.histogram_every_epochs)
    from tfpipe.monitoring import parse_profile_steps

    parse_profile_steps(tr.profile_steps)  # 'FIRST-LAST', 1 <= FIRST <= LAST
    if tr.grad_accumulation_steps > 1 and st.name == "parameter_server":
        raise ConfigError(
            f"train.grad_accumulation_steps={tr.grad_accumulation_steps}: not supported with strategy.name="
            "parameter_server (asynchronous updates); allowed: 1"
        )
    if tr.steps_per_epoch is not None and tr.steps_per_epoch % tr.grad_accumulation_steps:
        raise ConfigError(
            f"train.steps_per_epoch={tr.steps_per_epoch}: must be a multiple of train.grad_accumulation_steps "
            f"({tr.grad_accumulation_steps})"
        )
    if not 0.0 <= tr.label_smoothing < 1.0:
        raise ConfigError(f"train.label_smoothing={tr.label_smoothing!r}: must be in [0, 1)")
    _choice("train.optimizer.name", tr.optimizer.name, OPTIMIZERS)
    _positive("train.optimizer.learning_rate", tr.optimizer.learning_rate)
    _non_negative("train.optimizer.weight_decay", tr.optimizer.weight_decay)
    _non_negative("train.optimizer.momentum", tr.optimizer.momentum)
    _choice("train.lr_schedule.name", tr.lr_schedule.name, LR_SCHEDULES)
    _non_negative("train.lr_schedule.warmup_epochs", tr.lr_schedule.warmup_epochs)
    if tr.lr_schedule.warmup_epochs > tr.epochs:
        raise ConfigError(
            f"train.lr_schedule.warmup_epochs={tr.lr_schedule.warmup_epochs!r}: must be <= train.epochs ({tr.epochs})"
        )

    _tracking_uri("tracking.uri", cfg.tracking.uri)
    if not cfg.tracking.experiment_name:
        raise ConfigError("tracking.experiment_name: empty; name the MLflow experiment")
    if not cfg.tracking.run_file:
        raise ConfigError("tracking.run_file: empty; name the file that hands the run id to evaluate")
