"""The handle on an open MLflow run: params, tags, metrics (through the buffered `MetricsBuffer`), artifacts,
the dataset inputs and the logged model; a context manager that ends the run FINISHED, FAILED on an
exception or KILLED on Ctrl-C / SIGTERM (re-opening a finished run sets it RUNNING again)."""

from __future__ import annotations

import functools
import logging
import os
from pathlib import Path
from typing import Any, Literal, Optional, Sequence

import mlflow
from mlflow import MlflowClient
from mlflow.entities import Param, RunTag

from tfpipe.errors import TrackingError, one_line
from tfpipe.tracking.calls import ride, store_call
from tfpipe.tracking.groups import param_strings
from tfpipe.tracking.naming import recorded_values
from tfpipe.tracking.redact import redact, redact_strings, redact_text, redact_tree
from tfpipe.tracking.sink import BATCH_METRICS, MAX_KEY, MetricsBuffer

log = logging.getLogger(__name__)

BATCH_PARAMS_TAGS = 100  # MLflow's per-request limit for params and for tags
MAX_TAG_VALUE = 8000
CONFIG_ARTIFACT = "config/resolved.yaml"


def reset_tracking_uri(reset: bool) -> None:
    if reset and mlflow.active_run() is None:
        # back to "unset" (also removes the exported env variable): mlflow annotates `uri: str | Path`, but its
        # body takes None as exactly that (MLFLOW_TRACKING_URI.unset()); no public call unsets it otherwise
        mlflow.set_tracking_uri(None)  # type: ignore[arg-type]


def _status(exc_type, exc) -> str:
    if exc_type is None:
        return "FINISHED"
    if issubclass(exc_type, KeyboardInterrupt):
        return "KILLED"
    if issubclass(exc_type, SystemExit) and exc.code in (0, None):
        return "FINISHED"
    return "FAILED"


