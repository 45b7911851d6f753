"""`compare`: what differs between two recorded runs; `data_report_section`: the data report part of it alone,
for `audit RUN --against OTHER`."""

from __future__ import annotations

from tfpipe.audit.common import ENV_TAGS, TIMING_MARKERS, load_recorded, shorten

MODEL_DIGEST = "tfpipe.saved_model_sha256"  # tfpipe.tracking.model_uri.DIGEST_PARAM (no MLflow import here)
METRIC_PARAM = "tfpipe.metric."  # tfpipe.tracking.outcome.METRIC_PARAM: the final figures' immutable copies


def comparable_metrics(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if not any(m in k for m in TIMING_MARKERS)}


def compare_runs(a: dict, b: dict) -> list:
    """Rows (section, key, value_a, value_b) for every differing param, tag group and metric."""
    rows = []
    for key in sorted(set(a["params"]) | set(b["params"])):
        if key.startswith(METRIC_PARAM):  # a metric's copy, not a setting: the metrics rows show it
            continue
        if a["params"].get(key) != b["params"].get(key):
            # the logged SavedModel's digest is the training's outcome, not a setting
            section = "training" if key == MODEL_DIGEST else "config"
            rows.append((section, key, a["params"].get(key), b["params"].get(key)))
    sections = (
        ("code", ("git.",)),
        ("data", ("data.", "dvc.lock.")),
        ("environment", ("python_version", *ENV_TAGS, "cpu", "platform", "num_cpus", "gpus")),
        ("training", ("strategy", "replicas", "device", "precision", "determinism.", "weights.sha256")),
    )
    for section, prefixes in sections:
        keys = {k for k in set(a["tags"]) | set(b["tags"]) if k.startswith(prefixes)}
        for key in sorted(keys):
            if a["tags"].get(key) != b["tags"].get(key):
                rows.append((section, key, a["tags"].get(key), b["tags"].get(key)))
    rows += _report_rows(a.get("data_report"), b.get("data_report"))
    ma, mb = comparable_metrics(a["metrics"]), comparable_metrics(b["metrics"])
    for key in sorted(set(ma) | set(mb)):
        if ma.get(key) != mb.get(key):
            rows.append(("metrics", key, ma.get(key), mb.get(key)))
    return rows


def _report_rows(ra, rb) -> list:
    """'data report' rows: the per-split figures (class shares, pixel statistics, OOV rate...) that differ
    between the two runs' data/report.json; one row when only one run logged a report."""
    if ra is None and rb is None:
        return []
    if ra is None or rb is None:
        return [("data report", "report.json", "logged" if ra else None, "logged" if rb else None)]
    from tfpipe.data.report import figures

    fa, fb = figures(ra), figures(rb)
    keys = [*fa, *(k for k in fb if k not in fa)]  # the report's order: split by split
    return [("data report", k, fa.get(k), fb.get(k)) for k in keys if fa.get(k) != fb.get(k)]


def compare(run_a: str, run_b: str, uri: str) -> list:
    from tfpipe.tracking import reading

    runs = [
        {**load_recorded(r, uri), "data_report": reading.load_data_report(uri, r)} for r in (run_a, run_b)
    ]
    return compare_runs(*runs)


def data_report_section(run_id: str, against: str, uri: str) -> str:
    """The 'data report' rows compare prints, between the two runs' data/report.json, under a heading line;
    one line when there is nothing to compare or nothing differs."""
    from tfpipe.tracking import reading

    ra, rb = (reading.load_data_report(uri, r) for r in (run_id, against))
    if ra is None and rb is None:
        return f"data report against run {against}: neither run logged one (data/report.json)\n"
    rows = _report_rows(ra, rb)
    if not rows:
        return f"data report against run {against}: the same figures\n"
    return f"data report against run {against}:\n" + format_compare(rows, run_id, against)


def format_compare(rows, a: str, b: str) -> str:
    if not rows:
        return f"runs {a} and {b}: no differences in config, code, data, environment or metrics\n"
    table = [("section", "key", f"A {a[:8]}", f"B {b[:8]}")]
    table += [(s, k, shorten(va, 30), shorten(vb, 30)) for s, k, va, vb in rows]
    widths = [max(len(str(r[c])) for r in table) for c in range(4)]
    return "\n".join("  ".join(str(r[c]).ljust(widths[c]) for c in range(4)).rstrip() for r in table) + "\n"
