"""The command lines of `tfpipe audit|compare`, `tfpipe promote` and `tfpipe serve` (and their `python -m pipeline.*`
twins): argument parsing, one-line errors and exit codes around the work the other packages do."""
