"""Score the exported SavedModel, loaded from disk, on the prepared test split.

`evaluate()` uses exactly what is served: `tf.saved_model.load(dir).signatures['serving_default']`
on raw inputs (uint8 images or strings) -> {'probabilities': [B, K]}. `score()` is the pure
numpy part (hand-checkable). `write_reports()` writes, each atomically:
  - metrics JSON (DVC metrics, flat: one `dvc exp show` column each): accuracy, loss,
    macro_precision/recall/f1, num_examples, roc_auc (binary tasks only);
  - per-class JSON (DVC plots): a list of {class, precision, recall, f1, support} rows;
  - confusion CSV in the shape of DVC's `confusion` plot template: one row per test example,
    columns `actual,predicted`, class names as values;
  - confusion PNG (matplotlib, Agg canvas; no pyplot global state).
No mlflow import here: the stage logs the files through `tracking`.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from tfpipe import files, progress
from tfpipe.errors import DataError

EPSILON = 1e-7  # probability clip for the cross-entropy, as Keras does
TEST_SPLIT = "test"


@dataclass
class EvalResult:
    class_names: list
    num_examples: int
    accuracy: float
    loss: float
    precision: list  # per class, in class_names order
    recall: list
    f1: list
    support: list
    macro_precision: float
    macro_recall: float
    macro_f1: float
    confusion: np.ndarray  # [K, K] counts, rows = actual, columns = predicted
    labels: np.ndarray = field(repr=False)  # [N] actual class indices
    predictions: np.ndarray = field(repr=False)  # [N] argmax class indices
    roc_auc: Optional[float] = None  # binary tasks with both classes present
    # on the test split without the examples that duplicate a train example (the data report's leakage list);
    # None when there are none
    accuracy_dedup: Optional[float] = None
    num_examples_dedup: Optional[int] = None

    def scalar_metrics(self) -> dict:
        out = {
            "accuracy": self.accuracy,
            "loss": self.loss,
            "macro_precision": self.macro_precision,
            "macro_recall": self.macro_recall,
            "macro_f1": self.macro_f1,
            "num_examples": self.num_examples,
        }
        if self.roc_auc is not None:
            out["roc_auc"] = self.roc_auc
        if self.accuracy_dedup is not None:
            out["accuracy_dedup"] = self.accuracy_dedup
        if self.num_examples_dedup is not None:  # set with accuracy_dedup
            out["num_examples_dedup"] = self.num_examples_dedup
        return out

    def to_dict(self) -> dict:
        """The metrics JSON: the flat headline scalars only (the per-class rows have their own file)."""
        return self.scalar_metrics()

    def per_class_rows(self) -> list:
        """One row per class: the shape DVC plots read from a JSON list."""
        return [
            {"class": name, "precision": p, "recall": r, "f1": f, "support": s}
            for name, p, r, f, s in zip(self.class_names, self.precision, self.recall, self.f1, self.support)
        ]


# ----------------------------------------------------------------------------- metrics (scikit-learn)


def binary_roc_auc(labels: np.ndarray, scores: np.ndarray) -> Optional[float]:
    """ROC AUC of the positive class's scores (scikit-learn; ties count half); None if a class is absent."""
    from sklearn.metrics import roc_auc_score

    labels = np.asarray(labels).astype(bool)
    if labels.all() or not labels.any():
        return None
    return float(roc_auc_score(labels, np.asarray(scores, dtype=np.float64)))


