"""`tfpipe report` (issue 51 items 7 and 8): runs compared as seeds of their configurations, from the store alone.

A real SQLite MLflow store holds two groups of three seeds (A: learning rate 0.001, B: 0.003), logged with
MlflowClient: params (with the bookkeeping that differs from run to run: tracking.*, the SavedModel's digest, the
final figures as tfpipe.metric.*), metric histories by step, a confusion CSV on A's runs, an audit verdict on
one. The figures are chosen by hand so that each one the report prints is computed here on paper:

    test_accuracy  A: 0.80 0.81 0.82 -> mean 0.8100, sd 0.0100;  B: 0.84 0.85 0.86 -> 0.8500 ± 0.0100
    95% CI of a mean of 3: mean ± t(0.975, 2 df) sd / sqrt(3), t = 4.302653 (a t table): ± 0.024841
    Welch, B - A: 0.0400, se = sqrt(0.01²/3 + 0.01²/3) = 0.0081650, t = 4.899, df = 4 (equal variances, n = 3);
    interval 0.0400 ± 2.776445 · 0.0081650 = [+0.0173, +0.0627]; two-sided p for 4 df is 1 - x(3 - x²)/2 with
    x = t / sqrt(t² + 4) = sqrt(6/7): p = 0.0080.
    val_accuracy A (epochs 0-2): .50 .60 .70 | .52 .62 .72 | .54 .76 .74 -> last .70 .72 .74: 0.7200 ± 0.0200,
    CI ± 4.302653 · 0.02 / sqrt(3) = 0.049683; best per run .70 .72 .76 -> 0.7267; min .50, max .76. Run A1 logs
    epoch 2 twice, 0.40 and then 0.70: the later value is the epoch's (the minimum stays .50).
    val_loss B: 1.1 .9 .8 | 1.0 .85 .75 | .9 .8 .7 -> last .8 .75 .7: 0.7500 ± 0.0500, CI ± 0.124207; Δ against
    A's 0.9000: -0.1500; best (lowest) per run .8 .75 .7 -> 0.7500; min .70, max 1.10.

Nothing here is computed with the code under test; no TensorFlow is imported (the timing test's child process
checks that the command does not either)."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from conftest import seed_store

ROOT = Path(__file__).resolve().parents[1]
T0 = 1_700_000_000_000  # ms: metric timestamps
CAT_DOG = {  # A's confusion CSVs (actual, predicted): summed over A's runs, cat->cat 7, cat->dog 2, dog->cat 1, dog->dog 5
    1: "cat,cat\ncat,cat\ncat,dog\ndog,dog\ndog,dog\n",
    2: "cat,cat\ncat,cat\ncat,cat\ndog,cat\ndog,dog\n",
    3: "cat,cat\ncat,cat\ncat,dog\ndog,dog\ndog,dog\n",
}
A = {  # seed -> (test_accuracy, val_accuracy by epoch, val_loss by epoch)
    1: (0.80, [0.50, 0.60, 0.70], [1.2, 1.0, 0.9]),
    2: (0.81, [0.52, 0.62, 0.72], [1.1, 0.95, 0.85]),
    3: (0.82, [0.54, 0.76, 0.74], [1.0, 0.9, 0.95]),
}
B = {
    1: (0.84, [0.55, 0.65, 0.75], [1.1, 0.9, 0.8]),
    2: (0.85, [0.57, 0.67, 0.77], [1.0, 0.85, 0.75]),
    3: (0.86, [0.59, 0.69, 0.79], [0.9, 0.8, 0.7]),
}


def _log_run(client, experiment: str, lr: float, seed: int, figures: tuple, **extra) -> str:
    from mlflow.entities import Metric, Param

    test_accuracy, val_accuracy, val_loss = figures
    run_id = client.create_run(
        experiment, run_name=f"lr{lr}-seed{seed}", tags=extra.get("tags", {})
    ).info.run_id
    params = {
        "dataset.name": "cifar10",
        "model.name": "cnn",
        "train.epochs": "3",
        "train.optimizer.learning_rate": str(lr),
        "train.seed": str(seed),
        "tracking.run_name": f"lr{lr}-seed{seed}",  # bookkeeping: differs from run to run
        "tfpipe.saved_model_sha256": hashlib.sha256(f"{lr} {seed}".encode()).hexdigest(),
        "tfpipe.metric.test_accuracy": repr(test_accuracy),
    }
    metrics = [Metric("test_accuracy", test_accuracy, T0, 0)]
    for epoch, (acc, loss) in enumerate(zip(val_accuracy, val_loss)):
        metrics += [Metric("val_accuracy", acc, T0 + 10 * epoch + 5, epoch)]
        metrics += [
            Metric("val_loss", loss, T0 + 10 * epoch, epoch),
            Metric("epoch_train_loss", loss, T0, epoch),
        ]
    metrics += [Metric(name, value, T0 + 10 * step, step) for name, value, step in extra.get("more", [])]
    client.log_batch(run_id, params=[Param(k, v) for k, v in params.items()], metrics=metrics)
    if "confusion" in extra:
        client.log_text(run_id, "actual,predicted\n" + extra["confusion"], "plots/confusion_matrix.csv")
    client.set_terminated(run_id)
    return run_id


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> tuple:
    """(uri, {"A": [run ids], "B": [...], "C": [one run]}, client) of a store with the module docstring's runs."""
    from mlflow import MlflowClient

    folder = tmp_path_factory.mktemp("report_store")
    seed_store(folder)
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    experiment = client.create_experiment("tfpipe", artifact_location=(folder / "mlartifacts").as_uri())
    ids: dict = {"A": [], "B": [], "C": []}
    for seed, figures in A.items():
        tags = {"audit.verdict": "REPRODUCED", "audit.by": "alice"} if seed == 1 else {}
        more = (
            [("val_accuracy", 0.40, 2)] if seed == 1 else []
        )  # epoch 2 again, logged before (T0+20 < T0+25)
        run = _log_run(
            client, experiment, 0.001, seed, figures, confusion=CAT_DOG[seed], tags=tags, more=more
        )
        ids["A"].append(run)
    ids["B"] = [_log_run(client, experiment, 0.003, seed, figures) for seed, figures in B.items()]
    ids["C"] = [_log_run(client, experiment, 0.01, 7, (0.83, [0.6, 0.7, 0.8], [1.0, 0.9, 0.8]))]
    return uri, ids, client


