"""The per-replica train and eval steps and what they update: model, optimizer, metrics, step counters and the
checkpoint object. Built under `strategy.scope()`; runners compile and schedule the steps."""

from __future__ import annotations

from typing import Dict

import keras
import tensorflow as tf

from tfpipe import precision
from tfpipe.training.early_stopping import EarlyStopping
from tfpipe.training.lookahead import Lookahead
from tfpipe.training.optim import make_lr_schedule, make_optimizer, total_steps


def value(x) -> float:
    return float(keras.ops.convert_to_numpy(x))


class Steps:
    """Model, optimizer, Keras metrics (sync-on-read sums under a strategy), counters and the replica steps.

    The loss is averaged over the GLOBAL batch (`tf.nn.compute_average_loss`) so gradients summed across
    replicas by the optimizer are right under any number of replicas."""

    def __init__(
        self, task, strategy: tf.distribute.Strategy, *, policy: str, steps_per_epoch: int, lr_scale: float
    ):
        tc = task.cfg.train
        self.policy = policy
        self.num_classes = task.spec.num_classes
        self.global_batch_size = task.global_batch
        self.accumulation = int(tc.grad_accumulation_steps)
        self.steps_per_epoch = steps_per_epoch  # optimizer steps
        with strategy.scope():
            self.model = task.build_model()
            self.optimizer = make_optimizer(tc, make_lr_schedule(tc, steps_per_epoch, lr_scale), policy)
            # Build now: the checkpoint then restores into existing slots, and LossScaleOptimizer's
            # scale_loss reads its dynamic variable (not the initial constant) inside the step.
            self.optimizer.build(self.model.trainable_variables)
            self.lookahead = Lookahead.from_config(self.model, tc, total_steps(tc, steps_per_epoch))
            self.early_stopping = EarlyStopping.from_config(self.model, tc)
            self.loss_fn = task.build_loss()
            self.epoch_loss = keras.metrics.Mean(name="epoch_loss")
            self.epoch_acc = keras.metrics.SparseCategoricalAccuracy(name="epoch_accuracy")
            self.window_loss = keras.metrics.Mean(name="window_loss")
            self.window_acc = keras.metrics.SparseCategoricalAccuracy(name="window_accuracy")
            self.val_loss = keras.metrics.Mean(name="val_loss")
            self.val_acc = keras.metrics.SparseCategoricalAccuracy(name="val_accuracy")
            # Examples trained on since the epoch / logging window began, summed over replicas when read
            # (what throughput is computed from). Not the loss metrics' `count`: CentralStorageStrategy
            # over-counts that one (docs/benchmarks.md), while a plain sync-on-read sum is exact.
            self.epoch_examples, self.window_examples = (
                tf.Variable(
                    0.0,
                    trainable=False,
                    synchronization=tf.VariableSynchronization.ON_READ,
                    aggregation=tf.VariableAggregation.SUM,
                    name=name,
                )
                for name in ("epoch_examples", "window_examples")
            )
            agg = tf.VariableAggregation.ONLY_FIRST_REPLICA
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, aggregation=agg, name="step")
            self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, aggregation=agg, name="epoch")
            self.epoch_step = tf.Variable(
                0, dtype=tf.int64, trainable=False, aggregation=agg, name="epoch_step"
            )
        # Keras 3 keeps the RNG state of dropout / random augmentation in SeedGenerator variables that
        # tf.train.Checkpoint does not reach through the model: add them, so a resumed run draws the
        # same random numbers as an uninterrupted one.
        rng_states = [v for v in self.model.non_trainable_variables if "seed_generator" in v.path]
        self.checkpoint = tf.train.Checkpoint(
            model=self.model,
            optimizer=self.optimizer,
            step=self.step,
            epoch=self.epoch,
            epoch_step=self.epoch_step,
            rng={str(i): v.value for i, v in enumerate(rng_states)},
            **({"lookahead": self.lookahead.checkpointed()} if self.lookahead else {}),
            **({"early_stopping": self.early_stopping.checkpointed()} if self.early_stopping else {}),
        )

    def _per_example_loss(self, labels, probabilities):
        one_hot = tf.one_hot(tf.cast(labels, tf.int32), self.num_classes, dtype=tf.float32)
        return self.loss_fn(one_hot, tf.cast(probabilities, tf.float32))

    def replica_train_step(self, *micro_batches):
        """One optimizer step over `grad_accumulation_steps` micro-batches (features, labels): gradients
        are summed micro-batch by micro-batch with the loss averaged over global batch x N, which equals
        one step on the N-times larger batch while holding the activations of one micro-batch only.
        Returns (loss sum, examples, correct): parameter_server workers' metrics come back this way."""
        variables = self.model.trainable_variables
        total = None
        sums = tf.zeros([3], tf.float32)
        denominator = self.global_batch_size * len(micro_batches)
        for features, labels in micro_batches:
            with tf.GradientTape() as tape:
                probabilities = self.model(features, training=True)
                per_example = self._per_example_loss(labels, probabilities)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=denominator)
                if self.model.losses:
                    loss += tf.nn.scale_regularization_loss(tf.add_n(self.model.losses)) / len(micro_batches)
                scaled = (
                    self.optimizer.scale_loss(loss) if precision.needs_loss_scaling(self.policy) else loss
                )
            grads = tape.gradient(scaled, variables)
            total = grads if total is None else [a + b for a, b in zip(total, grads)]
            for metric in (self.epoch_loss, self.window_loss):
                metric.update_state(per_example)
            for metric in (self.epoch_acc, self.window_acc):
                metric.update_state(labels, probabilities)
            predicted = tf.argmax(probabilities, -1, output_type=tf.int64)
            correct = tf.cast(tf.equal(predicted, tf.cast(labels, tf.int64)), tf.float32)
            examples = tf.cast(tf.size(per_example), tf.float32)
            for counter in (self.epoch_examples, self.window_examples):
                counter.assign_add(examples)
            sums += tf.stack([tf.reduce_sum(per_example), examples, tf.reduce_sum(correct)])
        self.optimizer.apply(total, variables)  # all-reduces (sums) gradients across replicas
        return sums

    def weights_set(self) -> None:
        """The model's starting weights are in place (fitted to the train split, warm-started)."""
        if self.lookahead:
            self.lookahead.reset()

    def after_step(self) -> None:
        """Cross-replica, after each optimizer step inside the compiled call: train.optimizer.lookahead_every."""
        if self.lookahead:
            self.lookahead.sync(self.optimizer.iterations)

    def replica_eval_step(self, batch):
        features, labels = batch
        probabilities = self.model(features, training=False)
        self.val_loss.update_state(self._per_example_loss(labels, probabilities))
        self.val_acc.update_state(labels, probabilities)

    # -- metrics as the loop reads them

    def reset_train_metrics(self) -> None:
        for metric in (self.epoch_loss, self.epoch_acc, self.window_loss, self.window_acc):
            metric.reset_state()
        for counter in (self.epoch_examples, self.window_examples):
            counter.assign(0.0)

    def take_window(self) -> Dict[str, float]:
        """The step metrics since the last call (then reset)."""
        metrics = {
            "train_loss": value(self.window_loss.result()),
            "train_accuracy": value(self.window_acc.result()),
            "learning_rate": value(self.optimizer.learning_rate),
        }
        self.window_loss.reset_state()
        self.window_acc.reset_state()
        self.window_examples.assign(0.0)
        return metrics

    def examples(self, window: bool = False) -> float:
        """Examples trained on since the epoch (or the logging window) began, over all replicas."""
        return float((self.window_examples if window else self.epoch_examples).read_value())

    def epoch_metrics(self) -> Dict[str, float]:
        return {
            "epoch_train_loss": value(self.epoch_loss.result()),
            "epoch_train_accuracy": value(self.epoch_acc.result()),
        }

    def set_counters(self, step: int, epoch: int, epoch_step: int) -> None:
        """What the next checkpoint records: global step, epoch, and batches of that epoch already trained."""
        self.step.assign(step)
        self.epoch.assign(epoch)
        self.epoch_step.assign(epoch_step)

    def finalize_weights(self) -> None:
        """With train.optimizer.ema_momentum: the weights become their moving average; with lookahead_every, the
        slow copies (after the loop, before the export; the checkpoints keep the trained weights and the average
        apart, so a resume continues both)."""
        if self.lookahead:
            self.lookahead.finalize()
        optimizer = getattr(self.optimizer, "inner_optimizer", self.optimizer)
        if optimizer.use_ema:
            optimizer.finalize_variable_values(self.model.trainable_variables)

    def counters(self) -> tuple[int, int, int]:
        return int(self.step.numpy()), int(self.epoch.numpy()), int(self.epoch_step.numpy())
