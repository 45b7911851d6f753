"""`tfpipe serve`'s limits (issue 50, item 5), against a real `tfpipe serve` of a real logged tfpipe model on
loopback: a body over the limit is answered 413 before it is read (Content-Length) or once the limit is passed
(chunked, gzip-inflated), and the worker's peak memory stays small; a type the model does not take is 415; raw JPEG,
PNG and multipart image uploads are answered as the JSON of the same pixels; a request past --timeout is answered
504 and its work stopped (the worker that computed it is gone), and the next request is answered.

The model (built here, logged as tfpipe logs models): uint8 [N, 32, 32, 3] -> softmax(10 x channel means), the
dominant channel wins, plus a branch of four 256-filter convolutions weighted by zero: an answer that depends on
every pixel, 20 ms an image, and 11 s for 256 of them (the slow request) on the test machine."""

from __future__ import annotations

import http.client
import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import zlib
from pathlib import Path

import numpy as np
import pytest
from conftest import IMAGE_CLASSES
from test_tracking import _free_port

ROOT = Path(__file__).resolve().parents[1]
SHAPE = (32, 32, 3)
MiB = 1 << 20
GROWTH = 128 * MiB  # the worker's peak memory may grow this much over a refused request (5 MiB measured)
pytestmark = pytest.mark.slow  # starts servers


def _model(folder: Path) -> None:
    import keras
    import tensorflow as tf

    inputs = keras.Input(SHAPE, dtype="uint8")
    x = keras.layers.Rescaling(1 / 255.0)(inputs)
    colour = keras.layers.Dense(3)
    logits = colour(keras.layers.GlobalAveragePooling2D()(x))
    work = x
    for _ in range(4):
        work = keras.layers.Conv2D(256, 3, padding="same", activation="relu")(work)
    idle = keras.layers.Dense(3, kernel_initializer="zeros")(keras.layers.GlobalAveragePooling2D()(work))
    model = keras.Model(inputs, keras.layers.Softmax()(keras.layers.Add()([logits, idle])))
    colour.set_weights([np.eye(3, dtype=np.float32) * 10, np.zeros(3, np.float32)])
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint(
        name="serving_default",
        fn=lambda image: {"probabilities": model(image, training=False)},
        input_signature=[tf.TensorSpec([None, *SHAPE], tf.uint8, name="image")],
    )
    archive.write_out(str(folder), verbose=False)


@pytest.fixture(scope="module")
def logged(tmp_path_factory) -> tuple:
    """(project, run id) of a SQLite store holding the model, logged as the train stage logs one."""
    from tfpipe import config, files, tracking

    project = tmp_path_factory.mktemp("project")
    uri = f"sqlite:///{project / 'mlflow.db'}"
    _model(project / "image")
    files.seal(project / "image")
    cfg = config.compose(["experiment=smoke", f"tracking.uri={uri}"], config_dir=ROOT / "conf")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(project)
        with tracking.start_run(cfg, project, stage="train") as run:
            example = _pixels(0)[None]  # as the train stage logs one: its first prepared example
            run.log_model(
                project / "image", modality="image", input_example=example, class_names=list(IMAGE_CLASSES)
            )
    return project, run.run_id


def _env(project: Path) -> dict:
    """A user's shell: no MLflow settings of its own; this checkout's code; the project's store."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env.update(
        PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
        MLFLOW_TRACKING_URI=f"sqlite:///{project / 'mlflow.db'}",
    )
    return env


class Server:
    """A real `tfpipe serve runs:/RUN/model` on a free loopback port; its output in a file."""

    def __init__(self, project: Path, run_id: str, log: Path, *flags: str):
        env = _env(project)
        self.port, self.log, self.spec = _free_port(), log, f"runs:/{run_id}/model"
        cmd = [sys.executable, "-m", "tfpipe", "serve", self.spec, "--port", str(self.port), *flags]
        with open(log, "w") as out:
            self.proc = subprocess.Popen(cmd, cwd=project, env=env, stdout=out, stderr=subprocess.STDOUT)
        self.wait_healthy()

    def wait_healthy(self, timeout: float = 300) -> None:
        import time

        deadline = time.monotonic() + timeout
        while True:
            assert self.proc.poll() is None, self.output()[-3000:]
            try:
                if self.request("GET", "/ping", timeout=10)[0] == 200:
                    return
            except OSError:
                assert time.monotonic() < deadline, "the server never answered /ping"
                time.sleep(0.5)  # the worker is loading TensorFlow and the model

    def request(self, method: str, path: str, body: bytes = b"", headers=None, timeout: float = 120) -> tuple:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            connection.request(method, path, body=body, headers=headers or {})
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def post(self, body: bytes, content_type: str, **headers) -> tuple:
        """(status, the decoded JSON answer) of POST /invocations."""
        status, content = self.request(
            "POST", "/invocations", body, {"Content-Type": content_type, **headers}
        )
        return status, json.loads(content)

    def worker(self) -> int:
        """The pid of the worker process now serving (the supervisor's one child)."""
        (child,) = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        return int(child)

    def output(self) -> str:
        return self.log.read_text()

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=120)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


