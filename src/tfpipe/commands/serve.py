"""Serving a logged model over HTTP: `tfpipe serve MODEL_URI [--port 5000] [--host 127.0.0.1]`.

`mlflow models serve -m URI` runs the code the model folder names, as the store holds it now: anyone with EDIT on
the store can change that. This command first downloads the model and checks it as batch prediction does (its
MLmodel loads tfpipe's shipped serving_model.py, the SavedModel is whole against its seal and, for a runs:/ or
models:/ URI, is the one its run logged), then starts `mlflow models serve` on that checked copy (the current
environment, `--env-manager local`) and removes the copy when the server stops (Ctrl-C). A local folder (your
own) is checked and served in place.
Exit codes: the server's; 128+N after a stop by signal N (130 Ctrl-C, 143 SIGTERM); 2 bad input or a model that fails the checks (one line, no server started)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from tfpipe.commands.hydra_flags import CommandParser
from tfpipe.exits import EXIT_BAD_INPUT, signal_exit

DOC = "Check a logged tfpipe model, then serve it with `mlflow models serve` (raw images or texts in, classes out)."


def main(argv=None, prog: str = "python -m pipeline.serve") -> int:
    parser = CommandParser(prog=prog, description=DOC, does="serves a logged model")
    parser.add_argument(
        "model_uri", help="runs:/RUN_ID/model, models:/NAME@ALIAS, models:/NAME/VERSION or a folder"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=5000, help="port (default: 5000)")
    parser.add_argument(
        "--tracking-uri", default=None, help="MLflow store (default: MLFLOW_TRACKING_URI or params.yaml)"
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    os.environ.setdefault(
        "TF_CPP_MIN_LOG_LEVEL", "2"
    )  # the server's TensorFlow start-up lines, as in the stages
    from tfpipe.audit import tracking_uri_for
    from tfpipe.errors import USER_ERRORS
    from tfpipe.tracking import loading

    copy = Path(tempfile.mkdtemp(prefix="tfpipe-serve-"))
    try:
        try:
            local, _ = loading.fetch(args.model_uri, tracking_uri_for(Path.cwd(), args.tracking_uri), copy)
        except USER_ERRORS as exc:
            print(f"serve: error: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        print(
            f"serve: {args.model_uri} checked; serving it at http://{args.host}:{args.port}/invocations",
            flush=True,
        )
        return _serve(local, args.host, args.port)
    finally:
        shutil.rmtree(copy, ignore_errors=True)


def _serve(folder: Path, host: str, port: int) -> int:
    """Run the server until it ends; a stop by signal N (SIGTERM; Ctrl-C's SIGINT) exits 128+N, as the stages do."""
    cmd = [sys.executable, "-m", "mlflow", "models", "serve", "-m", str(folder), "--env-manager", "local"]
    server = subprocess.Popen([*cmd, "--host", host, "--port", str(port)])
    stopped = []
    # A stop (SIGTERM) is passed to the server; Ctrl-C reaches it too (same process group): either way the server
    # stops first, then main removes the checked copy.
    signal.signal(signal.SIGTERM, lambda signum, _: (stopped.append(signum), server.send_signal(signum)))
    try:
        code = server.wait()
    except KeyboardInterrupt:
        stopped.append(signal.SIGINT)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    return signal_exit(stopped[0]) if stopped else code
