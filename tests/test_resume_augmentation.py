"""Resume of a model with random augmentation: resnet's flip + crop draw from Keras SeedGenerator state, which
the checkpoint carries, so a run stopped by SIGTERM mid-epoch and resumed ends bit-identical."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tfpipe import config, interrupts, training

ROOT = Path(__file__).resolve().parents[1]
RESNET = (
    "model=resnet",
    "model.filters=[4,8]",  # tiny, but the same augmentation layers as the preset's
    "model.augment=true",
    "model.dropout=0.2",
    "train.batch_size_per_replica=4",
    "train.epochs=3",
    "train.log_every_steps=1",
    "train.checkpoint_every_steps=100",
    "precision=float32",
)


class SignalAtStep:
    def __init__(self, at: int):
        self.at = at

    def log_metrics(self, metrics, step):
        if "train_loss" in metrics and step == self.at:
            signal.raise_signal(signal.SIGTERM)


@pytest.mark.slow
def test_a_resumed_resnet_with_augmentation_is_bit_identical(prepared_image, tmp_path):
    cfg = config.compose(list(RESNET), config_dir=ROOT / "conf")
    prepared = prepared_image.prepared_dir
    reference = training.train(cfg, prepared_dir=prepared, output_dir=tmp_path / "reference")

    out = tmp_path / "interrupted"
    with interrupts.graceful_stop(), pytest.raises(interrupts.Interrupted):
        training.train(cfg, prepared_dir=prepared, output_dir=out, sink=SignalAtStep(7))  # mid-epoch 1
    resumed = training.train(cfg, prepared_dir=prepared, output_dir=out)
    assert resumed.resumed and resumed.resumed_at_step == 7
    assert resumed.weights_sha256 == reference.weights_sha256
