"""`tfpipe init DIR`: a new project of a team's own that depends on the installed tfpipe and holds only its parts.

What it writes: `conf/config.yaml` (tfpipe's defaults list, extended through Hydra's search path from the packaged
`pkg://tfpipe.conf`, so every built-in option stays selectable and the team's own win), `conf/model/<model>.yaml`
and `<package>/model.py` (an example model by import path), `dvc.yaml` (the three stages as `python -m tfpipe`),
`params.yaml` (the composition, as DVC's Hydra integration writes it), `MLproject`, a README, a smoke test,
`.gitignore`, `.dvcignore`, `data/raw/` for class-per-folder data, `requirements.in` (tfpipe at this version; the
team locks it), and the pull-request report in CI: `ci/pr_report.sh` (train the base and the change on a small
preset, `tfpipe report` them) run by `.github/workflows/tfpipe.yml` and `.gitlab-ci.yml`, which post its Markdown
on the request; then `git init` and `dvc init` (Hydra on).

What it does not: commit (the team's first commit is theirs), download data, or touch a folder that is not empty
(one line, exit 2, nothing written). The files are the templates under `tfpipe/scaffold/project/` with four
names filled in; a template engine (copier, cookiecutter) would add a dependency for four string replacements.
In YAML values the names go in as double-quoted scalars (`yaml_scalar`, the `__..._YAML__` tokens): a project
`null`, `on`, `yes` or `1e3` stays that string for every reader (PyYAML, OmegaConf, DVC's YAML 1.2).
"""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import resources
from pathlib import Path

import yaml

from tfpipe.commands.hydra_flags import CommandParser
from tfpipe.exits import EXIT_BAD_INPUT, EXIT_OK

TEMPLATE = Path(__file__).resolve().parent / "project"
# Names the templates cannot carry in this repository: dotfiles would apply here, a dvc.yaml would be read by
# DVC as one of this project's pipelines.
# The CI files too: GitHub and GitLab read only a repository's top-level ones, but a wheel's glob skips dotfiles.
RENAMED = {
    "gitignore": ".gitignore",
    "dvcignore": ".dvcignore",
    "dvc.yaml.tmpl": "dvc.yaml",
    "github": ".github",
    "gitlab-ci.yml": ".gitlab-ci.yml",
}
_IDENTIFIER = re.compile(r"[a-z][a-z0-9_]{0,39}$")
_FOLDER_NAME = re.compile(
    r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
)  # it names the MLflow experiment and YAML values


class InitError(ValueError):
    """The folder or a name cannot hold a new project; nothing was written."""


def package_name(folder: Path) -> str:
    """The project's Python package: the folder's name, lower-cased, other characters as `_`."""
    name = re.sub(r"[^a-z0-9_]", "_", folder.resolve().name.lower()).strip("_") or "project"
    return name if name[0].isalpha() else f"p_{name}"


def check(folder: Path, model: str) -> None:
    if not _FOLDER_NAME.match(folder.resolve().name):
        raise InitError(
            f"{folder}: the folder's name names the project (its MLflow experiment): use letters, digits, '.', "
            "'_' and '-', at most 64"
        )
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        what = "is not empty" if folder.is_dir() else "is a file"
        raise InitError(f"{folder}: {what}; tfpipe init writes a new project into a new or empty folder")
    if not _IDENTIFIER.match(model):
        raise InitError(
            f"--model {model!r}: expected lower-case letters, digits and _, at most 40 (it names runs and the "
            "registered model)"
        )
    from tfpipe.config.schema import BUILT_IN

    if model in BUILT_IN:
        raise InitError(f"--model {model!r}: a built-in model's name; pick your own (e.g. my_model)")


def yaml_scalar(text: str) -> str:
    """`text` as a double-quoted YAML scalar, which YAML 1.1 and 1.2 readers and OmegaConf all load back as
    this exact string (plain, `null`, `on`, `yes` or `1e3` would load as None, True or 1000.0)."""
    return yaml.safe_dump(str(text), default_style='"', width=float("inf")).rstrip("\n")


