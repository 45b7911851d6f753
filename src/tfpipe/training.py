"""One custom training loop for every tf.distribute strategy.

`train(cfg, prepared_dir=..., output_dir=...)` seeds, applies the precision policy, builds the
strategy, the input pipelines (`tfpipe.data.make_dataset` through
`strategy.distribute_datasets_from_function`), the model and optimizer under `strategy.scope()`,
then runs `Trainer`: a train step and an eval step, each a `tf.function` built once around
`strategy.run`, with the loss averaged over the GLOBAL batch (`tf.nn.compute_average_loss`), so
gradients summed across replicas by the optimizer are correct under any number of replicas. The
train function runs `train.steps_per_execution` steps per call, reading the batches inside the graph;
calls end on every logging and checkpoint step, so the setting changes neither results nor logs.
Parameters a model counts from the train split (`nbsvm`'s ratios) are set before training starts.
Metrics are Keras metrics created under the scope (sync-on-read sums) and are only pulled to
Python every `log_every_steps` steps and at epoch ends.

Checkpoints (`tf.train.Checkpoint` of model, optimizer, step, epoch, step-in-epoch) are written
every `checkpoint_every_steps` steps and at every epoch end; a later call with the same
`output_dir` resumes from the latest one: finished epochs are not rerun, and a run interrupted
mid-epoch skips the batches of that epoch it had already trained on. Epoch e is shuffled with the
seed pair (seed, e) (`data.make_train_stream`) and the checkpoint holds the RNG state of dropout and
augmentation, so with op determinism a resumed run is bit-identical with an uninterrupted one.
Epoch history is kept in `checkpoints/history.json` so it survives resumes.

Training never imports mlflow: metrics go to an optional `MetricsSink`.

Strategies: the strategy comes from `tfpipe.distribute.build_strategy` (one_device, auto, mirrored,
central_storage, multi_worker_mirrored, parameter_server, tpu). The same replica step runs under all of
them: synchronous strategies iterate a distributed dataset; parameter_server schedules the step on the
workers through a `ClusterCoordinator` (`Trainer.run_coordinated_epoch`), each worker reading its shard
repeated, and evaluates on the chief. Every input pipeline reads exactly `_batches_per_pipeline` batches
per epoch, so no worker runs out early. `train.grad_accumulation_steps=N` sums gradients over N
micro-batches per optimizer step (loss averaged over global batch x N); `train.lr_scaling=linear`
multiplies the peak learning rate by the replica count. Non-chief workers save checkpoints and the
export into a scratch folder (`_is_chief`), as multi-worker saving requires every worker to take part.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Protocol, runtime_checkable

import keras
import tensorflow as tf

from tfpipe import distribute, interrupts, precision
from tfpipe.errors import DataError, UserError
from tfpipe.models import build_model, export_saved_model, fit_to_train_split, make_text_vectorizer

log = logging.getLogger(__name__)

CHECKPOINTS = "checkpoints"
SAVED_MODEL = "saved_model"
HISTORY_FILE = "history.json"

STEP_METRICS = ("train_loss", "train_accuracy", "learning_rate", "examples_per_sec")
EPOCH_METRICS = (
    "epoch_train_loss",
    "epoch_train_accuracy",
    "val_loss",
    "val_accuracy",
    "epoch_seconds",
    "epoch_examples_per_sec",
)


@runtime_checkable
class MetricsSink(Protocol):
    def log_metrics(self, metrics: dict[str, float], step: int) -> None: ...


@dataclass
class TrainResult:
    history: List[dict]  # one dict per finished epoch (all runs of this output_dir), with 'epoch' (0-based)
    final_metrics: Dict[str, float]  # train_loss, train_accuracy, val_loss, val_accuracy of the last epoch
    saved_model_dir: Path
    checkpoint_dir: Path
    strategy: Dict[str, Any]  # distribute.describe_strategy()
    num_params: int
    global_batch_size: int
    steps: int  # optimizer steps done in total (including earlier runs that were resumed)
    train_seconds: float  # wall time of the epochs run by this call (training + validation)
    precision: str = "float32"
    epochs_run: int = 0  # epochs trained by this call
    initial_epoch: int = 0  # epoch this call started at (> 0 when resumed)
    resumed: bool = False
    resumed_at_step: int = 0  # the checkpoint's step this call started from (0: fresh)
    weights_sha256: Optional[str] = None  # determinism.weights_sha256 of the trained model (bit-identity check)
    determinism: Dict[str, Any] = field(default_factory=dict)  # determinism.setup() settings in force


# ----------------------------------------------------------------------------- building blocks


class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up from ~0 to `peak` over `warmup_steps`, then constant, cosine decay to 0 or
    (onecycle) linear decay to 0 at `total_steps`."""

    def __init__(self, peak: float, total_steps: int, warmup_steps: int = 0, decay: str = "constant"):
        if decay not in ("constant", "cosine", "onecycle"):
            raise ValueError(f"decay={decay!r}: expected 'constant', 'cosine' or 'onecycle'")
        self.peak = float(peak)
        self.total_steps = int(max(total_steps, 1))
        self.warmup_steps = int(max(warmup_steps, 0))
        self.decay = decay

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        peak = tf.constant(self.peak, tf.float32)
        if self.decay == "cosine":
            span = float(max(self.total_steps - self.warmup_steps, 1))
            progress = tf.clip_by_value((step - self.warmup_steps) / span, 0.0, 1.0)
            after = peak * 0.5 * (1.0 + tf.cos(math.pi * progress))
        elif self.decay == "onecycle":  # the triangle of fast-CIFAR training (Smith; Page's ResNet-9)
            span = float(max(self.total_steps - self.warmup_steps, 1))
            progress = tf.clip_by_value((step - self.warmup_steps) / span, 0.0, 1.0)
            after = peak * (1.0 - progress)
        else:
            after = peak
        if self.warmup_steps == 0:
            return after
        warm = peak * (step + 1.0) / float(self.warmup_steps)
        return tf.where(step < self.warmup_steps, warm, after)

    def get_config(self):
        return {
            "peak": self.peak,
            "total_steps": self.total_steps,
            "warmup_steps": self.warmup_steps,
            "decay": self.decay,
        }


