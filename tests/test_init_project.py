"""A project of one's own (issue 34, item 4): `tfpipe init DIR` writes a small project that extends tfpipe's packaged
conf/ through Hydra's search path and holds only the team's parts. The slow test builds the wheel, installs it
(not editable) into a fresh virtual environment, and runs the new project end to end on real data subsets."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from tfpipe import config, scaffold
from tfpipe.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_lists_every_package_of_src_and_the_packaged_conf():
    """pyproject's explicit package list (explicit because conf/ is mapped to tfpipe.conf) misses none."""
    listed = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    found = {
        ".".join(p.parent.relative_to(ROOT / "src").parts)
        for p in (ROOT / "src" / "tfpipe").rglob("__init__.py")
        if "__PACKAGE__" not in p.parts  # the template of a team's package
    }
    assert set(listed) == found | {"tfpipe.conf"}


def test_a_new_project_composes_with_the_packaged_groups_and_its_own_model(tmp_path, monkeypatch):
    project = tmp_path / "Team-Vision"
    written = scaffold.write(project)
    names = {str(p) for p in written}
    assert {"dvc.yaml", "params.yaml", "MLproject", "README.md", ".gitignore", ".dvcignore"} <= names
    assert {
        "conf/config.yaml",
        "conf/model/my_model.yaml",
        "team_vision/model.py",
        "tests/test_smoke.py",
    } <= names
    assert not (project / "conf" / "dataset").exists()  # tfpipe's groups stay in the package
    monkeypatch.chdir(project)
    cfg = config.compose()
    assert cfg.model.name == "my_model" and cfg.model.builder == "team_vision.model:build"
    assert cfg.tracking.experiment_name == "Team-Vision"
    assert cfg.tracking.registered_model_name == "Team-Vision-cifar10"
    # a dataset picks its default model; the project's own stays picked, and the command line still wins
    assert config.compose(["dataset=imdb"]).model.name == "my_model"
    assert config.compose(["dataset=imdb", "model=embedding_gap"]).model.name == "embedding_gap"
    assert config.load_params("params.yaml") == cfg  # params.yaml is the composition, as DVC writes it
    assert config.compose(["model.params.width=64"]).model.params == {"width": 64, "dropout": 0.0}
    with pytest.raises(
        ConfigError, match=r"model.params.widht=64: this key is not set by the selected 'model'"
    ):
        config.compose(["model.params.widht=64"])
    with pytest.raises(ConfigError, match=r"model='resnt'.*did you mean 'resnet'.*my_model"):
        config.check_overrides(["model=resnt"])


def test_the_projects_smoke_test_passes(tmp_path, monkeypatch):
    project = tmp_path / "proj"
    scaffold.write(project, model="net")
    monkeypatch.chdir(project)
    monkeypatch.syspath_prepend(str(project))
    namespace: dict = {}
    exec(compile((project / "tests" / "test_smoke.py").read_text(), "test_smoke.py", "exec"), namespace)
    for name, test in namespace.items():
        if name.startswith("test_"):
            test()


