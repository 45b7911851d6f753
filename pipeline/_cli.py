"""The entry points' shared command line lives in the library (`tfpipe.commands.entry`), so
`python -m pipeline.<stage>` and the `tfpipe` console script parse, check and fail the same way."""

from tfpipe import phases
from tfpipe.commands.entry import DEBUG_ENV, EXIT_BAD_INPUT, cli, load_config
from tfpipe.commands.entry import main as _main

__all__ = ["DEBUG_ENV", "EXIT_BAD_INPUT", "cli", "load_config", "main"]


def main(stage, run, description, argv=None, prog=""):
    """`tfpipe.commands.entry.main`, timed as the phase `<stage> stage` when env TFPIPE_PHASES is set."""
    with phases.phase(f"{stage} stage"):
        _main(stage, run, description, argv, prog)