def score(labels, probabilities, class_names) -> EvalResult:
    """Metrics from actual class indices [N] and predicted probabilities [N, K] (scikit-learn's; a class never
    predicted or never present scores 0, not a warning)."""
    from sklearn.metrics import confusion_matrix, log_loss, precision_recall_fscore_support

    labels = np.asarray(labels, dtype=np.int64).reshape(-1)
    probabilities = np.asarray(probabilities, dtype=np.float64)
    k, n = len(class_names), labels.size
    if probabilities.ndim != 2 or probabilities.shape != (n, k):
        raise DataError(f"model output has shape {probabilities.shape}; expected ({n}, {k}) for {k} classes")
    if n and (labels.min() < 0 or labels.max() >= k):
        raise DataError(
            f"test labels span {labels.min()}..{labels.max()}, outside the {k} classes of the manifest"
        )
    predictions = probabilities.argmax(axis=1) if n else np.zeros(0, dtype=np.int64)
    classes = list(range(k))
    confusion = (
        confusion_matrix(labels, predictions, labels=classes) if n else np.zeros((k, k), dtype=np.int64)
    )
    precision, recall, f1, support = (
        precision_recall_fscore_support(labels, predictions, labels=classes, zero_division=0)
        if n
        else (np.zeros(k),) * 3 + (np.zeros(k, dtype=np.int64),)
    )
    clipped = np.clip(probabilities, EPSILON, 1.0)
    loss = (
        float(log_loss(labels, clipped / clipped.sum(axis=1, keepdims=True), labels=classes))
        if n
        else float("nan")
    )
    accuracy = float(np.trace(confusion) / n) if n else float("nan")
    roc_auc = binary_roc_auc(labels == 1, probabilities[:, 1]) if k == 2 and n else None
    return EvalResult(
        class_names=list(class_names),
        num_examples=int(n),
        accuracy=accuracy,
        loss=loss,
        precision=precision.tolist(),
        recall=recall.tolist(),
        f1=f1.tolist(),
        support=np.asarray(support).astype(int).tolist(),
        macro_precision=float(precision.mean()) if k else 0.0,
        macro_recall=float(recall.mean()) if k else 0.0,
        macro_f1=float(f1.mean()) if k else 0.0,
        confusion=confusion,
        roc_auc=roc_auc,
        labels=labels,
        predictions=predictions,
    )


# ----------------------------------------------------------------------------- the SavedModel


def check_complete(saved_model_dir: Path) -> None:
    """A SavedModel is loaded only when its export finished: the seal written last matches every file."""
    if not (saved_model_dir / "saved_model.pb").is_file():
        raise DataError(
            f"{saved_model_dir}: no SavedModel found (saved_model.pb missing); run the train stage first"
        )
    why = files.check_seal(saved_model_dir)
    if why:
        raise DataError(f"{saved_model_dir}: incomplete SavedModel: {why}; re-run the train stage")


def _serving_fn(saved_model_dir: Path):
    import tensorflow as tf

    from tfpipe.models import program

    check_complete(saved_model_dir)
    program.check(saved_model_dir)  # its ops, read before TensorFlow loads (runs) any of them
    loaded = tf.saved_model.load(str(saved_model_dir))
    if "serving_default" not in loaded.signatures:
        raise DataError(
            f"{saved_model_dir}: SavedModel has no 'serving_default' signature (has {sorted(loaded.signatures)})"
        )
    fn = loaded.signatures["serving_default"]
    _, kwargs = fn.structured_input_signature
    if len(kwargs) != 1:
        raise DataError(f"{saved_model_dir}: serving_default must take one raw input, takes {sorted(kwargs)}")
    (input_name,) = kwargs
    outputs = fn.structured_outputs
    output = "probabilities" if "probabilities" in outputs else None
    if output is None:
        if len(outputs) != 1:
            raise DataError(
                f"{saved_model_dir}: serving_default has no 'probabilities' output (has {sorted(outputs)})"
            )
        (output,) = outputs
    return loaded, fn, input_name, output


