"""The `tfpipe` console script: one command with a subcommand per entry point, the same code, arguments, one-line
errors and exit codes as `python -m pipeline.<name>`:

    tfpipe prepare|train|evaluate|run-all|launch [--params FILE] [--debug] [OVERRIDE ...]
    tfpipe audit RUN_ID [--rerun] [--tolerance X] [--against RUN] [--tracking-uri URI]
    tfpipe compare RUN_A RUN_B [--tracking-uri URI]
    tfpipe report BASE [RUN ...] [--out DIR] [--metric NAME] [--log] [--tracking-uri URI]
    tfpipe promote RUN_ID [--alias champion] [--force]
    tfpipe tune NAME [--storage URL] [--study NAME] [OVERRIDE ...]
    tfpipe predict MODEL_URI INPUT_DIR [--out predictions.csv] [--tracking-uri URI]
    tfpipe serve MODEL_URI [--port 5000] [--timeout 60] [--max-body-bytes N]   (checked first; MLflow's app, limited)
    tfpipe sweep [--multirun] [OVERRIDE ...]   (Hydra's own command line, as `python -m pipeline.sweep`)
    tfpipe init DIR [--model NAME]             (a new project of your own that uses the installed tfpipe)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable, Dict, NamedTuple, Optional, Sequence, Tuple

from tfpipe.commands import environment
from tfpipe.exits import EXIT_BAD_INPUT, EXIT_OK


def _stage(name: str) -> Callable[[list], None]:
    def run(rest: list) -> None:
        from tfpipe.commands.entry import main as entry_main

        function, description = _stages()[name]
        entry_main(name.replace("-", "_"), function, description, rest, prog=f"tfpipe {name}")

    return run


_AUDIT = "tfpipe.commands.audit"


def _audit(name: str) -> Callable[[list], None]:
    def run(rest: list) -> None:
        from tfpipe.commands import audit as audit_command

        sys.exit(audit_command.main(name, rest))

    return run


def _promote(rest: list) -> None:
    from tfpipe.commands import promote

    sys.exit(promote.main(rest, prog="tfpipe promote"))


def _report(rest: list) -> None:
    from tfpipe.commands import report

    sys.exit(report.main(rest, prog="tfpipe report"))


def _predict(rest: list) -> None:
    from tfpipe.commands import predict

    sys.exit(predict.main(rest, prog="tfpipe predict"))


def _serve(rest: list) -> None:
    from tfpipe.commands import serve

    sys.exit(serve.main(rest, prog="tfpipe serve"))


def _tune(rest: list) -> None:
    from tfpipe import tuning

    sys.exit(tuning.main(rest, prog="tfpipe tune"))


def _init(rest: list) -> None:
    from tfpipe import scaffold

    sys.exit(scaffold.main(rest))


class Command(NamedTuple):
    what: str  # what it does, in a few words (--help)
    run: Callable[[list], None]  # the handler, given the arguments after the subcommand
    module: Optional[
        str
    ]  # the module whose docstring states its exit codes (the commands page); None: Hydra's


ENTRY = "tfpipe.commands.entry"
# The one table: --help, the usage line, dispatch and the commands page read it.
COMMANDS: Dict[str, Command] = {
    "prepare": Command(
        "stage: source data -> TFRecord shards, manifest, data report", _stage("prepare"), ENTRY
    ),
    "train": Command("stage: prepared data -> model, SavedModel, one MLflow run", _stage("train"), ENTRY),
    "evaluate": Command(
        "stage: the SavedModel on the test split, into the train run", _stage("evaluate"), ENTRY
    ),
    "run-all": Command("prepare (when stale), train, evaluate", _stage("run-all"), ENTRY),
    "launch": Command("train under a multi-process strategy on this machine", _stage("launch"), ENTRY),
    "audit": Command("check a run against this clone, or re-execute it (--rerun)", _audit("audit"), _AUDIT),
    "compare": Command("how two runs differ", _audit("compare"), _AUDIT),
    "report": Command(
        "runs as seeds of their configurations, for a pull request", _report, "tfpipe.commands.report"
    ),
    "promote": Command(
        "register a run's model and move a registry alias to it",
        _promote,
        "tfpipe.commands.promote",
    ),
    "tune": Command("an Optuna study (conf/tune/NAME.yaml)", _tune, "tfpipe.tuning"),
    "predict": Command("batch prediction of a logged model to a CSV", _predict, "tfpipe.commands.predict"),
    "serve": Command("check a logged model, then serve it over HTTP", _serve, "tfpipe.commands.serve"),
    "sweep": Command("Hydra's multirun over the whole pipeline", lambda rest: sweep(rest), None),
    "init": Command("a project of your own on the installed tfpipe", _init, "tfpipe.scaffold"),
}
STAGES = ("prepare", "train", "evaluate", "run-all", "launch")
USAGE = f"usage: tfpipe {{{','.join(COMMANDS)}}} [ARGS ...] (tfpipe SUBCOMMAND --help)"


def help_text() -> str:
    width = max(map(len, COMMANDS))
    return "\n".join([USAGE, "", *(f"  {n:<{width}}  {c.what}" for n, c in COMMANDS.items())])


def _stages() -> Dict[str, Tuple[Callable, str]]:
    from tfpipe import stages
    from tfpipe.launch import local as launcher

    return {
        "prepare": (
            stages.run_prepare,
            "DVC stage `prepare`: source data -> sharded TFRecords + manifest.json",
        ),
        "train": (
            launcher.train_stage,
            "DVC stage `train`: prepared TFRecords -> model, SavedModel, MLflow run",
        ),
        "evaluate": (stages.run_evaluate, "DVC stage `evaluate`: the SavedModel on the test split"),
        "run-all": (stages.run_all, "prepare (when stale), train, evaluate"),
        "launch": (launcher.launch_stage, "Local launcher of a multi-process strategy"),
    }


def _project_on_path() -> None:
    """The project's own modules (model.builder, train.hooks) import from the working directory, as under
    `python -m tfpipe` and `python -m pipeline.<stage>`; a console script's sys.path starts at its own folder."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())


