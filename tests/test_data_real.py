"""A few hundred members of the real archives in ../shared/datasets, prepared with the directory source.

Extracts only the selected members into tmp_path (never into the repo); skipped when the folder is absent.
"""

from __future__ import annotations

import re
import tarfile
from collections import Counter
from pathlib import Path

import pytest

from tfpipe import data

SHARED = Path(__file__).resolve().parents[2] / "shared" / "datasets"

pytestmark = pytest.mark.real_data

CASES = {
    # archive, member pattern (top folder, split, class), files per (split, class), overrides
    "cifar10": (
        "cifar10-images.tar.gz",
        r"^cifar10-images/(train|test)/([^/]+)/[^/]+\.jpg$",
        {"train": 20, "test": 5},
        [],
    ),
    "imdb": (
        "aclImdb-labeled.tar.gz",
        r"^aclImdb/(train|test)/(pos|neg)/[^/]+\.txt$",
        {"train": 60, "test": 20},
        ["dataset=imdb"],
    ),
}


def _extract_subset(archive: Path, pattern: str, per_class: dict, dest: Path) -> Path:
    """Stream the archive once, extracting the first `per_class[split]` files of each (split, class),
    plus top-level side files (README) so the source must ignore them."""
    wanted = re.compile(pattern)
    taken: Counter = Counter()
    top = None
    with tarfile.open(archive, "r|gz") as tar:
        for member in tar:
            top = top or member.name.split("/")[0]
            match = wanted.match(member.name)
            side_file = member.isfile() and member.name.count("/") == 1
            if match and member.isfile():
                split, cls = match.groups()
                if taken[split, cls] >= per_class[split]:
                    continue
                taken[split, cls] += 1
            elif not side_file:
                continue
            tar.extract(member, dest, filter="data")
    return dest / top


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.slow
def test_real_subset_prepares(name, tmp_path, make_config):
    archive_name, pattern, per_class, overrides = CASES[name]
    archive = SHARED / archive_name
    if not archive.is_file():
        pytest.skip(f"{archive} not found (real data lives in ../shared/datasets)")
    root = _extract_subset(archive, pattern, per_class, tmp_path / "raw")
    cfg = make_config(
        "data.source=directory",
        f"data.path={root}",
        f"data.output_dir={tmp_path / 'out'}",
        "data.examples_per_shard=64",
        *overrides,
    )
    manifest = data.prepare(cfg, progress=False)

    classes = sorted(p.name for p in (root / "train").iterdir() if p.is_dir())
    assert manifest["class_names"] == classes
    if name == "cifar10":
        assert classes == [
            "airplane",
            "automobile",
            "bird",
            "cat",
            "deer",
            "dog",
            "frog",
            "horse",
            "ship",
            "truck",
        ]
        assert manifest["feature_spec"]["image"]["shape"] == [32, 32, 3]
    else:
        assert classes == ["neg", "pos"]
        assert manifest["vocab_size"] > 100
        assert {"the", "movie", "br"} <= set(data.read_vocab(tmp_path / "out"))
    counts = {split: info["num_examples"] for split, info in manifest["splits"].items()}
    assert counts["train"] + counts["validation"] == per_class["train"] * len(classes)
    assert counts["test"] == per_class["test"] * len(classes)
    assert manifest["skipped_files"]["count"] == 0
    data.verify_shards(tmp_path / "out")
    features, labels = next(
        iter(data.make_dataset(tmp_path / "out", "train", batch_size=16, training=True, seed=0))
    )
    assert labels.shape == (16,) and features.shape[0] == 16
