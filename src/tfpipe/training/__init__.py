"""One custom training loop for every tf.distribute strategy, along the seams of TF Model Garden (task /
trainer / controller) and Lightning (callbacks):

- `task.py`: input spec from the manifest, model, loss, datasets, export (all image/text branching);
- `steps.py`: model, optimizer, metrics and the per-replica train/eval steps (loss over the GLOBAL batch,
  gradient accumulation, loss scaling);
- `runners.py`: `SyncRunner` / `CoordinatedRunner` (parameter_server) behind one interface;
- `loop.py`: epochs and the step boundaries where hooks log, checkpoint and stop (`tfpipe.hooks`,
  `tfpipe.monitoring`);
- `optim.py`: learning-rate schedules and the optimizer factory;
- `trainer.py`: `train()`, which builds the pieces from the config and runs them. The work directory is
  `tfpipe.workdir`'s.
"""

from tfpipe.hooks import EPOCH_METRICS, STEP_METRICS, MetricsSink
from tfpipe.training.optim import WarmupSchedule, lr_scale, make_lr_schedule, make_optimizer
from tfpipe.training.task import InputSpec, batches_per_pipeline, preflight
from tfpipe.training.trainer import TrainResult, train

__all__ = [
    "EPOCH_METRICS",
    "STEP_METRICS",
    "InputSpec",
    "MetricsSink",
    "TrainResult",
    "WarmupSchedule",
    "batches_per_pipeline",
    "lr_scale",
    "make_lr_schedule",
    "make_optimizer",
    "preflight",
    "train",
]
