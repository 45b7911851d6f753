"""The local launcher and the train stage's role dispatch (`python -m pipeline.launch`, `tfpipe launch`).

Starts the processes of a multi-process strategy on loopback ports, each running the train stage
(`python -m tfpipe.cli train`) with its own TF_CONFIG: multi_worker_mirrored -> `strategy.num_workers`
workers (worker 0 is the chief); parameter_server -> a chief (the coordinator), `strategy.num_workers`
workers and `strategy.num_ps` parameter servers. Each line a process prints is prefixed with its role
(`[worker:1] ...`). If any process fails, the launcher stops the others (SIGTERM, then SIGKILL after a
grace period, `strategy.stop_grace_seconds`) and exits with that process's code, or, while
`strategy.max_restarts` allows, starts the whole job again (the chief resumes from its last checkpoint and
continues the same MLflow run); when the chief finishes, ps/worker servers are stopped. A multi_worker_mirrored
task that exits 143/130 (SIGTERM/SIGINT) stopped with the others at an agreed step (tfpipe.training.preemption):
the launcher waits up to the grace period for their own exit and prints every task's code.
The train stage (`train_stage`) delegates here by itself when the strategy needs it and TF_CONFIG is unset,
so `dvc repro` with strategy=multi_worker_mirrored works unchanged; under parameter_server its worker and ps
tasks serve the cluster until the launcher stops them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import List, Optional, Sequence

from tfpipe import strategies, tfconfig
from tfpipe.errors import ConfigError
from tfpipe.exits import EXIT_BAD_INPUT, EXIT_OK, EXIT_SIGINT, STOP_CODES, signal_exit
from tfpipe.interrupts import LAUNCHER_PID_ENV, die_with_launcher
from tfpipe.provenance import environ_snapshot

GRACE_SECONDS = 10.0
POLL_SECONDS = 0.2


def _child_env(tf_config: str) -> dict:
    import tfpipe

    env = environ_snapshot()  # MLflow's threads may change the environment while it is read
    env["TF_CONFIG"] = tf_config
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["PYTHONUNBUFFERED"] = "1"
    env[LAUNCHER_PID_ENV] = str(os.getpid())  # the task dies with this launcher (die_with_launcher)
    paths = [str(Path(tfpipe.__file__).resolve().parents[1])]  # children import this very tfpipe
    env["PYTHONPATH"] = os.pathsep.join(
        [*paths, *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]]
    )
    return env


def _pump(stream, prefix: str, out) -> None:
    for line in iter(stream.readline, ""):
        out.write(f"{prefix} {line}" if line.endswith("\n") else f"{prefix} {line}\n")
        out.flush()
    stream.close()


class Launcher:
    """The processes of one job; `run()` returns the job's exit code."""

    def __init__(
        self,
        strategy: str,
        num_workers: int,
        num_ps: int,
        train_args: Sequence[str],
        cwd: Path,
        grace: float = GRACE_SECONDS,
        out=None,
    ):
        from tfpipe.launch import cluster

        self.cluster = cluster.local_cluster(strategy, num_workers, num_ps)
        self.roles = cluster.roles(self.cluster)
        self.strategy = strategy
        self.spec = strategies.spec(strategy)
        self.train_args = list(train_args)
        self.cwd = Path(cwd)
        self.grace = grace
        self.out = out or sys.stdout
        self.procs: dict = {}
        self._threads: List[threading.Thread] = []

    def chief_role(self):
        return ("chief", 0) if "chief" in self.cluster else ("worker", 0)

    def start(self) -> None:
        from tfpipe.launch import cluster

        for ttype, index in self.roles:
            env = _child_env(cluster.tf_config(self.cluster, ttype, index))
            proc = subprocess.Popen(
                [sys.executable, "-m", "tfpipe.cli", "train", *self.train_args],
                cwd=self.cwd,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                bufsize=1,
                start_new_session=True,  # its own process group: stop() reaches its children too
            )
            self.procs[(ttype, index)] = proc
            t = threading.Thread(
                target=_pump, args=(proc.stdout, f"[{ttype}:{index}]", self.out), daemon=True
            )
            t.start()
            self._threads.append(t)
        pids = ", ".join(f"{t}:{i}={p.pid}" for (t, i), p in self.procs.items())
        self._say(f"started {len(self.procs)} processes ({self.strategy}): {pids}")

    def _say(self, msg: str) -> None:
        self.out.write(f"[launcher] {msg}\n")
        self.out.flush()

    def stop(self) -> None:
        """SIGTERM every live process group, then SIGKILL what is left after the grace period."""
        live = [p for p in self.procs.values() if p.poll() is None]
        for p in live:
            _signal_group(p, signal.SIGTERM)
        deadline = time.monotonic() + self.grace
        for p in live:
            try:
                p.wait(timeout=max(deadline - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:
                pass
        for p in self.procs.values():  # also reaps grandchildren left in the group
            _signal_group(p, signal.SIGKILL)
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        for t in self._threads:
            t.join(timeout=2)

    def wait(self) -> int:
        chief = self.procs[self.chief_role()]
        servers = self.spec.coordinated  # workers and ps serve until stopped; the chief's exit ends the job
        try:
            while True:
                for role, p in self.procs.items():
                    code = p.poll()
                    if code is None:
                        continue
                    if code in STOP_CODES and self.spec.stops_together:
                        return self._stopped(role, p)
                    if code != 0:
                        self._say(
                            f"{role[0]}:{role[1]} (pid {p.pid}) exited with {code}; stopping the others"
                        )
                        return code if code > 0 else signal_exit(-code)
                if chief.poll() == 0 and (servers or all(p.poll() == 0 for p in self.procs.values())):
                    return EXIT_OK
                time.sleep(POLL_SECONDS)
        finally:
            self.stop()

    def _stopped(self, role, proc) -> int:
        """A task stopped by SIGTERM/SIGINT (128+N): under multi_worker_mirrored every worker checkpoints the same
        step and exits so (tfpipe.training.preemption); wait up to the grace period for them before stopping
        them, and report each one's code."""
        code = proc.returncode
        self._say(
            f"{role[0]}:{role[1]} (pid {proc.pid}) stopped with {code}; "
            f"waiting up to {self.grace:g} s for the others to checkpoint and exit"
        )
        deadline = time.monotonic() + self.grace
        while any(p.poll() is None for p in self.procs.values()) and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
        codes = ", ".join(f"{t}:{i}={p.poll()}" for (t, i), p in self.procs.items())
        self._say(f"job stopped ({codes}); run the same command again to resume from the checkpoint")
        return code

    def run(self) -> int:
        previous = {}

        def _on_signal(signum, frame):
            raise KeyboardInterrupt

        for sig in (signal.SIGTERM, signal.SIGHUP):
            try:
                previous[sig] = signal.signal(sig, _on_signal)
            except ValueError:  # not the main thread
                pass
        try:
            self.start()
            code = self.wait()
        except KeyboardInterrupt:
            self._say("interrupted; stopping all processes")
            self.stop()
            code = EXIT_SIGINT
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        self._say(f"done: exit code {code}")
        return code


def _signal_group(proc: subprocess.Popen, sig) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# bad input, or stopped by the user / a cluster manager: restarting cannot help
NO_RESTART_CODES = (EXIT_BAD_INPUT, *STOP_CODES)


def launch(cfg, root: Path, train_args: Sequence[str] = (), grace: Optional[float] = None, out=None) -> int:
    """Run the job; when a process dies, stop the rest and start the whole job again, up to
    `strategy.max_restarts` times (the chief resumes from the last checkpoint, in the same MLflow run)."""
    st = cfg.strategy
    strategy = strategies.spec(st.name)
    if not strategy.multi_process:
        allowed = ", ".join(strategies.names(multi_process=True))
        raise ConfigError(f"strategy.name={st.name!r}: the launcher starts only {allowed}")
    grace = st.stop_grace_seconds if grace is None else grace
    out = out or sys.stdout
    attempt = 0
    while True:
        code = Launcher(
            st.name,
            st.num_workers,
            st.num_ps if strategy.coordinated else 0,
            train_args,
            root,
            grace=grace,
            out=out,
        ).run()  # fresh loopback ports every attempt
        if code == EXIT_OK or code in NO_RESTART_CODES or attempt >= st.max_restarts:
            return code
        attempt += 1
        out.write(
            f"[launcher] restart {attempt} of {st.max_restarts} (strategy.max_restarts): the job resumes from "
            f"its last checkpoint\n"
        )
        out.flush()


def launch_stage(cfg, root: Path, train_args: Sequence[str] = ()) -> None:
    """The `launch` entry point: the job's exit code becomes the process's."""
    if cfg.strategy.launcher == "ray":  # Ray Train starts the workers (tfpipe.launch.ray)
        from tfpipe.launch import ray as ray_launcher

        code = ray_launcher.launch(cfg, root)
    else:
        code = launch(cfg, root, train_args)
    if code:
        raise SystemExit(code)


def train_stage(cfg, root: Path, train_args: Sequence[str] = ()):
    """The train entry point: hand a multi-process strategy without TF_CONFIG to the launcher; under
    parameter_server, worker and ps tasks serve the cluster; everyone else runs the train stage."""
    from tfpipe.launch import cluster, k8s

    k8s.tf_config_from_indexed_job()  # a pod of a rendered Indexed Job: TF_CONFIG from its completion index
    strategy = strategies.spec(cfg.strategy.name)
    if strategy.multi_process and not tfconfig.is_set():
        return launch_stage(cfg, root, train_args)
    die_with_launcher()
    if strategy.coordinated and cluster.task()[0] in ("worker", "ps"):
        from tfpipe import distribute

        return distribute.run_server(cfg.strategy)  # serves until stopped
    from tfpipe.stages import run_train

    return run_train(cfg, root)
