"""Hydra multirun over the whole pipeline (prepare, train, evaluate per combination).

    python -m pipeline.sweep --multirun precision=float32,mixed_bfloat16 train.optimizer.learning_rate=0.001,0.01

Every combination is one MLflow run (named and tagged like any other run), all nested under one
parent run `sweep-<time>` (tag `tfpipe.sweep=parent`). Each job gets conf/ composed by Hydra with
its overrides, validated like params.yaml, and runs the stages as `python -m pipeline.run_all`
would, in this process, in the project folder: outputs
under data/prepared and models/ are overwritten job after job (MLflow keeps every run's
artifacts); for DVC-tracked sweeps use `dvc exp run --queue` (see README, "Working as a team").
Hydra writes its per-job logs under multirun/<date>/<time>/.
"""

from tfpipe.commands import environment

environment.set_defaults()  # before Hydra's app imports TensorFlow

import hydra  # noqa: E402

from tfpipe.launch import sweeps  # noqa: E402


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def job(composed) -> None:
    sweeps.run_job(composed)


if __name__ == "__main__":
    sweeps.run_sweep(job)
