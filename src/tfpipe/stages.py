"""The three pipeline stages as library functions: each wires the modules for one DVC stage (evaluate's in
`tfpipe.evaluate_stage`, named here too).

`pipeline/*.py` parse arguments and call one of these; tests call them directly. Output paths
are fixed here and mirrored in dvc.yaml (tests/test_dvc_yaml.py keeps the two in step).
"""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path

from tfpipe import files, phases, tfconfig  # tfconfig: whether this process is the chief (no TensorFlow)
from tfpipe.config import Config
from tfpipe.evaluate_stage import prefixed as _prefixed
from tfpipe.evaluate_stage import register as _register  # noqa: F401 - also read as stages._register
from tfpipe.evaluate_stage import run_evaluate  # noqa: F401 - the evaluate stage, in a module of its own
from tfpipe.layout import (  # noqa: F401 - the paths, also read as stages.* by callers
    CONFUSION_CSV,
    CONFUSION_PNG,
    DATA_METRICS,
    EVAL_METRICS,
    EVAL_PER_CLASS,
    HISTORY_CSV,
    MODELS_DIR,
    TRAIN_METRICS,
    model_dir,
)
from tfpipe.layout import rooted as _rooted
from tfpipe.tuning.hook import hooks_from_env as tuning_hooks
from tfpipe.workdir import SHELF, WorkDir
from tfpipe.workdir import fingerprint as training_fingerprint

log = logging.getLogger(__name__)


def run_prepare(cfg: Config, root: Path) -> dict:
    """Source data -> data/prepared/<dataset>/ (TFRecord shards, manifest.json, vocab.txt)."""
    from tfpipe import data

    rooted = _rooted(cfg, root)
    manifest = data.prepare(rooted)
    counts = {split: info["num_examples"] for split, info in manifest["splits"].items()}
    log.info("prepared %s from %s: %s", cfg.dataset.name, rooted.data.source, counts)
    files.write_json(root / DATA_METRICS, _data_headline(rooted, counts), sort_keys=True)
    return manifest


def _data_headline(cfg: Config, counts: dict) -> dict:
    """The data report's headline figures, or the example counts alone when no report was written."""
    from tfpipe.data.report import headline, load_report

    report = load_report(cfg.data.output_dir)
    return headline(report) if report else {f"examples_{split}": n for split, n in counts.items()}


def run_train(cfg: Config, root: Path):
    """Prepared data -> trained model, SavedModel, train metrics and history, one MLflow run."""
    from tfpipe import data, provenance, tracking, training
    from tfpipe import hooks as loop_hooks

    composed, cfg = cfg, _rooted(cfg, root)
    chief = tfconfig.is_chief()  # from TF_CONFIG; True for single-process strategies
    prepared = Path(cfg.data.output_dir)
    manifest = data.load_manifest(prepared)
    data.verify_shards(prepared, manifest)  # a truncated or altered shard stops us before training
    digest = data.manifest_digest(prepared)
    prov = provenance.collect(root)

    init_weights, init_tags = _warm_start_source(cfg, root)  # before the run opens: a bad source is one line
    own_hooks = loop_hooks.from_config(cfg.train.hooks)  # before the run opens too: a bad hook is one line
    training.preflight(
        cfg, manifest, prepared
    )  # the data, a team's builder: checked before anything is touched
    workdir = WorkDir(model_dir(cfg, root), shelf_root=tracking.store_root(root) / SHELF)
    fingerprint = training_fingerprint(composed, digest)  # project-relative: the same in a DVC temp copy
    resume_run_id = workdir.prepare(fingerprint) if chief else None  # the interrupted training's run

    with phases.phase("open_run"):
        run = tracking.start_run(cfg, root, stage="train", is_chief=chief, resume_run_id=resume_run_id)
    with run:
        if chief:
            workdir.mark_started(fingerprint, run.run_id)
        run.log_params(cfg.flat())
        run.log_config(cfg.to_dict())
        run.set_tags({**tracking.run_tags(cfg, None, digest, prov), **init_tags})
        run.log_dataset(manifest, digest, prepared, context="train")
        _log_data_report(run, prepared)
        # a tuner's trial reports its epochs to the study (TFPIPE_TUNE_TRIAL); the team's own hooks before
        hooks = own_hooks + tuning_hooks(cfg.train.epochs)
        with phases.phase("training"):  # the model built, the epochs, the export
            result = training.train(
                cfg,
                prepared_dir=prepared,
                output_dir=workdir.path,
                sink=run,
                hooks=hooks,
                init_weights=init_weights,
                workdir=workdir if chief else None,  # non-chief workers write scratch folders of their own
            )
        if not chief:  # only the chief writes the run, metrics, plots and state; workers used scratch dirs
            return result
        with phases.phase("log_training"):
            _log_training(run, cfg, result, workdir, root, prepared, manifest, digest, prov)
            if cfg.tracking.log_model:  # each kept checkpoint a logged model too, beside the served one
                tracking.log_checkpoint_models(run, workdir.kept_checkpoints(), result.early_stopping)
        # last: a full disk or a failed upload before this leaves the run to resume (at its final step)
        workdir.mark_complete(fingerprint, result.weights_sha256)
    log.info("trained: %s, %s; the run: %s", TRAIN_METRICS, HISTORY_CSV, tracking.where(run, root))
    return result


