"""The pictures of a report, as PNG bytes (matplotlib's Agg canvas: no display, no pyplot global state).

`curves`: the learning curves, one panel per per-epoch metric (val_accuracy; val_loss, with the training loss per
epoch dashed), each group's mean over its runs at each epoch as a line, its runs faint behind it. `confusions`: the
test split's confusion matrix of each group side by side, the counts of its runs' `plots/confusion_matrix.csv`
(one row per test example, as the evaluate stage logs it) added up. None where no run logged what a picture needs.
What it does not do: statistics (`group`), or write files.
"""

from __future__ import annotations

import csv
import io
from typing import Optional

CONFUSION_CSV = "plots/confusion_matrix.csv"  # tfpipe.layout.CONFUSION_CSV, as the evaluate stage logs it
PANELS = (("val_accuracy", None), ("val_loss", "epoch_train_loss"))  # (solid, dashed) per panel
COLOURS = ("#1c7ed6", "#e8590c", "#2f9e44", "#ae3ec9", "#f08c00", "#0c8599", "#c2255c", "#5c940d")
MAX_ANNOTATED = 12  # classes: counts written in the cells up to this many


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _png(fig) -> bytes:
    out = io.BytesIO()
    fig.savefig(out, format="png", metadata={"Software": None})  # no tool's URL in the file
    return out.getvalue()


def mean_curve(runs, metric: str) -> tuple:
    """(steps, means): at each step some run logged `metric` at, the mean of the runs that did."""
    at: dict = {}
    for run in runs:
        for step, value in run.metrics.get(metric, ()):
            at.setdefault(step, []).append(value)
    steps = sorted(at)
    return steps, [sum(at[s]) / len(at[s]) for s in steps]


def curves(groups: list) -> Optional[bytes]:
    """The learning curves (see the module docstring), or None when no run has a per-epoch metric."""
    from matplotlib.ticker import MaxNLocator

    panels = [p for p in PANELS if any(r.metrics.get(p[0]) for g in groups for r in g.runs)]
    if not panels:
        return None
    fig = _figure(5.2 * len(panels), 3.8)
    for k, (solid, dashed) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), k + 1)
        for i, group in enumerate(groups):
            colour = COLOURS[i % len(COLOURS)]
            for run in group.runs if group.n > 1 else ():
                points = run.metrics.get(solid, ())
                ax.plot([s for s, _ in points], [v for _, v in points], color=colour, alpha=0.2, lw=1)
            steps, means = mean_curve(group.runs, solid)
            ax.plot(steps, means, color=colour, lw=2, marker="o", ms=3, label=f"{group.label} (n={group.n})")
            steps, means = mean_curve(group.runs, dashed) if dashed else ([], [])
            if steps:
                ax.plot(steps, means, color=colour, lw=1.5, ls="--")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("epoch")
        ax.set_title(solid + (f" (dashed: {dashed})" if dashed else ""), fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return _png(fig)


def confusion_counts(text: str) -> dict:
    """{(actual, predicted): count} of a confusion CSV (header `actual,predicted`, a row per example)."""
    counts: dict = {}
    rows = csv.reader(io.StringIO(text))
    if next(rows, None) != ["actual", "predicted"]:
        return {}
    for row in rows:
        if len(row) == 2:
            counts[tuple(row)] = counts.get(tuple(row), 0) + 1
    return counts


def group_confusion(group) -> tuple:
    """(summed counts, runs that logged the CSV) of a group."""
    total: dict[tuple[str, str], int] = {}
    logged = 0
    for run in group.runs:
        counts = confusion_counts(run.artifacts.get(CONFUSION_CSV, ""))
        logged += bool(counts)
        for key, count in counts.items():
            total[key] = total.get(key, 0) + count
    return total, logged


def confusions(groups: list) -> Optional[bytes]:
    """The groups' confusion matrices side by side, or None when no run logged one."""
    found = [(g, *group_confusion(g)) for g in groups]
    found = [(g, counts, logged) for g, counts, logged in found if logged]
    if not found:
        return None
    classes = sorted({c for _, counts, _ in found for key in counts for c in key})
    k = len(classes)
    side = max(3.2, 0.45 * k + 1.8)
    fig = _figure(side * len(found), side)
    for i, (group, counts, logged) in enumerate(found):
        ax = fig.add_subplot(1, len(found), i + 1)
        matrix = [[counts.get((a, p), 0) for p in classes] for a in classes]
        ax.imshow(matrix, cmap="Blues")
        if k <= MAX_ANNOTATED:
            top = max(max(row) for row in matrix) or 1
            for a in range(k):
                for p in range(k):
                    shade = "white" if matrix[a][p] > top / 2 else "black"
                    ax.text(p, a, str(matrix[a][p]), ha="center", va="center", fontsize=8, color=shade)
        ax.set_xticks(range(k), classes, rotation=45, ha="right", fontsize=8)
        ax.set_yticks(range(k), classes, fontsize=8)
        ax.set_xlabel("predicted")
        ax.set_ylabel("actual")
        ax.set_title(f"{group.label}: {logged} run{'s' * (logged > 1)} added up", fontsize=10)
    fig.tight_layout()
    return _png(fig)
