"""Runners: how optimizer steps reach the devices. One interface, two implementations, so the loop has no
strategy branches: `SyncRunner` (one_device, mirrored, central_storage, multi_worker_mirrored, tpu: every
replica steps in lock-step over a distributed dataset) and `CoordinatedRunner` (parameter_server: a
`ClusterCoordinator` schedules steps on the workers, which read their shard of the train split repeated)."""

from __future__ import annotations

from typing import Dict

import tensorflow as tf

from tfpipe import distribute
from tfpipe.training.steps import Steps, value


class SyncRunner:
    """Synchronous strategies: `train(k)` is one compiled call of k steps reading the batches inside the graph
    (as Keras' fit does: no per-step Python dispatch nor host-side batch handling)."""

    def __init__(self, strategy: tf.distribute.Strategy, task):
        self.strategy = strategy
        self.task = task
        self.pipelines = distribute.worker_count(strategy)  # input pipelines sharing an epoch's batches
        self.replicas = strategy.num_replicas_in_sync  # what train.lr_scaling=linear multiplies by

    def start(self, steps: Steps, start_epoch: int, start_epoch_step: int) -> None:
        """Every input pipeline reads exactly steps_per_epoch x N micro-batches per epoch (with uneven shards a
        worker that ran out would feed empty batches into the collective step), epochs back to back, starting
        after the batches a resumed run has already trained on."""
        self.steps = steps
        acc = steps.accumulation
        stream = self.task.stream_fn(start_epoch, steps.steps_per_epoch * acc, start_epoch_step * acc)
        train_ds = self.strategy.distribute_datasets_from_function(stream)
        self.val_ds = self.strategy.distribute_datasets_from_function(
            self.task.dataset_fn("validation", False)
        )
        self.iterator = iter(train_ds)
        self.retrace()
        self._eval_fn = tf.function(self._eval_call, input_signature=[self.val_ds.element_spec])

    def retrace(self) -> None:
        """A new compiled train call: the trainable variables (train.freeze_epochs) are read when it is traced."""
        self._train_fn = tf.function(self._train_calls)

    def _train_calls(self, iterator, num_steps):
        for _ in tf.range(num_steps):
            batches = tuple(next(iterator) for _ in range(self.steps.accumulation))
            self.strategy.run(self.steps.replica_train_step, args=batches)
            self.steps.after_step()

    def _eval_call(self, batch):
        self.strategy.run(self.steps.replica_eval_step, args=(batch,))

    def train(self, num_steps: int) -> int:
        """Up to `num_steps` optimizer steps in one call; 0 when the stream ended (a split with no full batch)."""
        try:
            self._train_fn(self.iterator, tf.constant(num_steps, tf.int32))
        except (StopIteration, tf.errors.OutOfRangeError):
            return 0
        return num_steps

    def sync(self) -> None:
        """Steps run synchronously: nothing is in flight."""

    def end_epoch(self) -> None:
        """The metric variables are already up to date."""

    def evaluate(self) -> Dict[str, float]:
        return _evaluate(self.steps, self.val_ds, self._eval_fn, self.sync)


class CoordinatedRunner:
    """parameter_server: each worker reads its shard of the train split forever; the chief schedules
    steps_per_epoch steps per epoch (asynchronously) and evaluates the validation split itself."""

    def __init__(self, strategy: tf.distribute.Strategy, task):
        self.strategy = strategy
        self.task = task
        self.coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
        self.pipelines = 1  # steps count over all workers together
        self.replicas = distribute.worker_count(strategy)
        self._remote: list = []  # RemoteValues of the scheduled train steps, not fetched yet

    def start(self, steps: Steps, start_epoch: int, start_epoch_step: int) -> None:
        self.steps = steps
        per_worker = self.coordinator.create_per_worker_dataset(
            self.strategy.distribute_datasets_from_function(self._repeated_train)
        )
        self.iterator = iter(per_worker)
        self.val_ds = self.task.dataset_fn("validation", False)(tf.distribute.InputContext())
        self.retrace()
        self._eval_fn = tf.function(self.steps.replica_eval_step, input_signature=[self.val_ds.element_spec])

    def retrace(self) -> None:
        """A new compiled train step: the trainable variables (train.freeze_epochs) are read when it is traced."""
        self._train_fn = tf.function(self._train_call)

    def _repeated_train(self, input_context: tf.distribute.InputContext) -> tf.data.Dataset:
        return self.task.dataset_fn("train", True)(input_context).repeat()

    def _train_call(self, iterator):
        batches = tuple(next(iterator) for _ in range(self.steps.accumulation))
        return self.strategy.run(self.steps.replica_train_step, args=batches)

    def train(self, num_steps: int) -> int:
        for _ in range(num_steps):
            self._remote.append(self.coordinator.schedule(self._train_fn, args=(self.iterator,)))
        return num_steps

    def sync(self) -> None:
        self.coordinator.join()

    def end_epoch(self) -> None:
        """Wait for the epoch's steps; metric variables are not shared with the workers, so the epoch and window
        metrics come from the steps' own results."""
        self.coordinator.join()
        results = [r.fetch() for r in self._remote]
        self._remote = []
        loss_sum, examples, correct = (float(x) for x in sum(results)) if results else (0.0, 0.0, 0.0)
        steps = self.steps
        for loss_metric, acc_metric, counter in (
            (steps.epoch_loss, steps.epoch_acc, steps.epoch_examples),
            (steps.window_loss, steps.window_acc, steps.window_examples),
        ):
            loss_metric.total.assign(loss_sum)
            loss_metric.count.assign(examples)
            acc_metric.total.assign(correct)
            acc_metric.count.assign(examples)
            counter.assign(examples)

    def evaluate(self) -> Dict[str, float]:
        return _evaluate(self.steps, self.val_ds, self._eval_fn, self.sync)


def _evaluate(steps: Steps, dataset, eval_fn, sync) -> Dict[str, float]:
    for metric in (steps.val_loss, steps.val_acc):
        metric.reset_state()
    for batch in dataset:
        eval_fn(batch)
    sync()
    return {"val_loss": value(steps.val_loss.result()), "val_accuracy": value(steps.val_acc.result())}


def build_runner(strategy: tf.distribute.Strategy, task) -> SyncRunner | CoordinatedRunner:
    """The runner for a strategy: the one place the training code tells parameter_server apart."""
    return (
        CoordinatedRunner(strategy, task)
        if distribute.is_coordinated(strategy)
        else SyncRunner(strategy, task)
    )
