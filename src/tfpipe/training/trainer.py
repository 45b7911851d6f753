"""`train(cfg, prepared_dir=..., output_dir=..., sink=...)`: builds the pieces from the config and runs them.

Seeds and op determinism, the precision policy, the strategy (`tfpipe.strategies`), the task (model, loss,
datasets from the manifest), the runner for the strategy, the steps under `strategy.scope()`, the work
directory (resume from its newest checkpoint: finished epochs are not rerun and a run interrupted mid-epoch
skips the batches it had trained on; epoch e is shuffled with the seed pair (seed, e) and the checkpoint holds
the RNG state of dropout and augmentation, so with op determinism a resumed run is bit-identical with an
uninterrupted one), the hooks, then the loop, then the export. Training never imports mlflow: metrics go to an
optional `MetricsSink`."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from tfpipe import determinism, distribute, files, monitoring, phases, precision, progress, strategies
from tfpipe.hooks import CheckpointHook, Hook, MetricsSink, SinkHook
from tfpipe.models import warmstart
from tfpipe.models.export import remove_dead_staging
from tfpipe.training.epochs import EpochLayersHook
from tfpipe.training.freeze import FreezeHook
from tfpipe.training.loop import Loop, Schedule
from tfpipe.training.optim import lr_scale
from tfpipe.training.preemption import stop_hook
from tfpipe.training.runners import build_runner
from tfpipe.training.steps import Steps
from tfpipe.training.task import Task, batches_per_pipeline
from tfpipe.workdir import WorkDir

log = logging.getLogger(__name__)


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
    weights_sha256: Optional[str] = (
        None  # determinism.weights_sha256 of the trained model (bit-identity check)
    )
    determinism: Dict[str, Any] = field(default_factory=dict)  # determinism.setup() settings in force
    workdir: Optional[WorkDir] = None  # the work directory (files of the newest checkpoint, ...)
    warm_start: Optional[dict] = None  # {"loaded": [...], "fresh": [...]} layers when init_weights was given
    early_stopping: Optional[dict] = None  # EarlyStopping.summary(): metrics, when train.early_stopping is on


def train(
    cfg,
    *,
    prepared_dir,
    output_dir,
    sink: Optional[MetricsSink] = None,
    hooks: Sequence[Hook] = (),
    init_weights: Optional[dict] = None,
    workdir: Optional[WorkDir] = None,
) -> TrainResult:
    """Train cfg.model on the prepared TFRecords, checkpointing into output_dir/checkpoints and exporting
    output_dir/saved_model; resumes from the newest checkpoint there if any. `hooks`: more `tfpipe.hooks.Hook`s,
    called after the built-in ones (as Lightning callbacks are). `init_weights`: a warm start's {weight path:
    array} (tfpipe.models.warmstart), applied to the matching layers before a checkpoint restores the rest.
    `workdir`: the stage's WorkDir of output_dir (its shelf mirrors each checkpoint), else a plain one."""
    distribute.configure_devices(cfg.strategy)  # logical CPUs: before anything initialises TF's devices
    settings = determinism.setup(cfg.train.seed, cfg.train.deterministic)
    with precision.policy_scope(cfg.precision) as policy:
        strategy = strategies.build_strategy(cfg.strategy)
        global_batch = cfg.train.batch_size_per_replica * strategy.num_replicas_in_sync
        task = Task.from_prepared(cfg, Path(prepared_dir), global_batch)
        result = _train(
            cfg, task, strategy, policy, workdir or WorkDir(Path(output_dir)), sink, list(hooks), init_weights
        )
    result.determinism = settings
    return result


