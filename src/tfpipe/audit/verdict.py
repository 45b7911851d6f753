"""The verdict of `audit --rerun`: what it compares a re-run with, read from where nobody can rewrite it after
the fact, and what it records on the run.

Anyone with EDIT on a store can set a tag and log a newer value of any metric, so the recorded side is read
from what MLflow never lets change once logged (`recorded`):
- weights: the digest of the SavedModel whose files match the run's param `tfpipe.saved_model_sha256`,
  computed from its keras_weights.npz (`tracking.reading.sealed_weights`; source "seal"). The `weights.sha256`
  tag and the seal's own `weights_sha256` fact are cross-checked with it: one that differs is reported as
  tampered and never used. A run without such a model (older than the param): the tag (source "tag", mutable).
- metrics: the params `tfpipe.metric.<name>` the train and evaluate stages log with their final figures
  (source "param"), each cross-checked with the metric of that name. A run without them: its metrics (source
  "metric", mutable).
The re-run's side (`rerun_side`) is read the same way from its own temporary store, under the recorded names
only.

DIFFERS: a compared metric differs beyond the tolerance or exists on one side only, the recorded weights exist
and the re-run's do not, or the record was tampered with (the store shows a figure its immutable record
contradicts: it must not carry a verdict that seems to vouch for it). REPRODUCED: the weights are
bit-identical to the sealed ones and every metric is equal. WITHIN TOLERANCE: otherwise; also in place of
REPRODUCED when the recorded weights are only a tag. A verdict resting on mutable values says so in a line and
in its report."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import math
import os
from typing import Optional

from tfpipe.audit.common import DIFFERS_VERDICT, ENV_TAGS, REPRODUCED, WITHIN_TOLERANCE, shorten
from tfpipe.audit.compare import METRIC_PARAM, MODEL_DIGEST, comparable_metrics

SEAL, TAG, PARAM, METRIC = "seal", "tag", "param", "metric"
SOURCES = {  # how each source reads in the output
    SEAL: f"the SavedModel whose files match param {MODEL_DIGEST}",
    TAG: "tag weights.sha256 (anyone with EDIT can set it)",
    PARAM: f"params {METRIC_PARAM}*",
    METRIC: "the run's metrics (anyone with EDIT can log new values)",
}


@dataclasses.dataclass
class Side:
    """One side of the comparison: weights digest and metrics, each with where it was read."""

    weights: Optional[str]
    weights_source: Optional[str]  # SEAL, TAG or None (no digest)
    metrics: dict
    metrics_source: str  # PARAM or METRIC
    tampered: list = dataclasses.field(default_factory=list)  # lines: the store contradicting the record
    extra: int = 0  # the re-run's side: comparable metrics the recorded run does not have
    why_not_sealed: Optional[str] = None


@dataclasses.dataclass
class RerunResult:
    verdict: str
    weights_recorded: Optional[str]
    weights_rerun: Optional[str]
    differences: list  # (metric, recorded, rerun, abs diff)
    compared_metrics: int
    rerun_run_id: Optional[str] = None
    report: dict = dataclasses.field(default_factory=dict)
    notes: list = dataclasses.field(default_factory=list)  # the lines on sources, tampering, mutable values


def _same(a, b) -> bool:
    return a == b or (a is not None and b is not None and math.isnan(a) and math.isnan(b))


def _metric_params(params: dict) -> dict:
    return {k[len(METRIC_PARAM) :]: v for k, v in params.items() if k.startswith(METRIC_PARAM)}


def _weights(run: dict, sealed: dict, tampered: list) -> tuple:
    """(digest, source): the sealed model's weights, the tag and the seal's fact checked against them."""
    tag, weights = run["tags"].get("weights.sha256"), sealed.get("weights_sha256")
    if not weights:
        return tag, TAG if tag else None
    if tag and tag != weights:
        tampered.append(
            f"tag weights.sha256 {shorten(tag, 16)} is not the sealed model's weights {weights[:13]}..."
        )
    fact = sealed.get("seal_fact")
    if fact and fact != weights:
        tampered.append(
            f"the model's seal states weights {shorten(fact, 16)}, its files hold {weights[:13]}..."
        )
    return weights, SEAL


def _figures(params: dict, metrics: dict, tampered: list) -> dict:
    """The params' figures as numbers, each checked against the metric of its name."""
    values = {}
    for name, text in sorted(params.items()):
        try:
            values[name] = float(text)
        except ValueError:
            tampered.append(f"param {METRIC_PARAM}{name}={shorten(text, 24)!r} is no number")
            continue
        shown = metrics.get(name)
        if shown is not None and not _same(shown, values[name]):
            tampered.append(f"metric {name} shows {shown!r}, its record (param) is {values[name]!r}")
    return values


def recorded(run: dict, sealed: dict) -> Side:
    """The recorded run's side, from its immutable params and sealed model where it has them (`sealed`:
    `tracking.reading.sealed_weights`); what its tags and metrics say otherwise is listed as tampered."""
    tampered: list = []
    weights, weights_source = _weights(run, sealed, tampered)
    params = _metric_params(run.get("params") or {})
    if params:
        metrics, source = _figures(params, run["metrics"], tampered), PARAM
    else:
        metrics, source = run["metrics"], METRIC
    return Side(weights, weights_source, comparable_metrics(metrics), source, tampered, 0, sealed.get("why"))


