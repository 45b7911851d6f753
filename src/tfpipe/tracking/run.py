"""The MLflow run of one pipeline execution, shared by the train and evaluate stages.

train:    `start_run` attaches to env MLFLOW_RUN_ID (set by `mlflow run`) or creates a run named
          `{dataset}-{model}-{strategy}-{precision}`; either way it writes `tracking.run_file`
          (JSON: run_id, experiment_id, tracking_uri, run_name) for evaluate and DVC.
evaluate: `resume_run` re-opens MLFLOW_RUN_ID or the run in `tracking.run_file`.
Each stage ends the run when its `with` block ends: FINISHED, FAILED on an exception, KILLED on
Ctrl-C; re-opening a finished run sets it RUNNING again.

Metrics are buffered and sent with `log_batch` every `flush_every` values or `flush_seconds`
seconds (checked on each call) and on close, so the training loop never waits for the store per
step. Only the chief logs: `is_chief=False` returns a `NullRun` whose methods do nothing.

A store that fails mid-run (server restarting, network blip, SQLite locked) never stops training:
a failed flush keeps its values in the buffer and the next attempt waits with exponential backoff
(`RETRY_BASE_SECONDS` doubling up to `RETRY_MAX_SECONDS`); while training, one attempt is a single
HTTP request with a short timeout (MLflow's own retries, minutes by default, are switched off for
it), so a down server costs the loop at most `FLUSH_HTTP_TIMEOUT_SECONDS` per attempt. Closing the
run keeps retrying for up to `FINAL_FLUSH_SECONDS` (env TFPIPE_MLFLOW_FLUSH_TIMEOUT) before it gives
up. Re-sending a batch is harmless: the store ignores a metric it already has (same key, value,
step and timestamp), so every value arrives exactly once.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import re
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Optional

import mlflow
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag
from mlflow.exceptions import MlflowException

from tfpipe.errors import TrackingError
from tfpipe.tracking import backend
from tfpipe.tracking.redact import redact, redact_tree, redact_url
from tfpipe.tracking.tags import run_name as _run_name

log = logging.getLogger(__name__)

BATCH_PARAMS_TAGS = 100  # MLflow's per-request limit for params and for tags
BATCH_METRICS = 1000  # MLflow's per-request limit for metrics
MAX_PARAM_VALUE = 6000
MAX_TAG_VALUE = 8000
MAX_KEY = 250
MAX_BUFFERED = 100_000  # if the store stays down, keep at most this many metric values
CONFIG_ARTIFACT = "config/resolved.yaml"
SERVING_MODEL_FILE = Path(__file__).with_name("serving_model.py")
_BAD_KEY_CHARS = re.compile(r"[^\w\-. :/]")
RETRY_BASE_SECONDS = 1.0  # first wait after a failed metric flush; doubles per failure
RETRY_MAX_SECONDS = 60.0  # longest wait between flush attempts
FLUSH_HTTP_TIMEOUT_SECONDS = 10  # one metric flush request while training (http stores)
FINAL_FLUSH_SECONDS = 120.0  # how long closing the run keeps retrying unsent metrics
FLUSH_TIMEOUT_ENV = "TFPIPE_MLFLOW_FLUSH_TIMEOUT"


@contextlib.contextmanager
def _single_http_attempt(timeout: Optional[float] = None):
    """MLflow's REST client reads its retry/timeout settings from the environment on every request;
    inside this block a request is tried once, with a short timeout (we do the backoff ourselves)."""
    saved = {k: os.environ.get(k) for k in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT")}
    os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = "0"
    os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = str(max(1, int(FLUSH_HTTP_TIMEOUT_SECONDS if timeout is None else timeout)))
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _final_flush_seconds() -> float:
    try:
        return max(0.0, float(os.environ.get(FLUSH_TIMEOUT_ENV, FINAL_FLUSH_SECONDS)))
    except ValueError:
        return FINAL_FLUSH_SECONDS


def _one_line(exc: BaseException) -> str:
    text = getattr(exc, "message", None) or str(exc)
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())[:500]


def _wrap_errors(method):
    """MlflowException -> one-line TrackingError naming the operation."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except MlflowException as exc:
            raise TrackingError(f"MLflow {method.__name__} failed for run {self.run_id}: {_one_line(exc)}") from None

    return wrapper


def _metric_key(key: str) -> str:
    return _BAD_KEY_CHARS.sub("_", str(key))[:MAX_KEY]


def _to_float(value: Any) -> Optional[float]:
    if hasattr(value, "numpy"):
        value = value.numpy()
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


