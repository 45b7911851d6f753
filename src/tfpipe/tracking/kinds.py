"""The kind of an MLflow experiment: MLflow 3's UI opens an experiment in its GenAI views (traces, prompts)
unless the experiment tag `mlflow.experimentKind` says otherwise (the UI's own kind picker sets that tag).
tfpipe's experiments are declared model training ("Machine learning": runs, metrics, models) when tfpipe
creates or first uses them; a kind already set, by the user or the UI, is kept."""

from __future__ import annotations

import logging

from tfpipe.errors import one_line

log = logging.getLogger(__name__)

KIND_TAG = "mlflow.experimentKind"
MODEL_TRAINING = "custom_model_development"


def declare_model_training(client, experiment_id: str, tags: dict | None = None) -> None:
    """Tag the experiment (whose tags are `tags`, fetched when None) model training unless it has a kind.
    Not fatal: a store that refuses only costs the UI's default view."""
    from mlflow.exceptions import MlflowException

    try:
        tags = client.get_experiment(experiment_id).tags if tags is None else tags
        if not (tags or {}).get(KIND_TAG):
            client.set_experiment_tag(experiment_id, KIND_TAG, MODEL_TRAINING)
    except MlflowException as exc:
        log.warning("could not declare MLflow experiment %s model training: %s", experiment_id, one_line(exc))
