"""What the train stage records on its MLflow run, in one place: `opened` when the run opens, `finished` when the
chief's training is done. The stage calls each once; a new logged value is added here, with its row on
docs/reference/records.md (tests/test_records.py: the page lists every name these write, with every condition on;
nothing else in the stage writes to the run).

What it knows: which params, tags, metrics and artifacts a training's run carries, and in which order they are
written. The config and the tags that need no training go in before the first step, so a killed training's run
still holds what `tfpipe audit` reads; the outputs DVC tracks are written before they are uploaded; the model goes
last, as `Run.log_model` records the SavedModel's digest first and recognises its own upload after a kill.
What it does not: opening or closing the run (`tracking.start_run`, the stage), each step's metrics (the loop sends
them through the run, its sink), the evaluate stage's records (`evaluate_stage`), how a value travels (`tracking`:
secrets redacted, batches, a param logged once).
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tfpipe import files, phases, tfconfig
from tfpipe.config import Config
from tfpipe.layout import HISTORY_CSV, TRAIN_METRICS
from tfpipe.workdir import WorkDir

if TYPE_CHECKING:
    from tfpipe.tracking import Run  # MLflow: imported by the stage when it opens the run
    from tfpipe.training.trainer import TrainResult  # TensorFlow: imported when the stage trains


@dataclass(frozen=True)
class Training:
    """What the train stage knows of a training when its run opens: what `opened` and `finished` record."""

    cfg: Config  # rooted in the project
    root: Path  # the project
    prepared: Path  # the prepared data
    manifest: dict  # its manifest.json
    digest: str  # data.manifest_digest of it
    provenance: dict  # provenance.collect(root)
    init_tags: dict  # a warm start's init.* tags ({} from scratch)
    workdir: WorkDir  # the model's work directory (checkpoints, TensorBoard logs)


def opened(run: Run, training: Training) -> None:
    """Before the first step: the config as params and YAML, the standard tags, the data as the run's input."""
    from tfpipe import tracking

    cfg = training.cfg
    run.log_params(cfg.flat())
    run.log_config(cfg.to_dict())
    run.set_tags({**tracking.run_tags(cfg, None, training.digest, training.provenance), **training.init_tags})
    run.log_dataset(training.manifest, training.digest, training.prepared, context="train")
    data_report(run, training.prepared)


def data_report(run: Run, prepared: Path) -> None:
    """report.json as an artifact (data/, redacted as every uploaded text) and its headline figures as `data.*`
    run tags."""
    from tfpipe.data.report import REPORT_FILE, headline, load_report

    report = load_report(prepared)
    if report is not None:
        # through the redactor: names and settings come from the data
        run.log_dict(report, f"data/{REPORT_FILE}")
        run.set_tags({f"data.{k}": v for k, v in headline(report).items()})


def finished(run: Run, training: Training, result: TrainResult) -> None:
    """The chief's record of a finished training: tags, final figures, the outputs DVC tracks, the run's files,
    the model (last)."""
    from tfpipe import provenance, tracking
    from tfpipe.monitoring import log_dir_for

    cfg, root = training.cfg, training.root
    run.set_tags(_training_tags(cfg, result))
    tracking.log_final_metrics(run, _final_figures(result), step=len(result.history))
    _write_outputs(root, result)
    run.log_artifact(root / TRAIN_METRICS, "metrics")
    run.log_artifact(root / HISTORY_CSV, "plots")
    run.log_checkpoint_files(*training.workdir.latest_checkpoint())
    run.log_provenance(training.provenance)
    run.log_text(provenance.pip_freeze(), "provenance/pip_freeze.txt")  # the exact environment
    tensorboard_dir = log_dir_for(cfg.train, training.workdir.path)  # summaries + profiler trace of this run
    if tensorboard_dir.is_dir():
        run.log_artifacts(tensorboard_dir, "tensorboard")
    _model(run, training, result)


def _training_tags(cfg: Config, result: TrainResult) -> dict:
    """What training found out: the strategy it built, the cluster, the weights' digest, the determinism in force,
    a resume's step, a warm start's layers."""
    from tfpipe import determinism
    from tfpipe.tracking.tags import strategy_tags

    tags = strategy_tags(cfg, result.strategy)  # the rest of `run_tags` went in when the run opened
    if tfconfig.public_spec():  # jobs -> host:port only
        tags["cluster_spec"] = json.dumps(tfconfig.public_spec(), sort_keys=True)
    if result.weights_sha256:  # what `audit --rerun` compares for bit-identity
        tags["weights.sha256"] = result.weights_sha256
    tags.update(determinism.as_tags(result.determinism))
    if result.resumed:
        tags["tfpipe.resumed_at_step"] = result.resumed_at_step
    if result.warm_start:  # which layers the warm start filled, which kept their fresh initialisation
        tags.update({f"init.layers_{k}": ",".join(v)[:4000] or "-" for k, v in result.warm_start.items()})
    return tags


def _final_figures(result: TrainResult) -> dict:
    """final_<metric> and early stopping's record (EarlyStopping.summary): metrics and params (what audit compares)."""
    from tfpipe.evaluate_stage import prefixed

    return {**prefixed(result.final_metrics, "final_"), **(result.early_stopping or {})}


def _write_outputs(root: Path, result: TrainResult) -> None:
    """metrics/train.json and plots/history.csv, the train stage's outputs DVC tracks (each saved whole)."""
    summary = {
        **result.final_metrics,
        **(result.early_stopping or {}),
        "train_seconds": result.train_seconds,
        "steps": result.steps,
        "global_batch_size": result.global_batch_size,
        "num_params": result.num_params,
    }
    with files.saving((root / TRAIN_METRICS).parent, TRAIN_METRICS):
        files.write_json(root / TRAIN_METRICS, summary, sort_keys=True)
    with files.saving((root / HISTORY_CSV).parent, HISTORY_CSV):
        _write_history(root / HISTORY_CSV, result.history)


def _write_history(path: Path, history: list[dict]) -> None:
    keys = sorted({k for row in history for k in row}, key=lambda k: (k != "epoch", k))
    with files.atomic_open(path, newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=keys)
        writer.writeheader()
        writer.writerows(history)


def _model(run: Run, training: Training, result: TrainResult) -> None:
    """The SavedModel, uploaded once: inside the logged model (tracking.log_model), or as saved_model/ artifacts;
    its digest as a param either way."""
    from tfpipe import tracking

    if training.cfg.tracking.log_model:
        run.log_model(
            result.saved_model_dir,
            modality=training.cfg.dataset.modality,
            input_example=_input_example(training.prepared, training.manifest),
            class_names=training.manifest["class_names"],
        )  # then each kept checkpoint a logged model too, linked to its step's metrics
        tracking.log_checkpoint_models(run, training.workdir.kept_checkpoints(), result.early_stopping)
    else:
        tracking.log_saved_model_files(run, result.saved_model_dir)


@phases.phase("input_example")
def _input_example(prepared: Path, manifest: dict):
    """Two raw test examples (uint8 images or strings), as the served model receives them."""
    from tfpipe import data

    ds = data.make_dataset(prepared, "test", batch_size=2, training=False, seed=0, cache=False)
    features, _ = next(iter(ds))
    array = features.numpy()
    if manifest["modality"] == "text":
        return [t.decode("utf-8") for t in array]
    return array