def evaluate(
    saved_model_dir, prepared_dir, *, batch_size: int = 256, leaked_hashes=frozenset()
) -> EvalResult:
    """Load the SavedModel from disk and score it on the prepared test split (and, when `leaked_hashes` names
    test examples by content hash, on the split without them: accuracy_dedup)."""
    from tfpipe import data

    saved_model_dir, prepared_dir = Path(saved_model_dir), Path(prepared_dir)
    manifest = data.load_manifest(prepared_dir)
    class_names = manifest["class_names"]
    loaded, fn, input_name, output = _serving_fn(saved_model_dir)  # keep `loaded` alive while fn runs
    dataset = data.make_dataset(
        prepared_dir, TEST_SPLIT, batch_size=batch_size, training=False, seed=0, cache=False
    )
    label_batches: list[np.ndarray] = []
    probability_batches: list[np.ndarray] = []
    leaked: list[bool] = []
    total = -(-int(manifest["splits"][TEST_SPLIT]["num_examples"]) // batch_size)
    batches = progress.bar(total, "evaluate", "batch", iterable=dataset) if progress.wanted() else dataset
    for features, batch_labels in batches:
        probability_batches.append(fn(**{input_name: features})[output].numpy())
        label_batches.append(batch_labels.numpy())
        leaked.extend(_leaked(manifest["modality"], features.numpy(), leaked_hashes))
    del loaded
    k = len(class_names)
    labels = np.concatenate(label_batches) if label_batches else np.zeros(0, dtype=np.int64)
    probabilities = np.concatenate(probability_batches) if probability_batches else np.zeros((0, k))
    result = score(labels, probabilities, class_names)
    keep = ~np.asarray(leaked, dtype=bool)
    if leaked and not keep.all():
        result.num_examples_dedup = int(keep.sum())
        hits = result.predictions[keep] == result.labels[keep]
        result.accuracy_dedup = float(hits.mean()) if keep.any() else float("nan")
    return result


def _leaked(modality: str, features: np.ndarray, hashes) -> list:
    """Per example of a batch: is its content one of `hashes` (tfpipe.data.dedup.content_hash)?"""
    if not hashes:
        return [False] * len(features)
    from tfpipe.data.dedup import content_hash

    return [content_hash(modality, x.tobytes() if modality == "image" else x) in hashes for x in features]


# ----------------------------------------------------------------------------- reports


def _finite(value):
    """JSON has no NaN: None instead (empty test split)."""
    if isinstance(value, float) and not np.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def write_metrics(result: EvalResult, path) -> None:
    files.write_json(path, _finite(result.to_dict()))


def write_per_class(result: EvalResult, path) -> None:
    files.write_json(path, _finite(result.per_class_rows()))


def write_confusion_csv(result: EvalResult, path) -> None:
    names = result.class_names
    with files.atomic_open(path, newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["actual", "predicted"])
        writer.writerows(
            (names[a], names[p]) for a, p in zip(result.labels.tolist(), result.predictions.tolist())
        )


def write_confusion_png(result: EvalResult, path) -> None:
    """scikit-learn's ConfusionMatrixDisplay on a matplotlib Agg figure (no display needed)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from sklearn.metrics import ConfusionMatrixDisplay

    k = len(result.class_names)
    size = max(4.0, 0.6 * k + 2.5)
    fig = Figure(figsize=(size, size * 0.9), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    display = ConfusionMatrixDisplay(result.confusion, display_labels=result.class_names)
    display.plot(ax=ax, cmap="Blues", xticks_rotation=45, colorbar=True, values_format="d")
    ax.set_xlabel("predicted")
    ax.set_ylabel("actual")
    accuracy = "n/a" if not np.isfinite(result.accuracy) else f"{result.accuracy:.4f}"
    ax.set_title(f"Confusion matrix (test, n={result.num_examples}, accuracy {accuracy})")
    fig.tight_layout()
    with files.atomic_open(path, "wb") as fh:
        fig.savefig(fh, format="png")


def write_reports(
    result: EvalResult, *, metrics_path, confusion_csv_path, confusion_png_path, per_class_path=None
) -> None:
    """Each report written whole; `per_class_path` None: no per-class file."""
    for path, write in (
        (metrics_path, write_metrics),
        (per_class_path, write_per_class),
        (confusion_csv_path, write_confusion_csv),
        (confusion_png_path, write_confusion_png),
    ):
        if path is None:
            continue
        with files.saving(Path(path).parent, Path(path).name):
            write(result, path)