def config_yaml(project: str, model: str) -> str:
    """tfpipe's packaged defaults list with the team's model picked, the package searched, the experiment named."""
    packaged = (resources.files("tfpipe.conf") / "config.yaml").read_text(encoding="utf-8")
    found = re.search(r"^defaults:\n(?:  - .*\n)+", packaged, flags=re.M)
    if found is None:
        raise InitError("the installed tfpipe's conf/config.yaml has no defaults list: reinstall tfpipe")
    defaults = found.group(0)
    mine = f"  - override model: {yaml_scalar(model)}  # yours whatever dataset= picks (each has a model)\n"
    defaults = defaults.replace("  - _self_", mine + "  - _self_", 1)
    return (
        f"# {project}'s Hydra config: tfpipe's defaults (the installed package's tfpipe/conf, on the search path\n"
        "# below), with this folder's files added and winning. `params.yaml` is this composed with no overrides;\n"
        "# `dvc exp run -S key=value` composes it anew, so settings that should stay belong here.\n"
        f"{defaults}\n"
        "hydra:\n"
        "  searchpath:\n"
        "    - pkg://tfpipe.conf        # tfpipe's packaged config groups (model, dataset, strategy, ...)\n"
        "\n"
        "tracking:\n"
        f"  experiment_name: {yaml_scalar(project)}  # the MLflow experiment of this project's runs\n"
        f"  registered_model_name: {yaml_scalar(project + '-${dataset.name}')}  # its models in the registry "
        "(tfpipe's: tfpipe-<dataset>)\n"
    )


def write(folder: Path, model: str = "my_model") -> list:
    """The project's files in `folder` (new or empty); returns them, relative to it."""
    check(folder, model)
    names = {"__PROJECT__": folder.resolve().name, "__PACKAGE__": package_name(folder), "__MODEL__": model}
    names = {**{f"{k[:-2]}_YAML__": yaml_scalar(v) for k, v in names.items()}, **names}  # YAML values: quoted
    names["__TFPIPE_REQUIREMENT__"] = tfpipe_requirement()
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for source in sorted(p for p in TEMPLATE.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        relative = source.relative_to(TEMPLATE)
        parts = [RENAMED.get(part, part) for part in relative.parts]
        target = folder.joinpath(*(_fill(part, names) for part in parts))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(_fill(source.read_text(encoding="utf-8"), names), encoding="utf-8")
        written.append(target.relative_to(folder))
    (folder / "conf" / "config.yaml").write_text(config_yaml(names["__PROJECT__"], model), encoding="utf-8")
    written.append(Path("conf/config.yaml"))
    from tfpipe.config import compose_yaml

    (folder / "params.yaml").write_text(compose_yaml(config_dir=folder / "conf"), encoding="utf-8")
    written.append(Path("params.yaml"))
    return sorted(written)


def tfpipe_requirement() -> str:
    """requirements.in's line for tfpipe: the installed version, pinned (unpinned when tfpipe runs uninstalled)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"tfpipe=={version('tfpipe')}"
    except PackageNotFoundError:
        return "tfpipe"


def _fill(text: str, names: dict) -> str:
    for token, value in names.items():
        text = text.replace(token, value)
    return text


def init_repositories(folder: Path) -> None:
    """`git init` and `dvc init` with DVC's Hydra composition on (`dvc exp run -S` rebuilds params.yaml from conf/)
    and `dvc plots` drawing offline (.dvc/plots.html: Vega inline, `tfpipe.plots_page`)."""
    from tfpipe import plots_page

    steps = [
        ["git", "init", "-q"],
        [sys.executable, "-m", "dvc", "init", "-q"],
        [sys.executable, "-m", "dvc", "config", "hydra.enabled", "true"],
        [sys.executable, "-m", "dvc", "config", "core.autostage", "true"],
        [sys.executable, "-m", "dvc", "config", "plots.html_template", plots_page.TEMPLATE_NAME],
        None,  # here the page itself is written
        ["git", "add", "-A"],
    ]
    for cmd in steps:
        if cmd is None:
            plots_page.write(folder / ".dvc" / plots_page.TEMPLATE_NAME)
            continue
        proc = subprocess.run(cmd, cwd=folder, capture_output=True, text=True)
        if proc.returncode != 0:
            raise InitError(f"`{' '.join(cmd[-3:])}` failed in {folder}: {proc.stderr.strip()[:300]}")


def main(argv=None, prog: str = "tfpipe init") -> int:
    parser = CommandParser(prog=prog, description=__doc__.split("\n\n")[0], does="writes a new project")
    parser.add_argument("folder", type=Path, help="where the project goes: a new or empty folder")
    parser.add_argument("--model", default="my_model", help="your model's name (default my_model)")
    args = parser.parse_args(argv)
    try:
        written = write(args.folder, args.model)
        init_repositories(args.folder)
    except InitError as exc:
        print(f"init: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"init: wrote {len(written)} files into {args.folder} (git and dvc initialised, files staged)")
    print(
        f"next: cd {args.folder}; put images or texts in data/raw/<dataset>/{{train,test}}/<class>/; "
        f"git commit -m 'tfpipe init'; dvc exp run"
    )
    return EXIT_OK
