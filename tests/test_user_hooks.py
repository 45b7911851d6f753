"""A team's own hooks from the config (issue 34, item 3): `train.hooks` lists `_target_` entries naming
`tfpipe.hooks.Hook` subclasses, built with Hydra's instantiate and called at the loop's boundaries after the built-in
hooks; anything else is refused in one line before the MLflow run opens, and an audit re-run calls only hooks that
are code of the recorded commit."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tfpipe import config, hooks, stages, training
from tfpipe.commands import entry
from tfpipe.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
SMALL = ("model.filters=[8,8]", "model.dense_units=16", "train.batch_size_per_replica=4")


class Recorder(hooks.Hook):
    """Writes the calls it gets, one JSON line each, to `path` (a team's hook: it takes its own arguments)."""

    def __init__(self, path: str, tag: str = "recorder"):
        self.path, self.tag = Path(path), tag

    def _write(self, *call) -> None:
        with self.path.open("a") as fh:
            fh.write(json.dumps([self.tag, *call]) + "\n")

    def on_train_begin(self, step: int) -> None:
        self._write("begin", step)

    def on_epoch_end(self, epoch: int, row) -> None:
        self._write("epoch", epoch, sorted(row))

    def on_train_end(self) -> None:
        self._write("end")


def _cfg(*overrides: str):
    return config.compose([*SMALL, *overrides], config_dir=ROOT / "conf")


def _hooked(path: Path, extra: str = "") -> str:
    return f"train.hooks=[{{_target_:test_user_hooks.Recorder,path:{path}{extra}}}]"


@pytest.mark.slow  # trains a model for epochs
def test_a_configured_hook_is_built_with_its_arguments_and_called_at_each_epoch(prepared_image, tmp_path):
    calls = tmp_path / "calls.jsonl"
    cfg = _cfg("train.epochs=2", _hooked(calls, ",tag:mine"))
    (built,) = hooks.from_config(cfg.train.hooks)
    assert isinstance(built, Recorder) and built.tag == "mine" and built.path == calls
    training.train(cfg, prepared_dir=prepared_image.prepared_dir, output_dir=tmp_path / "out", hooks=[built])
    lines = [json.loads(line) for line in calls.read_text().splitlines()]
    assert [line[1:3] for line in lines] == [["begin", 0], ["epoch", 0], ["epoch", 1], ["end"]]
    assert {"val_loss", "val_accuracy", "epoch_train_loss"} <= set(lines[1][3])


@pytest.mark.parametrize(
    "hook, expected",
    [
        (
            "[{_target_:os.system,command:true}]",
            "train.hooks[0]._target_=os.system: not a subclass of tfpipe.hooks.Hook",
        ),
        (
            "[{_target_:no_such_package.hooks.Notify}]",
            "train.hooks[0]._target_=no_such_package.hooks.Notify: cannot be imported",
        ),
        ("[{_target_:test_user_hooks.Recorder}]", "train.hooks[0] (test_user_hooks.Recorder): "),
    ],
)
def test_a_bad_hook_is_one_line(hook, expected):
    with pytest.raises(ConfigError) as info:
        hooks.from_config(_cfg(f"train.hooks={hook}").train.hooks)
    assert str(info.value).startswith(expected) and "\n" not in str(info.value)


def test_an_entry_without_target_is_refused_when_the_config_is_read():
    with pytest.raises(
        ConfigError, match=r"train.hooks\[0\]=\{'every': 2\}: expected a mapping with _target_"
    ):
        _cfg("train.hooks=[{every:2}]")


def test_the_train_stage_refuses_a_bad_hook_before_the_run_opens(
    prepared_image, tmp_path, capsys, monkeypatch
):
    """`python -m pipeline.train` (in-process): exit 2, one line naming the entry; no MLflow store was written."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    shutil.copytree(ROOT / "conf", tmp_path / "conf")
    argv = [
        *SMALL,
        "data.source=directory",
        f"data.output_dir={prepared_image.prepared_dir}",
        "train.hooks=[{_target_:os.system,command:touch}]",
    ]
    code = entry.cli("train", stages.run_train, "test", argv, tmp_path, configure_logging=False)
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("train: error: train.hooks[0]._target_=os.system: not a subclass")
    assert not (tmp_path / "mlflow.db").exists()
