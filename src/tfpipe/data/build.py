"""prepare (the implementation of `tfpipe.data.prepare`): a source -> `cfg.data.output_dir` (TFRecord shards,
manifest.json, vocab.txt), atomically.

Everything is written into a temporary sibling folder (`<output_dir>.tmp-<pid>`) that replaces
`output_dir` by rename only once complete; any error (or interrupt) removes it. An `output_dir` that is a
symlink or a mount point cannot be replaced by rename: the temporary folder is made inside it
(`.prepare.tmp-<pid>`, on the same filesystem) and its files are moved in once complete, after the old
manifest is removed and with the new manifest moved last, so a kill midway leaves no folder that looks
complete. Examples are streamed from the source to the shard writers, so memory does not grow with the
dataset.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
from pathlib import Path

from tfpipe.data import sources
from tfpipe.data.manifest import (
    FORMAT_VERSION,
    MANIFEST_FILE,
    SPLITS,
    VOCAB_FILE,
    manifest_config,
    write_manifest,
)
from tfpipe.data.normalization import ChannelMoments
from tfpipe.errors import DataError

log = logging.getLogger(__name__)

TEMP_INSIDE = ".prepare.tmp-"  # the temp folder inside a symlinked or mounted output_dir


def prepare(cfg, *, progress: bool = True) -> dict:
    output_dir = Path(os.path.abspath(cfg.data.output_dir))
    from tfpipe.data import drift

    # a missing or foreign reference report stops us before anything is read
    reference = drift.load_reference(cfg)
    source = _open_source(cfg)  # cheap layout checks / builder setup happen here, before any writing
    _remove_stale_temps(output_dir)
    in_place = output_dir.is_symlink() or os.path.ismount(output_dir)  # neither can be renamed away
    made = _missing_top(os.path.realpath(output_dir)) if in_place else None  # a link's target made for tmp
    tmp = _temp_folder(output_dir, in_place)
    try:
        manifest = _write_all(cfg, source, tmp, progress, reference)
        (_replace_contents if in_place else _swap_into_place)(tmp, output_dir)
    except BaseException:
        shutil.rmtree(made or tmp, ignore_errors=True)  # a refused prepare leaves no folder it made
        raise
    if cfg.data.validation.report:
        drift.pin_first(cfg, reference, output_dir)  # reference=auto, first prepare: it is the reference
    return manifest


def _write_all(cfg, source: sources.Source, tmp: Path, progress: bool, reference=None) -> dict:
    from tqdm.auto import tqdm

    from tfpipe.data.tfrecords import ShardedWriter, encode_example, feature_key

    ds_cfg = cfg.dataset
    modality = ds_cfg.modality
    key = feature_key(modality)
    writers = {split: ShardedWriter(tmp, split, cfg.data.examples_per_shard) for split in SPLITS}
    bad = sources.BadFiles(cfg.data.on_bad_file, Path(os.path.abspath(cfg.data.path)))
    # Redraw often on a terminal, every 10 s in a log file (DVC and CI capture stderr).
    bar = tqdm(
        total=source.planned,
        disable=not progress,
        unit="ex",
        desc=f"prepare {ds_cfg.name}",
        dynamic_ncols=True,
        mininterval=0.1 if sys.stderr.isatty() else 10.0,
    )
    collector = _collector(cfg, source)
    moments = ChannelMoments(_feature(ds_cfg)["shape"]) if modality == "image" else None
    try:
        for split, value, label, *rest in source.stream(bad):  # (split, value, label[, name[, header]])
            writers[split].write(encode_example(key, value, label))
            if moments is not None and split == "train":
                moments.add(value)
            if collector is not None:
                collector.add(split, value, label, *rest)
            bar.update(1)
    except BaseException:
        for writer in writers.values():
            writer.abort()
        raise
    finally:
        bar.close()
    shards = {split: writer.close() for split, writer in writers.items()}
    counts = {split: writers[split].num_examples for split in SPLITS}
    found, dropped = _check_leakage(cfg, collector, tmp, shards, counts)
    for split in ("train", "test"):
        if counts[split] == 0:
            where = cfg.data.path if cfg.data.source == "directory" else f"tfds {ds_cfg.tfds_name}"
            raise DataError(
                f"{where}: no usable examples in the {split} split "
                f"({bad.count} bad files skipped); expected at least one"
            )
    normalization = None if moments is None else {"split": "train", "scale": "0..1", **moments.result()}
    manifest = _finish_manifest(cfg, source, tmp, key, shards, counts, bad, normalization)
    if collector is not None:
        _write_report(tmp, collector, manifest, found, dropped, reference)
    return manifest


def _collector(cfg, source: sources.Source):
    """The data report's collector (tfpipe.data.report), or None when data.validation.report is off."""
    if not cfg.data.validation.report:
        return None
    from tfpipe.data.report import Collector

    return Collector(cfg, source.class_names, _feature(cfg.dataset))


def _check_leakage(cfg, collector, tmp: Path, shards: dict, counts: dict) -> tuple:
    if collector is None:
        return None, []
    from tfpipe.data import leakage

    found = collector.duplicates()
    return found, leakage.apply(collector, found, tmp, shards, counts, cfg.data.examples_per_shard)


