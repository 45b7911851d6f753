"""The documentation site (issue 36): `mkdocs build --strict` passes (a broken link, a page left out of the
navigation or a generated reference that fails is an error), the README stays short and links only to pages that
exist, and a newcomer's three questions (own model, a config key's meaning, why an audit said DIFFERS) each land
on one page of the navigation."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _nav_pages(nav) -> list:
    """Every page file the mkdocs.yml navigation names."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in _nav_pages(value)]
    return [page for item in nav for page in _nav_pages(item)]


def _nav() -> list:
    return _nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])


@pytest.mark.slow  # starts a process
def test_the_site_builds_strictly(tmp_path):
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")]
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's notice of its end of life (May 2027)
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "WARNING -" not in proc.stderr, proc.stderr[-3000:]  # --strict fails on them too
    for page in ("reference/config/index.html", "reference/commands/index.html", "reference/api/index.html"):
        assert (tmp_path / "site" / page).is_file(), page


def test_every_page_is_in_the_navigation_and_every_nav_entry_exists():
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    pages = {p for p in pages if not p.startswith("hooks/")}
    generated = {"reference/config.md", "reference/commands.md", "reference/exit-codes.md"}  # docs/hooks
    assert set(_nav()) == pages | generated


def test_the_readme_is_short_and_its_links_resolve():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < 150
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    assert links and all((ROOT / link).is_file() for link in links if "://" not in link), links


def test_a_newcomers_three_questions_each_land_on_one_page():
    nav = _nav()
    own_model = ROOT / "docs" / "tutorials" / "own-model.md"
    assert "tutorials/own-model.md" in nav and "builder: my_project.models:build" in own_model.read_text()
    assert (
        "reference/config.md" in nav
    )  # generated: every key with its meaning (tests/test_docs_reference.py)
    audit = (ROOT / "docs" / "how-to" / "audit.md").read_text()
    assert "how-to/audit.md" in nav and "DIFFERS" in audit
