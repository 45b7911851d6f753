"""How tfpipe's experiments open in the MLflow UI: on their training runs, not on MLflow 3's GenAI pages.

What decides it (MLflow 3.17.2's UI bundle, mlflow/server/js/build): one per-browser switch at the top of the
sidebar, "GenAI | Model training" (the workflow type). A page's `?workflowType=machine_learning` sets it for
that page; the switch clicked once is remembered by the browser (localStorage `mlflow.workflowType_v1`);
without either it is GenAI, so an experiment clicked from the home page of a fresh browser opens on the GenAI
Overview (traces, "Detect Issues"). No server option or experiment tag changes that default, so every UI link
tfpipe prints carries the parameter (`run_page`, `runs_page`).

The experiment tag `mlflow.experimentKind` is the UI's record of an experiment's kind: MLflow 3 UIs before the
switch (mlflow/mlflow#20159, #20161) opened an experiment on it; 3.17.2's reads it only where its flag for
the switch is off, and that flag is built in on (the kind follows the switch).
tfpipe still declares model training ("Machine learning") when it creates or first uses an experiment, and
adds one saved view, "tfpipe: training runs" (tag `mlflow.sharedViewState.tfpipe-runs`, the UI's own saved
view format): the runs table with the test metrics as columns, opened by `runs_page` or picked under Views.
A kind or view already set, by the user or the UI, is kept. The UI has no default columns and no "params that
differ" column: those take Columns, or Compare's "Show diff only"."""

from __future__ import annotations

import json
import logging
import time

from tfpipe.errors import one_line

log = logging.getLogger(__name__)

KIND_TAG = "mlflow.experimentKind"
MODEL_TRAINING = "custom_model_development"
ML_PAGES = "workflowType=machine_learning"  # the query that opens a page with the Model-training switch on
VIEW_KEY = "tfpipe-runs"
VIEW_TAG = f"mlflow.sharedViewState.{VIEW_KEY}"  # the UI's saved views: one experiment tag each
VIEW_NAME = "tfpipe: training runs"
VIEW_METRICS = ("test_accuracy", "test_macro_f1", "test_loss")  # the headline metrics, as runs-table columns


def run_page(experiment_id: str, run_id: str) -> str:
    """The UI's page of one run (relative to the server's root), opened with the Model-training sidebar."""
    return f"#/experiments/{experiment_id}/runs/{run_id}?{ML_PAGES}"


def runs_page(experiment_id: str) -> str:
    """The experiment's runs table in tfpipe's saved view (the headline metrics as columns), Model training."""
    return f"#/experiments/{experiment_id}/runs?{ML_PAGES}&viewStateShareKey={VIEW_KEY}"


def _view(now_ms: int) -> str:
    """The saved view's tag value: the UI's envelope around its runs-table state (column keys: type.`name`)."""
    columns = [f"metrics.`{name}`" for name in VIEW_METRICS]
    state = json.dumps({"selectedColumns": columns})
    return json.dumps({"name": VIEW_NAME, "createdAt": now_ms, "updatedAt": now_ms, "state": state})


def experiment_tags() -> dict:
    """The tags of an experiment tfpipe creates: model training, and the saved view."""
    return {KIND_TAG: MODEL_TRAINING, VIEW_TAG: _view(int(time.time() * 1000))}


def declare_model_training(client, experiment_id: str, tags: dict | None = None) -> None:
    """Give the experiment (whose tags are `tags`, fetched when None) the `experiment_tags` it lacks.
    Not fatal: a store that refuses only costs the UI's default view."""
    from mlflow.exceptions import MlflowException

    try:
        tags = client.get_experiment(experiment_id).tags if tags is None else tags
        for key, value in experiment_tags().items():
            if not (tags or {}).get(key):
                client.set_experiment_tag(experiment_id, key, value)
    except MlflowException as exc:
        log.warning("could not declare MLflow experiment %s model training: %s", experiment_id, one_line(exc))
