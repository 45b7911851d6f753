"""The three pipeline stages as library functions: each wires the modules for one DVC stage (evaluate's in
`tfpipe.evaluate_stage`, named here too).

`pipeline/*.py` parse arguments and call one of these; tests call them directly. Output paths
are fixed here and mirrored in dvc.yaml (tests/test_dvc_yaml.py keeps the two in step). What the train stage
records on its run is `tfpipe.records`'s: the stage calls it when the run opens and when training is done.
"""

from __future__ import annotations

import logging
from pathlib import Path

from tfpipe import files, phases, tfconfig  # tfconfig: whether this process is the chief (no TensorFlow)
from tfpipe.config import Config
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
    from tfpipe import data, provenance, records, tracking, training
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

    record = records.Training(
        cfg=cfg,
        root=root,
        prepared=prepared,
        manifest=manifest,
        digest=digest,
        provenance=prov,
        init_tags=init_tags,
        workdir=workdir,
    )
    with phases.phase("open_run"):
        run = tracking.start_run(cfg, root, stage="train", is_chief=chief, resume_run_id=resume_run_id)
    with run:
        if chief:
            workdir.mark_started(fingerprint, run.run_id)
        records.opened(run, record)  # params, config, tags, the data: before the first step
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
            records.finished(run, record, result)
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
