"""MLflow pyfunc model (models-from-code) serving the exported TensorFlow SavedModel.

Logged by `tfpipe.tracking.Run.log_model` with `python_model=<this file>` and
`artifacts={"saved_model": <dir>, "class_names": <json>}`. MLflow copies this file into the
model, so it is standalone: it imports only numpy, pandas, mlflow and (when loading)
tensorflow, never `tfpipe`.

`mlflow.pyfunc.load_model(uri).predict(x)` takes raw inputs, exactly what the SavedModel's
`serving_default` signature takes:
  - images: uint8 array [N, H, W, C] (a single [H, W, C] image is treated as N=1);
  - texts: a list of str, a numpy array of str, a pandas Series, or a DataFrame with a `text`
    column (or a single column);
and returns a table (pandas DataFrame; over HTTP one JSON record per example): column `class`, the most
probable class's name, then one float32 probability column per class, named by `class_names.json` and in its
order (also in the model's metadata). A class itself named `class` moves that column to `predicted_class`.
"""

import hashlib
import json
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
from mlflow.pyfunc import PythonModel

PREDICT_BATCH = 256  # bounds memory for large requests
SEAL = "tfpipe_digest.json"  # tfpipe.files.SEAL: the export's digest of every file, written last


def check_seal(folder) -> None:
    """Refuse a SavedModel that is not whole (a half-done export or upload, a changed file): its files must be
    exactly those its seal lists, with those digests. Mirrors tfpipe.files.check_seal, which this standalone
    file cannot import."""
    root = Path(folder)
    try:
        recorded = json.loads((root / SEAL).read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        raise ValueError(f"{root}: no valid {SEAL}: the SavedModel was not saved or logged whole") from None
    actual = {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != SEAL
    }
    changed = sorted(set(recorded) ^ set(actual) | {k for k in recorded if actual.get(k) != recorded[k]})
    if changed:
        raise ValueError(f"{root}: {len(changed)} file(s) missing or changed since export ({changed[0]})")


class SavedModelClassifier(PythonModel):
    def load_context(self, context):
        import tensorflow as tf

        self._tf = tf
        check_seal(context.artifacts["saved_model"])
        self._model = tf.saved_model.load(context.artifacts["saved_model"])
        self._fn = self._model.signatures["serving_default"]
        _, kwargs = self._fn.structured_input_signature
        if len(kwargs) != 1:
            raise ValueError(f"serving_default must take exactly one input, takes {sorted(kwargs)}")
        ((self._input_name, self._spec),) = kwargs.items()
        outputs = self._fn.structured_outputs
        self._output = "probabilities" if "probabilities" in outputs else next(iter(outputs))
        self.class_names = None
        path = context.artifacts.get("class_names")
        if path:
            with open(path, encoding="utf-8") as fh:
                self.class_names = json.load(fh)

    def _to_batch(self, model_input):
        tf = self._tf
        if self._spec.dtype == tf.string:
            if isinstance(model_input, pd.DataFrame):
                column = "text" if "text" in model_input.columns else model_input.columns[0]
                values = model_input[column].tolist()
            elif isinstance(model_input, (str, bytes)):
                values = [model_input]
            else:
                values = np.asarray(model_input, dtype=object).reshape(-1).tolist()
            return np.asarray(
                [v if isinstance(v, bytes) else str(v).encode("utf-8") for v in values], dtype=object
            )
        if isinstance(model_input, pd.DataFrame):
            model_input = np.stack(model_input.iloc[:, 0].to_numpy())
        array = np.asarray(model_input)
        if array.ndim == len(self._spec.shape) - 1:
            array = array[None, ...]
        return array.astype(self._spec.dtype.as_numpy_dtype, copy=False)

    # The hint is one MLflow infers no schema from: the explicit signature logged with the model
    # governs input checks (texts arrive as a one-column DataFrame, images as an ndarray), and
    # MLflow does not warn about a missing type hint on every load.
    def predict(self, context, model_input: np.ndarray, params=None):
        batch = self._to_batch(model_input)
        parts = [np.zeros((0, len(self.class_names or [])), dtype=np.float32)]
        for start in range(0, len(batch), PREDICT_BATCH):
            chunk = self._tf.constant(batch[start : start + PREDICT_BATCH], dtype=self._spec.dtype)
            parts.append(self._fn(**{self._input_name: chunk})[self._output].numpy())
        probabilities = np.concatenate(parts).astype(np.float32)
        if not self.class_names:
            return probabilities
        return answer_table(probabilities, self.class_names)


def answer_table(probabilities: np.ndarray, class_names: list) -> pd.DataFrame:
    """Column 'class' (each example's most probable class name), then one probability column per class."""
    label = "predicted_class" if "class" in class_names else "class"
    names = np.asarray(class_names, dtype=object)
    best = names[probabilities.argmax(axis=1)] if len(probabilities) else names[:0]
    table = pd.DataFrame(probabilities, columns=list(class_names))
    table.insert(0, label, best)
    return table


mlflow.models.set_model(SavedModelClassifier())
