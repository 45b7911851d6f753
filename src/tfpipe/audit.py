"""Reproducibility audits of recorded MLflow runs: check, rerun, compare.

    items = audit.check(run_id, root)                # recorded vs present: code, data, config, environment
    result = audit.rerun(run_id, root, tolerance=0)  # re-execute at the recorded commit, compare outcomes
    rows = audit.compare(run_a, run_b, uri)          # what differs between two runs

Runs are read through `tfpipe.tracking.reading` (this module never imports mlflow). Each check
item is an `Item(name, status, recorded, present, detail)` with status "match", "differs" or
"n/a" (not recorded on the run and not present either); `ok(items)` is True when none differs.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

from tfpipe.errors import UserError

MATCH, DIFFERS, NA = "match", "differs", "n/a"
REPRODUCED, WITHIN_TOLERANCE, DIFFERS_VERDICT = "REPRODUCED", "WITHIN TOLERANCE", "DIFFERS"
# Wall-clock metrics differ on every run; they are never compared.
TIMING_MARKERS = ("seconds", "per_sec")
# environment: tag on the run -> key of provenance.package_versions()
ENV_TAGS = {"tf_version": "tensorflow", "keras_version": "keras", "mlflow_version": "mlflow",
            "dvc_version": "dvc", "tfds_version": "tensorflow_datasets", "hydra_version": "hydra"}


@dataclasses.dataclass
class Item:
    name: str
    status: str
    recorded: str = ""
    present: str = ""
    detail: str = ""


def ok(items) -> bool:
    return all(item.status != DIFFERS for item in items)


def _short(value, n: int = 40) -> str:
    text = "" if value is None else str(value)
    return text if len(text) <= n else text[: n - 3] + "..."


def format_table(items) -> str:
    rows = [("item", "status", "recorded", "present", "detail")]
    rows += [(i.name, i.status, _short(i.recorded, 24), _short(i.present, 24), i.detail) for i in items]
    widths = [max(len(r[c]) for r in rows) for c in range(4)]
    return "\n".join(
        "  ".join(r[c].ljust(widths[c]) for c in range(4)) + ("  " + r[4] if r[4] else "") for r in rows
    ).rstrip() + "\n"


# ----------------------------------------------------------------------------- helpers


def tracking_uri_for(root: Path, uri: Optional[str] = None) -> str:
    """--tracking-uri, else MLFLOW_TRACKING_URI, else the project's params.yaml tracking config."""
    from tfpipe import config
    from tfpipe.tracking import resolve_tracking_uri

    if uri:
        return uri
    params = root / "params.yaml"
    tracking_cfg = config.load_params(params).tracking if params.is_file() else config.TrackingConfig()
    return resolve_tracking_uri(tracking_cfg, root)


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"})


def _rooted_dict(cfg_dict: dict, root: Path) -> dict:
    out = json.loads(json.dumps(cfg_dict))
    for key in ("path", "output_dir"):
        value = (out.get("data") or {}).get(key)
        if value and not os.path.isabs(value):
            out["data"][key] = str(root / value)
    return out


def _relative_dict(cfg_dict: dict, root: Path) -> dict:
    """Data paths under `root` made project-relative again (the recorded config holds absolute ones)."""
    out = json.loads(json.dumps(cfg_dict))
    for key in ("path", "output_dir"):
        value = (out.get("data") or {}).get(key)
        if value and os.path.isabs(value):
            try:
                out["data"][key] = str(Path(value).relative_to(root))
            except ValueError:
                pass
    return out


def _load(run_id: str, uri: str) -> dict:
    from tfpipe.tracking import reading

    return reading.load_run(uri, run_id)


# ----------------------------------------------------------------------------- check


