"""Issue 50 item 1: a run record's config is values only. A replaced `config/resolved.yaml` (any teammate with
EDIT on the store can replace it) must not make `audit --rerun` build or call anything the recorded
commit's own conf/ does not name at the same key: a nested `_target_` inside a hook's arguments (depth 1,
2, 3), a `_target_` under any other key, a builder conf/ does not name, `_partial_` / `_args_` forms, lists
of dicts. Each attack names a function of a module that writes a marker when it is imported and when it is
called; each is refused in one line before the stages, with nothing imported and no marker written. The
hooks' own builder (`hooks.from_config`, run by the train stage) refuses nested objects too, whatever the
config came from."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from tfpipe import hooks
from tfpipe.audit.rerun import _make_worktree
from tfpipe.errors import ConfigError, UserError

ROOT = Path(__file__).resolve().parents[1]

TEAM_HOOKS = """from tfpipe.hooks import Hook


class Notify(Hook):
    def __init__(self, every=1, **options):
        self.every, self.options = every, options
"""
TEAM_MODELS = """from pathlib import Path


def build(inputs, **params):
    return None


def other(inputs, **params):  # code of the commit, but no conf/ file names it as model.builder
    Path({marker!r}).write_text("called")
"""
CONF_TRAIN = "hooks:\n  - _target_: team_hooks.Notify\n    every: 2\n"
CONF_MODEL = "name: team\nbuilder: team_models:build\nparams: {}\nfit: null\n"
HOOK = "team_hooks.Notify"


class Sink(hooks.Hook):
    """A hook that keeps whatever it is given: what a nested object would become, were it built."""

    def __init__(self, **options):
        self.options = options


def _git(cwd, *args):
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t"}
    env.update(GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def evil(tmp_path, monkeypatch):
    """(dotted path of a function, marker): a module outside the repo that writes the marker when imported and
    when the function is called; a new name per test, so no earlier import hides one."""
    folder, name = tmp_path / "outside", f"evil_{uuid.uuid4().hex[:12]}"
    folder.mkdir()
    marker = tmp_path / "MARKER"
    (folder / f"{name}.py").write_text(
        "from pathlib import Path\n"
        f"Path({str(marker)!r}).write_text('imported')\n\n\n"
        "def run(*args, **kwargs):\n"
        f"    Path({str(marker)!r}).write_text('called')\n"
    )
    monkeypatch.syspath_prepend(str(folder))
    yield f"{name}.run", marker
    assert name not in sys.modules, "the attack's module was imported"


@pytest.fixture
def commit(tmp_path):
    """(repo, commit): a project whose conf/ names one hook (train.hooks[0]) and one builder."""
    repo = tmp_path / "repo"
    (repo / "conf" / "train").mkdir(parents=True)
    (repo / "conf" / "model").mkdir()
    (repo / "conf" / "config.yaml").write_text("defaults:\n  - train: default\n  - model: team\n  - _self_\n")
    (repo / "conf" / "train" / "default.yaml").write_text(CONF_TRAIN)
    (repo / "conf" / "model" / "team.yaml").write_text(CONF_MODEL)
    (repo / "team_hooks.py").write_text(TEAM_HOOKS)
    (repo / "team_models.py").write_text(TEAM_MODELS.format(marker=str(tmp_path / "MARKER")))
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "team hooks and model")
    return repo, _git(repo, "rev-parse", "HEAD").strip()


def _rerun_setup(commit, config, tmp_path, lines=None):
    """What `audit --rerun` does before its first stage: the worktree at the commit and its params.yaml
    from the record. Returns the params.yaml it wrote; the worktree is removed again."""
    repo, sha = commit
    work = tmp_path / f"work-{uuid.uuid4().hex[:6]}"
    work.mkdir()
    run = {"run_id": "RUN", "tags": {"git.commit": sha}, "config": config}
    try:
        wt = _make_worktree(repo, run, work, log=(lines if lines is not None else []).append)
        return yaml.safe_load((wt / "params.yaml").read_text())
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(work / "worktree")], cwd=repo)


def _hooked(*args: dict, target: str = HOOK) -> dict:
    return {
        "train": {"hooks": [{"_target_": target, "every": 2, **a} for a in args] or [{"_target_": target}]}
    }


def _refused(commit, config, tmp_path, key: str) -> str:
    with pytest.raises(UserError) as info:
        _rerun_setup(commit, config, tmp_path)
    message = str(info.value)
    assert "\n" not in message, message
    assert message.startswith(f"rerun: recorded {key}=") and message.endswith("refused"), message
    assert not (tmp_path / "MARKER").exists()
    return message


def _attacks(target: str) -> list:
    """(record, the key refused) of each class of attack, the function being `target`."""
    obj = {"_target_": target, "_args_": ["touch /tmp/x"]}
    return [
        (_hooked({"arg": {"_target_": target}}), "train.hooks[0].arg._target_"),  # depth 1
        (_hooked({"arg": {"inner": {"_target_": target}}}), "train.hooks[0].arg.inner._target_"),  # 2
        (_hooked({"arg": {"a": {"b": {"_target_": target}}}}), "train.hooks[0].arg.a.b._target_"),  # 3
        (_hooked({"arg": [{"_target_": target}]}), "train.hooks[0].arg[0]._target_"),  # a list of dicts
        (_hooked({"arg": [1, [{"_target_": target}]]}), "train.hooks[0].arg[1][0]._target_"),
        (_hooked({"arg": {"_target_": target, "_partial_": True}}), "train.hooks[0].arg._target_"),
        (_hooked({"arg": obj}), "train.hooks[0].arg._target_"),  # _args_: positional arguments
        (_hooked({"_args_": [{"_target_": target}]}), "train.hooks[0]._args_[0]._target_"),
        (_hooked({"_partial_": True}), "train.hooks[0]._partial_"),  # the trusted hook, as a partial
        (_hooked({"_recursive_": True, "x": 1}), "train.hooks[0]._recursive_"),
        (_hooked(target=target), "train.hooks[0]._target_"),  # a hook conf/ does not name
        (_hooked({}, {}), "train.hooks[1]._target_"),  # the named hook, at a place conf/ does not name it
        ({"data": {"_target_": target}}, "data._target_"),  # not a hook
        ({"data": {"path": "data/raw", "reader": obj}}, "data.reader._target_"),
        ({"model": {"name": "team", "params": {"x": obj}}}, "model.params.x._target_"),
        ({"model": {"params": [{"_target_": target}]}}, "model.params[0]._target_"),
        ({"_target_": target}, "_target_"),  # at the top
        ({"model": {"name": "team", "builder": "team_models:other"}}, "model.builder"),  # code of the commit
        ({"model": {"name": "team", "builder": target}}, "model.builder"),
        ({"model": {"name": "team", "builder": "team_models:build", "fit": target}}, "model.fit"),
        ({"model": {"name": "team", "builder": {"_target_": target}}}, "model.builder._target_"),
        (_hooked({"x": "${oc.decode:'{_target_: os.system}'}"}), "train.hooks[0].x"),  # made when read
    ]


@pytest.mark.parametrize("case", range(len(_attacks("x.y"))))
def test_a_record_naming_code_its_commit_conf_does_not_is_refused_before_anything_runs(
    commit, evil, tmp_path, case
):
    target, marker = evil
    config, key = _attacks(target)[case]
    message = _refused(commit, config, tmp_path, key)
    assert not marker.exists()
    if "${" not in message:
        assert "names code the commit's conf/ does not name at " + key in message


def test_the_refusal_says_what_conf_allows_at_the_key(commit, evil, tmp_path):
    target, _ = evil
    message = _refused(commit, _hooked(target=target), tmp_path, "train.hooks[0]._target_")
    assert message == (
        f"rerun: recorded train.hooks[0]._target_={target!r} names code the commit's conf/ does not name at "
        "train.hooks[0]._target_ (allowed there: 'team_hooks.Notify'); "
        "a record's config is taken as values only: refused"
    )
    message = _refused(commit, {"data": {"_target_": target}}, tmp_path, "data._target_")
    assert "(allowed there: none)" in message


def test_a_record_whose_callables_are_its_commits_is_accepted_as_values(commit, tmp_path, monkeypatch):
    """The hook and the builder conf/ names, at the keys it names them, with the record's own plain values
    (a nested mapping, a list of mappings without instantiation keys): params.yaml holds exactly them, and the
    hook the train stage builds from it is the commit's, with those arguments."""
    record = {
        "model": {
            "name": "team",
            "builder": "team_models:build",
            "params": {"width": 8, "sizes": [1]},
            "fit": None,
        },
        "train": {
            "epochs": 3,
            "hooks": [
                {"_target_": HOOK, "every": 5, "labels": {"a": [1, 2]}, "rows": [{"k": 1}, {"k": None}]}
            ],
        },
        "data": {"path": "data/raw", "validation": {"reference": None, "drift": "warn"}},
        "precision": {"policy": "auto"},
    }
    lines: list = []
    params = _rerun_setup(commit, record, tmp_path, lines)
    assert params == {**record, "tracking": {"uri": None, "artifact_location": None}}
    monkeypatch.syspath_prepend(str(commit[0]))
    (built,) = hooks.from_config(params["train"]["hooks"])
    assert type(built).__name__ == "Notify" and built.every == 5
    assert built.options == {"labels": {"a": [1, 2]}, "rows": [{"k": 1}, {"k": None}]}
    assert not (tmp_path / "MARKER").exists()


