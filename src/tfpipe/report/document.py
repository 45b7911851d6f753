"""What a report says, section by section, as plain blocks `render` writes as Markdown and as HTML.

Sections: the groups (their runs and seeds; a group of one says it is one run), the parameters that differ between
groups (only those), the headline metrics (`group.summarize` per group), the decision per group against the base
(`group.decide`), the learning curves and the confusion matrices (`figures`; a line saying why not when no run
logged what they need), and the audit verdicts when a run carries the tag `audit.verdict`. What it does not do:
read the store, or write files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from tfpipe.report import figures
from tfpipe.report.group import decide, differing_params, summarize

HEADLINE = ("test_accuracy", "test_loss", "test_macro_f1", "val_accuracy", "val_loss", "train_loss")
DECISION_METRIC = "test_accuracy"
SHORT = 8  # characters of a run id shown
AUDIT_TAGS = ("audit.verdict", "audit.time", "audit.by")
METRIC_COLUMNS = (
    "metric",
    "group",
    "n",
    "last: mean ± sd",
    "95% CI of the mean",
    "Δ mean vs A",
    "best (mean of runs' best)",
    "min",
    "max",
)


@dataclass(frozen=True)
class Block:
    kind: str  # h2 | p | list | table | picture
    text: str = ""  # h2, p: the text; picture: its alt text
    rows: tuple = ()  # list: items; table: (header, *rows) of strings
    file: str = ""  # picture: the file beside report.md
    data: Optional[bytes] = None  # picture: PNG


def build(groups: list, metric: str = DECISION_METRIC, store: str = "") -> tuple:
    """(title, [Block]) of the report on `groups` (the base's first)."""
    base = groups[0].runs[0]
    runs = sum(g.n for g in groups)
    title = f"Report: {base.run_id[:SHORT]} ({base.name})"
    intro = (
        f"{runs} run{'s' * (runs > 1)} from the MLflow store {store} in {len(groups)} group"
        f"{'s' * (len(groups) > 1)}: a group holds the runs of one configuration but for train.seed (tag "
        f"tfpipe.group). A is the base run's group; each figure is the last value a run logged, over its group."
    )
    blocks = [Block("p", intro), *_groups(groups), *_params(groups), *_metrics(groups, metric)]
    blocks += [*_decisions(groups, metric), *_pictures(groups), *_audits(groups)]
    return title, blocks


def _groups(groups: list) -> list:
    rows = [("group", "tfpipe.group", "runs", "train.seed")]
    for g in groups:
        named = ", ".join(f"{r.run_id[:SHORT]} ({r.name})" for r in g.runs)
        label = f"{g.label} (base)" if g is groups[0] else g.label
        rows.append((label, g.group_id, named + (": one run" if g.n == 1 else ""), ", ".join(g.seeds())))
    return [Block("h2", "Groups"), Block("table", rows=tuple(rows))]


def _params(groups: list) -> list:
    differ = differing_params(groups)
    if len(groups) == 1:
        return [Block("h2", "Parameters"), Block("p", "One group: no other configuration to compare with.")]
    if not differ:
        text = "None: the groups' params are the same (they differ in what the params do not hold)."
        return [Block("h2", "Parameters that differ"), Block("p", text)]
    rows = [("parameter", *(g.label for g in groups))]
    rows += [(key, *("(none)" if v is None else v for v in values)) for key, values in differ]
    return [Block("h2", "Parameters that differ"), Block("table", rows=tuple(rows))]


def _fmt(x: Optional[float], sign: bool = False) -> str:
    return "—" if x is None else f"{x:+.4f}" if sign else f"{x:.4f}"


def metrics_of(groups: list, metric: str) -> list:
    """The headline metrics some run logged, and `metric`."""
    logged = {m for g in groups for r in g.runs for m in r.metrics}
    return [m for m in HEADLINE if m in logged] + ([metric] if metric not in HEADLINE else [])


def _metrics(groups: list, metric: str) -> list:
    rows = [METRIC_COLUMNS]
    for name in metrics_of(groups, metric):
        base = summarize(groups[0], name)
        for g in groups:
            s = summarize(g, name, None if g is groups[0] or base is None else base.mean)
            if s is None:
                rows.append((name, g.label, "0", "not logged", "", "", "", "", ""))
                continue
            spread = f"{_fmt(s.mean)} ± {_fmt(s.sd)}" if s.sd is not None else f"{_fmt(s.mean)} (one run)"
            ci = f"[{_fmt(s.ci[0])}, {_fmt(s.ci[1])}]" if s.ci else "one run: no interval"
            delta = "(base)" if g is groups[0] else _fmt(s.delta, sign=True)
            rows.append((name, g.label, str(s.n), spread, ci, delta, _fmt(s.best), _fmt(s.low), _fmt(s.high)))
    text = (
        "Per group: the mean and standard deviation of each run's last value, the 95% confidence interval of the "
        "mean (t distribution), the mean's difference from A's; over each run's history its best value (highest "
        "accuracy or F1, lowest loss) averaged over the runs, and the lowest and highest value any run logged."
    )
    return [Block("h2", "Metrics"), Block("p", text), Block("table", rows=tuple(rows))]


def _decisions(groups: list, metric: str) -> list:
    if len(groups) == 1:
        return []
    text = (
        f"Is each group's mean {metric} different from A's beyond the noise between seeds? Welch's t-test "
        "(unequal variances) of the runs' last values: beyond the noise when the 95% confidence interval of the "
        "difference of the means leaves out 0."
    )
    items = tuple(decide(groups[0], g, metric) for g in groups[1:])
    return [Block("h2", "Decision"), Block("p", text), Block("list", rows=items)]


def _pictures(groups: list) -> list:
    out = [Block("h2", "Learning curves")]
    png = figures.curves(groups)
    if png is None:
        out.append(Block("p", "No run logged a per-epoch metric (val_accuracy, val_loss)."))
    else:
        alt = "val_accuracy and val_loss per epoch, each group's mean over its runs"
        out.append(Block("picture", alt, file="curves.png", data=png))
    out.append(Block("h2", "Confusion matrices (test split)"))
    png = figures.confusions(groups)
    if png is None:
        out.append(Block("p", f"No run logged {figures.CONFUSION_CSV} (the evaluate stage logs it)."))
    else:
        alt = "each group's confusion matrix on the test split, its runs' counts added up"
        out.append(Block("picture", alt, file="confusion.png", data=png))
    return out


def _audits(groups: list) -> list:
    if not any(r.tags.get(AUDIT_TAGS[0]) for g in groups for r in g.runs):
        return []
    rows = [("run", "group", "train.seed", *AUDIT_TAGS)]
    for g in groups:
        for run, seed in zip(g.runs, g.seeds()):
            tags = [run.tags.get(t, "not audited" if t == AUDIT_TAGS[0] else "") for t in AUDIT_TAGS]
            rows.append((run.run_id[:SHORT], g.label, seed, *tags))
    return [Block("h2", "Audit verdicts"), Block("table", rows=tuple(rows))]


def pictures(blocks: list) -> dict:
    """{file name: PNG bytes} of the pictures among `blocks`."""
    return {b.file: b.data for b in blocks if b.kind == "picture"}
