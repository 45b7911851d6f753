"""The `train` section's schema: optimisation, checkpoints, logging and monitoring."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional

from tfpipe import choices, strategies
from tfpipe.config.checks import choice, non_negative, positive
from tfpipe.errors import ConfigError


@dataclass
class OptimizerConfig:
    name: str = "adam"
    learning_rate: float = 1e-3
    weight_decay: float = 0.0
    momentum: float = 0.9
    nesterov: bool = False  # sgd only
    ema_momentum: float = (
        0.0  # > 0: the run ends on an exponential moving average of the weights (Keras use_ema)
    )
    lookahead_every: int = 0  # > 0: airbench's lookahead every this many steps (training.lookahead); 0: off
    lookahead_momentum: float = 0.95  # lookahead's per-step momentum (the slow weights' decay ramps up to it)

    def check(self) -> None:
        choice("train.optimizer.name", self.name, choices.OPTIMIZERS)
        positive("train.optimizer.learning_rate", self.learning_rate)
        non_negative("train.optimizer.weight_decay", self.weight_decay)
        non_negative("train.optimizer.momentum", self.momentum)
        if not 0.0 <= self.ema_momentum < 1.0:
            raise ConfigError(
                f"train.optimizer.ema_momentum={self.ema_momentum!r}: must be in [0, 1) (0: off)"
            )
        non_negative("train.optimizer.lookahead_every", self.lookahead_every)
        if not 0.0 <= self.lookahead_momentum < 1.0:
            raise ConfigError(
                f"train.optimizer.lookahead_momentum={self.lookahead_momentum!r}: must be in [0, 1)"
            )
        if self.lookahead_every and self.ema_momentum:
            raise ConfigError(
                f"train.optimizer.lookahead_every={self.lookahead_every}: the run ends on one average; "
                "set train.optimizer.ema_momentum=0 (or lookahead_every=0)"
            )


@dataclass
class LRScheduleConfig:
    name: str = "constant"
    warmup_epochs: float = 0.0
    start_fraction: float = 0.0  # the warm-up starts at this fraction of the peak (0: from ~0)
    end_fraction: float = 0.0  # cosine / onecycle decay to this fraction of the peak (0: to 0)

    def check(self, epochs: int) -> None:
        choice("train.lr_schedule.name", self.name, choices.LR_SCHEDULES)
        non_negative("train.lr_schedule.warmup_epochs", self.warmup_epochs)
        for key in ("start_fraction", "end_fraction"):
            value = getattr(self, key)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"train.lr_schedule.{key}={value!r}: must be in [0, 1]")
        if self.warmup_epochs > epochs:
            raise ConfigError(
                f"train.lr_schedule.warmup_epochs={self.warmup_epochs!r}: must be <= train.epochs ({epochs})"
            )


@dataclass
class EarlyStoppingConfig:
    monitor: Optional[str] = None  # a validation metric (val_loss | val_accuracy); None: off
    mode: str = "auto"  # min | max | auto (max for accuracy, min for loss)
    patience: int = 3  # epochs without an improvement of more than min_delta before training stops
    min_delta: float = 0.0  # the smallest change that counts as an improvement
    restore_best_weights: bool = True  # the export (and logged model) holds the best epoch's weights

    def check(self, optimizer: OptimizerConfig) -> None:
        if self.monitor is None:
            return
        choice("train.early_stopping.monitor", self.monitor, choices.EARLY_STOPPING_MONITORS)
        choice("train.early_stopping.mode", self.mode, ("auto", "min", "max"))
        positive("train.early_stopping.patience", self.patience)
        non_negative("train.early_stopping.min_delta", self.min_delta)
        averaged = (
            "lookahead_every"
            if optimizer.lookahead_every
            else "ema_momentum"
            if optimizer.ema_momentum
            else ""
        )
        if self.restore_best_weights and averaged:
            raise ConfigError(
                f"train.early_stopping.restore_best_weights=true with train.optimizer.{averaged}: the run ends "
                f"on averaged weights, not an epoch's; set restore_best_weights=false (or {averaged}=0)"
            )


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
    init_from: Optional[str] = None  # warm start: runs:/ID/model, models:/NAME@ALIAS|/VERSION or a local path
    freeze_epochs: int = 0  # warm start: first N epochs train only the layers it did not load (the head)
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
    early_stopping: EarlyStoppingConfig = field(default_factory=EarlyStoppingConfig)
    hooks: List[Any] = field(
        default_factory=list
    )  # a team's Hook subclasses: [{_target_: pkg.mod.Class, **kwargs}]

    def check(self, cfg) -> None:
        for key in (
            "epochs",
            "batch_size_per_replica",
            "shuffle_buffer",
            "checkpoint_every_steps",
            "max_checkpoints_to_keep",
            "log_every_steps",
            "grad_accumulation_steps",
            "steps_per_execution",
        ):
            positive(f"train.{key}", getattr(self, key))
        positive("train.steps_per_epoch", self.steps_per_epoch, allow_none=True)
        choice("train.lr_scaling", self.lr_scaling, choices.LR_SCALINGS)
        choice("train.shard_policy", self.shard_policy, choices.SHARD_POLICIES)
        if not self.tensorboard_dir:
            raise ConfigError(
                "train.tensorboard_dir: empty; name the TensorBoard log folder (relative to models/<dataset>)"
            )
        non_negative("train.histogram_every_epochs", self.histogram_every_epochs)
        non_negative("train.freeze_epochs", self.freeze_epochs)
        if self.freeze_epochs and not self.init_from:
            raise ConfigError(
                f"train.freeze_epochs={self.freeze_epochs}: freezes the layers a warm start loads; "
                "set train.init_from too (or freeze_epochs=0)"
            )
        from tfpipe.monitoring import parse_profile_steps

        parse_profile_steps(self.profile_steps)  # 'FIRST-LAST', 1 <= FIRST <= LAST
        self._check_accumulation(cfg.strategy.name)
        if self.optimizer.lookahead_every and strategies.spec(cfg.strategy.name).coordinated:
            raise ConfigError(
                f"train.optimizer.lookahead_every={self.optimizer.lookahead_every}: not supported with "
                f"strategy.name={cfg.strategy.name} (asynchronous updates); allowed: 0"
            )
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ConfigError(f"train.label_smoothing={self.label_smoothing!r}: must be in [0, 1)")
        self.optimizer.check()
        self.lr_schedule.check(self.epochs)
        self.early_stopping.check(self.optimizer)
        for i, entry in enumerate(self.hooks):
            target = entry.get("_target_") if isinstance(entry, dict) else None
            if not isinstance(target, str) or "." not in target.strip("."):
                raise ConfigError(
                    f"train.hooks[{i}]={entry!r}: expected a mapping with _target_: package.module.HookClass "
                    "(and the hook's keyword arguments)"
                )

    def _check_accumulation(self, strategy: str) -> None:
        n = self.grad_accumulation_steps
        if n > 1 and strategies.spec(strategy).coordinated:
            raise ConfigError(
                f"train.grad_accumulation_steps={n}: not supported with strategy.name={strategy} "
                "(asynchronous updates); allowed: 1"
            )
        if self.steps_per_epoch is not None and self.steps_per_epoch % n:
            raise ConfigError(
                f"train.steps_per_epoch={self.steps_per_epoch}: must be a multiple of train.grad_accumulation_steps ({n})"
            )
