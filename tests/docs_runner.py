"""Runs a documentation page's examples the way a reader would: its fenced blocks, in page order, verbatim.

What it knows: the markers a page puts before a block (`<!-- docs-test: ... -->`):
- `run`: a bash block (or a Python one, fed to `python -`) runs with bash, `set -euo pipefail`; it must exit 0.
  The page is one terminal session: a block starts in the folder and with the exported variables the block
  before it left (a reader pastes them into one terminal), the first in the page's start folder.
- `not run: WHY`: the block is shown only; WHY says what it needs that a test machine has not.
- `file: PATH`: the block's text is written to PATH (relative to the start folder), as a reader saves a file.
- `output`: a text block showing what the block before it printed; each shown line must appear, in order, in
  what it printed, where numbers and `...` may be anything and a leading time of day is left out.
A line that starts a server a reader leaves running (`mlflow ui`, `mlflow models serve`, `tfpipe serve`,
`deploy/mlflow/server.sh`, with any `VAR=value` before it) starts in the background in its own process group and
must answer `/health` before the block goes on; the page's port numbers (`--port N`, `MLFLOW_PORT=N`, `:N`, and
`mlflow ui`'s default 5000) are replaced by free ports, so pages run side by side. What it does not know: what a page is about (the tests assert that).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
from pathlib import Path

from test_tracking import _free_port as free_port  # the suite's own

FENCE = re.compile(
    r"(?:<!-- docs-test: (?P<marker>[^>]*?) -->\s*\n)?```(?P<lang>[a-z]*)\n(?P<body>.*?)```",
    re.S,
)
SHELL = ("bash", "sh", "python")
RUN, NOT_RUN, OUTPUT, FILE = "run", "not run: ", "output", "file: "
SERVER = re.compile(
    r"^(?:\w+=\S+\s+)*(?:mlflow ui|mlflow models serve|tfpipe serve|deploy/mlflow/server\.sh)\b"
)
PORT = r"(?:--port |MLFLOW_PORT=)"
WAIT = """import os, sys, time, urllib.request
url, pid, log = sys.argv[1], int(sys.argv[2]), sys.argv[3]
deadline = time.monotonic() + 300
while time.monotonic() < deadline:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            sys.exit(0 if answer.status == 200 else 1)
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.5)
sys.exit(f"{url} did not answer: " + open(log).read()[-3000:])
"""


def blocks(text: str) -> list:
    """(marker or None, language, body) of each fenced block, in page order."""
    return [(m["marker"], m["lang"], m["body"]) for m in FENCE.finditer(text)]


def missing(shown: str, printed: str) -> list:
    """The lines of `shown` not found, in order, in `printed` (numbers and `...` match anything; a leading
    HH:MM:SS is left out)."""
    absent, lines, at = [], printed.splitlines(), 0
    for line in shown.splitlines():
        line = re.sub(r"^\d\d:\d\d:\d\d ", "", line.strip())
        if not line or line == "...":
            continue
        parts = [re.escape(p) for p in re.split(r"\.\.\.|\d+(?:\.\d+)?", line)]
        pattern = re.compile(".*?".join(parts))
        found = next((i for i in range(at, len(lines)) if pattern.search(lines[i])), None)
        if found is None:
            absent.append(line)
        else:
            at = found + 1
    return absent


def with_free_ports(text: str) -> str:
    """The page with each port it names (and `mlflow ui`'s default, 5000) replaced by a free one."""
    ui = re.compile(r"^(mlflow ui\b[^#\n]*?)(\s*(?:#.*)?)$", re.M)
    ports = {int(p) for p in re.findall(PORT + r"(\d{4,5})\b", text)} | ({5000} if ui.search(text) else set())
    free = {port: free_port() for port in ports}
    for port, new in free.items():
        text = re.sub(rf"(?<=--port ){port}\b|(?<=MLFLOW_PORT=){port}\b|(?<=:){port}\b", str(new), text)
    return ui.sub(lambda m: m[0] if "--port" in m[1] else f"{m[1]} --port {free[5000]}{m[2]}", text)


def script(body: str, lang: str, state: Path) -> str:
    """The block as a bash script in the page's session; server lines started in the background and waited for."""
    env, cwd = state / "env", state / "cwd"
    session = (
        f'cd "$(cat {cwd})"; source {env}\ntrap "export -p > {env}; pwd > {cwd}" EXIT\nset -euo pipefail\n'
    )
    if lang == "python":
        return f"{session}python - <<'DOCS_TEST_EOF'\n{body}DOCS_TEST_EOF\n"
    lines = []
    for line in body.replace("\\\n", " ").splitlines():
        if not SERVER.match(line):
            lines.append(line)
            continue
        command = line.split(" #", 1)[0].strip().removesuffix("&").strip()  # it runs in the background anyway
        port = re.search(PORT + r"(\d+)", command)[1]
        log = state / f"server-{port}.log"
        lines += [
            f"setsid bash -c {shlex.quote(command)} > {log} 2>&1 & pid=$!; echo $pid >> {state / 'pids'}",
            f"python {state / 'wait.py'} http://127.0.0.1:{port}/health $pid {log}",
        ]
    return session + "\n".join(lines) + "\n"


def run_page(page: Path, start: Path, env: dict, state: Path) -> list:
    """Each block of `page` done in order from `start`; returns what the run blocks printed (one per block)."""
    state.mkdir(parents=True, exist_ok=True)
    (state / "wait.py").write_text(WAIT)
    (state / "cwd").write_text(str(start))
    (state / "env").write_text("")
    outputs, printed = [], ""
    for marker, lang, body in blocks(with_free_ports(page.read_text())):
        marker = marker or ""
        if marker == OUTPUT:
            absent = missing(body, printed)
            assert not absent, f"{page.name}: shown but not printed: {absent}\n{printed[-3000:]}"
        elif marker.startswith(FILE):
            target = start / marker[len(FILE) :].strip()
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(body)
        elif marker == RUN:
            proc = subprocess.run(  # one stream, as a terminal shows DVC's lines between the stages' logs
                ["bash", "-c", script(body, lang, state)],
                cwd=start,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=900,
            )
            printed = proc.stdout
            assert proc.returncode == 0, f"{page.name}:\n{body}\n{printed[-4000:]}"
            outputs.append(printed)
    return outputs


def stop_servers(state: Path) -> None:
    """Stop every server the page started (each leads its own process group)."""
    pids = state / "pids"
    for pid in pids.read_text().split() if pids.is_file() else []:
        try:
            os.killpg(int(pid), signal.SIGTERM)
        except ProcessLookupError:
            pass
