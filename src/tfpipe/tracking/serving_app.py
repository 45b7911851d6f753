"""The server of `tfpipe serve`: one worker process that loads the checked model with mlflow.pyfunc and serves
MLflow's own scoring app (`mlflow.pyfunc.scoring_server.init`, what `mlflow models serve` runs under uvicorn)
behind `Limits`, a pure-ASGI middleware holding what MLflow's app does not:

- a body limit (`--max-body-bytes`; by default `default_max_body`: BATCH_LIMIT examples of the model's input as
  JSON): a Content-Length over it is answered 413 before any byte of the body is read; a chunked body is counted as
  it arrives and cut at the limit (413); a gzip body (`Content-Encoding: gzip`) is counted as it inflates and
  refused once its inflated bytes pass the limit, never expanded further;
- only the content types the model needs (415 otherwise, in one line naming them): MLflow's application/json and
  text/csv; for an image model also image/jpeg, image/png and multipart/form-data (file fields), decoded by
  `serving_images` as batch predict and the prepare stage decode a file, then predicted as the JSON route would;
- a time limit (`--timeout`) that stops the work: the request's body must arrive within it (408 otherwise, nothing
  computed); a request still computing when it passes (decoding, MLflow's parsing, the model) is answered 504,
  then this worker stops accepting and exits TIMED_OUT, which kills the computing thread with it, and
  tfpipe.commands.serve (the supervisor, which holds the listening socket) starts a fresh worker that answers the
  next request. Other requests in flight in this worker at that moment lose their connection. The 504 goes out
  when the event loop next runs: TensorFlow releases the GIL while it computes, one C call holding it (json.loads
  of a large body) delays the answer by its length;
- a cap on predictions in flight (`--max-in-flight`, default DEFAULT_MAX_IN_FLIGHT): a POST /invocations past it
  is answered 503 with `Retry-After` at once, its body unread, so at most the cap's bodies are held and computed
  at a time and nothing queues in the worker (connections waiting in the listening socket's backlog are the
  kernel's, answered as they are accepted). /ping and /health are never capped.

Run by the supervisor as `python -m tfpipe.tracking.serving_app FOLDER FD TIMEOUT MAX_BODY_BYTES MAX_IN_FLIGHT`
(FD: the listening socket it passes; MAX_BODY_BYTES 0: the default). Imports nothing heavy until the worker starts."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import zlib

from tfpipe.tracking.serving_images import Refusal, inputs_json

BATCH_LIMIT = 256  # examples a request's default body limit is sized for (serving_model.py's PREDICT_BATCH)
PIXEL_JSON_BYTES = 5  # the JSON of one uint8 value and its separator at most: "255, " as Python's json.dumps
TEXT_JSON_BYTES = 64 * 1024  # the JSON of one text at most, for the default limit of a text model
JSON_SLACK = 4096  # the JSON around the examples: {"inputs": ...}, {"dataframe_split": ...}
TIMED_OUT = 75  # the worker's exit code after a request passed the time limit: the supervisor starts another
JSON, CSV, MULTIPART = "application/json", "text/csv", "multipart/form-data"
IMAGE_TYPES = ("image/jpeg", "image/png", MULTIPART)
ENCODINGS = ("identity", "gzip")
# Predictions one worker holds and computes at a time; past it, 503 at once. Each holds a body of up to
# --max-body-bytes and its tensors: 8 of the default 256-image bodies stay under 100 MB of JSON.
DEFAULT_MAX_IN_FLIGHT = 8
RETRY_AFTER = 1  # seconds a client refused for the cap is told to wait (the Retry-After header)


def default_max_body(modality: str, image_shape) -> int:
    """BATCH_LIMIT examples as JSON: an image [H, W, C] as nested lists of uint8 values written with Python's
    separators (", "), its brackets included; a text at most TEXT_JSON_BYTES."""
    if modality == "image":
        height, width, channels = image_shape
        per_example = height * width * (channels * PIXEL_JSON_BYTES + 4) + height * 4 + 8
    else:
        per_example = TEXT_JSON_BYTES
    return BATCH_LIMIT * per_example + JSON_SLACK


def accepted_types(modality: str) -> tuple:
    return (JSON, CSV, *IMAGE_TYPES) if modality == "image" else (JSON, CSV)


class Limits:
    """Pure-ASGI middleware in front of MLflow's scoring app: body and time limits, content types, images.
    `stop_accepting` and `exit` are set by the worker (the uvicorn server's listeners; os._exit)."""

    def __init__(
        self, app, *, max_body: int, timeout: float, image_shape=None, max_in_flight=DEFAULT_MAX_IN_FLIGHT
    ):
        self.app, self.max_body, self.timeout, self.image_shape = app, max_body, timeout, image_shape
        self.max_in_flight, self.in_flight = max_in_flight, 0  # one event loop: no lock needed
        self.types = accepted_types("image" if image_shape else "text")
        self.stop_accepting = lambda: None
        self.exit = lambda: os._exit(TIMED_OUT)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":  # lifespan
            return await self.app(scope, receive, send)
        if not (scope["method"] == "POST" and scope["path"].rstrip("/") == "/invocations"):
            return await self._limited(scope, receive, send)
        if self.in_flight >= self.max_in_flight:
            line = (
                f"this server is computing {self.in_flight} predictions, its limit (--max-in-flight "
                f"{self.max_in_flight}); retry after {RETRY_AFTER} s"
            )
            return await reply(send, 503, "TEMPORARILY_UNAVAILABLE", line, retry_after=RETRY_AFTER)
        self.in_flight += 1
        try:
            return await self._limited(scope, receive, send)
        finally:
            self.in_flight -= 1

    async def _limited(self, scope, receive, send):
        """One request under the body, type and time limits."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            mime = self._check_headers(scope, headers)
            body = await asyncio.wait_for(self._read(receive, headers), max(deadline - loop.time(), 0.001))
        except Refusal as refusal:
            return await reply(send, refusal.status, refusal.code, refusal.line)
        except asyncio.TimeoutError:
            line = f"the request's body did not arrive within this server's --timeout of {self.timeout:g} s"
            return await reply(send, 408, "DEADLINE_EXCEEDED", line)
        started = []

        async def watched_send(message):
            started.append(message["type"])
            await send(message)

        task = asyncio.ensure_future(self._answer(scope, receive, watched_send, headers, mime, body))
        done, _ = await asyncio.wait({task}, timeout=max(deadline - loop.time(), 0))
        if task in done:
            return task.result()
        self.stop_accepting()  # before the client can read the 504 and send its next request
        if not started:
            line = (
                f"the request passed this server's --timeout of {self.timeout:g} s; its work was stopped (the "
                "server restarts its worker)"
            )
            await reply(send, 504, "DEADLINE_EXCEEDED", line)
        sys.stdout.flush()
        self.exit()

    def _check_headers(self, scope, headers: dict) -> str:
        """The request's media type, after its headers are checked against the limits (Refusal otherwise)."""
        encoding = headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ENCODINGS:
            raise Refusal(
                415,
                "INVALID_PARAMETER_VALUE",
                f"Content-Encoding {encoding!r} is not accepted; send {' or '.join(ENCODINGS)}",
            )
        length = headers.get("content-length", "0").strip()
        if not length.isdigit():
            raise Refusal(400, "BAD_REQUEST", f"Content-Length {length!r} is not a number of bytes")
        if int(length) > self.max_body:
            raise Refusal(413, "REQUEST_LIMIT_EXCEEDED", self._too_large(f"a body of {int(length)} bytes"))
        mime = headers.get("content-type", "").split(";")[0].strip().lower()
        if (
            scope["method"] == "POST"
            and scope["path"].rstrip("/") == "/invocations"
            and mime not in self.types
        ):
            raise Refusal(
                415,
                "INVALID_PARAMETER_VALUE",
                f"Content-Type {mime or '(none)'!r} is not accepted; this model takes {', '.join(self.types)}",
            )
        return mime

    def _too_large(self, what: str) -> str:
        return (
            f"{what} is over this server's limit of {self.max_body} bytes (--max-body-bytes); refused before "
            "reading further"
        )

    async def _read(self, receive, headers: dict) -> bytes:
        """The whole body, inflated when gzip, never more than max_body bytes of either (Refusal 413)."""
        inflater = None
        if headers.get("content-encoding", "identity").strip().lower() == "gzip":
            inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        chunks, received, size = [], 0, 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise Refusal(400, "BAD_REQUEST", "the client left before its body arrived")
            data = message.get("body", b"")
            received += len(data)
            if received > self.max_body:
                raise Refusal(413, "REQUEST_LIMIT_EXCEEDED", self._too_large(f"a body of {received}+ bytes"))
            if inflater is not None:
                data = inflater.decompress(data, self.max_body + 1 - size)  # at most one byte past the limit
            size += len(data)
            if size > self.max_body:
                line = self._too_large(f"a gzip body inflating to {size}+ bytes")
                raise Refusal(413, "REQUEST_LIMIT_EXCEEDED", line)
            chunks.append(data)
            if not message.get("more_body", False):
                break
        if inflater is not None and not (inflater.eof and not inflater.unused_data):
            raise Refusal(400, "BAD_REQUEST", "the gzip body is not one whole gzip stream")
        return b"".join(chunks)

    async def _answer(self, scope, receive, send, headers: dict, mime: str, body: bytes):
        """MLflow's app on the body read (images first turned into the JSON of their pixels)."""
        if mime in IMAGE_TYPES and scope["path"].rstrip("/") == "/invocations":
            try:
                body = await asyncio.to_thread(
                    inputs_json, body, headers["content-type"], self.image_shape, BATCH_LIMIT
                )
            except Refusal as refusal:
                return await reply(send, refusal.status, refusal.code, refusal.line)
            headers = {**headers, "content-type": JSON}
        headers = {k: v for k, v in headers.items() if k not in ("content-encoding", "content-length")}
        headers["content-length"] = str(len(body))
        scope = {**scope, "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]}
        delivered: list[bool] = []

        async def replay():
            if delivered:
                return await receive()  # after the body: the client's disconnect, when it leaves
            delivered.append(True)
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


async def reply(send, status: int, code: str, line: str, retry_after: int | None = None) -> None:
    """A one-line error answer in MLflow's form; the connection closes after it (a body left unread)."""
    content = json.dumps({"error_code": code, "message": line}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(content)).encode()),
        (b"connection", b"close"),
    ]
    if retry_after is not None:
        headers.append((b"retry-after", str(retry_after).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": content})


def limits_line(modality: str, image_shape, max_body: int, timeout: float, max_in_flight: int) -> str:
    example = "x".join(map(str, image_shape)) + " images" if modality == "image" else "texts"
    return (
        f"serve: limits: bodies up to {max_body} bytes (--max-body-bytes; {BATCH_LIMIT} {example} as JSON by "
        f"default), {timeout:g} s a request (--timeout), {max_in_flight} predictions at a time (--max-in-flight); "
        f"accepts {', '.join(accepted_types(modality))}"
    )


def model_input(model, folder: str) -> tuple:
    """("image", (H, W, C)) or ("text", None): what the logged signature says (loading.model_takes); for an image model
    logged without an input example (its signature's H, W, C unknown), the SavedModel's serving signature as
    serving_model.py read it. UserError when neither says."""
    from tfpipe.errors import UserError
    from tfpipe.tracking.loading import model_takes

    try:
        return model_takes(model, folder)
    except UserError:
        shape = tuple(getattr(model.unwrap_python_model(), "_shape", ()))[1:]
        if len(shape) == 3 and min(shape) > 0:
            return "image", shape
        raise


def main(argv=None) -> int:
    """The worker: load the checked model, serve it on the listening socket FD until stopped."""
    import socket

    folder, fd, timeout, max_body, max_in_flight = (sys.argv[1:] if argv is None else argv)[:5]
    timeout, max_in_flight = float(timeout), int(max_in_flight) or DEFAULT_MAX_IN_FLIGHT
    # MLflow's own timeout only stops waiting (its work goes on): set past ours, so ours answers and stops it
    os.environ["MLFLOW_SCORING_SERVER_REQUEST_TIMEOUT"] = str(int(timeout) + 60)
    import uvicorn
    from mlflow.pyfunc import scoring_server

    from tfpipe import tfstart
    from tfpipe.errors import UserError
    from tfpipe.exits import EXIT_BAD_INPUT

    tfstart.import_quietly()  # the model's TensorFlow, without its start-up lines (as the stages)
    model = scoring_server.load_model_with_mlflow_config(folder)
    try:
        modality, image_shape = model_input(model, folder)
    except UserError as exc:
        print(f"serve: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    max_body = int(max_body) or default_max_body(modality, image_shape)
    app = Limits(
        scoring_server.init(model),
        max_body=max_body,
        timeout=timeout,
        image_shape=image_shape,
        max_in_flight=max_in_flight,
    )
    server = uvicorn.Server(uvicorn.Config(app, timeout_graceful_shutdown=int(timeout) + 1))

    def stop_accepting() -> None:  # close uvicorn's listeners
        for listener in getattr(server, "servers", []):
            listener.close()

    app.stop_accepting = stop_accepting
    print(limits_line(modality, image_shape, max_body, timeout, max_in_flight), flush=True)
    server.run(sockets=[socket.socket(fileno=int(fd))])
    return 0


if __name__ == "__main__":
    sys.exit(main())
