"""Local launcher: `python -m pipeline.launch [--params FILE] [--debug] [OVERRIDE ...]`.

Starts the processes of a multi-process strategy (multi_worker_mirrored, parameter_server) on loopback ports,
each running the train stage with its own TF_CONFIG; stops them all when one fails and restarts the job up to
`strategy.max_restarts` times (`strategy.stop_grace_seconds`: SIGTERM -> SIGKILL). See `tfpipe.launch.local`.
"""

from pipeline._cli import main

if __name__ == "__main__":
    from tfpipe.launch.local import launch_stage

    main("launch", launch_stage, __doc__)
