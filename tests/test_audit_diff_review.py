"""Issue 50, item 6: a dirty run's recorded diff is reviewed, then run, in two commands. `audit RUN --rerun`
shows the diff with every character that could hide a line from the reader made visible (escape sequences, CR,
bidirectional overrides) and its sha256, and stops in one line naming `--apply-diff DIGEST`; only that digest
(a prefix of at least 12 hex characters) lets the re-run apply it; another digest, or the flag alone, is
refused in one line before any worktree exists. A real git + DVC repo and a real SQLite store (the run forged
with MLflow's public API, as anyone with EDIT on a server could), the real command line; no training."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_audit_trust import _audit, _forge, _sh, project  # noqa: F401 - project: a fixture

from tfpipe.audit import review
from tfpipe.audit.trust import gate
from tfpipe.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
# What the terminal would do with the raw bytes: erase the line and return (`\x1b[2K\r`), move up a line
# (`\x1b[1A`), reverse what follows (U+202E): each makes the reader see another line than the one applied.
HIDDEN = "new\x1b[2K\rharmless\x1b[1A\u202eevil\n"
SHOWN = "+new\\x1b[2K\\x0dharmless\\x1b[1A<U+202E>evil"


def _escaping_diff(repo) -> str:
    """A real `git diff` of notes.txt rewritten to HIDDEN, its bytes exactly (CR kept), the repo restored."""
    (repo / "notes.txt").write_bytes(HIDDEN.encode("utf-8"))
    raw = subprocess.run(["git", "diff"], cwd=repo, capture_output=True, check=True).stdout
    _sh(repo, "git", "checkout", "--", ".")
    assert b"\x1b[2K\r" in raw and "\u202e".encode() in raw
    return raw.decode("utf-8")


@pytest.fixture
def dirty(project, tmp_path):  # noqa: F811 - the imported fixture
    """(repo, run id, diff, env): a dirty run whose diff hides a line, a stage that copies notes.txt out, and
    an environment whose TMPDIR shows whether the re-run made its folder."""
    repo, _ = project
    (repo / "dvc.yaml").write_text(f"stages:\n  prepare:\n    cmd: cp notes.txt {tmp_path / 'seen.txt'}\n")
    _sh(repo, "git", "commit", "-qam", "a stage that shows what it read")
    commit = _sh(repo, "git", "rev-parse", "HEAD").strip()
    diff = _escaping_diff(repo)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    return repo, _forge(tmp_path, commit, diff), diff, env


def _nothing_made(repo, tmp_path) -> None:
    assert not (tmp_path / "seen.txt").exists()
    assert list((tmp_path / "scratch").iterdir()) == []  # no re-run folder, so no worktree and no store
    assert len(_sh(repo, "git", "worktree", "list").strip().splitlines()) == 1


@pytest.mark.slow
def test_the_diff_is_shown_with_its_escapes_visible_and_its_digest_then_refused(dirty, tmp_path):
    repo, run_id, diff, env = dirty
    proc = _audit(repo, tmp_path, run_id, env=env)
    assert proc.returncode == 2, proc.stderr
    digest = hashlib.sha256(diff.encode("utf-8")).hexdigest()
    lines = proc.stderr.splitlines()
    assert SHOWN in lines, proc.stderr
    assert not re.search("[\x1b\r\u202e]", proc.stderr), "a raw control character reached the terminal"
    assert "4 control or invisible character(s) shown as escapes" in proc.stderr
    assert f"rerun: the recorded diff's sha256: {digest}" in lines
    assert lines[-1] == (
        f"audit: error: run {run_id}: made from a dirty tree; review its diff (above), then rerun with "
        f"--apply-diff {digest[:16]}"
    )
    _nothing_made(repo, tmp_path)


@pytest.mark.slow
def test_a_digest_that_is_not_the_diffs_is_refused_before_anything_is_made(dirty, tmp_path):
    repo, run_id, diff, env = dirty
    digest = hashlib.sha256(diff.encode("utf-8")).hexdigest()
    wrong = ("0" if digest[0] != "0" else "1") + digest[1:16]
    proc = _audit(repo, tmp_path, run_id, "--apply-diff", wrong, env=env)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"audit: error: run {run_id}: --apply-diff {wrong} is not the digest of its recorded diff "
        f"({digest[:16]}); review the diff again (rerun without --apply-diff) before applying it"
    ], proc.stderr
    _nothing_made(repo, tmp_path)


@pytest.mark.slow
def test_the_right_digest_applies_the_diff_as_recorded(dirty, tmp_path):
    """A 12-character prefix of the digest is enough; the stage reads notes.txt with every byte of the diff
    (the CR and escapes included), and the plan shows the diff with them made visible again."""
    repo, run_id, diff, env = dirty
    digest = hashlib.sha256(diff.encode("utf-8")).hexdigest()
    proc = _audit(repo, tmp_path, run_id, "--apply-diff", digest[:12].upper(), env=env)
    assert (tmp_path / "seen.txt").read_bytes() == HIDDEN.encode("utf-8"), proc.stderr
    assert "rerun: the recorded diff in full:" in proc.stderr and SHOWN in proc.stderr.splitlines()
    assert not re.search("[\x1b\r\u202e]", proc.stderr)


def test_the_flag_alone_names_the_new_form(tmp_path):
    """The form before the review step (`--apply-diff` with no digest) is refused in one line naming the new
    one, before the run or its store is read."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])}
    for flags in (["--apply-diff"], ["--apply-diff", "--allow-diff-code"]):
        cmd = [sys.executable, "-m", "pipeline.audit", "0" * 32, "--rerun", *flags]
        proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip().splitlines() == [
            "audit: error: --apply-diff takes the digest of the diff you reviewed: run `--rerun` without it "
            "to see the diff and its digest, then --rerun --apply-diff DIGEST"
        ]


