"""`check`: what a run recorded (code, data, config, environment) against the project as it is now."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from tfpipe.audit.common import (
    DIFFERS,
    ENV_TAGS,
    MATCH,
    NA,
    Item,
    UserError,
    git_in,
    load_recorded,
    rooted_dict,
    shorten,
    tracking_uri_for,
)


def check(
    run_id: str,
    root,
    uri: Optional[str] = None,
    *,
    present_environment: Optional[dict] = None,
    run: Optional[dict] = None,
) -> list:
    """Compare what run `run_id` recorded with the project at `root` now. `present_environment`
    defaults to `provenance.environment()` (pass another to audit against a different machine)."""
    from tfpipe import provenance
    from tfpipe.audit.configs import check_config, present_config

    root = Path(root).resolve()
    uri = tracking_uri_for(root, uri)
    run = run or load_recorded(run_id, uri)
    present = present_config(
        run, root
    )  # made as the run's was: the params file (+ overrides), or conf/ + overrides
    items = [_check_code(run, root), *_check_data(run, root, present[0]), check_config(run, root, present)]
    env = present_environment or provenance.environment()
    items += _check_environment(run, env)
    return items


# DVC's own bookkeeping (dvc.lock is audited by the dvc.lock.* items; DVC writes .gitignore entries for
# its outputs and may stage both): not code.
BOOKKEEPING = ("dvc.lock", ".gitignore")


def _code_diff(diff: str) -> str:
    """`git diff` text without the sections of DVC bookkeeping files."""
    sections = re.split(r"(?m)^(?=diff --git )", diff)
    keep = [
        sec
        for sec in sections
        if not (sec.startswith("diff --git ") and sec.split("\n", 1)[0].rsplit("/", 1)[-1] in BOOKKEEPING)
    ]
    return "".join(keep)


def _check_code(run: dict, root: Path) -> Item:
    commit = run["tags"].get("git.commit")
    if not commit:
        return Item("code", NA, "", "", "run recorded no git commit")
    if git_in(root, "cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
        return Item("code", DIFFERS, commit[:12], "", f"commit {commit[:12]} is not reachable in {root}")
    from tfpipe.provenance import recorded_diff
    from tfpipe.tracking.secrets import scrub

    head = git_in(root, "rev-parse", "HEAD").stdout.strip()
    # The present tree as the run's diff was recorded: credential files left out, secrets scrubbed.
    diff = _code_diff(scrub(recorded_diff(root, commit)[0] or ""))
    recorded_code = _code_diff(run.get("git_diff") or "")
    dirty = run["tags"].get("git.dirty") in ("true", "True")
    if diff == recorded_code or (not dirty and not diff.strip()):
        return Item(
            "code",
            MATCH,
            commit[:12],
            head[:12],
            "tracked files equal the recorded code"
            + (" (incl. the recorded uncommitted diff)" if dirty else ""),
        )
    files = sorted({line[6:] for line in diff.splitlines() if line.startswith("+++ b/")})
    return Item(
        "code",
        DIFFERS,
        commit[:12],
        head[:12],
        f"tracked files differ from the recorded code: {', '.join(files[:5]) or 'see git diff'}",
    )


def _check_data(run: dict, root: Path, cfg) -> list:
    """The prepared data against the recorded manifest digest (in the present config's data.output_dir, else
    the recorded one), and the data stage's dvc.lock entry."""
    from tfpipe import data, provenance

    items = []
    recorded_cfg = run.get("config") or {}
    out_dir = (recorded_cfg.get("data") or {}).get("output_dir")
    if cfg is not None:
        out_dir = rooted_dict(cfg.to_dict(), root)["data"]["output_dir"]
    digest = run["tags"].get("data.manifest_digest")
    if not digest or not out_dir:
        items.append(Item("data.manifest", NA, "", "", "no manifest digest recorded"))
    else:
        try:
            manifest = data.load_manifest(out_dir)
            data.verify_shards(out_dir, manifest)
            now = data.manifest_digest(out_dir)
        except UserError as exc:
            items.append(Item("data.manifest", DIFFERS, digest[:12], "", str(exc)))
        else:
            if now == digest:
                items.append(
                    Item(
                        "data.manifest", MATCH, digest[:12], now[:12], "manifest and every shard sha256 equal"
                    )
                )
            else:
                items.append(
                    Item(
                        "data.manifest", DIFFERS, digest[:12], now[:12], f"{out_dir}: manifest digest differs"
                    )
                )
    present = provenance.dvc_lock_info(root)["stages"]
    recorded = {k[len("dvc.lock.") :]: v for k, v in run["tags"].items() if k.startswith("dvc.lock.")}
    for stage in ("prepare",):  # the data stage; train/evaluate lock entries are the run's own outputs
        if stage not in recorded and stage not in present:
            continue
        a, b = recorded.get(stage), present.get(stage)
        items.append(
            Item(
                f"dvc.lock.{stage}",
                MATCH if a == b else DIFFERS,
                shorten(a, 12),
                shorten(b, 12),
                "DVC's recorded deps/outs of the data stage " + ("equal" if a == b else "differ"),
            )
        )
    return items


def _check_environment(run: dict, env: dict) -> list:
    tags = run["tags"]
    packages = env.get("packages") or {}
    items = []
    pairs = [("python", tags.get("python_version"), env.get("python"))]
    pairs += [(pkg, tags.get(tag), packages.get(pkg)) for tag, pkg in ENV_TAGS.items()]
    recorded_numpy = (((run.get("provenance") or {}).get("environment") or {}).get("packages") or {}).get(
        "numpy"
    )
    pairs.append(("numpy", recorded_numpy, packages.get("numpy")))
    for name, a, b in pairs:
        if a is None:
            continue
        items.append(
            Item(
                f"env.{name}",
                MATCH if str(a) == str(b) else DIFFERS,
                str(a),
                str(b),
                "" if str(a) == str(b) else "package version differs",
            )
        )
    if run.get("pip_freeze"):
        from tfpipe import provenance

        old = dict(line.split("==", 1) for line in run["pip_freeze"].splitlines() if "==" in line)
        new = env.get("pip_freeze")
        new = dict(
            line.split("==", 1) for line in (new or provenance.pip_freeze()).splitlines() if "==" in line
        )
        changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        detail = ", ".join(f"{k} {old.get(k, '-')} -> {new.get(k, '-')}" for k in changed[:5])
        items.append(
            Item(
                "env.all_packages",
                DIFFERS if changed else MATCH,
                f"{len(old)} pinned",
                f"{len(new)} installed",
                detail + (f" (+{len(changed) - 5} more)" if len(changed) > 5 else ""),
            )
        )
    for key, other in (("cpu", "another CPU model"), ("cpu_flags", "other CPU kernels")):
        if tags.get(key):  # runs recorded before the cpu_flags tag have none
            same = tags[key] == str(env.get(key))
            note = f"{other} here ({env.get(key)}): a re-run may be WITHIN TOLERANCE, not bit-identical"
            note = "" if same else note
            items.append(Item(f"env.{key}", MATCH if same else DIFFERS, tags[key], str(env.get(key)), note))
    return items


# ----------------------------------------------------------------------------- compare