def check(run_id: str, root, uri: Optional[str] = None, *, present_environment: Optional[dict] = None,
          run: Optional[dict] = None) -> list:
    """Compare what run `run_id` recorded with the project at `root` now. `present_environment`
    defaults to `provenance.environment()` (pass another to audit against a different machine)."""
    from tfpipe import provenance

    root = Path(root).resolve()
    uri = tracking_uri_for(root, uri)
    run = run or _load(run_id, uri)
    items = [_check_code(run, root), *_check_data(run, root), _check_config(run, root)]
    env = present_environment or provenance.environment()
    items += _check_environment(run, env)
    return items


# DVC's own bookkeeping (dvc.lock is audited by the dvc.lock.* items; DVC writes .gitignore entries for
# its outputs and may stage both): not code.
BOOKKEEPING = ("dvc.lock", ".gitignore")


def _code_diff(diff: str) -> str:
    """`git diff` text without the sections of DVC bookkeeping files."""
    sections = re.split(r"(?m)^(?=diff --git )", diff)
    keep = [sec for sec in sections
            if not (sec.startswith("diff --git ") and sec.split("\n", 1)[0].rsplit("/", 1)[-1] in BOOKKEEPING)]
    return "".join(keep)


def _check_code(run: dict, root: Path) -> Item:
    commit = run["tags"].get("git.commit")
    if not commit:
        return Item("code", NA, "", "", "run recorded no git commit")
    if _git(root, "cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
        return Item("code", DIFFERS, commit[:12], "", f"commit {commit[:12]} is not reachable in {root}")
    head = _git(root, "rev-parse", "HEAD").stdout.strip()
    diff = _code_diff(_git(root, "diff", "--no-color", "--no-ext-diff", commit).stdout)
    recorded_diff = _code_diff(run.get("git_diff") or "")
    dirty = run["tags"].get("git.dirty") in ("true", "True")
    if diff == recorded_diff or (not dirty and not diff.strip()):
        return Item("code", MATCH, commit[:12], head[:12], "tracked files equal the recorded code"
                    + (" (incl. the recorded uncommitted diff)" if dirty else ""))
    files = sorted({line[6:] for line in diff.splitlines() if line.startswith("+++ b/")})
    return Item("code", DIFFERS, commit[:12], head[:12],
                f"tracked files differ from the recorded code: {', '.join(files[:5]) or 'see git diff'}")


def _current_cfg(root: Path):
    from tfpipe import config

    params = root / "params.yaml"
    if not params.is_file():
        return None
    try:
        return config.load_params(params)
    except UserError:
        return None


def _check_data(run: dict, root: Path) -> list:
    from tfpipe import data, provenance

    items = []
    recorded_cfg = run.get("config") or {}
    out_dir = (recorded_cfg.get("data") or {}).get("output_dir")
    cfg = _current_cfg(root)
    if cfg is not None:
        out_dir = _rooted_dict(cfg.to_dict(), root)["data"]["output_dir"]
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
                items.append(Item("data.manifest", MATCH, digest[:12], now[:12], "manifest and every shard sha256 equal"))
            else:
                items.append(Item("data.manifest", DIFFERS, digest[:12], now[:12], f"{out_dir}: manifest digest differs"))
    present = provenance.dvc_lock_info(root)["stages"]
    recorded = {k[len("dvc.lock."):]: v for k, v in run["tags"].items() if k.startswith("dvc.lock.")}
    for stage in ("prepare",):  # the data stage; train/evaluate lock entries are the run's own outputs
        if stage not in recorded and stage not in present:
            continue
        a, b = recorded.get(stage), present.get(stage)
        items.append(Item(f"dvc.lock.{stage}", MATCH if a == b else DIFFERS, _short(a, 12), _short(b, 12),
                          "DVC's recorded deps/outs of the data stage " + ("equal" if a == b else "differ")))
    return items


def _check_config(run: dict, root: Path) -> Item:
    from tfpipe.config import flatten

    recorded = run.get("config")
    cfg = _current_cfg(root)
    if recorded is None:
        return Item("config", NA, "", "", "no config/resolved.yaml on the run")
    if cfg is None:
        return Item("config", DIFFERS, "resolved.yaml", "", f"{root / 'params.yaml'} missing or invalid")
    a = flatten(_rooted_dict(recorded, root))
    b = flatten(_rooted_dict(cfg.to_dict(), root))
    changed = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    if not changed:
        return Item("config", MATCH, "resolved.yaml", "params.yaml", f"{len(a)} values equal")
    detail = "; ".join(f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in changed[:4])
    return Item("config", DIFFERS, "resolved.yaml", "params.yaml", detail + (f" (+{len(changed) - 4} more)" if len(changed) > 4 else ""))


def _check_environment(run: dict, env: dict) -> list:
    tags = run["tags"]
    packages = env.get("packages") or {}
    items = []
    pairs = [("python", tags.get("python_version"), env.get("python"))]
    pairs += [(pkg, tags.get(tag), packages.get(pkg)) for tag, pkg in ENV_TAGS.items()]
    recorded_numpy = (((run.get("provenance") or {}).get("environment") or {}).get("packages") or {}).get("numpy")
    pairs.append(("numpy", recorded_numpy, packages.get("numpy")))
    for name, a, b in pairs:
        if a is None:
            continue
        items.append(Item(f"env.{name}", MATCH if str(a) == str(b) else DIFFERS, str(a), str(b),
                          "" if str(a) == str(b) else "package version differs"))
    if run.get("pip_freeze"):
        from tfpipe import provenance

        old = dict(line.split("==", 1) for line in run["pip_freeze"].splitlines() if "==" in line)
        new = env.get("pip_freeze")
        new = dict(line.split("==", 1) for line in (new or provenance.pip_freeze()).splitlines() if "==" in line)
        changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        detail = ", ".join(f"{k} {old.get(k, '-')} -> {new.get(k, '-')}" for k in changed[:5])
        items.append(Item("env.all_packages", DIFFERS if changed else MATCH, f"{len(old)} pinned", f"{len(new)} installed",
                          detail + (f" (+{len(changed) - 5} more)" if len(changed) > 5 else "")))
    if tags.get("cpu"):
        same = tags["cpu"] == str(env.get("cpu"))
        items.append(Item("env.cpu", MATCH if same else DIFFERS, tags["cpu"], str(env.get("cpu")),
                          "" if same else "another CPU model: expect WITHIN TOLERANCE, not bit-identical"))
    return items


# ----------------------------------------------------------------------------- compare


def _comparable_metrics(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if not any(m in k for m in TIMING_MARKERS)}


def compare_runs(a: dict, b: dict) -> list:
    """Rows (section, key, value_a, value_b) for every differing param, tag group and metric."""
    rows = []
    for key in sorted(set(a["params"]) | set(b["params"])):
        if a["params"].get(key) != b["params"].get(key):
            rows.append(("config", key, a["params"].get(key), b["params"].get(key)))
    sections = (("code", ("git.",)), ("data", ("data.", "dvc.lock.")),
                ("environment", ("python_version", *ENV_TAGS, "cpu", "platform", "num_cpus", "gpus")),
                ("training", ("strategy", "replicas", "device", "precision", "determinism.", "weights.sha256")))
    for section, prefixes in sections:
        keys = {k for k in set(a["tags"]) | set(b["tags"]) if k.startswith(prefixes)}
        for key in sorted(keys):
            if a["tags"].get(key) != b["tags"].get(key):
                rows.append((section, key, a["tags"].get(key), b["tags"].get(key)))
    ma, mb = _comparable_metrics(a["metrics"]), _comparable_metrics(b["metrics"])
    for key in sorted(set(ma) | set(mb)):
        if ma.get(key) != mb.get(key):
            rows.append(("metrics", key, ma.get(key), mb.get(key)))
    return rows


def compare(run_a: str, run_b: str, uri: str) -> list:
    return compare_runs(_load(run_a, uri), _load(run_b, uri))


def format_compare(rows, a: str, b: str) -> str:
    if not rows:
        return f"runs {a} and {b}: no differences in config, code, data, environment or metrics\n"
    table = [("section", "key", f"A {a[:8]}", f"B {b[:8]}")]
    table += [(s, k, _short(va, 30), _short(vb, 30)) for s, k, va, vb in rows]
    widths = [max(len(str(r[c])) for r in table) for c in range(4)]
    return "\n".join("  ".join(str(r[c]).ljust(widths[c]) for c in range(4)).rstrip() for r in table) + "\n"


# ----------------------------------------------------------------------------- rerun


@dataclasses.dataclass
class RerunResult:
    verdict: str
    weights_recorded: Optional[str]
    weights_rerun: Optional[str]
    differences: list  # (metric, recorded, rerun, abs diff)
    compared_metrics: int
    rerun_run_id: Optional[str] = None
    report: dict = dataclasses.field(default_factory=dict)


def judge(recorded: dict, rerun: dict, tolerance: float) -> tuple:
    """(verdict, differences, n) comparing weight hash tags and every non-timing metric."""
    wa, wb = recorded["tags"].get("weights.sha256"), rerun["tags"].get("weights.sha256")
    ma, mb = _comparable_metrics(recorded["metrics"]), _comparable_metrics(rerun["metrics"])
    diffs, beyond = [], False
    for key in sorted(set(ma) | set(mb)):
        a, b = ma.get(key), mb.get(key)
        if a == b:
            continue
        delta = abs(a - b) if a is not None and b is not None else float("inf")
        diffs.append((key, a, b, delta))
        beyond = beyond or not delta <= tolerance
    if wa and wa == wb and not diffs:
        return REPRODUCED, diffs, len(ma)
    if not beyond and wa and wb:
        return WITHIN_TOLERANCE, diffs, len(ma)
    if not beyond and not wa:  # nothing to prove bit-identity with
        return WITHIN_TOLERANCE, diffs, len(ma)
    return DIFFERS_VERDICT, diffs, len(ma)


def _copy_tree_linked(src: Path, dst: Path) -> None:
    def link(s, d):
        try:
            os.link(s, d)
        except OSError:
            shutil.copy2(s, d)

    shutil.copytree(src, dst, copy_function=link, symlinks=True)


def rerun(run_id: str, root, uri: Optional[str] = None, *, tolerance: float = 0.0, keep: bool = False,
          log=print) -> RerunResult:
    """Re-create run `run_id` in a temporary git worktree at its commit and compare the outcome."""
    import yaml

    from tfpipe.tracking import reading

    root = Path(root).resolve()
    uri = tracking_uri_for(root, uri)
    run = _load(run_id, uri)
    commit = run["tags"].get("git.commit")
    if not commit:
        raise UserError(f"run {run_id}: no git.commit tag recorded; cannot re-create it")
    if run.get("config") is None:
        raise UserError(f"run {run_id}: no config/resolved.yaml artifact; cannot re-create it")
    if _git(root, "cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
        raise UserError(f"run {run_id}: commit {commit[:12]} is not reachable in {root}")
    if tolerance < 0:
        raise UserError(f"--tolerance={tolerance}: must be >= 0")

    tmp = Path(tempfile.mkdtemp(prefix="tfpipe-rerun-"))
    wt = tmp / "worktree"
    try:
        proc = _git(root, "worktree", "add", "--detach", "-q", str(wt), commit)
        if proc.returncode != 0:
            raise UserError(f"git worktree add at {commit[:12]} failed: {proc.stderr.strip()[:300]}")
        if run.get("git_diff"):  # the run was made from a dirty tree: apply its recorded diff
            patch = tmp / "recorded.patch"
            patch.write_text(run["git_diff"], encoding="utf-8")
            _git(wt, "apply", str(patch))
        cfg = _relative_dict(run["config"], root)
        resolved = run["tags"].get("precision.resolved")
        if (cfg.get("precision") or {}).get("policy") == "auto" and resolved:
            # `auto` picks the policy from the host: re-run with the one the original run used.
            cfg["precision"]["policy"] = resolved
            log(f"precision.policy=auto ran as {resolved}: the re-run uses {resolved}")
        (wt / "params.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
        raw = root / "data" / "raw"
        if raw.is_dir():  # git-ignored raw data (a DVC stage dependency): hard-linked in
            for child in raw.iterdir():
                target = wt / "data" / "raw" / child.name
                if child.is_dir() and not target.exists():
                    _copy_tree_linked(child, target)
        if (root / ".dvc").is_dir():  # share the DVC cache: prepared data is restored from it
            (wt / ".dvc").mkdir(exist_ok=True)
            (wt / ".dvc" / "config.local").write_text(f"[cache]\n    dir = {root / '.dvc' / 'cache'}\n")
        store = f"sqlite:///{tmp / 'mlflow.db'}"
        from tfpipe.tracking.redact import environ_snapshot

        env = {k: v for k, v in environ_snapshot().items() if not k.startswith(("MLFLOW_", "DVC_"))}
        env.update(MLFLOW_TRACKING_URI=store, PYTHONPATH=os.pathsep.join([str(wt / "src"), env.get("PYTHONPATH", "")]),
                   DVC_NO_ANALYTICS="1", TF_CPP_MIN_LOG_LEVEL="2")
        dvc = [sys.executable, "-m", "dvc", "repro"]
        for step, cmd in (("prepare (restored from the DVC cache when present)", [*dvc, "prepare"]),
                          ("train", [*dvc, "-f", "-s", "train"]), ("evaluate", [*dvc, "-f", "-s", "evaluate"])):
            log(f"rerun: {step} ...")
            proc = subprocess.run(cmd, cwd=wt, env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                tail = (proc.stdout + proc.stderr).strip().splitlines()[-5:]
                raise UserError(f"rerun: `{' '.join(cmd[1:])}` failed in the worktree: {' | '.join(tail)[:800]}")
        run_file = wt / (cfg.get("tracking") or {}).get("run_file", "run.json")
        new_id = json.loads(run_file.read_text())["run_id"]
        new = reading.load_run(store, new_id)
    finally:
        _git(root, "worktree", "remove", "--force", str(wt))
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)

    verdict, diffs, n = judge(run, new, tolerance)
    now = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()
    report = {
        "run_id": run_id, "verdict": verdict, "time": now, "commit": commit, "tolerance": tolerance,
        "weights_sha256": {"recorded": run["tags"].get("weights.sha256"), "rerun": new["tags"].get("weights.sha256")},
        "metrics_compared": n,
        "differences": [{"metric": k, "recorded": a, "rerun": b, "abs_diff": d} for k, a, b, d in diffs],
        "rerun_environment": {k: new["tags"].get(k) for k in ("python_version", *ENV_TAGS, "cpu")},
    }
    reading.record_audit(uri, run_id, {"audit.verdict": verdict, "audit.time": now},
                         report, f"rerun-{now.replace(':', '')}.json")
    return RerunResult(verdict, run["tags"].get("weights.sha256"), new["tags"].get("weights.sha256"), diffs, n,
                       new_id, report)


def format_rerun(result: RerunResult) -> str:
    lines = [f"weights.sha256  recorded {_short(result.weights_recorded, 16)}  rerun {_short(result.weights_rerun, 16)}",
             f"metrics compared: {result.compared_metrics} (timing metrics excluded)"]
    for key, a, b, d in result.differences:
        lines.append(f"  {key}: recorded {a!r}, rerun {b!r} (|diff| {d:.3g})")
    lines.append(result.verdict)
    return "\n".join(lines) + "\n"
