"""The tuner: an Optuna study whose trials are whole pipeline runs (`python -m tfpipe run-all <overrides>` in a
subprocess each), nested in MLflow under one parent run per study.

Storage: `--storage`, else the spec's `storage`, else env TFPIPE_TUNE_STORAGE, else `sqlite:///<dir>/optuna.db`
beside the SQLite tracking store (the project root for a remote tracking server). The tuner beats a heartbeat
per running trial; a trial left RUNNING by a killed tuner goes FAILED once its heartbeat is older than
GRACE_SECONDS, so a restarted tuner (same study name: `load_if_exists`) and a second tuner on the same storage
share the study: each counts COMPLETE + PRUNED trials before asking for another, up to n_trials."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from tfpipe.errors import ConfigError
from tfpipe.provenance import environ_snapshot
from tfpipe.tuning.space import TuneSpec, as_overrides, build, suggest

log = logging.getLogger(__name__)

STORAGE_ENV = "TFPIPE_TUNE_STORAGE"
HEARTBEAT_SECONDS = 5
GRACE_SECONDS = 20
PARENT_ATTR = "mlflow_parent_run_id"
TRIAL_ENV = (
    "TFPIPE_TUNE_TRIAL"  # {"storage", "study", "trial_id", "metric", "pruner", "run_file"}: tuning.hook
)
PRUNED_ATTR = "pruned_at_epoch"  # set by the trial's hook when the pruner stops it


class TrialCrashed(Exception):
    """The trial's process ended with an error: only this trial is FAILED."""


def storage_url(spec: TuneSpec, cfg, root: Path, cli_storage: str | None = None) -> str:
    from tfpipe.tracking.study import store_dir

    url = cli_storage or spec.storage or os.environ.get(STORAGE_ENV, "").strip()
    return url or f"sqlite:///{store_dir(cfg, root) / 'optuna.db'}"


def _rdb(url: str):
    import optuna

    kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
    return optuna.storages.RDBStorage(
        url, engine_kwargs=kwargs, heartbeat_interval=HEARTBEAT_SECONDS, grace_period=GRACE_SECONDS
    )


