"""Batch prediction: `python -m pipeline.predict MODEL_URI INPUT_DIR [--out predictions.csv]` scores every image
(.jpg/.jpeg/.png) or text (.txt) file under INPUT_DIR with a logged tfpipe model and writes one CSV row per file:
its path, the predicted class, that class's probability and every class's probability.

Files are decoded exactly as the prepare stage decodes a class-per-folder directory (resized to the model's input,
UTF-8 text). An unreadable file is named on stderr and skipped; the summary counts skipped and ignored files.
Exit codes: 0 written, 2 bad input (one line, nothing written)."""

from __future__ import annotations

import csv
import sys
import tempfile
from pathlib import Path

import numpy as np

from tfpipe import progress
from tfpipe.commands import environment
from tfpipe.commands.hydra_flags import CommandParser
from tfpipe.config.schema import DataConfig
from tfpipe.data.decode import Refused, decode_image_file, decode_text_file
from tfpipe.data.sources import IMAGE_EXTENSIONS, TEXT_EXTENSIONS
from tfpipe.errors import USER_ERRORS, UserError, one_line
from tfpipe.exits import EXIT_BAD_INPUT, EXIT_OK
from tfpipe.files import atomic_open

DOC = "Score a folder of images or .txt files with a logged tfpipe model; write one CSV row per file."
LIMITS = (
    DataConfig()
)  # the directory source's size caps (data.max_image_pixels, data.max_text_bytes) by default


def main(argv=None, prog: str = "python -m pipeline.predict") -> int:
    environment.set_defaults()
    parser = CommandParser(prog=prog, description=DOC, does="scores a folder with a logged model")
    parser.add_argument(
        "model_uri", help="runs:/RUN_ID/model, models:/NAME@ALIAS, models:/NAME/VERSION or a folder"
    )
    parser.add_argument(
        "input_dir", help="folder of .jpg/.jpeg/.png images or .txt files (searched recursively)"
    )
    parser.add_argument("--out", default="predictions.csv", help="CSV to write (default: predictions.csv)")
    parser.add_argument(
        "--batch-size", type=int, default=64, help="files decoded and scored at once (default 64)"
    )
    parser.add_argument(
        "--tracking-uri", default=None, help="MLflow store (default: MLFLOW_TRACKING_URI or params.yaml)"
    )
    args = parser.parse_args(argv)
    try:
        summary = predict(
            args.model_uri, Path(args.input_dir), Path(args.out), args.batch_size, args.tracking_uri
        )
    except USER_ERRORS as exc:
        print(f"predict: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(summary)
    return EXIT_OK


def predict(spec: str, input_dir: Path, out: Path, batch_size: int, tracking_uri=None) -> str:
    """Score `input_dir` into `out`; returns the one-line summary. UserError (nothing written) on bad input."""
    from tfpipe.audit import tracking_uri_for
    from tfpipe.tracking import loading

    if batch_size < 1:
        raise UserError(f"--batch-size={batch_size}: must be >= 1")
    if not input_dir.is_dir():
        raise UserError(f"INPUT_DIR {str(input_dir)!r}: not a folder")
    if out.is_dir() or not out.absolute().parent.is_dir():
        raise UserError(f"--out {str(out)!r}: must be a file in an existing folder")
    progress.wanted()  # a bad TFPIPE_PROGRESS is refused before the model loads
    with tempfile.TemporaryDirectory(prefix="tfpipe-predict-") as tmp:
        model = loading.load(spec, tracking_uri_for(Path.cwd(), tracking_uri), Path(tmp))
        files, ignored = _files(input_dir, model.modality)
        rows, skipped = _score(model, input_dir, files, batch_size)
    if not rows:
        raise UserError(f"INPUT_DIR {str(input_dir)!r}: none of its {len(files)} file(s) could be read")
    with atomic_open(out, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["file", "label", "probability", *(f"p_{name}" for name in model.class_names)])
        writer.writerows(rows)
    return f"predict: {len(rows)} file(s) scored -> {out}; {len(skipped)} unreadable skipped" + (
        f" (named above); {ignored} other file(s) ignored"
        if skipped
        else f"; {ignored} other file(s) ignored"
    )


def _files(input_dir: Path, modality: str) -> tuple[list, int]:
    """The files this model can score (sorted) and how many others there are; refuses a folder with none."""
    wanted = IMAGE_EXTENSIONS if modality == "image" else TEXT_EXTENSIONS
    found = sorted(p for p in input_dir.rglob("*") if p.is_file() and not p.name.startswith("."))
    files = [p for p in found if p.suffix.lower() in wanted]
    if not files:
        others = sorted({p.suffix.lower() or "(none)" for p in found})
        raise UserError(
            f"INPUT_DIR {str(input_dir)!r}: no {'/'.join(wanted)} files for this {modality} model "
            f"(found {len(found)} file(s){': ' + ', '.join(others[:5]) if others else ''})"
        )
    return files, len(found) - len(files)


def _decode(path: Path, model):
    if model.modality == "image":
        height, width, channels = model.image_shape
        raw = decode_image_file(path, [height, width], channels, LIMITS.max_image_pixels)
        return np.frombuffer(raw, np.uint8).reshape(model.image_shape)
    return decode_text_file(path, LIMITS.max_text_bytes).decode("utf-8")


def _probabilities(answer, class_names: list) -> np.ndarray:
    """[N, classes] from the served answer: the table's class columns, or a model logged before the table (an
    array of probabilities, still in a registry)."""
    columns = getattr(answer, "columns", None)
    return np.asarray(answer[list(class_names)] if columns is not None else answer, dtype=np.float32)


def _score(model, input_dir: Path, files: list, batch_size: int) -> tuple[list, list]:
    """CSV rows of the readable files, in file order, and the skipped files (each named on stderr)."""
    rows, skipped = [], []
    bar = progress.bar(len(files), "predict", "file") if progress.wanted() else None
    for start in range(0, len(files), batch_size):
        names, inputs = [], []
        for path in files[start : start + batch_size]:
            try:
                inputs.append(_decode(path, model))
                names.append(path.relative_to(input_dir).as_posix())
            except (Refused, OSError, ValueError, SyntaxError) as exc:  # PIL raises these for a bad image
                skipped.append(path)
                print(f"predict: skipped {path}: {one_line(exc, 160)}", file=sys.stderr)
        if inputs:
            batch = np.stack(inputs) if model.modality == "image" else inputs
            for name, probs in zip(names, _probabilities(model.predict(batch), model.class_names)):
                best = int(np.argmax(probs))
                rows.append(
                    [name, model.class_names[best], f"{probs[best]:.6f}", *(f"{p:.6f}" for p in probs)]
                )
        if bar is not None:
            bar.update(min(batch_size, len(files) - start))
    if bar is not None:
        bar.close()
    return rows, skipped
