"""The config as the stages run it: project-relative data paths made absolute and `data.source=auto` decided
(the directory source when data.path is a folder, else TFDS), so the stages may run from anywhere, a DVC
experiment in a temporary copy too. In the config room, TensorFlow-free, so the audit decides `auto` for the
present project the way the stages did for the run (`tfpipe.audit.configs`); `tfpipe.layout.rooted` is this
function.

A queued or `--temp` DVC experiment runs in a copy under the project's `.dvc/tmp/exps/` holding only what git and
DVC track (DVC sets DVC_EXP_NAME, and DVC_ROOT to the project): a raw data folder the project has but the copy
lacks (git-ignored, never `dvc add`ed) is read from the project, read-only; prepare records its digest
(`tfpipe.data.lineage`). Refused instead: a folder DVC tracks (`<path>.dvc`) whose files the copy lacks (the
project's folder may hold another version than the experiment's commit names), and a DVC_ROOT this folder is
no experiment copy of. What it does not know: whether the project's folder changes while the experiment reads."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Optional

from tfpipe.config.root import Config
from tfpipe.errors import ConfigError

EXPERIMENT_COPIES = (".dvc", "tmp", "exps")  # where DVC makes a queued or --temp experiment's copy


def rooted(cfg: Config, root: Path) -> Config:
    """The config with project-relative data paths made absolute and data.source=auto decided: the directory
    source when data.path is a folder (data/raw/<dataset> by default; in a DVC experiment's copy lacking it, the
    project's folder), else TFDS."""

    def absolute(p):
        return p if p is None or os.path.isabs(p) else str(root / p)

    path = absolute(cfg.data.path)
    source = cfg.data.source
    if source in ("auto", "directory") and path and not Path(path).is_dir():
        path = _in_the_project(cfg.data.path, root) or path
    if source == "auto":
        source = "directory" if path and Path(path).is_dir() else "tfds"
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


def experiment_copy(root: Path) -> Optional[Path]:
    """The project (DVC_ROOT, resolved) when `root` is one of DVC's experiment copies of it, else None."""
    project = os.environ.get("DVC_ROOT", "").strip()
    if not project or not os.environ.get("DVC_EXP_NAME", "").strip():
        return None
    project_path, here = Path(project).resolve(), Path(root).resolve()
    return project_path if project_path.joinpath(*EXPERIMENT_COPIES) in here.parents else None


def _in_the_project(data_path: Optional[str], root: Path) -> Optional[str]:
    """The project's folder at `data_path` when this is a DVC experiment's copy lacking it (None elsewhere), read
    in place of the copy's; ConfigError where reading the project's folder would be wrong."""
    project = os.environ.get("DVC_ROOT", "").strip()
    if not data_path or os.path.isabs(data_path) or not project:
        return None
    if Path(project).resolve() == Path(root).resolve() or not (Path(project) / data_path).is_dir():
        return None  # DVC's workspace run, or the project lacks it too
    copy_of = experiment_copy(root)
    if copy_of is None:
        raise ConfigError(
            f"data.path={data_path} is a folder in DVC_ROOT ({project}) but not in {root}, which is no DVC "
            "experiment copy of it (.dvc/tmp/exps); run the stage from the project or set data.path"
        )
    tracked = f"{data_path.rstrip('/')}.dvc"
    if (Path(root) / tracked).is_file():
        raise ConfigError(
            f"data.path={data_path} is tracked by DVC ({tracked}) but its files are not in this experiment's "
            f"copy (not in DVC's cache); the project's folder may hold another version: dvc pull {tracked} "
            "(or dvc commit it), then run the experiment again"
        )
    return str(copy_of / data_path)