def _report(argv: list, capsys) -> tuple:
    from tfpipe.commands import report

    capsys.readouterr()
    code = report.main(argv)
    out = capsys.readouterr()
    return code, out.out, [line for line in out.err.splitlines() if line.strip()]


def _rows(markdown: str, first: str) -> list:
    return [line for line in markdown.splitlines() if line.startswith(f"| {first} |")]


def test_the_markdown_table_holds_the_hand_computed_figures(store, tmp_path, capsys):
    uri, ids, _ = store
    out = tmp_path / "r"
    code, printed, err = _report(
        [ids["A"][0], *ids["A"][1:], *ids["B"], "--out", str(out), "--tracking-uri", uri], capsys
    )
    assert code == 0 and not err, err
    assert printed.strip() == f"report: {out}/report.md and {out}/report.html (6 runs in 2 groups)"
    md = (out / "report.md").read_text()
    assert _rows(md, "test_accuracy") == [
        "| test_accuracy | A | 3 | 0.8100 ± 0.0100 | [0.7852, 0.8348] | (base) | 0.8100 | 0.8000 | 0.8200 |",
        "| test_accuracy | B | 3 | 0.8500 ± 0.0100 | [0.8252, 0.8748] | +0.0400 | 0.8500 | 0.8400 | 0.8600 |",
    ]
    assert _rows(md, "val_accuracy")[0] == (
        "| val_accuracy | A | 3 | 0.7200 ± 0.0200 | [0.6703, 0.7697] | (base) | 0.7267 | 0.5000 | 0.7600 |"
    )
    assert _rows(md, "val_loss")[1] == (
        "| val_loss | B | 3 | 0.7500 ± 0.0500 | [0.6258, 0.8742] | -0.1500 | 0.7500 | 0.7000 | 1.1000 |"
    )
    assert not _rows(md, "test_loss") and not _rows(md, "train_loss")  # not logged: not shown
    decision = [line for line in md.splitlines() if line.startswith("- B against A")]
    assert decision == [
        "- B against A (base), test_accuracy: +0.0400; 95% CI of the difference [+0.0173, +0.0627], Welch's "
        "t-test t=4.90, df=4.0, p=0.0080: beyond the noise between seeds: better than the base"
    ]
    # the groups: A is the base run's, each with its seeds
    a_row, b_row = _rows(md, "A (base)"), _rows(md, "B")
    assert a_row and a_row[0].endswith("| 1, 2, 3 |") and ids["A"][0][:8] in a_row[0]
    assert b_row and ids["B"][2][:8] in b_row[0] and "one run" not in b_row[0]