def test_a_recorded_precision_tag_is_a_value_too(commit, tmp_path):
    """`precision.resolved` (a tag: a teammate can change it) replaces `auto` only as a plain value."""
    repo, sha = commit
    record = {"precision": {"policy": "auto"}}
    work = tmp_path / "work"
    work.mkdir()
    run = {"tags": {"git.commit": sha, "precision.resolved": "${oc.env:HOME}"}, "config": record}
    with pytest.raises(
        UserError, match=r"^rerun: recorded precision.policy='\$\{oc.env:HOME\}' is an interp"
    ):
        _make_worktree(repo, run, work, log=lambda m: None)
    subprocess.run(["git", "worktree", "remove", "--force", str(work / "worktree")], cwd=repo)


def test_conf_names_code_where_hydra_puts_it(tmp_path):
    """A group file's keys land under its group, `# @package _global_` at the top; params.yaml at the top."""
    from tfpipe.audit.record_values import named_by_conf

    conf = tmp_path / "conf"
    (conf / "experiment").mkdir(parents=True)
    (conf / "train").mkdir()
    (conf / "train" / "default.yaml").write_text(CONF_TRAIN)
    (conf / "experiment" / "hooked.yaml").write_text(
        "# @package _global_\ndefaults:\n  - override /model: team\n"
        "train:\n  epochs: ${oc.env:EPOCHS}\n  hooks:\n    - _target_: team_hooks.Other\n"
        "      args: {_target_: a.B}\n"
        "model:\n  builder: team_models:wide\n"
    )
    (tmp_path / "params.yaml").write_text("model:\n  fit: team_models:fit\n")
    assert named_by_conf(conf, tmp_path / "params.yaml") == {
        "train.hooks[0]._target_": ["team_hooks.Other", HOOK],
        "train.hooks[0].args._target_": ["a.B"],
        "model.builder": ["team_models:wide"],
        "model.fit": ["team_models:fit"],
    }
    assert named_by_conf(tmp_path / "absent") == {}


