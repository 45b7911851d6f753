"""SavedModel export with a serving signature on RAW input.

`serving_default` takes `image`: uint8 [None, H, W, C] or `text`: string [None] (the
TextVectorization runs inside the graph) and returns `{'probabilities': float32 [None, K]}`.
The class names travel with the model as `assets/class_names.txt` (one per line) and as the
string variable `class_names` on the loaded object.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Optional, Sequence

import keras
import tensorflow as tf

from tfpipe import files
from tfpipe.models.warmstart import WEIGHTS_FILE, save_weights_by_path

CLASS_NAMES_ASSET = "class_names.txt"
SIGNATURE = "serving_default"


class _ServingModule(tf.Module):
    def __init__(self, model: keras.Model, vectorizer, class_names: Sequence[str], asset_path: str):
        super().__init__(name="tfpipe_serving")
        self.model = model
        if vectorizer is not None:
            self.vectorizer = vectorizer
        self.class_names = tf.Variable(
            list(class_names), dtype=tf.string, trainable=False, name="class_names"
        )
        self.class_names_file = tf.saved_model.Asset(asset_path)


def _probabilities(model: keras.Model, inputs) -> dict:
    probs = model(inputs, training=False)
    return {"probabilities": tf.cast(probs, tf.float32)}


def export_saved_model(model: keras.Model, export_dir, **kwargs) -> None:
    """Write `model` as a SavedModel at export_dir: into a temporary sibling, sealed (files.seal) and renamed
    into place when whole, so a kill at any moment leaves the old sealed model or none; a full or read-only
    disk stops with one line (files.saving); temporary siblings of an interrupted export are removed first.
    `weights_sha256`: the model's weights digest, sealed with it (files.seal_facts), so that a run resumed after
    a kill recognises the export it already made from these weights and keeps it (TensorFlow writes another
    saved_model.pb for the same weights in another process: its function names count the process's graphs)."""
    export_dir = Path(export_dir)
    for kind in ("tmp", "old"):
        for stale in export_dir.parent.glob(f".{export_dir.name}.{kind}-*"):
            shutil.rmtree(stale, ignore_errors=True)
    with files.saving(export_dir.parent, "the SavedModel", model.count_params() * 4):
        _export_saved_model(model, export_dir, **kwargs)


def _export_saved_model(
    model: keras.Model,
    export_dir,
    *,
    modality: str,
    image_shape: Optional[Sequence[int]] = None,
    vectorizer=None,
    class_names: Sequence[str],
    weights_sha256: Optional[str] = None,
) -> None:
    """Write `model` as a SavedModel at export_dir (atomically replacing an existing one)."""
    export_dir = Path(export_dir)
    class_names = [str(c) for c in class_names]
    if modality == "image":
        if not image_shape or len(image_shape) != 3:
            raise ValueError(f"image_shape={image_shape!r}: expected [height, width, channels]")
        spec = tf.TensorSpec([None, *[int(d) for d in image_shape]], tf.uint8, name="image")
    elif modality == "text":
        if vectorizer is None:
            raise ValueError("modality='text' needs the TextVectorization layer (vectorizer=...)")
        spec = tf.TensorSpec([None], tf.string, name="text")
    else:
        raise ValueError(f"modality={modality!r}: expected 'image' or 'text'")

    export_dir.parent.mkdir(parents=True, exist_ok=True)
    remove_dead_staging(export_dir)
    staging = export_dir.parent / f".{export_dir.name}.tmp-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)  # this process's own earlier one (an export that raised)
    staging.mkdir()
    try:
        (staging / "assets_src").mkdir()
        asset_src = staging / "assets_src" / CLASS_NAMES_ASSET
        asset_src.write_text("\n".join(class_names) + "\n", encoding="utf-8")
        module = _ServingModule(model, vectorizer, class_names, str(asset_src))

        if modality == "image":

            @tf.function(input_signature=[spec])
            def serve(image):
                return _probabilities(model, image)

        else:

            @tf.function(input_signature=[spec])
            def serve(text):
                return _probabilities(model, vectorizer(text))

        module.serve = serve
        out = staging / "saved_model"
        tf.saved_model.save(module, str(out), signatures={SIGNATURE: serve.get_concrete_function()})
        save_weights_by_path(model, out / WEIGHTS_FILE)  # what a warm start (train.init_from) reads
        # written last, checked at load (evaluation.check_complete)
        files.seal(out, **({"weights_sha256": weights_sha256} if weights_sha256 else {}))
        _replace_dir(out, export_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def remove_dead_staging(export_dir) -> None:
    """The staging folders (`.<name>.tmp-<pid>`) and replaced exports (`.<name>.old-<pid>`) beside `export_dir` of
    processes that are gone: named by their process, so an export killed between its rename and its clean-up
    leaves them, and the next attempt (exporting again or keeping that export) removes them."""
    files.remove_dead_temps(Path(export_dir), kinds=("tmp", "old"))


def _replace_dir(new: Path, dest: Path) -> None:
    """Move `new` to `dest`; an existing `dest` is moved aside first and deleted after."""
    old = None
    if dest.exists():
        old = dest.parent / f".{dest.name}.old-{os.getpid()}"
        shutil.rmtree(old, ignore_errors=True)
        os.replace(dest, old)
    os.replace(new, dest)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def load_class_names(saved_model_dir) -> list[str]:
    """Class names stored with an exported model (reads the asset file; TF not needed)."""
    path = Path(saved_model_dir) / "assets" / CLASS_NAMES_ASSET
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line != ""]
