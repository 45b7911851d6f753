"""Progress bars: TFPIPE_PROGRESS=auto draws on a terminal only, bar always, log never; the train stage's bar
counts the steps of the whole training by epoch, the evaluate stage's the test batches; a bad value is one line."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from tfpipe import progress
from tfpipe.errors import UserError

ROOT = Path(__file__).resolve().parents[1]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    "mode, stream, expected",
    [
        ("auto", _Terminal(), True),
        ("auto", io.StringIO(), False),
        ("bar", io.StringIO(), True),
        ("log", _Terminal(), False),
    ],
)
def test_the_mode_and_the_terminal_decide(monkeypatch, mode, stream, expected):
    monkeypatch.setenv(progress.ENV, mode)
    assert progress.wanted(stream) is expected


def test_a_bad_mode_is_one_line(monkeypatch):
    monkeypatch.setenv(progress.ENV, "fancy")
    with pytest.raises(UserError, match=r"^TFPIPE_PROGRESS='fancy': allowed: auto, bar, log$"):
        progress.wanted()


def test_the_hook_counts_steps_by_epoch_with_loss_and_validation():
    out = _Terminal()
    hook = progress.ProgressHook(epochs=2, steps_per_epoch=5, stream=out)
    hook.on_train_begin(0)
    hook.on_steps_end(5)
    hook.on_log(5, {"train_loss": 0.5, "examples_per_sec": 1234.0})
    hook.on_epoch_end(0, {"val_loss": 0.25, "val_accuracy": 0.75})
    hook.on_steps_end(10)
    hook.on_train_end()
    text = out.getvalue()
    assert "train epoch 2/2" in text and "10/10" in text and "val_loss=0.2500" in text


@pytest.mark.slow  # trains a model for epochs
@pytest.mark.parametrize("mode", ["bar", "log"])
def test_train_and_evaluate_draw_only_when_asked(
    prepared_image, tmp_path, make_config, capsys, monkeypatch, mode
):
    from tfpipe import evaluation, training

    monkeypatch.setenv(progress.ENV, mode)
    cfg = make_config(
        "experiment=smoke",
        "model.filters=[4]",
        "train.tensorboard=false",
        "train.epochs=2",
        "train.batch_size_per_replica=4",
    )
    result = training.train(cfg, prepared_dir=prepared_image.prepared_dir, output_dir=tmp_path / "m")
    evaluation.evaluate(result.saved_model_dir, prepared_image.prepared_dir, batch_size=4)
    err = capsys.readouterr().err
    steps = result.steps
    drawn = "train epoch 2/2" in err and f"{steps}/{steps}" in err and "evaluate" in err
    assert drawn == (mode == "bar"), err[-2000:]