class Run:
    """Handle on an open MLflow run; a context manager. See the module docstring."""

    active = True

    def __init__(self, *, run_id: str, experiment_id: str, tracking_uri: str, run_name: str, stage: str,
                 client: MlflowClient, env_run_id: Optional[str] = None, flush_every: int = BATCH_METRICS,
                 flush_seconds: float = 15.0, reset_tracking_uri: bool = False):
        self.run_id = run_id
        self.experiment_id = experiment_id
        self.tracking_uri = tracking_uri
        self.run_name = run_name
        self.stage = stage
        self.client = client
        self.flush_every = max(1, int(flush_every))
        self.flush_seconds = float(flush_seconds)
        self._env_run_id = env_run_id
        self._reset_tracking_uri = reset_tracking_uri
        self._buffer: list[Metric] = []
        self._last_flush = time.monotonic()
        self._lock = threading.Lock()
        self._closed = False
        self._warned_bad_values: set = set()
        self._logged_up_to: dict[str, int] = {}  # key -> last step already in the store (a resumed run)
        self._flush_failures = 0  # consecutive failed metric flushes
        self._retry_at = 0.0  # monotonic time before which no new flush is attempted (backoff)

    def __repr__(self) -> str:
        return f"Run(run_id={self.run_id!r}, stage={self.stage!r}, name={self.run_name!r})"

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> "Run":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            status = "FINISHED"
        elif issubclass(exc_type, KeyboardInterrupt):
            status = "KILLED"
        elif issubclass(exc_type, SystemExit) and exc.code in (0, None):
            status = "FINISHED"
        else:
            status = "FAILED"
        self.close(status, _raise=exc_type is None)
        return False

    def close(self, status: str = "FINISHED", *, _raise: bool = True) -> None:
        """Flush metrics, tag the stage outcome and end the run with `status` (idempotent)."""
        if self._closed:
            return
        self._closed = True
        store_down = False  # the final flush already waited FINAL_FLUSH_SECONDS: do not wait again below
        try:
            self.flush(_final=True)
            self.client.set_tag(self.run_id, f"tfpipe.stage.{self.stage}", status)
        except Exception as exc:  # never mask the exception that is ending the stage
            store_down = True
            if _raise:
                raise TrackingError(f"MLflow could not close run {self.run_id}: {_one_line(exc)}") from None
            log.warning("could not flush/tag run %s while ending it %s: %s", self.run_id, status, _one_line(exc))
        finally:
            active = mlflow.active_run()
            try:
                with _single_http_attempt() if store_down else contextlib.nullcontext():
                    if active is not None and active.info.run_id == self.run_id:
                        mlflow.end_run(status)
                    else:
                        self.client.set_terminated(self.run_id, status)
            except Exception as exc:
                if _raise:
                    raise TrackingError(f"MLflow could not end run {self.run_id}: {_one_line(exc)}") from None
                log.warning("could not end run %s as %s: %s", self.run_id, status, _one_line(exc))
            finally:
                if self._env_run_id:  # mlflow.end_run() unsets it; the next stage of `mlflow run` needs it
                    os.environ["MLFLOW_RUN_ID"] = self._env_run_id
                _reset_tracking_uri(self._reset_tracking_uri)

    # ------------------------------------------------------------------ params, tags, metrics

    @_wrap_errors
    def log_params(self, flat: dict) -> None:
        """All resolved params as flat dotted keys (secret-looking keys as '***').

        Params are immutable in MLflow: re-logging an identical value is skipped; a different
        value for an existing key raises TrackingError.
        """
        params = {str(k)[:MAX_KEY]: ("None" if v is None else str(v))[:MAX_PARAM_VALUE] for k, v in redact(flat).items()}
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

    @_wrap_errors
    def set_tags(self, tags: dict) -> None:
        items = [RunTag(str(k)[:MAX_KEY], str(v)[:MAX_TAG_VALUE]) for k, v in redact(tags).items() if v is not None]
        for i in range(0, len(items), BATCH_PARAMS_TAGS):
            self.client.log_batch(self.run_id, tags=items[i : i + BATCH_PARAMS_TAGS])

    def log_metrics(self, metrics: dict, step: int) -> None:
        """The training MetricsSink: buffer, send in batches (see module docstring)."""
        timestamp = int(time.time() * 1000)
        with self._lock:
            for key, value in metrics.items():
                number = _to_float(value)
                if number is None:
                    if key not in self._warned_bad_values:
                        self._warned_bad_values.add(key)
                        log.warning("metric %s=%r is not a number; not logged", key, value)
                    continue
                name = _metric_key(key)
                if int(step) <= self._logged_up_to.get(name, -1):
                    continue  # replayed after a resume: the interrupted run logged this step already
                self._buffer.append(Metric(name, number, timestamp, int(step)))
            now = time.monotonic()
            due = (self._closed or len(self._buffer) >= self.flush_every
                   or now - self._last_flush >= self.flush_seconds) and now >= self._retry_at
        if due:
            self.flush()

    def skip_logged_steps(self) -> None:
        """From now on drop values of (key, step) at or below the last step the store holds for key:
        a resumed training replays the steps between its last checkpoint and the interruption."""
        for key in self.client.get_run(self.run_id).data.metrics:
            steps = [m.step for m in self.client.get_metric_history(self.run_id, key)]
            if steps:
                self._logged_up_to[key] = max(steps)

    def flush(self, _final: bool = False) -> None:
        """Send buffered metrics now. Mid-training a failure only warns: the values stay buffered and
        the next attempt backs off (see module docstring). On close (`_final`) retries run for up to
        `FINAL_FLUSH_SECONDS`, then it raises."""
        if not _final:
            if time.monotonic() >= self._retry_at:  # while backing off, values wait in the buffer
                self._flush_once(raise_errors=False)
            return
        deadline = time.monotonic() + _final_flush_seconds()
        while True:
            try:
                self._flush_once(raise_errors=True)
                return
            except Exception:
                wait = max(0.0, self._retry_at - time.monotonic())
                if time.monotonic() + wait > deadline:
                    raise
                log.warning("MLflow unreachable while closing run %s: %d metric values unsent, retrying in %.0fs",
                            self.run_id, len(self._buffer), wait)
                time.sleep(wait)

    def _flush_once(self, raise_errors: bool) -> None:
        with self._lock:
            pending, self._buffer = self._buffer, []
            self._last_flush = time.monotonic()
        if not pending:
            return
        sent = 0
        try:
            with _single_http_attempt():
                for sent in range(0, len(pending), BATCH_METRICS):
                    self.client.log_batch(self.run_id, metrics=pending[sent : sent + BATCH_METRICS])
            sent = len(pending)
        except Exception as exc:
            with self._lock:
                kept = pending[sent:] + self._buffer
                if len(kept) > MAX_BUFFERED:
                    log.warning("MLflow down too long: dropping the %d oldest unsent metric values (buffer limit %d)",
                                len(kept) - MAX_BUFFERED, MAX_BUFFERED)
                self._buffer = kept[-MAX_BUFFERED:]
                self._flush_failures += 1
                delay = min(RETRY_BASE_SECONDS * 2 ** (self._flush_failures - 1), RETRY_MAX_SECONDS)
                self._retry_at = time.monotonic() + delay
                kept = len(self._buffer)
            if raise_errors:
                raise
            log.warning("MLflow metric flush failed (attempt %d; %d values kept, next try in %.0fs): %s",
                        self._flush_failures, kept, delay, _one_line(exc))
            return
        if self._flush_failures:
            log.info("MLflow store reachable again: sent %d buffered metric values after %d failed attempt(s)",
                     len(pending), self._flush_failures)
        with self._lock:
            self._flush_failures = 0
            self._retry_at = 0.0

    # ------------------------------------------------------------------ artifacts

    @_wrap_errors
    def log_artifact(self, path, artifact_path: Optional[str] = None) -> None:
        self.client.log_artifact(self.run_id, str(path), artifact_path)

    @_wrap_errors
    def log_artifacts(self, local_dir, artifact_path: Optional[str] = None) -> None:
        self.client.log_artifacts(self.run_id, str(local_dir), artifact_path)

    @_wrap_errors
    def log_dict(self, dictionary: dict, artifact_file: str) -> None:
        self.client.log_dict(self.run_id, dictionary, artifact_file)

    @_wrap_errors
    def log_text(self, text: str, artifact_file: str) -> None:
        self.client.log_text(self.run_id, text, artifact_file)

    def log_latest_checkpoint(self, checkpoint_dir, artifact_path: str = "checkpoints") -> Optional[str]:
        """Only the newest tf.train checkpoint (per the `checkpoint` state file) plus a state file
        naming just it, so `tf.train.latest_checkpoint` works on the downloaded folder. Other files
        in the folder that are not checkpoints (e.g. history.json) go along. Returns its prefix."""
        checkpoint_dir = Path(checkpoint_dir)
        state = checkpoint_dir / "checkpoint"
        match = re.search(r'^model_checkpoint_path:\s*"([^"]+)"', state.read_text(encoding="utf-8"), re.M) if state.is_file() else None
        if match is None:
            raise TrackingError(f"{checkpoint_dir}: no checkpoint state file naming the latest checkpoint")
        prefix = Path(match.group(1)).name
        with tempfile.TemporaryDirectory(prefix="tfpipe-ckpt-") as tmp:
            for path in checkpoint_dir.iterdir():
                is_ckpt = re.match(r"^.+\.(index|data-\d+-of-\d+)$", path.name)
                if path.is_file() and path.name != "checkpoint" and (not is_ckpt or path.name.startswith(prefix + ".")):
                    _link_or_copy(path, Path(tmp) / path.name)
            (Path(tmp) / "checkpoint").write_text(
                f'model_checkpoint_path: "{prefix}"\nall_model_checkpoint_paths: "{prefix}"\n', encoding="utf-8")
            self.log_artifacts(tmp, artifact_path)
        return prefix

    def log_config(self, config, artifact_file: str = CONFIG_ARTIFACT) -> None:
        """The resolved config (a Config or its dict) as YAML, secrets redacted."""
        import yaml

        tree = config.to_dict() if hasattr(config, "to_dict") else dict(config)
        self.log_text(yaml.safe_dump(redact_tree(tree), sort_keys=False, default_flow_style=None), artifact_file)

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

    @_wrap_errors
    def log_dataset(self, manifest: dict, manifest_digest: str, prepared_dir, context: str = "train") -> None:
        """The prepared dataset as a run input (Datasets tab): name `<dataset>-<context>`, digest =
        the manifest digest (MLflow caps digests at 36 characters; the full one is an input tag),
        source = the prepared folder, profile = example counts, schema = the feature spec."""
        from mlflow.entities import DatasetInput, InputTag
        from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

        from tfpipe.tracking.datasets import manifest_dataset

        dataset = manifest_dataset(manifest, manifest_digest, prepared_dir, context)
        tags = [InputTag(MLFLOW_DATASET_CONTEXT, context), InputTag("manifest_digest", str(manifest_digest)[:500])]
        self.client.log_inputs(self.run_id, datasets=[DatasetInput(dataset._to_mlflow_entity(), tags)])

    @_wrap_errors
    def log_model(self, saved_model_dir, *, modality: str, input_example: Any = None, class_names: list,
                  name: str = "model") -> str:
        """Log the SavedModel as an MLflow pyfunc model (models-from-code, `serving_model.py`)
        serving raw inputs; returns its model URI (`models:/<model_id>`; `runs:/<run_id>/<name>`
        resolves to it too). The input example is validated by MLflow (loads + predicts once)."""
        from tfpipe.tracking.models import log_pyfunc_model

        info = log_pyfunc_model(self, saved_model_dir, modality=modality, input_example=input_example,
                                class_names=list(class_names), name=name)
        self.set_tags({"model_uri": info.model_uri})
        return info.model_uri


