"""The config schema: one dataclass per section, and one per model where models differ. Each knows its own
checks (`check(cfg)`: allowed names, ranges, cross-field rules), raising a one-line ConfigError that names
the key, the value and what is allowed. Defaults live here once; conf/ sets every value explicitly."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import List, Optional

from tfpipe import choices, strategies
from tfpipe.config import airbench_schema, backbone_schema, checks  # noqa: F401 - each registers its models
from tfpipe.config.checks import choice, device, launcher, non_negative, positive
from tfpipe.config.custom_model_schema import CustomModelConfig
from tfpipe.config.data_schema import DataConfig  # noqa: F401 - a section schema, re-exported
from tfpipe.config.model_base import BUILT_IN, ModelConfig, built_in, check_filters  # noqa: F401 - re-exported
from tfpipe.config.tracking_schema import TrackingConfig  # noqa: F401 - a section schema, re-exported
from tfpipe.errors import ConfigError


@dataclass
class DatasetConfig:
    name: str = "cifar10"
    modality: str = "image"
    tfds_name: Optional[str] = "cifar10"  # None: no TFDS builder (own data: data.source=directory)
    image_size: Optional[List[int]] = None
    channels: Optional[int] = None
    max_tokens: Optional[int] = None
    sequence_length: Optional[int] = None
    standardize: Optional[str] = None  # text only: choices.STANDARDIZERS

    def check(self, cfg) -> None:
        checks.dataset_name(self.name, self.tfds_name, cfg.data.source)
        choice("dataset.modality", self.modality, choices.MODALITIES)
        if self.modality == "image":
            size = self.image_size
            if not size or len(size) != 2 or min(size) <= 0:
                raise ConfigError(
                    f"dataset.image_size={size!r}: expected [height, width] of positive integers"
                )
            if self.channels not in (1, 3):
                raise ConfigError(f"dataset.channels={self.channels!r}: allowed: 1, 3")
        else:
            positive("dataset.max_tokens", self.max_tokens)
            positive("dataset.sequence_length", self.sequence_length)
            choice("dataset.standardize", self.standardize, choices.STANDARDIZERS)


@built_in("cnn", modality="image")
@dataclass
class CnnConfig(ModelConfig):
    name: str = "cnn"
    filters: List[int] = field(default_factory=lambda: [32, 64, 64])

    def check(self, cfg) -> None:
        super().check(cfg)
        check_filters(self.filters)


@built_in("resnet", modality="image", optional_dense=True)
@dataclass
class ResnetConfig(ModelConfig):
    name: str = "resnet"
    dense_units: int = 0
    filters: List[int] = field(default_factory=lambda: [32, 64, 128, 256])
    augment: bool = True  # random flip + crop while training (inside the model)
    tta_flip: bool = True  # average predictions over the image and its mirror at inference

    def check(self, cfg) -> None:
        super().check(cfg)
        check_filters(self.filters)


@built_in("embedding_gap", modality="text")
@dataclass
class EmbeddingGapConfig(ModelConfig):
    name: str = "embedding_gap"
    dense_units: int = 16
    embedding_dim: int = 16

    def check(self, cfg) -> None:
        super().check(cfg)
        positive("model.embedding_dim", self.embedding_dim)


def _ngrams(ngrams: int, hash_buckets: int) -> None:
    if ngrams is None or ngrams < 1:
        raise ConfigError(f"model.ngrams={ngrams!r}: must be >= 1")
    if ngrams > 1:
        positive("model.hash_buckets", hash_buckets)


@built_in("ngram_bag", modality="text", optional_dense=True)
@dataclass
class NgramBagConfig(ModelConfig):
    name: str = "ngram_bag"
    dense_units: int = 0
    embedding_dim: int = 32
    ngrams: int = 2  # longest token n-gram (1: unigrams only)
    hash_buckets: int = 1000000  # hashed ids for the n-grams longer than 1

    def check(self, cfg) -> None:
        super().check(cfg)
        positive("model.embedding_dim", self.embedding_dim)
        _ngrams(self.ngrams, self.hash_buckets)


@built_in("nbsvm", modality="text", optional_dense=True)
@dataclass
class NbsvmConfig(ModelConfig):
    name: str = "nbsvm"
    dense_units: int = 0
    ngrams: int = 3
    hash_buckets: int = 16000000
    min_documents: int = 7  # features in fewer train documents get no weight

    def check(self, cfg) -> None:
        super().check(cfg)
        positive("model.min_documents", self.min_documents)
        _ngrams(self.ngrams, self.hash_buckets)


@built_in("nblr", modality="text", optional_dense=True)
@dataclass
class NblrConfig(NbsvmConfig):
    name: str = "nblr"
    hash_buckets: int = 2000000000  # ~2^31 hashed n-gram ids: only the kept ones get a row (FeatureIndex)
    l2: float = 0.0004  # L2 penalty on the coefficients u (the whole table, every step)
    max_features: int = 500000  # rows of the coefficient tables: the most frequent kept features

    def check(self, cfg) -> None:
        super().check(cfg)
        non_negative("model.l2", self.l2)
        positive("model.max_features", self.max_features)
        if self.hash_buckets + cfg.dataset.max_tokens + 2 >= 2**31:  # ids are int32 in DistinctIds
            raise ConfigError(
                f"model.hash_buckets={self.hash_buckets!r}: with dataset.max_tokens the ids must stay below 2^31"
            )


CUSTOM_MODEL = "custom"  # the schema of every model given by model.builder, whatever its name
MODEL_SCHEMAS = {**BUILT_IN, CUSTOM_MODEL: CustomModelConfig}  # model.name -> schema


@dataclass
class StrategyConfig:
    name: str = strategies.DEFAULT
    device: Optional[str] = "/cpu:0"
    devices: Optional[List[str]] = None  # mirrored/central_storage: explicit device list
    num_logical_cpus: int = 0  # >1: split the CPU into N logical devices (replicas) at process start
    communication: str = "auto"  # multi_worker_mirrored collectives: auto | ring | nccl
    num_workers: int = 2  # local launcher: worker processes (multi_worker_mirrored, parameter_server)
    num_ps: int = 1  # local launcher: parameter-server processes (parameter_server)
    min_shard_bytes: int = 262144  # parameter_server partitioner: smallest variable shard
    max_shards: int = 1  # parameter_server partitioner: 1 = no partitioning
    tpu: Optional[str] = None  # tpu: TPUClusterResolver name/address ('' or null: local TPU)
    max_restarts: int = 0  # local launcher: restarts of the whole job after a process dies
    stop_grace_seconds: float = 10.0  # local launcher: SIGTERM -> SIGKILL delay when stopping the others
    launcher: str = "local"  # multi_worker_mirrored: local | ray (Ray Train, tfpipe.launch.ray)
    ray_address: Optional[str] = None  # launcher=ray: Ray's address (null: RAY_ADDRESS, else a local Ray)

    def check(self, cfg) -> None:
        choice("strategy.name", self.name, tuple(strategies.REGISTRY))
        choice("strategy.communication", self.communication, choices.COMMUNICATIONS)
        non_negative("strategy.num_logical_cpus", self.num_logical_cpus)
        for key in ("num_workers", "min_shard_bytes", "max_shards", "stop_grace_seconds"):
            positive(f"strategy.{key}", getattr(self, key))
        if strategies.spec(self.name).coordinated:
            positive("strategy.num_ps", self.num_ps)
        non_negative("strategy.max_restarts", self.max_restarts)
        launcher(self.launcher, self.name)
        if self.devices is not None and not self.devices:
            raise ConfigError("strategy.devices=[]: give at least one device, or null for all devices")
        if self.device is not None:
            device("strategy.device", self.device)
        for i, name in enumerate(self.devices or []):
            device(f"strategy.devices[{i}]", name)
        if self.devices and len(set(d.lower() for d in self.devices)) != len(self.devices):
            raise ConfigError(
                f"strategy.devices={self.devices!r}: lists a device twice; allowed: distinct devices"
            )


@dataclass
class PrecisionConfig:
    policy: str = "float32"

    def check(self, cfg) -> None:
        choice("precision.policy", self.policy, choices.PRECISION_CHOICES)
        name = cfg.strategy.name
        if strategies.spec(name).needs_tpu and self.policy == "mixed_float16":
            raise ConfigError(
                f"precision.policy='mixed_float16': TPUs compute in bfloat16, not float16 (strategy.name={name}); "
                f"allowed with {name}: mixed_bfloat16, float32"
            )


def fields_of(cls) -> list:
    return [f.name for f in dataclasses.fields(cls)]