@pytest.mark.parametrize(
    "text, shown",
    [
        ("a\x1b[2Kb", "a\\x1b[2Kb"),
        ("a\rb\bc\x00d\x7fe", "a\\x0db\\x08c\\x00d\\x7fe"),
        ("c1 \x85 \x9b", "c1 \\x85 \\x9b"),
        ("\u202a\u202b\u202c\u202d\u202e", "<U+202A><U+202B><U+202C><U+202D><U+202E>"),
        ("\u2066\u2069 \u200f \u200b \u2028 \ufeff", "<U+2066><U+2069> <U+200F> <U+200B> <U+2028> <U+FEFF>"),
        ("tab\tand newline\n, ü, é", "tab\tand newline\n, ü, é"),
        (b"bad \xff byte".decode("utf-8", "surrogateescape"), "bad \\xff byte"),
    ],
)
def test_every_hiding_character_is_an_escape_and_nothing_else_is(text, shown):
    assert review.visible(text)[0] == shown


def test_the_gate_takes_a_digest_prefix_of_twelve_characters_or_more(tmp_path):
    """The digest of the bytes as recorded; shorter or non-hex digests are refused in one line, without a
    display (nothing to show the gate called without a log)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _sh(repo, "git", "init", "-q", "-b", "main")
    (repo / "notes.txt").write_text("old\n")
    _sh(repo, "git", "add", "-A")
    _sh(repo, "git", "commit", "-qm", "init")
    commit = _sh(repo, "git", "rev-parse", "HEAD").strip()
    (repo / "notes.txt").write_text("new\n")
    diff = _sh(repo, "git", "diff")
    run = {"tags": {"git.commit": commit, "git.dirty": "true"}, "git_diff": diff}
    digest = hashlib.sha256(diff.encode()).hexdigest()
    for given in (digest, digest[:12], digest[:12].upper()):
        gate("RUN", run, repo, given, None)
    for given, message in (
        (digest[:11], "not a digest; give at least 12 hex characters"),
        ("z" * 16, "not a digest"),
        (None, f"review its diff (above), then rerun with --apply-diff {digest[:16]}"),
        ("f" * 16 if digest[0] != "f" else "e" * 16, "is not the digest of its recorded diff"),
    ):
        with pytest.raises(UserError, match=re.escape(message)) as refused:
            gate("RUN", run, repo, given, None)
        assert "\n" not in str(refused.value)
