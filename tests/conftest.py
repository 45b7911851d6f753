"""Shared fixtures: the real Hydra config, composed once and shrunk per test."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import tfpipe  # noqa: F401  (first: its lean_keras keeps Keras from importing its extras in the test workers too)

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATASETS = ROOT.parent / "shared" / "datasets"

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("DVC_NO_ANALYTICS", "1")  # no `dvc daemon analytics` process after each dvc command


TINY_VOCAB = ["film", "great", "awful", "the", "boring"]  # a text model's vocabulary for model-level tests


def default_policy() -> str:
    """The policy the default config (precision=auto) should train in on this host (tagged precision.resolved),
    read from /proc/cpuinfo here, not by the code under test: no GPU on the test machines, so bf16 exactly
    when the CPU has AMX-BF16 or AVX512-BF16 and oneDNN is not capped below them."""
    import tensorflow as tf

    assert not tf.config.list_physical_devices("GPU"), "the suite's expected policies assume a CPU-only host"
    return "mixed_bfloat16" if cpu_flags() & {"amx_bf16", "avx512_bf16"} and not _bf16_capped() else "float32"


def cpu_flags() -> set:
    """This CPU's flags, read here rather than by the code under test."""
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    return {
        f for line in text.splitlines() if line.startswith("flags") for f in line.split(":", 1)[1].split()
    }


def _bf16_capped() -> bool:
    below_bf16 = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI")
    return os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper() in below_bf16


@pytest.fixture(autouse=True)
def _no_leaked_environment():
    """Each test leaves os.environ and MLflow's global tracking URI as it found them: `mlflow.set_tracking_uri`
    exports MLFLOW_TRACKING_URI, which would send a later test's subprocess jobs to this test's store."""
    saved = dict(os.environ)
    yield
    import sys

    if "mlflow" in sys.modules:
        sys.modules["mlflow"].set_tracking_uri(None)
    if dict(os.environ) != saved:
        os.environ.clear()
        os.environ.update(saved)


CHECKOUT_OUTPUTS = (
    "mlruns",
    "mlartifacts",
    "mlflow.db",
    "models",
    "metrics",
    "plots",
    "run.json",
    "outputs",
    "multirun",
    ".tfpipe",
    "data/prepared",
)  # what a stage run from this checkout would write


@pytest.fixture(autouse=True)
def _no_outputs_in_the_checkout():
    """Each test writes only into its own folders: an MLflow experiment made without an artifact location, or a
    stage run from the suite's working folder, would leave outputs in this checkout (found: mlruns/)."""
    before = {name for name in CHECKOUT_OUTPUTS if (ROOT / name).exists()}
    yield
    made = sorted(name for name in CHECKOUT_OUTPUTS if name not in before and (ROOT / name).exists())
    assert not made, f"the test wrote {made} into the checkout {ROOT}"


# ----------------------------------------------------------------------------- the checkout, watched
# The per-test guard above sees only a NEW output. The session guard below also sees one written to: it
# snapshots the checkout's outputs, params.yaml, dvc.lock and `git status` when the session starts (on the
# xdist controller, or the one process without xdist) and fails the session when any of them differ at its
# end.

_WATCHED_FILES = ("params.yaml", "dvc.lock")
_SESSION_SNAPSHOT = pytest.StashKey[dict]()


def checkout_snapshot(root: Path = ROOT) -> dict:
    """What a test must never change in `root`: {name: state}, each of CHECKOUT_OUTPUTS that exists as the
    sorted (relative path, size, mtime_ns) of everything under it, params.yaml and dvc.lock as (size,
    mtime_ns), and `git status --porcelain` (read without taking git's index lock). Stats only: milliseconds
    for a usual tree."""
    import subprocess

    snapshot = {}
    for name in (*CHECKOUT_OUTPUTS, *_WATCHED_FILES):
        path = root / name
        if not os.path.lexists(path):
            continue
        entries = [_stat_entry(path, name)]
        if path.is_dir():
            for folder, dirs, files in os.walk(path):
                dirs.sort()
                for entry in sorted([*dirs, *files]):
                    full = os.path.join(folder, entry)
                    entries.append(_stat_entry(Path(full), os.path.relpath(full, root)))
        snapshot[name] = entries
    proc = subprocess.run(
        ["git", "--no-optional-locks", "status", "--porcelain", "--untracked-files=all"],
        cwd=root,
        capture_output=True,
        text=True,
    )
    if proc.returncode == 0:  # not a git checkout (an unpacked sdist): the files above only
        snapshot["git status"] = sorted(proc.stdout.splitlines())
    return snapshot