def _storage(url: str):
    import fcntl

    from sqlalchemy.exc import IntegrityError

    path = url[len("sqlite:///") :] if url.startswith("sqlite:///") else ""
    if not path or path.startswith(":memory:"):
        return _rdb(url)
    # Two processes opening a fresh SQLite file at once both run Optuna's schema creation, and one dies on the
    # alembic_version row (Optuna has no lock of its own): tuners take a lock file beside it, and a clash with
    # another program (a dashboard, a script) is retried: by then the schema is there.
    with open(f"{path}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for attempt in range(3):
            try:
                return _rdb(url)
            except IntegrityError:
                if attempt == 2:
                    raise
                time.sleep(1)


def _pruner(pruner: dict, where: str = "conf/tune"):
    return build("pruner", pruner, where)


def _sampler(sampler: dict, where: str = "conf/tune"):
    return build("sampler", sampler, where)


def open_study(spec: TuneSpec, url: str, study_name: str):
    """Create the study or load it (a restarted tuner, a second tuner); enqueue the first trials once."""
    import optuna

    where = f"conf/tune/{spec.name}.yaml"  # sampler and pruner first: a bad option value is refused
    sampler, pruner = _sampler(spec.sampler, where), _pruner(spec.pruner, where)  # before the storage exists
    study = optuna.create_study(
        storage=_storage(url),
        study_name=study_name,
        direction=spec.direction,
        sampler=sampler,
        pruner=pruner,
        load_if_exists=True,
    )
    if study.direction.name.lower() != spec.direction:  # load_if_exists keeps the stored one without a word
        raise ConfigError(
            f"conf/tune/{spec.name}.yaml: direction {spec.direction}, but study {study_name!r} in its storage "
            f"{study.direction.name.lower()}s; use that direction or another --study name"
        )
    if not study.trials:
        for params in spec.enqueue:
            study.enqueue_trial(params, skip_if_exists=True)
    return study


def open_trial(info: dict):
    """The running trial `info['trial_id']` of the study, seen from the trial's own process."""
    import optuna

    study = optuna.load_study(
        study_name=info["study"], storage=_storage(info["storage"]), pruner=_pruner(info["pruner"])
    )
    return optuna.trial.Trial(study, info["trial_id"])


class Objective:
    """One trial: run the pipeline with the sampled overrides in a subprocess, tag its MLflow run, return the
    final value of the metric (metrics/train.json), or raise TrialPruned / TrialCrashed."""

    def __init__(self, spec: TuneSpec, base: list, root: Path, url: str, parent, cfg):
        self.spec, self.base, self.root, self.url, self.parent, self.cfg = spec, base, root, url, parent, cfg

    def __call__(self, trial) -> float:
        import optuna

        overrides = [*self.base, *as_overrides(suggest(trial, self.spec.space))]
        rc = self._run(trial, overrides)
        frozen = next(t for t in trial.study.get_trials(deepcopy=False) if t.number == trial.number)
        tags = {
            "tune.study": trial.study.study_name,
            "tune.trial": trial.number,
            "tune.project": str(self.root),
        }
        run_id = self._tag_run(trial, tags)
        if PRUNED_ATTR in frozen.user_attrs:
            self._tag(run_id, {"tune.pruned": "true"})
            raise optuna.TrialPruned(f"at epoch {frozen.user_attrs[PRUNED_ATTR]}")
        if rc != 0:
            raise TrialCrashed(f"trial {trial.number}: `tfpipe run-all` exited with {rc}")
        value = float(json.loads((self.root / "metrics" / "train.json").read_text())[self.spec.metric])
        self._tag(run_id, {"tune.pruned": "false", "tune.value": value})
        return value

    def _run(self, trial, overrides: list) -> int:
        from tfpipe.interrupts import LAUNCHER_PID_ENV, die_with_launcher
        from tfpipe.tracking.opening import TUNE_TRIAL_ENV

        for stale in (self.root / self.cfg.tracking.run_file, self.root / "metrics" / "train.json"):
            stale.unlink(missing_ok=True)  # so a crashed trial is never read as the previous one
        info = {"storage": self.url, "study": trial.study.study_name, "trial_id": trial._trial_id}
        run_file = str(self.root / self.cfg.tracking.run_file)
        info.update(metric=self.spec.metric, pruner=self.spec.pruner, run_file=run_file)
        env = {**environ_snapshot(), TRIAL_ENV: json.dumps(info)}  # safe while MLflow's threads run
        env[TUNE_TRIAL_ENV] = str(trial.number)  # the run's tune.trial tag, from the moment it opens
        log.info("trial %d: %s", trial.number, " ".join(overrides))
        cmd = [sys.executable, "-m", "tfpipe", "run-all", *overrides]  # the installed tfpipe: any project
        # the trial dies with the tuner (kill -9 included), as the launcher's tasks do; die_with_launcher
        # reads the tuner's pid from the environment inherited by the fork
        os.environ[LAUNCHER_PID_ENV] = str(os.getpid())
        return subprocess.run(cmd, cwd=self.root, env=env, preexec_fn=die_with_launcher).returncode

    def _tag_run(self, trial, tags: dict) -> str | None:
        path = self.root / self.cfg.tracking.run_file
        run_id = json.loads(path.read_text())["run_id"] if path.is_file() else None
        trial.set_user_attr("project", str(self.root))  # which tuner ran it (tuners may share the study)
        if run_id:
            trial.set_user_attr("mlflow_run_id", run_id)
        self._tag(run_id, tags)
        return run_id

    def end_dead_runs(self, study) -> None:
        """The MLflow runs of trials a dead tuner left RUNNING (FAIL in the study by now) end FAILED too."""
        from optuna.trial import TrialState

        from tfpipe.tracking.study import end_if_running, running_trial_runs

        failed = study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
        for trial in failed:
            if trial.user_attrs.get("mlflow_run_id"):
                end_if_running(self.parent, trial.user_attrs["mlflow_run_id"], "FAILED")
        unnamed = {t.number for t in failed if not t.user_attrs.get("mlflow_run_id")}
        for run_id in running_trial_runs(self.parent, unnamed) if unnamed else []:
            end_if_running(self.parent, run_id, "FAILED")  # killed before it named its run to the study

    def _tag(self, run_id, tags: dict) -> None:
        from tfpipe.tracking.study import tag_run

        if run_id:
            tag_run(self.parent, run_id, tags)


def run_study(study, objective: Objective, n_trials: int) -> None:
    """Trials until the study holds n_trials COMPLETE + PRUNED ones. Trials running in another tuner count
    (wait for them: they finish, or their heartbeat goes stale and they FAIL), so tuners sharing a study
    stop at n_trials; this tuner gives up after n_trials crashes of its own."""
    crashes, ended = 0, []  # this tuner's trials (the study's last one may be another tuner's)
    while crashes < n_trials:
        _fail_stale(study)
        objective.end_dead_runs(study)
        states = [t.state.name for t in study.get_trials(deepcopy=False)]
        done = states.count("COMPLETE") + states.count("PRUNED")
        if done >= n_trials:
            return
        if done + states.count("RUNNING") >= n_trials:
            time.sleep(HEARTBEAT_SECONDS)
            continue
        study.optimize(objective, n_trials=1, catch=(TrialCrashed,), callbacks=[lambda _, t: ended.append(t)])
        crashes += ended[-1].state.name == "FAIL"


def _fail_stale(study) -> None:
    import warnings

    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        optuna.storages.fail_stale_trials(study)
