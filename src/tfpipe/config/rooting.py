"""The config as the stages run it: project-relative data paths made absolute and `data.source=auto` decided
(the directory source when data.path is a folder, else TFDS), so the stages may run from anywhere, a DVC
experiment in a temporary copy too. In the config room, TensorFlow-free, so the audit decides `auto` for the
present project the way the stages did for the run (`tfpipe.audit.configs`); `tfpipe.layout.rooted` is this
function."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from tfpipe.config.root import Config
from tfpipe.errors import ConfigError


def rooted(cfg: Config, root: Path) -> Config:
    """The config with project-relative data paths made absolute and data.source=auto decided: the directory
    source when data.path is a folder (data/raw/<dataset> by default), else TFDS."""

    def absolute(p):
        return p if p is None or os.path.isabs(p) else str(root / p)

    path = absolute(cfg.data.path)
    source = cfg.data.source
    if source == "auto":
        source = "directory" if path and Path(path).is_dir() else "tfds"
        if source == "tfds":
            _not_in_this_experiment_copy(cfg.data.path, root)
        if source == "tfds" and not cfg.dataset.tfds_name:
            raise ConfigError(
                f"data.source=auto: data.path={cfg.data.path} is not a folder and dataset "
                f"{cfg.dataset.name!r} has no TFDS builder (dataset.tfds_name); put its split folders there "
                "or set data.path"
            )
    data_cfg = dataclasses.replace(
        cfg.data, source=source, path=path, output_dir=absolute(cfg.data.output_dir)
    )
    return dataclasses.replace(cfg, data=data_cfg)


def _not_in_this_experiment_copy(data_path, root: Path) -> None:
    """A queued or `--temp` DVC experiment runs in a copy holding only what git and DVC track (DVC_ROOT names the
    project): a data folder the project has but the copy lacks was never `dvc add`ed. Refused, rather than TFDS
    downloading another copy of the data or failing offline with a path inside the copy."""
    project = os.environ.get("DVC_ROOT", "").strip()
    if not data_path or os.path.isabs(data_path) or not project or Path(project).resolve() == root.resolve():
        return
    if (Path(project) / data_path).is_dir():
        raise ConfigError(
            f"data.source=auto: {data_path} is a folder in the project ({project}) but not in this DVC experiment's "
            f"copy, which holds only what git and DVC track (queued and --temp experiments): dvc add {data_path}, "
            f"git add {data_path}.dvc, commit, then run the experiment again"
        )