def _stat_entry(path: Path, name: str) -> tuple:
    st = os.lstat(path)
    return (name, st.st_size if not path.is_dir() or path.is_symlink() else 0, st.st_mtime_ns)


def snapshot_changes(before: dict, after: dict) -> list:
    """The names whose state differs between two `checkout_snapshot`s, each with its first difference."""
    changed = []
    for name in sorted(set(before) | set(after), key=str):
        old, new = before.get(name), after.get(name)
        if old == new:
            continue
        if old is None or new is None:
            changed.append(f"{name} ({'made' if old is None else 'removed'})")
        elif name == "git status":
            diff = sorted(
                [f"+{x.strip()}" for x in set(new) - set(old)]
                + [f"-{x.strip()}" for x in set(old) - set(new)]
            )
            changed.append(f"git status ({'; '.join(diff[:3])}{' ...' if len(diff) > 3 else ''})")
        else:
            diff = sorted({e[0] for e in set(old) ^ set(new)})
            changed.append(f"{name} ({', '.join(diff[:3])}{' ...' if len(diff) > 3 else ''})")
    return changed


CI_SUMMARY = "ci_summary"  # a test's `record_property(CI_SUMMARY, text)`: printed at the end of the run


def pytest_terminal_summary(terminalreporter):
    """Figures a test measured (the loop's speed ratios, where a stage's seconds go), printed after the results
    so CI's output shows them (issue 52). Through the reports' user_properties, which xdist workers hand to the
    controller."""
    shown = [
        (report.nodeid, value)
        for report in terminalreporter.stats.get("passed", [])
        for name, value in getattr(report, "user_properties", ())
        if name == CI_SUMMARY and report.when == "call"
    ]
    if shown:
        terminalreporter.section("figures measured by the tests")
        for nodeid, text in sorted(shown):
            terminalreporter.write_line(f"{nodeid}:")
            terminalreporter.write_line(str(text))


def pytest_sessionstart(session):
    if hasattr(session.config, "workerinput"):  # an xdist worker: the controller watches the whole run
        return
    session.config.stash[_SESSION_SNAPSHOT] = checkout_snapshot()


def pytest_sessionfinish(session, exitstatus):
    before = session.config.stash.get(_SESSION_SNAPSHOT, None)
    if before is None:
        return
    changed = snapshot_changes(before, checkout_snapshot())
    if not changed:
        return
    line = f"the checkout {ROOT} changed during the test session (a test wrote it?): {'; '.join(changed)}"
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write("\n")  # after the progress line's [100%]
        reporter.write_line(line, red=True, bold=True)
    else:
        import sys

        print(line, file=sys.stderr)
    if session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# ----------------------------------------------------------------------------- projects for stage CLIs


def committed_text(name: str) -> str:
    """The file `name` (relative to the checkout) as committed at HEAD, not as the workspace holds it now:
    after `dvc exp apply` the workspace's params.yaml is an experiment's. The workspace's file where there is
    no git."""
    import subprocess

    proc = subprocess.run(
        ["git", "--no-optional-locks", "show", f"HEAD:{name}"], cwd=ROOT, capture_output=True, text=True
    )
    return proc.stdout if proc.returncode == 0 else (ROOT / name).read_text(encoding="utf-8")


SCRATCH_CONTENTS = {"conf", "params.yaml"}


@pytest.fixture(scope="session")
def scratch_project(tmp_path_factory) -> Path:
    """A project root for the tests that run a stage's command line (in-process or as a process) expecting it
    to refuse or answer before any work: conf/ copied and the committed params.yaml (`committed_text`),
    nothing else. A stage wrongly reached there writes its mlflow.db, models/ and metrics/ there, never in the
    user's checkout, and reads the committed params, never an experiment's. Use it through `scratch_root`."""
    import shutil

    project = tmp_path_factory.mktemp("scratch_project")
    shutil.copytree(ROOT / "conf", project / "conf", ignore=shutil.ignore_patterns("__pycache__"))
    (project / "params.yaml").write_text(committed_text("params.yaml"), encoding="utf-8")
    return project