@pytest.fixture(scope="module")
def server(logged, tmp_path_factory):
    started = Server(*logged, tmp_path_factory.mktemp("serve") / "out.log")
    yield started
    assert started.stop() == 143, started.output()[-3000:]


@pytest.fixture(scope="module")
def strict(logged, tmp_path_factory):
    """The same model served with --timeout 1 --max-body-bytes 4000000 --max-in-flight 1."""
    started = Server(
        *logged,
        tmp_path_factory.mktemp("strict") / "out.log",
        "--timeout",
        "1",
        "--max-body-bytes",
        "4000000",
        "--max-in-flight",
        "1",
    )
    yield started
    assert started.stop() == 143, started.output()[-3000:]


def _peak_rss(pid: int) -> int:
    """The process's peak resident memory so far (VmHWM), in bytes."""
    (line,) = [x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("VmHWM:")]
    return int(line.split()[1]) * 1024


def _pixels(seed: int, height: int = 32, width: int = 32) -> np.ndarray:
    """A noisy image, mostly red (channel 2)."""
    rng = np.random.default_rng(seed)
    image = rng.integers(0, 120, (height, width, 3), dtype=np.uint8)
    image[..., 2] += 100
    return image


def _encoded(image: np.ndarray, fmt: str) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(image).save(out, format=fmt)
    return out.getvalue()


def _decoded(data: bytes) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def _json_answer(server: Server, *images: np.ndarray) -> list:
    status, answer = server.post(
        json.dumps({"inputs": np.stack(images).tolist()}).encode(), "application/json"
    )
    assert status == 200, answer
    return answer["predictions"]


def _multipart(*files: tuple) -> tuple:
    """(body, content type) of a form with one file field per (filename, content type, bytes), as curl -F sends."""
    boundary = "------------------------tfpipe0123456789"
    body = b""
    for i, (name, kind, data) in enumerate(files):
        head = f'--{boundary}\r\nContent-Disposition: form-data; name="file{i}"; filename="{name}"\r\n'
        body += f"{head}Content-Type: {kind}\r\n\r\n".encode() + data + b"\r\n"
    body += f'--{boundary}\r\nContent-Disposition: form-data; name="note"\r\n\r\nnot a file\r\n--{boundary}--\r\n'.encode()
    return body, f"multipart/form-data; boundary={boundary}"


def _response(sock: socket.socket) -> tuple:
    """(status, decoded JSON answer) read from a raw connection."""
    response = http.client.HTTPResponse(sock)
    response.begin()
    return response.status, json.loads(response.read())


def _png_bomb(width: int, height: int) -> bytes:
    """A real grey PNG of width x height zero pixels: about 1 KB per MB of pixels it decodes to."""
    import struct

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    packer, row = zlib.compressobj(9), bytes(1 + width)  # each row: filter byte 0, then its pixels
    pixels = b"".join(packer.compress(row) for _ in range(height)) + packer.flush()
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit grey
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


# 256 examples of 32x32x3 as JSON: per image 32*32 pixels of 3 values "255, " (5 bytes) and their 4 bytes of
# brackets and separators, 32 rows of 4 bytes of brackets, 8 more; plus 4096 bytes around them
DEFAULT_LIMIT = 256 * (32 * 32 * (3 * 5 + 4) + 32 * 4 + 8) + 4096


def test_the_default_body_limit_is_256_images_as_python_writes_them(server):
    line = f"serve: {server.spec} checked; serving it at http://127.0.0.1:{server.port}/invocations"
    assert line in server.output() and f"bodies up to {DEFAULT_LIMIT} bytes" in server.output()
    white = np.full((256, *SHAPE), 255, np.uint8)  # the longest JSON of 256 images: every value 255
    assert (
        len(json.dumps({"inputs": white.tolist()}))
        <= DEFAULT_LIMIT
        < 1.2 * len(json.dumps({"inputs": white.tolist()}))
    )