def test_the_override_list_is_flat_typed_and_rebuilds_the_record():
    from tfpipe.audit.record_values import nested, overrides

    record = {"train": {"epochs": 2, "hooks": [], "optimizer": {"lr": 0.1}}}
    record["model"] = {"filters": [8, 8], "params": {}}
    values = overrides(record, {})
    assert values == [
        ("train.epochs", 2),
        ("train.hooks", []),
        ("train.optimizer.lr", 0.1),
        ("model.filters", [8, 8]),
        ("model.params", {}),
    ]
    assert nested(values) == record
    mixed = {"model": {"params": {"m": [1, {"a": [2, 3]}, [4, {"b": None}], {}, []]}}}
    assert [key for key, _ in overrides(mixed, {})] == [
        "model.params.m[0]",
        "model.params.m[1].a",
        "model.params.m[2][0]",
        "model.params.m[2][1].b",
        "model.params.m[3]",
        "model.params.m[4]",
    ]
    assert nested(overrides(mixed, {})) == mixed
    for bad, why in (
        ([1], "the recorded config is a list"),
        ({"a": {1: 2}}, "recorded key 1 under a is not a plain name"),
        ({"a": {"b.c": 2}}, "recorded key 'b.c' under a is not a plain name"),
        ({"a": {"b": object()}}, "recorded a.b holds a object"),
    ):
        with pytest.raises(UserError, match="^rerun: " + why):
            overrides(bad, {})


# ----------------------------------------------------------------- the train stage's own builder of hooks

