"""DVC stage `train`: prepared TFRecords -> trained model, checkpoints, SavedModel, MLflow run.

With strategy multi_worker_mirrored / parameter_server and no TF_CONFIG, it hands over to the local
launcher (`pipeline.launch`), which runs this same entry point once per task with TF_CONFIG set.
Under parameter_server, worker and ps tasks run a tf.distribute.Server until the launcher stops them.
"""

import sys

from pipeline._cli import main


def run(cfg, root):
    import os

    from tfpipe import cluster
    from tfpipe.config import MULTI_PROCESS_STRATEGIES

    if cfg.strategy.name in MULTI_PROCESS_STRATEGIES and not os.environ.get(cluster.TF_CONFIG, "").strip():
        from pipeline.launch import launch

        args = [a for a in sys.argv[1:] if a != "--debug"]
        code = launch(cfg, args, root)
        if code:
            raise SystemExit(code)
        return None
    if cfg.strategy.name == "parameter_server" and cluster.task()[0] in ("worker", "ps"):
        from tfpipe import distribute

        return distribute.run_server(cfg.strategy)  # serves until stopped
    from tfpipe.stages import run_train

    return run_train(cfg, root)


if __name__ == "__main__":
    main("train", run, __doc__)
