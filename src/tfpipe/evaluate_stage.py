"""The evaluate stage (`run_evaluate`, also `stages.run_evaluate`): the SavedModel, loaded from disk, scored on the
test split, its reports written and logged into the train run.

Everything that can refuse the stage runs in `preflight`, before the run is re-opened or a report written (issue
49: a refused command changes nothing): the export complete, the prepared data whole, its data report readable,
the run to re-open in the store (`tracking.precheck`), the model scored (it loads, has its serving signature and
answers one probability per class of the data: `evaluation.evaluate`, which writes nothing) and, with
tracking.auto_promote_alias, the metric promotion compares. Only then does the run open.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tfpipe import phases
from tfpipe.config import Config
from tfpipe.layout import CONFUSION_CSV, CONFUSION_PNG, EVAL_METRICS, EVAL_PER_CLASS, model_dir
from tfpipe.layout import rooted as _rooted

if TYPE_CHECKING:
    from tfpipe.evaluation import EvalResult  # numpy and scikit-learn: imported when the stage scores

log = logging.getLogger(__name__)


@dataclass
class Scored:
    """What `preflight` found: the prepared data, the model's scores on it, the test metrics to log."""

    prepared: Path
    manifest: dict
    digest: str
    result: EvalResult
    metrics: dict  # test_<name>: value


def preflight(cfg: Config, root: Path) -> Scored:
    """Every check that can refuse the evaluate stage, and the scoring itself: nothing written, no run opened."""
    from tfpipe import data, evaluation
    from tfpipe.data.report import leaked_test_hashes
    from tfpipe.tracking import precheck

    prepared = Path(cfg.data.output_dir)
    saved_model = model_dir(cfg, root) / "saved_model"
    evaluation.check_complete(saved_model)  # an unfinished export
    manifest = data.load_manifest(prepared)
    data.verify_shards(prepared, manifest)
    digest = data.manifest_digest(prepared)
    leaked = leaked_test_hashes(prepared)  # test examples that duplicate a train example: test_accuracy_dedup
    run = precheck.recorded_run(cfg, root)  # read: the run to re-open is in the store
    with phases.phase("evaluate"):  # the SavedModel loaded and scored
        result = evaluation.evaluate(saved_model, prepared, batch_size=256, leaked_hashes=leaked)
    metrics = prefixed(result.scalar_metrics(), "test_")
    precheck.check_promotion(cfg.tracking, run, metrics)
    return Scored(prepared, manifest, digest, result, metrics)


def run_evaluate(cfg: Config, root: Path):
    """The SavedModel, loaded from disk, scored on the test split; logged into the train run."""
    from tfpipe import evaluation, provenance, tracking
    from tfpipe.tracking import registry

    cfg = _rooted(cfg, root)
    scored = preflight(cfg, root)
    prepared, manifest, digest, result = scored.prepared, scored.manifest, scored.digest, scored.result
    with phases.phase("open_run"):
        run = tracking.resume_run(cfg, root, stage="evaluate")
    with run:
        evaluation.write_reports(
            result,
            metrics_path=root / EVAL_METRICS,
            per_class_path=root / EVAL_PER_CLASS,
            confusion_csv_path=root / CONFUSION_CSV,
            confusion_png_path=root / CONFUSION_PNG,
        )
        run.log_dataset(manifest, digest, prepared, context="test")
        model_id = registry.log_test_metrics(
            run, scored.metrics, manifest=manifest, digest=digest, prepared=prepared
        )
        run.log_artifact(root / EVAL_METRICS, "metrics")
        run.log_artifact(root / EVAL_PER_CLASS, "metrics")
        run.log_artifact(root / CONFUSION_CSV, "plots")
        run.log_artifact(root / CONFUSION_PNG, "plots")
        run.set_tags(tracking.dvc_lock_tags(provenance.collect(root)))
        if model_id and (cfg.tracking.register_model or cfg.tracking.auto_promote_alias):
            register(run, cfg, model_id)
    log.info(
        "test accuracy %.4f on %d examples: %s; the run: %s",
        result.accuracy,
        result.num_examples,
        EVAL_METRICS,
        tracking.where(run, root),
    )
    return result


@phases.phase("registry")
def register(run, cfg: Config, model_id: str) -> None:
    """The logged model registered (register_model); the alias moved, registering it, when it beats its model."""
    from tfpipe.tracking import registry

    if cfg.tracking.register_model:  # else only what auto_promote promotes is registered
        registry.register(run, model_id, cfg.tracking.model_name(cfg.dataset.name))
    if cfg.tracking.auto_promote_alias:
        registry.auto_promote(
            run,
            cfg.tracking.auto_promote_alias,
            metric=cfg.tracking.promote_metric,
            mode=cfg.tracking.promote_mode,
            min_delta=cfg.tracking.promote_min_delta,
            min_relative=cfg.tracking.promote_min_relative,
        )


def prefixed(metrics: dict, prefix: str) -> dict:
    """The numeric `metrics` with `prefix` on their names, as floats (test_*, final_*)."""
    return {f"{prefix}{k}": float(v) for k, v in metrics.items() if isinstance(v, (int, float))}
