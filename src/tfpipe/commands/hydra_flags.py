"""Hydra's standard flags on a stage's command line, though a stage is not a Hydra app (it reads params.yaml as
`dvc repro` runs it, with the overrides on top: `tfpipe.config.overlay`): `--cfg job [--resolve] [-p KEY]` prints the
config the stage would run with and exits, `--info` the config groups, `--hydra-help` what applies; the others
(`-m`, `-sc`, `-cn`, ...) answer in one line naming what does, exit 2. Nothing here runs a stage."""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from pathlib import Path
from typing import Any

from tfpipe.errors import USER_ERRORS, ConfigError, one_line
from tfpipe.exits import EXIT_BAD_INPUT, EXIT_OK  # EXIT_BAD_INPUT: also imported from here


def refuse(stage: str, message: str) -> int:
    """The one-line error on stderr; returns the bad-input exit code."""
    print(f"{stage}: error: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


HYDRA_DOCS = "https://hydra.cc/docs/advanced/override_grammar/basic/"
# Hydra's --info modes; each prints the one summary here
INFO_MODES = ("all", "config", "defaults", "defaults-tree", "plugins", "searchpath")
_ONE_CONFIG = (
    "a stage composes conf/config.yaml only; pick a preset with experiment=NAME, or a file with --params"
)
_ONE_LINE_ANSWERS = {  # Hydra's flags with no meaning for a stage: dest -> (flags, what to use instead)
    "shell_completion": (
        ("--shell-completion", "-sc"),
        "not available for a stage (argparse, not Hydra's app runner); --help and --info list the groups",
    ),
    "config_path": (("--config-path", "-cp"), _ONE_CONFIG),
    "config_name": (("--config-name", "-cn"), _ONE_CONFIG),
    "config_dir": (("--config-dir", "-cd"), _ONE_CONFIG),
    "experimental_rerun": (
        ("--experimental-rerun",),
        "a stage writes no Hydra config pickle; rerun a config file with --params FILE, "
        "or a recorded MLflow run with tfpipe audit RUN_ID --rerun",
    ),
}
_HYDRA_HELP = """{prog} is not a Hydra app: it reads --params (params.yaml, as `dvc repro` runs it) and applies the
overrides on top with Hydra's compose API; a group choice that sets other sections' values (dataset=, experiment=)
composes conf/ afresh (one stderr line names the params.yaml values this drops). Of Hydra's flags:
  --cfg job [--resolve] [-p KEY]  print the config it would run with, as YAML, and exit (nothing runs)
  --info                          the config dir, the config groups and their options, the overrides given
  --help                          every flag, and the config groups
  -m/--multirun                   sweeps are a Hydra app of their own: tfpipe sweep --multirun KEY=A,B
Overrides: KEY=VALUE, GROUP=OPTION, +KEY=VALUE, ~KEY ({docs})"""
_NO_HYDRA_CONFIG = (  # --cfg hydra|all, as a YAML comment so the output still parses
    "# {stage}: no Hydra run config (conf/ is composed with Hydra's compose API; no hydra.* output dir, logging, "
    "launcher or sweeper applies); the job config: --cfg job; the sweep app's: tfpipe sweep --cfg hydra\n"
)
_ABSENT = object()


# Hydra's flags as its own parser declares them, long and short (--help and --version excepted: every command has
# its own), and Hydra's override forms KEY=VALUE, +KEY=VALUE, ++KEY=VALUE, ~KEY
_HYDRA_FLAG = re.compile(
    r"^(--(cfg|resolve|package|info|hydra-help|run|multirun|shell-completion|config-path|config-name|config-dir"
    r"|experimental-rerun)(=.*)?|-(c|p|i|r|m|sc|cp|cn|cd))$"
)
_OVERRIDE = re.compile(r"^(\+{0,2}[A-Za-z_][\w.@/-]*=|~[A-Za-z_])")


class CommandParser(argparse.ArgumentParser):
    """The parser of a command that is not a stage (audit, compare, promote, predict, serve, init, tune): Hydra's
    flags, and overrides where the command takes none, answer in one line naming what does; exit 2."""

    def __init__(self, *args, does: str, takes_overrides: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self._does, self._takes_overrides = does, takes_overrides

    def parse_known_args(self, args=None, namespace=None):
        for token in sys.argv[1:] if args is None else args:
            if token == "--":
                break
            if _HYDRA_FLAG.match(token) or (not self._takes_overrides and _OVERRIDE.match(token)):
                what = "Hydra's flags" + ("" if self._takes_overrides else " or its overrides")
                self.exit(
                    EXIT_BAD_INPUT,
                    f"{self.prog}: error: {token}: {self.prog} {self._does} and takes none of {what}; the config a "
                    "training would run with: tfpipe train --cfg job [KEY=VALUE ...]; a recorded run's: its "
                    "params (mlflow ui, tfpipe compare RUN_A RUN_B)\n",
                )
        return super().parse_known_args(args, namespace)


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Hydra's standard flags, long and short, as Hydra's own parser declares them."""
    add = parser.add_argument_group("Hydra's flags (a stage is not a Hydra app: --hydra-help)").add_argument
    add("--cfg", "-c", choices=("job", "hydra", "all"), help="print the job config as YAML, and exit")
    add("--resolve", action="store_true", help="with --cfg: resolve ${...} interpolations")
    add("--package", "-p", metavar="KEY", help="with --cfg: print only this sub-tree (e.g. train)")
    add("--info", nargs="?", const="all", choices=INFO_MODES, metavar="MODE", help="config groups; exit")
    add("--hydra-help", action="store_true", help="which of Hydra's flags apply here, and exit")
    add("--version", action="store_true", help="print tfpipe's and Hydra's versions, and exit")
    add("--run", "-r", action="store_true", help="run the stage (what it does anyway)")
    add("--multirun", "-m", action="store_true", help="sweeps: tfpipe sweep --multirun KEY=A,B")
    for dest, (flags, _) in _ONE_LINE_ANSWERS.items():
        kind: dict[str, Any] = {"action": "store_true"} if dest == "shell_completion" else {"metavar": "X"}
        add(*flags, **kind, help="Hydra's; answers what to use here")


def answer(stage: str, prog: str, args, overrides: list, root: Path, debug: bool) -> int | None:
    """Answer Hydra's flags: print and return 0, refuse in one line and return 2, or None: run the stage."""
    for dest, (flags, answer) in _ONE_LINE_ANSWERS.items():
        if getattr(args, dest):
            return refuse(stage, f"{'/'.join(flags)}: {answer}")
    if args.multirun:
        return refuse(
            stage,
            "-m/--multirun: a stage runs one config; a sweep runs the whole pipeline per combination: "
            f"tfpipe sweep --multirun {shlex.join(overrides) or 'KEY=A,B'} "
            "(the same as python -m pipeline.sweep --multirun ...)",
        )
    if args.hydra_help:
        print(_HYDRA_HELP.format(prog=prog, docs=HYDRA_DOCS))
    elif args.version:
        from importlib.metadata import version

        print(f"tfpipe {version('tfpipe')} (Hydra {version('hydra-core')})")
    elif args.info:
        print(_info(stage, overrides, args.params, root))
    elif args.cfg:
        return _print_config(stage, args, overrides, root, debug)
    else:
        return None
    return EXIT_OK


def groups_help(root: Path) -> str:
    """The config groups of conf/ (its folders) and their options (their .yaml files), for --help and --info:
    the groups conf/config.yaml's defaults list names; others (conf/tune: `tfpipe tune` presets) named apart."""
    import yaml

    from tfpipe.config import CONF_DIR, CONFIG_NAME
    from tfpipe.config.compose import search_dirs

    conf_dir = root / CONF_DIR
    root_config = conf_dir / f"{CONFIG_NAME}.yaml"
    try:
        defaults = yaml.safe_load(root_config.read_text(encoding="utf-8"))["defaults"]
    except (OSError, yaml.YAMLError, TypeError, KeyError):  # every stage builds its --help: never fail here
        return f"config groups: none ({root_config} unreadable or without a defaults list)"
    named = {group for item in defaults if isinstance(item, dict) for group in item}
    options: dict = {}  # group -> its options in every folder Hydra searches (a `tfpipe init` project's and tfpipe's)
    for folder in search_dirs(conf_dir):
        for d in folder.iterdir() if folder.is_dir() else ():
            if d.is_dir() and not d.name.startswith((".", "_")):
                options.setdefault(d.name, set()).update(p.stem for p in d.glob("*.yaml"))
    lines = [f"  {group}: {', '.join(sorted(options[group]))}" for group in sorted(options) if group in named]
    other = ", ".join(group for group in sorted(options) if group not in named)
    lines += [f"  (other folders of conf/, not config groups of a stage: {other})"] if other else []
    return "\n".join(["config groups (GROUP=OPTION, e.g. model=resnet; any key: KEY=VALUE):", *lines])


def _info(stage: str, overrides: list, params_path: str | None, root: Path) -> str:
    """--info: where the stage's config comes from, the config groups and their options, the overrides."""
    from tfpipe.config import CONF_DIR, PARAMS_FILE
    from tfpipe.config.overlay import source

    params = params_path or PARAMS_FILE
    where = (
        source(overrides, root / params, root / CONF_DIR, named=bool(params_path)) if overrides else params
    )
    head = f"{stage}: not a Hydra app; conf/ is composed with Hydra's compose API (see --hydra-help)"
    where = f"config dir: {(root / CONF_DIR).resolve()}\nconfig: {where}"
    return f"{head}\n{where}\noverrides: {shlex.join(overrides) or '(none)'}\n{groups_help(root)}"


def _print_config(stage: str, args, overrides: list, root: Path, debug: bool) -> int:
    """--cfg: the config the stage would run with, checked as when it runs (same one-line errors, the same note
    on stderr), as YAML on stdout; nothing runs (no preflight, no TensorFlow)."""
    try:
        text = _config_yaml(stage, overrides, root, args)
    except USER_ERRORS as exc:
        if debug:
            raise
        return refuse(stage, one_line(exc))
    sys.stdout.write(("" if args.cfg == "job" else _NO_HYDRA_CONFIG.format(stage=stage)) + text)
    return EXIT_OK


def _config_yaml(stage: str, overrides: list, root: Path, args) -> str:
    """The job config as YAML (empty for --cfg hydra), validated as the stage validates it: the params file with
    the overrides on top (`tfpipe.config.overlay`); interpolations kept unless --resolve; --package KEY: only that
    sub-tree (a single value prints resolved, as in Hydra)."""
    from omegaconf import OmegaConf

    from tfpipe import config
    from tfpipe.config import overlay
    from tfpipe.config.compose import resolved

    params = root / (args.params or config.PARAMS_FILE)
    if overrides:
        composed = overlay.compose_over_params(
            overrides, params, root / config.CONF_DIR, named=bool(args.params)
        )
        cfg, note = composed.cfg, composed.note
        config.from_dict(resolved(cfg, overrides))
    else:
        config.load_params(params)
        cfg, note = OmegaConf.load(params), ""
    if note:
        print(f"{stage}: warning: {note}", file=sys.stderr)
    if args.cfg == "hydra":
        return ""
    if args.resolve:
        OmegaConf.resolve(cfg)
    node = OmegaConf.select(cfg, args.package, default=_ABSENT) if args.package else cfg
    if node is _ABSENT:
        config.schema_key(args.package)  # a misspelt key: the did-you-mean line
        raise ConfigError(f"--package {args.package}: not set by the selected config options")
    if not OmegaConf.is_config(node):
        return f"{node}\n"
    return (f"# @package {args.package}\n" if args.package else "") + OmegaConf.to_yaml(node)