def _warm_start_source(cfg: Config, root: Path) -> tuple:
    """train.init_from -> ({weight path: array}, init.* tags), or (None, {}) when training from scratch."""
    if not cfg.train.init_from:
        return None, {}
    import tempfile

    from tfpipe.models import warmstart
    from tfpipe.tracking import warmstart as sources

    with tempfile.TemporaryDirectory(prefix="tfpipe-init-") as tmp:
        local, tags = sources.resolve(cfg.train.init_from, cfg.tracking, root, Path(tmp))
        weights = warmstart.read_source(
            local if local.is_absolute() else root / local, given=tags["init.from"]
        )
    return weights, {**tags, "init.sha256": warmstart.digest(weights)}


def _log_data_report(run, prepared: Path) -> None:
    """report.json as an artifact (data/, redacted as every uploaded text) and its headline figures as `data.*`
    run tags."""
    from tfpipe.data.report import REPORT_FILE, headline, load_report

    report = load_report(prepared)
    if report is not None:
        run.log_dict(
            report, f"data/{REPORT_FILE}"
        )  # through the redactor: names and settings come from the data
        run.set_tags({f"data.{k}": v for k, v in headline(report).items()})


def _log_training(
    run,
    cfg: Config,
    result,
    workdir: WorkDir,
    root: Path,
    prepared: Path,
    manifest: dict,
    digest: str,
    prov: dict,
) -> None:
    """The chief's record of a finished training: tags, final metrics, reports, checkpoint, model."""
    from tfpipe import provenance, tracking

    run.set_tags(tracking.run_tags(cfg, result.strategy, digest, prov))
    if tfconfig.public_spec():  # jobs -> host:port only
        run.set_tags({"cluster_spec": json.dumps(tfconfig.public_spec(), sort_keys=True)})
    if result.weights_sha256:  # what `audit --rerun` compares for bit-identity
        run.set_tags({"weights.sha256": result.weights_sha256})
    run.set_tags({f"determinism.{k}": v for k, v in (result.determinism or {}).items()})
    if result.resumed:
        run.set_tags({"tfpipe.resumed_at_step": result.resumed_at_step})
    if result.warm_start:  # which layers the warm start filled, which kept their fresh initialisation
        run.set_tags({f"init.layers_{k}": ",".join(v)[:4000] or "-" for k, v in result.warm_start.items()})
    stopping = result.early_stopping or {}  # train.early_stopping's record (EarlyStopping.summary)
    final = {**_prefixed(result.final_metrics, "final_"), **stopping}  # also as params: what audit compares
    tracking.log_final_metrics(run, final, step=len(result.history))

    summary = {
        **result.final_metrics,
        **stopping,
        "train_seconds": result.train_seconds,
        "steps": result.steps,
        "global_batch_size": result.global_batch_size,
        "num_params": result.num_params,
    }
    with files.saving((root / TRAIN_METRICS).parent, TRAIN_METRICS):
        files.write_json(root / TRAIN_METRICS, summary, sort_keys=True)
    with files.saving((root / HISTORY_CSV).parent, HISTORY_CSV):
        _write_history(root / HISTORY_CSV, result.history)
    run.log_artifact(root / TRAIN_METRICS, "metrics")
    run.log_artifact(root / HISTORY_CSV, "plots")
    files_, prefix = result.workdir.latest_checkpoint()
    run.log_checkpoint_files(files_, prefix)
    run.log_provenance(prov)
    run.log_text(provenance.pip_freeze(), "provenance/pip_freeze.txt")  # the exact environment
    from tfpipe.monitoring import log_dir_for

    tensorboard_dir = log_dir_for(cfg.train, workdir.path)  # summaries + profiler trace of this run
    if tensorboard_dir.is_dir():
        run.log_artifacts(tensorboard_dir, "tensorboard")
    if cfg.tracking.log_model:  # the SavedModel is uploaded once: inside the logged model, or as saved_model/
        run.log_model(
            result.saved_model_dir,
            modality=cfg.dataset.modality,
            input_example=_input_example(prepared, manifest),
            class_names=manifest["class_names"],
        )
    else:
        tracking.log_saved_model_files(run, result.saved_model_dir)  # with its digest as a param


def run_all(cfg: Config, root: Path):
    """prepare (skipped when its output already matches the config), train, evaluate."""
    from tfpipe import data
    from tfpipe.errors import DataError

    try:
        up_to_date = data.is_up_to_date(_rooted(cfg, root))
    except DataError:
        up_to_date = False
    if up_to_date:
        log.info("prepared data in %s matches the config; skipping prepare", cfg.data.output_dir)
    else:
        run_prepare(cfg, root)
    run_train(cfg, root)
    return run_evaluate(cfg, root)


# ----------------------------------------------------------------------------- helpers


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


def _write_history(path: Path, history: list[dict]) -> None:
    keys = sorted({k for row in history for k in row}, key=lambda k: (k != "epoch", k))
    with files.atomic_open(path, newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=keys)
        writer.writeheader()
        writer.writerows(history)
