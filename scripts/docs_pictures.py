"""The documentation's pictures, captured from two real runs: `python scripts/docs_pictures.py [--out DIR]`.

Copies this checkout's project files into a temporary git repository, unpacks a subset of the real CIFAR-10
archive (../shared/datasets, or --data DIR) into it, runs two short DVC experiments that differ only in
`train.optimizer.learning_rate`, starts `mlflow ui` on a free port and, in headless Chromium at a fixed
1400x900 window (Selenium), saves the MLflow compare view of the two runs (mlflow-compare.png), one run's
metric charts (mlflow-run-metrics.png) and the page `dvc plots diff` writes for the two experiments
(dvc-plots.png) into --out (docs/images); then stops the server and removes the temporary project (about
three minutes on two CPU cores).

What it knows: the MLflow 3 UI's routes and buttons (`#/compare-runs`, `.../runs/<id>/model-metrics`), and
that DVC's plots page loads Vega from a CDN: it fetches the same versions with `npm pack` and points the page
at them, so it runs offline. What it does not: judge the pictures (look at them), or train a good model (8
epochs on 2,000 images). Missing input (the archive, Chromium, chromedriver, Selenium or Pillow; an --out
that is a file) is one line on stderr, exit code 2.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path

try:  # the development dependencies (requirements-dev.lock)
    from PIL import Image
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:  # check() says so
    Image = By = WebDriverWait = None

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "datasets"
ARCHIVE = "cifar10-images.tar.gz"
# What a clone holds that the stages need (tests/test_pipeline_e2e.py copies the same).
PROJECT_FILES = """conf pipeline src dvc.yaml params.yaml MLproject python_env.yaml requirements.lock
    pyproject.toml .gitignore .dvcignore .dvc/config data/raw/.gitignore""".split()
PER_CLASS = {"train": 200, "test": 50}  # files unpacked per class: 2,000 train (200 carved off as validation)
COMMON = ["train.epochs=8", "train.log_every_steps=5", "tracking.system_metrics=false"]
LR = "train.optimizer.learning_rate"
EXPERIMENTS = {"lr-1e-3": f"{LR}=0.001", "lr-3e-3": f"{LR}=0.003"}  # DVC experiment name: the one setting
WIDTH, HEIGHT = 1400, 900
VEGA = ["vega@5.20.2", "vega-lite@5.2.0", "vega-embed@6.18.2"]  # what dvc-render's page loads from the CDN
PLOTS = ["Loss per epoch", "Accuracy per epoch", "Confusion matrix", "F1 per class"]  # regexes of plot ids
PLOTS_TEMPLATE = """<!DOCTYPE html><html><head><meta charset="utf-8">{scripts}<style>body { margin: 24px;
font: 13px sans-serif; display: flex; flex-wrap: wrap; gap: 16px 40px }</style></head><body>{plot_divs}</body>
</html>"""
CHARTS = "^(epoch_train_accuracy|epoch_train_loss|train_accuracy|train_loss|val_accuracy|val_loss)$"
# Vega-Embed draws each plot of the page into a canvas of its div.
PLOTS_DRAWN = """const divs = [...document.querySelectorAll('body > div[id]')];
return divs.length > 0 && divs.every(div => [...div.querySelectorAll('canvas')].some(c => c.width > 0));"""
CLOSE_ASSISTANT = 'button[data-component-id="mlflow.assistant.chat_panel.close"]'
# The charts' toolbars (shown on hover) hidden, the focus (an outline on the search box) taken off.
TIDY = """document.head.insertAdjacentHTML('beforeend', '<style>.modebar { display: none }</style>');
document.activeElement.blur();"""


class Missing(Exception):
    """Input the script cannot do without; the message says what and how to get it."""


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="docs_pictures.py", description=__doc__.split("\n\n")[1])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images", help="where the PNGs go")
    parser.add_argument("--data", type=Path, default=SHARED, help=f"the folder holding {ARCHIVE}")
    return parser.parse_args(argv)


def check(args: argparse.Namespace) -> tuple[str, str]:
    """(chromium, chromedriver), or Missing naming what is not there."""
    if args.out.exists() and not args.out.is_dir():
        raise Missing(f"--out {args.out}: is a file; give a folder for the PNGs")
    if not (args.data / ARCHIVE).is_file():
        raise Missing(f"{args.data / ARCHIVE}: not found; it is in ../shared/datasets (or pass --data DIR)")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not (chromium and driver):
        raise Missing("chromium or chromedriver not found; apt-get install -y chromium chromium-driver")
    if WebDriverWait is None or Image is None:
        raise Missing("selenium or Pillow not installed; pip install -r requirements-dev.lock")
    return chromium, driver


def make_project(tmp: Path, archive: Path) -> tuple[Path, dict]:
    """(project, env): the project files in a new git repository, a CIFAR-10 subset in data/raw/cifar10."""
    project = tmp / "project"
    for name in PROJECT_FILES:
        src, dst = ROOT / name, project / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(src, dst)
    _unpack_subset(archive, project / "data" / "raw" / "cifar10")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DVC_"))}
    env.update(PYTHONPATH=str(project / "src"), DVC_NO_ANALYTICS="1", TF_CPP_MIN_LOG_LEVEL="2")
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}")
    env.update({f"GIT_{who}_{what}": "docs" for who in ("AUTHOR", "COMMITTER") for what in ("NAME", "EMAIL")})
    for cmd in (["git", "init", "-q", "-b", "main"], ["git", "add", "-A"], ["git", "commit", "-qm", "clone"]):
        run(cmd, project, env)
    return project, env


def _unpack_subset(archive: Path, dest: Path) -> None:
    """The archive's first PER_CLASS[split] files of each class, as `<split>/<class>/<file>` under dest."""
    taken: collections.Counter = collections.Counter()
    with tarfile.open(archive) as tar:
        for member in tar:
            parts = Path(member.name).parts  # cifar10-images/<split>/<class>/<file>
            if member.isfile() and len(parts) == 4 and taken[parts[1:3]] < PER_CLASS.get(parts[1], 0):
                taken[parts[1:3]] += 1
                (dest / parts[1] / parts[2]).mkdir(parents=True, exist_ok=True)
                (dest.joinpath(*parts[1:])).write_bytes(tar.extractfile(member).read())


