"""The entry points' shared command line lives in the library (`tfpipe.commands.entry`), so
`python -m pipeline.<stage>` and the `tfpipe` console script parse, check, time (the phase `<stage> stage`,
env TFPIPE_PHASES) and exit the same way."""

from tfpipe.commands.entry import DEBUG_ENV, EXIT_BAD_INPUT, cli, load_config, main

__all__ = ["DEBUG_ENV", "EXIT_BAD_INPUT", "cli", "load_config", "main"]