def test_a_content_length_over_the_limit_is_answered_413_before_the_body_is_read(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=120) as sock:
        head = "POST /invocations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        sock.sendall(f"{head}Content-Length: {DEFAULT_LIMIT + 1}\r\n\r\n".encode())
        status, answer = _response(sock)  # answered though no byte of the body was sent
    assert status == 413, answer
    assert answer["message"] == (
        f"a body of {DEFAULT_LIMIT + 1} bytes is over this server's limit of {DEFAULT_LIMIT} bytes "
        "(--max-body-bytes); refused before reading further"
    )


def test_a_chunked_body_is_cut_at_the_limit_and_the_worker_stays_small(server):
    worker = server.worker()
    before = _peak_rss(worker)
    with socket.create_connection(("127.0.0.1", server.port), timeout=120) as sock:
        sock.sendall(b"POST /invocations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n")
        sock.sendall(b"Transfer-Encoding: chunked\r\n\r\n")
        chunk = b"%x\r\n%s\r\n" % (MiB, b" " * MiB)

        def pump():  # 512 MiB, until the server closes the connection
            try:
                for _ in range(512):
                    sock.sendall(chunk)
                sock.sendall(b"0\r\n\r\n")
            except OSError:
                pass

        sender = threading.Thread(target=pump, daemon=True)
        sender.start()
        status, answer = _response(sock)
        sender.join(timeout=120)  # it ends when the server has closed the connection
    grew = _peak_rss(worker) - before
    print(f"chunked 512 MiB body: {status}; worker peak RSS {before / MiB:.0f} MiB, +{grew / MiB:.1f} MiB")
    assert status == 413 and answer["message"].startswith("a body of "), answer
    assert grew < GROWTH


def test_a_gzip_body_is_inflated_within_the_limit_and_a_gzip_bomb_refused(server):
    image = _pixels(5)
    body = json.dumps({"inputs": image[None].tolist()}).encode()
    assert server.post(zlib.compress(body, wbits=31), "application/json", **{"Content-Encoding": "gzip"}) == (
        200,
        {"predictions": _json_answer(server, image)},
    )
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = b"".join(packer.compress(bytes(MiB)) for _ in range(512)) + packer.flush()  # 512 MiB of zeros
    worker = server.worker()
    before = _peak_rss(worker)
    status, answer = server.post(bomb, "application/json", **{"Content-Encoding": "gzip"})
    grew = _peak_rss(worker) - before
    print(f"gzip bomb of {len(bomb)} bytes (512 MiB inflated): worker peak RSS +{grew / MiB:.1f} MiB")
    assert status == 413 and answer["message"].startswith("a gzip body inflating to "), answer
    assert grew < GROWTH


def test_jpeg_png_and_multipart_images_are_answered_as_the_json_of_their_pixels(server):
    image = _pixels(1)
    png, jpeg = _encoded(image, "PNG"), _encoded(_pixels(2), "JPEG")
    by_json = _json_answer(server, image)  # PNG is lossless: the same pixels
    assert by_json[0]["class"] == "red" and sorted(by_json[0]) == sorted(["class", *IMAGE_CLASSES])
    assert server.post(png, "image/png") == (200, {"predictions": by_json})
    assert server.post(jpeg, "image/jpeg") == (200, {"predictions": _json_answer(server, _decoded(jpeg))})
    form, kind = _multipart(("cat.png", "image/png", png))
    assert server.post(form, kind) == (200, {"predictions": by_json})
    form, kind = _multipart(("cat.png", "image/png", png), ("dog.jpg", "image/jpeg", jpeg))
    assert server.post(form, kind) == (200, {"predictions": _json_answer(server, image, _decoded(jpeg))})


def test_an_image_of_another_size_or_mode_is_decoded_as_prepare_decodes_a_file(server, tmp_path):
    from PIL import Image

    from tfpipe.data.decode import decode_image_file

    rgba = Image.fromarray(_pixels(6, 48, 40)).convert("RGBA")  # 40 wide, 48 high, with an alpha channel
    path = tmp_path / "rgba.png"
    rgba.save(path)
    prepared = np.frombuffer(decode_image_file(path, [32, 32], 3, 40_000_000), np.uint8).reshape(SHAPE)
    assert server.post(path.read_bytes(), "image/png") == (
        200,
        {"predictions": _json_answer(server, prepared)},
    )