def _steps_per_epoch(tc, task: Task, runner) -> int:
    """Optimizer steps per epoch: the smallest pipeline's full batches (make_dataset drops the remainder),
    capped by train.steps_per_epoch (in micro-batches), divided by train.grad_accumulation_steps."""
    micro = max(batches_per_pipeline(task.spec, runner.pipelines, task.global_batch, tc.shard_policy), 1)
    if tc.steps_per_epoch:
        micro = min(micro, tc.steps_per_epoch)
    return max(micro // tc.grad_accumulation_steps, 1)


def _final_metrics(history: list, runner, epoch: Optional[int] = None) -> dict:
    """The last epoch's train and validation metrics, or epoch `epoch`'s (the weights early stopping restored)."""
    if not history:  # resumed a finished run whose history file is gone: score validation again
        return runner.evaluate()
    last = next((row for row in history if row["epoch"] == epoch), history[-1])
    return {
        "train_loss": last["epoch_train_loss"],
        "train_accuracy": last["epoch_train_accuracy"],
        "val_loss": last["val_loss"],
        "val_accuracy": last["val_accuracy"],
    }


def _model_hooks(tc, steps, runner, warm, start_epoch: int) -> List[Hook]:
    """What acts on the model between epochs: a warm start's frozen layers, layers that follow the epoch, and
    early stopping (whether another epoch runs, the best epoch's weights)."""
    hooks: List[Hook] = [EpochLayersHook(steps.model, start_epoch, runner)]
    if warm and tc.freeze_epochs:
        hooks.append(FreezeHook(steps.model, warm["loaded"], tc.freeze_epochs, start_epoch, runner))
    return hooks + ([steps.early_stopping] if steps.early_stopping else [])


@phases.phase("export")
def _export(task, model, workdir: WorkDir) -> str:
    """The SavedModel of the model's weights (returns their digest): kept when an earlier attempt of this training
    already exported exactly them (killed before its run finished: the run may record that export's digest)."""
    weights = determinism.weights_sha256(model)
    remove_dead_staging(workdir.export_dir)  # an earlier attempt killed as it exported
    if files.seal_facts(workdir.export_dir).get("weights_sha256") == weights:
        log.info("kept %s: an earlier attempt exported these very weights", workdir.export_dir)
    else:
        task.export(model, workdir.export_dir, weights_sha256=weights)
    workdir.keep_export(weights)
    return weights


def _train(
    cfg, task, strategy, policy: str, workdir: WorkDir, sink, extra_hooks: list, init_weights
) -> TrainResult:
    tc = cfg.train
    runner = build_runner(strategy, task)
    steps_per_epoch = _steps_per_epoch(tc, task, runner)
    steps = Steps(
        task, strategy, policy=policy, steps_per_epoch=steps_per_epoch, lr_scale=lr_scale(tc, runner.replicas)
    )
    task.fit_to_train_split(steps.model)  # before a checkpoint restores the rest
    warm = warmstart.apply(steps.model, init_weights) if init_weights else None  # a checkpoint wins on resume
    steps.weights_set()  # lookahead's slow copies start here; a resume's checkpoint restores them below
    chief = strategy.extended.should_checkpoint
    resumed = workdir.open_checkpoints(steps.checkpoint, chief=chief, max_to_keep=tc.max_checkpoints_to_keep)
    step, start_epoch, start_epoch_step = steps.counters()
    resumed_at_step = step
    runner.start(steps, start_epoch, start_epoch_step)
    hooks: List[Hook] = [SinkHook(sink)] if (sink is not None and chief) else []
    hooks += [CheckpointHook(workdir, steps), stop_hook(strategy)]
    hooks += _model_hooks(tc, steps, runner, warm, start_epoch)
    if chief and progress.wanted():
        hooks.append(progress.ProgressHook(tc.epochs, steps_per_epoch))
    hooks += extra_hooks + monitoring.hooks_from_config(
        tc, workdir.path, chief=chief, model=steps.model, optimizer=steps.optimizer
    )
    # Optimizer steps per compiled call; 1 while profiling, so the trace starts and stops at its exact steps.
    schedule = Schedule(
        tc.epochs,
        steps_per_epoch,
        tc.log_every_steps,
        tc.checkpoint_every_steps,
        1 if tc.profile_steps else tc.steps_per_execution,
    )
    done = Loop(runner, steps, hooks, schedule).fit(start_epoch, start_epoch_step, step)
    best_epoch = steps.early_stopping.restore_best() if steps.early_stopping else None
    steps.finalize_weights()
    history = workdir.history
    final = _final_metrics(history, runner, best_epoch)
    weights = _export(task, steps.model, workdir)
    workdir.close()
    return TrainResult(
        history=history,
        final_metrics=final,
        saved_model_dir=workdir.saved_model_dir,
        checkpoint_dir=workdir.checkpoint_dir,
        strategy=distribute.describe_strategy(strategy),
        num_params=int(steps.model.count_params()),
        global_batch_size=task.global_batch,
        steps=done.step,
        train_seconds=done.train_seconds,
        precision=policy,
        epochs_run=done.epochs_run,
        initial_epoch=start_epoch,
        resumed=resumed,
        resumed_at_step=resumed_at_step,
        weights_sha256=weights,
        workdir=workdir,
        warm_start=warm,
        early_stopping=steps.early_stopping.summary() if steps.early_stopping else None,
    )