def run(cmd: list[str], cwd: Path, env: dict) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd}: exit {proc.returncode}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return proc.stdout


def train(project: Path, env: dict) -> None:
    """The two experiments, with the real stages, as a user runs them (docs/tutorials/first-run.md)."""
    for name, setting in EXPERIMENTS.items():
        cmd = ["dvc", "exp", "run", "-n", name, *(arg for s in (*COMMON, setting) for arg in ("-S", s))]
        print(" ".join(cmd), flush=True)
        run(cmd, project, env)


def plots_page(project: Path, env: dict, tmp: Path) -> Path:
    """`dvc plots diff` of the two experiments (dvc.yaml's top-level plots, side by side) as an HTML page."""
    (tmp / "plots.html").write_text(PLOTS_TEMPLATE)
    cmd = ["dvc", "plots", "diff", *EXPERIMENTS, "--html-template", f"{tmp}/plots.html", "-o", f"{tmp}/plots"]
    run([*cmd, "--targets", *PLOTS], project, env)
    page = tmp / "plots" / "index.html"
    if shutil.which("npm") is None:
        print("npm not found: the plots page loads Vega from its CDN")
        return page
    html = page.read_text()
    for package in VEGA:  # the same versions, from the npm registry, beside the page
        tgz = run(["npm", "pack", "--silent", package], page.parent, env).strip().splitlines()[-1]
        script = f"{package.split('@')[0]}.min.js"
        with tarfile.open(page.parent / tgz) as tar:
            (page.parent / script).write_bytes(tar.extractfile(f"package/build/{script}").read())
        html = html.replace(f'src="https://cdn.jsdelivr.net/npm/{package}"', f'src="{script}"')
    page.write_text(html)
    return page