def lr_scale(train_cfg, replicas: int) -> float:
    """train.lr_scaling: none -> 1; linear -> the number of replicas (Goyal et al. 2017, with warm-up)."""
    return float(max(int(replicas), 1)) if getattr(train_cfg, "lr_scaling", "none") == "linear" else 1.0


def make_lr_schedule(train_cfg, steps_per_epoch: int, scale: float = 1.0) -> WarmupSchedule:
    total = max(int(steps_per_epoch) * int(train_cfg.epochs), 1)
    warmup = int(round(train_cfg.lr_schedule.warmup_epochs * steps_per_epoch))
    peak = train_cfg.optimizer.learning_rate * scale
    return WarmupSchedule(peak, total, min(warmup, total), train_cfg.lr_schedule.name)


def make_optimizer(train_cfg, learning_rate, policy: str = "float32") -> keras.optimizers.Optimizer:
    """adam | adamw | sgd(momentum), decoupled weight decay when > 0; wrapped in a
    LossScaleOptimizer for mixed_float16. Create it under strategy.scope()."""
    opt = train_cfg.optimizer
    wd = opt.weight_decay or None
    if opt.name == "adam":
        optimizer = keras.optimizers.Adam(learning_rate=learning_rate, weight_decay=wd)
    elif opt.name == "adamw":
        optimizer = keras.optimizers.AdamW(learning_rate=learning_rate, weight_decay=opt.weight_decay)
    elif opt.name == "sgd":
        optimizer = keras.optimizers.SGD(learning_rate=learning_rate, momentum=opt.momentum, weight_decay=wd,
                                         nesterov=bool(getattr(opt, "nesterov", False)))
    else:
        raise ValueError(f"train.optimizer.name={opt.name!r}: valid names: adam, adamw, sgd")
    if precision.needs_loss_scaling(policy):
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer


def _is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this task writes checkpoints/exports to the real output dir (always, locally)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    task_type = getattr(resolver, "task_type", None) if resolver is not None else None
    if task_type in (None, "chief"):
        return True
    if task_type == "worker":
        jobs = resolver.cluster_spec().jobs
        return "chief" not in jobs and resolver.task_id == 0
    return False


@dataclass
class _Inputs:
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

    @property
    def vocab_size(self) -> Optional[int]:
        return None if self.vocab_tokens is None else len(self.vocab_tokens)

    def vectorizer(self):
        return make_text_vectorizer(self.vocab_tokens, self.sequence_length, self.standardize)


