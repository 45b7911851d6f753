"""The MLflow UI opens tfpipe's experiment on its training runs (issue 51 item 1; docs/how-to/compare.md).

MLflow 3.17.2's UI picks GenAI or Model-training pages by one per-browser switch, GenAI unless the page's URL
says `workflowType=machine_learning` or the switch was clicked once in that browser (`tfpipe.tracking.kinds`).
Real parts: a store with an experiment made the way tfpipe makes it (`backend.ensure_experiment`) holding two
runs logged with MLflow's client, a real `mlflow server` on a free loopback port, headless Chromium from a fresh
profile (Selenium). Screenshots go to the test's tmp_path, and are copied to env TFPIPE_SCREENSHOTS when set.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest

from tfpipe.tracking import backend, kinds, naming

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
GENAI = ("Detect Issues", "Observability", "Judges")  # on GenAI pages only: the overview, the GenAI sidebar
ML = ("Model registry",)  # in the Model-training sidebar only
RUNS = {  # run name -> (learning rate, metrics): what the runs table and the saved view show
    "cifar10-cnn-one_device-float32-lr1e-3": (
        "0.001",
        {"test_accuracy": 0.81, "test_macro_f1": 0.79, "test_loss": 0.52},
    ),
    "cifar10-cnn-one_device-float32-lr3e-3": (
        "0.003",
        {"test_accuracy": 0.87, "test_macro_f1": 0.85, "test_loss": 0.41},
    ),
}
WAIT = 120.0  # seconds a page may take to render on a loaded two-core machine


# ----------------------------------------------------------------------------- the tags, without a browser


def _sqlite_client(tmp_path, db_template):
    from mlflow import MlflowClient

    shutil.copy(db_template, tmp_path / "mlflow.db")
    return MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")


def _artifacts(tmp_path) -> str:
    return (tmp_path / "artifacts").as_uri()


def test_a_new_experiment_is_model_training_with_the_runs_view(tmp_path, db_template):
    client = _sqlite_client(tmp_path, db_template)
    tags = client.get_experiment(backend.ensure_experiment(client, "tfpipe", _artifacts(tmp_path))).tags
    assert tags[kinds.KIND_TAG] == "custom_model_development"
    view = json.loads(tags["mlflow.sharedViewState.tfpipe-runs"])  # the UI's saved-view envelope
    assert view["name"] == "tfpipe: training runs" and isinstance(view["createdAt"], int)
    columns = json.loads(view["state"])["selectedColumns"]
    assert columns == ["metrics.`test_accuracy`", "metrics.`test_macro_f1`", "metrics.`test_loss`"]


def test_an_older_experiment_gets_the_view_and_a_view_of_its_own_is_kept(tmp_path, db_template):
    client = _sqlite_client(tmp_path, db_template)
    kind = {kinds.KIND_TAG: "custom_model_development"}  # made by an earlier tfpipe: no view
    older = client.create_experiment("tfpipe", artifact_location=_artifacts(tmp_path), tags=kind)
    backend.ensure_experiment(client, "tfpipe", _artifacts(tmp_path))
    assert kinds.VIEW_TAG in client.get_experiment(older).tags
    client.set_experiment_tag(older, kinds.VIEW_TAG, '{"name": "mine"}')  # the UI's "Override saved view"
    backend.ensure_experiment(client, "tfpipe", _artifacts(tmp_path))
    assert client.get_experiment(older).tags[kinds.VIEW_TAG] == '{"name": "mine"}'


def test_the_printed_link_asks_for_the_model_training_pages(tmp_path):
    run = SimpleNamespace(run_id="abc", experiment_id="7", tracking_uri="http://mlflow.example:5000/")
    page = "#/experiments/7/runs/abc?workflowType=machine_learning"
    assert naming.where(run, tmp_path) == f"http://mlflow.example:5000/{page}"
    run.tracking_uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert (
        naming.where(run, tmp_path)
        == f"mlflow ui --backend-store-uri sqlite:///mlflow.db, then http://127.0.0.1:5000/{page}"
    )
    assert (
        kinds.runs_page("7")
        == "#/experiments/7/runs?workflowType=machine_learning&viewStateShareKey=tfpipe-runs"
    )


# ----------------------------------------------------------------------------- the UI in Chromium


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_health(url: str, proc: subprocess.Popen, log: Path) -> None:
    """Until the server's /health answers 200 (it migrates and imports for seconds first)."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"mlflow server exited ({proc.returncode}):\n{log.read_text()[-4000:]}"
        with contextlib.suppress(OSError), urllib.request.urlopen(url + "/health", timeout=2) as response:
            if response.status == 200:
                return
        time.sleep(0.3)
    raise AssertionError(f"{url}/health: no answer:\n{log.read_text()[-4000:]}")


