"""MLflow tracking: the only package in tfpipe that imports mlflow.

    with tracking.start_run(cfg, root, stage="train") as run:    # or resume_run(..., stage="evaluate")
        run.log_params(cfg.flat()); run.log_config(cfg)
        run.set_tags(tracking.run_tags(cfg, strategy_info, digest, provenance.collect(root)))
        run.log_dataset(manifest, digest, prepared_dir, context="train")
        training.train(..., sink=run)                            # run.log_metrics(metrics, step), batched
        run.log_model(saved_model_dir, modality=..., input_example=..., class_names=...)

Modules: `backend` (tracking URI, reachability, experiment), `opening` (start/resume a run, sweep parents),
`run` (the Run handle), `sink` (the buffered metrics, sent by a background thread),
`tags` (standard tags), `redact` (credentials -> '***'), `datasets` (manifest -> mlflow.data),
`outcome` (the final figures and the SavedModel's digest also as params, which nobody can change afterwards),
`models` + `serving_model.py` (the pyfunc model, models-from-code), `checkpoint_models` (each kept checkpoint as a
logged model, its step's metrics linked), `registry` (the model registry: registration,
test metrics linked to the logged model, promotion, a run's versions and aliases).
"""

import os

# MLflow's usage telemetry is off in tfpipe runs unless the user decides otherwise (MLFLOW_DISABLE_TELEMETRY=false):
# a team's training pipeline should not report usage from its hosts by default. Set before mlflow is imported.
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from tfpipe.errors import TrackingError  # noqa: E402
from tfpipe.tracking.backend import check_reachable, resolve_tracking_uri, store_root
from tfpipe.tracking.checkpoint_models import log_checkpoint_models
from tfpipe.tracking.naming import where
from tfpipe.tracking.opening import ParentRun, context_tags, read_run_file, resume_run, start_run
from tfpipe.tracking.outcome import log_final_metrics, log_saved_model_files
from tfpipe.tracking.redact import is_secret_key, redact
from tfpipe.tracking.run import NullRun, Run
from tfpipe.tracking.tags import dvc_lock_tags, run_name, run_tags

__all__ = [
    "TrackingError",
    "check_reachable",
    "resolve_tracking_uri",
    "store_root",
    "log_checkpoint_models",
    "where",
    "log_final_metrics",
    "log_saved_model_files",
    "is_secret_key",
    "redact",
    "NullRun",
    "Run",
    "read_run_file",
    "resume_run",
    "start_run",
    "ParentRun",
    "context_tags",
    "dvc_lock_tags",
    "run_name",
    "run_tags",
]
