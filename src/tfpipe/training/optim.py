"""Learning-rate schedules and the optimizer factory (train.optimizer, train.lr_schedule, train.lr_scaling)."""

from __future__ import annotations

import math

import keras
import tensorflow as tf

from tfpipe import precision


class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up from `start` x peak (0: from ~0) to `peak` over `warmup_steps`, then constant, cosine or
    (onecycle) linear decay to `end` x peak at `total_steps`."""

    def __init__(
        self,
        peak: float,
        total_steps: int,
        warmup_steps: int = 0,
        decay: str = "constant",
        start: float = 0.0,
        end: float = 0.0,
    ):
        if decay not in ("constant", "cosine", "onecycle"):
            raise ValueError(f"decay={decay!r}: expected 'constant', 'cosine' or 'onecycle'")
        self.peak = float(peak)
        self.total_steps = int(max(total_steps, 1))
        self.warmup_steps = int(max(warmup_steps, 0))
        self.decay = decay
        self.start = float(start)
        self.end = float(end)

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        peak = tf.constant(self.peak, tf.float32)
        span = float(max(self.total_steps - self.warmup_steps, 1))
        progress = tf.clip_by_value((step - self.warmup_steps) / span, 0.0, 1.0)
        if self.decay == "cosine":
            after = peak * (self.end + (1.0 - self.end) * 0.5 * (1.0 + tf.cos(math.pi * progress)))
        elif self.decay == "onecycle":  # the triangle of fast-CIFAR training (Smith; Page's ResNet-9)
            after = peak * (1.0 - (1.0 - self.end) * progress)
        else:
            after = peak
        if self.warmup_steps == 0:
            return after
        warm = peak * (self.start + (1.0 - self.start) * (step + 1.0) / float(self.warmup_steps))
        return tf.where(step < self.warmup_steps, warm, after)

    def get_config(self):
        return {
            "peak": self.peak,
            "total_steps": self.total_steps,
            "warmup_steps": self.warmup_steps,
            "decay": self.decay,
            "start": self.start,
            "end": self.end,
        }


def lr_scale(train_cfg, replicas: int) -> float:
    """train.lr_scaling: none -> 1; linear -> the number of replicas (Goyal et al. 2017, with warm-up)."""
    return float(max(int(replicas), 1)) if train_cfg.lr_scaling == "linear" else 1.0


def total_steps(train_cfg, steps_per_epoch: int) -> int:
    """Optimizer steps in the whole run (what the schedule and lookahead's ramp span)."""
    return max(int(steps_per_epoch) * int(train_cfg.epochs), 1)


def make_lr_schedule(train_cfg, steps_per_epoch: int, scale: float = 1.0) -> WarmupSchedule:
    total = total_steps(train_cfg, steps_per_epoch)
    warmup = int(round(train_cfg.lr_schedule.warmup_epochs * steps_per_epoch))
    peak = train_cfg.optimizer.learning_rate * scale
    sched = train_cfg.lr_schedule
    return WarmupSchedule(
        peak, total, min(warmup, total), sched.name, sched.start_fraction, sched.end_fraction
    )


def make_optimizer(train_cfg, learning_rate, policy: str = "float32") -> keras.optimizers.Optimizer:
    """adam | adamw | sgd(momentum), decoupled weight decay when > 0; wrapped in a
    LossScaleOptimizer for mixed_float16. Create it under strategy.scope()."""
    opt = train_cfg.optimizer
    wd = opt.weight_decay or None
    # The moving average of the weights (train.optimizer.ema_momentum), copied into them by finalize_weights.
    ema = dict(use_ema=True, ema_momentum=float(opt.ema_momentum)) if opt.ema_momentum else {}
    if opt.name == "adam":
        optimizer = keras.optimizers.Adam(learning_rate=learning_rate, weight_decay=wd, **ema)
    elif opt.name == "adamw":
        optimizer = keras.optimizers.AdamW(learning_rate=learning_rate, weight_decay=opt.weight_decay, **ema)
    elif opt.name == "sgd":
        optimizer = keras.optimizers.SGD(
            learning_rate=learning_rate,
            momentum=opt.momentum,
            weight_decay=wd,
            nesterov=bool(opt.nesterov),
            **ema,
        )
    else:
        raise ValueError(f"train.optimizer.name={opt.name!r}: valid names: adam, adamw, sgd")
    if precision.needs_loss_scaling(policy):
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer
