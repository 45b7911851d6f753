"""MLflow's system metrics (tracking.system_metrics): sampled into the train stage's run when on, absent when off
(the default), and the sampling thread ends with the run. A real SQLite store; the monitor is MLflow's own."""

from __future__ import annotations

import threading
import time

import pytest
import test_tracking

cfg, clean_mlflow, project = (
    test_tracking.cfg,
    test_tracking.clean_mlflow,
    test_tracking.project,
)  # db_template: conftest


def _monitors() -> list:
    return [t for t in threading.enumerate() if "system" in t.name.lower() and "metric" in t.name.lower()]


@pytest.mark.parametrize("enabled", [True, False])
def test_system_metrics_are_logged_only_when_switched_on(cfg, project, make_config, enabled):
    from tfpipe import tracking

    cfg = make_config(
        "experiment=smoke", f"tracking.system_metrics={enabled}", "tracking.system_metrics_interval=0.5"
    )
    with tracking.start_run(cfg, project, stage="train") as run:
        deadline = time.monotonic() + 30
        client = test_tracking._client(project)
        while enabled and not client.get_run(run.run_id).data.metrics and time.monotonic() < deadline:
            time.sleep(0.5)
        assert bool(_monitors()) == enabled  # MLflow's SystemMetricsMonitor thread
        if not enabled:
            time.sleep(2)  # four sampling intervals: nothing may appear
    metrics = test_tracking._client(project).get_run(run.run_id).data.metrics
    system = sorted(k for k in metrics if k.startswith("system/"))
    if enabled:
        assert (
            "system/cpu_utilization_percentage" in system and "system/system_memory_usage_megabytes" in system
        )
    else:
        assert system == []
    deadline = time.monotonic() + 15
    while _monitors() and time.monotonic() < deadline:  # MLflow's monitor ends with the run
        time.sleep(0.2)
    assert not _monitors(), [t.name for t in _monitors()]
