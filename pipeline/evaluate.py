"""DVC stage `evaluate`: the exported SavedModel (loaded from disk) scored on the test split."""

from pipeline._cli import main

if __name__ == "__main__":
    from tfpipe.stages import run_evaluate

    main("evaluate", run_evaluate, __doc__)