def test_only_the_parameters_that_differ_are_shown(store, tmp_path, capsys):
    uri, ids, _ = store
    out = tmp_path / "r"
    code, _, err = _report([*ids["A"], *ids["B"], "--out", str(out), "--tracking-uri", uri], capsys)
    assert code == 0, err
    md = (out / "report.md").read_text()
    section = md.split("## Parameters that differ")[1].split("##")[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows == ["| parameter | A | B |", "| train.optimizer.learning_rate | 0.001 | 0.003 |"]


def test_a_group_of_one_says_so_and_has_no_interval_nor_test(store, tmp_path, capsys):
    uri, ids, _ = store
    out = tmp_path / "r"
    code, printed, err = _report([*ids["A"], ids["C"][0], "--out", str(out), "--tracking-uri", uri], capsys)
    assert code == 0, err
    assert "(4 runs in 2 groups)" in printed
    md = (out / "report.md").read_text()
    assert _rows(md, "B")[0].endswith(": one run | 7 |")
    assert _rows(md, "test_accuracy")[1] == (
        "| test_accuracy | B | 1 | 0.8300 (one run) | one run: no interval | +0.0200 | 0.8300 | 0.8300 | 0.8300 |"
    )
    assert "- B against A (base), test_accuracy: +0.0200; no test: B is one run" in md


def test_short_ids_name_the_runs_and_the_default_folder_is_the_base_s(store, tmp_path, capsys, monkeypatch):
    uri, ids, _ = store
    monkeypatch.chdir(tmp_path)
    code, printed, err = _report([i[:8] for i in (*ids["A"], *ids["B"])] + ["--tracking-uri", uri], capsys)
    assert code == 0, err
    folder = Path("reports") / ids["A"][0][:8]
    assert printed.strip() == f"report: {folder}/report.md and {folder}/report.html (6 runs in 2 groups)"
    assert sorted(p.name for p in (tmp_path / folder).iterdir()) == [
        "confusion.png", "curves.png", "report.html", "report.md",
    ]  # fmt: skip
    assert sorted(p.name for p in (tmp_path / "reports").iterdir()) == [
        ids["A"][0][:8]
    ]  # no temporary folder
    md = (tmp_path / folder / "report.md").read_text()
    assert "![" in md and "](curves.png)" in md and "](confusion.png)" in md


def test_the_html_page_is_whole_and_fetches_nothing(store, tmp_path, capsys):
    uri, ids, _ = store
    out = tmp_path / "r"
    code, _, err = _report([*ids["A"], *ids["B"], "--out", str(out), "--tracking-uri", uri], capsys)
    assert code == 0, err
    page = (out / "report.html").read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.I)
    assert "http://" not in page and "https://" not in page and "<script" not in page and "<link" not in page
    sources = re.findall(r'<img alt="[^"]*" src="data:image/png;base64,([^"]+)"', page)
    assert len(sources) == 2 == page.count("<img ")  # the curves and the confusion matrices, inside the page
    assert all(base64.b64decode(s).startswith(b"\x89PNG\r\n\x1a\n") for s in sources)
    assert "<td>0.8500 ± 0.0100</td><td>[0.8252, 0.8748]</td><td>+0.0400</td>" in page