@contextlib.contextmanager
def mlflow_ui(project: Path, env: dict, log: Path):
    """`mlflow ui` on the project's store, on a free port; its address once /health answers; stopped after."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cmd = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", "sqlite:///mlflow.db"]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    env = {**env, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, cwd=project, env=env, stdout=fh, stderr=fh, start_new_session=True)
    try:
        _wait_health(f"http://127.0.0.1:{port}/health", proc, log)
        yield f"http://127.0.0.1:{port}"
    finally:  # the server and its workers (their own process group): SIGTERM, SIGKILL after 10 s
        with contextlib.suppress(ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def _wait_health(url: str, proc: subprocess.Popen, log: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as response:
            if response.status == 200:
                return
        time.sleep(0.3)
    raise RuntimeError(f"mlflow ui: no answer at {url} (exit code {proc.poll()}):\n{log.read_text()[-3000:]}")


@contextlib.contextmanager
def browser(chromium: str, chromedriver: str, tmp: Path):
    """Headless Chromium whose pages are exactly WIDTH x HEIGHT CSS pixels at scale 1."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    flags = "--headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run "
    flags += "--hide-scrollbars --disable-background-networking --disable-component-update --disable-sync"
    for flag in [*flags.split(), f"--window-size={WIDTH},{HEIGHT}", f"--user-data-dir={tmp / 'profile'}"]:
        options.add_argument(flag)
    service = Service(chromedriver, log_output=str(tmp / "driver.log"))
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(60)
    metrics = {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    try:
        yield driver
    finally:
        driver.quit()


def shoot_mlflow(driver, url: str, project: Path, out: Path) -> list[Path]:
    """The compare view of the two runs and the first run's metric charts, as PNGs in `out`."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{project / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("tfpipe").experiment_id
    runs = sorted(client.search_runs([experiment]), key=lambda run: run.info.run_name)
    names = [run.info.run_name for run in runs]
    ml = "workflowType=machine_learning"  # the sidebar of model training, not of GenAI
    driver.get(f"{url}/#/experiments/{experiment}/runs?{ml}")
    _wait_text(driver, *names)
    for button in driver.find_elements(By.CSS_SELECTOR, CLOSE_ASSISTANT):
        button.click()  # the assistant's side panel: closed once, remembered by the browser
    ids = json.dumps([run.info.run_id for run in runs])
    driver.get(f"{url}/#/compare-runs?runs={ids}&experiments={json.dumps([experiment])}&{ml}")
    _wait_text(driver, "Comparing 2 Runs", *names, "train.optimizer.learning_rate", "test_accuracy")
    _click(driver, By.XPATH, "//div[@role='button'][.//span[@aria-label='collapse Visualizations']]")
    _click(driver, By.CSS_SELECTOR, 'button[aria-label="Parameters - Show diff only"]')
    _wait_text(driver, gone="data.source")  # the rows both runs share: hidden
    compare = _save(driver, out / "mlflow-compare.png")
    driver.get(f"{url}/#/experiments/{experiment}/runs/{runs[0].info.run_id}/model-metrics?{ml}")
    _click(driver, By.CSS_SELECTOR, 'input[role="searchbox"]').send_keys(CHARTS)
    _wait_text(driver, "Model metrics\n(6)")
    traces = (By.CSS_SELECTOR, ".js-plotly-plot .trace")
    WebDriverWait(driver, 60).until(lambda d: len(d.find_elements(*traces)) >= 6)  # each chart drawn
    driver.execute_script(TIDY)
    return [compare, _save(driver, out / "mlflow-run-metrics.png")]


def shoot_plots(driver, page: Path, out: Path) -> Path:
    """The `dvc plots diff` page, once Vega has drawn each of its plots."""
    driver.get(page.as_uri())
    WebDriverWait(driver, 60).until(lambda d: d.execute_script(PLOTS_DRAWN))
    return _save(driver, out / "dvc-plots.png")


def _wait_text(driver, *needles: str, gone: str = "\0") -> None:
    """Until the page's visible text holds every needle and not `gone` (the UI renders asynchronously)."""
    text = lambda: driver.find_element(By.TAG_NAME, "body").text
    WebDriverWait(driver, 60).until(lambda _: all(n in text() for n in needles) and gone not in text())


def _click(driver, by: str, selector: str):
    from selenium.webdriver.support import expected_conditions as ec

    element = WebDriverWait(driver, 60).until(ec.element_to_be_clickable((by, selector)))
    element.click()
    return element


def _save(driver, path: Path) -> Path:
    """The window as a PNG at `path`, in 256 colours (a third of the bytes; screenshots have few colours)."""
    driver.save_screenshot(str(path))
    with Image.open(path) as image:
        small = image.convert("RGB").quantize(256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    small.save(path, optimize=True)
    return path


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    try:
        chromium, chromedriver = check(args)
    except Missing as missing:
        print(f"docs_pictures: {missing}", file=sys.stderr)
        return 2
    started = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tfpipe-pictures-") as name:
        tmp = Path(name)
        project, env = make_project(tmp, args.data / ARCHIVE)
        train(project, env)
        page = plots_page(project, env, tmp)
        with mlflow_ui(project, env, tmp / "ui.log") as url, browser(chromium, chromedriver, tmp) as driver:
            written = [*shoot_mlflow(driver, url, project, args.out), shoot_plots(driver, page, args.out)]
    for path in written:
        print(f"wrote {path} ({path.stat().st_size // 1024} KB, {WIDTH}x{HEIGHT})")
    print(f"docs_pictures: {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
