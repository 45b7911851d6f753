"""The task: what is trained on what. Input spec from the manifest, the model, the loss, the datasets and the
export; every image/text difference of the training code lives here (the loop, steps and runners know none)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional

import keras
import tensorflow as tf

from tfpipe import data, strategies, textnorm
from tfpipe.data.inputs import shard_by_file
from tfpipe.errors import DataError
from tfpipe.models import (
    build_model,
    export_saved_model,
    fit_to_train_split,
    make_text_vectorizer,
    model_entry,
)

log = logging.getLogger(__name__)

DatasetFn = Callable[[tf.distribute.InputContext], tf.data.Dataset]


@dataclass
class InputSpec:
    """What the input pipeline and the model need from the manifest."""

    modality: str
    num_classes: int
    class_names: List[str]
    num_train_examples: int
    train_shard_sizes: Optional[List[int]] = None
    image_shape: Optional[List[int]] = None
    vocab_tokens: Optional[List[str]] = None
    sequence_length: Optional[int] = None
    standardize: Optional[str] = None  # how the vocabulary's text was standardised (the manifest's)
    normalization: Optional[dict] = None  # images: the train split's per-channel mean/std (the manifest's)

    @property
    def vocab_size(self) -> Optional[int]:
        return None if self.vocab_tokens is None else len(self.vocab_tokens)

    def vectorizer(self):
        """The text model's TextVectorization; a text spec read from its manifest has all three settings."""
        if self.vocab_tokens is None or self.sequence_length is None or self.standardize is None:
            raise ValueError(
                f"a {self.modality} input spec has no vocabulary, sequence length or standardize"
            )
        return make_text_vectorizer(self.vocab_tokens, self.sequence_length, self.standardize)


def preflight(cfg, manifest: dict, prepared_dir: Path) -> None:
    """What can refuse a training, checked before the stage opens a run or clears a folder: the manifest against
    the config, and a team's builder against model.params, then built once symbolically (`custom.check_build`;
    not under the strategies that connect to a cluster as TensorFlow starts)."""
    spec = read_input_spec(cfg, manifest, prepared_dir)
    per_replica = int(cfg.train.batch_size_per_replica)
    if (
        spec.num_train_examples < per_replica
    ):  # fewer than one replica's batch: no strategy gives a full batch
        raise DataError(
            f"{prepared_dir}: train split gives no full batch of {per_replica} ({spec.num_train_examples} "
            "examples); lower train.batch_size_per_replica"
        )
    if getattr(cfg.model, "builder", None):
        from tfpipe.models import custom, model_inputs

        custom.check_arguments(cfg.model)
        strategy = strategies.spec(cfg.strategy.name)
        if strategy.joins_cluster:  # TensorFlow must start connected: the first build, in the run, says it
            return
        if strategy.splits_cpu:  # split the CPU first: a builder may start TensorFlow
            from tfpipe import distribute

            distribute.configure_devices(cfg.strategy)
        custom.check_build(cfg, model_inputs(cfg, spec.num_classes, spec.vocab_size, spec.normalization))


def read_input_spec(cfg, manifest: dict, prepared_dir: Path) -> InputSpec:
    """The manifest's facts, checked against the config (modality, image shape, text standardisation)."""
    modality = manifest.get("modality", cfg.dataset.modality)
    if modality != cfg.dataset.modality:
        raise DataError(
            f"{prepared_dir}: prepared data is {modality!r} but dataset {cfg.dataset.name!r} is "
            f"{cfg.dataset.modality!r}; run prepare for this dataset"
        )
    train = manifest["splits"]["train"]
    spec = InputSpec(
        modality=modality,
        num_classes=int(manifest["num_classes"]),
        class_names=[str(c) for c in manifest["class_names"]],
        num_train_examples=int(train["num_examples"]),
        train_shard_sizes=[int(s.get("num_examples", 0)) for s in train.get("shards", [])],
    )
    if modality == "image":
        spec.image_shape = _image_shape(cfg, manifest, prepared_dir)
        spec.normalization = manifest.get("normalization")
        if model_entry(cfg.model).normalized and not spec.normalization:
            raise DataError(
                f"{prepared_dir}: the manifest has no normalisation statistics (prepared by an older tfpipe), "
                f"which model {cfg.model.name} needs; run prepare again"
            )
    else:
        _read_text_spec(cfg, manifest, prepared_dir, spec)
    return spec


def _image_shape(cfg, manifest: dict, prepared_dir: Path) -> List[int]:
    shape = [int(d) for d in manifest["feature_spec"]["image"]["shape"]]
    wanted = [*cfg.dataset.image_size, cfg.dataset.channels]
    if shape != wanted:
        raise DataError(
            f"{prepared_dir}: prepared images are {shape} but the config wants {wanted} "
            f"(dataset.image_size, dataset.channels); run prepare again"
        )
    return shape


def _read_text_spec(cfg, manifest: dict, prepared_dir: Path, spec: InputSpec) -> None:
    spec.vocab_tokens = list(data.read_vocab(prepared_dir))
    if not spec.vocab_tokens:
        raise DataError(f"{prepared_dir}: empty vocabulary; run prepare again")
    spec.sequence_length = int(cfg.dataset.sequence_length)
    # Manifests written before dataset.standardize existed used Keras' default (strip_punctuation).
    spec.standardize = manifest.get("standardize") or textnorm.DEFAULT
    wanted = cfg.dataset.standardize or textnorm.DEFAULT
    if spec.standardize != wanted:
        raise DataError(
            f"{prepared_dir}: vocabulary was built with dataset.standardize={spec.standardize!r} but the "
            f"config wants {wanted!r}; run prepare again (or give this config its own data.output_dir)"
        )


