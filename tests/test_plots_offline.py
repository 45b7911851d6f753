"""`dvc plots show` / `dvc plots diff` in a project made from this one draw offline and each plot once.

The project's .dvc/config names .dvc/plots.html as DVC's page (Vega, Vega-Lite and Vega-Embed inline, written by
`tfpipe.plots_page`); dvc.yaml declares the plot files as plain outputs and draws each by one top-level
definition (a file that is also a stage's `plots:` output is drawn a second time, with DVC's default template).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_ui_opens_on_runs import browser  # noqa: F401 - headless Chromium on a fresh profile (a fixture)

from tfpipe import plots_page

ROOT = Path(__file__).resolve().parents[1]
PLOT_IDS = [
    "Loss_per_epoch",
    "Accuracy_per_epoch",
    "Confusion_matrix__test_split_",
    "F1_per_class__test_split_",
]
PNG = (  # a 1x1 PNG: the confusion-matrix picture evaluate draws, as far as DVC is concerned
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
)


def test_the_committed_page_is_the_one_plots_page_writes_and_loads_nothing():
    """.dvc/plots.html is vl-convert's bundle as installed (regenerate: python -m tfpipe.plots_page
    .dvc/plots.html), with DVC's plot placeholder and without `{scripts}`, where DVC puts its CDN tags."""
    page = (ROOT / ".dvc" / plots_page.TEMPLATE_NAME).read_text(encoding="utf-8")
    assert page == plots_page.page(), "stale .dvc/plots.html: python -m tfpipe.plots_page .dvc/plots.html"
    assert "{plot_divs}" in page and "{scripts}" not in page
    assert not re.search(r"<script[^>]*\bsrc\s*=", page, re.IGNORECASE)


def test_a_bad_path_is_one_line_and_exit_2(tmp_path, capsys):
    assert plots_page.main([str(tmp_path / "missing" / "plots.html")]) == 2
    assert capsys.readouterr().err.count("\n") == 1 and not (tmp_path / "missing").exists()


def _project_with_plot_files(tmp_path: Path) -> tuple[Path, dict]:
    """A git + DVC repository with the project's dvc.yaml and .dvc/config (and page), and the four plot files
    in the formats train and evaluate write, two rows each."""
    repo = tmp_path / "project"
    repo.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DVC_")} | {"DVC_NO_ANALYTICS": "1"}
    for cmd in (["git", "init", "-q"], [sys.executable, "-m", "dvc", "init", "-q"]):
        subprocess.run(cmd, cwd=repo, env=env, check=True)
    for name in ("dvc.yaml", "params.yaml", ".dvc/config", f".dvc/{plots_page.TEMPLATE_NAME}"):
        shutil.copy(ROOT / name, repo / name)
    (repo / "plots").mkdir()
    (repo / "metrics").mkdir()
    (repo / "plots" / "history.csv").write_text(
        "epoch,epoch_train_accuracy,epoch_train_loss,val_accuracy,val_loss\n0,0.5,1.1,0.6,1.0\n1,0.7,0.8,0.7,0.9\n"
    )
    (repo / "plots" / "confusion_matrix.csv").write_text("actual,predicted\nblue,blue\nred,blue\n")
    rows = [{"class": c, "precision": 0.5, "recall": 1.0, "f1": 0.7, "support": 1} for c in ("blue", "red")]
    (repo / "metrics" / "eval_per_class.json").write_text(json.dumps(rows))
    (repo / "plots" / "confusion_matrix.png").write_bytes(bytes.fromhex(PNG))
    return repo, env


@pytest.mark.slow  # starts DVC (seconds) and Chromium
def test_dvc_plots_draw_offline_each_plot_once(tmp_path, browser):  # noqa: F811 - the imported fixture
    repo, env = _project_with_plot_files(tmp_path)
    out = repo / "page"
    proc = subprocess.run(
        [sys.executable, "-m", "dvc", "plots", "show", "-o", str(out)],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    html = (out / "index.html").read_text(encoding="utf-8")
    assert not re.search(r"<script[^>]*\bsrc\s*=\s*[\"']?https?:", html, re.IGNORECASE), (
        "a script from the web"
    )
    divs = re.findall(r'<div id = "([^"]+)">', html)
    assert sorted(divs) == sorted(PLOT_IDS), divs  # the four definitions, none drawn again by default
    assert html.count("<p>plots/confusion_matrix.png</p>") == 1
    assert len(re.findall(r'<img src="static/[^"]*confusion_matrix\.png">', html)) == 1

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get((out / "index.html").as_uri())

    def drawn(driver):  # Vega-Embed draws each plot as an SVG inside its div (DVC's specs ask for SVG)
        return all(driver.find_elements(By.CSS_SELECTOR, f"#{plot} svg") for plot in PLOT_IDS)

    WebDriverWait(browser, 120).until(drawn, message="Vega drew no SVG in some plot's div: is Vega inline?")
    browser.save_screenshot(str(tmp_path / "plots.png"))


@pytest.mark.slow  # git and dvc init
def test_a_project_tfpipe_init_makes_draws_its_plots_offline_too(tmp_path):
    from tfpipe import scaffold

    scaffold.init_repositories(tmp_path)
    named = subprocess.run(
        [sys.executable, "-m", "dvc", "config", "plots.html_template"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert named.stdout.strip() == plots_page.TEMPLATE_NAME
    assert (tmp_path / ".dvc" / plots_page.TEMPLATE_NAME).read_text(encoding="utf-8") == plots_page.page()
