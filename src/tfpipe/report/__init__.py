"""Reports on recorded runs for a team's review (`tfpipe report`), from the MLflow store alone: no TensorFlow.

    groups = group.group_runs(runs)                       # runs (tracking.history.RunHistory), the base first
    title, blocks = document.build(groups, "test_accuracy", store)
    files = report.files(title, blocks)                   # report.md, report.html, the pictures
    report.check_target(out); report.write_folder(out, files)

Modules: `group` (runs as seeds of configurations; the statistics), `figures` (the pictures), `document` (the
sections), `render` (Markdown and the self-contained HTML page). This module writes the folder: whole, under a
temporary name renamed into place, so a report half written (a full disk, Ctrl-C) never looks like one; a folder
that holds other things than a report is never replaced.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tfpipe.errors import UserError

MARKDOWN, HTML = "report.md", "report.html"


def files(title: str, blocks: list) -> dict:
    """{file name: bytes} of a report: the Markdown, the HTML page, the pictures the Markdown shows."""
    from tfpipe.report import document, render

    out = {MARKDOWN: render.markdown(title, blocks).encode(), HTML: render.html(title, blocks).encode()}
    return {**out, **document.pictures(blocks)}


def check_target(out: Path) -> None:
    """Refuse (UserError) a target that is a file, or a folder holding anything but an earlier report."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: is a file, not a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / MARKDOWN).is_file():
        raise UserError(f"--out {out}: holds other files than a report; name a new or empty folder")


def write_folder(out: Path, contents: dict) -> None:
    """The files into `out`: written in a temporary sibling folder, which then replaces `out` (an earlier report)."""
    out = Path(out)
    check_target(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.parent / f".{out.name}.tmp-{os.getpid()}"
    old = out.parent / f".{out.name}.old-{os.getpid()}"
    try:
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        for name, data in contents.items():
            (staging / name).write_bytes(data)
        if out.exists():
            os.replace(out, old)
        os.replace(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if old.exists() and not out.exists():  # the new one did not take its place: the earlier one back
            os.replace(old, out)
        shutil.rmtree(old, ignore_errors=True)