def test_the_audit_verdicts_and_the_confusion_counts_are_the_runs(store, tmp_path, capsys):
    from tfpipe.report import figures, group
    from tfpipe.tracking import history

    uri, ids, client = store
    out = tmp_path / "r"
    code, _, err = _report([*ids["A"], *ids["B"], "--out", str(out), "--tracking-uri", uri], capsys)
    assert code == 0, err
    md = (out / "report.md").read_text()
    verdicts = md.split("## Audit verdicts")[1]
    assert f"| {ids['A'][0][:8]} | A | 1 | REPRODUCED |  | alice |" in verdicts
    assert f"| {ids['B'][0][:8]} | B | 1 | not audited |  |  |" in verdicts
    runs = history.read_runs(client, uri, ids["A"] + ids["B"], artifacts=(figures.CONFUSION_CSV,))
    a, b = group.group_runs(runs)
    counts, logged = figures.group_confusion(a)
    assert logged == 3 and counts == {
        ("cat", "cat"): 7,
        ("cat", "dog"): 2,
        ("dog", "cat"): 1,
        ("dog", "dog"): 5,
    }
    assert figures.group_confusion(b) == ({}, 0)


def test_log_puts_the_report_into_the_base_run(store, tmp_path, capsys):
    uri, ids, client = store
    out = tmp_path / "r"
    code, printed, err = _report([*ids["A"][:2], "--out", str(out), "--log", "--tracking-uri", uri], capsys)
    assert code == 0, err
    assert printed.strip().endswith(f"logged into run {ids['A'][0]}'s artifacts report/")
    logged = {Path(a.path).name for a in client.list_artifacts(ids["A"][0], "report")}
    assert logged == {"report.md", "report.html", "curves.png", "confusion.png"}


def _ambiguous_store(tmp_path, monkeypatch) -> tuple:
    """A store with two runs whose ids share their first 8 characters (Python's uuid4, MLflow's source of run
    ids, answering the chosen ids)."""
    from mlflow import MlflowClient

    seed_store(tmp_path / "amb")
    uri = f"sqlite:///{tmp_path / 'amb' / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    experiment = client.create_experiment("tfpipe", artifact_location=(tmp_path / "amb" / "a").as_uri())
    wanted, real = ["abcdef12" + "0" * 24, "abcdef12" + "f" * 24], uuid.uuid4
    queue = [uuid.UUID(hex=w) for w in wanted]
    monkeypatch.setattr(uuid, "uuid4", lambda: queue.pop(0) if queue else real())
    try:
        made = [_log_run(client, experiment, 0.001, s, A[s]) for s in (1, 2)]
    finally:
        monkeypatch.setattr(uuid, "uuid4", real)
    assert made == wanted, "the store did not take its run ids from uuid4: choose them another way"
    return uri, made


def test_bad_input_is_one_line_exit_2_and_nothing_written(store, tmp_path, capsys, monkeypatch):
    uri, ids, _ = store
    amb_uri, (x, y) = _ambiguous_store(tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path)
    gone = f"sqlite:///{tmp_path / 'nowhere.db'}"
    for argv, says in (
        (["abcdef12", "--tracking-uri", amb_uri], "run id 'abcdef12' is ambiguous"),
        ([x, "abcdef12", "--tracking-uri", amb_uri], "run id 'abcdef12' is ambiguous"),
        (["0123abcd", "--tracking-uri", uri], "run '0123abcd': not found"),
        (
            [ids["A"][0], "--metric", "test_acc", "--tracking-uri", uri],
            "--metric test_acc: no run named logged it",
        ),
        ([ids["A"][0], "--tracking-uri", gone], "no MLflow store at"),
    ):
        code, printed, err = _report(argv, capsys)
        assert code == 2 and len(err) == 1 and not printed, (argv, err)
        assert err[0].startswith("report: error: ") and says in err[0], err
        assert f"{x} (" in err[0] and f"{y} (" in err[0] if "ambiguous" in says else True, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["amb"]  # no reports/, no nowhere.db


