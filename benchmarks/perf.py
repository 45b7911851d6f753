"""Performance benchmarks: the train stage against plain Keras, tracking overhead, precision, input
pipeline headroom, prepare throughput, no-op `dvc repro`.

    python benchmarks/perf.py keras      [--repeats 3]                 # 1. pipeline vs plain-Keras recipe
    python benchmarks/perf.py tracking   [--repeats 3]                 # 2. MLflow logging on vs off
    python benchmarks/perf.py precision  [--repeats 3]                 # 3. mixed_bfloat16 vs float32
    python benchmarks/perf.py input      [--repeats 3]                 # 4. input pipeline alone
    python benchmarks/perf.py prepare                                  # 5. prepare from the directory source
    python benchmarks/perf.py dvc        [--repeats 5]                 # 6. no-op dvc repro

1-4 read the real prepared data of this project: `data/prepared/cifar10`, `data/prepared/imdb` and
`data/prepared/imdb-fast` (`python -m pipeline.prepare data.source=directory [dataset=imdb | experiment=imdb_fast]`,
see the README) and, for 2 and 3,
a 12,000-image subset: `python -m pipeline.prepare data.source=directory data.max_examples_per_split=12000
data.output_dir=data/prepared/cifar10-12k data.examples_per_shard=4000`. 5 reads `data/raw/<dataset>`.
Every measured configuration runs in a fresh process (TF op determinism and the precision policy are
process-wide); the configurations of one benchmark are alternated within each repeat so that machine load
hits them alike, and the median over repeats is reported with the ratio. Throughput is examples/s of the
second of two whole epochs (the first pays for tracing and for filling the tf.data cache; a steps cap would
leave the cache unfilled and make every epoch read and shuffle from disk, i.e. time the input, not training).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PREPARED = {
    "cifar10": ROOT / "data" / "prepared" / "cifar10",
    "imdb": ROOT / "data" / "prepared" / "imdb-fast",
    "imdb-seeds": ROOT / "data" / "prepared" / "imdb",  # the default imdb config's 20k vocabulary
    # 12,000 CIFAR-10 images per split: whole epochs in seconds, so the tf.data cache completes in the
    # first epoch and the timed second one reads from memory as real training does
    "cifar10-12k": ROOT / "data" / "prepared" / "cifar10-12k",
}
# --prepared DIR: another prepared cifar10 split (the CI check's subset), for the workers too
if os.environ.get("TFPIPE_BENCH_PREPARED"):
    PREPARED["cifar10"] = Path(os.environ["TFPIPE_BENCH_PREPARED"])


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DVC_"))}
    env["PYTHONPATH"] = str(ROOT / "src")
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env["DVC_NO_ANALYTICS"] = "1"
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _worker(mode: str, *args: str, src: Path = ROOT / "src") -> dict:
    """Run `perf.py _worker MODE ARGS` in a fresh process (importing tfpipe from `src`); returns its JSON line."""
    env = {**_env(), "PYTHONPATH": str(src), "TFPIPE_BENCH_SRC": str(src)}
    proc = subprocess.run(
        [sys.executable, __file__, "_worker", mode, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=3600,
    )
    if proc.returncode != 0:
        raise SystemExit(f"worker {mode} {args} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _load() -> str:
    return "load average %.2f %.2f %.2f" % os.getloadavg()


def _compose(*overrides: str):
    from tfpipe import config

    return config.compose(list(overrides), config_dir=ROOT / "conf")


# ----------------------------------------------------------------------------- workers (one process each)


def _w_pipeline(dataset: str, steps: int, *overrides: str) -> dict:
    """tfpipe.training.train (the train stage's loop, no MLflow) for 2 epochs of `steps` steps."""
    from tfpipe import training

    cap = [f"train.steps_per_epoch={steps}"] if steps else []  # 0: whole epochs
    cfg = _compose(
        f"dataset={dataset.split('-')[0]}",
        "train.epochs=2",
        *cap,
        "train.histogram_every_epochs=0",
        *overrides,
    )
    with tempfile.TemporaryDirectory() as out:
        result = training.train(cfg, prepared_dir=PREPARED[dataset], output_dir=out)
    return {"examples_per_sec": result.history[-1]["epoch_examples_per_sec"], "precision": result.precision}


def _w_stage(dataset: str, steps: int, *overrides: str) -> dict:
    """The train stage with MLflow on (tfpipe.stages.run_train in a scratch project: run, params, tags,
    step + epoch metrics, artifacts, the logged model), for 2 epochs of `steps` steps."""
    from tfpipe import stages

    cap = [f"train.steps_per_epoch={steps}"] if steps else []  # 0: whole epochs
    cfg = _compose(
        f"dataset={dataset.split('-')[0]}",
        "train.epochs=2",
        *cap,
        "train.histogram_every_epochs=0",
        f"data.output_dir={PREPARED[dataset]}",
        *overrides,
    )
    with tempfile.TemporaryDirectory() as root:
        t0 = time.perf_counter()
        result = stages.run_train(cfg, Path(root))
        wall = time.perf_counter() - t0
    return {
        "examples_per_sec": result.history[-1]["epoch_examples_per_sec"],
        "stage_seconds": wall,
        "train_seconds": result.train_seconds,
    }


def _train_arrays(dataset: str):
    """The prepared train split decoded into memory once, as tfds.load(..., as_supervised=True) + tfds.as_numpy
    give."""
    import numpy as np

    from tfpipe import data

    xs, ys = [], []
    for x, y in data.make_dataset(
        PREPARED[dataset], "train", batch_size=1024, training=False, seed=0, cache=False
    ):
        xs.append(x.numpy())
        ys.append(y.numpy())
    return np.concatenate(xs), np.concatenate(ys)


def _policy(precision: str, model: str):
    """Both hand-written sides get the train stage's precision and model: the global Keras policy before the
    model is built (mixed_bfloat16 keeps float32 variables and a float32 softmax, as tfpipe's builder does)."""
    import keras

    keras.mixed_precision.set_global_policy(precision)
    return _compose("dataset=cifar10", f"model={model}")


def compiled_step(model, optimizer, loss_fn):
    """One compiled train step (GradientTape, the optimizer's apply; no strategy, metrics or hooks): the bare
    loop the benchmarks measure the train stage against."""
    import tensorflow as tf

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        optimizer.apply(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
        return loss

    return step


def _normalization(dataset: str):
    """The prepared split's per-channel mean/std (resnet and airbench need it), as the train stage reads it."""
    from tfpipe import data

    return data.load_manifest(PREPARED[dataset]).get("normalization")


def _w_bare(dataset: str, steps: int, batch: int, precision: str = "float32", model: str = "cnn") -> dict:
    """The best reachable custom loop: the same model (tfpipe's builder), data in memory through tf.data
    cache/shuffle/batch/prefetch, one `tf.function` step (GradientTape, Adam, sparse cross-entropy), no
    strategy, no metrics, no hooks."""
    import keras
    import tensorflow as tf

    from tfpipe import models

    cfg = _policy(precision, model)
    x_train, y_train = _train_arrays(dataset)
    tf.keras.utils.set_random_seed(cfg.train.seed)
    ds = (
        tf.data.Dataset.from_tensor_slices((x_train, y_train))
        .cache()
        .shuffle(10000)
        .batch(batch, drop_remainder=True)
        .repeat()
        .prefetch(tf.data.AUTOTUNE)
    )
    model = models.build_model(cfg, int(y_train.max()) + 1, normalization=_normalization(dataset))
    optimizer = keras.optimizers.Adam(cfg.train.optimizer.learning_rate)
    loss_fn = keras.losses.SparseCategoricalCrossentropy()

    step = compiled_step(model, optimizer, loss_fn)

    steps = steps or len(x_train) // batch
    iterator = iter(ds)
    seconds = []
    for _ in range(2):  # the first epoch pays for tracing and filling the cache
        t0 = time.perf_counter()
        for _ in range(steps):
            loss = step(*next(iterator))
        float(loss)
        seconds.append(time.perf_counter() - t0)
    return {"examples_per_sec": steps * batch / seconds[-1]}


def _w_keras(dataset: str, steps: int, batch: int, precision: str = "float32", model: str = "cnn") -> dict:
    """The seeds' recipe: tfds-style in-memory arrays -> tf.data cache/shuffle/batch/prefetch -> model.fit,
    on the same model (tfpipe's builder, compiled by Keras) and the same prepared data."""
    import keras
    import tensorflow as tf

    from tfpipe import data, models

    cfg = _compose("dataset=imdb") if dataset == "imdb" else _policy(precision, model)
    x_train, y_train = _train_arrays(dataset)
    tf.keras.utils.set_random_seed(cfg.train.seed)
    ds = (
        tf.data.Dataset.from_tensor_slices((x_train, y_train))
        .cache()
        .shuffle(10000)
        .batch(batch)
        .prefetch(tf.data.AUTOTUNE)
    )
    vocab = None
    if dataset == "imdb":
        vocab = data.read_vocab(PREPARED[dataset])
        vec = models.make_text_vectorizer(vocab, cfg.dataset.sequence_length)
        ds = ds.map(lambda x, y: (vec(x), y), num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
    model = models.build_model(
        cfg,
        int(y_train.max()) + 1,
        vocab_size=None if vocab is None else len(vocab),
        normalization=_normalization(dataset),
    )
    model.compile(
        optimizer=keras.optimizers.Adam(cfg.train.optimizer.learning_rate),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )

    class Timer(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.t = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.seconds = time.perf_counter() - self.t

    timer = Timer()
    steps = steps or len(x_train) // batch  # 0: whole epochs (remainder dropped, as the pipeline does)
    model.fit(ds.repeat(), epochs=2, steps_per_epoch=steps, verbose=0, callbacks=[timer])
    return {"examples_per_sec": steps * batch / timer.seconds}


def _w_input(dataset: str, batch: int, *flags: str) -> dict:
    """The train split through make_dataset (read, parse, batch; for IMDb the train stage's token ids: the
    texts vectorised once when the dataset is built, timed with the first pass), two passes: the second
    reads from the cache as training does from its second epoch. `deterministic`: under TF op determinism, as
    the train stage runs by default (train.deterministic=true)."""
    import tensorflow as tf

    from tfpipe import data, models

    if "deterministic" in flags:
        tf.config.experimental.enable_op_determinism()

    # imdb: imdb_fast's prepared data and vectorizer; imdb-seeds: the default imdb config's
    cfg = (
        _compose("experiment=imdb_fast")
        if dataset == "imdb"
        else _compose(f"dataset={dataset.split('-')[0]}")
    )
    vec = None
    if cfg.dataset.modality == "text":
        vec = models.make_text_vectorizer(
            data.read_vocab(PREPARED[dataset]), cfg.dataset.sequence_length, cfg.dataset.standardize
        )
    t0 = time.perf_counter()
    ds = data.make_dataset(PREPARED[dataset], "train", batch_size=batch, training=True, seed=0, vectorize=vec)
    rates = []
    for _ in range(2):
        n = 0
        for _, y in ds:
            n += int(y.shape[0])
        rates.append(n / (time.perf_counter() - t0))
        t0 = time.perf_counter()
    return {"first_pass": rates[0], "examples_per_sec": rates[1]}


WORKERS = {"pipeline": _w_pipeline, "stage": _w_stage, "keras": _w_keras, "bare": _w_bare, "input": _w_input}


def cpu_line() -> str:
    """The CPU model and what picks its kernels (flags, any oneDNN cap): printed with every figure."""
    from tfpipe import hardware, provenance

    return f"CPU: {provenance.cpu_model() or '?'}; flags: {hardware.cpu_kernels()}"


# ----------------------------------------------------------------------------- benchmarks


def _side_by_side(configs: list, repeats: int) -> dict:
    """configs: [(label, mode, args[, src])]; alternated per repeat; -> {label: [results]}."""
    out = {config[0]: [] for config in configs}
    for r in range(repeats):
        for label, mode, args, *src in configs:
            res = _worker(mode, *args, **({"src": Path(src[0])} if src else {}))
            out[label].append(res)
            print(
                f"  repeat {r + 1} {label}: {res['examples_per_sec']:.0f} examples/s  ({_load()})", flush=True
            )
    return out


def _median(results: list, key: str = "examples_per_sec") -> float:
    return statistics.median(r[key] for r in results)


def _table(rows: list, base: str) -> None:
    print(f"\n| configuration | examples/s (median) | ratio to {base} |\n|---|---|---|")
    ref = dict(rows)[base]
    for label, value in rows:
        print(f"| {label} | {value:,.0f} | {value / ref:.2f}x |")


def bench_keras(args) -> None:
    # Whole epochs: with a steps_per_epoch cap the pipeline re-fills its shuffle buffer every epoch,
    # while the Keras recipe's repeated dataset keeps it; that would not compare the train steps.
    # Same model, batch 64, precision and optimizer (Adam) on all sides: this times the loops.
    data, same = args.data, [f"precision={args.precision}", f"model={args.model}"]
    hand = [data, "0", "64", args.precision, args.model]
    configs = [
        ("plain Keras (tf.data cache/shuffle/batch + model.fit)", "keras", hand),
        ("bare tf.function step (same model and data, no strategy)", "bare", hand),
        ("tfpipe train stage loop, default config (steps_per_execution=10)", "pipeline", [data, "0", *same]),
        (
            "tfpipe train stage loop, train.steps_per_execution=1",
            "pipeline",
            [data, "0", *same, "train.steps_per_execution=1"],
        ),
    ]
    if args.compare_src:  # another checkout's train stage loop in the same run (before/after a change)
        configs.append(
            (
                f"train stage loop of {args.compare_src}",
                "pipeline",
                [data, "0", *same],
                str(Path(args.compare_src) / "src"),
            )
        )
    print(
        f"model {args.model}, precision {args.precision}, data {os.path.relpath(PREPARED[data], ROOT)}",
        flush=True,
    )
    if args.check:  # the CI check: the three sides it judges, nothing else
        configs = configs[:3]
    res = _side_by_side(configs, args.repeats)
    rows = [(config[0], _median(res[config[0]])) for config in configs]
    _table(rows, configs[0][0])
    _table(rows, configs[1][0])
    return _check_loop(rows, args.check) if args.check else 0


def _check_loop(rows: list, floor: float) -> int:
    """The regression check: the loop's median over each reference's median, both at least `floor`. Ratios
    of interleaved fresh-process repeats, never absolute times, so a slower or busier machine moves every
    side alike; the floor is below the quiet-machine figures (docs/explanation/performance.md) by the spread
    seen under load, so only a real regression (a lost tf.function, a per-step sync) crosses it."""
    (keras, k), (bare, b), (_, loop) = rows
    failed = [f"{loop / ref:.2f}x {name}" for name, ref in ((keras, k), (bare, b)) if loop / ref < floor]
    ratios = f"loop/keras {loop / k:.2f}x, loop/bare {loop / b:.2f}x"
    if failed:
        print(f"REGRESSION: the train stage loop ran at {'; '.join(failed)}, below the floor {floor:.2f}x")
        return 1
    print(f"ok: {ratios} (floor {floor:.2f}x)")
    return 0


def bench_tracking(args) -> None:
    configs = [
        ("MLflow off (training.train, no sink)", "pipeline", ["cifar10-12k", "0", "precision=float32"]),
        ("MLflow on (the train stage, stages.run_train)", "stage", ["cifar10-12k", "0", "precision=float32"]),
    ]
    res = _side_by_side(configs, args.repeats)
    _table([(label, _median(res[label])) for label, _, _ in configs], configs[0][0])
    on = res[configs[1][0]]
    print(
        f"\nstage wall s (median): {_median(on, 'stage_seconds'):.1f}, of which the epochs "
        f"{_median(on, 'train_seconds'):.1f} (the rest: run start, params, tags, artifacts, the logged model)"
    )


def bench_precision(args) -> None:
    configs = [
        ("cnn float32", "pipeline", ["cifar10-12k", "0", "precision=float32"]),
        ("cnn mixed_bfloat16", "pipeline", ["cifar10-12k", "0", "precision=mixed_bfloat16"]),
        (
            "resnet (cifar10_fast) float32",
            "pipeline",
            [
                "cifar10-12k",
                "0",
                "experiment=cifar10_fast",
                "train.lr_schedule.warmup_epochs=1",
                "precision=float32",
            ],
        ),
        (
            "resnet (cifar10_fast) mixed_bfloat16",
            "pipeline",
            [
                "cifar10-12k",
                "0",
                "experiment=cifar10_fast",
                "train.lr_schedule.warmup_epochs=1",
                "precision=mixed_bfloat16",
            ],
        ),
        ("embedding_gap (imdb) float32", "pipeline", ["imdb-seeds", "0", "precision=float32"]),
        ("embedding_gap (imdb) mixed_bfloat16", "pipeline", ["imdb-seeds", "0", "precision=mixed_bfloat16"]),
    ]
    if args.compare_src:  # another checkout's train stage loop in the same run (before/after a change)
        configs.append(
            (
                f"train stage loop of {args.compare_src}",
                "pipeline",
                ["cifar10", "0", "precision=float32"],
                str(Path(args.compare_src) / "src"),
            )
        )
    res = _side_by_side(configs, args.repeats)
    rows = [(config[0], _median(res[config[0]])) for config in configs]
    print("\n| model | float32 examples/s | mixed_bfloat16 examples/s | speed-up |\n|---|---|---|---|")
    for i in (0, 2, 4):
        f32, bf16 = rows[i][1], rows[i + 1][1]
        print(f"| {rows[i][0].split(' float32')[0]} | {f32:,.0f} | {bf16:,.0f} | {bf16 / f32:.2f}x |")


def bench_input(args) -> None:
    configs = [
        ("cifar10 input, batch 64", "input", ["cifar10", "64"]),
        ("cifar10 input, batch 512", "input", ["cifar10", "512"]),
        (
            "imdb input + vectorizer (imdb_fast: seq 1500, split_punctuation), batch 256",
            "input",
            ["imdb", "256"],
        ),
        (
            "imdb input + vectorizer (default imdb: seq 256, strip_punctuation), batch 64",
            "input",
            ["imdb-seeds", "64"],
        ),
        (
            "the same, op determinism (train.deterministic=true, the default)",
            "input",
            ["imdb-seeds", "64", "deterministic"],
        ),
    ]
    res = _side_by_side(configs, args.repeats)
    print("\n| input pipeline | first pass (fills cache) | examples/s (median, cached) |\n|---|---|---|")
    for label, _, _ in configs:
        print(f"| {label} | {_median(res[label], 'first_pass'):,.0f} | {_median(res[label]):,.0f} |")


def bench_prepare(args) -> None:
    print("| dataset | examples | wall s | examples/s | peak RSS MB |\n|---|---|---|---|---|")
    for dataset in ("cifar10", "imdb"):
        with tempfile.TemporaryDirectory() as out:
            cmd = [
                sys.executable,
                "-m",
                "pipeline.prepare",
                "data.source=directory",
                f"dataset={dataset}",
                f"data.output_dir={out}/prepared",
            ]
            t0 = time.perf_counter()
            proc = subprocess.Popen(
                cmd, cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
            )
            _, status, usage = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - t0
            if os.waitstatus_to_exitcode(status) != 0:
                raise SystemExit(f"prepare {dataset} failed: {proc.stderr.read().decode()[-2000:]}")
            manifest = json.loads((Path(out) / "prepared" / "manifest.json").read_text())
            n = sum(s["num_examples"] for s in manifest["splits"].values())
            print(
                f"| {dataset} | {n:,} | {wall:.1f} | {n / wall:,.0f} | {usage.ru_maxrss / 1024:,.0f} |  ({_load()})",
                flush=True,
            )


def bench_dvc(args) -> None:
    """A copy of the project on tiny generated data (the e2e tests' setup), `dvc repro` once, then
    no-op `dvc repro` against DVC's own start-up (`dvc --version`) and `dvc status`."""
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import write_image_tree, write_text_tree
    from test_pipeline_e2e import copy_project  # the e2e tests' project copy, kept in one place

    tmp = Path(tempfile.mkdtemp(prefix="tfpipe-dvc-bench-"))
    try:
        project = copy_project(tmp / "project")
        write_image_tree(project / "data" / "raw" / "cifar10", train_per_class=args.per_class)
        write_text_tree(project / "data" / "raw" / "imdb")
        (project / "data" / "raw" / ".gitkeep").touch()
        env = _env()
        env["PYTHONPATH"] = str(project / "src")
        git = ["git", "-c", "user.name=b", "-c", "user.email=b@b"]
        run = lambda cmd: subprocess.run(
            cmd, cwd=project, env=env, check=True, capture_output=True, text=True
        )  # noqa: E731
        run(["git", "init", "-q", "-b", "main"])
        from tfpipe.config import compose_yaml

        (project / "params.yaml").write_text(
            compose_yaml(
                [
                    "experiment=smoke",
                    "data.source=directory",
                    "model.filters=[8,8]",
                    "model.dense_units=16",
                    "train.batch_size_per_replica=8",
                ],
                config_dir=project / "conf",
            )
        )
        run([*git, "add", "-A"])
        run([*git, "commit", "-qm", "init"])
        t0 = time.perf_counter()
        run([sys.executable, "-m", "dvc", "repro"])
        print(
            f"first dvc repro (prepare, train, evaluate on {3 * args.per_class} images): "
            f"{time.perf_counter() - t0:.1f} s"
        )
        timings = {"dvc --version": [], "dvc status": [], "dvc repro (no-op)": []}
        for _ in range(args.repeats):
            for label, cmd in (
                ("dvc --version", ["--version"]),
                ("dvc status", ["status"]),
                ("dvc repro (no-op)", ["repro"]),
            ):
                t0 = time.perf_counter()
                out = run([sys.executable, "-m", "dvc", *cmd]).stdout
                timings[label].append(time.perf_counter() - t0)
                if cmd == ["repro"]:
                    assert "didn't change, skipping" in out or "skipping" in out, out
        print("\n| command | wall s (median) | min | max |\n|---|---|---|---|")
        for label, values in timings.items():
            print(f"| `{label}` | {statistics.median(values):.2f} | {min(values):.2f} | {max(values):.2f} |")
        extra = statistics.median(timings["dvc repro (no-op)"]) - statistics.median(timings["dvc --version"])
        print(f"\nno-op repro on top of DVC's start-up: {extra:.2f} s ({_load()})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "_worker":
        sys.path.insert(0, os.environ.get("TFPIPE_BENCH_SRC", str(ROOT / "src")))
        mode, rest = sys.argv[2], sys.argv[3:]
        fn = WORKERS[mode]
        if mode in ("pipeline", "stage"):
            result = fn(rest[0], int(rest[1]), *rest[2:])
        elif mode in ("keras", "bare"):
            result = fn(rest[0], int(rest[1]), int(rest[2]), *rest[3:])
        else:
            result = fn(rest[0], int(rest[1]), *rest[2:])
        print(json.dumps(result))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bench", choices=["keras", "tracking", "precision", "input", "prepare", "dvc"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=0, help="unused (all benchmarks time whole epochs)")
    parser.add_argument("--compare-src", help="keras: also time the train stage loop of this checkout")
    parser.add_argument("--per-class", type=int, default=40, help="dvc: generated train images per class")
    parser.add_argument("--model", default="cnn", help="keras: the image model timed (cnn, resnet, airbench)")
    parser.add_argument(
        "--precision", default="float32", choices=["float32", "mixed_bfloat16"], help="keras: on every side"
    )
    parser.add_argument(
        "--data", default="cifar10", choices=["cifar10", "cifar10-12k"], help="keras: prepared split"
    )
    parser.add_argument(
        "--prepared", help="keras: a prepared cifar10 folder instead of data/prepared/cifar10"
    )
    parser.add_argument(
        "--check",
        type=float,
        default=0.0,
        help="keras: exit 1 when the loop's median falls below this ratio of plain Keras's or the bare step's",
    )
    args = parser.parse_args()
    if args.prepared:
        os.environ["TFPIPE_BENCH_PREPARED"] = str(Path(args.prepared).resolve())
        PREPARED["cifar10"] = Path(os.environ["TFPIPE_BENCH_PREPARED"])
    print(
        f"$ python benchmarks/perf.py {' '.join(sys.argv[1:])}\n{cpu_line()}\n{_load()}, {os.cpu_count()} CPUs",
        flush=True,
    )
    rc = {
        "keras": bench_keras,
        "tracking": bench_tracking,
        "precision": bench_precision,
        "input": bench_input,
        "prepare": bench_prepare,
        "dvc": bench_dvc,
    }[args.bench](args)
    print(f"done ({_load()})")
    return rc or 0


if __name__ == "__main__":
    sys.exit(main())
