"""`python -m tfpipe SUBCOMMAND ...`: the `tfpipe` console script, run by this interpreter with the working directory
on sys.path, so a project's own modules (model.builder, train.hooks) import as they do under `python -m pipeline.*`."""

from tfpipe.cli import main

if __name__ == "__main__":
    main()
