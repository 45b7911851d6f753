"""The documentation's pictures (issue 36, item 3): every PNG in docs/images is shown by some page, every picture a
page shows exists, each is a real PNG of the window size scripts/docs_pictures.py screenshots at and well under
500 KB, and each page showing one says how to regenerate it. The script's bad input (an --out that is a file, no
CIFAR-10 archive, no Chromium) is one line and exit code 2. The script itself is not run here: it trains two runs
and takes about three minutes (`python scripts/docs_pictures.py`, then look at the pictures)."""

from __future__ import annotations

import importlib.util
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "docs" / "images"
SCRIPT = ROOT / "scripts" / "docs_pictures.py"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# drawn when the site builds, never in git: docs/hooks/architecture.py (tests/test_docs_architecture.py)
BUILT = {(IMAGES / "architecture.svg").resolve()}
# ![alt](path) (the alt may span lines) and <img src="path">
PICTURE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)|<img[^>]*\bsrc=\"([^\"]+)\"")


def _script():
    spec = importlib.util.spec_from_file_location("docs_pictures", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _shown() -> dict:
    """{picture file: pages showing it} for the local pictures the README and the docs pages show."""
    shown: dict = {}
    for page in PAGES:
        for match in PICTURE.finditer(page.read_text(encoding="utf-8")):
            target = match[1] or match[2]
            if "://" not in target and (page.parent / target).resolve() not in BUILT:
                shown.setdefault((page.parent / target).resolve(), []).append(page)
    return shown


def _png_size(path: Path) -> tuple:
    """(width, height) from the PNG signature and IHDR chunk, read by hand."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", f"{path}: not a PNG"
    return struct.unpack(">II", head[16:24])


def test_every_picture_in_docs_images_is_shown_and_every_shown_picture_exists():
    shown = _shown()
    files = sorted(IMAGES.iterdir()) if IMAGES.is_dir() else []
    assert files, f"{IMAGES}: no pictures"
    for path in files:
        assert path.resolve() in shown, (
            f"{path.relative_to(ROOT)}: shown by no page (README.md, docs/**/*.md)"
        )
    missing = {str(p): [str(page.relative_to(ROOT)) for page in pages] for p, pages in shown.items()}
    missing = {p: pages for p, pages in missing.items() if not Path(p).is_file()}
    assert not missing, f"pictures shown but not found: {missing}"


def test_each_picture_is_a_png_of_the_scripts_window_size_and_small():
    script = _script()
    for path in sorted(IMAGES.glob("*")):
        assert path.suffix == ".png", f"{path.name}: the script writes PNGs only"
        assert _png_size(path) == (script.WIDTH, script.HEIGHT), path.name
        assert path.stat().st_size < 500_000, f"{path.name}: {path.stat().st_size} bytes"


def test_each_page_with_a_picture_says_how_to_regenerate_it():
    for picture, pages in _shown().items():
        if picture.parent == IMAGES.resolve():
            for page in pages:
                if (
                    page.name != "README.md"
                ):  # the README links to the docs; its picture is regenerated the same way
                    assert "python scripts/docs_pictures.py" in page.read_text(), page.relative_to(ROOT)


BAD_INPUT = {  # case: what its one line says
    "out_is_a_file": "is a file; give a folder for the PNGs",
    "no_archive": "cifar10-images.tar.gz: not found; it is in ../shared/datasets (or pass --data DIR)",
    "no_chromium": "apt-get install -y chromium chromium-driver",
}


@pytest.mark.parametrize("case", BAD_INPUT)
def test_bad_input_is_one_line_and_exit_code_2(case, tmp_path, monkeypatch, capsys):
    script = _script()
    data = tmp_path / "data"
    data.mkdir()
    (data / script.ARCHIVE).write_bytes(b"")  # checked for existence only: nothing runs past the checks
    args = ["--out", str(tmp_path / "out"), "--data", str(data)]
    if case == "out_is_a_file":
        (tmp_path / "file").write_text("x")
        args[1] = str(tmp_path / "file")
    elif case == "no_archive":
        args[3] = str(tmp_path / "empty")
    else:
        monkeypatch.setattr(script.shutil, "which", lambda name: None)
    assert script.main(args) == 2
    out, err = capsys.readouterr()
    assert (
        out == "" and err.count("\n") == 1 and err.startswith("docs_pictures: ") and BAD_INPUT[case] in err
    ), err
    assert not (tmp_path / "out").exists()  # nothing written


@pytest.mark.slow  # a fresh interpreter
def test_the_script_exits_2_as_a_process_and_its_help_says_what_it_does(tmp_path):
    (tmp_path / "file").write_text("x")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path / "file")], capture_output=True, text=True
    )
    assert proc.returncode == 2 and proc.stdout == "" and len(proc.stderr.splitlines()) == 1, proc
    help_text = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True)
    assert help_text.returncode == 0
    assert "mlflow-compare.png" in help_text.stdout and "--data" in help_text.stdout
