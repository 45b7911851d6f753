"""Runs as seeds of configurations, and what their figures say (`tfpipe report`).

Groups: runs of one configuration but for the seed (`tfpipe.tracking.groups`: the tag `tfpipe.group`, else the
same digest of the run's params); the base run's group first, then the others as their runs were named, labelled
A, B, C. Per group and metric (`summarize`): the last value of each run (at its last step), their mean, standard
deviation (n - 1) and the 95% confidence interval of the mean (t distribution, n - 1 degrees of freedom; one run:
none); over each run's history its best value (the highest of an accuracy or F1, the lowest of a loss), averaged
over the runs, and the lowest and highest value any run logged; the mean's difference from the base group's. The
decision (`decide`): Welch's t-test of a metric's last values, the group against the base (scipy), read as its 95%
confidence interval of the difference of the means; fewer than two runs on either side: no test, said so.
What it does not do: read the store, draw, or write anything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Tuple

from tfpipe.tracking.groups import GROUP_TAG, SEED_PARAM, configuration, group_id

LEVEL = 0.95
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
    return run.tags.get(GROUP_TAG) or group_id(run.params)


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


def t_quantile(df: float) -> float:
    """The t distribution's two-sided LEVEL quantile for `df` degrees of freedom."""
    from scipy import stats

    return float(stats.t.ppf((1 + LEVEL) / 2, df))


def summarize(group: Group, metric: str, base_mean: Optional[float] = None) -> Optional[Summary]:
    """The metric's figures over the group's runs that logged it; None when none did."""
    runs = [r for r in group.runs if r.metrics.get(metric)]
    if not runs:
        return None
    lasts = [r.last(metric) for r in runs]
    n, mean = len(lasts), sum(lasts) / len(lasts)
    sd = math.sqrt(sum((x - mean) ** 2 for x in lasts) / (n - 1)) if n > 1 else None
    ci = None
    if sd is not None:
        half = t_quantile(n - 1) * sd / math.sqrt(n)
        ci = (mean - half, mean + half)
    pick = min if lower_is_better(metric) else max
    values = [[v for _, v in r.metrics[metric]] for r in runs]
    return Summary(
        n=n,
        mean=mean,
        sd=sd,
        ci=ci,
        delta=None if base_mean is None else mean - base_mean,
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
    from scipy import stats

    va, vb = (sum((x - sum(v) / len(v)) ** 2 for x in v) / (len(v) - 1) / len(v) for v in (a, b))
    se = math.sqrt(va + vb)
    if se == 0:
        same = "the same value in every run of both groups"
        return f"{same}: no spread to test against ({'no difference' if diff == 0 else 'different'})"
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = t_quantile(df) * se
    p = float(stats.ttest_ind(b, a, equal_var=False).pvalue)
    low, high = diff - half, diff + half
    numbers = f"95% CI of the difference [{low:+.4f}, {high:+.4f}], Welch's t-test t={diff / se:.2f}, "
    numbers += f"df={df:.1f}, p={p:.4f}"
    if low <= 0 <= high:
        return (
            f"{numbers}: within the noise between seeds (the interval holds 0): no evidence of a difference"
        )
    better = (diff < 0) == lower_is_better(metric)
    return f"{numbers}: beyond the noise between seeds: {'better' if better else 'worse'} than the base"
