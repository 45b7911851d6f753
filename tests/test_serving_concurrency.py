"""`tfpipe serve`'s cap on predictions in flight (issue 50): real concurrent HTTP requests on loopback to
`serving_app.Limits` served by uvicorn, as the worker serves it, in front of an app that holds each prediction
until the test lets it go (the claim is the middleware's, not MLflow's model: the stand-in app counts what reaches
it). With the cap at 2: two predictions held, a third is answered 503 with Retry-After at once, never reaching the
app nor waiting for the two; /ping is still answered; once the two are let go they are answered 200 and the next
prediction is admitted again. The flag reaches the worker (`tfpipe serve --max-in-flight`)."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import threading

import pytest

from tfpipe.tracking.serving_app import DEFAULT_MAX_IN_FLIGHT, RETRY_AFTER, Limits

CAP = 2


class Held:
    """An ASGI app answering each POST once the test sets `go`; `arrived` counts what reached it."""

    def __init__(self):
        self.go = threading.Event()
        self.arrived = 0
        self.both_in = threading.Event()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return
        await receive()
        if scope["method"] == "POST":
            self.arrived += 1
            if self.arrived >= CAP:
                self.both_in.set()
            await asyncio.to_thread(self.go.wait, 60)
        body = json.dumps({"predictions": [self.arrived]}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-length", b"%d" % len(body))],
            }
        )
        await send({"type": "http.response.body", "body": body})


@pytest.fixture
def served():
    """(port, the held app): Limits(cap 2) under uvicorn on a loopback socket, in a thread, stopped after."""
    import uvicorn

    held = Held()
    app = Limits(held, max_body=1 << 20, timeout=60, max_in_flight=CAP)
    listener = socket.create_server(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    yield listener.getsockname()[1], held
    held.go.set()
    server.should_exit = True
    thread.join(30)
    listener.close()


def _post(port: int, out: list) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request(
        "POST", "/invocations", body=b'{"inputs": [[1]]}', headers={"Content-Type": "application/json"}
    )
    response = conn.getresponse()
    out.append((response.status, response.getheader("Retry-After"), json.loads(response.read())))
    conn.close()


def test_predictions_past_the_cap_are_503_at_once_with_retry_after(served):
    port, held = served
    first: list = []
    threads = [threading.Thread(target=_post, args=(port, first)) for _ in range(CAP)]
    for thread in threads:
        thread.start()
    assert held.both_in.wait(30), "the two predictions never reached the app"
    refused: list = []
    _post(port, refused)  # while the two are held: answered now, not after them
    (status, retry_after, body) = refused[0]
    assert status == 503 and retry_after == str(RETRY_AFTER), refused
    assert body["error_code"] == "TEMPORARILY_UNAVAILABLE" and "--max-in-flight 2" in body["message"]
    assert held.arrived == CAP and not first  # the refused one never reached the app; the two still held
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", "/ping")
    assert conn.getresponse().status == 200  # not a prediction: never capped
    conn.close()
    held.go.set()
    for thread in threads:
        thread.join(60)
    assert sorted(status for status, _, _ in first) == [200, 200]
    again: list = []
    _post(port, again)
    assert again[0][0] == 200 and held.arrived == CAP + 1  # the slots were given back


@pytest.mark.parametrize("value", ["0", "-1", "two"])
def test_a_cap_that_is_not_a_positive_count_is_refused_in_one_line(value, capsys):
    from tfpipe.commands import serve

    with pytest.raises(SystemExit) as stopped:
        serve.main(["runs:/0123456789abcdef/model", "--max-in-flight", value], prog="tfpipe serve")
    err = capsys.readouterr().err.strip().splitlines()
    assert stopped.value.code == 2 and "--max-in-flight" in err[-1] and value in err[-1], err


def test_the_default_cap_is_the_one_the_help_names():
    from tfpipe.commands import serve

    assert DEFAULT_MAX_IN_FLIGHT == 8 and "(default: 8)" in serve.__doc__ + _help(serve)


def _help(serve) -> str:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        serve.main(["--help"], prog="tfpipe serve")
    return " ".join(out.getvalue().split())
