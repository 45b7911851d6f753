"""The seeds of a configuration as `tfpipe promote` weighs them: the runs of a run's group (`groups`) in the store,
and each one's value of a metric, read where nobody can rewrite it.

    seeds = group_runs.read(client, uri, run, "test_accuracy")   # Seeds(group, values, unrecorded)

A run's value is its param `tfpipe.metric.<name>` (`outcome`: logged with the metric, and a param never changes
once logged); the metric of that name (anyone with EDIT can log a newer value) and every tag are never read as a
value. The group's runs: every FINISHED run of the store's active experiments tagged `tfpipe.group` with the run's
group, and the run itself whatever its status (the evaluate stage promotes its own run while it is open). A run
of the group that records no such param is left out, and named in `unrecorded`. What it does not do: decide
(`group_compare`), or check that a run's tag matches its params (a run of `mlflow run` also records its entry
point's `overrides`, so its params' digest is not its group): a run tagged into a group by hand counts in it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from mlflow import MlflowClient
from mlflow.entities import ViewType
from mlflow.exceptions import MlflowException

from tfpipe.errors import TrackingError, one_line
from tfpipe.tracking.groups import DIGEST_CHARS, GROUP_TAG, recorded_group
from tfpipe.tracking.outcome import METRIC_PARAM
from tfpipe.tracking.redact import redact_url

EXPERIMENTS_PER_SEARCH = 100  # experiment ids in one search request
PAGE = 1000  # runs a search returns at once


@dataclass(frozen=True)
class Seeds:
    run: str  # the run asked about
    group: str
    values: Dict[str, float]  # run id -> its recorded value; the run asked about first when it records one
    unrecorded: Tuple[str, ...] = ()  # runs of the group that record no value of the metric


def recorded_value(params: dict, metric: str) -> Optional[float]:
    """The run's immutable record of `metric` (param METRIC_PARAM<metric>, `outcome`) as a number; None when it
    has none, or one that is no finite number."""
    recorded = params.get(f"{METRIC_PARAM}{metric}")
    if recorded is None:
        return None
    try:
        value = float(recorded)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def value_of(run, metric: str) -> float:
    """The run's `recorded_value` of `metric`; TrackingError (one line: what it records instead) when none."""
    value = recorded_value(run.data.params, metric)
    if value is not None:
        return value
    names = sorted(k[len(METRIC_PARAM) :] for k in run.data.params if k.startswith(METRIC_PARAM))
    records = f"it records {', '.join(names)}" if names else "it records none"
    raise TrackingError(
        f"run {run.info.run_id} has no metric {metric!r} yet; evaluate it first, pick another with --metric "
        f"({records}), or --force (promotion reads param {METRIC_PARAM}{metric}, which evaluate logs with the "
        "metric and nobody can change; the metric alone anyone with EDIT can)"
    )


def experiment_ids(client: MlflowClient, view_type: int = ViewType.ACTIVE_ONLY) -> list:
    """The ids of the store's experiments (`view_type`: active ones by default), every page."""
    ids, token = [], None
    while True:
        page = client.search_experiments(view_type=view_type, max_results=1000, page_token=token)
        ids += [e.experiment_id for e in page]
        token = page.token
        if not token:
            return ids


def read(client: MlflowClient, uri: str, run, metric: str) -> Seeds:
    """The recorded values of `metric` of `run`'s group: `run` first, then the group's other FINISHED runs."""
    group = recorded_group(run.data.tags, run.data.params)
    if not re.fullmatch(f"[0-9a-f]{{{DIGEST_CHARS}}}", group):
        raise TrackingError(
            f"run {run.info.run_id}: tag {GROUP_TAG}={group[:40]!r} is no group ({DIGEST_CHARS} hex digits, set "
            "when the run opens); remove the tag (its params' digest is then its group) or --force"
        )
    try:
        others = [r for r in _finished(client, group) if r.info.run_id != run.info.run_id]
    except MlflowException as exc:
        raise TrackingError(
            f"could not list the runs of group {group} in {redact_url(uri)}: {one_line(exc, 200)}"
        ) from None
    values, unrecorded = {}, []
    for r in [run, *others]:
        value = recorded_value(r.data.params, metric)
        if value is None:
            unrecorded.append(r.info.run_id)
        else:
            values[r.info.run_id] = value
    return Seeds(run.info.run_id, group, values, tuple(unrecorded))


def with_mates(client: MlflowClient, uri: str, run_ids: list) -> list:
    """`run_ids`, each followed by the other FINISHED runs of its group (the seeds `tfpipe report` finds itself),
    each id once, in that order. A run whose tag is no group (hand-edited) brings no mates: it is its own."""
    found: list = []
    for run_id in run_ids:
        found.append(run_id)
        try:
            run = client.get_run(run_id)
        except MlflowException:
            continue  # not in the store: the reader that follows names it
        group = recorded_group(run.data.tags, run.data.params)
        if not re.fullmatch(f"[0-9a-f]{{{DIGEST_CHARS}}}", group):
            continue
        try:
            found += [r.info.run_id for r in sorted(_finished(client, group), key=_started)]
        except MlflowException as exc:
            raise TrackingError(
                f"could not list the seeds of run {run_id} in {redact_url(uri)}: {one_line(exc, 200)}"
            ) from None
    return list(dict.fromkeys(found))


def _started(run) -> tuple:
    return (run.info.start_time or 0, run.info.run_id)


def _finished(client: MlflowClient, group: str) -> list:
    """The FINISHED runs of the store's active experiments tagged with `group` (checked: hex digits only)."""
    found, experiments = [], experiment_ids(client)
    query = f"tags.`{GROUP_TAG}` = '{group}' and attributes.status = 'FINISHED'"
    for i in range(0, len(experiments), EXPERIMENTS_PER_SEARCH):
        token = None
        while True:
            page = client.search_runs(
                experiments[i : i + EXPERIMENTS_PER_SEARCH],
                filter_string=query,
                max_results=PAGE,
                page_token=token,
            )
            found += list(page)
            token = page.token
            if not token:
                break
    return found
