"""MLflow pyfunc model (models-from-code) serving the exported TensorFlow SavedModel.

Logged by `tfpipe.tracking.Run.log_model` with `python_model=<this file>` and
`artifacts={"saved_model": <dir>, "class_names": <json>}`. MLflow copies this file into the
model, so it is standalone: it imports only numpy, pandas, mlflow and (when loading)
tensorflow, never `tfpipe`.

`mlflow.pyfunc.load_model(uri).predict(x)` takes raw inputs, exactly what the SavedModel's
`serving_default` signature takes:
  - images: uint8 array [N, H, W, C] (a single [H, W, C] image is treated as N=1); over HTTP, nested lists of
    integers 0-255. Any other shape or any other values (floats, even 255.0) are refused in one line leading
    with what is expected (`InputRefused`);
  - texts: a list of str, a numpy array of str, a pandas Series, or a DataFrame with a `text`
    column (or a single column);
and returns a table (pandas DataFrame; over HTTP one JSON record per example): column `class`, the most
probable class's name, then one float32 probability column per class, named by the class names sealed inside the
SavedModel (`assets/class_names.txt`, one per line) and in their order; `class_names.json` (outside the seal) only
for a SavedModel that holds none. A class itself named `class` moves that column to `predicted_class`.
"""

import hashlib
import json
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE
from mlflow.pyfunc import PythonModel

PREDICT_BATCH = 256  # bounds memory for large requests
SEAL = "tfpipe_digest.json"  # tfpipe.files.SEAL: the export's digest of every file, written last
CLASS_NAMES = "assets/class_names.txt"  # tfpipe.models.export's class names, inside the seal


def sealed_class_names(folder):
    """The class names sealed inside the SavedModel (check_seal first), or None when it holds none."""
    path = Path(folder) / CLASS_NAMES
    if not path.is_file():
        return None
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line != ""]


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


class InputRefused(MlflowException):
    """An input the model does not take, in one line that leads with what it expects (HTTP 400)."""

    def __init__(self, line: str):
        super().__init__(line, error_code=INVALID_PARAMETER_VALUE)
        self.line = line

    def serialize_as_json(self):
        # MLflow's scoring server prefixes the message with 'Failed to predict data <the whole request>' before
        # replying: the reply's message stays the one line
        self.message = self.line
        return super().serialize_as_json()


def image_batch(model_input, shape: tuple) -> np.ndarray:
    """`model_input` as a uint8 batch of `shape` ((-1, H, W, C)), else InputRefused. Floats are refused even when
    integer-valued: an image scaled to [0, 1] (1.0 = white) would otherwise pass as near-black pixels."""
    expected = f"expected images of shape {shape} uint8 (0-255)"
    try:
        if isinstance(model_input, pd.DataFrame):
            model_input = np.stack(list(model_input.iloc[:, 0].to_numpy()))  # one array per row
        array = np.asarray(model_input)
    except ValueError:  # ragged nested lists
        raise InputRefused(f"{expected}; got nested lists of uneven lengths") from None
    if array.ndim == len(shape) - 1:
        array = array[None, ...]
    if array.ndim != len(shape) or any(e not in (-1, a) for e, a in zip(shape[1:], array.shape[1:])):
        raise InputRefused(f"{expected}; got shape {array.shape}")
    if array.dtype == np.uint8:
        return array
    flat = array.reshape(-1)
    if array.dtype.kind in "iu":
        flat = flat[(flat < 0) | (flat > 255)]
        if not flat.size:
            return array.astype(np.uint8)
    elif array.dtype.kind == "f":
        flat = np.concatenate([flat[flat != np.round(flat)], flat])  # a fractional value first, if any
    kind = "str" if array.dtype.kind in "US" else array.dtype.name
    such_as = f" such as {flat[0].item()!r}" if flat.size else ""
    raise InputRefused(f"expected uint8 pixel values 0-255; got {kind} values{such_as}")


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
        if self._spec.dtype != tf.string:
            self._shape = tuple(-1 if d is None else d for d in self._spec.shape.as_list())
        outputs = self._fn.structured_outputs
        self._output = "probabilities" if "probabilities" in outputs else next(iter(outputs))
        self.class_names = sealed_class_names(context.artifacts["saved_model"])
        path = context.artifacts.get("class_names")
        if self.class_names is None and path:  # outside the seal: trusted only when the SavedModel seals none
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
        return image_batch(model_input, self._shape)

    # The hint is one MLflow infers no schema from, so MLflow does not warn about a missing type hint on
    # every load: texts are checked against the logged signature and arrive as a one-column DataFrame;
    # images arrive raw (MLflow is told not to enforce their signature: tfpipe.tracking.models) and are
    # checked here.
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
