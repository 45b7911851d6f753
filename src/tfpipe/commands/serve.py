"""Serving a logged model over HTTP: `tfpipe serve MODEL_URI [--port 5000] [--host 127.0.0.1] [--timeout 60]
[--max-body-bytes N] [--max-in-flight 8]`.

`mlflow models serve -m URI` runs the code the model folder names, as the store holds it now: anyone with EDIT on
the store can change that. This command first downloads the model and checks it as batch prediction does (its
MLmodel loads tfpipe's shipped serving_model.py, the SavedModel is whole against its seal and, for a runs:/ or
models:/ URI, is the one its run logged), then serves that checked copy with MLflow's own scoring app behind
tfpipe's limits (tfpipe.tracking.serving_app: a body limit, the content types the model takes, raw JPEG/PNG
images, a time limit that stops the work, a cap on predictions in flight past which a request is 503 at once) in one worker process, in the current environment, and removes the
copy when the server stops (Ctrl-C). A local folder (your own) is checked and served in place.
This process is the worker's supervisor: it holds the listening socket, so a worker stopped after a request passed
--timeout is replaced while new requests wait in the socket's queue.
Exit codes: the server's; 128+N after a stop by signal N (130 Ctrl-C, 143 SIGTERM); 2 bad input, a port it cannot
listen on, or a model that fails the checks (one line, no server started)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from tfpipe.commands import environment
from tfpipe.commands.hydra_flags import CommandParser
from tfpipe.errors import UserError
from tfpipe.exits import EXIT_BAD_INPUT, signal_exit

DOC = "Check a logged tfpipe model, then serve it with MLflow's scoring app behind limits (raw images or texts in)."


def main(argv=None, prog: str = "python -m pipeline.serve") -> int:
    environment.set_defaults()
    parser = CommandParser(prog=prog, description=DOC, does="serves a logged model")
    parser.add_argument(
        "model_uri", help="runs:/RUN_ID/model, models:/NAME@ALIAS, models:/NAME/VERSION or a folder"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=5000, help="port (default: 5000)")
    parser.add_argument(
        "--timeout",
        type=_positive(float),
        default=60.0,
        help="seconds a request may take; past them it is answered 504 and its work stopped (default: 60, MLflow's)",
    )
    parser.add_argument(
        "--max-body-bytes",
        type=_positive(int),
        default=None,
        help="largest request body, also once inflated (default: 256 examples of the model's input as JSON)",
    )
    parser.add_argument(
        "--max-in-flight",
        type=_positive(int),
        default=None,
        help="predictions computed at a time; past them a request is answered 503 with Retry-After at once "
        "(default: 8)",
    )
    parser.add_argument(
        "--tracking-uri", default=None, help="MLflow store (default: MLFLOW_TRACKING_URI or params.yaml)"
    )
    args = parser.parse_args(argv)
    from tfpipe.audit import tracking_uri_for
    from tfpipe.errors import USER_ERRORS
    from tfpipe.tracking import loading

    copy = Path(tempfile.mkdtemp(prefix="tfpipe-serve-"))
    try:
        try:
            local, _ = loading.fetch(args.model_uri, tracking_uri_for(Path.cwd(), args.tracking_uri), copy)
            listener = _listen(args.host, args.port)
        except USER_ERRORS as exc:
            print(f"serve: error: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        print(
            f"serve: {args.model_uri} checked; serving it at http://{args.host}:{args.port}/invocations",
            flush=True,
        )
        with listener:
            return _serve(local, listener, args.timeout, args.max_body_bytes or 0, args.max_in_flight or 0)
    finally:
        shutil.rmtree(copy, ignore_errors=True)


def _positive(kind):
    def parse(text: str):
        value = kind(text)
        if not value > 0:
            raise ValueError(text)
        return value

    parse.__name__ = f"positive {kind.__name__}"
    return parse


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket the workers serve on, held here so that requests queue while a worker restarts."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=2048)
    except OSError as exc:
        why = os.strerror(exc.errno) if exc.errno else str(exc)  # create_server's message adds the address
        raise UserError(f"cannot listen on {host}:{port}: {why}") from None


def _serve(folder: Path, listener: socket.socket, timeout: float, max_body: int, max_in_flight: int) -> int:
    """Run workers until one ends other than by a request passing --timeout (that one is replaced); a stop by
    signal N (SIGTERM; Ctrl-C's SIGINT) exits 128+N, as the stages do."""
    from tfpipe.tracking.serving_app import TIMED_OUT

    fd = listener.fileno()
    cmd = [
        sys.executable,
        "-m",
        "tfpipe.tracking.serving_app",
        str(folder),
        str(fd),
        repr(timeout),
        str(max_body),
        str(max_in_flight),
    ]
    stopped: list[int] = []
    worker: list[subprocess.Popen] = []

    def stop(signum, _):  # passed to the worker; Ctrl-C reaches it too (same process group)
        stopped.append(signum)
        if worker:
            worker[-1].send_signal(signum)

    signal.signal(signal.SIGTERM, stop)
    # Ctrl-C too, handled and not raised: a KeyboardInterrupt could land after the worker's wait returned 0
    signal.signal(signal.SIGINT, stop)
    try:
        while True:
            worker.append(subprocess.Popen(cmd, pass_fds=(fd,)))
            code = worker[-1].wait()
            if stopped or code != TIMED_OUT:
                break
            line = f"serve: a request passed --timeout {timeout:g} s: worker stopped; starting another"
            print(line, flush=True)
    except KeyboardInterrupt:
        stopped.append(signal.SIGINT)
        try:
            if worker:
                worker[-1].wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker[-1].kill()
            worker[-1].wait()
    return signal_exit(stopped[0]) if stopped else code
