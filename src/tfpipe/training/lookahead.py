"""Lookahead as airbench94 uses it (train.optimizer.lookahead_every): slow copies of every float variable of the
model (weights and BatchNorm statistics); every `every` optimizer steps they move toward the trained ("fast")
values by 1 - decay and the fast values are reset to them, with decay = momentum^every x (step / total)^3
(no averaging early, momentum^every at the end); the run ends on the slow copies.

Written here because neither Keras nor TensorFlow has it: Keras' `use_ema` averages trainable variables only and
never resets the fast ones, and TensorFlow Addons' Lookahead (unmaintained) has no BatchNorm statistics nor ramp."""

from __future__ import annotations

import tensorflow as tf


class Lookahead:
    """Create under `strategy.scope()`; `sync(step)` inside the compiled train call in cross-replica context
    (after the step's optimizer update); `checkpointed()` goes into the checkpoint so a resume continues it."""

    def __init__(self, model, every: int, momentum: float, total_steps: int):
        self.every = int(every)
        self.momentum = float(momentum)
        self.total_steps = float(max(int(total_steps), 1))
        # The tf.Variables behind the model's float Keras variables (not the integer RNG states).
        self.fast = [v.value for v in model.variables if "float" in str(v.dtype)]
        self.slow = [tf.Variable(v, trainable=False, name=f"lookahead_{i}") for i, v in enumerate(self.fast)]

    @classmethod
    def from_config(cls, model, train_cfg, total_steps: int):
        """train.optimizer.lookahead_every > 0: a Lookahead over `model`; else None."""
        opt = train_cfg.optimizer
        if not opt.lookahead_every:
            return None
        return cls(model, opt.lookahead_every, opt.lookahead_momentum, total_steps)

    def reset(self) -> None:
        """The slow copies take the model's values (once its starting weights are set)."""
        for slow, fast in zip(self.slow, self.fast):
            slow.assign(fast)

    def decay(self, step):
        """The slow copies' weight at global optimizer step `step`."""
        progress = tf.cast(step, tf.float32) / self.total_steps
        return (self.momentum**self.every) * progress**3

    def sync(self, step) -> None:
        """At every `every`-th step: slow <- decay slow + (1 - decay) fast (exactly fast at decay 0), then fast <- slow."""
        step = tf.cast(step, tf.int64)
        tf.cond(tf.equal(step % self.every, 0), lambda: self._move(self.decay(step)), lambda: tf.constant(0))

    def _move(self, decay):
        for slow, fast in zip(self.slow, self.fast):
            slow.assign(decay * slow + (1.0 - decay) * fast)
            fast.assign(slow)
        return tf.constant(0)

    def finalize(self) -> None:
        """The run's end: the model takes the slow copies (airbench's last update with decay 1)."""
        for slow, fast in zip(self.slow, self.fast):
            fast.assign(slow)

    def checkpointed(self) -> dict:
        return {str(i): v for i, v in enumerate(self.slow)}
