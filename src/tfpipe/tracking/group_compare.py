"""Whether a candidate's group of seeds beats the champion's past a threshold, and the lines that say how
(`registry.promote`, printed by `tfpipe promote`).

    threshold = Threshold.checked(0.01, 0.02, ("--min-delta", "--min-relative"))   # ConfigError: one line
    d = decide(candidate, champion, "version 3", metric="test_accuracy", mode="max", threshold=threshold)
    d.allowed, d.lines, d.why

The gain is the candidate group's mean minus the champion group's, turned so that more is better (mode min: the
champion's minus the candidate's). The threshold is the larger of `min_delta` (absolute) and `min_relative` times
the size of the champion's mean (0: off). With two or more runs on each side, Welch's t-test (`tfpipe.stats`):
the alias moves only when the whole 95% interval of the gain lies past the threshold (its worst end beyond it),
so a difference within the noise between seeds never moves it. With one run on either side, or no spread in
either group: no test, said so; the gain itself is compared. With the threshold off, a gain of exactly 0 is not
worse and moves it, unless `strict` (auto-promotion: better only), as before groups. When the candidate and the champion are
seeds of one group, the two runs are compared as single values. What it does not do: read the store
(`group_runs` does), or know how the values were chosen (`group_runs.Seeds` holds only recorded ones).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

from tfpipe import stats
from tfpipe.errors import ConfigError
from tfpipe.tracking.group_runs import Seeds
from tfpipe.tracking.outcome import METRIC_PARAM

SHORT = 8  # characters of a run id in a line


@dataclass(frozen=True)
class Threshold:
    min_delta: float = 0.0  # the gain must pass this (0: off)
    min_relative: float = 0.0  # ... and this fraction of the champion mean's size (0: off)
    names: tuple = ("min_delta", "min_relative")  # how the caller calls them, for the lines

    @classmethod
    def checked(cls, min_delta, min_relative, names: tuple) -> "Threshold":
        """The threshold, each value a finite number >= 0 (ConfigError naming it otherwise)."""
        for name, value in zip(names, (min_delta, min_relative)):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not ok or not math.isfinite(value) or value < 0:
                raise ConfigError(f"{name}={value!r}: must be a number >= 0 (0: off)")
        return cls(float(min_delta), float(min_relative), tuple(names))

    def of(self, champion_mean: float) -> float:
        return max(self.min_delta, self.min_relative * abs(champion_mean))

    def words(self, champion_mean: float) -> str:
        if not (self.min_delta or self.min_relative):
            return f"threshold off ({self.names[0]} 0, {self.names[1]} 0)"
        return (
            f"threshold {self.of(champion_mean):.4g} = the larger of {self.names[0]} {self.min_delta:g} and "
            f"{self.names[1]} {self.min_relative:g} x |{champion_mean:.4g}|"
        )


@dataclass(frozen=True)
class Decision:
    allowed: bool
    lines: tuple  # what was compared and how, a few lines
    why: str = ""  # a refusal, in words (one line)


def _spread(values: Sequence[float]) -> str:
    s = stats.describe(values)
    return f"n={s.n}, mean {s.mean:.4f}" + (f" ± {s.sd:.4f} (sd)" if s.sd is not None else " (one run)")


def _sides(candidate: Seeds, champion: Seeds, label: str, metric: str, mode: str) -> tuple:
    """(candidate, champion, lines): the two sides as compared (two seeds of one group: their two runs alone),
    and the lines naming the source of the values and each side's n, mean and sd."""
    lines = [
        f"{metric} ({mode} is better): each run's param {METRIC_PARAM}{metric}, never its metric or tags"
    ]
    if candidate.group == champion.group:
        lines.append(f"the candidate and {label} are seeds of one group {candidate.group}: single values")
        candidate = Seeds(candidate.run, candidate.group, {candidate.run: candidate.values[candidate.run]})
        mine = {k: v for k, v in champion.values.items() if k == champion.run}
        champion = Seeds(champion.run, champion.group, mine, () if mine else (champion.run,))
    for side, seeds, who in (
        ("candidate", candidate, f"run {candidate.run[:SHORT]}"),
        ("champion", champion, label),
    ):
        left = f"; left out, no recorded value: {len(seeds.unrecorded)} run(s)" if seeds.unrecorded else ""
        body = _spread(list(seeds.values.values())) if seeds.values else "no run records it"
        lines.append(f"{side}: group {seeds.group} of {who}: {body}{left}")
    return candidate, champion, lines


def decide(
    candidate: Seeds,
    champion: Seeds,
    label: str,
    *,
    metric: str,
    mode: str,
    threshold: Threshold = Threshold(),
    strict: bool = False,
) -> Decision:
    """May the alias move from the champion (`label`: its version, e.g. "version 3") to the candidate? The
    candidate's run records a value (`group_runs.value_of`); the champion's may not."""
    candidate, champion, lines = _sides(candidate, champion, label, metric, mode)
    if not champion.values:
        return Decision(True, tuple(lines + ["nothing to compare with: the champion's run records no value"]))
    a, b = list(champion.values.values()), list(candidate.values.values())
    sign = 1.0 if mode == "max" else -1.0
    diff, limit = stats.mean(b) - stats.mean(a), threshold.of(stats.mean(a))
    test = stats.welch(a, b)
    if test is None:
        few = "one run" if min(len(a), len(b)) < 2 else "no spread in either group"
        lines.append(
            f"difference {diff:+.4f} (candidate - champion); {few}: no test, compared as single values"
        )
        worst = sign * diff
    else:
        lines.append(
            f"difference {diff:+.4f} (candidate - champion), 95% CI [{test.low:+.4f}, {test.high:+.4f}], "
            f"Welch's t-test t={test.t:.2f}, df={test.df:.1f}, p={test.p:.4f}"
        )
        worst = min(sign * test.low, sign * test.high)  # the interval's end least in the candidate's favour
    allowed = worst > limit or (not strict and not limit and worst == 0)  # by hand, off: a tie is not worse
    where = "at the interval's worst end" if test else "(the difference itself)"
    verdict = "promoted" if allowed else "refused"
    lines.append(f"{threshold.words(stats.mean(a))}; better by {worst:+.4f} {where}: {verdict}")
    why = "" if allowed else _why(candidate, champion, label, metric, mode, worst, limit, test)
    return Decision(allowed, tuple(lines), why)


def _why(candidate, champion, label, metric, mode, worst, limit, test: Optional[stats.Welch]) -> str:
    """The refusal in one line; two single runs as before groups (the metric, both values)."""
    a, b = list(champion.values.values()), list(candidate.values.values())
    cand_run, champ_run = candidate.run, next(iter(champion.values))  # the run whose value it is
    if len(a) == len(b) == 1:
        past = f", not past the threshold {limit:.4g}" if limit else ""
        words = "not better than" if a[0] == b[0] else "worse than" if worst < 0 else "better than"
        return (
            f"run {cand_run} has {metric}={b[0]:.6g}, {words} {a[0]:.6g} of {label}{past} (run {champ_run}; "
            f"promote_mode={mode})"
        )
    past = f"past the threshold {limit:.4g}" if limit else "(threshold off)"
    where = (
        f"at the 95% interval's worst end (Welch p={test.p:.3g}"
        if test
        else "(the difference of the means, no test"
    )
    return (
        f"group {candidate.group} of run {cand_run} ({metric} mean {stats.mean(b):.6g}, n={len(b)}) does not beat "
        f"group {champion.group} of {label} (mean {stats.mean(a):.6g}, n={len(a)}) {past}: better by {worst:+.4g} "
        f"{where}; promote_mode={mode})"
    )
