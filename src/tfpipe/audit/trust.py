"""A run record is untrusted input (anyone with EDIT on the store can change its artifacts): what a --rerun
refuses, re-roots, prints and strips before it executes anything."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path, PurePosixPath

from tfpipe import files
from tfpipe.audit import review
from tfpipe.audit.common import UserError, git_in

ENV_ALLOW = {
    "PATH",
    "HOME",
    "LANG",
    "LANGUAGE",
    "TMPDIR",
    "TZ",
    "USER",
    "TERM",
    "PYTHONPATH",
    "PYTHONHASHSEED",
}
ENV_ALLOW_PREFIXES = ("LC_", "TF_", "OMP_", "KMP_", "ONEDNN_", "DNNL_", "CUDA_VISIBLE_DEVICES")
ENV_SECRET = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|_KEY|AUTH", re.IGNORECASE)
# Files whose edit changes what the rerun executes or where it writes: never taken from a recorded diff.
PROTECTED = ("dvc.yaml", ".dvc/", ".git", ".gitmodules", "MLproject", "pipeline/", "scripts/")
# Paths whose edit the rerun executes as code (Python anywhere, its start-up hooks, packaging): a recorded
# diff touching one runs only with --allow-diff-code, on top of --apply-diff DIGEST.
RUNS_AS_CODE = re.compile(
    r"\.(py|pyc|pyx|pth|so|sh)$|(^|/)(setup\.cfg|pyproject\.toml|MANIFEST\.in|requirements[^/]*)$"
)
# DVC's record of a run's outputs, which `dvc exp run` leaves in every run's diff: the rerun writes its own
# (prepared.lock_recorded_prepare, from the lock recorded at train time), so the diff's edit is left out.
LEFT_OUT = ("dvc.lock",)
# Project folders a recorded absolute path is re-rooted at (the recording clone's root is not recorded).
ANCHORS = ("data", "models", "metrics", "plots", "runs", "checkpoints", "logs", "mlruns")


def stage_env(environ: dict, passed: tuple = ()) -> dict:
    """The rerun's environment: an allowlist (locale, paths, TF/OMP thread settings, oneDNN's kernel settings
    such as ONEDNN_MAX_CPU_ISA) plus names passed explicitly; everything else, credentials included, is
    dropped."""
    out = {}
    for name, value in environ.items():
        allowed = name in ENV_ALLOW or name.startswith(ENV_ALLOW_PREFIXES)
        if name in passed or (allowed and not ENV_SECRET.search(name)):
            out[name] = value
    return out


def _refuse_path(path: str) -> None:
    p = PurePosixPath(path)
    if p.is_absolute() or ".." in p.parts:
        raise UserError(f"rerun: the recorded diff touches {path!r}, outside the tree; refused")
    if any(path == x.rstrip("/") or path.startswith(x) for x in PROTECTED):
        raise UserError(f"rerun: the recorded diff edits {path!r}, which decides what runs; refused")


def _applied_paths(diff: str, root: Path) -> list:
    """Every path `git apply` itself reads from the diff (quoted names unquoted, a/ b/ or any other prefix
    stripped as it strips them): a header the line checks cannot read must not carry a path past them."""
    from tfpipe.provenance import environ_snapshot

    # run at the top: in a subfolder `git apply` leaves out (and does not list) the paths outside it
    top = git_in(root, "rev-parse", "--show-toplevel").stdout.strip() or root
    cmd = ["git", "apply", "--numstat", "-z", "-"]
    env = {**environ_snapshot(), "LC_ALL": "C"}
    proc = subprocess.run(cmd, cwd=top, input=review.raw(diff), env=env, capture_output=True, timeout=60)
    if proc.returncode != 0:
        first = (proc.stderr.decode("utf-8", "replace").strip().splitlines() or ["no message"])[0]
        raise UserError(f"rerun: the recorded diff is not a patch git can read ({first[:300]}); refused")
    paths, fields = [], iter(proc.stdout.decode("utf-8", "surrogateescape").split("\0"))
    for field in fields:  # "ADDED\tDELETED\tPATH", or "ADDED\tDELETED\t" then the two names of a rename
        if field:
            path = field.split("\t", 2)[-1]
            paths += [path] if path else [next(fields, ""), next(fields, "")]
    return paths


def check_diff(diff: str, root: Path) -> list:
    """One-line refusal of a recorded diff with symlinks, mode changes, renames, copies, binaries or paths
    that leave the tree or edit the pipeline definition (as written, and as `git apply` in `root` reads them);
    the paths `git apply` reads from it."""
    path = "?"
    for line in diff.splitlines():
        m = re.match(r"diff --git a/(.*) b/(.*)$", line)
        if m:
            path = m.group(2)
            if m.group(1) != path:
                raise UserError(
                    f"rerun: the recorded diff renames or copies {m.group(1)!r} to {path!r}; refused"
                )
            _refuse_path(path)
        elif line.startswith("diff --git "):  # a quoted name: named as written, checked as git reads it
            path = line[len("diff --git ") :]
        elif line.startswith(("+++ b/", "--- a/")):
            _refuse_path(line[6:])
        elif line.split()[-1:] == ["120000"] and line.startswith(
            ("new file mode", "deleted file mode", "index ", "new mode")
        ):  # the mode is the last word (an index line's hashes may contain "120000")
            raise UserError(f"rerun: the recorded diff makes {path!r} a symlink; refused")
        elif line.startswith(("old mode", "new mode")):
            raise UserError(f"rerun: the recorded diff changes the mode of {path!r}; refused")
        elif line.startswith(("rename ", "copy ", "similarity index")):
            raise UserError(f"rerun: the recorded diff renames or copies {path!r}; refused")
        elif line.startswith(("GIT binary patch", "Binary files")):
            raise UserError(f"rerun: the recorded diff has a binary patch for {path!r}; refused")
    applied = _applied_paths(diff, root)
    for path in applied:
        _refuse_path(path)
    return applied


def gate(
    run_id: str, run: dict, root: Path, apply_diff, trusted_ref, allow_code: bool = False, log=None
) -> None:
    """Refuse, before any worktree exists, a rerun the record does not justify: among them a commit that is
    not on `trusted_ref` (None: the clone's default branch), since the rerun executes its code, a diff whose
    digest `apply_diff` is not (`review.check`: without one, the diff is shown to `log` with its digest), and
    a diff that edits code without `allow_code`."""
    diff, commit = run.get("git_diff"), run["tags"]["git.commit"]
    if diff and str(run["tags"].get("git.dirty", "")).lower() == "false":
        raise UserError(f"run {run_id}: tagged git.dirty=false but carries a recorded diff; refused")
    if diff:
        applied = check_diff(diff, root)  # what no review lets through is refused before anything is shown
        source = run.get("diff_source", "the run's provenance/git_diff.patch")
        review.check(run_id, diff, apply_diff, source, log)
        code = [path for path in applied if RUNS_AS_CODE.search(path)]
        if code and not allow_code:
            raise UserError(
                f"run {run_id}: its recorded diff edits code the rerun would execute ({', '.join(code[:5])}); "
                f"read it ({source}), then add --allow-diff-code to run it"
            )
    ref = trusted_ref or default_ref(root)
    if git_in(root, "merge-base", "--is-ancestor", commit, ref).returncode != 0:
        if trusted_ref:
            raise UserError(f"run {run_id}: commit {commit[:12]} is not an ancestor of --trusted-ref {ref}")
        raise UserError(
            f"run {run_id}: commit {commit[:12]} is not on {ref}, this clone's default branch; "
            "re-run it only if you trust it: --trusted-ref REF (a ref holding the commit)"
        )


def default_ref(root: Path) -> str:
    """The clone's default branch: origin's HEAD (what `git clone` set), else the checked-out branch or
    commit."""
    origin = git_in(root, "symbolic-ref", "-q", "--short", "refs/remotes/origin/HEAD").stdout.strip()
    return origin or git_in(root, "symbolic-ref", "-q", "--short", "HEAD").stdout.strip() or "HEAD"


def _apply(wt: Path, *args: str) -> subprocess.CompletedProcess:
    return git_in(wt, "apply", *[f"--exclude={path}" for path in LEFT_OUT], *args)


def apply_diff(wt: Path, patch: Path, commit: str) -> None:
    """`git apply --check`, then apply (LEFT_OUT left out); either failing is one-line bad input."""
    for args in (("--check", str(patch)), (str(patch),)):
        proc = _apply(wt, *args)
        if proc.returncode != 0:  # re-running without it would audit other code than the run's
            first = (proc.stderr.strip().splitlines() or ["no message"])[0]
            raise UserError(
                f"rerun: the run's recorded git diff does not apply at {commit[:12]} ({first[:300]})"
            )


def print_plan(wt: Path, commit: str, patch, log) -> None:
    """What the rerun is about to execute: the commit, the diff's stat and the worktree's stage commands."""
    import yaml

    log(f"rerun: executes commit {commit}")
    if patch is not None:
        stat = review.visible(_apply(wt, "--stat", str(patch)).stdout.rstrip())[0]
        log("rerun: with the recorded diff:\n" + stat)
        text = patch.read_bytes().decode("utf-8", "surrogateescape")
        log("rerun: the recorded diff in full:\n" + review.visible(text)[0].rstrip())
        left_out = [p for p in _applied_paths(text, wt) if p in LEFT_OUT]
        if left_out:
            log(
                f"rerun: the diff's {', '.join(left_out)} left out: DVC's record of the outputs, written anew"
            )
    dvc_yaml = wt / "dvc.yaml"
    stages = (yaml.safe_load(dvc_yaml.read_text()) or {}).get("stages") or {} if dvc_yaml.is_file() else {}
    for name, stage in stages.items():
        log(f"rerun: stage {name}: {json.dumps(stage.get('cmd'))}")


def _rerooted(value: str, root: Path, wt: Path):
    """`value` as a worktree path: relative to the auditor's root, or from a project anchor folder on."""
    p = Path(value)
    try:
        return str(p.relative_to(root))
    except ValueError:
        pass
    for i, part in enumerate(p.parts):
        if part in ANCHORS:
            return str(Path(*p.parts[i:]))
    return None


PATH_NAMES = (
    "path",
    "dir",
    "file",
    "reference",
    "auto_reference",
)  # keys that hold paths, besides *_dir/_path/_file


def reroot(cfg, root: Path, wt: Path, key: str = ""):
    """Every absolute path in the recorded config re-rooted into the worktree, every relative one checked to
    stay in it; one that cannot be is refused (the read-only input data.path outside every project is kept: it
    is only read)."""
    if isinstance(cfg, dict):
        return {k: reroot(v, root, wt, f"{key}.{k}" if key else k) for k, v in cfg.items()}
    if isinstance(cfg, list):
        return [reroot(v, root, wt, key) for v in cfg]
    name = key.rsplit(".", 1)[-1]
    path_like = name in PATH_NAMES or name.endswith(("_dir", "_path", "_file"))
    if not path_like or not isinstance(cfg, str) or "://" in cfg:
        return cfg  # e.g. strategy.device=/cpu:0 is not a path
    if not os.path.isabs(cfg):  # relative: the stages resolve it in the worktree, where it must stay
        if key != "data.path" and not files.within(wt / cfg, wt, resolve=True):
            raise UserError(f"rerun: recorded {key}={cfg} points outside the worktree; refused")
        return cfg
    new = _rerooted(cfg, root, wt)
    if new is None and key == "data.path":
        return cfg
    if new is None or not files.within(wt / new, wt, resolve=True):
        raise UserError(f"rerun: recorded {key}={cfg} cannot be re-rooted into the worktree; refused")
    return new


def write_inside(wt: Path, rel: str, text: str) -> None:
    """Write a worktree file, refusing a symlink or a path that resolves outside the worktree."""
    target = wt / rel
    if target.is_symlink() or not files.within(target, wt, resolve=True):
        raise UserError(f"rerun: {rel} in the worktree points outside it; refused")
    target.write_text(text, encoding="utf-8")


def _named_code(cfg: dict) -> list:
    """(key, target) of every import path a config names: train.hooks[i]._target_, model.builder,
    model.fit."""
    hooks = (cfg.get("train") or {}).get("hooks") or []
    named = [
        (f"train.hooks[{i}]._target_", e.get("_target_") if isinstance(e, dict) else e)
        for i, e in enumerate(hooks)
    ]
    model = cfg.get("model") or {}
    return named + [(f"model.{key}", model[key]) for key in ("builder", "fit") if model.get(key)]


def check_named_code(cfg: dict, wt: Path) -> None:
    """The import paths a recorded config names (`train.hooks`, `model.builder`, `model.fit`) may name only
    code of the run's commit (a module file in the worktree, at its top or under src/): a re-run runs that
    commit's code, never a callable a run record names elsewhere."""
    for key, target in _named_code(cfg):
        module = str(target or "").replace(":", ".").rpartition(".")[0].replace(".", "/")
        found = [wt / base / f"{module}{end}" for base in ("", "src") for end in (".py", "/__init__.py")]
        if not module or not any(f.is_file() and files.within(f, wt, resolve=True) for f in found):
            raise UserError(
                f"rerun: recorded {key}={target!r} is no module of the run's commit "
                f"({module or '?'}.py is not in it); a re-run calls only the commit's own code; refused"
            )
