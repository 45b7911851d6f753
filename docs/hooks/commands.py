"""MkDocs hook (mkdocs.yml `hooks:`): reference/commands.md, generated at build time.

What it knows: each subcommand `tfpipe.cli.USAGE` names, its `--help` (argparse's captured in-process at a fixed
width; Hydra's sweep app in a child process) and the exit codes its module's docstring states (which module
serves which subcommand is `tfpipe.cli.COMMANDS`'s). What it does not: exit codes a
docstring does not state. It imports no TensorFlow, Keras or MLflow."""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import io
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = "100"  # argparse wraps --help to the terminal's width: a fixed one keeps the page the same
IN_SUBPROCESS = {"sweep"}  # Hydra's own app: its --help leaves Hydra's global state set, so in a child
# inspect.getsource of a function parses its whole module: once per object here
_source = functools.lru_cache(maxsize=None)(lambda obj: textwrap.dedent(inspect.getsource(obj)))


def on_files(files, config):
    """Add the commands page (replacing a file of the same name, should docs/ hold one)."""
    from mkdocs.structure.files import File

    uri = "reference/commands.md"
    if (old := files.get_file_from_path(uri)) is not None:
        files.remove(old)
    files.append(File.generated(config, uri, content=commands_reference()))
    return files


def _md(text: str) -> str:
    """Text outside code spans with Markdown's `|`, `<`, `*` and `_` escaped."""
    escape = str.maketrans({"|": r"\|", "<": "&lt;", "*": r"\*", "_": r"\_"})
    return "".join(p if p.startswith("`") else p.translate(escape) for p in re.split(r"(`[^`]*`)", text))


def commands_reference() -> str:
    """The commands page: each subcommand of `tfpipe.cli.USAGE`, its --help and its docstring's exit codes."""
    from tfpipe import cli

    dispatch = _command_modules()
    intro = "This page is generated from each `tfpipe` subcommand's `--help` when the site is built."
    out = [f"# Commands\n\n{intro}\n\n```text\n$ tfpipe --help\n{cli.help_text()}\n```\n"]
    for sub in re.search(r"\{([^}]*)\}", cli.USAGE)[1].split(","):
        out.append(f"## tfpipe {sub}\n\n```text\n{_help(sub).rstrip()}\n```\n")
        module = dispatch[sub]
        if module is not None and (codes := _exit_codes(sub, module)):
            out.append(f"From the docstring of `{module.__name__}`: {_md(codes)}\n")
    return "\n".join(out)


def _help(sub: str) -> str:
    """`tfpipe SUB --help`: argparse's in-process (it prints, raises SystemExit(0)), Hydra's in a child."""
    if sub in IN_SUBPROCESS:
        env, cmd = {**os.environ, "COLUMNS": COLUMNS}, [sys.executable, "-m", "tfpipe", sub, "--help"]
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
            if proc.returncode == 0:
                return proc.stdout
        return f"(not captured when the site was built: run `tfpipe {sub} --help`)"
    from tfpipe import cli

    out, cwd, columns = io.StringIO(), os.getcwd(), os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = COLUMNS
    try:
        os.chdir(ROOT)  # a stage's --help lists the config groups of conf/ in the working directory
        with contextlib.redirect_stdout(out):
            cli.main([sub, "--help"])
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise RuntimeError(f"tfpipe {sub} --help: exit code {exc.code}") from None
    finally:
        os.chdir(cwd)
        os.environ.pop("COLUMNS") if columns is None else os.environ.update(COLUMNS=columns)
    return out.getvalue()


def _command_modules() -> dict:
    """{subcommand: the module whose docstring states its exit codes, or None}: `tfpipe.cli.COMMANDS`'s."""
    from tfpipe import cli

    return {n: importlib.import_module(c.module) if c.module else None for n, c in cli.COMMANDS.items()}


def _exit_codes(sub: str, module) -> str:
    """The docstring's `Exit codes: ...` sentence, else its sentences naming an exit code; a docstring of two
    commands (audit, compare) is read from the paragraph `SUB: ...` to the next such paragraph."""
    paragraphs = (inspect.getdoc(module) or "").split("\n\n")
    if own := [i for i, p in enumerate(paragraphs) if p.startswith(f"{sub}: ")]:
        rest = [i for i in range(own[0] + 1, len(paragraphs)) if re.match(r"[a-z-]+: ", paragraphs[i])]
        paragraphs = paragraphs[own[0] : (rest or [len(paragraphs)])[0]]
    sentences = re.split(r"(?<=\.)\s+(?=[A-Z`])", " ".join(" ".join(paragraphs).split()))
    found = [s for s in sentences if s.startswith("Exit codes")]
    return " ".join(found or [s for s in sentences if re.search(r"\bexit(?: code)? \d", s)])