def test_a_folder_holding_other_files_is_refused_and_an_earlier_report_replaced_whole(
    store, tmp_path, capsys
):
    from tfpipe import report

    uri, ids, _ = store
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    code, _, err = _report([ids["A"][0], "--out", str(other), "--tracking-uri", uri], capsys)
    assert code == 2 and "holds other files than a report" in err[0], err
    assert [p.name for p in other.iterdir()] == ["notes.txt"]
    out = tmp_path / "r"
    assert _report([ids["A"][0], "--out", str(out), "--tracking-uri", uri], capsys)[0] == 0
    earlier = (out / "report.md").read_text()
    with pytest.raises(FileNotFoundError):  # a report that fails half written: a file it cannot write
        report.write_folder(out, {"report.md": b"new", "no/such/folder.png": b"x"})
    assert (out / "report.md").read_text() == earlier  # the earlier report stands, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other", "r"]  # no temporary folder left


CHILD = """
import sys
from tfpipe.cli import main
try:
    main(sys.argv[1:])
finally:
    print("imported:", sorted({"tensorflow", "keras"} & set(sys.modules)), file=sys.stderr)
"""


@pytest.mark.slow  # starts a process
def test_a_report_of_2x3_runs_takes_seconds_and_no_tensorflow(store, tmp_path):
    """The whole command in a fresh interpreter, as a reviewer runs it: its wall time printed (docs/how-to/report.md
    quotes it with the CPU), not asserted: the suite's hosts are shared."""
    uri, ids, _ = store
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env["PYTHONPATH"] = str(ROOT / "src")
    cmd = [sys.executable, "-c", CHILD, "report", *ids["A"], *ids["B"], "--out", str(tmp_path / "r")]
    start = time.perf_counter()
    proc = subprocess.run(
        cmd + ["--tracking-uri", uri], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    wall = time.perf_counter() - start
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "imported: []" in proc.stderr, proc.stderr[-2000:]
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "?")  # fmt: skip
    print(f"\ntfpipe report of 2 groups x 3 runs: {wall:.1f} s wall (a fresh interpreter), on {cpu}")


def test_runs_open_with_a_group_tag_that_leaves_the_seed_out(make_config, tmp_path, monkeypatch, capsys):
    """The tag the MLflow UI groups by (`tfpipe.group`), set when the train stage opens its run: the same for two
    seeds, another for another learning rate; a run without it (older) lands in its group by its params."""
    import mlflow
    from mlflow import MlflowClient
    from mlflow.entities import Param

    from tfpipe import tracking

    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_ID", "MLFLOW_EXPERIMENT_NAME"):
        monkeypatch.delenv(name, raising=False)
    seed_store(tmp_path)
    made = {}
    try:
        for name, overrides in (
            ("seed1", ["train.seed=1"]),
            ("seed2", ["train.seed=2"]),
            ("lr", ["train.seed=1", "train.optimizer.learning_rate=0.01"]),
        ):
            cfg = make_config("experiment=smoke", "precision=float32", *overrides)
            with tracking.start_run(cfg, tmp_path, stage="train") as run:
                run.log_params(cfg.flat())
            made[name] = run.run_id
    finally:
        while mlflow.active_run() is not None:
            mlflow.end_run()
        mlflow.set_tracking_uri(None)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    tags = {name: client.get_run(run_id).data.tags.get("tfpipe.group") for name, run_id in made.items()}
    assert re.fullmatch(r"[0-9a-f]{12}", tags["seed1"] or "") and tags["seed1"] == tags["seed2"] != tags["lr"]
    first = client.get_run(made["seed1"])
    older = client.create_run(first.info.experiment_id, run_name="older, no tag").info.run_id
    params = {**first.data.params, "train.seed": "3", "tracking.run_name": "older"}
    client.log_batch(older, params=[Param(k, v) for k, v in params.items()])
    out = tmp_path / "r"
    argv = [made["seed1"], made["seed2"], older, made["lr"], "--out", str(out), "--tracking-uri", uri]
    code, printed, err = _report(argv, capsys)
    assert code == 0 and "(4 runs in 2 groups)" in printed, err
    a_row = _rows((out / "report.md").read_text(), "A (base)")[0]
    assert a_row.startswith(f"| A (base) | {tags['seed1']} |") and a_row.endswith("| 1, 2, 3 |")
    assert older[:8] in a_row


