"""Runs a documentation page's examples the way a reader would: its fenced blocks, in page order, verbatim.

What it knows: the markers a page puts before a block (`<!-- docs-test: ... -->`):
- `run`: a bash block (or a Python one, fed to `python -`) runs with bash, `set -euo pipefail` and
  `shopt -s inherit_errexit`; it must exit 0. Stricter than errexit alone, a failure that bash lets pass fails
  the block too (`run_block`): a top-level command that ends with a non-zero status (`false && echo hi`, whose
  `false` errexit ignores, or `! cmd`), and a failing command inside `$(...)` whose status bash drops (`echo
  "$(false)"`), or in `<(...)` or a `( ... ) &`. What a reader writes to allow a failure still passes: `cmd ||
  true`, `if cmd; then ...; fi`, `out=$(cmd) || ...`.
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


# After each top-level command of a block: its status must be 0 (errexit does not stop on `false && echo hi`,
# nor on `! cmd`), and no command substitution (or other subshell) may have failed: `echo "$(false)"` drops
# the status of `false`, so the ERR trap, inherited by subshells (`set -E`), leaves a mark for this check to
# find. ERR is not raised where bash ignores a failure (`cmd || true`, `if cmd`), in subshells too. `set +e`
# turns the check off.
CHECK = "__docs_ok"
CHECK_FUNCTION = """__docs_ok() {
  local status=$?
  if [[ -e "$__docs_mark" ]]; then
    echo "docs-test: a command inside \\$(...), <(...) or a subshell failed (the line's status hid it)" >&2
    exit 1
  fi
  if (( status )) && [[ $- == *e* ]]; then
    echo "docs-test: the command above ended with status $status (a command before && or a ! failed)" >&2
    exit "$status"
  fi
}
"""


def top_level_commands(lines: list) -> list:
    """`lines` grouped into the block's top-level commands (an `if ... fi`, a here-document with its body, a
    quoted string over lines: one each), as bash itself parses them (`bash -n`); a group bash cannot parse
    ends the block as it is, for the run to report."""
    groups, pending = [], []
    for line in lines:
        pending.append(line)
        check = subprocess.run(["bash", "-n", "-c", "\n".join(pending)], capture_output=True, text=True)
        if check.returncode == 0 and not check.stderr:  # an open here-document is only a warning
            groups.append(pending)
            pending = []
    return groups + ([pending] if pending else [])


def _checked(lines: list) -> list:
    """`lines` with the CHECK after each top-level command (not after blank lines or comments)."""
    out = []
    for group in top_level_commands(lines):
        out += group
        if any(line.strip() and not line.strip().startswith("#") for line in group):
            out.append(CHECK)
    return out


def script(body: str, lang: str, state: Path) -> str:
    """The block as a bash script in the page's session; server lines started in the background and waited
    for; the CHECK after each top-level command."""
    env, cwd, mark = state / "env", state / "cwd", state / "failed-in-a-subshell"
    session = (
        f'cd "$(cat {cwd})"; source {env}\ntrap "export -p > {env}; pwd > {cwd}" EXIT\nset -Eeuo pipefail\n'
        f'shopt -s inherit_errexit\n__docs_mark={shlex.quote(str(mark))}; rm -f "$__docs_mark"\n'
        f"trap '[[ $BASHPID == $$ ]] || : > \"$__docs_mark\"' ERR\n{CHECK_FUNCTION}"
    )
    if lang == "python":
        return f"{session}python - <<'DOCS_TEST_EOF'\n{body}DOCS_TEST_EOF\n{CHECK}\n"
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
    return session + "\n".join(_checked(lines)) + "\n"


def new_session(state: Path, start: Path) -> None:
    """A fresh terminal session in `state`: it starts in `start` with no exported variables of its own."""
    state.mkdir(parents=True, exist_ok=True)
    (state / "wait.py").write_text(WAIT)
    (state / "cwd").write_text(str(start))
    (state / "env").write_text("")


def run_block(body: str, lang: str, state: Path, start: Path, env: dict) -> tuple:
    """One `run` block in the session `state` (see `new_session`): (exit status, what it printed, both streams
    as one, as a terminal shows DVC's lines between the stages' logs)."""
    proc = subprocess.run(
        ["bash", "-c", script(body, lang, state)],
        cwd=start,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=900,
    )
    return proc.returncode, proc.stdout


def run_page(page: Path, start: Path, env: dict, state: Path) -> list:
    """Each block of `page` done in order from `start`; returns what the run blocks printed (one per
    block)."""
    new_session(state, start)
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
            status, printed = run_block(body, lang, state, start, env)
            assert status == 0, f"{page.name}:\n{body}\n{printed[-4000:]}"
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