class Run:
    """Handle on an open MLflow run; a context manager. Paths it records (params, config, dataset source) name
    the project, not the DVC temporary copy `project_root` may be (`naming.recorded_path`)."""

    active = True
    project_root = None  # set by `opening`

    def __init__(
        self,
        *,
        run_id: str,
        experiment_id: str,
        tracking_uri: str,
        run_name: str,
        stage: str,
        client: MlflowClient,
        env_run_id: Optional[str] = None,
        flush_every: int = BATCH_METRICS,
        flush_seconds: float = 15.0,
        reset_tracking_uri: bool = False,
    ):
        self.run_id = run_id
        self.experiment_id = experiment_id
        self.tracking_uri = tracking_uri
        self.run_name = run_name
        self.stage = stage
        self.client = client
        self.metrics = MetricsBuffer(client, run_id, flush_every=flush_every, flush_seconds=flush_seconds)
        self._env_run_id = env_run_id
        self._reset_tracking_uri = reset_tracking_uri
        self._closed = False

    def __repr__(self) -> str:
        return f"Run(run_id={self.run_id!r}, stage={self.stage!r}, name={self.run_name!r})"

    def __enter__(self) -> "Run":
        return self

    def __exit__(self, exc_type, exc, tb) -> Literal[False]:
        if _status(exc_type, exc) == "FAILED":  # the reason, searchable: tags.tfpipe.failure
            self._tag_failure(exc)
        self.close(_status(exc_type, exc), _raise=exc_type is None)
        return False

    def _tag_failure(self, exc: BaseException) -> None:
        try:
            self.client.set_tag(self.run_id, "tfpipe.failure", redact_text(one_line(exc, 500)))
        except Exception as err:  # never mask the exception that is ending the stage
            log.warning("could not tag run %s with its failure: %s", self.run_id, one_line(err, 200))

    def close(self, status: str = "FINISHED", *, _raise: bool = True) -> None:
        """Flush metrics, tag the stage outcome and end the run with `status` (idempotent)."""
        if self._closed:
            return
        self._closed = True
        try:
            self.metrics.close()
            tag = f"tfpipe.stage.{self.stage}"
            ride(lambda: self.client.set_tag(self.run_id, tag, status), "set_tag", self.run_id)
        except Exception as exc:  # never mask the exception that is ending the stage
            if _raise:
                self._end(status, _raise=False, wait=False)  # the deadline has passed once already
                raise TrackingError(
                    f"MLflow could not close run {self.run_id}: {one_line(exc, 500)}"
                ) from None
            log.warning(
                "could not flush/tag run %s while ending it %s: %s", self.run_id, status, one_line(exc, 500)
            )
        self._end(status, _raise=_raise)

    def _end(self, status: str, *, _raise: bool, wait: bool = True) -> None:
        try:
            terminate = functools.partial(self.client.set_terminated, self.run_id, status)
            if wait:
                ride(terminate, "end_run", self.run_id)
            else:
                terminate()
        except Exception as exc:
            if _raise:
                raise TrackingError(f"MLflow could not end run {self.run_id}: {one_line(exc, 500)}") from None
            log.warning("could not end run %s as %s: %s", self.run_id, status, one_line(exc, 500))
        finally:
            active = mlflow.active_run()
            if active is not None and active.info.run_id == self.run_id:
                try:  # pops MLflow's own run stack first, then sets the status again
                    mlflow.end_run(status)
                except Exception:  # the status was set above, or the line above said why not
                    pass
            if self._env_run_id:  # mlflow.end_run() unsets it; the next stage of `mlflow run` needs it
                os.environ["MLFLOW_RUN_ID"] = self._env_run_id
            reset_tracking_uri(self._reset_tracking_uri)

    # ------------------------------------------------------------------ params, tags, metrics

    @store_call
    def log_params(self, flat: dict) -> None:
        """All resolved params as flat dotted keys (secret-looking keys as '***'). Params are immutable in
        MLflow: re-logging an identical value is skipped; a different value for an existing key raises."""
        params = param_strings(flat, self.project_root)
        existing = self.client.get_run(self.run_id).data.params
        changed = sorted(k for k, v in params.items() if k in existing and existing[k] != v)
        if changed:
            k = changed[0]
            raise TrackingError(
                f"run {self.run_id} already has param {k}={existing[k]!r}, refusing {params[k]!r} "
                f"({len(changed)} conflicting); params cannot change within a run"
            )
        todo = [Param(k, v) for k, v in params.items() if k not in existing]
        for i in range(0, len(todo), BATCH_PARAMS_TAGS):
            self.client.log_batch(self.run_id, params=todo[i : i + BATCH_PARAMS_TAGS])

    @store_call
    def set_tags(self, tags: dict) -> None:
        items = [
            RunTag(str(k)[:MAX_KEY], str(v)[:MAX_TAG_VALUE]) for k, v in redact(tags).items() if v is not None
        ]
        for i in range(0, len(items), BATCH_PARAMS_TAGS):
            self.client.log_batch(self.run_id, tags=items[i : i + BATCH_PARAMS_TAGS])

    def log_metrics(self, metrics: dict, step: int) -> None:
        """The training MetricsSink: buffered, sent by a background thread (tfpipe.tracking.sink)."""
        self.metrics.add(metrics, step)

    def flush(self) -> None:
        """Before a checkpoint: wait (bounded) until the metrics logged so far are in the store."""
        self.metrics.flush()

    def skip_logged_steps(self) -> None:
        self.metrics.skip_logged_steps()

    # ------------------------------------------------------------------ artifacts

    @store_call
    def log_artifact(self, path, artifact_path: Optional[str] = None) -> None:
        self.client.log_artifact(self.run_id, str(path), artifact_path)

    @store_call
    def log_artifacts(self, local_dir, artifact_path: Optional[str] = None) -> None:
        self.client.log_artifacts(self.run_id, str(local_dir), artifact_path)

    @store_call
    def log_dict(self, dictionary: dict, artifact_file: str) -> None:
        self.client.log_dict(self.run_id, redact_strings(dictionary), artifact_file)

    @store_call
    def log_text(self, text: str, artifact_file: str) -> None:
        self.client.log_text(self.run_id, redact_text(text), artifact_file)  # diffs, dvc.lock, YAML

    def log_checkpoint_files(
        self, paths: Sequence[Path], prefix: str, artifact_path: str = "checkpoints"
    ) -> None:
        """The newest checkpoint's files (the work directory lists them) plus a state file naming just it, so
        `tf.train.latest_checkpoint` works on the downloaded folder."""
        for path in paths:
            self.log_artifact(path, artifact_path)
        state = f'model_checkpoint_path: "{prefix}"\nall_model_checkpoint_paths: "{prefix}"\n'
        self.log_text(state, f"{artifact_path}/checkpoint")

    def log_config(self, config, artifact_file: str = CONFIG_ARTIFACT) -> None:
        """The resolved config (a Config or its dict) as YAML, secrets redacted."""
        import yaml

        tree = config.to_dict() if hasattr(config, "to_dict") else dict(config)
        tree = recorded_values(tree, self.project_root)  # paths in a DVC temporary copy: the project's
        self.log_text(
            yaml.safe_dump(redact_tree(tree), sort_keys=False, default_flow_style=None), artifact_file
        )

    def log_provenance(self, provenance: dict, artifact_dir: str = "provenance") -> None:
        """provenance.json (git/environment facts), git_diff.patch when dirty, dvc.lock when present."""
        git = dict(provenance.get("git") or {})
        diff = git.pop("diff", None)
        lock = dict(provenance.get("dvc_lock") or {})
        content = lock.pop("content", None)
        self.log_dict({**provenance, "git": git, "dvc_lock": lock}, f"{artifact_dir}/provenance.json")
        if diff:
            self.log_text(diff, f"{artifact_dir}/git_diff.patch")
        if content:
            self.log_text(content, f"{artifact_dir}/dvc.lock")

    # ------------------------------------------------------------------ dataset, model

    @store_call
    def log_dataset(self, manifest: dict, manifest_digest: str, prepared_dir, context: str = "train") -> None:
        """The prepared dataset as a run input (Datasets tab): name `<dataset>-<context>`, digest = the manifest
        digest (MLflow caps digests at 36 characters; the full one is an input tag), source = the prepared
        folder (in the project, not a DVC temporary copy), profile = example counts, schema = the feature spec."""
        from tfpipe.tracking.datasets import manifest_dataset

        dataset = manifest_dataset(manifest, manifest_digest, prepared_dir, context, self.project_root)
        mlflow.log_input(dataset, context=context, tags={"manifest_digest": str(manifest_digest)[:500]})

    @store_call
    def log_model(
        self,
        saved_model_dir,
        *,
        modality: str,
        input_example: Any = None,
        class_names: list,
        name: str = "model",
    ) -> str:
        """Log the SavedModel as an MLflow pyfunc model (models-from-code, `serving_model.py`) serving raw
        inputs; returns its model URI (`models:/<model_id>`; `runs:/<run_id>/<name>` resolves to it too). The
        input example is validated by MLflow (loads + predicts once)."""
        from tfpipe.tracking.models import log_pyfunc_model

        uri = log_pyfunc_model(
            self,
            saved_model_dir,
            modality=modality,
            input_example=input_example,
            class_names=list(class_names),
            name=name,
        )
        self.set_tags({"model_uri": uri})
        return uri


class NullRun(Run):
    """What non-chief workers get: same interface, logs nothing."""

    active = False

    def __init__(self, stage: str = ""):
        # No MLflow run behind it: its ids are None (what callers test), where a Run's are str; its methods
        # never read them
        self.run_id = self.experiment_id = self.tracking_uri = self.run_name = None  # type: ignore[assignment]
        self.stage = stage

    def __repr__(self) -> str:
        return f"NullRun(stage={self.stage!r})"

    def close(self, status: str = "FINISHED", **_) -> None:
        return None

    def _noop(self, *args, **kwargs) -> None:
        return None

    log_params = set_tags = log_metrics = flush = log_artifact = log_artifacts = _noop
    log_dict = log_text = log_config = log_provenance = log_dataset = log_model = log_checkpoint_files = _noop
