"""A corpus of bad configs through the real command line: each is refused with exit code 2 and ONE stderr
line naming the key, the value and what is allowed, before any data is read or model built.

Most cases run in-process through `pipeline._cli.cli`, the function `python -m pipeline.<stage>` runs, with
the real `pipeline.train.run` behind it and data pointed at folders that do not exist: if a bad value got
past the checks, the stage would fail on the missing data instead (and `run` would have been called). A
handful run as real subprocesses (overrides, a bad params.yaml read the way `dvc repro` runs the stage,
`--debug`, an unreachable MLflow server).

Every case runs in a project of its own (conftest's `scratch_root`: conf/ and the committed params.yaml),
never in this checkout: a case that is wrongly not refused trains there, not into the user's mlflow.db and
models/. The bad params files are made from the committed params.yaml, not the workspace's (an experiment's
after `dvc exp apply`, where the text a case replaces may be missing).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import committed_text

from pipeline import _cli
from pipeline import train as train_entry
from tfpipe import preflight

ROOT = Path(__file__).resolve().parents[1]
NO_DATA = ["data.path=/nonexistent/tfpipe/raw", "data.output_dir=/nonexistent/tfpipe/prepared"]
IN_PROCESS_SECONDS = (
    10.0  # generous (shared 2-core machine); "refused before the stage ran" is the order asserted
)
ENV_TO_CLEAR = (
    "MLFLOW_TRACKING_URI",
    "MLFLOW_RUN_ID",
    "TF_CONFIG",
    "TFPIPE_DEBUG",
    "TPU_NAME",
    "ONEDNN_MAX_CPU_ISA",
)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# (overrides, substrings the one line must contain: the key, the value, what is allowed)
BAD_OVERRIDES = [
    # wrong types
    (["train.epochs=abc"], ["train.epochs", "'abc'", "expected an integer"]),
    (["train.epochs=1.5"], ["train.epochs", "1.5", "expected an integer"]),
    (["train.batch_size_per_replica=true"], ["train.batch_size_per_replica", "True", "expected an integer"]),
    (
        ["train.optimizer.learning_rate=fast"],
        ["train.optimizer.learning_rate", "'fast'", "expected a number"],
    ),
    (["train.cache=maybe"], ["train.cache", "'maybe'", "expected true or false"]),
    (["data.seed=x"], ["data.seed", "'x'", "expected an integer"]),
    (["model.filters=16"], ["model.filters", "16", "expected a list of int"]),
    (["model.filters=[16,abc]"], ["model.filters[1]", "'abc'", "expected an integer"]),
    (["train.optimizer=adam"], ["train.optimizer", "'adam'", "expected a mapping"]),
    (["dataset.image_size=[32]"], ["dataset.image_size", "[32]", "expected [height, width]"]),
    # unknown keys, at every level, with a did-you-mean
    (["foo=1"], ["foo=1", "unknown config key", "allowed keys under '<root>': model, dataset"]),
    (["train.epochz=3"], ["train.epochz=3", "did you mean 'train.epochs'", "allowed keys under 'train'"]),
    (
        ["train.optimizer.lr=0.1"],
        [
            "train.optimizer.lr=0.1",
            "did you mean 'train.optimizer.learning_rate'",
            "allowed keys under 'train.optimizer'",
        ],
    ),
    (
        ["train.lr_schedule.warmup=1"],
        [
            "train.lr_schedule.warmup=1",
            "did you mean 'train.lr_schedule.warmup_epochs'",
            "allowed keys under 'train.lr_schedule'",
        ],
    ),
    (
        ["data.sorce=directory"],
        ["data.sorce=directory", "did you mean 'data.source'", "allowed keys under 'data'"],
    ),
    (
        ["tracking.url=http://x"],
        ["tracking.url=http://x", "did you mean 'tracking.uri'", "allowed keys under 'tracking'"],
    ),
    (
        ["strategy.nme=mirrored"],
        ["strategy.nme=mirrored", "did you mean 'strategy.name'", "allowed keys under 'strategy'"],
    ),
    (
        ["+model._target_=os.system"],
        ["model._target_=os.system", "unknown config key", "allowed keys under 'model'"],
    ),
    (
        ["train.global_batch_size=256"],
        ["train.global_batch_size=256", "did you mean 'train.batch_size_per_replica'", "divides evenly"],
    ),
    (["trian.epochs=3"], ["trian.epochs=3", "did you mean 'train.epochs'", "allowed keys under '<root>'"]),
    # a key typed without its section: the keys further down that end with it
    (["epochs=3"], ["epochs=3", "did you mean 'train.epochs'?", "allowed keys under '<root>'"]),
    (["seed=1"], ["seed=1", "did you mean 'data.seed' or 'train.seed'?"]),
    (["train.epochs.x=1"], ["train.epochs.x", "'train.epochs' is a value", "not a section"]),
    # config group options
    (
        ["dataset=mnist"],
        ["dataset='mnist'", "config group 'dataset'", "allowed: cifar10, images, imdb, texts"],
    ),
    # own data: a name is required, and a safe identifier (it names folders, runs, the registered model)
    (["dataset=images"], ["dataset.name: required, no value given", "dataset.name=VALUE"]),
    (["dataset=texts", "dataset.name='my data'"], ["dataset.name='my data'", "allowed: letters, digits"]),
    (["dataset=images", "dataset.name=../up"], ["dataset.name='../up'", "starting with a letter or digit"]),
    (["dataset=images", "dataset.name=a/b"], ["dataset.name='a/b'", "at most 64 characters"]),
    (["dataset=images", "dataset.name=" + "x" * 65], ["dataset.name='xxxx", "at most 64 characters"]),
    (
        ["dataset=images", "dataset.name=flowers", "data.source=tfds"],
        ["dataset.tfds_name=None", "data.source=tfds needs the TFDS builder name", "data.source=directory"],
    ),
    (["dataset=images", "dataset.name=x", "dataset.channels=4"], ["dataset.channels=4", "allowed: 1, 3"]),
    # keras.applications backbones
    (["model=mobilenet_v3_small", "model.pretrained=imagnet"], ["model.pretrained='imagnet'", "imagenet"]),
    (
        ["dataset=images", "dataset.name=x", "dataset.channels=1", "model=efficientnet_b0"],
        ["dataset.channels=1", "model 'efficientnet_b0' takes RGB images; allowed: 3"],
    ),
    (
        ["model=mobilenet_v3_small", "dataset.image_size=[24,24]"],
        ["dataset.image_size=[24, 24]", "at least 32x32"],
    ),
    (["dataset=imdb", "model=efficientnet_b0"], ["model.name='efficientnet_b0'", "is not a text model"]),
    (
        ["model=resnet50"],
        [
            "model='resnet50'",
            "config group 'model'",
            "allowed: airbench, cnn, efficientnet_b0, embedding_gap, mobilenet_v3_small",
        ],
    ),
    (["strategy=tpu_pod"], ["strategy='tpu_pod'", "did you mean 'tpu'", "allowed: auto, central_storage"]),
    (
        ["precision=fp8"],
        ["precision='fp8'", "config group 'precision'", "allowed: auto, float32, mixed_bfloat16"],
    ),
    (
        ["experiment=huge"],
        [
            "experiment='huge'",
            "config group 'experiment'",
            "allowed: cifar10, cifar10_airbench, cifar10_fast, imdb, imdb_fast, imdb_nblr, smoke",
        ],
    ),
    (["dataset=imdb", "model=cnn"], ["model.name='cnn'", "dataset 'imdb' is text", "allowed: embedding_gap"]),
    # names out of their set
    (
        ["train.optimizer.name=adamax"],
        ["train.optimizer.name='adamax'", "did you mean 'adam'", "allowed: adam, adamw, sgd"],
    ),
    (
        ["train.lr_schedule.name=step"],
        ["train.lr_schedule.name='step'", "not allowed", "allowed: constant, cosine, onecycle"],
    ),
    (["data.source=s3"], ["data.source='s3'", "not allowed", "allowed: auto, tfds, directory"]),
    (["data.on_bad_file=ignore"], ["data.on_bad_file='ignore'", "not allowed", "allowed: fail, skip"]),
    (["train.lr_scaling=sqrt"], ["train.lr_scaling='sqrt'", "not allowed", "allowed: none, linear"]),
    (
        ["+strategy.communication=mpi"],
        ["strategy.communication='mpi'", "not allowed", "allowed: auto, ring, nccl"],
    ),
    # out of range: zero, negative, too large
    (["train.batch_size_per_replica=0"], ["train.batch_size_per_replica=0", "must be > 0"]),
    (["train.batch_size_per_replica=-8"], ["train.batch_size_per_replica=-8", "must be > 0"]),
    (["train.epochs=0"], ["train.epochs=0", "must be > 0"]),
    (["train.optimizer.learning_rate=0"], ["train.optimizer.learning_rate=0.0", "must be > 0"]),
    (["train.optimizer.learning_rate=-0.1"], ["train.optimizer.learning_rate=-0.1", "must be > 0"]),
    (["model.dropout=1.0"], ["model.dropout=1.0", "must be in [0, 1)"]),
    (["train.label_smoothing=1.5"], ["train.label_smoothing=1.5", "must be in [0, 1)"]),
    (["train.freeze_epochs=1"], ["train.freeze_epochs=1", "set train.init_from too"]),
    (["train.freeze_epochs=-1", "train.init_from=x"], ["train.freeze_epochs=-1"]),
    (["data.validation_fraction=1.0"], ["data.validation_fraction=1.0", "must be in (0, 1)"]),
    (["data.examples_per_shard=0"], ["data.examples_per_shard=0", "must be > 0"]),
    (["data.max_examples_per_split=-1"], ["data.max_examples_per_split=-1", "must be > 0"]),
    (
        ["train.lr_schedule.warmup_epochs=99"],
        ["train.lr_schedule.warmup_epochs=99.0", "must be <= train.epochs"],
    ),
    (["train.histogram_every_epochs=-1"], ["train.histogram_every_epochs=-1", "must be >= 0"]),
    (["dataset.channels=2"], ["dataset.channels=2", "allowed: 1, 3"]),
    (["train.profile_steps=20-10"], ["train.profile_steps='20-10'", "1 <= FIRST <= LAST"]),
    (["+strategy.num_workers=0"], ["strategy.num_workers=0", "must be > 0"]),
    # cross-field rules
    (
        ["train.steps_per_epoch=5", "train.grad_accumulation_steps=2"],
        ["train.steps_per_epoch=5", "must be a multiple of train.grad_accumulation_steps (2)"],
    ),
    (
        ["strategy=parameter_server", "train.grad_accumulation_steps=2"],
        ["train.grad_accumulation_steps=2", "strategy.name=parameter_server", "allowed: 1"],
    ),
    (
        ["strategy=tpu", "precision=mixed_float16"],
        [
            "precision.policy='mixed_float16'",
            "strategy.name=tpu",
            "allowed with tpu: mixed_bfloat16, float32",
        ],
    ),
    (
        ["strategy=mirrored", "strategy.devices=[/cpu:0,/cpu:0]"],
        ["strategy.devices=['/cpu:0', '/cpu:0']", "twice", "allowed: distinct devices"],
    ),
    # formats
    (["strategy.device=gpu0"], ["strategy.device='gpu0'", "not a device name", "allowed: /cpu:N, /gpu:N"]),
    (
        ["tracking.uri=htp://localhost:5000"],
        ["tracking.uri='htp://localhost:5000'", "did you mean 'http'", "allowed: sqlite, file, http, https"],
    ),
    (
        ["tracking.uri=sqlite:mlflow.db"],
        ["tracking.uri='sqlite:mlflow.db'", "missing '//'", "sqlite:///mlflow.db"],
    ),
    (["tracking.experiment_name="], ["tracking.experiment_name", "empty", "name the MLflow experiment"]),
    (
        ["strategy.num_workers=3"],
        [
            "strategy.num_workers=3",
            "not set by the selected 'strategy' config option",
            "+strategy.num_workers=3",
        ],
    ),
    (["train.epochs"], ["'train.epochs'", "expected KEY=VALUE", "+KEY=VALUE"]),
    (
        ["train.epochs=${oc.env:TFPIPE_SURELY_UNSET}"],
        [
            "train.epochs=${oc.env:TFPIPE_SURELY_UNSET}",
            "Environment variable 'TFPIPE_SURELY_UNSET' not found",
        ],
    ),
]


@pytest.fixture
def cli_env(monkeypatch):
    for name in ENV_TO_CLEAR:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.fixture(scope="module", autouse=True)
def _warm_hydra():
    """Import Hydra and compose once, so per-case timing measures the checks, not first imports."""
    from tfpipe import config

    config.compose(["experiment=smoke"], config_dir=ROOT / "conf")


def _run_cli(capsys, argv, root: Path, stage="train"):
    """`python -m pipeline.<stage> ARGV` in-process in the project `root` (a `scratch_root`, never this
    checkout): (exit code, stderr lines, seconds, whether run() was reached)."""
    reached = []

    def run(cfg, root):  # the real train stage behind a recorder
        reached.append(cfg)
        return train_entry.run(cfg, root)

    capsys.readouterr()
    start = time.monotonic()
    code = _cli.cli(stage, run, "test", argv, root, configure_logging=False)
    elapsed = time.monotonic() - start
    err = capsys.readouterr().err
    return code, [line for line in err.splitlines() if line.strip()], elapsed, bool(reached)


def _assert_refused(code, lines, reached, expected, stage="train"):
    assert code == 2, lines
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith(f"{stage}: error: "), line
    assert "Traceback" not in line
    for part in expected:
        assert part in line, f"{part!r} not in {line!r}"
    assert not reached, "the stage ran: the bad input was not caught before data/model work"
    assert "manifest" not in line and "/nonexistent/tfpipe" not in line  # the config error, not a data error


@pytest.mark.parametrize("overrides, expected", BAD_OVERRIDES, ids=[" ".join(o) for o, _ in BAD_OVERRIDES])
def test_bad_override_is_refused_in_one_line(capsys, cli_env, scratch_root, overrides, expected):
    code, lines, elapsed, reached = _run_cli(capsys, [*overrides, *NO_DATA], scratch_root)
    _assert_refused(code, lines, reached, expected)
    assert elapsed < IN_PROCESS_SECONDS, f"took {elapsed:.2f}s"


def test_the_corpus_is_large_enough():
    assert len(BAD_OVERRIDES) + len(BAD_PARAMS) + len(BAD_HOST) >= 40


# ----------------------------------------------------------------------------- bad params.yaml (the DVC path)

GOOD_PARAMS = committed_text("params.yaml")


def _replaced(old: str, new: str) -> str:
    """GOOD_PARAMS with its first `old` replaced by `new`; `old` must be there (else the "bad" file is
    good)."""
    assert old in GOOD_PARAMS, f"{old!r} is not in the committed params.yaml: the case would test nothing"
    return GOOD_PARAMS.replace(old, new, 1)


BAD_PARAMS = [
    ("not yaml", "train: [1, 2\n", ["params.yaml", "not valid YAML"]),
    ("a list", "- train\n- data\n", ["params.yaml", "expected a mapping of config sections", "list"]),
    (
        "unknown section",
        GOOD_PARAMS + "trian:\n  epochs: 1\n",
        ["trian", "did you mean 'train'", "allowed keys under '<root>'"],
    ),
    (
        "wrong type",
        _replaced("epochs: 3", "epochs: three"),
        ["train.epochs", "'three'", "expected an integer"],
    ),
    ("section not a mapping", GOOD_PARAMS + "tracking: 5\n", ["tracking", "expected a mapping", "5"]),
    (
        "unknown nested key",
        _replaced("  name: adam", "  name: adam\n    betas: 2"),
        ["train.optimizer.betas=2", "unknown config key", "allowed keys under 'train.optimizer'"],
    ),
    (
        "bad value",
        _replaced("policy: auto", "policy: float64"),
        [
            "precision.policy='float64'",
            "did you mean 'float32'",
            "allowed: float32, mixed_bfloat16, mixed_float16, auto",
        ],
    ),
]


@pytest.mark.parametrize(
    "text, expected", [(t, e) for _, t, e in BAD_PARAMS], ids=[i for i, _, _ in BAD_PARAMS]
)
def test_bad_params_file_is_refused_in_one_line(capsys, cli_env, scratch_root, tmp_path, text, expected):
    params = tmp_path / "params.yaml"
    params.write_text(text, encoding="utf-8")
    code, lines, elapsed, reached = _run_cli(capsys, ["--params", str(params)], scratch_root)
    _assert_refused(code, lines, reached, expected)
    assert elapsed < IN_PROCESS_SECONDS


def test_missing_params_file(capsys, cli_env, scratch_root, tmp_path):
    code, lines, _, reached = _run_cli(capsys, ["--params", str(tmp_path / "nope.yaml")], scratch_root)
    _assert_refused(code, lines, reached, ["nope.yaml", "config file not found", "run from the project root"])


def test_good_params_pass_the_checks(scratch_project):
    """The committed params.yaml and the smoke preset are accepted (the corpus refuses only what is bad)."""
    from tfpipe import config

    cfg = config.load_params(scratch_project / "params.yaml")  # committed_text's, not the workspace's
    preflight.check_devices(cfg)
    preflight.check_tf_config(cfg, {})
    config.compose(
        ["experiment=smoke", "strategy=mirrored", "strategy.devices=[/cpu:0,/cpu:1]"],
        config_dir=ROOT / "conf",
    )


# ----------------------------------------------------------------------------- what the config asks of this host

_PS_WORKERS_ONLY = json.dumps(
    {"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, "task": {"type": "worker", "index": 0}}
)
_INDEX_OUT_OF_RANGE = json.dumps(
    {"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "worker", "index": 3}}
)
_WITH_PS = json.dumps(
    {"cluster": {"worker": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"]}, "task": {"type": "worker", "index": 0}}
)

BAD_HOST = [
    (
        "gpu device without a GPU",
        {},
        ["strategy.device=/gpu:0", "precision=mixed_float16"],
        ["strategy.device='/gpu:0'", "no such device", "mixed_float16", "allowed: /cpu:0"],
    ),
    (
        "cpu index one_device",
        {},
        ["strategy.device=/cpu:1"],
        ["strategy.device='/cpu:1'", "no such device", "allowed: /cpu:0"],
    ),
    (
        "cpu index mirrored",
        {},
        ["strategy=mirrored", "strategy.devices=[/cpu:0,/cpu:2]"],
        ["strategy.devices[1]='/cpu:2'", "no such device", "allowed: /cpu:0, /cpu:1"],
    ),
    (
        "tpu without a TPU",
        {},
        ["strategy=tpu"],
        ["strategy.name='tpu'", "no local TPU", "allowed: strategy.tpu=<TPU name or grpc://address>"],
    ),
    (
        "bf16 with oneDNN capped at AVX2",
        {"ONEDNN_MAX_CPU_ISA": "avx2"},
        ["precision=mixed_bfloat16"],
        ["precision.policy=mixed_bfloat16", "ONEDNN_MAX_CPU_ISA=AVX2", "allowed: precision.policy=float32"],
    ),
    (
        "TF_CONFIG not JSON",
        {"TF_CONFIG": "{not json"},
        ["strategy=multi_worker_mirrored"],
        ["TF_CONFIG='{not json'", "not valid JSON"],
    ),
    (
        "TF_CONFIG task index",
        {"TF_CONFIG": _INDEX_OUT_OF_RANGE},
        ["strategy=multi_worker_mirrored"],
        ["TF_CONFIG=", "task.index=3 out of range", "1 tasks"],
    ),
    (
        "TF_CONFIG jobs for parameter_server",
        {"TF_CONFIG": _PS_WORKERS_ONLY},
        ["strategy=parameter_server"],
        ["TF_CONFIG", "lack chief, ps", "allowed: chief (the coordinator), worker and ps"],
    ),
    (
        "TF_CONFIG ps for mirrored",
        {"TF_CONFIG": _WITH_PS},
        ["strategy=multi_worker_mirrored"],
        ["TF_CONFIG", "ps, worker", "allowed: worker (and optionally chief), no ps"],
    ),
    (
        "unreachable MLflow server",
        {"MLFLOW_TRACKING_URI": "http://127.0.0.1:{port}"},
        ["experiment=smoke"],
        ["http://127.0.0.1:", "unreachable", "point MLFLOW_TRACKING_URI / tracking.uri elsewhere"],
    ),
    (
        "sqlite store in a missing folder",
        {},
        ["tracking.uri=sqlite:////nonexistent/store/mlflow.db"],
        ["sqlite:////nonexistent/store/mlflow.db", "does not exist", "fix tracking.uri"],
    ),
]


@pytest.mark.parametrize("env, overrides, expected", [c[1:] for c in BAD_HOST], ids=[c[0] for c in BAD_HOST])
def test_config_the_host_cannot_run_is_refused_in_one_line(
    capsys, cli_env, scratch_root, env, overrides, expected
):
    if "/gpu:0" in " ".join(overrides) and preflight.physical_gpus():
        pytest.skip("this host has a GPU")
    if "strategy=tpu" in overrides and preflight.local_tpu_present():
        pytest.skip("this host has a TPU")
    port = _closed_port()
    for name, value in env.items():
        cli_env.setenv(name, value.replace("{port}", str(port)))
    code, lines, elapsed, reached = _run_cli(capsys, [*overrides, *NO_DATA], scratch_root)
    _assert_refused(code, lines, reached, expected)
    assert elapsed < 30.0, f"took {elapsed:.2f}s"  # generous: the tracking probe imports mlflow


# ----------------------------------------------------------------------------- real processes


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ENV_TO_CLEAR}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.update(extra)
    return env


def _spawn(args, cwd: Path, **env):
    """`python -m ARGS` in `cwd` (a `scratch_root` or a tmp project, never this checkout, with this checkout's
    code on PYTHONPATH): (the finished process, seconds)."""
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", *args], cwd=cwd, env=_env(**env), capture_output=True, text=True, timeout=120
    )
    return proc, time.monotonic() - start


def test_real_cli_refuses_a_bad_override_fast(scratch_root):
    proc, elapsed = _spawn(["pipeline.train", "train.optimizer.lr=0.1", *NO_DATA], scratch_root)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "train: error: train.optimizer.lr=0.1: unknown config key (did you mean 'train.optimizer.learning_rate'?); "
        "allowed keys under 'train.optimizer': name, learning_rate, weight_decay, momentum, nesterov, ema_momentum, "
        "lookahead_every, lookahead_momentum"
    ]
    assert elapsed < 20  # python + Hydra start-up; no TensorFlow is imported


def test_real_cli_refuses_a_bad_params_yaml_as_dvc_runs_it(tmp_path):
    """`dvc repro` runs `python -m pipeline.train` in the project root, which reads params.yaml."""
    shutil.copytree(ROOT / "conf", tmp_path / "conf")
    (tmp_path / "params.yaml").write_text(_replaced("epochs: 3", "epochs: -3"), encoding="utf-8")
    proc, _ = _spawn(["pipeline.train"], cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == ["train: error: train.epochs=-3: must be > 0"]
    assert not (tmp_path / "run.json").exists() and not (tmp_path / "models").exists()


def test_real_cli_unknown_flag_is_one_line(scratch_root):
    proc, _ = _spawn(["pipeline.train", "--bogus"], scratch_root)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "python -m pipeline.train: error: unrecognized arguments: --bogus (see --help)"
    ]


@pytest.mark.parametrize("how", ["--debug", "TFPIPE_DEBUG=1"])
def test_debug_shows_the_traceback(scratch_root, how):
    args = ["pipeline.train", "train.epochs=0"]
    env = {}
    if how == "--debug":
        args.append("--debug")
    else:
        env["TFPIPE_DEBUG"] = "1"
    proc, _ = _spawn(args, scratch_root, **env)
    assert proc.returncode == 1
    assert "Traceback (most recent call last)" in proc.stderr
    assert "tfpipe.errors.ConfigError: train.epochs=0: must be > 0" in proc.stderr


@pytest.mark.slow  # starts processes
def test_real_cli_unreachable_mlflow_fails_fast_before_the_data(scratch_root):
    port = _closed_port()
    proc, elapsed = _spawn(
        ["pipeline.train", "experiment=smoke", *NO_DATA],
        scratch_root,
        MLFLOW_TRACKING_URI=f"http://127.0.0.1:{port}",
    )
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"train: error: MLflow tracking server http://127.0.0.1:{port} is unreachable ([Errno 111] Connection refused); "
        "start it or point MLFLOW_TRACKING_URI / tracking.uri elsewhere"
    ]
    assert (
        elapsed < 60
    )  # MLflow's own client retries with backoff for minutes; loose: a loaded machine starts slowly
