"""All stages in one process (the `mlflow run` main entry point): prepare, train, evaluate."""

from pipeline._cli import main

if __name__ == "__main__":
    from tfpipe.stages import run_all

    main("run_all", run_all, __doc__)
