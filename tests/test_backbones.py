"""keras.applications backbones as image models (model=mobilenet_v3_small | efficientnet_b0), built with random
weights here (`model.pretrained=imagenet` downloads): uint8 in, probabilities out, trained and exported by the
train stage, and warm-started from a local export with a new head. Their bad config: test_bad_input_cli.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _cfg(*overrides):
    from tfpipe import config

    return config.compose(list(overrides), config_dir=ROOT / "conf")


@pytest.mark.parametrize(
    "name", ["mobilenet_v3_small", pytest.param("efficientnet_b0", marks=pytest.mark.slow)]
)
def test_a_backbone_takes_uint8_images_and_gives_probabilities(name):
    from tfpipe import models

    model = models.build_model(_cfg(f"model={name}"), num_classes=4)
    assert model.inputs[0].dtype == "uint8" and tuple(model.inputs[0].shape) == (None, 32, 32, 3)
    images = np.random.default_rng(0).integers(0, 256, (2, 32, 32, 3)).astype(np.uint8)
    probabilities = np.asarray(model(images, training=False))
    assert probabilities.shape == (2, 4)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)


@pytest.mark.slow
def test_a_backbone_trains_exports_and_warm_starts_a_new_head(prepared_image, tmp_path):
    """The train stage's training and export on the 3-class tiny images; then a 2-class model takes the whole
    backbone from that export (read back with NumPy alone) and keeps a fresh head."""
    from tfpipe import models, training
    from tfpipe.models import warmstart

    overrides = ["model=mobilenet_v3_small", "train.epochs=1", "train.batch_size_per_replica=4"]
    overrides += ["train.tensorboard=false", f"data.output_dir={prepared_image.prepared_dir}"]
    result = training.train(
        _cfg(*overrides), prepared_dir=prepared_image.prepared_dir, output_dir=tmp_path / "m"
    )
    assert (result.saved_model_dir / "saved_model.pb").is_file() and np.isfinite(
        result.final_metrics["val_loss"]
    )
    with np.load(result.saved_model_dir / warmstart.WEIGHTS_FILE) as archive:
        stored = {k: archive[k] for k in archive.files}
    fresh = models.build_model(_cfg("model=mobilenet_v3_small"), num_classes=2)
    report = warmstart.apply(fresh, warmstart.read_source(result.saved_model_dir))
    assert report == {"loaded": ["MobileNetV3Small"], "fresh": ["logits"]}
    for weight in fresh.get_layer("MobileNetV3Small").weights[:5]:
        np.testing.assert_array_equal(weight.numpy(), stored[weight.path])
