"""Launch code: the processes of one training on this host, on Ray, on Slurm, on Kubernetes, and Hydra sweeps; what
it does not do: train (tfpipe.training) or build strategies (tfpipe.distribute)."""