def rerun_side(new: dict, sealed: dict, rec: Side) -> Side:
    """The re-run's side under the recorded run's metric names only (those of `rec`); the names it has beyond
    them are only counted. Like with like: its params when the record's figures are params and it logged them
    (its commit's code does), else its metrics; its weights from its own sealed model, else its tag."""
    figures = _figures(_metric_params(new.get("params") or {}), {}, []) if rec.metrics_source == PARAM else {}
    source = PARAM if figures else METRIC
    values = comparable_metrics(figures or new["metrics"])
    weights = sealed.get("weights_sha256") or new["tags"].get("weights.sha256")
    weights_source = SEAL if sealed.get("weights_sha256") else TAG if weights else None
    extra = len(set(values) - set(rec.metrics))
    compared = {k: v for k, v in values.items() if k in rec.metrics}
    return Side(weights, weights_source, compared, source, extra=extra)


def judge(rec: Side, rerun: Side, tolerance: float) -> tuple:
    """(verdict, differences, number of metrics compared): the rules in the module's docstring."""
    diffs, beyond = [], rerun.extra > 0
    for key in sorted(rec.metrics):
        a, b = rec.metrics[key], rerun.metrics.get(key)
        if _same(a, b):
            continue
        delta = abs(a - b) if b is not None else float("inf")
        diffs.append((key, a, b, delta))
        beyond = beyond or not delta <= tolerance
    wa, wb, n = rec.weights, rerun.weights, len(rec.metrics)
    if beyond or rec.tampered or (wa and not wb):
        return DIFFERS_VERDICT, diffs, n
    if wa and wa == wb and not diffs and rec.weights_source == SEAL:
        return REPRODUCED, diffs, n
    return WITHIN_TOLERANCE, diffs, n


def mutable(rec: Side) -> list:
    """What the verdict rests on that anyone with EDIT could have set: lines."""
    lines = []
    if rec.weights_source == TAG:
        lines.append(f"weights: {SOURCES[TAG]}; no sealed model ({rec.why_not_sealed})")
    if rec.metrics_source == METRIC and rec.metrics:
        lines.append(f"metrics: {SOURCES[METRIC]}; the run records no {METRIC_PARAM}* params")
    return lines


def notes(rec: Side, rerun: Side, verdict: str) -> list:
    """The lines after the differences: the re-run's extra metrics, the sources, tampering, mutable values."""
    lines = [f"  {rerun.extra} metric(s) only the re-run has"] if rerun.extra else []
    source = rec.weights_source
    weights = SOURCES[source] if source is not None and source in SOURCES else f"none ({rec.why_not_sealed})"
    lines.append(f"recorded figures: weights from {weights}; metrics from {SOURCES[rec.metrics_source]}")
    lines += [f"tampered: {line}; not trusted" for line in rec.tampered]
    rests = mutable(rec)
    lines += [f"rests on mutable values: {line}" for line in rests]
    if verdict == WITHIN_TOLERANCE and rec.weights_source == TAG and rec.weights == rerun.weights:
        lines.append("not REPRODUCED: equal to a weights.sha256 tag proves no bit-identity (no sealed model)")
    return lines


def _environment() -> dict:
    """The re-run's environment as the audit itself reads it (the stages ran on this interpreter and CPU)."""
    import platform

    from tfpipe import hardware, provenance

    versions = provenance.package_versions()
    return {
        "python_version": platform.python_version(),
        **{tag: versions.get(key) for tag, key in ENV_TAGS.items()},
        "cpu": provenance.cpu_model(),
        "cpu_flags": hardware.cpu_kernels(),
    }


def auditor() -> dict:
    """Who ran the audit: the OS user and the MLflow user the store was reached as (if any)."""
    import getpass

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = None
    return {"user": user, "mlflow_user": os.environ.get("MLFLOW_TRACKING_USERNAME") or None}


def report(
    run_id: str, run: dict, prepared: str, verdict: str, judged: tuple, sides: tuple, tolerance
) -> dict:
    """What the audit records on the run (audit/rerun-<time>.json): all of it computed by the audit, under
    names the recorded run has (the re-run's other metric names are counted, not named)."""
    (rec, rerun), (diffs, n) = sides, judged
    now = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()
    return {
        "run_id": run_id,
        "verdict": verdict,
        "prepared_data": prepared,
        "time": now,
        "auditor": auditor(),
        "commit": run["tags"]["git.commit"],
        "tolerance": tolerance,
        "weights_sha256": {
            "recorded": rec.weights,
            "recorded_source": rec.weights_source,
            "rerun": rerun.weights,
            "rerun_source": rerun.weights_source,
        },
        "metrics_compared": n,
        "metrics_source": {"recorded": rec.metrics_source, "rerun": rerun.metrics_source},
        "differences": [{"metric": k, "recorded": a, "rerun": b, "abs_diff": d} for k, a, b, d in diffs],
        "rerun_only_metrics": rerun.extra,
        "tampered": list(rec.tampered),
        "rests_on_mutable": mutable(rec),
        "rerun_environment": _environment(),
    }


def format_rerun(result: RerunResult) -> str:
    lines = [
        f"weights.sha256  recorded {shorten(result.weights_recorded, 16)}  rerun {shorten(result.weights_rerun, 16)}",
        f"metrics compared: {result.compared_metrics} (timing metrics excluded)",
    ]
    for key, a, b, d in result.differences:
        lines.append(f"  {key}: recorded {a!r}, rerun {b!r} (|diff| {d:.3g})")
    lines += result.notes
    lines.append(f"prepared data: {result.report.get('prepared_data')}")
    lines.append(result.verdict)
    return "\n".join(lines) + "\n"