def _read_inputs(cfg, manifest: dict, prepared_dir: Path) -> _Inputs:
    modality = manifest.get("modality", cfg.dataset.modality)
    if modality != cfg.dataset.modality:
        raise DataError(
            f"{prepared_dir}: prepared data is {modality!r} but dataset {cfg.dataset.name!r} is "
            f"{cfg.dataset.modality!r}; run prepare for this dataset"
        )
    inputs = _Inputs(
        modality=modality,
        num_classes=int(manifest["num_classes"]),
        class_names=[str(c) for c in manifest["class_names"]],
        num_train_examples=int(manifest["splits"]["train"]["num_examples"]),
        train_shard_sizes=[int(s.get("num_examples", 0)) for s in manifest["splits"]["train"].get("shards", [])],
    )
    if modality == "image":
        shape = [int(d) for d in manifest["feature_spec"]["image"]["shape"]]
        wanted = [*cfg.dataset.image_size, cfg.dataset.channels]
        if shape != wanted:
            raise DataError(
                f"{prepared_dir}: prepared images are {shape} but the config wants {wanted} "
                f"(dataset.image_size, dataset.channels); run prepare again"
            )
        inputs.image_shape = shape
    else:
        from tfpipe import data

        inputs.vocab_tokens = list(data.read_vocab(prepared_dir))
        if not inputs.vocab_tokens:
            raise DataError(f"{prepared_dir}: empty vocabulary; run prepare again")
        inputs.sequence_length = int(cfg.dataset.sequence_length)
        # Manifests written before dataset.standardize existed used Keras' default (strip_punctuation).
        from tfpipe import textnorm

        inputs.standardize = manifest.get("standardize") or textnorm.DEFAULT
        wanted = getattr(cfg.dataset, "standardize", None) or textnorm.DEFAULT
        if inputs.standardize != wanted:
            raise DataError(
                f"{prepared_dir}: vocabulary was built with dataset.standardize={inputs.standardize!r} but the "
                f"config wants {wanted!r}; run prepare again (or give this config its own data.output_dir)"
            )
    return inputs


# ----------------------------------------------------------------------------- the loop


DatasetFn = Callable[[tf.distribute.InputContext], tf.data.Dataset]


