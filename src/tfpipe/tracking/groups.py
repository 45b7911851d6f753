"""Which runs are seeds of one configuration: the tag `tfpipe.group`, set on every run when it opens.

A run's group is a digest of its params as the run logs them (`param_strings`: flat dotted keys, values as text,
secret-looking ones as '***'), leaving out the seed (`train.seed`) and the bookkeeping that is not the
configuration (`tracking.*`: where and under which name it was logged; `tfpipe.*`: the SavedModel's digest
`tfpipe.saved_model_sha256` and the final figures `tfpipe.metric.*`, different for every run). Two runs of one
configuration and other seeds share it, so the MLflow UI's "Group by" `tfpipe.group` shows them as one row, and
`tfpipe report` takes them as the seeds of one configuration; a run without the tag (older than it) is grouped by
the same digest of its params. What it does not know: values that differ between clones of the project though
the configuration is the same (the absolute paths of `data.*`): runs of two folders fall in two groups.
"""

from __future__ import annotations

import hashlib
import json

from tfpipe.tracking.naming import recorded_values
from tfpipe.tracking.redact import redact
from tfpipe.tracking.sink import MAX_KEY

GROUP_TAG = "tfpipe.group"
SEED_PARAM = "train.seed"
BOOKKEEPING = ("tracking.", "tfpipe.")  # prefixes of params that are not the configuration
DIGEST_CHARS = 12  # hex: a group's name in the UI's column and in a report
MAX_PARAM_VALUE = 6000  # characters of a param's value MLflow keeps (the SQL stores' limit is 8000)


def param_strings(flat: dict, project_root=None) -> dict:
    """`flat` as a run logs it: keys and values as text (None as 'None'), secret-looking values '***', absolute
    paths of a DVC temporary copy naming the project (`naming.recorded_values`)."""
    return {
        str(k)[:MAX_KEY]: ("None" if v is None else str(v))[:MAX_PARAM_VALUE]
        for k, v in redact(recorded_values(flat, project_root)).items()
    }


def configuration(params: dict) -> dict:
    """The params that say what was trained: all but the seed and the bookkeeping (BOOKKEEPING)."""
    return {k: v for k, v in params.items() if k != SEED_PARAM and not any(map(k.startswith, BOOKKEEPING))}


def group_id(params: dict) -> str:
    """The group of a run with these logged params: the first DIGEST_CHARS hex of the sha256 of its
    `configuration`, as sorted JSON."""
    text = json.dumps(sorted(configuration(params).items()), separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:DIGEST_CHARS]


def recorded_group(tags: dict, params: dict) -> str:
    """The group of a recorded run (its tags and params): its tag GROUP_TAG, else the `group_id` of its params
    (a run older than the tag)."""
    return tags.get(GROUP_TAG) or group_id(params)


def group_tag(cfg, project_root=None) -> dict:
    """{GROUP_TAG: the group} of the run that logs `cfg.flat()` as its params (`opening` sets it at the start)."""
    return {GROUP_TAG: group_id(param_strings(cfg.flat(), project_root))}
