"""DVC stage `train`: prepared TFRecords -> trained model, checkpoints, SavedModel, MLflow run.

With strategy multi_worker_mirrored / parameter_server and no TF_CONFIG, it hands over to the local
launcher (`tfpipe.launch.local`), which runs the train stage once per task with TF_CONFIG set.
Under parameter_server, worker and ps tasks run a tf.distribute.Server until the launcher stops them.
"""

from pipeline._cli import main
from tfpipe.launch.local import train_stage as run

__all__ = ["run"]

if __name__ == "__main__":
    main("train", run, __doc__)