def _write_report(tmp: Path, collector, manifest: dict, found: dict, dropped: list, reference) -> None:
    """report.json (with the drift check against the reference), and the manifest's pointer to it (and how
    many test examples leakage=drop removed)."""
    from tfpipe.data import drift
    from tfpipe.data.report import REPORT_FILE, write_report
    from tfpipe.data.vocab import read_vocab

    vocabulary = set(read_vocab(tmp)) if manifest["vocab_file"] else None
    report = collector.build(manifest, found, dropped, vocabulary)
    drift.apply(reference, report, collector.validation)
    write_report(tmp, report)
    manifest["data_report"] = {
        "file": REPORT_FILE,
        "leakage_policy": collector.validation.leakage,
        "test_examples_dropped": len(dropped),
    }
    write_manifest(tmp, manifest)


def _feature(ds_cfg) -> dict:
    if ds_cfg.modality == "image":
        height, width = (int(v) for v in ds_cfg.image_size)
        return {"dtype": "uint8", "shape": [height, width, int(ds_cfg.channels)], "encoding": "raw"}
    return {"dtype": "string", "shape": []}


def _finish_manifest(
    cfg, source, tmp: Path, key: str, shards: dict, counts: dict, bad, normalization
) -> dict:
    """The vocabulary (text) and the manifest of the written shards (`normalization`: images' per-channel
    mean/std of the train split, None for texts)."""
    ds_cfg = cfg.dataset
    modality = ds_cfg.modality
    vocab_file = vocab_size = standardize = None
    if modality == "text":
        from tfpipe.data.vocab import build_vocab
        from tfpipe.textnorm import DEFAULT as DEFAULT_STANDARDIZE

        standardize = ds_cfg.standardize or DEFAULT_STANDARDIZE
        vocab_size = build_vocab(
            [tmp / s["file"] for s in shards["train"]], tmp / VOCAB_FILE, ds_cfg.max_tokens, standardize
        )
        vocab_file = VOCAB_FILE
    feature = _feature(ds_cfg)
    manifest = {
        "format_version": FORMAT_VERSION,
        "dataset": ds_cfg.name,
        "modality": modality,
        "source": source.info,
        "feature_spec": {key: feature, "label": {"dtype": "int64", "shape": []}},
        "class_names": list(source.class_names),
        "num_classes": len(source.class_names),
        "normalization": normalization,
        "splits": {split: {"num_examples": counts[split], "shards": shards[split]} for split in SPLITS},
        "vocab_file": vocab_file,
        "vocab_size": vocab_size,
        "standardize": standardize,
        "skipped_files": bad.summary(),
        "config": manifest_config(cfg),
    }
    write_manifest(tmp, manifest)
    if bad.count:
        log.warning("skipped %d bad files (data.on_bad_file=skip), e.g. %s", bad.count, bad.examples[:3])
    return manifest


def _missing_top(path: str) -> str | None:
    """The outermost folder of `path` that does not exist yet (None when it exists): what makedirs would make."""
    top = None
    while not os.path.lexists(path):
        top, path = path, os.path.dirname(path)
    return top


def _temp_folder(output_dir: Path, inside: bool) -> Path:
    """An empty folder on output_dir's filesystem to write into: a sibling, or inside a symlinked or mounted
    output_dir (made through the link when its target is missing)."""
    if inside:
        os.makedirs(os.path.realpath(output_dir), exist_ok=True)
        tmp = output_dir / f"{TEMP_INSIDE}{os.getpid()}"
    else:
        tmp = output_dir.with_name(f"{output_dir.name}.tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    return tmp


def _replace_contents(tmp: Path, output_dir: Path) -> None:
    """Replace what is inside output_dir (a symlink or a mount point) by the finished temp folder inside it:
    the old manifest goes first and the new one comes last, so a kill midway leaves no manifest."""
    (output_dir / MANIFEST_FILE).unlink(missing_ok=True)
    for child in output_dir.iterdir():
        if child.name != tmp.name:
            shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    for child in sorted(tmp.iterdir(), key=lambda p: p.name == MANIFEST_FILE):
        os.replace(child, output_dir / child.name)
    tmp.rmdir()


def _swap_into_place(tmp: Path, output_dir: Path) -> None:
    """Replace output_dir by the finished temp folder; only renames, so output_dir is never half-written."""
    old = None
    if output_dir.exists() or output_dir.is_symlink():
        old = output_dir.with_name(f"{output_dir.name}.old-{os.getpid()}")
        if old.exists():
            shutil.rmtree(old)
        os.replace(output_dir, old)
    os.replace(tmp, output_dir)
    if old is not None:
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink()


def _remove_stale_temps(output_dir: Path) -> None:
    """Temp/old siblings (or a temp folder inside a symlinked or mounted output) left by a killed prepare
    (its pid is gone)."""
    parent = output_dir.parent
    if not parent.is_dir():
        return
    for folder, pattern in (
        (parent, f"{output_dir.name}.tmp-*"),
        (parent, f"{output_dir.name}.old-*"),
        (output_dir, f"{TEMP_INSIDE}*"),
    ):
        for path in folder.glob(pattern) if folder.is_dir() else ():
            pid = path.name.rsplit("-", 1)[-1]
            if pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
                shutil.rmtree(path, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def _open_source(cfg) -> sources.Source:
    if cfg.data.source == "directory":
        return sources.open_directory(cfg)
    from tfpipe.data.tfds_source import open_tfds

    return open_tfds(cfg)