def test_what_the_model_does_not_take_is_refused_in_one_line(server):
    import pandas as pd

    parquet = io.BytesIO()
    pd.DataFrame({"text": ["a"] * 100}).to_parquet(parquet)
    status, answer = server.post(parquet.getvalue(), "application/vnd.apache.parquet")
    assert (status, answer["message"]) == (
        415,
        "Content-Type 'application/vnd.apache.parquet' is not accepted; this model takes application/json, "
        "text/csv, image/jpeg, image/png, multipart/form-data",
    )
    status, answer = server.post(b"{}", "application/json", **{"Content-Encoding": "br"})
    assert (status, answer["message"]) == (
        415,
        "Content-Encoding 'br' is not accepted; send identity or gzip",
    )
    status, answer = server.post(b"GIF89a not an image", "image/jpeg")
    assert status == 400 and answer["message"].startswith("the body: not a whole JPEG or PNG image ("), answer
    form, kind = _multipart()
    status, answer = server.post(form, kind)
    assert status == 400 and answer["message"].startswith("the multipart/form-data body has no file field"), (
        answer
    )


def test_a_png_bomb_is_refused_by_its_header_before_it_is_decoded(server):
    bomb = _png_bomb(9000, 9000)  # 81 million pixels: 243 MB once RGB, under Pillow's own warning
    worker = server.worker()
    before = _peak_rss(worker)
    form, kind = _multipart(("bomb.png", "image/png", bomb))
    status, answer = server.post(form, kind)
    grew = _peak_rss(worker) - before
    print(f"PNG bomb of {len(bomb)} bytes (9000x9000): worker peak RSS +{grew / MiB:.1f} MiB")
    assert status == 400 and answer["message"] == (
        "file 'bomb.png': image header says 9000x9000 = 81000000 pixels, over data.max_image_pixels=40000000; "
        "refused before decoding"
    )
    assert grew < GROWTH


def test_a_request_past_the_timeout_is_answered_504_its_work_stopped_and_the_next_one_answered(strict):
    import time

    image = _pixels(7)
    expected = _json_answer(strict, image)  # a single image: well within 1 s
    slow = strict.worker()
    one = json.dumps(_pixels(8).tolist(), separators=(",", ":"))
    body = f'{{"inputs": [{",".join([one] * 256)}]}}'.encode()  # 2.8 MB: 11 s of convolutions here
    started = time.monotonic()
    status, answer = strict.post(body, "application/json")
    answered = time.monotonic()
    assert (status, answer["message"]) == (
        504,
        "the request passed this server's --timeout of 1 s; its work was stopped (the server restarts its worker)",
    )
    assert _json_answer(strict, image) == expected  # the next request waits for the new worker, answered
    print(f"504 after {answered - started:.2f} s; next answer {time.monotonic() - answered:.1f} s later")
    assert strict.worker() != slow and not Path(f"/proc/{slow}").exists()  # the computing worker is gone
    assert "serve: a request passed --timeout 1 s: worker stopped; starting another" in strict.output()


def test_a_body_that_does_not_arrive_in_time_is_408_and_the_flag_sets_the_limit(strict, server):
    assert "bodies up to 4000000 bytes" in strict.output()
    # the cap on predictions in flight reaches the worker (its effect: tests/test_serving_concurrency.py)
    assert "1 predictions at a time (--max-in-flight)" in strict.output()
    assert "8 predictions at a time (--max-in-flight)" in server.output()
    worker = strict.worker()
    with socket.create_connection(("127.0.0.1", strict.port), timeout=120) as sock:
        head = "POST /invocations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        sock.sendall(f"{head}Content-Length: 4000001\r\n\r\n".encode())
        assert _response(sock)[0] == 413
    with socket.create_connection(("127.0.0.1", strict.port), timeout=120) as sock:
        sock.sendall(f"{head}Content-Length: 4000000\r\n\r\n{{".encode())  # and no more
        status, answer = _response(sock)
    assert (status, answer["message"]) == (
        408,
        "the request's body did not arrive within this server's --timeout of 1 s",
    )
    assert strict.worker() == worker  # nothing computed: no restart


def test_a_port_in_use_is_one_line_exit_2_and_the_copy_removed(logged, tmp_path):
    project, run_id = logged
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        cmd = [sys.executable, "-m", "tfpipe", "serve", f"runs:/{run_id}/model", "--port", str(port)]
        env = {**_env(project), "TMPDIR": str(tmp_path)}
        proc = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=300)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("serve:")]
    assert proc.returncode == 2 and errors == [
        f"serve: error: cannot listen on 127.0.0.1:{port}: Address already in use"
    ], proc.stderr[-3000:]
    assert proc.stdout == "" and not list(tmp_path.iterdir())  # no server announced; the checked copy removed