@pytest.fixture
def scratch_root(scratch_project, monkeypatch) -> Path:
    """`scratch_project`, also the working folder during the test (a path a stage resolves against the working
    folder lands there too). After the test it must hold only conf/ and params.yaml: anything else was written
    by a stage that ran (removed, so the next test starts clean, and the test fails)."""
    import shutil

    monkeypatch.chdir(scratch_project)
    yield scratch_project
    made = sorted(p.name for p in scratch_project.iterdir() if p.name not in SCRATCH_CONTENTS)
    for name in made:
        path = scratch_project / name
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    assert not made, f"a stage ran: the test wrote {made} into its scratch project {scratch_project}"


@pytest.fixture
def mount_tmpfs():
    """mount_tmpfs(path): a real tmpfs mounted at `path` (created), unmounted after the test. Needs root:
    elsewhere the test is skipped, but under CI (env CI=true, where the tests run as root) it fails instead,
    so a skip there cannot hide that the mount cases did not run."""
    import shutil
    import subprocess

    mounted = []

    def _mount(path: Path, size: str = "64m") -> Path:
        why = None
        if os.geteuid() != 0 or shutil.which("mount") is None:
            why = "mounting a tmpfs needs root (and the mount command)"
        else:
            path.mkdir(parents=True, exist_ok=True)
            if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)]).returncode:
                why = f"this machine does not allow mounting a tmpfs at {path}"
        if why is not None:
            if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
                pytest.fail(f"CI=true but {why}", pytrace=False)
            pytest.skip(why)
        mounted.append(path)
        return path

    yield _mount
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", str(path)])


@pytest.fixture
def restore_float32_policy():
    """Tests that set a Keras mixed-precision policy leave the global policy at float32."""
    yield
    import keras

    keras.mixed_precision.set_global_policy("float32")


@pytest.fixture
def make_config():
    """Compose conf/ with Hydra overrides (the same grammar as `dvc exp run -S`) -> Config."""
    from tfpipe import config

    def _make(*overrides: str):
        return config.compose(list(overrides), config_dir=ROOT / "conf")

    return _make


# ----------------------------------------------------------------------------- data fixtures
# Tiny generated class-per-folder trees (the layout of ../shared/datasets) and the same trees
# prepared by `tfpipe.data.prepare`, shared by the whole session. Treat them as read-only.

IMAGE_CLASSES = ("blue", "green", "red")  # sorted: label 0 = blue, 1 = green, 2 = red
TEXT_CLASSES = ("neg", "pos")  # label 0 = neg, 1 = pos
_IMAGE_SIZES = ((32, 32), (40, 28), (17, 23), (64, 48), (31, 33))  # (height, width): mostly not 32x32
_POS_WORDS = ("wonderful", "great", "excellent", "loved", "brilliant", "superb", "moving", "delightful")
_NEG_WORDS = ("awful", "boring", "terrible", "hated", "dull", "worst", "waste", "tedious")
_FILLER = ("the", "film", "movie", "plot", "actors", "story", "was", "and", "a", "this", "it", "really")