NESTED = [
    {"arg": {"_target_": "{t}"}},  # depth 1
    {"arg": {"inner": {"_target_": "{t}"}}},  # depth 2
    {"arg": {"a": {"b": {"_target_": "{t}"}}}},  # depth 3
    {"arg": [{"_target_": "{t}"}]},  # a list of dicts
    {"arg": {"_target_": "{t}", "_partial_": True}},
    {"arg": {"_target_": "{t}", "_args_": ["x"]}},
    {"_args_": [{"_target_": "{t}"}]},  # Hydra's positional arguments, holding an object
]


def _sub(tree, target):
    if isinstance(tree, dict):
        return {k: _sub(v, target) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_sub(v, target) for v in tree]
    return target if tree == "{t}" else tree


@pytest.mark.parametrize("case", range(len(NESTED)))
def test_hooks_from_config_builds_no_nested_object(evil, case):
    """Even from a config no audit checked (params.yaml as written): only the entry's own `_target_` is built,
    with plain values; a nested instantiation key is one ConfigError line, nothing imported or called."""
    target, marker = evil
    args = _sub(NESTED[case], target)
    with pytest.raises(ConfigError) as info:
        hooks.from_config([{"_target_": "test_record_values.Sink", **args}])
    message = str(info.value)
    assert "\n" not in message and message.startswith("train.hooks[0].")
    assert "a hook's arguments are plain values" in message
    assert not marker.exists()


def test_hooks_from_config_passes_plain_nested_values():
    (built,) = hooks.from_config([{"_target_": "test_record_values.Sink", "a": {"b": [1, {"c": 2}]}}])
    assert isinstance(built, Sink) and built.options == {"a": {"b": [1, {"c": 2}]}}


@pytest.mark.slow
def test_audit_rerun_refuses_a_replaced_resolved_yaml_with_exit_2(commit, evil, tmp_path):
    """The command: a run forged in a real SQLite store whose config/resolved.yaml nests an object in the
    commit's own hook; `audit RUN --rerun` exits EXIT_BAD_INPUT with one line before any stage, nothing
    imported."""
    import mlflow

    from tfpipe.exits import EXIT_BAD_INPUT
    from tfpipe.tracking.reading import config_params

    repo, sha = commit
    target, marker = evil
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'store.db'}")
    exp = client.create_experiment("forged", artifact_location=(tmp_path / "art").as_uri())
    run_id = client.create_run(exp).info.run_id
    client.set_tag(run_id, "git.commit", sha)
    client.set_tag(run_id, "git.dirty", "false")
    forged = yaml.safe_dump(_hooked({"arg": {"a": {"_target_": target}}}))
    client.log_text(run_id, forged, "config/resolved.yaml")
    for key, value in config_params(yaml.safe_load(forged)).items():  # logged by the run's own maker
        client.log_param(run_id, key, value)
    path = os.pathsep.join([str(ROOT), str(ROOT / "src"), str(tmp_path / "outside")])
    env = {**os.environ, "PYTHONPATH": path}
    cmd = [sys.executable, "-m", "pipeline.audit", run_id, "--rerun", "--sandbox", "off"]
    cmd += ["--tracking-uri", f"sqlite:///{tmp_path / 'store.db'}"]
    proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == EXIT_BAD_INPUT, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("audit: error: rerun: recorded train.hooks[0].arg.a._target_=")
    assert "rerun: train" not in proc.stderr and not marker.exists()


@pytest.mark.parametrize(
    "override",
    [
        "hydra.searchpath=[pkg://tfpipe_evil_pkg]",
        "+hydra.job.chdir=true",
        "data.path=${oc.env:HOME}",
        "--cfg",
    ],
)
def test_the_config_origin_tag_never_brings_hydra_keys_or_interpolations_to_compose(override):
    """`tfpipe audit RUN` makes the config again from the run's tag tfpipe.config.origin, a tag anyone with EDIT may
    set: Hydra's own keys (a search path imports a package), flags and interpolations (resolvers, the environment)
    are refused before any compose, and the audit says why."""
    import json

    from tfpipe.config import origin

    tag = json.dumps({"from": "params", "params": None, "overrides": ["train.epochs=1", override]})
    made = origin.recorded({origin.TAG: tag})
    assert set(made) == {"unreadable"} and override in made["unreadable"]
    safe = json.dumps({"from": "params", "params": None, "overrides": ["train.epochs=1", "~train.hooks"]})
    assert origin.recorded({origin.TAG: safe})["overrides"] == ["train.epochs=1", "~train.hooks"]
