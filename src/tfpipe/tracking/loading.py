"""A logged tfpipe model loaded for batch prediction: from an MLflow model URI (`runs:/`, `models:/NAME@ALIAS`,
`models:/NAME/VERSION`) or a local folder holding an MLflow model (its `MLmodel` file). What it takes is read from
the model's logged signature (uint8 images [N, H, W, C], or strings), its class names from its sealed SavedModel."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Optional

from tfpipe import files
from tfpipe.errors import TrackingError, UserError, one_line
from tfpipe.tracking import model_uri

KEY = "MODEL_URI"
log = logging.getLogger(__name__)


@dataclass
class LoadedModel:
    predict: Any  # raw batch (uint8 array or list of str) -> float32 [N, num_classes] probabilities
    modality: str  # "image" or "text", from the logged signature
    image_shape: Optional[tuple]  # (height, width, channels) for images
    class_names: list
    source: dict  # what the URI named: source_run, source_model


def fetch(spec: str, tracking_uri: str, dest: Path) -> tuple[Path, dict]:
    """The model's folder (downloaded into `dest` for a URI) and what the URI named, checked before any of its
    code can run (verify_code; for a URI also the digest its run recorded), its SavedModel's program
    (tfpipe.models.program) and its class names (class_names); one-line UserError otherwise."""
    if model_uri.is_model_uri(spec):
        local, source = model_uri.download(spec, tracking_uri, dest, KEY)
    elif (Path(spec) / "MLmodel").is_file():
        local, source = Path(spec), {}
    else:
        raise UserError(
            f"{KEY}={spec!r}: not a runs:/ or models:/ URI, nor a folder holding an MLflow model (its MLmodel file)"
        )
    verify_code(Path(local), spec)
    if not source:  # a local folder; a downloaded model was checked by model_uri.download
        why = model_uri.check_sealed(Path(local))
        if why:
            raise UserError(f"{KEY}={spec!r}: {why}; log the model again (the train stage)")
    from tfpipe import tfstart

    tfstart.import_quietly()  # before tfpipe.models imports Keras: TensorFlow's start-up lines stay off stderr
    from tfpipe.models import program

    program.check(model_uri.saved_model_folder(Path(local)), f"{KEY}={spec!r}")
    class_names(Path(local), spec)
    return Path(local), source


def load(spec: str, tracking_uri: str, dest: Path) -> LoadedModel:
    """Download (URIs) and load the model; one-line UserError when it is not found or not a tfpipe model."""
    local, source = fetch(spec, tracking_uri, dest)
    import mlflow.pyfunc

    try:
        model = mlflow.pyfunc.load_model(str(local))
    except Exception as exc:  # MLflow and TensorFlow raise many kinds for a model they cannot load
        raise TrackingError(f"{KEY}={spec!r}: the model does not load ({one_line(exc, 200)})") from None
    modality, image_shape = model_takes(model, spec)
    return LoadedModel(model.predict, modality, image_shape, class_names(local, spec), source)


def class_names(local: Path, spec: str) -> list:
    """The class names answers carry: those sealed inside the SavedModel (assets/class_names.txt, under its seal
    and its run's digest; serving_model.py answers with them). Its class_names.json and MLmodel metadata lie outside
    the seal: each must name the same, in the same order, or the model is refused as relabelled. A SavedModel that
    seals none (not a tfpipe export) has only those two, which must agree; a warning says so."""
    from tfpipe.models.export import CLASS_NAMES_ASSET, load_class_names

    saved = model_uri.saved_model_folder(local)
    named = _logged_class_names(local, spec)
    sealed = saved is not None and (saved / "assets" / CLASS_NAMES_ASSET).is_file()
    if sealed:
        named = {f"its sealed assets/{CLASS_NAMES_ASSET}": load_class_names(saved), **named}
    (whose, truth), *others = list(named.items()) or [("", [])]
    for what, names in others:
        if names != truth:
            raise UserError(
                f"{KEY}={spec!r}: relabelled: {what} names {one_line(repr(names), 80)}, {whose} "
                f"{one_line(repr(truth), 80)}; refused: its answers would carry names it was not trained with"
            )
    if not truth:
        raise UserError(f"{KEY}={spec!r}: the model records no class_names: not a tfpipe model")
    if not sealed:
        log.warning(
            "%s=%r: its class names are not sealed inside its SavedModel (as the store holds them)", KEY, spec
        )
    return list(truth)


def _logged_class_names(local: Path, spec: str) -> dict:
    """The class names logged beside the SavedModel: its class_names.json (inside the folder: verify_code) and its
    MLmodel metadata, each where present."""
    import json

    mlmodel = model_uri.mlmodel(local)
    named = {}
    artifact = (model_uri.pyfunc_flavor(mlmodel).get("artifacts") or {}).get("class_names")
    if artifact is not None:
        try:
            named["its class_names.json"] = json.loads((local / artifact["path"]).read_text(encoding="utf-8"))
        except (OSError, ValueError, TypeError, KeyError):
            raise UserError(f"{KEY}={spec!r}: its class_names.json does not read as JSON; refused") from None
    metadata = mlmodel.get("metadata")
    if isinstance(metadata, dict) and "class_names" in metadata:
        named["its MLmodel metadata"] = metadata["class_names"]
    return named


def _inside(local: Path, path) -> bool:
    """`path` (an MLmodel artifact's) names a place inside the folder `local`: relative, no `..`, no symlink out."""
    return (
        isinstance(path, str)
        and bool(path)
        and not PurePosixPath(path).is_absolute()
        and ".." not in PurePosixPath(path).parts
        and files.within(local / path, local, resolve=True)
    )


# sha256 of every serving_model.py this project has shipped (git log -- src/tfpipe/tracking/serving_model.py); a
# change to that file adds its digest here (tests/test_tracking.py fails until it does).
SHIPPED_SERVING_CODE = frozenset(
    {
        "c8f6b033d397bcd2",
        "2caafd226a6772d0",
        "9961fc450b2f7864",
        "b05fb3bc22c9e94a",
        "9e13988c5d459ca7",
        "50b0ccabc450eeda",
        "882bce2e42ec5eea",
    }
)


def verify_code(local: Path, spec: str) -> None:
    """Loading a logged model runs the code it names (MLmodel's python_function flavor): only tfpipe's own
    serving_model.py, as shipped, naming a SavedModel inside the folder, is loaded (fetch checks the seal). By the
    installed tfpipe, before MLflow imports anything from the model folder (whose seal check could be edited)."""
    import hashlib

    def refuse(why: str) -> UserError:
        return UserError(f"{KEY}={spec!r}: {why}; refused: loading it would run that code as you")

    flavor = model_uri.pyfunc_flavor(model_uri.mlmodel(local))
    if not flavor:
        raise refuse("its MLmodel file has no python_function flavor")
    code = local / Path(str(flavor.get("model_code_path") or "")).name
    loader = flavor.get("loader_module")
    if loader != "mlflow.pyfunc.loaders.code_model" or flavor.get("code") or "python_model" in flavor:
        raise refuse("its MLmodel loads code other than tfpipe's serving_model.py")
    if code.name != "serving_model.py" or not code.is_file():
        raise refuse("its model code is not serving_model.py")
    if hashlib.sha256(code.read_bytes()).hexdigest()[:16] not in SHIPPED_SERVING_CODE:
        raise refuse("its serving_model.py is not one tfpipe shipped (changed in the store?)")
    if model_uri.saved_model_folder(local) is None:
        raise refuse("its MLmodel names no SavedModel inside the model folder")
    artifacts = flavor.get("artifacts") or {}
    for name, artifact in artifacts.items() if isinstance(artifacts, dict) else [("artifacts", artifacts)]:
        path = artifact.get("path") if isinstance(artifact, dict) else artifact
        if not _inside(local, path):
            raise UserError(
                f"{KEY}={spec!r}: its MLmodel's artifact {name!r} is {path!r}, outside the model folder; refused: "
                "serving it would hand that file to its clients"
            )


def model_takes(model, spec: str) -> tuple[str, Optional[tuple]]:
    from mlflow.types import DataType, TensorSpec

    schema = model.metadata.get_input_schema()
    inputs = schema.inputs if schema is not None else []
    if len(inputs) == 1 and isinstance(inputs[0], TensorSpec) and inputs[0].type.name == "uint8":
        shape = tuple(inputs[0].shape[1:])
        if len(shape) == 3 and min(shape) > 0:
            return "image", shape
    elif len(inputs) == 1 and not isinstance(inputs[0], TensorSpec) and inputs[0].type == DataType.string:
        return "text", None
    raise UserError(
        f"{KEY}={spec!r}: its signature takes {schema}; batch prediction serves tfpipe models taking "
        "uint8 images [N, H, W, C] or strings"
    )