def write_image_tree(root: Path, train_per_class: int = 8, test_per_class: int = 3, seed: int = 0) -> Path:
    """root/{train,test}/{blue,green,red}/NNNN.{png,jpg,jpeg}: noisy images whose dominant colour is the class."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    exts = ("png", "jpg", "jpeg")
    for split, per_class in (("train", train_per_class), ("test", test_per_class)):
        for label, name in enumerate(IMAGE_CLASSES):
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(per_class):
                h, w = _IMAGE_SIZES[i % len(_IMAGE_SIZES)]
                pixels = rng.integers(0, 90, size=(h, w, 3))
                pixels[..., label] += (
                    150  # blue, green, red -> channel 0, 1, 2 (RGB order is irrelevant here)
                )
                image = Image.fromarray(pixels.clip(0, 255).astype(np.uint8), "RGB")
                ext = exts[i % len(exts)]
                image.save(folder / f"{i:04d}.{ext}", format="PNG" if ext == "png" else "JPEG", quality=95)
    return root


def write_text_tree(root: Path, train_per_class: int = 20, test_per_class: int = 10, seed: int = 0) -> Path:
    """root/{train,test}/{neg,pos}/<id>_<rating>.txt short reviews, plus aclImdb's side files to ignore."""
    import numpy as np

    rng = np.random.default_rng(seed)
    for split, per_class in (("train", train_per_class), ("test", test_per_class)):
        for name in TEXT_CLASSES:
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            words = _POS_WORDS if name == "pos" else _NEG_WORDS
            for i in range(per_class):
                tokens = list(rng.choice(_FILLER, size=8)) + list(rng.choice(words, size=3))
                rng.shuffle(tokens)
                text = " ".join(tokens).capitalize() + "! <br /><br />" + str(rng.choice(words)).upper() + "."
                rating = int(rng.integers(7, 11)) if name == "pos" else int(rng.integers(1, 5))
                (folder / f"{i}_{rating}.txt").write_text(text, encoding="utf-8")
        # aclImdb keeps these next to the class folders; they are not examples.
        (root / split / "labeledBow.feat").write_text("0 0:1\n", encoding="utf-8")
        (root / split / "urls_pos.txt").write_text("http://example.invalid/\n", encoding="utf-8")
    (root / "README").write_text("Tiny generated reviews in the aclImdb layout.\n", encoding="utf-8")
    return root


@pytest.fixture(scope="session")
def image_dir(tmp_path_factory) -> Path:
    """Path to a tiny image tree: {train,test}/{blue,green,red}/*.png|jpg|jpeg, 8 train + 3 test per class,
    odd sizes (17x23 .. 64x48), RGB, separable by dominant colour. Read-only (copy it to modify)."""
    return write_image_tree(tmp_path_factory.mktemp("image_dir"))


@pytest.fixture(scope="session")
def text_dir(tmp_path_factory) -> Path:
    """Path to a tiny aclImdb-style tree: {train,test}/{neg,pos}/<id>_<rating>.txt, 20 train + 10 test per
    class, separable by sentiment words (pos: wonderful, great...; neg: awful, boring...). Read-only."""
    return write_text_tree(tmp_path_factory.mktemp("text_dir"))


class Prepared(tuple):
    """`(cfg, prepared_dir)`: the composed Config used and the folder `prepare` wrote."""

    __slots__ = ()

    def __new__(cls, cfg, prepared_dir):
        return super().__new__(cls, (cfg, prepared_dir))

    @property
    def cfg(self):
        return self[0]

    @property
    def prepared_dir(self) -> Path:
        return self[1]


DATA_OVERRIDES = ("data.source=directory", "data.examples_per_shard=8")


def prepare_tree(source: Path, output_dir: Path, *overrides: str) -> Prepared:
    """Compose conf/ for the directory source at `source` and run `tfpipe.data.prepare` into `output_dir`."""
    from tfpipe import config, data

    cfg = config.compose(
        [*DATA_OVERRIDES, f"data.path={source}", f"data.output_dir={output_dir}", *overrides],
        config_dir=ROOT / "conf",
    )
    data.prepare(cfg, progress=False)
    return Prepared(cfg, Path(output_dir))


def stage_project(tmp_path: Path, prepared: Prepared, *overrides: str):
    """A project folder with conf/ for running one stage as a subprocess on `prepared` data: (project, env,
    stage) where stage(name) is the `python -m pipeline.<name>` argv. The environment drops MLFLOW_* and
    TF_CONFIG, so each stage uses the project's own SQLite store and no cluster."""
    import shutil
    import sys

    project = tmp_path / "project"
    shutil.copytree(ROOT / "conf", project / "conf")
    seed_store(project)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "TF_CONFIG"))}
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]), TF_CPP_MIN_LOG_LEVEL="2")
    argv = [*overrides, f"data.output_dir={prepared.prepared_dir}"]

    def stage(name: str) -> list:
        return [sys.executable, "-m", f"pipeline.{name}", *argv]

    return project, env, stage


