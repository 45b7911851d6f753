"""Reproducibility audits of recorded MLflow runs: check, rerun, compare.

    items = audit.check(run_id, root)                # recorded vs present: code, data, config, environment
    result = audit.rerun(run_id, root, tolerance=0)  # re-execute at the recorded commit, compare outcomes
    audit.judge(recorded, rerun, tolerance)          # the verdict (`verdict`: what it compares, from where)
    rows = audit.compare(run_a, run_b, uri)          # what differs between two runs
    audit.data_report_section(run_id, other, uri)    # only the data report rows of compare (audit --against)
    audit.registry_line(run_id, root)                # the run's registered versions and their aliases

Runs are read through `tfpipe.tracking.reading` (this module never imports mlflow). Each check
item is an `Item(name, status, recorded, present, detail)` with status "match", "differs" or
"n/a" (not recorded on the run and not present either); `ok(items)` is True when none differs.
"""

from tfpipe.audit.checks import check
from tfpipe.audit.common import (
    DIFFERS,
    DIFFERS_VERDICT,
    ENV_TAGS,
    MATCH,
    NA,
    REPRODUCED,
    TIMING_MARKERS,
    WITHIN_TOLERANCE,
    Item,
    format_table,
    ok,
    registry_line,
    tracking_uri_for,
    warm_start_line,
)
from tfpipe.audit.compare import compare, compare_runs, data_report_section, format_compare
from tfpipe.audit.rerun import rerun
from tfpipe.audit.verdict import RerunResult, format_rerun, judge

__all__ = [
    "DIFFERS",
    "DIFFERS_VERDICT",
    "ENV_TAGS",
    "MATCH",
    "NA",
    "REPRODUCED",
    "TIMING_MARKERS",
    "WITHIN_TOLERANCE",
    "Item",
    "RerunResult",
    "check",
    "compare",
    "compare_runs",
    "data_report_section",
    "format_compare",
    "format_rerun",
    "format_table",
    "judge",
    "ok",
    "registry_line",
    "warm_start_line",
    "rerun",
    "tracking_uri_for",
]
