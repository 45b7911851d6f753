"""mixed_float16's dynamic loss scaling, through the train step the loop runs (tfpipe.training.steps.Steps).

SGD on purpose: its update is proportional to the gradient, so a gradient left scaled (or scaled without being
unscaled) shows in the weights; Adam divides by the gradient's own magnitude and would hide it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tfpipe import config, precision
from tfpipe.training.steps import Steps
from tfpipe.training.task import Task

ROOT = Path(__file__).resolve().parents[1]
BATCH = 4
SGD = (
    "model.filters=[8,8]",
    "model.dense_units=16",
    "model.dropout=0.0",  # no randomness between the two precisions' steps
    f"train.batch_size_per_replica={BATCH}",
    "train.optimizer.name=sgd",
    "train.optimizer.momentum=0.0",
    "train.optimizer.learning_rate=0.1",
)


def _steps(prepared_dir: Path, policy: str) -> tuple[Steps, tuple]:
    """Steps of the tiny cnn under `policy`, the same initial weights for every policy, and one train batch."""
    cfg = config.compose([*SGD, f"precision={policy}"], config_dir=ROOT / "conf")
    tf.keras.utils.set_random_seed(0)
    task = Task.from_prepared(cfg, prepared_dir, BATCH)
    steps = Steps(task, tf.distribute.get_strategy(), policy=policy, steps_per_epoch=5, lr_scale=1.0)
    task.fit_to_train_split(steps.model)
    batch = next(iter(task.dataset_fn("train", training=False)(tf.distribute.InputContext())))
    return steps, batch


def _weights(steps: Steps) -> list[np.ndarray]:
    return [np.array(v.numpy(), dtype=np.float64) for v in steps.model.trainable_variables]


@pytest.fixture
def float16_steps(prepared_image):
    with precision.policy_scope(config.PrecisionConfig(policy="mixed_float16")):
        yield _steps(prepared_image.prepared_dir, "mixed_float16")


def test_the_loss_scale_halves_after_an_overflow_and_skips_the_update(float16_steps):
    steps, batch = float16_steps
    opt = steps.optimizer
    opt.dynamic_scale.assign(2.0**40)  # scaled gradients overflow float16 for certain
    before = _weights(steps)
    steps.replica_train_step(batch)
    assert float(opt.dynamic_scale.numpy()) == 2.0**39
    assert all(np.array_equal(a, b) for a, b in zip(before, _weights(steps))), (
        "an overflowed step was applied"
    )


def test_the_loss_scale_doubles_after_dynamic_growth_steps_good_steps(float16_steps):
    steps, batch = float16_steps
    opt = steps.optimizer
    opt.dynamic_scale.assign(8.0)  # small: no overflow
    opt.step_counter.assign(opt.dynamic_growth_steps - 2)  # two good steps left before it grows
    steps.replica_train_step(batch)
    assert float(opt.dynamic_scale.numpy()) == 8.0
    steps.replica_train_step(batch)
    assert float(opt.dynamic_scale.numpy()) == 16.0


def test_a_scaled_float16_sgd_step_moves_the_weights_as_float32_does(prepared_image):
    """Loss scaled by 2^15 in the step and unscaled by the optimizer: the SGD update equals float32's within
    float16 rounding. Without the scaling in the step (or without the unscaling) it is 2^15 times off."""
    deltas = {}
    for policy in ("float32", "mixed_float16"):
        with precision.policy_scope(config.PrecisionConfig(policy=policy)):
            steps, batch = _steps(prepared_image.prepared_dir, policy)
            before = _weights(steps)
            steps.replica_train_step(batch)
            deltas[policy] = np.concatenate([(a - b).ravel() for a, b in zip(_weights(steps), before)])
            if policy == "mixed_float16":
                assert float(steps.optimizer.dynamic_scale.numpy()) == 2.0**15  # no overflow on this step
    reference, mixed = deltas["float32"], deltas["mixed_float16"]
    assert np.abs(reference).max() > 1e-4  # the step moved the weights
    ratio = np.linalg.norm(mixed) / np.linalg.norm(reference)
    cosine = mixed @ reference / (np.linalg.norm(mixed) * np.linalg.norm(reference))
    assert 0.9 < ratio < 1.1 and cosine > 0.99, (ratio, cosine)