def stages_in_process(cfg, root: Path, monkeypatch, *names: str) -> str:
    """`stages.run_<name>(cfg, root)` for each name, in this process, tracking into root's own SQLite store (env
    MLFLOW_* cleared); any MLflow run left open is ended and the tracking URI reset. The run id from the run file."""
    import json

    import mlflow

    from tfpipe import stages

    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_ID", "MLFLOW_EXPERIMENT_NAME"):
        monkeypatch.delenv(name, raising=False)
    try:
        for name in names:
            getattr(stages, f"run_{name}")(cfg, root)
    finally:
        while mlflow.active_run() is not None:
            mlflow.end_run()
        mlflow.set_tracking_uri(None)
    return json.loads((root / cfg.tracking.run_file).read_text())["run_id"]


@pytest.fixture(scope="session")
def prepared_image(image_dir, tmp_path_factory) -> Prepared:
    """`image_dir` prepared with the cifar10 config (32x32x3): Prepared(cfg, prepared_dir); 8 examples per shard,
    validation carved from train (21 train / 3 validation / 9 test). Read-only."""
    return prepare_tree(image_dir, tmp_path_factory.mktemp("prepared") / "cifar10")


@pytest.fixture(scope="session")
def prepared_text(text_dir, tmp_path_factory) -> Prepared:
    """`text_dir` prepared with dataset=imdb: Prepared(cfg, prepared_dir) with vocab.txt; 8 examples per shard,
    validation carved from train (36 train / 4 validation / 20 test). Read-only."""
    return prepare_tree(text_dir, tmp_path_factory.mktemp("prepared") / "imdb", "dataset=imdb")


_STORE_TEMPLATE: list = []  # [path of the worker's migrated, empty mlflow.db], set per worker below


@pytest.fixture(scope="session", autouse=True)
def _store_template_folder(tmp_path_factory):
    _STORE_TEMPLATE[:] = [tmp_path_factory.mktemp("mlflow_template") / "mlflow.db"]


def _migrated_template() -> Path:
    template = _STORE_TEMPLATE[0]
    if not template.exists():
        from mlflow import MlflowClient

        MlflowClient(tracking_uri=f"sqlite:///{template}").search_experiments()
    return template


@pytest.fixture(scope="session")
def db_template() -> Path:
    """One migrated, empty mlflow.db per worker (MLflow's schema migrations take seconds); copy it, never write it."""
    return _migrated_template()


def seed_store(folder: Path, name: str = "mlflow.db") -> Path:
    """Copy `db_template` to folder/name: MLflow migrates a new store's schema on first use, 2 to 4 s in every
    process that creates one. For tests whose claim is not about creating the store; MLflow opens the copy as one
    it made itself (same version, same schema)."""
    import shutil

    folder.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(_migrated_template(), folder / name))


def churning_environment(read, rounds: int = 300) -> None:
    """Call `read()` while a thread adds and removes variables, as MLflow's telemetry thread does."""
    import threading

    stop = threading.Event()

    def churn():
        i = 0
        while not stop.is_set():
            name = f"TFPIPE_TEST_CHURN_{i % 50}"
            os.environ[name] = "x" * 20
            os.environ.pop(name, None)
            i += 1

    worker = threading.Thread(target=churn, daemon=True)
    worker.start()
    try:
        for _ in range(rounds):
            read()
    finally:
        stop.set()
        worker.join()


# ----------------------------------------------------------------------------- the suite across workers
# `python -m pytest` runs on every core (pyproject: `-n auto --dist loadgroup`). A module-scoped fixture is built
# once per worker that runs one of its tests, so the tests that share one (a recorded run, a team server, a
# Slurm cluster) are grouped onto one worker and it is built once; every other test goes to whichever worker
# is free. Session fixtures here are small generated trees, built once per worker.


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        if _uses_a_module_fixture(item) and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))


def _uses_a_module_fixture(item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(
        d.scope in ("module", "class", "package") for defs in info.name2fixturedefs.values() for d in defs
    )


def run_in_project(args, project: Path, timeout: float = 300):
    """`args` as a real process in the project folder `project` (a `scratch_root`, never this checkout), this
    checkout's code first on PYTHONPATH (`pipeline.*` imports only from there); PATH as it is, so `tfpipe` is the
    installed console script; TFPIPE_DEBUG unset, so refusals are one line."""
    import subprocess

    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("TFPIPE_DEBUG", None)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "src"), str(ROOT), *filter(None, [env.get("PYTHONPATH")])]
    )
    return subprocess.run(args, cwd=project, env=env, capture_output=True, text=True, timeout=timeout)