def _link_or_copy(src: Path, dst: Path) -> None:
    """Hard link (checkpoints can be large), copy when linking is not possible (other device...)."""
    try:
        os.link(src, dst)
    except OSError:
        import shutil

        shutil.copy2(src, dst)


class NullRun(Run):
    """What non-chief workers get: same interface, logs nothing."""

    active = False

    def __init__(self, stage: str = ""):
        self.run_id = None
        self.experiment_id = None
        self.tracking_uri = None
        self.run_name = None
        self.stage = stage

    def __repr__(self) -> str:
        return f"NullRun(stage={self.stage!r})"

    def close(self, status: str = "FINISHED", **_) -> None:
        return None

    def _noop(self, *args, **kwargs) -> None:
        return None

    log_params = set_tags = log_metrics = flush = log_artifact = log_artifacts = _noop
    log_dict = log_text = log_config = log_provenance = log_dataset = log_model = log_latest_checkpoint = _noop


# ----------------------------------------------------------------------------- opening runs


def _connect(cfg, project_root) -> tuple[str, MlflowClient, bool]:
    """Resolve + probe the backend and point MLflow's fluent API (needed by log_model) at it.

    `mlflow.set_tracking_uri` also exports MLFLOW_TRACKING_URI into os.environ, which would make
    every later run in this process (another project root, another test) resolve to this store.
    The returned flag says whether to undo that when the run closes (it was not set before)."""
    uri = backend.resolve_tracking_uri(cfg.tracking, project_root)
    backend.check_reachable(uri)
    try:
        backend.init_store(uri)
    except MlflowException as exc:
        raise TrackingError(f"MLflow store {redact_url(uri)}: {_one_line(exc)}") from None
    reset_uri = not os.environ.get("MLFLOW_TRACKING_URI", "").strip()
    mlflow.set_tracking_uri(uri)
    return uri, MlflowClient(tracking_uri=uri), reset_uri


