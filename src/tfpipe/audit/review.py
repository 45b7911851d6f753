"""Reviewing a dirty run's recorded diff before a re-run applies it: review, then run, in two steps.

A re-run of a dirty run without `--apply-diff` shows the diff with every character that could hide or rewrite
what the terminal shows made visible (C0 and C1 controls but tab and newline: ESC, CR, backspace...; DEL; the
bidirectional overrides, embeddings, isolates and marks; zero-width and line-separator characters; bytes that
are no UTF-8), and its digest: the sha256 of the diff's bytes as recorded. It then stops, in one line naming
`--apply-diff DIGEST`. Given a digest (at least PREFIX hex characters of it), the re-run goes on only when it
is the digest of the diff it would apply, so what runs is what was read, even if the record changed in
between."""

from __future__ import annotations

import hashlib
import re

from tfpipe.audit.common import UserError

PREFIX = 12  # the shortest digest prefix --apply-diff takes
SHOWN = 16  # the prefix the refusal names
_HIDING = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\udc80-\udcff]"
)


def raw(diff: str) -> bytes:
    """The diff's bytes as recorded (`tracking.reading` keeps undecodable bytes as surrogate escapes)."""
    return diff.encode("utf-8", "surrogateescape")


def digest(diff: str) -> str:
    return hashlib.sha256(raw(diff)).hexdigest()


def _escape(match: re.Match) -> str:
    char = match.group()
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # a byte that is no UTF-8
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code <= 0xFF else f"<U+{code:04X}>"


def visible(text: str) -> tuple:
    """(text with every hiding character as an escape, `\\x1b` or `<U+202E>`; how many there were)."""
    return _HIDING.subn(_escape, text)


def show(run_id: str, diff: str, source: str, log) -> None:
    """The diff as the reader must see it, and its digest."""
    text, hidden = visible(diff)
    said = (
        f"{hidden} control or invisible character(s) shown as escapes" if hidden else "no control characters"
    )
    log(f"rerun: run {run_id} was made from a dirty tree; its recorded diff ({source}; {said}):")
    log(text.rstrip("\n"))
    log(f"rerun: the recorded diff's sha256: {digest(diff)}")


def check(run_id: str, diff: str, given, source: str, log) -> None:
    """Refuse, in one line, a re-run of a dirty run unless `given` is the digest of its diff; without a
    digest, show the diff and its digest first (`show`)."""
    if not isinstance(given, str) or not given:
        if log is not None:
            show(run_id, diff, source, log)
        raise UserError(
            f"run {run_id}: made from a dirty tree; review its diff (above), then rerun with "
            f"--apply-diff {digest(diff)[:SHOWN]}"
        )
    wanted = given.strip().lower()
    if not re.fullmatch(f"[0-9a-f]{{{PREFIX},64}}", wanted):
        raise UserError(
            f"--apply-diff {given[:70]!r}: not a digest; give at least {PREFIX} hex characters of the sha256 "
            "the re-run printed without --apply-diff"
        )
    if not digest(diff).startswith(wanted):
        raise UserError(
            f"run {run_id}: --apply-diff {wanted[:SHOWN]} is not the digest of its recorded diff "
            f"({digest(diff)[:SHOWN]}); review the diff again (rerun without --apply-diff) before applying it"
        )