def _group(label: str, metric: str, values: list):
    from tfpipe.report.group import Group
    from tfpipe.tracking.history import RunHistory

    runs = tuple(
        RunHistory(f"{label}{i}", f"{label}{i}", {}, {}, {metric: ((0, v),)}) for i, v in enumerate(values)
    )
    return Group(label, label.lower() * 12, runs)


def test_the_decision_within_the_noise_and_for_a_loss():
    """Hand figures (the module docstring's method): D - A = +0.0050, interval 0.0050 ± 0.022670, t = 0.61, p for
    4 df = 1 - x(3 - x²)/2, x = t/sqrt(t² + 4): 0.5734. A loss 0.1000 lower, t = -12.25, p = 0.0003: better."""
    from tfpipe.report.group import decide

    a, d = (
        _group("A", "test_accuracy", [0.80, 0.81, 0.82]),
        _group("D", "test_accuracy", [0.805, 0.815, 0.825]),
    )
    assert decide(a, d, "test_accuracy") == (
        "D against A (base), test_accuracy: +0.0050; 95% CI of the difference [-0.0177, +0.0277], Welch's t-test "
        "t=0.61, df=4.0, p=0.5734: within the noise between seeds (the interval holds 0): no evidence of a "
        "difference"
    )
    a, b = _group("A", "test_loss", [0.50, 0.51, 0.52]), _group("B", "test_loss", [0.40, 0.41, 0.42])
    assert decide(a, b, "test_loss").endswith(
        "-0.1000; 95% CI of the difference [-0.1227, -0.0773], Welch's t-test t=-12.25, df=4.0, p=0.0003: beyond "
        "the noise between seeds: better than the base"
    )
    assert decide(a, _group("E", "val_loss", [0.3]), "test_loss") == (
        "E against A (base), test_loss: no test: group E has not logged it"
    )


def test_one_run_named_brings_its_group_s_finished_seeds(tmp_path, capsys, monkeypatch):
    """`tfpipe report A1 B1` weighs both groups whole: each run named brings the FINISHED runs tagged with its
    group (a failed and a running seed of A stay out; so does a run of another group); `--only-named` takes the
    two named alone. The groups here are tags set by hand, so what is found is what was tagged."""
    from mlflow import MlflowClient

    seed_store(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    experiment = client.create_experiment("tfpipe", artifact_location=(tmp_path / "art").as_uri())
    tag = {"a": {"tfpipe.group": "a" * 12}, "b": {"tfpipe.group": "b" * 12}}
    a = [_log_run(client, experiment, 0.001, seed, A[seed], tags=tag["a"]) for seed in A]
    b = [_log_run(client, experiment, 0.003, seed, B[seed], tags=tag["b"]) for seed in B]
    failed = _log_run(client, experiment, 0.001, 4, A[1], tags=tag["a"])
    client.set_terminated(failed, status="FAILED")
    running = _log_run(client, experiment, 0.001, 5, A[2], tags=tag["a"])
    client.update_run(running, status="RUNNING")
    other = _log_run(client, experiment, 0.01, 7, A[3], tags={"tfpipe.group": "c" * 12})

    code, printed, err = _report([a[1], b[2], "--out", str(tmp_path / "r"), "--tracking-uri", uri], capsys)
    assert code == 0, err
    assert printed.strip().endswith("(6 runs in 2 groups)"), printed
    md = (tmp_path / "r" / "report.md").read_text()
    assert all(run[:8] in md for run in a + b), md
    assert not any(run[:8] in md for run in (failed, running, other)), md
    assert "0.8100" in md and "0.8500" in md  # A's and B's means over three seeds (the module docstring)

    code, printed, err = _report(
        [a[1], b[2], "--only-named", "--out", str(tmp_path / "r2"), "--tracking-uri", uri], capsys
    )
    assert code == 0, err
    assert printed.strip().endswith("(2 runs in 2 groups)"), printed