def _reset_tracking_uri(reset: bool) -> None:
    if reset and mlflow.active_run() is None:
        mlflow.set_tracking_uri(None)  # back to "unset" (also removes the exported env variable)


def _start(run_id: Optional[str], *, experiment_id: Optional[str] = None, run_name: Optional[str] = None,
           where: str, uri: str):
    active = mlflow.active_run()
    if active is not None:
        if active.info.run_id == run_id:
            mlflow.end_run()  # re-entering the same run (a previous stage's handle was not closed)
        else:
            raise TrackingError(f"another MLflow run ({active.info.run_id}) is active in this process; end it first")
    try:
        if run_id:
            return mlflow.start_run(run_id=run_id, run_name=run_name)
        return mlflow.start_run(experiment_id=experiment_id, run_name=run_name)
    except MlflowException as exc:
        target = f"run {run_id} ({where})" if run_id else f"a run in experiment {experiment_id}"
        raise TrackingError(f"MLflow could not open {target} on {redact_url(uri)}: {_one_line(exc)}") from None


def _run_exists(client: MlflowClient, run_id: str) -> bool:
    try:
        return client.get_run(run_id).info.lifecycle_stage == "active"
    except MlflowException:
        return False


def write_run_file(path, info: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(info, fh, indent=2, sort_keys=True)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_run_file(path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise TrackingError(f"{path}: run file not found; run the train stage first (it records the MLflow run id there)")
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TrackingError(f"{path}: not a readable run file ({_one_line(exc)}); re-run the train stage") from None
    if not isinstance(info, dict) or not info.get("run_id"):
        raise TrackingError(f"{path}: has no run_id; re-run the train stage")
    return info


PARENT_RUN_ENV = "TFPIPE_PARENT_RUN_ID"  # set by `pipeline.sweep`: the sweep's parent run


def context_tags() -> dict:
    """Where this run sits: its sweep's parent run (MLflow nests it under the parent in the UI) and,
    inside `dvc exp run`, the DVC experiment name and baseline commit."""
    tags = {}
    for tag, env in (("mlflow.parentRunId", PARENT_RUN_ENV), ("dvc.exp_name", "DVC_EXP_NAME"),
                     ("dvc.exp_baseline", "DVC_EXP_BASELINE_REV")):
        value = os.environ.get(env, "").strip()
        if value:
            tags[tag] = value
    return tags


def start_run(cfg, project_root, *, stage: str = "train", is_chief: bool = True, flush_every: int = BATCH_METRICS,
              flush_seconds: float = 15.0, resume_run_id: Optional[str] = None) -> Run:
    """Open the run for the train stage (see module docstring) and write `tracking.run_file`.

    `resume_run_id`: the run of an interrupted training this one resumes. It is re-opened (metrics
    of the steps it already logged are not sent again) when it is in this store and no MLFLOW_RUN_ID
    is given; otherwise the new run is tagged `tfpipe.resumed_from` with it."""
    if not is_chief:
        return NullRun(stage)
    root = Path(project_root)
    name = _run_name(cfg)
    env_run_id = os.environ.get("MLFLOW_RUN_ID", "").strip() or None
    uri, client, reset_uri = _connect(cfg, root)
    reopen = bool(resume_run_id) and not env_run_id and _run_exists(client, resume_run_id)
    try:
        if env_run_id:
            active = _start(env_run_id, run_name=name, where="env MLFLOW_RUN_ID", uri=uri)
        elif reopen:
            active = _start(resume_run_id, where="the interrupted training's run", uri=uri)
        else:
            location = backend.artifact_location_for(cfg.tracking, root, uri)
            experiment_id = backend.ensure_experiment(client, cfg.tracking.experiment_name, location)
            active = _start(None, experiment_id=experiment_id, run_name=name, where="new", uri=uri)
    except MlflowException as exc:
        _reset_tracking_uri(reset_uri)
        raise TrackingError(f"MLflow store {redact_url(uri)}: {_one_line(exc)}") from None
    except BaseException:
        _reset_tracking_uri(reset_uri)
        raise
    run = Run(run_id=active.info.run_id, experiment_id=active.info.experiment_id, tracking_uri=uri, run_name=name,
              stage=stage, client=client, env_run_id=env_run_id, flush_every=flush_every, flush_seconds=flush_seconds,
              reset_tracking_uri=reset_uri)
    if resume_run_id:
        try:
            if reopen:
                run.skip_logged_steps()
                resumes = int(client.get_run(run.run_id).data.tags.get("tfpipe.resumes", "0")) + 1
                client.set_tag(run.run_id, "tfpipe.resumes", str(resumes))
            else:
                client.set_tag(run.run_id, "tfpipe.resumed_from", resume_run_id)
        except MlflowException as exc:
            run.close("FAILED", _raise=False)
            raise TrackingError(f"MLflow store {redact_url(uri)}: cannot resume run {resume_run_id}: {_one_line(exc)}") from None
    try:
        run.set_tags(context_tags())
    except TrackingError:
        run.close("FAILED", _raise=False)
        raise
    try:
        write_run_file(root / cfg.tracking.run_file, {
            "run_id": run.run_id, "experiment_id": run.experiment_id,
            "tracking_uri": redact_url(uri), "run_name": name,
        })
    except OSError as exc:
        run.close("FAILED", _raise=False)
        raise TrackingError(f"{root / cfg.tracking.run_file}: cannot write the run file ({exc.strerror or exc})") from None
    log.info("MLflow run %s (%s) in experiment %s at %s", run.run_id, name, run.experiment_id, redact_url(uri))
    return run


def resume_run(cfg, project_root, *, stage: str = "evaluate", is_chief: bool = True,
               flush_every: int = BATCH_METRICS, flush_seconds: float = 15.0) -> Run:
    """Re-open the train stage's run: env MLFLOW_RUN_ID, else `tracking.run_file`."""
    if not is_chief:
        return NullRun(stage)
    root = Path(project_root)
    env_run_id = os.environ.get("MLFLOW_RUN_ID", "").strip() or None
    if env_run_id:
        run_id, where = env_run_id, "env MLFLOW_RUN_ID"
    else:
        path = root / cfg.tracking.run_file
        run_id, where = read_run_file(path)["run_id"], f"from {path}"
    uri, client, reset_uri = _connect(cfg, root)
    try:
        active = _start(run_id, where=where, uri=uri)
    except BaseException:
        _reset_tracking_uri(reset_uri)
        raise
    run = Run(run_id=run_id, experiment_id=active.info.experiment_id, tracking_uri=uri, run_name=active.info.run_name,
              stage=stage, client=client, env_run_id=env_run_id, flush_every=flush_every, flush_seconds=flush_seconds,
              reset_tracking_uri=reset_uri)
    log.info("MLflow run %s re-opened for %s", run_id, stage)
    return run


class ParentRun:
    """The parent of a sweep's runs: created once, exported as TFPIPE_PARENT_RUN_ID so every run the
    sweep starts in this process (or its children) is tagged `mlflow.parentRunId` and nests under it."""

    def __init__(self, cfg, project_root, name: str, tags: Optional[dict] = None):
        uri = backend.resolve_tracking_uri(cfg.tracking, project_root)
        backend.check_reachable(uri)
        self.client = MlflowClient(tracking_uri=uri)
        try:
            backend.init_store(uri)
            location = backend.artifact_location_for(cfg.tracking, project_root, uri)
            experiment_id = backend.ensure_experiment(self.client, cfg.tracking.experiment_name, location)
            created = self.client.create_run(experiment_id, run_name=name,
                                             tags={"tfpipe.sweep": "parent", **redact(tags or {})})
        except MlflowException as exc:
            raise TrackingError(f"MLflow store {redact_url(uri)}: could not create the sweep's parent run: {_one_line(exc)}") from None
        self.run_id = created.info.run_id
        self._previous = os.environ.get(PARENT_RUN_ENV)
        os.environ[PARENT_RUN_ENV] = self.run_id
        log.info("sweep parent run %s (%s) at %s", self.run_id, name, redact_url(uri))

    def close(self, status: str = "FINISHED") -> None:
        if self._previous is None:
            os.environ.pop(PARENT_RUN_ENV, None)
        else:
            os.environ[PARENT_RUN_ENV] = self._previous
        try:
            self.client.set_terminated(self.run_id, status)
        except MlflowException as exc:
            log.warning("could not end sweep parent run %s as %s: %s", self.run_id, status, _one_line(exc))
