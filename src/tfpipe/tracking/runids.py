"""Run ids as a user types them: the whole id, or, as git takes a commit, a unique prefix of at least
`MIN_PREFIX` hex characters, resolved through the store (every command that takes a run id: audit, compare,
promote, and the `runs:/<id>/...` model URIs of predict, serve and `train.init_from`).

The store is asked once: MLflow's search grammar takes `attributes.run_id LIKE '<prefix>%'` (SQL stores, a
tracking server, the file store), over every experiment, deleted ones and deleted runs included (`get_run`
finds those too, so a prefix is unique only among all of them). A prefix shared by several runs is refused in
one line naming them (TrackingError: exit 2); one that matches nothing is left as typed, so the caller says
"not found" as it does for any unknown id.
"""

from __future__ import annotations

import re

from mlflow import MlflowClient
from mlflow.entities import Run, ViewType
from mlflow.exceptions import MlflowException

from tfpipe.errors import TrackingError, one_line
from tfpipe.tracking import backend
from tfpipe.tracking.redact import redact_url

MIN_PREFIX = 8  # hex characters: 4 billion values, as git's default abbreviation is 7
FULL_LENGTH = 32  # MLflow's run ids: uuid4().hex
SHOWN = 5  # candidates named in the refusal
EXPERIMENTS_PER_SEARCH = 100


def resolve_run_id(
    uri: str, given: str, client: MlflowClient | None = None, *, min_chars: int = MIN_PREFIX
) -> str:
    """The whole id of the one run whose id starts with `given`; `given` itself when it is a whole id, not a
    hex prefix of at least `min_chars` characters, or matches no run. TrackingError when several runs
    match."""
    text = str(given).strip()
    if len(text) >= FULL_LENGTH or not re.fullmatch(rf"[0-9a-fA-F]{{{max(min_chars, 1)},}}", text):
        return given
    if client is None:
        client = backend.client(uri)
    try:
        client.get_run(text)  # a store whose ids are shorter: the whole id wins, as in git
        return text
    except MlflowException:
        pass
    found = matching(client, uri, text.lower(), SHOWN + 1)
    if len(found) == 1:
        return found[0].info.run_id
    if not found:
        return given
    names = ", ".join(f"{r.info.run_id} ({r.info.run_name})" for r in found[:SHOWN])
    count = f"more than {SHOWN}" if len(found) > SHOWN else str(len(found))
    raise TrackingError(
        f"run id {text!r} is ambiguous in {redact_url(uri)}: {count} runs start with it: {names}; "
        "give more of the id"
    )


def matching(client: MlflowClient, uri: str, prefix: str, limit: int) -> list:
    """Up to `limit` runs of any experiment whose id starts with `prefix` (lowercase hex)."""
    try:
        experiments, token = [], None
        while True:
            page = client.search_experiments(view_type=ViewType.ALL, max_results=1000, page_token=token)
            experiments += [e.experiment_id for e in page]
            token = page.token
            if not token:
                break
        found: list[Run] = []
        for i in range(0, len(experiments), EXPERIMENTS_PER_SEARCH):
            found += client.search_runs(
                experiments[i : i + EXPERIMENTS_PER_SEARCH],
                filter_string=f"attributes.run_id LIKE '{prefix}%'",
                run_view_type=ViewType.ALL,
                max_results=limit - len(found),
            )
            if len(found) >= limit:
                break
    except MlflowException as exc:
        raise TrackingError(
            f"could not look up run id {prefix!r} in {redact_url(uri)}: {one_line(exc, 200)}"
        ) from None
    return found