class Trainer:
    """Model, optimizer, metrics, checkpoint and the compiled step functions for one strategy.

    Steps take elements of a distributed dataset of (model input, int labels) per-replica batches
    (`strategy.distribute_datasets_from_function`); `build_steps` compiles them once per spec.
    """

    def __init__(self, cfg, strategy: tf.distribute.Strategy, inputs: _Inputs, *, policy: str,
                 steps_per_epoch: int):
        self.cfg = cfg
        self.strategy = strategy
        self.inputs = inputs
        self.policy = policy
        self.num_classes = inputs.num_classes
        self.global_batch_size = cfg.train.batch_size_per_replica * strategy.num_replicas_in_sync
        self.accumulation = int(getattr(cfg.train, "grad_accumulation_steps", 1) or 1)
        self.steps_per_epoch = steps_per_epoch  # optimizer steps
        self.coordinator = None
        if distribute.is_coordinated(strategy):
            self.coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
        replicas = distribute.worker_count(strategy) if self.coordinator else strategy.num_replicas_in_sync
        self.lr_scale = lr_scale(cfg.train, replicas)
        with strategy.scope():
            self.model = build_model(cfg, inputs.num_classes, vocab_size=inputs.vocab_size)
            schedule = make_lr_schedule(cfg.train, steps_per_epoch, self.lr_scale)
            self.optimizer = make_optimizer(cfg.train, schedule, policy)
            # Build now: the checkpoint then restores into existing slots, and LossScaleOptimizer's
            # scale_loss reads its dynamic variable (not the initial constant) inside the step.
            self.optimizer.build(self.model.trainable_variables)
            self.loss_fn = keras.losses.CategoricalCrossentropy(
                label_smoothing=cfg.train.label_smoothing, reduction=None
            )
            self.epoch_loss = keras.metrics.Mean(name="epoch_loss")
            self.epoch_acc = keras.metrics.SparseCategoricalAccuracy(name="epoch_accuracy")
            self.window_loss = keras.metrics.Mean(name="window_loss")
            self.window_acc = keras.metrics.SparseCategoricalAccuracy(name="window_accuracy")
            self.val_loss = keras.metrics.Mean(name="val_loss")
            self.val_acc = keras.metrics.SparseCategoricalAccuracy(name="val_accuracy")
            agg = tf.VariableAggregation.ONLY_FIRST_REPLICA
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, aggregation=agg, name="step")
            self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, aggregation=agg, name="epoch")
            self.epoch_step = tf.Variable(0, dtype=tf.int64, trainable=False, aggregation=agg, name="epoch_step")
        # Keras 3 keeps the RNG state of dropout / random augmentation in SeedGenerator variables that
        # tf.train.Checkpoint does not reach through the model: add them, so a resumed run draws the
        # same random numbers as an uninterrupted one.
        rng_states = [v for v in self.model.non_trainable_variables if "seed_generator" in v.path]
        self.checkpoint = tf.train.Checkpoint(
            model=self.model, optimizer=self.optimizer, step=self.step, epoch=self.epoch, epoch_step=self.epoch_step,
            rng={str(i): v.value for i, v in enumerate(rng_states)},
        )
        self._train_step = None
        self._eval_step = None

    # -- per-replica computations (strategy-agnostic)

    def _per_example_loss(self, labels, probabilities):
        one_hot = tf.one_hot(tf.cast(labels, tf.int32), self.num_classes, dtype=tf.float32)
        return self.loss_fn(one_hot, tf.cast(probabilities, tf.float32))

    def _replica_train_step(self, *micro_batches):
        """One optimizer step over `grad_accumulation_steps` micro-batches (features, labels): gradients
        are summed micro-batch by micro-batch with the loss averaged over global batch x N, which equals
        one step on the N-times larger batch while holding the activations of one micro-batch only."""
        variables = self.model.trainable_variables
        total = None
        sums = tf.zeros([3], tf.float32)  # loss sum, examples, correct: returned for the coordinator
        denominator = self.global_batch_size * len(micro_batches)
        for features, labels in micro_batches:
            with tf.GradientTape() as tape:
                probabilities = self.model(features, training=True)
                per_example = self._per_example_loss(labels, probabilities)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=denominator)
                if self.model.losses:
                    reg = tf.nn.scale_regularization_loss(tf.add_n(self.model.losses))
                    loss += reg / len(micro_batches)
                scaled = self.optimizer.scale_loss(loss) if precision.needs_loss_scaling(self.policy) else loss
            grads = tape.gradient(scaled, variables)
            total = grads if total is None else [a + b for a, b in zip(total, grads)]
            for metric in (self.epoch_loss, self.window_loss):
                metric.update_state(per_example)
            for metric in (self.epoch_acc, self.window_acc):
                metric.update_state(labels, probabilities)
            correct = tf.cast(tf.equal(tf.argmax(probabilities, -1, output_type=tf.int64), tf.cast(labels, tf.int64)), tf.float32)
            sums += tf.stack([tf.reduce_sum(per_example), tf.cast(tf.size(per_example), tf.float32), tf.reduce_sum(correct)])
        self.optimizer.apply(total, variables)  # all-reduces (sums) gradients across replicas
        return sums

    def _replica_eval_step(self, features, labels):
        probabilities = self.model(features, training=False)
        self.val_loss.update_state(self._per_example_loss(labels, probabilities))
        self.val_acc.update_state(labels, probabilities)

    # -- compiled steps, built once per element spec

    def build_steps(self, train_spec, eval_spec) -> None:
        strategy = self.strategy

        if self.coordinator is not None:  # parameter_server: steps scheduled on workers, eval on the chief
            @tf.function
            def ps_train_step(iterator):
                batches = tuple(next(iterator) for _ in range(self.accumulation))
                return strategy.run(self._replica_train_step, args=batches)

            @tf.function(input_signature=[eval_spec])
            def ps_eval_step(batch):
                features, labels = batch
                self._replica_eval_step(features, labels)

            self._train_step, self._eval_step = ps_train_step, ps_eval_step
            return

        @tf.function
        def train_step(iterator, num_steps):
            # `num_steps` optimizer steps in one call, each reading its micro-batches inside the graph
            # (as Keras' fit does): no per-step Python dispatch nor host-side batch handling.
            for _ in tf.range(num_steps):
                batches = tuple(next(iterator) for _ in range(self.accumulation))
                strategy.run(self._replica_train_step, args=batches)

        @tf.function(input_signature=[eval_spec])
        def eval_step(batch):
            features, labels = batch
            strategy.run(self._replica_eval_step, args=(features, labels))

        self._train_step, self._eval_step = train_step, eval_step

    # -- epoch runners (a ClusterCoordinator runner would replace these two)

    def run_train_epoch(self, iterator, num_steps: int, *, on_steps: Callable[[int, int], None],
                        chunk: Callable[[], int]) -> int:
        """`num_steps` optimizer steps, each on the next N micro-batches of the (distributed) iterator, in
        calls of up to `chunk()` steps each; `on_steps(steps done, steps of this call)` after each call."""
        steps = 0
        while steps < num_steps:
            k = max(min(chunk(), num_steps - steps), 1)
            try:
                self._train_step(iterator, tf.constant(k, tf.int32))
            except (StopIteration, tf.errors.OutOfRangeError):
                break  # the stream ended early (a split with no full batch)
            steps += k
            on_steps(steps, k)
        return steps

    def run_coordinated_epoch(self, per_worker_iterator, num_steps: int, *,
                              on_steps: Callable[[int, int], None]) -> int:
        """parameter_server: schedule `num_steps` steps on the workers (asynchronous), then wait."""
        remote = []
        for i in range(num_steps):
            remote.append(self.coordinator.schedule(self._train_step, args=(per_worker_iterator,)))
            on_steps(i + 1, 1)
        self.coordinator.join()
        # Metric variables are not shared with the workers: the epoch metrics come from the step results.
        loss_sum, examples, correct = [float(x) for x in sum(r.fetch() for r in remote)] if remote else (0.0, 0.0, 0.0)
        for loss_metric, acc_metric in ((self.epoch_loss, self.epoch_acc), (self.window_loss, self.window_acc)):
            loss_metric.total.assign(loss_sum)
            loss_metric.count.assign(examples)
            acc_metric.total.assign(correct)
            acc_metric.count.assign(examples)
        return num_steps

    def run_eval(self, dist_dataset) -> Dict[str, float]:
        for metric in (self.val_loss, self.val_acc):
            metric.reset_state()
        for batch in dist_dataset:
            self._eval_step(batch)
        if self.coordinator is not None:
            self.coordinator.join()
        return {"val_loss": _value(self.val_loss.result()), "val_accuracy": _value(self.val_acc.result())}

    def learning_rate(self) -> float:
        return _value(self.optimizer.learning_rate)