def main(argv: Optional[Sequence[str]] = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(help_text() if argv else USAGE, file=sys.stderr if not argv else sys.stdout)
        sys.exit(EXIT_BAD_INPUT if not argv else EXIT_OK)
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"tfpipe: error: unknown subcommand {name!r}; {USAGE}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    if name in (*STAGES, "tune", "sweep"):
        _project_on_path()
    environment.set_defaults()
    COMMANDS[name].run(rest)


def sweep(argv: Sequence[str]) -> None:
    """`tfpipe sweep`: the Hydra app of `python -m pipeline.sweep` (`tfpipe.launch.sweeps`) on conf/ of the
    working directory (the project root, as for every stage); Hydra parses `argv`."""
    if {"-sc", "--shell-completion"} & set(argv):  # Hydra's script completes `python FILE.py` or a program
        print(
            "tfpipe sweep: error: --shell-completion: Hydra's completion cannot complete a subcommand "
            "(nor python -m); tfpipe sweep --help lists the config groups",
            file=sys.stderr,
        )
        sys.exit(EXIT_BAD_INPUT)
    environment.set_defaults()
    import hydra

    from tfpipe import config
    from tfpipe.launch import sweeps

    def job(composed) -> None:
        sweeps.run_job(composed)

    job.__module__ = "tfpipe.sweep"  # Hydra names the job (its log file) after the module: `sweep`, as ever
    conf_dir = str(Path.cwd() / config.CONF_DIR)
    app = hydra.main(config_path=conf_dir, config_name=config.CONFIG_NAME, version_base="1.3")(job)
    sys.argv = [sys.argv[0], *argv]  # Hydra reads its command line there; run_job, the sweep's overrides
    sweeps.run_sweep(app)
    sys.exit(EXIT_OK)


if __name__ == "__main__":
    main()