def batches_per_pipeline(
    spec: InputSpec, num_pipelines: int, global_batch: int, shard_policy: str = "auto"
) -> int:
    """Full training batches the smallest input pipeline yields per epoch (mirrors make_dataset's sharding:
    whole files when there are at least as many files as pipelines, else every n-th record)."""
    n = max(int(num_pipelines), 1)
    per_pipeline_batch = max(global_batch // n, 1)
    sizes = spec.train_shard_sizes or []
    if n == 1 or not sizes or sum(sizes) != spec.num_train_examples:
        return spec.num_train_examples // global_batch
    if shard_by_file(len(sizes), n, shard_policy):
        smallest = min(sum(sizes[i::n]) for i in range(n))
    else:
        smallest = spec.num_train_examples // n
    return smallest // per_pipeline_batch


class Task:
    """Builds the model, the loss and the input pipelines of one config on one prepared directory."""

    def __init__(self, cfg, prepared_dir: Path, spec: InputSpec, global_batch: int):
        self.cfg = cfg
        self.prepared_dir = Path(prepared_dir)
        self.spec = spec
        self.global_batch = int(global_batch)

    @classmethod
    def from_prepared(cls, cfg, prepared_dir: Path, global_batch: int) -> "Task":
        manifest = data.load_manifest(prepared_dir)
        return cls(cfg, prepared_dir, read_input_spec(cfg, manifest, Path(prepared_dir)), global_batch)

    def build_model(self) -> keras.Model:
        return build_model(
            self.cfg,
            self.spec.num_classes,
            vocab_size=self.spec.vocab_size,
            normalization=self.spec.normalization,
        )

    def build_loss(self) -> keras.losses.Loss:
        return keras.losses.CategoricalCrossentropy(
            label_smoothing=self.cfg.train.label_smoothing, reduction=None
        )

    def fit_to_train_split(self, model: keras.Model) -> None:
        """Parameters counted from the train split (nbsvm's ratios): always recomputed (deterministic, so a
        resumed run and every worker get the same values) before a checkpoint restores the rest."""
        t0 = time.perf_counter()
        batches = self.dataset_fn("train", training=False)(tf.distribute.InputContext())
        fitted = fit_to_train_split(model, self.cfg.model, batches, self.spec.num_classes)
        if fitted is not None:
            log.info(
                "fitted %s to the train split in %.1f s: %s",
                self.cfg.model.name,
                time.perf_counter() - t0,
                fitted,
            )

    def _vectorizer(self):
        """Text: the TextVectorization layer the input pipeline turns texts into token ids with (once per
        pipeline, data.inputs._vectorised_once), built in that pipeline's own context; images: None."""
        return self.spec.vectorizer() if self.spec.modality == "text" else None

    def dataset_fn(self, split: str, training: bool) -> DatasetFn:
        """One pass over `split` per input context (validation; parameter_server workers repeat train)."""
        return _SplitFn(self, split, training)

    def stream_fn(self, start_epoch: int, batches_per_epoch: int, skip_batches: int) -> DatasetFn:
        """The remaining training epochs back to back, resumable at any batch (data.make_train_stream)."""
        return _StreamFn(self, start_epoch, batches_per_epoch, skip_batches)

    def export(self, model: keras.Model, directory: Path, weights_sha256: Optional[str] = None) -> None:
        spec = self.spec
        export_saved_model(
            model,
            directory,
            modality=spec.modality,
            image_shape=spec.image_shape,
            vectorizer=spec.vectorizer() if spec.modality == "text" else None,
            class_names=spec.class_names,
            weights_sha256=weights_sha256,
        )


@dataclass
class _SplitFn:
    task: Task
    split: str
    training: bool

    def __call__(self, input_context: tf.distribute.InputContext) -> tf.data.Dataset:
        tc = self.task.cfg.train
        # make_dataset takes the GLOBAL batch with an input_context and batches per replica.
        return data.make_dataset(
            self.task.prepared_dir,
            self.split,
            batch_size=self.task.global_batch,
            training=self.training,
            seed=tc.seed,
            shuffle_buffer=tc.shuffle_buffer,
            cache=tc.cache,
            input_context=input_context,
            shard_policy=tc.shard_policy if self.split == "train" else "auto",  # the policy is for train
            vectorize=self.task._vectorizer(),
        )


@dataclass
class _StreamFn:
    task: Task
    start_epoch: int
    batches_per_epoch: int
    skip_batches: int

    def __call__(self, input_context: tf.distribute.InputContext) -> tf.data.Dataset:
        tc = self.task.cfg.train
        return data.make_train_stream(
            self.task.prepared_dir,
            batch_size=self.task.global_batch,
            seed=tc.seed,
            start_epoch=self.start_epoch,
            epochs=tc.epochs,
            batches_per_epoch=self.batches_per_epoch,
            skip_batches=self.skip_batches,
            shuffle_buffer=tc.shuffle_buffer,
            cache=tc.cache,
            input_context=input_context,
            shard_policy=tc.shard_policy,
            vectorize=self.task._vectorizer(),
        )
