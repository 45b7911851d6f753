"""Runs as seeds of configurations, and what their figures say (`tfpipe report`).

Groups: runs of one configuration but for the seed (`tfpipe.tracking.groups`: the tag `tfpipe.group`, else the
same digest of the run's params); the base run's group first, then the others as their runs were named, labelled
A, B, C. Per group and metric (`summarize`): the last value of each run (at its last step), their mean, standard
deviation (n - 1) and the 95% confidence interval of the mean (t distribution, n - 1 degrees of freedom; one run:
none); over each run's history its best value (the highest of an accuracy or F1, the lowest of a loss), averaged
over the runs, and the lowest and highest value any run logged; the mean's difference from the base group's. The
decision (`decide`): Welch's t-test of a metric's last values, the group against the base, read as its 95%
confidence interval of the difference of the means; fewer than two runs on either side: no test, said so. The
statistics are `tfpipe.stats`' (shared with `tfpipe promote`). What it does not do: read the store, draw, or write
anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from tfpipe import stats
from tfpipe.tracking.groups import SEED_PARAM, configuration, recorded_group

LOWER_IS_BETTER = ("loss",)  # a metric whose name holds one of these: lower is better


@dataclass(frozen=True)
class Group:
    label: str  # A (the base), B, C, ...
    group_id: str
    runs: tuple  # RunHistory, in the order named

    @property
    def n(self) -> int:
        return len(self.runs)

    def seeds(self) -> list:
        return [r.params.get(SEED_PARAM, "?") for r in self.runs]


@dataclass(frozen=True)
class Summary:
    """One metric of one group: see the module docstring."""

    n: int
    mean: float
    sd: Optional[float]  # None for one run
    ci: Optional[Tuple[float, float]]  # the mean's 95% interval; None for one run
    delta: Optional[float]  # mean - the base group's mean; None for the base or when it lacks the metric
    best: float
    low: float
    high: float


def group_of(run) -> str:
    """The run's group: its tag, else the digest of its params."""
    return recorded_group(run.tags, run.params)


def group_runs(runs: list) -> list:
    """Groups of `runs` (RunHistory; the first is the base), the base's first, then in the order named."""
    by_id: dict = {}
    for run in runs:
        by_id.setdefault(group_of(run), []).append(run)
    return [Group(chr(ord("A") + i), gid, tuple(rs)) for i, (gid, rs) in enumerate(by_id.items())]


def differing_params(groups: list) -> list:
    """[(key, [value per group])] of the configuration keys whose values are not the same in every group (a
    group's values: its first run's; a key a run lacks: None)."""
    configs = [configuration(g.runs[0].params) for g in groups]
    keys = sorted(set().union(*configs))
    rows = [(k, [c.get(k) for c in configs]) for k in keys]
    return [(k, values) for k, values in rows if len(set(values)) > 1]


def lower_is_better(metric: str) -> bool:
    return any(word in metric for word in LOWER_IS_BETTER)


def summarize(group: Group, metric: str, base_mean: Optional[float] = None) -> Optional[Summary]:
    """The metric's figures over the group's runs that logged it; None when none did."""
    runs = [r for r in group.runs if r.metrics.get(metric)]
    if not runs:
        return None
    spread = stats.describe([r.last(metric) for r in runs])
    n = spread.n
    pick = min if lower_is_better(metric) else max
    values = [[v for _, v in r.metrics[metric]] for r in runs]
    return Summary(
        n=n,
        mean=spread.mean,
        sd=spread.sd,
        ci=spread.ci,
        delta=None if base_mean is None else spread.mean - base_mean,
        best=sum(pick(v) for v in values) / n,
        low=min(min(v) for v in values),
        high=max(max(v) for v in values),
    )


def lasts(group: Group, metric: str) -> list:
    return [r.last(metric) for r in group.runs if r.metrics.get(metric)]


def decide(base: Group, other: Group, metric: str) -> str:
    """One line: is `other`'s mean of `metric` different from `base`'s beyond the noise between seeds?"""
    a, b = lasts(base, metric), lasts(other, metric)
    head = f"{other.label} against {base.label} (base), {metric}:"
    if not a or not b:
        missing = " and ".join(g.label for g, v in ((base, a), (other, b)) if not v)
        return f"{head} no test: group {missing} has not logged it"
    diff = sum(b) / len(b) - sum(a) / len(a)
    if len(a) < 2 or len(b) < 2:
        few = " and ".join(f"{g.label} is one run" for g, v in ((base, a), (other, b)) if len(v) < 2)
        return (
            f"{head} {diff:+.4f}; no test: {few} (a t-test needs two or more seeds per group: "
            f"train more with other {SEED_PARAM})"
        )
    return f"{head} {diff:+.4f}; " + _welch_words(a, b, diff, metric)


def _welch_words(a: list, b: list, diff: float, metric: str) -> str:
    """Welch's t-test of b against a, in words: the interval of the difference, t, df, p, and the verdict."""
    w = stats.welch(a, b)
    if w is None:
        same = "the same value in every run of both groups"
        return f"{same}: no spread to test against ({'no difference' if diff == 0 else 'different'})"
    numbers = f"95% CI of the difference [{w.low:+.4f}, {w.high:+.4f}], Welch's t-test t={w.t:.2f}, "
    numbers += f"df={w.df:.1f}, p={w.p:.4f}"
    if w.low <= 0 <= w.high:
        return (
            f"{numbers}: within the noise between seeds (the interval holds 0): no evidence of a difference"
        )
    better = (diff < 0) == lower_is_better(metric)
    return f"{numbers}: beyond the noise between seeds: {'better' if better else 'worse'} than the base"
