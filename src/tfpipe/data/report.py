"""report.json: what is in the prepared data, written by prepare next to manifest.json (issue 21).

Per split: examples and share per class; images: per-channel pixel mean/std, and the source images' width,
height and aspect ratio spread and count per mode (the file headers; TFDS: the decoded examples, before
conversion and resize); texts: length in characters
and tokens, out-of-vocabulary rate (against vocab.txt), empty and near-empty documents. Duplicates, exact
and near, within and across splits, with the first examples of each kind and the clusters whose labels
conflict; the test examples that duplicate a train example (leakage, handled per data.validation.leakage).
Skipped files are the manifest's `skipped_files` (referenced, not recounted). Examples are named by their
path under data.path (directory source) or `<split>#<index>` in shard order (TFDS). `headline()` is the
flat summary prepare writes to metrics/data.json and train logs as run tags.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from tfpipe.data import dedup
from tfpipe.data.manifest import MANIFEST_FILE, SPLITS
from tfpipe.data.stats import ImageStats, TextStats
from tfpipe.errors import DataError

REPORT_FILE = "report.json"
REPORT_VERSION = 1
READ_FROM = {  # what the source images' sizes and modes are, per source type (report: source_images)
    "directory": "file headers, before conversion and resize",
    "tfds": "decoded tfds examples, before conversion and resize",
}


@dataclass
class Examples:
    """One entry per streamed example, in stream order (train, validation, test; shard order within)."""

    split_names: tuple
    class_names: list
    splits: list = field(default_factory=list)
    labels: list = field(default_factory=list)
    names: list = field(default_factory=list)
    keys: list = field(default_factory=list)  # exact-duplicate keys (dedup.content_hash)
    positions: list = field(default_factory=list)  # index within its prepared split
    near: bool = False  # counting near duplicates (one unit per exact key)

    def describe(self, index: int) -> dict:
        return {"example": self.names[index], "class": self.class_names[self.labels[index]]}


class Collector:
    """Fed every written example by prepare; `duplicates()` after the stream, `build()` once vocab.txt exists."""

    def __init__(self, cfg, class_names: list, feature: dict):
        self.validation = cfg.data.validation
        self.modality = cfg.dataset.modality
        self.ex = Examples(SPLITS, list(class_names))
        self.per_class = {s: [0] * len(class_names) for s in SPLITS}
        listed = self.validation.examples_listed
        if self.modality == "image":
            read_from = READ_FROM.get(cfg.data.source, READ_FROM["tfds"])
            self.stats: ImageStats | TextStats = ImageStats(SPLITS, feature["shape"], read_from)
        else:
            standardize = cfg.dataset.standardize or "strip_punctuation"
            self.stats = TextStats(SPLITS, standardize, self.validation.near_empty_tokens, listed)

    def add(self, split: str, value: bytes, label: int, name=None, header=None) -> None:
        position = sum(self.per_class[split])
        name = name or f"{split}#{position}"
        ex = self.ex
        ex.splits.append(split)
        ex.labels.append(int(label))
        ex.names.append(name)
        stats = self.stats
        if isinstance(stats, ImageStats):  # modality image
            ex.keys.append(dedup.digest(value))  # dedup.content_hash: the pixels
            stats.add(split, value, name, None, header)
        else:
            text = dedup.standard_text(value)
            ex.keys.append(dedup.digest(text.encode("utf-8")))  # dedup.content_hash: the standard text
            stats.add(split, value, name, text, header)
        ex.positions.append(position)
        self.per_class[split][int(label)] += 1

    def duplicates(self) -> dict:
        """{'exact': section, 'near': section, 'leaked': sorted test ids duplicating a train example}."""
        self.stats.flush()
        ex, listed = self.ex, self.validation.examples_listed
        same = dedup.exact_clusters(ex.keys)
        exact, leaked_exact = dedup.summarize(same, ex, listed)
        links = [(m[0], other) for m in same for other in m[1:]]
        links.extend(self._near_links())
        clusters = [
            members
            for members in dedup.linked_clusters(len(ex.keys), links)
            if len({ex.keys[m] for m in members}) > 1
        ]
        near, leaked_near = dedup.summarize(clusters, replace(ex, near=True), listed)
        return {"exact": exact, "near": near, "leaked": sorted(leaked_exact | leaked_near)}

    def _near_links(self) -> list:
        stats = self.stats
        if isinstance(stats, ImageStats):  # modality image
            if not stats.thumbs:  # no image streamed: no hash either, so no pair
                return []
            pairs = dedup.near_pairs(
                np.asarray(stats.hashes, dtype=np.uint64), self.validation.near_image_hamming
            )
            thumbs = np.concatenate(stats.thumbs)
            return dedup.same_colours(thumbs, pairs, self.validation.near_image_max_colour_diff)
        groups = dedup.exact_clusters(stats.near_keys)
        return [(m[0], other) for m in groups for other in m[1:]]

    def build(self, manifest: dict, found: dict, dropped: list, vocabulary) -> dict:
        return {
            "format_version": REPORT_VERSION,
            "dataset": manifest["dataset"],
            "modality": self.modality,
            "splits": {s: self._split(s, dropped, vocabulary) for s in SPLITS},
            "skipped_files": {
                "count": manifest["skipped_files"]["count"],
                "see": f"{MANIFEST_FILE}: skipped_files",
            },
            "duplicates": {"exact": found["exact"], "near": found["near"]},
            "leakage": self._leakage(found, dropped),
            "settings": {k: getattr(self.validation, k) for k in vars(self.validation)},
        }

    def _split(self, split: str, dropped: list, vocabulary) -> dict:
        counts = list(self.per_class[split])
        for index in dropped if split == "test" else ():
            counts[self.ex.labels[index]] -= 1
        total = sum(counts)
        classes = {
            name: {"examples": c, "share": round(c / total, 6) if total else None}
            for name, c in zip(self.ex.class_names, counts)
        }
        return {"num_examples": total, "classes": classes, **self.stats.split_report(split, vocabulary)}

    def _leakage(self, found: dict, dropped: list) -> dict:
        leaked = found["leaked"]
        kept = [] if dropped else leaked
        return {
            "policy": self.validation.leakage,
            "test_examples_in_train": len(leaked),
            "dropped": len(dropped),
            "dropped_examples": [self.ex.names[i] for i in dropped[: self.validation.examples_listed]],
            # the test examples (as now prepared) that duplicate a train example, by content hash: evaluate
            # scores the test split without them (test_accuracy_dedup)
            "test_hashes": sorted({self.ex.keys[i] for i in kept}),
        }


def headline(report: dict) -> dict:
    """The flat figures prepare writes to metrics/data.json and train tags the run with."""
    exact, near = report["duplicates"]["exact"], report["duplicates"]["near"]
    out = {f"examples_{s}": report["splits"][s]["num_examples"] for s in SPLITS}
    out["exact_duplicates_within"] = sum(v["duplicates"] for v in exact["within"].values())
    out["near_duplicates_within"] = sum(v["duplicates"] for v in near["within"].values())
    out["exact_test_in_train"] = exact["across"]["train-test"]["examples_in_test"]
    out["near_test_in_train"] = near["across"]["train-test"]["examples_in_test"]
    out["conflicting_label_groups"] = (
        exact["conflicting_labels"]["groups"] + near["conflicting_labels"]["groups"]
    )
    out["test_dropped"] = report["leakage"]["dropped"]
    out["skipped_files"] = report["skipped_files"]["count"]
    if report["modality"] == "image":
        out["image_modes"] = image_modes(report)
    if report["modality"] == "text":
        out["test_oov_rate"] = report["splits"]["test"]["oov_rate"]
        out["empty_or_near_empty"] = sum(
            v["empty_or_near_empty"]["empty"] + v["empty_or_near_empty"]["near_empty"]
            for v in report["splits"].values()
        )
    return out


def figures(report: dict) -> dict:
    """The per-split figures of a report, flat ('test.share[red]': 0.1429), for comparing two runs' reports
    (pipeline.compare; the headline figures are the runs' data.* tags): examples, share per class, pixel
    mean/std per channel, OOV rate, median length."""
    out: dict = {}
    for split, entry in report["splits"].items():
        out[f"{split}.num_examples"] = entry["num_examples"]
        out.update({f"{split}.share[{n}]": c["share"] for n, c in entry["classes"].items()})
        for key in ("pixel_mean", "pixel_std"):
            out.update({f"{split}.{key}[{i}]": v for i, v in enumerate(entry.get(key) or [])})
        if "oov_rate" in entry:
            out[f"{split}.oov_rate"] = entry["oov_rate"]
        for key in ("tokens", "characters"):
            if key in entry:
                out[f"{split}.{key}.median"] = entry[key]["median"]
    return out


def image_modes(report: dict) -> str:
    """The source images' modes over all splits, most frequent first: 'RGB:950 L:40 RGBA:10'."""
    total: dict = {}
    for entry in report["splits"].values():
        for mode, n in (entry.get("source_images") or {}).get("modes", {}).items():
            total[mode] = total.get(mode, 0) + n
    return " ".join(f"{m}:{n}" for m, n in sorted(total.items(), key=lambda kv: (-kv[1], kv[0])))


def write_report(directory: Path, report: dict) -> Path:
    path = Path(directory) / REPORT_FILE
    path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return path


def load_report(prepared_dir) -> dict | None:
    """report.json of a prepared folder, or None when prepare wrote none (data.validation.report=false)."""
    path = Path(prepared_dir) / REPORT_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{path}: unreadable data report ({exc}); run the prepare stage again") from None


def leaked_test_hashes(prepared_dir) -> set:
    """Content hashes of the test examples that duplicate a train example (empty when none or no report)."""
    report = load_report(prepared_dir)
    return set(report["leakage"]["test_hashes"]) if report else set()
