"""The one owner of the train stage's work directory, `models/<dataset>/`.

    models/<dataset>/
      training_state.json      {"fingerprint", "complete"}: written when a training run finished
      weights.sha256           the trained weights' digest (what `audit --rerun` compares)
      checkpoints/             tf.train checkpoints (CheckpointManager), history.json (epoch rows),
                               fingerprint.txt (the config + data they belong to), mlflow_run_id.txt
      saved_model/             the export
      tensorboard/             summaries and profiler traces (tfpipe.monitoring)

Beside it, outside every DVC output, the shelf `<project>/.tfpipe/resume/<fingerprint>/` mirrors the checkpoints
folder of a training that has not finished (hard links, after every save), and `<fingerprint>.saved_model/` its
sealed export once made (a run killed while logging the model may already record that export's digest). `dvc exp run` checks out the last
committed `models/` over an interrupted one before it runs the stages again (`persist` keeps an output across
`dvc repro` only), and a queued or `--temp` experiment runs in a copy that is deleted: the shelf is what the same
command finds there and resumes from. A finished training removes its shelf.

It decides whether a run resumes (an interrupted run of the very same config and data) or starts clean,
saves and restores checkpoints (non-chief workers of a multi-worker strategy write a scratch folder:
every worker must take part in a save, only the chief's is kept), keeps the history and lists the files of
the newest checkpoint, and of each kept one with its counters, for upload. TensorFlow: checkpoint methods."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

from tfpipe import files
from tfpipe.errors import UserError, one_line

if TYPE_CHECKING:
    import tensorflow as tf

log = logging.getLogger(__name__)

CHECKPOINTS = "checkpoints"
SAVED_MODEL = "saved_model"
HISTORY_FILE = "history.json"  # in checkpoints/
FINGERPRINT_FILE = "fingerprint.txt"  # in checkpoints/: which config + data the checkpoints belong to
RUN_ID_FILE = "mlflow_run_id.txt"  # in checkpoints/: the MLflow run these checkpoints belong to
TRAINING_STATE = "training_state.json"
SHELF = Path(".tfpipe") / "resume"  # under the project root: the shelves of unfinished trainings
WEIGHTS_FILE = "weights.sha256"
EXPORT_SUFFIX = ".saved_model"  # beside a shelf: the export of a training killed before its run finished
COUNTERS = ("step", "epoch", "epoch_step")  # Steps.checkpoint's; epoch_step 0: saved as an epoch ended


def fingerprint(cfg, manifest_digest: str) -> str:
    """What the checkpoints depend on: everything but tracking, plus the exact prepared data. Give it the
    config as composed (project-relative paths): a queued experiment runs in a temporary copy elsewhere."""
    relevant = {k: v for k, v in cfg.to_dict().items() if k != "tracking"}
    relevant["manifest_digest"] = manifest_digest
    return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()


class WorkDir:
    def __init__(self, path: Path, shelf_root: Optional[Path] = None):
        self.path = Path(path)
        self.shelf_root = Path(shelf_root) if shelf_root is not None else None  # None: no shelf
        self._shelf: Optional[Path] = None  # this training's, once started
        self.checkpoint_dir = self.path / CHECKPOINTS
        self.saved_model_dir = self.path / SAVED_MODEL
        self.history: List[dict] = []
        self._manager: Optional[tf.train.CheckpointManager] = None  # open_checkpoints() makes it
        self._scratch: Optional[Path] = None

    # -- before training (chief): resume or start clean

    def prepare(self, fingerprint: str) -> Optional[str]:
        """Keep checkpoints only to resume an interrupted run of this very config, else clear the folder's
        contents (`dvc repro` removes it itself; `mlflow run` and hand-run stages do not, and must neither
        resume another config's weights nor 'resume' a finished run). An interrupted run of this config that
        is not in the folder (DVC restored another over it) is taken from its shelf. Returns the interrupted
        run's MLflow id."""
        state = self.path / TRAINING_STATE
        started = files.read_line(self.checkpoint_dir / FINGERPRINT_FILE)
        if self.path.exists() and not state.is_file() and started == fingerprint:
            log.info("resuming the interrupted training in %s", self.path)
            return files.read_line(self.checkpoint_dir / RUN_ID_FILE)
        shelved = self._shelved(fingerprint)
        if self.path.exists():
            if shelved is None:
                why = "finished run" if state.is_file() else "other or unknown config"
                log.info("starting fresh: clearing %s (%s)", self.path, why)
            files.clear_folder(self.path)
        if shelved is None:
            return None
        files.mirror(shelved, self.checkpoint_dir, last="checkpoint")
        kept_export = self._export_shelf(fingerprint)
        if (
            kept_export is not None and files.check_seal(kept_export) is None
        ):  # an attempt killed after its export
            files.link_tree(kept_export, self.saved_model_dir)
        log.info("resuming the interrupted training kept in %s (%s held another run)", shelved, self.path)
        return files.read_line(self.checkpoint_dir / RUN_ID_FILE)

    def _shelved(self, fingerprint: str) -> Optional[Path]:
        """This config's shelf when it holds a started training (its run id and a checkpoint), else None."""
        shelf = self._shelf_for(fingerprint)
        if shelf is None:
            return None
        has_run = files.read_line(shelf / FINGERPRINT_FILE) == fingerprint and files.read_line(
            shelf / RUN_ID_FILE
        )
        return shelf if has_run and (shelf / "checkpoint").is_file() else None

    def mark_started(self, fingerprint: str, run_id: str) -> None:
        files.write_text(self.checkpoint_dir / FINGERPRINT_FILE, fingerprint + "\n")
        # a resumed training continues this run
        files.write_text(self.checkpoint_dir / RUN_ID_FILE, f"{run_id}\n")
        self._shelf = self._shelf_for(fingerprint)
        self._shelve()

    def mark_complete(self, fingerprint: str, weights_sha256: Optional[str]) -> None:
        files.write_json(
            self.path / TRAINING_STATE, {"fingerprint": fingerprint, "complete": True}, sort_keys=True
        )
        if weights_sha256:
            files.write_text(self.path / WEIGHTS_FILE, weights_sha256 + "\n")
        if self._shelf is not None:  # finished: nothing left to resume
            shutil.rmtree(self._shelf, ignore_errors=True)
            shutil.rmtree(self._shelf.with_name(self._shelf.name + EXPORT_SUFFIX), ignore_errors=True)

    def _shelf_for(self, fingerprint: str) -> Optional[Path]:
        return self.shelf_root / fingerprint[:32] if self.shelf_root is not None else None

    def _export_shelf(self, fingerprint: str) -> Optional[Path]:
        shelf = self._shelf_for(fingerprint)
        return None if shelf is None else shelf.with_name(shelf.name + EXPORT_SUFFIX)

    def keep_export(self, weights: str) -> None:
        """Link the chief's sealed export onto the shelf: a run killed while it logs the model resumes, after DVC
        restored another models/ over this one, with the very export (and digest) it may have recorded."""
        if self._shelf is None or self._scratch is not None:
            return
        kept = self._shelf.with_name(self._shelf.name + EXPORT_SUFFIX)
        if files.seal_facts(kept).get("weights_sha256") != weights:  # sealed with other weights, or none
            files.link_tree(self.saved_model_dir, kept)

    def _shelve(self) -> None:
        """Mirror the chief's checkpoints folder onto this training's shelf (links: no bytes copied)."""
        if self._shelf is not None and self._scratch is None and self.checkpoint_dir.is_dir():
            with files.saving(self._shelf, "the links of the newest checkpoint"):
                files.mirror(self.checkpoint_dir, self._shelf, last="checkpoint")

    # -- checkpoints (TensorFlow)

    def open_checkpoints(self, checkpoint, *, chief: bool, max_to_keep: int) -> bool:
        """A CheckpointManager for `checkpoint`; restores the newest checkpoint when there is one (then returns
        True, and `history` holds the epochs before the checkpoint's)."""
        import tensorflow as tf

        directory = self.checkpoint_dir
        if not chief:
            self._scratch = files.scratch_folder("tfpipe-worker-")
            directory = self._scratch / CHECKPOINTS
        self._manager = tf.train.CheckpointManager(checkpoint, str(directory), max_to_keep=max_to_keep)
        removed = self._remove_partial_saves()  # left by a save that a full disk or a kill interrupted
        if removed:
            log.info("removed %s, left by an interrupted checkpoint save", ", ".join(removed))
        restored = self._restore_newest_readable(checkpoint)
        if restored is None:
            return False
        epoch = int(checkpoint.epoch.numpy())
        self.history = self._read_history()[:epoch]
        log.info("resuming from %s: epoch %d, step %d", restored, epoch, int(checkpoint.step.numpy()))
        return True

    def _restore_newest_readable(self, checkpoint) -> Optional[str]:
        """Restore the newest checkpoint that reads back; a damaged one (truncated by a full disk or a crash
        mid-copy) is skipped for the one before it, in one line. A checkpoint of another model or optimizer
        stops the stage with one line. None when there is no checkpoint."""
        import tensorflow as tf

        state = tf.train.get_checkpoint_state(str(self.checkpoint_dir))
        if state is None or not state.model_checkpoint_path:
            return None
        candidates = list(reversed(state.all_model_checkpoint_paths or [state.model_checkpoint_path]))
        skipped = []  # "ckpt-N (Error: why)" of each unreadable newer checkpoint, newest first
        for path in candidates:
            try:
                checkpoint.restore(path).assert_existing_objects_matched()
            except (AssertionError, ValueError) as exc:
                raise UserError(
                    f"{self.checkpoint_dir}: cannot resume from {Path(path).name} (was it written for another "
                    f"model or optimizer?); delete the folder to start over ({one_line(exc, 200)})"
                ) from None
            except (IndexError, OSError, tf.errors.OpError) as exc:  # unreadable: try the one before it
                skipped.append(f"{Path(path).name} ({type(exc).__name__}: {one_line(exc, 200)})")
                continue
            if skipped:  # one line for the whole fallback, however many were skipped
                log.warning(
                    "resumed from %s, the newest readable checkpoint; skipped the damaged %s",
                    Path(path).name,
                    ", ".join(skipped),
                )
            return path
        raise UserError(
            f"{self.checkpoint_dir}: no readable checkpoint ({', '.join(skipped)}); delete the folder to start over"
        )

    def save_checkpoint(self, step: int) -> None:
        """Save ckpt-<step>; a full disk or a read-only folder stops the stage with one line (the checkpoints
        before it stay intact, and the same command resumes from the newest once the cause is fixed)."""
        import tensorflow as tf

        assert self._manager is not None, "open_checkpoints() comes before a save"
        try:
            self._manager.save(checkpoint_number=step)
        except (tf.errors.OpError, OSError) as exc:
            self._remove_partial_saves()
            raise UserError(self._save_failed(step, exc)) from None
        self._shelve()

    def _save_failed(self, step: int, exc: BaseException) -> str:
        previous = self._manager.latest_checkpoint if self._manager else None
        size = (
            sum(p.stat().st_size for p in self.checkpoint_dir.glob(f"{Path(previous).name}.*"))
            if previous
            else 0
        )
        cause = files.save_cause(exc, size) or "..." + one_line(exc)[-200:]
        resume = f"it resumes from {Path(previous).name}" if previous else "it starts over"
        return f"{self.checkpoint_dir}: cannot save checkpoint ckpt-{step}: {cause}; fix that and run the same command again: {resume}"

    def _remove_partial_saves(self) -> List[str]:
        """What an interrupted save leaves behind (TensorFlow writes `<prefix>_temp/` first, then renames);
        returns the names removed."""
        removed = []
        for partial in sorted(self.checkpoint_dir.glob("*_temp*")):
            shutil.rmtree(partial, ignore_errors=True) if partial.is_dir() else partial.unlink(
                missing_ok=True
            )
            removed.append(partial.name)
        return removed

    @property
    def export_dir(self) -> Path:
        return self._scratch / SAVED_MODEL if self._scratch else self.saved_model_dir

    def close(self) -> None:
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def latest_checkpoint(self) -> tuple[List[Path], str]:
        """The newest checkpoint's files (per `tf.train.get_checkpoint_state`) and the folder's other files
        (history, fingerprint, run id), and the checkpoint's prefix; not the state file, which names every
        kept checkpoint."""
        import tensorflow as tf

        state = tf.train.get_checkpoint_state(str(self.checkpoint_dir))
        if state is None or not state.model_checkpoint_path:
            raise UserError(f"{self.checkpoint_dir}: no checkpoint state file naming the latest checkpoint")
        prefix = Path(state.model_checkpoint_path).name
        kept = {Path(p).name for p in state.all_model_checkpoint_paths}
        chosen = []
        for path in sorted(self.checkpoint_dir.iterdir()):
            stem = path.name.split(".")[0]
            if path.is_file() and path.name != "checkpoint" and (stem not in kept or stem == prefix):
                chosen.append(path)
        return chosen, prefix

    def kept_checkpoints(self) -> List[dict]:
        """Each kept checkpoint that reads back (oldest first): its prefix, files and counters (COUNTERS)."""
        import tensorflow as tf

        state = tf.train.get_checkpoint_state(str(self.checkpoint_dir))
        kept = []
        for prefix in [Path(p).name for p in (state.all_model_checkpoint_paths if state else [])]:
            try:
                read = tf.train.load_checkpoint(str(self.checkpoint_dir / prefix)).get_tensor
                counters = {k: int(read(f"{k}/.ATTRIBUTES/VARIABLE_VALUE")) for k in COUNTERS}
            except tf.errors.OpError as exc:
                log.warning("left out the damaged checkpoint %s (%s)", prefix, one_line(exc, 200))
                continue
            found = {"prefix": prefix, "files": sorted(self.checkpoint_dir.glob(f"{prefix}.*"))}
            kept.append({**found, **counters})
        return kept

    # -- history (epoch rows across resumes)

    def append_history(self, row: dict) -> None:
        self.history.append(row)
        if self._scratch is None:  # the chief's
            with files.saving(self.checkpoint_dir, HISTORY_FILE):
                files.write_json(self.checkpoint_dir / HISTORY_FILE, self.history)
            self._shelve()

    def _read_history(self) -> List[dict]:
        path = self.checkpoint_dir / HISTORY_FILE
        try:
            rows = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else []
        except json.JSONDecodeError:
            return []
        return rows if isinstance(rows, list) else []