@pytest.fixture
def server(tmp_path, db_template):
    """`mlflow server` on a SQLite store in tmp_path (one worker, no GenAI job runner): its URL."""
    store = tmp_path / "store"
    store.mkdir()
    shutil.copy(db_template, store / "mlflow.db")
    port, log = _free_port(), tmp_path / "server.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"
    argv = [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
    ]
    argv += ["--backend-store-uri", f"sqlite:///{store / 'mlflow.db'}", "--artifacts-destination", str(store)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv, cwd=store, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_health(url, proc, log)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


@pytest.fixture
def browser(tmp_path):
    """Headless Chromium on a fresh profile in tmp_path."""
    if not (CHROMIUM and CHROMEDRIVER):
        if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
            pytest.fail("CI=true but chromium and chromedriver not found", pytrace=False)
        pytest.skip("chromium and chromedriver not found; apt-get install chromium chromium-driver")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    flags = "--headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run --disable-sync "
    flags += "--disable-background-networking --disable-component-update --window-size=1400,900"
    for flag in [*flags.split(), f"--user-data-dir={tmp_path / 'profile'}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(
        options=options, service=Service(CHROMEDRIVER, log_output=str(tmp_path / "driver.log"))
    )
    driver.set_page_load_timeout(WAIT)
    try:
        yield driver
    finally:
        driver.quit()


def _shown(driver, needles=(), in_dom=(), gone=()) -> str:
    """The page's visible text once it holds every needle, its DOM every `in_dom` string (the runs grid clips
    long names) and the text none of `gone`; the UI renders asynchronously."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def ready(d):
        text = d.find_element(By.TAG_NAME, "body").text
        ok = all(n in text for n in needles) and not any(g in text for g in gone)
        return text if ok and all(n in d.page_source for n in in_dom) else False

    try:
        return WebDriverWait(driver, WAIT, poll_frequency=0.3).until(ready)
    except TimeoutException:
        text = driver.find_element(By.TAG_NAME, "body").text
        raise AssertionError(
            f"{driver.current_url}: want {needles} {in_dom}, not {gone}; shown:\n{text[:3000]}"
        ) from None


def _click(driver, by: str, selector: str) -> None:
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, WAIT).until(ec.element_to_be_clickable((by, selector))).click()


def _log_runs(url: str) -> tuple[str, list]:
    """Experiment 'tfpipe' made as tfpipe makes it, on the server, with the two RUNS: (its id, the runs)."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=url)
    experiment = backend.ensure_experiment(client, "tfpipe", None)  # the server's artifact root
    runs = []
    for name, (lr, metrics) in RUNS.items():
        run = client.create_run(experiment, run_name=name)
        client.log_param(run.info.run_id, "train.optimizer.learning_rate", lr)
        client.log_param(run.info.run_id, "data.source", "directory")
        for key, value in metrics.items():
            client.log_metric(run.info.run_id, key, value)
        client.set_terminated(run.info.run_id)
        runs.append(run)
    return experiment, runs


def _shoot(driver, tmp_path: Path, name: str) -> Path:
    """The window as tmp_path/shots/<name>.png, copied to env TFPIPE_SCREENSHOTS when set."""
    shots = tmp_path / "shots"
    shots.mkdir(exist_ok=True)
    driver.save_screenshot(str(shots / f"{name}.png"))
    if os.environ.get("TFPIPE_SCREENSHOTS"):
        keep = Path(os.environ["TFPIPE_SCREENSHOTS"])
        keep.mkdir(parents=True, exist_ok=True)
        shutil.copy(shots / f"{name}.png", keep)
    return shots / f"{name}.png"


def _workflow_stored(driver):
    return driver.execute_script("return window.localStorage.getItem('mlflow.workflowType_v1')")


@pytest.mark.slow
def test_the_printed_link_and_the_saved_view_open_on_the_training_runs(server, browser, tmp_path):
    from selenium.webdriver.common.by import By

    experiment, runs = _log_runs(server)
    names = list(RUNS)
    # The link a stage's last line prints: the run's page, Model-training sidebar, no GenAI page.
    printed = naming.where(
        SimpleNamespace(run_id=runs[1].info.run_id, experiment_id=experiment, tracking_uri=server), tmp_path
    )
    browser.get(printed)
    _shown(browser, [names[1], "Parameters", "train.optimizer.learning_rate", *ML], gone=GENAI)
    _shoot(browser, tmp_path, "1-printed-run-page")
    _click(
        browser,
        By.XPATH,
        f"//a[normalize-space(.)='Runs'][contains(@href, '/experiments/{experiment}/runs')]",
    )
    _shown(browser, ["2 matching runs", *ML], in_dom=names, gone=GENAI)  # one click: the runs table
    _shoot(browser, tmp_path, "2-runs-from-the-run-page")

    # The runs table in tfpipe's saved view: the headline metrics as columns, without a click.
    browser.get(f"{server}/{kinds.runs_page(experiment)}")
    text = _shown(
        browser,
        ["2 matching runs", "tfpipe: training runs", "viewing a shared view", *kinds.VIEW_METRICS, *ML],
        in_dom=names,
        gone=GENAI,
    )
    assert {"0.81", "0.87", "0.79", "0.85", "0.52", "0.41"} <= set(text.split()), text[-2000:]
    _shoot(browser, tmp_path, "3-runs-in-the-saved-view")
    assert _workflow_stored(browser) is None  # the links changed nothing this browser keeps

    # From the home page of a browser that never clicked the switch: MLflow's GenAI overview.
    browser.get(f"{server}/#/")
    _click(browser, By.CSS_SELECTOR, f"a[href$='experiments/{experiment}']")
    _shown(browser, ["Detect Issues in Your Traces", "Traces\n0", "No data available"], gone=names[:1])
    assert "/overview/" in browser.current_url and "workflowType=genai" in browser.current_url
    _shoot(browser, tmp_path, "4-home-click-fresh-browser")

    # The sidebar's "Model training" switch, clicked once, is kept: the same click lands on the runs table.
    browser.get(f"{server}/#/")
    _click(browser, By.XPATH, "//span[normalize-space(.)='Model training']")
    _shown(browser, ML, gone=GENAI)
    assert json.loads(_workflow_stored(browser)) == "machine_learning"
    _click(browser, By.CSS_SELECTOR, f"a[href$='experiments/{experiment}']")
    _shown(browser, ["2 matching runs", *ML], in_dom=names, gone=GENAI)
    assert f"/experiments/{experiment}/runs" in browser.current_url
    _shoot(browser, tmp_path, "5-home-click-after-the-switch")
    _click(browser, By.CSS_SELECTOR, "[data-testid='saved-views-trigger']")  # Views: tfpipe's is listed
    _shown(browser, ["Save as new view", "tfpipe: training runs"])
    _shoot(browser, tmp_path, "6-views-lists-tfpipes")
