"""Logging the exported SavedModel as an MLflow pyfunc model (models-from-code).

Why pyfunc-from-code and not `mlflow.tensorflow.log_model`: in MLflow 3.17 the latter takes a
live Keras model or tf.Module object and re-saves it (a tf.Module is then served through its
`__call__`), not an existing SavedModel folder with a `serving_default` signature.
Models-from-code logs `serving_model.py` plus the exported SavedModel folder as-is, so MLflow
serves the exact files the evaluate stage scored.
"""

from __future__ import annotations

import json
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tfpipe import files, phases
from tfpipe.errors import TrackingError

SERVING_MODEL_FILE = Path(__file__).with_name("serving_model.py")
MAX_EXAMPLE_ROWS = 2
# what the served model imports; pinned to this environment's versions
REQUIREMENTS = (("tensorflow-cpu", "tensorflow"), ("mlflow",), ("numpy",), ("pandas",))


def pip_requirements() -> list[str]:
    """Explicit pins: without them MLflow infers requirements by loading the model in a
    subprocess (importing TensorFlow again: many seconds)."""
    reqs = []
    for alternatives in REQUIREMENTS:
        for dist in alternatives:
            try:
                reqs.append(f"{dist}=={metadata.version(dist)}")
                break
            except metadata.PackageNotFoundError:
                continue
    return reqs


def _texts(example: Any) -> list[str]:
    # Mirrors serving_model.py's input handling on purpose: that file is loaded by MLflow as
    # models-from-code without tfpipe installed, so it cannot import this module (nor this it,
    # since importing it calls mlflow.models.set_model).
    if isinstance(example, pd.DataFrame):
        column = "text" if "text" in example.columns else example.columns[0]
        values = example[column].tolist()
    elif isinstance(example, (str, bytes)):
        values = [example]
    else:
        values = np.asarray(example, dtype=object).reshape(-1).tolist()
    return [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in values]


def signature_and_example(modality: str, input_example: Any, class_names: list):
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, DataType, Schema, TensorSpec

    label = "predicted_class" if "class" in class_names else "class"  # serving_model.answer_table's columns
    outputs = Schema(
        [ColSpec(DataType.string, label), *(ColSpec(DataType.float, str(n)) for n in class_names)]
    )
    if modality == "text":
        # An unnamed string column: MLflow then accepts a list of str, a numpy array of str/object,
        # a Series or a one-column DataFrame (a column *named* 'text' would reject all but the last).
        texts = None if input_example is None else _texts(input_example)[:MAX_EXAMPLE_ROWS]
        return ModelSignature(inputs=Schema([ColSpec(DataType.string)]), outputs=outputs), texts
    if modality == "image":
        example, shape = None, (-1, -1, -1)
        if input_example is not None:
            example = np.asarray(input_example)
            if example.dtype != np.uint8:
                raise TrackingError(
                    f"log_model: image input example must be uint8 (raw pixels), got {example.dtype}"
                )
            if example.ndim == 3:
                example = example[None]
            example = example[:MAX_EXAMPLE_ROWS]
            shape = example.shape[1:]
        inputs = Schema([TensorSpec(np.dtype(np.uint8), (-1, *shape))])
        signature = ModelSignature(inputs=inputs, outputs=outputs)
        # The signature says what the model takes (the UI shows it, loading.py reads the image shape from it), but
        # MLflow must not enforce it: its check runs before serving_model.py's and answers a wrong shape or dtype
        # with the whole array ahead of the expected shape, and its JSON parsing casts a request's floats to uint8
        # (0.5 -> 0) unseen. Marked as from a type hint, MLflow enforces nothing and passes the raw input (over
        # HTTP the request's nested lists; requests then take only the README's {"inputs": ...} form) to
        # serving_model.image_batch, which refuses a wrong one in one line. A looser TensorSpec cannot: MLflow
        # requires any dtype but object exactly (in process, uint8 arrays only, with its message) and waves object
        # through only as shape (-1,), which shows users nothing. The flag is private MLflow API: mlflow is pinned
        # (pip_requirements); tests/test_tracking.py and the end-to-end serving test check both ways in.
        signature._is_signature_from_type_hint = True
        return signature, example
    raise TrackingError(f"log_model: modality={modality!r}; allowed: image, text")