def _value(x) -> float:
    return float(keras.ops.convert_to_numpy(x))


def _count(metric) -> float:
    return _value(metric.count)


# ----------------------------------------------------------------------------- public entry point


def train(cfg, *, prepared_dir, output_dir, sink: Optional[MetricsSink] = None) -> TrainResult:
    """Train cfg.model on the prepared TFRecords, checkpointing into output_dir/checkpoints and
    exporting output_dir/saved_model; resumes from the latest checkpoint there if any."""
    from tfpipe import data

    prepared_dir, output_dir = Path(prepared_dir), Path(output_dir)
    manifest = data.load_manifest(prepared_dir)
    inputs = _read_inputs(cfg, manifest, prepared_dir)

    distribute.configure_devices(cfg.strategy)  # logical CPUs: before anything initialises TF's devices
    from tfpipe import determinism

    determinism_settings = determinism.setup(cfg.train.seed, getattr(cfg.train, "deterministic", True))
    with precision.policy_scope(cfg.precision) as policy:
        strategy = distribute.build_strategy(cfg.strategy)
        tc = cfg.train
        global_batch = tc.batch_size_per_replica * strategy.num_replicas_in_sync

        def vectorized(ds: tf.data.Dataset) -> tf.data.Dataset:
            if inputs.modality == "text":
                vectorizer = inputs.vectorizer()  # built in the input pipeline's own context
                ds = ds.map(lambda x, y: (vectorizer(x), y), num_parallel_calls=tf.data.AUTOTUNE)
            return ds.prefetch(tf.data.AUTOTUNE)

        def dataset_fn(split: str, training: bool) -> DatasetFn:
            """One pass over `split` (validation; parameter_server workers repeat it)."""
            def fn(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
                # make_dataset takes the GLOBAL batch with an input_context and batches per replica.
                return vectorized(data.make_dataset(
                    prepared_dir, split, batch_size=global_batch, training=training, seed=tc.seed,
                    shuffle_buffer=tc.shuffle_buffer, cache=tc.cache, input_context=input_context,
                    shard_policy=tc.shard_policy if split == "train" else "auto",  # the policy is for the train split
                ))

            return fn

        def stream_fn(start_epoch: int, batches_per_epoch: int, skip_batches: int) -> DatasetFn:
            """The remaining training epochs back to back, resumable at any batch (make_train_stream)."""
            def fn(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
                return vectorized(data.make_train_stream(
                    prepared_dir, batch_size=global_batch, seed=tc.seed, start_epoch=start_epoch,
                    epochs=tc.epochs, batches_per_epoch=batches_per_epoch, skip_batches=skip_batches,
                    shuffle_buffer=tc.shuffle_buffer, cache=tc.cache, input_context=input_context,
                    shard_policy=tc.shard_policy,
                ))

            return fn

        result = _run(cfg, strategy, inputs, policy, dataset_fn, stream_fn, output_dir, sink)
        result.determinism = determinism_settings
        return result


def _run(cfg, strategy, inputs: _Inputs, policy: str, dataset_fn, stream_fn, output_dir: Path,
         sink: Optional[MetricsSink]) -> TrainResult:
    tc = cfg.train
    global_batch = tc.batch_size_per_replica * strategy.num_replicas_in_sync
    # make_dataset drops the remainder of training batches.
    # parameter_server workers read their shards repeated: steps count over all workers together
    pipelines = 1 if distribute.is_coordinated(strategy) else distribute.worker_count(strategy)
    micro_batches = max(_batches_per_pipeline(inputs, pipelines, global_batch, tc.shard_policy), 1)
    if tc.steps_per_epoch:  # caps the batches (micro-batches) read per epoch
        micro_batches = min(micro_batches, tc.steps_per_epoch)
    accumulation = int(getattr(tc, "grad_accumulation_steps", 1) or 1)
    steps_per_epoch = max(micro_batches // accumulation, 1)  # optimizer steps
    trainer = Trainer(cfg, strategy, inputs, policy=policy, steps_per_epoch=steps_per_epoch)
    # Parameters counted from the train split (nbsvm's ratios): always recomputed (deterministic, so a
    # resumed run and every worker get the same values) before a checkpoint restores the rest.
    t_fit = time.perf_counter()
    fitted = fit_to_train_split(trainer.model, cfg.model, dataset_fn("train", False)(tf.distribute.InputContext()),
                                inputs.num_classes)
    if fitted is not None:
        log.info("fitted %s to the train split in %.1f s: %s", cfg.model.name, time.perf_counter() - t_fit, fitted)

    ckpt_dir = output_dir / CHECKPOINTS
    saved_model_dir = output_dir / SAVED_MODEL
    chief = _is_chief(strategy)
    # Multi-worker strategies need every worker to take part in saves; only the chief writes to
    # output_dir, the others write to a scratch folder that is deleted at the end.
    scratch = None if chief else Path(tempfile.mkdtemp(prefix="tfpipe-worker-"))
    manager = tf.train.CheckpointManager(
        trainer.checkpoint, str(ckpt_dir if chief else scratch / CHECKPOINTS), max_to_keep=tc.max_checkpoints_to_keep
    )
    history: List[dict] = []
    latest = tf.train.latest_checkpoint(str(ckpt_dir))
    resumed = latest is not None
    if resumed:
        try:
            trainer.checkpoint.restore(latest).assert_existing_objects_matched()
        except (AssertionError, ValueError, tf.errors.OpError) as exc:
            raise UserError(
                f"{ckpt_dir}: cannot resume from {Path(latest).name} (was it written for another model or "
                f"optimizer?); delete the folder to start over ({str(exc).splitlines()[0]})"
            ) from None
        history = _read_history(ckpt_dir)[: int(trainer.epoch.numpy())]
        log.info("resuming from %s: epoch %d, step %d", latest, int(trainer.epoch.numpy()), int(trainer.step.numpy()))

    start_epoch = int(trainer.epoch.numpy())
    start_epoch_step = int(trainer.epoch_step.numpy())
    step = int(trainer.step.numpy())
    resumed_at_step = step
    distribute_ds = strategy.distribute_datasets_from_function
    per_worker_iterator = None
    train_iterator = None
    if trainer.coordinator is not None:
        # parameter_server: each worker reads its shard of the train split forever; the chief
        # schedules steps_per_epoch steps per epoch and evaluates the validation split itself.
        train_fn = dataset_fn("train", True)
        per_worker = trainer.coordinator.create_per_worker_dataset(
            distribute_ds(lambda ctx: train_fn(ctx).repeat())
        )
        per_worker_iterator = iter(per_worker)
        val_ds = dataset_fn("validation", False)(tf.distribute.InputContext())
        trainer.build_steps(None, val_ds.element_spec)
    else:
        # Every input pipeline (worker) reads exactly steps_per_epoch x N micro-batches per epoch (with
        # uneven shards a worker that ran out would feed empty batches into the collective step), epochs
        # back to back, starting after the batches a resumed run has already trained on.
        train_ds = distribute_ds(stream_fn(start_epoch, steps_per_epoch * accumulation, start_epoch_step * accumulation))
        train_iterator = iter(train_ds)
        val_ds = distribute_ds(dataset_fn("validation", False))
        trainer.build_steps(train_ds.element_spec, val_ds.element_spec)

    def flush_sink() -> None:
        flush = getattr(sink, "flush", None)
        if chief and callable(flush):
            flush()

    def save(epoch: int, epoch_step: int) -> None:
        # Metrics first: once a checkpoint exists, every metric of the steps before it is in the store
        # (a resumed run never replays them, so a value still in the buffer would be lost for good).
        flush_sink()
        trainer.step.assign(step)
        trainer.epoch.assign(epoch)
        trainer.epoch_step.assign(epoch_step)
        manager.save(checkpoint_number=step)

    def trained_examples(steps: int, loss_metric) -> float:
        """Examples trained in `steps` optimizer steps. Synchronous strategies: steps x global batch x N
        (the metric's count is not reliable everywhere: CentralStorageStrategy over-counts it); under
        parameter_server the count comes from the steps' own results (run_coordinated_epoch)."""
        if trainer.coordinator is not None:
            return _count(loss_metric)
        return float(steps * global_batch * accumulation)

    # Optimizer steps per compiled call; 1 while profiling, so the trace starts and stops at its exact steps.
    steps_per_execution = 1 if tc.profile_steps else int(getattr(tc, "steps_per_execution", 1) or 1)

    from tfpipe import monitoring

    # TensorBoard summaries + profiler (train.tensorboard*, train.profile_steps); writes on the chief only.
    monitor = monitoring.Monitor.from_config(tc, output_dir, chief=chief)
    monitor.on_train_begin(trainer.model, step=step, optimizer=trainer.optimizer)
    t_start = time.perf_counter()
    epochs_run = 0
    with interrupts.deferred():  # SIGTERM/SIGINT only flag a stop, taken at the next step or epoch end
        for epoch in range(start_epoch, tc.epochs):
            skip = start_epoch_step if epoch == start_epoch else 0
            for metric in (trainer.epoch_loss, trainer.epoch_acc, trainer.window_loss, trainer.window_acc):
                metric.reset_state()
            t_epoch = time.perf_counter()
            window = {"t": t_epoch, "steps": 0}

            def flush_window() -> None:
                examples = trained_examples(window["steps"], trainer.window_loss)
                if examples <= 0:
                    return
                window["steps"] = 0
                now = time.perf_counter()
                metrics = {
                    "train_loss": _value(trainer.window_loss.result()),
                    "train_accuracy": _value(trainer.window_acc.result()),
                    "learning_rate": trainer.learning_rate(),
                    "examples_per_sec": examples / max(now - window["t"], 1e-9),
                }
                trainer.window_loss.reset_state()
                trainer.window_acc.reset_state()
                window["t"] = now
                if sink is not None and chief:
                    sink.log_metrics(metrics, step)
                monitor.on_step(step, metrics)

            def chunk() -> int:
                """Steps of the next call: up to train.steps_per_execution, ending exactly on every step that
                logs or checkpoints (so those happen at the same steps whatever the setting)."""
                k = steps_per_execution
                for every in (tc.log_every_steps, tc.checkpoint_every_steps):
                    k = min(k, every - step % every)
                return k

            def on_steps(steps_in_epoch: int, n: int) -> None:
                nonlocal step
                step += n
                window["steps"] += n
                monitor.on_step(step)  # profiler range transitions
                if step % tc.log_every_steps == 0:
                    flush_window()
                if interrupts.requested() is not None:  # SIGTERM/SIGINT: checkpoint this very step, then stop
                    if trainer.coordinator is not None:
                        trainer.coordinator.join()  # the steps scheduled so far are done
                    flush_window()
                    save(epoch, skip + steps_in_epoch)
                    log.warning("stop requested: checkpoint saved at step %d (epoch %d, batch %d)", step, epoch,
                                skip + steps_in_epoch)
                    interrupts.raise_if_requested(f"at step {step}")
                if step % tc.checkpoint_every_steps == 0:
                    save(epoch, skip + steps_in_epoch)

            if trainer.coordinator is not None:
                ran = trainer.run_coordinated_epoch(per_worker_iterator, steps_per_epoch - skip, on_steps=on_steps)
            else:
                ran = trainer.run_train_epoch(train_iterator, steps_per_epoch - skip, on_steps=on_steps, chunk=chunk)
            flush_window()  # the tail of the epoch, so short epochs still report step metrics
            epoch_seconds = time.perf_counter() - t_epoch
            examples = trained_examples(ran, trainer.epoch_loss)
            if ran == 0 and not skip:
                raise DataError(
                    f"train split ({inputs.num_train_examples} examples) gives no full batch of {global_batch} "
                    f"(no batches); lower train.batch_size_per_replica"
                )
            nan = float("nan")  # a resumed epoch whose batches were all trained before the interruption
            row = {
                "epoch": epoch,
                "epoch_train_loss": _value(trainer.epoch_loss.result()) if examples else nan,
                "epoch_train_accuracy": _value(trainer.epoch_acc.result()) if examples else nan,
                **trainer.run_eval(val_ds),
                "epoch_seconds": epoch_seconds,
                "epoch_examples_per_sec": examples / max(epoch_seconds, 1e-9),
            }
            history.append(row)
            if chief:
                _write_history(ckpt_dir, history)  # a row past the checkpoint's epoch is dropped on resume
            if sink is not None and chief:
                sink.log_metrics({k: float(row[k]) for k in EPOCH_METRICS}, epoch)
            save(epoch + 1, 0)
            if interrupts.requested() is not None:  # signalled during validation or the save: stop here
                log.warning("stop requested: checkpoint saved at step %d (end of epoch %d)", step, epoch)
                interrupts.raise_if_requested(f"at step {step}")
            monitor.on_epoch_end(epoch, row, trainer.model)
            log.info("epoch %d/%d: %s", epoch + 1, tc.epochs,
                     ", ".join(f"{k}={v:.4g}" for k, v in row.items() if k != "epoch"))
            epochs_run += 1
    train_seconds = time.perf_counter() - t_start
    monitor.on_train_end()

    if history:
        last = history[-1]
        final = {
            "train_loss": last["epoch_train_loss"],
            "train_accuracy": last["epoch_train_accuracy"],
            "val_loss": last["val_loss"],
            "val_accuracy": last["val_accuracy"],
        }
    else:  # resumed a finished run whose history file is gone: score validation again
        final = trainer.run_eval(val_ds)

    export_saved_model(
        trainer.model,
        saved_model_dir if chief else scratch / SAVED_MODEL,
        modality=inputs.modality,
        image_shape=inputs.image_shape,
        vectorizer=inputs.vectorizer() if inputs.modality == "text" else None,
        class_names=inputs.class_names,
    )
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)
    return TrainResult(
        history=history,
        final_metrics=final,
        saved_model_dir=saved_model_dir,
        checkpoint_dir=ckpt_dir,
        strategy=distribute.describe_strategy(strategy),
        num_params=int(trainer.model.count_params()),
        global_batch_size=global_batch,
        steps=step,
        train_seconds=train_seconds,
        precision=policy,
        epochs_run=epochs_run,
        initial_epoch=start_epoch,
        resumed=resumed,
        resumed_at_step=resumed_at_step,
        weights_sha256=_weights_sha256(trainer.model),
    )


def _weights_sha256(model) -> str:
    from tfpipe.determinism import weights_sha256

    return weights_sha256(model)


def _batches_per_pipeline(inputs: _Inputs, num_pipelines: int, global_batch: int, shard_policy: str = "auto") -> int:
    """Full training batches the smallest input pipeline yields per epoch (mirrors make_dataset's sharding:
    whole files when there are at least as many files as pipelines, else every n-th record)."""
    n = max(int(num_pipelines), 1)
    per_pipeline_batch = max(global_batch // n, 1)
    sizes = inputs.train_shard_sizes or []
    if n == 1 or not sizes or sum(sizes) != inputs.num_train_examples:
        return inputs.num_train_examples // global_batch
    from tfpipe.data.inputs import shard_by_file

    if shard_by_file(len(sizes), n, shard_policy):
        smallest = min(sum(sizes[i::n]) for i in range(n))
    else:
        smallest = inputs.num_train_examples // n
    return smallest // per_pipeline_batch


def _read_history(ckpt_dir: Path) -> List[dict]:
    path = ckpt_dir / HISTORY_FILE
    if not path.is_file():
        return []
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return []
    return rows if isinstance(rows, list) else []


def _write_history(ckpt_dir: Path, history: List[dict]) -> None:
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    path = ckpt_dir / HISTORY_FILE
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(history, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
