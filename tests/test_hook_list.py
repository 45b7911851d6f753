"""The loop calls its hooks through `tfpipe.hooks.HookList` (issue 53): one typed method per event, each
calling that method of every hook in order, so mypy finds a misspelt event. What each event passes, and in
which order the hooks get it, is what the loop passed before (when it called hooks by name)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tfpipe import config, training
from tfpipe.hooks import Hook, HookList

ROOT = Path(__file__).resolve().parents[1]
# prepared_image: 21 train examples -> 5 steps an epoch at batch 4; a log every 2 steps, a checkpoint every 3
TINY = (
    "model.filters=[8,8]",
    "model.dense_units=16",
    "train.batch_size_per_replica=4",
    "train.epochs=2",
    "train.log_every_steps=2",
    "train.checkpoint_every_steps=3",
    "train.max_checkpoints_to_keep=10",
    "train.tensorboard=false",
    "train.steps_per_execution=1",  # a call per step: every step's boundary events
)
EVENTS = sorted(name for name in vars(Hook) if name.startswith("on_"))


class Recorder(Hook):
    """Overrides every event (and the loop's two questions), appending (tag, event, args) to `calls`."""

    def __init__(self, tag: str, calls: list):
        self.tag, self.calls = tag, calls

    def on_train_begin(self, step: int) -> None:
        self.calls.append((self.tag, "begin", step))

    def on_steps_end(self, step: int) -> None:
        self.calls.append((self.tag, "steps", step))

    def on_log(self, step: int, metrics) -> None:
        self.calls.append((self.tag, "log", step, sorted(metrics)))

    def on_checkpoint(self, step: int, epoch: int, epoch_step: int) -> None:
        self.calls.append((self.tag, "checkpoint", step, epoch, epoch_step))

    def on_epoch_end(self, epoch: int, row) -> None:
        self.calls.append((self.tag, "epoch", epoch, sorted(row)))

    def on_train_end(self) -> None:
        self.calls.append((self.tag, "end"))

    def finished(self) -> bool:
        self.calls.append((self.tag, "finished?"))
        return False

    def stop_requested(self) -> bool:
        self.calls.append((self.tag, "stop?"))
        return False


def test_the_recorder_overrides_every_event_of_hook_and_the_list_has_each():
    """A new event on Hook without its HookList method (or without the recorder seeing it) fails here."""
    assert EVENTS == [
        "on_checkpoint",
        "on_epoch_end",
        "on_log",
        "on_steps_end",
        "on_train_begin",
        "on_train_end",
    ]
    for name in EVENTS:
        assert name in vars(Recorder), name
        assert name in vars(HookList), name


def test_each_event_goes_to_every_hook_in_order_with_its_arguments():
    calls: list = []
    hooks = HookList([Recorder("a", calls), Recorder("b", calls)])
    hooks.on_train_begin(7)
    hooks.on_steps_end(8)
    hooks.on_log(8, {"train_loss": 1.0})
    hooks.on_checkpoint(8, 1, 3)
    hooks.on_epoch_end(1, {"val_loss": 2.0})
    hooks.on_train_end()
    assert calls == [
        (tag, *call)
        for call in [
            ("begin", 7),
            ("steps", 8),
            ("log", 8, ["train_loss"]),
            ("checkpoint", 8, 1, 3),
            ("epoch", 1, ["val_loss"]),
            ("end",),
        ]
        for tag in ("a", "b")
    ]


def test_finished_and_stopper_ask_the_hooks_in_order():
    class Stopping(Hook):
        def finished(self) -> bool:
            return True

        def stop_requested(self) -> bool:
            return True

    calls: list = []
    first, stopping, last = Recorder("a", calls), Stopping(), Recorder("b", calls)
    assert HookList([first, last]).finished() is False and HookList([first, last]).stopper() is None
    assert calls == [("a", "finished?"), ("b", "finished?"), ("a", "stop?"), ("b", "stop?")]
    calls.clear()
    assert HookList([first, stopping, last]).stopper() is stopping and calls == [("a", "stop?")]
    assert HookList([first, stopping, last]).finished() is True


def _epoch(epoch: int, first_step: int) -> list:
    """One 5-step epoch's calls from one hook, steps counted from `first_step`."""
    step_keys = sorted(training.STEP_METRICS)
    calls: list = []
    for step in range(first_step, first_step + 5):
        calls.append(("steps", step))
        if step % 2 == 0:
            calls.append(("log", step, step_keys))
        calls.append(("stop?",))
        if step % 3 == 0 and step != first_step + 4:  # the epoch's last step is saved by the epoch's end
            calls.append(("checkpoint", step, epoch, step - first_step + 1))
    last = first_step + 4
    if last % 2:  # the epoch's tail since the last log
        calls.append(("log", last, step_keys))
    row = sorted(["epoch", *training.EPOCH_METRICS])
    return [*calls, ("epoch", epoch, row), ("checkpoint", last, epoch + 1, 0), ("stop?",)]


@pytest.mark.slow  # trains a model for 2 epochs
def test_a_real_training_calls_every_event_of_every_hook_in_order(prepared_image, tmp_path):
    calls: list = []
    cfg = config.compose(list(TINY), config_dir=ROOT / "conf")
    training.train(
        cfg,
        prepared_dir=prepared_image.prepared_dir,
        output_dir=tmp_path / "out",
        hooks=[Recorder("a", calls), Recorder("b", calls)],
    )
    one_hook = [("begin", 0), ("finished?",), *_epoch(0, 1), ("finished?",), *_epoch(1, 6), ("end",)]
    per_hook = {tag: [call[1:] for call in calls if call[0] == tag] for tag in ("a", "b")}
    assert per_hook["a"] == per_hook["b"] == one_hook
    # every event reaches the hooks in their order: b's call right after a's
    assert [call[0] for call in calls] == ["a", "b"] * len(one_hook)