@pytest.mark.parametrize(
    "name, setup, args, message",
    [
        (
            "here",
            lambda d: (d / "notes.txt").write_text("mine"),
            [],
            r"is not empty; tfpipe init writes .* new",
        ),
        ("here", lambda d: None, ["--model", "cnn"], r"--model 'cnn': a built-in model's name"),
        ("here", lambda d: None, ["--model", "My Net"], r"--model 'My Net': expected lower-case letters"),
        ("my: team", lambda d: None, [], r"the folder's name names the project .*letters, digits"),
    ],
)
def test_init_refuses_in_one_line_and_writes_nothing(tmp_path, capsys, name, setup, args, message):
    folder = tmp_path / name
    folder.mkdir()
    setup(folder)
    before = sorted(folder.iterdir())
    assert scaffold.main([str(folder), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and re.search(message, err), err
    assert sorted(folder.iterdir()) == before


def _running_site_packages() -> list:
    """The folders this interpreter imports installed packages from: its own (a venv's, when the suite runs in
    the README's `python -m venv` install) and those it sees beyond them (a venv made with
    --system-site-packages, the user's site), in that order."""
    import site
    import sysconfig

    paths = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()]
    if site.ENABLE_USER_SITE:
        paths.append(site.getusersitepackages())
    return [p for i, p in enumerate(paths) if p not in paths[:i] and os.path.isdir(p)]


def _venv_with_the_wheel(tmp_path: Path) -> Path:
    """A fresh venv holding the built wheel, not editable. Its dependencies are those of the interpreter
    running the suite: a .pth file in the venv's site-packages lists that interpreter's site-packages folders,
    after the venv's own (so the wheel's tfpipe is found first). Not --system-site-packages, which reaches the
    BASE interpreter's, not a venv's: the suite run from the README's venv found no omegaconf there. And the
    folders are only put on sys.path, their .pth files not run: this checkout's editable install stays
    inactive. The claim is about how tfpipe itself installs, not about downloading TensorFlow."""
    source = tmp_path / "source"  # the build writes build/ and *.egg-info: a copy keeps the checkout clean
    source.mkdir()
    shutil.copy(ROOT / "pyproject.toml", source / "pyproject.toml")
    for folder in ("src", "conf"):
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    wheels = tmp_path / "wheels"
    build = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-q",
        "-w",
        wheels,
        source,
    ]
    subprocess.run(build, check=True, capture_output=True)
    (wheel,) = wheels.glob("tfpipe-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    own = subprocess.run([venv / "bin" / "python", "-c", purelib], check=True, capture_output=True, text=True)
    (Path(own.stdout.strip()) / "_tfpipe_tests_running_site.pth").write_text(
        "".join(f"{path}\n" for path in _running_site_packages())
    )
    install = [venv / "bin" / "python", "-m", "pip", "install", "--no-deps", "--no-index", "-q", wheel]
    subprocess.run(install, check=True, capture_output=True)
    return venv


def _extract(name: str, per_class: dict, dest: Path) -> Path:
    from test_data_real import CASES, SHARED, _extract_subset

    archive = SHARED / CASES[name][0]
    if not archive.is_file():
        pytest.skip(f"{archive} not found (real data lives in ../shared/datasets)")
    return _extract_subset(archive, CASES[name][1], per_class, dest)


@pytest.mark.slow
@pytest.mark.real_data
def test_an_installed_wheel_inits_a_project_that_trains_serves_and_audits(tmp_path):
    cifar = _extract("cifar10", {"train": 12, "test": 4}, tmp_path / "raw")
    imdb = _extract("imdb", {"train": 30, "test": 10}, tmp_path / "raw")
    venv = _venv_with_the_wheel(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "MLFLOW_", "TFPIPE_"))}
    env.update(
        PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}", DVC_NO_ANALYTICS="1", TF_CPP_MIN_LOG_LEVEL="2"
    )
    env.update(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")

    def run(*cmd, cwd, stdout_only=False):
        proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, f"{cmd}: {proc.stdout[-1500:]}\n{proc.stderr[-2500:]}"
        return proc.stdout if stdout_only else proc.stdout + proc.stderr

    project = tmp_path / "vision"
    where = run(
        "python",
        "-c",
        "import tfpipe, tfpipe.conf; print(tfpipe.__file__, tfpipe.conf.__file__)",
        cwd=tmp_path,
    )
    assert where.count(str(venv)) == 2, where  # the wheel's tfpipe and its packaged conf, not this checkout's
    assert "git and dvc initialised" in run("tfpipe", "init", project, cwd=tmp_path)
    shutil.move(cifar, project / "data" / "raw" / "cifar10")
    shutil.move(imdb, project / "data" / "raw" / "imdb")
    run("git", "commit", "-qm", "tfpipe init", cwd=project)
    runs = {}
    for dataset in ("cifar10", "imdb"):
        exp_run = ["python", "-m", "dvc", "exp", "run", "-S", f"dataset={dataset}", "-S", "train.epochs=1"]
        run(*exp_run, "-S", "train.batch_size_per_replica=16", cwd=project)  # 54 IMDb train examples
        runs[dataset] = json.loads((project / "run.json").read_text())["run_id"]
    status = [str(venv / "bin" / "python"), "-m", "dvc", "status", "--json"]

    def dvc_status() -> dict:
        proc = subprocess.run(status, cwd=project, env=env, capture_output=True, text=True, check=True)
        found = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        assert found, f"dvc status --json printed no JSON: {proc.stdout[-500:]!r} {proc.stderr[-500:]!r}"
        return json.loads(found[-1])

    assert dvc_status() == {}  # nothing changed: nothing to run
    with (project / "vision" / "model.py").open("a") as model_file:
        model_file.write("# the team edits its model\n")
    assert "train" in dvc_status()  # train depends on the project's package: editing the model re-trains
    run("git", "checkout", "vision/model.py", cwd=project)
    check = (
        "import json, sys, mlflow, numpy as np\n"
        "mlflow.set_tracking_uri('sqlite:///mlflow.db')\n"
        "c = mlflow.MlflowClient()\n"
        "out = {}\n"
        "for d, r in json.loads(sys.argv[1]).items():\n"
        "    run = c.get_run(r)\n"
        "    x = np.zeros((2, 32, 32, 3), np.uint8) if d == 'cifar10' else ['a great film', 'dull']\n"
        "    p = mlflow.pyfunc.load_model(f'runs:/{r}/model').predict(x)\n"
        "    out[d] = dict(status=run.info.status, model=run.data.params['model.name'],\n"
        "                  exp=c.get_experiment(run.info.experiment_id).name, acc='test_accuracy' in run.data.metrics,\n"
        "                  rows=len(p), cols=list(p.columns))\n"
        "print(json.dumps(out))\n"
    )
    seen = json.loads(
        run("python", "-c", check, json.dumps(runs), cwd=project, stdout_only=True).strip().splitlines()[-1]
    )
    for dataset, classes in (("cifar10", 10), ("imdb", 2)):
        got = seen[dataset]
        assert (got["status"], got["model"], got["exp"], got["acc"]) == (
            "FINISHED",
            "my_model",
            "vision",
            True,
        )
        assert got["rows"] == 2 and got["cols"][0] == "class" and len(got["cols"]) == classes + 1
        # batch predict takes the team's model too: one row per test file, a probability per class folder
        test_split = project / "data" / "raw" / dataset / "test"
        files = sorted(p.relative_to(test_split).as_posix() for p in test_split.rglob("*") if p.is_file())
        out = tmp_path / f"{dataset}.csv"
        run("tfpipe", "predict", f"runs:/{runs[dataset]}/model", test_split, "--out", out, cwd=project)
        with out.open() as fh:
            rows = list(csv.reader(fh))
        class_names = sorted(p.name for p in test_split.iterdir())
        assert rows[0] == ["file", "label", "probability", *(f"p_{c}" for c in class_names)], rows[0]
        assert sorted(row[0] for row in rows[1:]) == files and {row[1] for row in rows[1:]} <= set(
            class_names
        )

    clone = tmp_path / "teammate"
    run("git", "clone", "-q", project, clone, cwd=tmp_path)
    shutil.copytree(project / "data" / "raw" / "imdb", clone / "data" / "raw" / "imdb")
    audit = ["python", "-m", "tfpipe", "audit", runs["imdb"], "--rerun", "--tracking-uri"]
    audit.append(f"sqlite:///{project / 'mlflow.db'}")

    def reviewed() -> list:  # --rerun alone shows the diff to apply and ends naming its digest
        shown = subprocess.run(audit, cwd=clone, env=env, capture_output=True, text=True, timeout=300)
        assert shown.returncode == 2, shown.stderr[-2000:]
        return ["--apply-diff", shown.stderr.rsplit("--apply-diff ", 1)[-1].strip()]

    out = run(*audit, *reviewed(), cwd=clone)  # stdout, then the plan and progress on stderr
    assert "\nREPRODUCED\n" in out, out[-2000:]
    assert "is not in this clone (`dvc exp pull REMOTE" in out  # not shared: the record's diff
    # shared the DVC way (here: fetched from the first clone): the experiment's own commit decides the code
    run("python", "-m", "dvc", "exp", "pull", "--no-cache", "-A", "origin", cwd=clone)
    out = run(*audit, *reviewed(), cwd=clone)
    assert "\nREPRODUCED\n" in out, out[-2000:]
    assert "is in this clone (refs/exps/" in out and "differs from the experiment's commit" not in out
