"""`python -m pipeline.tune`: bad specs refused with one line before any trial (fast), and a real study on the
tiny project (slow): 4 trials, one pruned, the tuner killed with SIGKILL after 2 and restarted, every trial's
MLflow run under the study's parent, and the best config re-run to the same metric."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GOOD_SPACE = "space:\n  train.optimizer.learning_rate: {low: 1.0e-4, high: 0.1, log: true}\n"


@pytest.fixture()
def conf_project(tmp_path, monkeypatch):
    shutil.copytree(ROOT / "conf", tmp_path / "conf")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("space:\n  train.optimizer.lr: {low: 0.1, high: 1.0}\n", "train.optimizer.lr"),
        ("space:\n  train.optimizer.learning_rate: {low: 0.1, high: 0.01}\n", "low 0.1 > high 0.01"),
        (
            "space:\n  train.optimizer.learning_rate: {low: 0.0, high: 0.1, log: true}\n",
            "log scale needs low > 0",
        ),
        ("space:\n  model.ngrams: {choices: []}\n", "choices must be a non-empty list"),
        ("n_trials: 0\n" + GOOD_SPACE, "n_trials must be an integer >= 1"),
        ("metric: test_accuracy\n" + GOOD_SPACE, "not a validation metric"),
        ("space:\n  train.optimizer.learning_rate: {low: -1.0, high: 0.1}\n", "learning_rate"),
        ("colour: blue\n" + GOOD_SPACE, "unknown key 'colour' (allowed: overrides, metric, direction"),
        ("sampler: {name: grid}\n" + GOOD_SPACE, "sampler.name must be one of tpe, random"),
        ("pruner: {name: hyperband}\n" + GOOD_SPACE, "pruner.name must be one of median, none"),
        ("direction: up\n" + GOOD_SPACE, "direction must be minimize or maximize, got 'up'"),
        ("sampler: {name: tpe, seeds: 1}\n" + GOOD_SPACE, "sampler.seeds: not an option of the tpe sampler"),
        (
            "pruner: {name: median, n_startup_trials: -1}\n" + GOOD_SPACE,
            "pruner median: Number of startup trials cannot be negative, but got n_startup_trials=-1",
        ),
    ],
)
def test_bad_spec_is_one_line_exit_2_before_any_trial(conf_project, capsys, spec, expected):
    from tfpipe import tuning

    (conf_project / "conf" / "tune" / "bad.yaml").write_text(spec)
    assert tuning.main(["bad"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tune: error: ") and err.count("\n") == 1, err
    assert expected in err
    assert not (conf_project / "optuna.db").exists() and not (conf_project / "mlflow.db").exists()


def test_unknown_spec_name_and_console_script(conf_project, capsys):
    from tfpipe import cli

    with pytest.raises(SystemExit) as exc:
        cli.main(["tune", "nosuch"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("tune: error: conf/tune/nosuch.yaml not found") and err.count("\n") == 1


class _ReachedTheStudy(Exception):
    """Raised instead of opening the study: the spec got past every check."""


@pytest.fixture()
def no_study(monkeypatch):
    """The tuner stops where it would open the study (so a spec that passes the checks never runs a trial);
    the spec it got there with is kept in the returned list."""
    from tfpipe.tuning import study

    seen = []

    def _open_study(spec, url, name):
        seen.append(spec)
        raise _ReachedTheStudy(name)

    monkeypatch.setattr(study, "open_study", _open_study)
    return seen


LR_AND_NGRAMS = (
    "space:\n  train.optimizer.learning_rate: {low: 1.0e-4, high: 0.1, log: true}\n"
    "  model.ngrams: {choices: [1, 2]}\n  train.epochs: {type: int, low: 1, high: 9, step: 2}\n"
)


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("sampler: 3\n" + GOOD_SPACE, "sampler must be a name (tpe | random) or a mapping"),
        ("pruner: [median]\n" + GOOD_SPACE, "pruner must be a name (median | none) or a mapping"),
        ("space:\n  model: {ngrams: {choices: [1, 2]}}\n", "space.model: unknown key 'ngrams' (allowed: low"),
        ("space:\n  model.ngrams: {choices: [1, 2], low: 1}\n", "space.model.ngrams: choices takes no other"),
        ("space:\n  model.ngrams: {choices: [[1], [2]]}\n", "choice [1] is not a number, string, boolean or"),
        (
            "space:\n  train.optimizer.learning_rate: {low: 0.1, high: 0.2, log: true, step: 0.01}\n",
            "step and log: true cannot be combined",
        ),
        ("space:\n  train.epochs: {type: int, low: 1.5, high: 4}\n", "type int needs integer low and high"),
        ("overrides: experiment=smoke\n" + GOOD_SPACE, "overrides must be a list of Hydra overrides"),
        (
            "enqueue:\n  - {model.ngram: 2}\n" + LR_AND_NGRAMS,
            "enqueue[0]: 'model.ngram' is not a key of space (space keys: train.optimizer.learning_rate, "
            "model.ngrams, train.epochs)",
        ),
        (
            "enqueue:\n  - {model.ngrams: 1}\n  - {train.optimizer.learning_rate: 1.0e-6}\n" + LR_AND_NGRAMS,
            "enqueue[1].train.optimizer.learning_rate: 1e-06 is outside the range [0.0001, 0.1]",
        ),
        (
            "enqueue:\n  - {model.ngrams: 3}\n" + LR_AND_NGRAMS,
            "model.ngrams: 3 is not one of the choices [1, 2]",
        ),
        ("enqueue:\n  - {train.epochs: 4}\n" + LR_AND_NGRAMS, "train.epochs: 4 is not on the grid"),
        ("enqueue:\n  - {train.epochs: 2.5}\n" + LR_AND_NGRAMS, "train.epochs: 2.5 is not an integer"),
        ("enqueue: {model.ngrams: 1}\n" + LR_AND_NGRAMS, "enqueue must be a list of {space key: value}"),
        ("enqueue: [0.01]\n" + LR_AND_NGRAMS, "enqueue[0] must map space keys to values, got 0.01"),
        (
            "pruner: {name: none, n_startup_trials: 3}\n" + GOOD_SPACE,
            "pruner none takes no options, got n_startup_trials (options only apply to median)",
        ),
        (
            "sampler: {name: random, n_startup_trials: 3}\n" + GOOD_SPACE,
            "sampler.n_startup_trials: not an option of the random sampler (Optuna RandomSampler; allowed: seed)",
        ),
        (
            "pruner: {name: median, warmup: 3}\n" + GOOD_SPACE,
            "pruner.warmup: not an option of the median pruner (Optuna MedianPruner; allowed: n_startup_trials, "
            "n_warmup_steps, interval_steps, n_min_trials)",
        ),
    ],
)
def test_bad_sampler_pruner_space_or_enqueue_is_one_line_before_the_study(
    conf_project, capsys, no_study, spec, expected
):
    from tfpipe import tuning

    (conf_project / "conf" / "tune" / "bad.yaml").write_text(spec)
    assert tuning.main(["bad"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tune: error: conf/tune/bad.yaml: ") and err.count("\n") == 1, err
    assert expected in err
    assert not no_study and not (conf_project / "optuna.db").exists()


def test_sampler_and_pruner_by_name_alone(conf_project, no_study, monkeypatch):
    """`sampler: random` / `pruner: none` (what a user types) are the named ones, the sampler seeded like the
    default; the study opened from them has those Optuna classes."""
    import optuna

    from tfpipe import tuning
    from tfpipe.tuning import study

    for sampler, pruner in (("random", "none"), ("tpe", "median")):
        spec = f"sampler: {sampler}\npruner: {pruner}\n" + GOOD_SPACE
        (conf_project / "conf" / "tune" / "named.yaml").write_text(spec)
        with pytest.raises(_ReachedTheStudy):
            tuning.main(["named"])
        assert no_study[-1].sampler == {"name": sampler, "seed": 0}
        assert no_study[-1].pruner == {"name": pruner}
    monkeypatch.undo()  # the real open_study
    opened = study.open_study(no_study[0], f"sqlite:///{conf_project / 'optuna.db'}", "named")
    assert isinstance(opened.sampler, optuna.samplers.RandomSampler)
    assert isinstance(opened.pruner, optuna.pruners.NopPruner)


def test_best_params_yaml_is_a_config_that_run_all_and_dvc_accept(tmp_path, monkeypatch):
    """The parent's best/params.yaml (and best/overrides.txt), from a study on the real imdb_fast spec whose
    best trial drew a null choice too: `pipeline.run_all --params` loads it (`config.load_params`) to the config
    the overrides compose, and it holds every param and template key dvc.yaml reads. No training."""
    import optuna
    import yaml

    from tfpipe import config, tuning
    from tfpipe.tracking import study as tracked
    from tfpipe.tuning import checks, space

    spec = checks.load_spec("imdb_fast", ROOT / "conf")
    spec.space["data.max_examples_per_split"] = {"choices": [None, 100]}  # null: `=null` to Hydra, not 'None'
    best = {"train.optimizer.learning_rate": 0.0123, "model.ngrams": 2, "data.max_examples_per_split": None}
    values = [0.5, 0.9, 0.7]  # val_accuracy: the second trial is the best (maximize)

    def objective(trial):  # the tuner's sampling, without the training
        space.suggest(trial, spec.space)
        return values[trial.number]

    opened = optuna.create_study(direction=spec.direction)
    for params in ({"model.ngrams": 1}, best, {"model.ngrams": 3}):
        opened.enqueue_trial(params)
    opened.optimize(objective, n_trials=3)
    assert opened.best_trial.params == best
    recorded = {}
    monkeypatch.setattr(
        tracked, "record_best", lambda *args: recorded.update(zip(("overrides", "yaml"), args[3:]))
    )
    assert tuning._record_best(opened, spec, spec.overrides, ROOT / "conf", parent=None) == "FINISHED"

    (tmp_path / "params.yaml").write_text(recorded["yaml"])
    cfg = config.load_params(tmp_path / "params.yaml")  # what `pipeline.run_all --params FILE` reads
    assert cfg == config.compose("\n".join(recorded["overrides"]).split(), config_dir=ROOT / "conf")
    assert (cfg.train.optimizer.learning_rate, cfg.model.ngrams) == (0.0123, 2)
    assert cfg.data.max_examples_per_split is None and cfg.dataset.name == "imdb"
    params = yaml.safe_load(recorded["yaml"])
    dvc = (ROOT / "dvc.yaml").read_text()
    keys = [k for stage in yaml.safe_load(dvc)["stages"].values() for k in stage.get("params", [])]
    keys += re.findall(r"\$\{([\w.]+)\}", dvc)  # DVC templating reads params.yaml too
    for key in keys:
        node = params
        for part in key.split("."):
            assert isinstance(node, dict) and part in node, f"dvc.yaml reads {key}, not in best/params.yaml"
            node = node[part]


def test_a_dead_trial_s_run_ends_failed_even_before_it_named_its_run(tmp_path, monkeypatch):
    """A trial killed after its run opened but before it told the study the run id: the next tuner finds the run
    by its tune.trial tag (set when the run opens, from the tuner's environment) and ends it FAILED; a run of a
    trial still RUNNING (another tuner's) is left alone."""
    import optuna

    from tfpipe import config
    from tfpipe.tracking.opening import TUNE_TRIAL_ENV, ParentRun, context_tags
    from tfpipe.tuning.study import Objective

    cfg = config.compose([f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}"], config_dir=ROOT / "conf")
    parent = ParentRun(cfg, tmp_path, "tune-study")
    try:
        client = parent.client
        experiment = client.get_run(parent.run_id).info.experiment_id
        runs = {}
        for number in (0, 1):
            monkeypatch.setenv(TUNE_TRIAL_ENV, str(number))  # as the tuner starts each trial's process
            runs[number] = client.create_run(experiment, tags=context_tags()).info.run_id  # the train stage's
        study = optuna.create_study()
        study.ask()  # trial 0: still running in another tuner
        study.tell(study.ask(), state=optuna.trial.TrialState.FAIL)  # trial 1: its tuner died
        Objective(None, [], tmp_path, "", parent, cfg).end_dead_runs(study)
        assert client.get_run(runs[1]).info.status == "FAILED"
        assert client.get_run(runs[0]).info.status == "RUNNING"
    finally:
        parent.close()


# ----------------------------------------------------------------------------- a real study (slow)


def _study(project: Path, db: str = "optuna.db"):
    import optuna

    return optuna.load_study(study_name="tune-smoke", storage=f"sqlite:///{project / db}")


def _done(project: Path) -> int:
    """COMPLETE + PRUNED trials, read straight from the study's SQLite file: one read-only query that gives up at
    once when the tuner holds the lock (optuna.load_study could wait out SQLAlchemy's 5 s busy timeout, and in
    the suite the tuner once finished all its trials while the polls saw fewer than 2)."""
    try:
        with closing(sqlite3.connect(f"file:{project / 'optuna.db'}?mode=ro", uri=True, timeout=0.05)) as db:
            (count,) = db.execute(
                "SELECT COUNT(*) FROM trials WHERE state IN ('COMPLETE', 'PRUNED')"
            ).fetchone()
        return int(count)
    except sqlite3.Error:  # no file yet, no tables yet, or locked this instant: ask again next poll
        return -1


def _running_run(project: Path) -> dict | None:
    """The tags of the run named in the project's run file when that run is RUNNING in the store, else None.
    Read straight from the store's SQLite file, giving up at once when it is locked: the caller has just frozen
    the trial, which may hold the write lock, so a client waiting out the busy timeout would fail (as it once
    did in CI: "database is locked"); the caller thaws the trial and asks again."""
    try:
        run_id = json.loads((project / "run.json").read_text())["run_id"]
    except (OSError, ValueError, KeyError):  # no run file, or one being written
        return None
    try:
        with closing(sqlite3.connect(f"file:{project / 'mlflow.db'}?mode=ro", uri=True, timeout=0.05)) as db:
            status = db.execute("SELECT status FROM runs WHERE run_uuid = ?", (run_id,)).fetchone()
            tags = db.execute("SELECT key, value FROM tags WHERE run_uuid = ?", (run_id,)).fetchall()
    except sqlite3.Error:  # locked this instant
        return None
    return {**dict(tags), "run_id": run_id} if status == ("RUNNING",) else None


def _signal_all(pids: list, sig: int) -> None:
    for pid in pids:
        try:
            os.kill(int(pid), sig)
        except ProcessLookupError:
            pass


def _kill_during_a_trial(cmd, project: Path, env: dict, done: int, timeout: float = 900) -> dict:
    """Start the tuner; once `done` trials finished and a later one has opened its MLflow run, SIGKILL the tuner
    (only: its trial must die with it) and return that run's tags (with its run_id). Cheap checks every 20 ms
    (a trial process, the run file the tuner removes before each trial); then the trial's process is frozen
    (SIGSTOP) and its run seen RUNNING before the kill, so a tiny trial cannot end between check and kill."""
    proc = subprocess.Popen(cmd, cwd=project, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    seen = []
    while (count := _done(project)) < done:
        seen.append(count)
        assert proc.poll() is None, (
            f"the tuner ended ({proc.returncode}) before {done} trials (polls saw {seen[-20:]})"
        )
        assert time.monotonic() < deadline
        time.sleep(0.2)
    while True:
        assert proc.poll() is None, (
            f"the tuner ended ({proc.returncode}) before a trial after {done} was caught"
        )
        assert time.monotonic() < deadline
        frozen = _trial_processes(project) if (project / "run.json").exists() else []
        _signal_all(frozen, signal.SIGSTOP)
        run = _running_run(project) if frozen and _trial_processes(project) == frozen else None
        if run is not None:
            break  # alive (an exited trial has no command line left) and its run still RUNNING
        _signal_all(frozen, signal.SIGCONT)
        time.sleep(0.02)
    deadline = time.monotonic()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    while _trial_processes(project):  # the trial dies with its tuner (PR_SET_PDEATHSIG), frozen or not
        assert time.monotonic() < deadline + 20, "the trial outlived its SIGKILLed tuner"
        time.sleep(0.5)
    return run


def _trial_processes(project: Path) -> list:
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if b"tfpipe\0run-all" in (proc / "cmdline").read_bytes() and (proc / "cwd").resolve() == project:
                found.append(proc.name)
        except OSError:
            continue
    return found


@pytest.mark.slow
def test_study_prunes_resumes_after_kill_and_best_reruns(tmp_path, image_dir, text_dir):
    from mlflow import MlflowClient
    from test_pipeline_e2e import TINY, _make_project, _run

    project, env = _make_project(tmp_path, image_dir, text_dir)
    cmd = [sys.executable, "-m", "pipeline.tune", "smoke", *[o for o in TINY if o != "experiment=smoke"]]
    killed_run = _kill_during_a_trial(cmd, project, env, done=2)
    _run(cmd, project, env, timeout=1800)  # the restarted tuner continues the same study

    study = _study(project)
    states = [t.state.name for t in study.trials]
    assert states.count("COMPLETE") + states.count("PRUNED") == 4, states
    assert states[1] == "PRUNED" and "RUNNING" not in states, states  # lr 1000 is stopped after epoch 1
    client = MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    parent = client.get_run(study.user_attrs["mlflow_parent_run_id"])
    assert parent.info.status == "FINISHED" and parent.data.metrics["best_val_loss"] == study.best_value
    # the trial whose run was open when the tuner was killed (maybe before it named the run to the study: the
    # run's tune.trial tag, set when it opens, says which): FAIL in the study, FAILED in MLflow
    killed = study.trials[int(killed_run["tune.trial"])]
    assert killed.number >= 2 and killed.state.name == "FAIL", states
    assert client.get_run(killed_run["run_id"]).info.status == "FAILED"
    for trial in study.trials:
        if trial.state.name not in ("COMPLETE", "PRUNED"):
            continue
        run = client.get_run(trial.user_attrs["mlflow_run_id"])
        assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
        pruned = trial.state.name == "PRUNED"
        assert run.data.tags["tune.pruned"] == str(pruned).lower()
        assert run.info.status == ("KILLED" if pruned else "FINISHED")
        assert "test_accuracy" not in run.data.metrics if pruned else "test_accuracy" in run.data.metrics

    with tempfile.TemporaryDirectory() as tmp:
        overrides = Path(client.download_artifacts(parent.info.run_id, "best/overrides.txt", tmp)).read_text()
    _run([sys.executable, "-m", "pipeline.run_all", *overrides.split()], project, env)
    rerun = json.loads((project / "metrics" / "train.json").read_text())
    assert rerun["val_loss"] == study.best_value


@pytest.mark.slow
def test_two_tuners_share_one_study(tmp_path, image_dir, text_dir):
    """Two checkouts, one tracking store and one study storage: the trials are split between the tuners, the
    study ends with exactly n_trials COMPLETE + PRUNED, all runs under the one parent."""
    from mlflow import MlflowClient
    from test_pipeline_e2e import TINY, _make_project

    shared = tmp_path / "shared"
    shared.mkdir()
    cmd = [sys.executable, "-m", "pipeline.tune", "smoke", *[o for o in TINY if o != "experiment=smoke"]]
    cmd += ["--storage", f"sqlite:///{shared / 'optuna.db'}"]
    # Both checkouts made before either tuner starts: the second then joins within its own start-up time, not
    # after a project's set-up too (under a loaded CI machine the first tuner had taken all four trials by then).
    checkouts = [_make_project(tmp_path / name, image_dir, text_dir) for name in ("a", "b")]
    procs = []
    for project, env in checkouts:
        env["MLFLOW_TRACKING_URI"] = f"sqlite:///{shared / 'mlflow.db'}"
        procs.append(
            subprocess.Popen(cmd, cwd=project, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        )
        while not _parent_id(shared):  # the second tuner joins once the study and its parent run exist
            assert procs[0].poll() is None, procs[0].stderr.read()
            time.sleep(1)
    for proc in procs:
        assert proc.wait(1800) == 0, proc.stderr.read()[-3000:]

    trials = [t for t in _study(shared).trials if t.state.name in ("COMPLETE", "PRUNED")]
    assert len(trials) == 4 and "RUNNING" not in [t.state.name for t in _study(shared).trials]
    assert {Path(t.user_attrs["project"]).parent.name for t in trials} == {"a", "b"}
    client = MlflowClient(f"sqlite:///{shared / 'mlflow.db'}")
    for trial in trials:
        run = client.get_run(trial.user_attrs["mlflow_run_id"])
        assert run.data.tags["mlflow.parentRunId"] == _parent_id(shared)


def _parent_id(shared: Path):
    """The study's parent run, read from optuna.db read-only: opening the storage with Optuna creates its tables
    where they are missing, racing the tuner that is creating them (an OperationalError in the tuner, seen twice
    under two workers)."""
    import json
    import sqlite3

    db = shared / "optuna.db"
    if not db.exists():
        return None
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)
        try:
            row = con.execute(
                "SELECT value_json FROM study_user_attributes WHERE key = 'mlflow_parent_run_id'"
            ).fetchone()
        finally:
            con.close()
    except sqlite3.Error:  # no tables yet, or being written right now
        return None
    return json.loads(row[0]) if row else None


@pytest.mark.parametrize("epochs, pruned", [(2, True), (1, False)])
def test_trial_hook_prunes_a_bad_epoch_but_never_the_last(tmp_path, epochs, pruned):
    """A real SQLite study: one finished trial at val_loss 0.1; a trial reporting 5.0 after epoch 0 is
    stopped (Interrupted, the study told through a user attr) unless epoch 0 was its last."""
    import optuna

    from tfpipe import interrupts
    from tfpipe.tuning.hook import PRUNED_ATTR, TrialHook

    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(study_name="s", storage=storage)
    study.add_trial(optuna.trial.create_trial(value=0.1, intermediate_values={0: 0.1, 1: 0.1}))
    trial = study.ask()
    info = {"storage": storage, "study": "s", "trial_id": trial._trial_id, "metric": "val_loss"}
    info.update(pruner={"name": "median", "n_startup_trials": 1}, run_file=str(tmp_path / "run.json"))
    hook = TrialHook(info, epochs)
    hook.on_train_begin(0)
    hook.on_epoch_end(0, {"val_loss": 5.0})
    assert hook.stop_requested() is pruned
    if pruned:
        with pytest.raises(interrupts.Interrupted):
            hook.stop("at the end of epoch 0")
        assert study.trials[-1].user_attrs[PRUNED_ATTR] == 0
    assert study.trials[-1].intermediate_values == {0: 5.0}


def _open_storage(url: str, start: float) -> None:
    from tfpipe.tuning import study

    time.sleep(max(0.0, start - time.time()))  # all processes open the fresh file at the same moment
    study._storage(url)


@pytest.mark.slow
def test_tuners_opening_a_fresh_sqlite_storage_at_once_all_succeed(tmp_path):
    """Optuna creates its schema on first open; without the lock one of two simultaneous tuners dies on
    `UNIQUE constraint failed: alembic_version.version_num`."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    for attempt in range(2):
        url = f"sqlite:///{tmp_path / f'optuna{attempt}.db'}"
        start = time.time() + 8  # after every spawned interpreter has imported optuna
        procs = [ctx.Process(target=_open_storage, args=(url, start)) for _ in range(4)]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(120)
        assert [proc.exitcode for proc in procs] == [0, 0, 0, 0], attempt


def test_reopening_a_study_with_the_other_direction_is_refused(tmp_path):
    """Optuna's load_if_exists keeps the stored direction silently: the best trial would be picked backwards."""
    from tfpipe.errors import ConfigError
    from tfpipe.tuning import study
    from tfpipe.tuning.space import TuneSpec

    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    space = {"train.optimizer.learning_rate": {"low": 1e-4, "high": 0.1}}
    study.open_study(TuneSpec(name="s", space=space, direction="minimize"), url, "shared")
    with pytest.raises(ConfigError, match="direction maximize, but study 'shared' in its storage minimizes"):
        study.open_study(TuneSpec(name="s", space=space, direction="maximize"), url, "shared")
