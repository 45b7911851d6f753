"""DVC stage `train`: prepared TFRecords -> trained model, checkpoints, SavedModel, MLflow run."""

from pipeline._cli import main

if __name__ == "__main__":
    from tfpipe.stages import run_train

    main("train", run_train, __doc__)
