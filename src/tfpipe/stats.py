"""The statistics of seeds: a sample's mean, standard deviation and confidence interval of the mean, and Welch's
t-test of two samples (what `tfpipe report` prints and what `tfpipe promote` decides on).

    s = stats.describe([0.80, 0.81, 0.82])   # Spread(n=3, mean=0.81, sd=0.01, ci=(0.7852, 0.8348))
    w = stats.welch(a, b)                    # b - a: Welch(diff, se, df, low, high, t, p), or None

The standard deviation divides by n - 1; the interval of a mean is the t distribution's, n - 1 degrees of
freedom; Welch's interval of the difference uses the Welch-Satterthwaite degrees of freedom, its p-value is
scipy's two-sided `ttest_ind(b, a, equal_var=False)`. LEVEL is 95%. What it does not know: which value is
better (a metric's mode), where the values come from, or any run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

LEVEL = 0.95


@dataclass(frozen=True)
class Spread:
    n: int
    mean: float
    sd: Optional[float]  # None for one value
    ci: Optional[Tuple[float, float]]  # the mean's LEVEL interval; None for one value


@dataclass(frozen=True)
class Welch:
    """Welch's t-test of b against a: the difference of the means (b - a), its standard error, the degrees of
    freedom, the LEVEL interval of the difference [low, high], t and the two-sided p-value."""

    diff: float
    se: float
    df: float
    low: float
    high: float
    t: float
    p: float


def t_quantile(df: float) -> float:
    """The t distribution's two-sided LEVEL quantile for `df` degrees of freedom."""
    from scipy import stats

    return float(stats.t.ppf((1 + LEVEL) / 2, df))


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def describe(values: Sequence[float]) -> Spread:
    """n, mean, standard deviation (n - 1) and the LEVEL interval of the mean of `values` (one value or more)."""
    n, m = len(values), mean(values)
    if n < 2:
        return Spread(n, m, None, None)
    sd = math.sqrt(sum((x - m) ** 2 for x in values) / (n - 1))
    half = t_quantile(n - 1) * sd / math.sqrt(n)
    return Spread(n, m, sd, (m - half, m + half))


def welch(a: Sequence[float], b: Sequence[float]) -> Optional[Welch]:
    """Welch's t-test of `b` against `a`; None when either has fewer than two values or neither spreads (every
    value of both the same as the others of its sample: nothing to test against)."""
    from scipy import stats

    if len(a) < 2 or len(b) < 2:
        return None
    va, vb = (sum((x - mean(v)) ** 2 for x in v) / (len(v) - 1) / len(v) for v in (a, b))
    se = math.sqrt(va + vb)
    if se == 0:
        return None
    diff = mean(b) - mean(a)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = t_quantile(df) * se
    p = float(stats.ttest_ind(b, a, equal_var=False).pvalue)
    return Welch(diff, se, df, diff - half, diff + half, diff / se, p)