def _record_digest(run_id: str, digest: str) -> None:
    """The SavedModel's digest as the run's DIGEST_PARAM, which predict and warm starts check the downloaded model
    against. Logged once: MLflow refuses another value (the same one is fine: a resumed stage logging it again)."""
    import mlflow
    from mlflow.exceptions import MlflowException

    from tfpipe.tracking.model_uri import DIGEST_PARAM

    try:
        mlflow.log_param(DIGEST_PARAM, digest)
    except MlflowException:
        recorded = mlflow.get_run(run_id).data.params.get(DIGEST_PARAM)
        if recorded != digest:
            raise TrackingError(
                f"log_model: run {run_id} already records {DIGEST_PARAM}={recorded} (set by someone else, or by an "
                "earlier export); a model that does not match it would be refused: not logged"
            ) from None


@phases.phase("log_model")  # without MLflow's serving check of the example (`_log_unvalidated`)
def log_pyfunc_model(
    run, saved_model_dir, *, modality: str, input_example: Any, class_names: list, name: str
) -> str:
    """The SavedModel logged as the run's model `name`; returns its model URI (`models:/<id>`). Once per run: an
    earlier attempt of the same run (killed after recording the digest) is recognised and its upload reused."""
    import mlflow

    saved_model_dir = Path(saved_model_dir)
    if not (saved_model_dir / "saved_model.pb").is_file():
        raise TrackingError(f"{saved_model_dir}: no saved_model.pb; export the SavedModel before logging it")
    why = files.check_seal(saved_model_dir)
    if why:
        raise TrackingError(f"{saved_model_dir}: not logged: {why}; export it again (the train stage)")
    active = mlflow.active_run()
    if active is None or active.info.run_id != run.run_id:
        raise TrackingError(f"log_model: run {run.run_id} is not the active MLflow run (was it closed?)")
    digest = files.seal_digest(saved_model_dir)
    _record_digest(run.run_id, digest)
    done = _earlier_attempt(run, name, digest)
    if done is not None:  # an attempt killed after its upload, before the run finished
        return f"models:/{done}"
    signature, example = signature_and_example(modality, input_example, list(class_names))
    with tempfile.TemporaryDirectory(prefix="tfpipe-model-") as tmp:
        names_file = Path(tmp) / "class_names.json"
        names_file.write_text(json.dumps(list(class_names)), encoding="utf-8")
        info = _log_unvalidated(
            name=name,
            python_model=str(SERVING_MODEL_FILE),
            artifacts={"saved_model": str(saved_model_dir), "class_names": str(names_file)},
            signature=signature,
            input_example=example,
            pip_requirements=pip_requirements(),
            metadata={
                "class_names": list(class_names),
                "modality": modality,
                "output": "a table: 'class' (the most probable class name), then a float32 probability "
                "column per class name, in class_names order",
            },
        )
    return info.model_uri


class _Pyfunc:
    """`mlflow.pyfunc` as `Model.log`'s flavor: its save_model without Model.log's `validate_serving_input`, which
    Model.log hands on to the flavor and `mlflow.pyfunc.save_model` refuses (MLflow's transformers flavor takes it)."""

    __name__ = "mlflow.pyfunc"

    @staticmethod
    def save_model(*, validate_serving_input: bool = True, **kwargs) -> None:
        import mlflow.pyfunc

        mlflow.pyfunc.save_model(**kwargs)


def _log_unvalidated(**kwargs):
    """`mlflow.pyfunc.log_model(**kwargs)` of a models-from-code model (the same `Model.log` call, flavor name
    `pyfunc.ModelFromCode`) without MLflow's serving check of the input example: that check loads the SavedModel a
    second time in the train process and serves the example through MLflow's scoring path (issue 52: 7 to 17 s of
    a loaded 2-core machine), and on failure only logs a warning. The files logged are the same (the example and
    its serving form included). What the check would say is tests/test_log_model_serving.py's claim: the logged
    model serves its own `serving_input_example.json` as `mlflow models serve` parses it."""
    from mlflow.models import Model

    return Model.log(
        artifact_path=None,
        flavor=_Pyfunc,
        flavor_name="pyfunc.ModelFromCode",
        validate_serving_input=False,
        **kwargs,
    )


def _earlier_attempt(run, name: str, digest: str):
    """The id of this run's logged model `name` of this digest that an earlier attempt finished uploading (READY),
    or None; what an attempt killed mid-upload left (PENDING, FAILED) is deleted, so the run holds one model."""
    from mlflow.entities import LoggedModelStatus

    from tfpipe.tracking.model_uri import DIGEST_PARAM

    found = run.client.search_logged_models(
        experiment_ids=[run.experiment_id], filter_string=f"source_run_id = '{run.run_id}'"
    )
    done = None
    for model in found:
        if model.name != name:
            continue
        if model.status == LoggedModelStatus.READY and model.params.get(DIGEST_PARAM) == digest:
            done = done or model.model_id
        elif model.status != LoggedModelStatus.READY:
            run.client.delete_logged_model(model.model_id)
    return done
