"""Image bodies for `tfpipe serve` (tfpipe.tracking.serving_app): an image/jpeg or image/png body, or the file
fields of a multipart/form-data body, as the JSON the model's JSON route takes (`{"inputs": [N, H, W, C] uint8}`),
so MLflow's app predicts them as it predicts JSON and answers in the same form.

Each image is decoded as batch predict and the prepare stage's directory source decode a file
(`tfpipe.data.decode.read_image_file`, with data.max_image_pixels' default): only Pillow's JPEG and PNG decoders;
an image whose header says more than 40,000,000 pixels is refused before any pixel is decoded (a decompression
bomb: a small PNG of 20000x20000 pixels); converted to RGB (or grey, for a one-channel model) and resized to the
model's height x width with Pillow's bilinear filter. A body that is none of these is one line, HTTP 400."""

from __future__ import annotations

import io
import json


class Refusal(Exception):
    """A request answered at once with `status` and one line (MLflow's error form: error_code and message)."""

    def __init__(self, status: int, code: str, line: str):
        super().__init__(line)
        self.status, self.code, self.line = status, code, line


def inputs_json(body: bytes, content_type: str, image_shape: tuple, batch_limit: int) -> bytes:
    """`{"inputs": [...]}` of the image in `body` (image/jpeg, image/png) or of each file field of a multipart
    body, in their order; Refusal (400, 413) otherwise."""
    import numpy as np

    if content_type.split(";")[0].strip().lower() == "multipart/form-data":
        files = _file_fields(body, content_type)
        if len(files) > batch_limit:
            raise Refusal(
                413,
                "REQUEST_LIMIT_EXCEEDED",
                f"{len(files)} files in one request, over this server's {batch_limit}",
            )
    else:
        files = [("the body", body)]
    pixels = np.stack([_decode(name, data, tuple(image_shape)) for name, data in files])
    return json.dumps({"inputs": pixels.tolist()}).encode()


def _file_fields(body: bytes, content_type: str) -> list:
    """[(name, bytes)] of the multipart body's file fields (those with a filename), in their order."""
    from email import policy
    from email.parser import BytesParser

    head = f"Content-Type: {content_type}\r\n\r\n".encode("latin-1", "replace")
    message = BytesParser(policy=policy.HTTP).parsebytes(head + body)
    parts = list(message.iter_parts()) if message.is_multipart() else []
    files = [
        (f"file {part.get_filename()!r}", part.get_payload(decode=True) or b"")
        for part in parts
        if part.get_filename() is not None
    ]
    if not files:
        raise Refusal(
            400,
            "BAD_REQUEST",
            "the multipart/form-data body has no file field; send images as files (curl -F 'file=@cat.jpg')",
        )
    return files


def _decode(name: str, data: bytes, image_shape: tuple):
    """uint8 [H, W, C] pixels of one JPEG or PNG, decoded as prepare decodes a file; Refusal (400) otherwise."""
    import numpy as np
    from PIL import Image

    from tfpipe.config.schema import DataConfig
    from tfpipe.data.decode import Refused, read_image_file

    height, width, channels = image_shape
    try:  # the directory source's cap by default, as batch predict (tfpipe.commands.predict.LIMITS)
        raw, _ = read_image_file(io.BytesIO(data), [height, width], channels, DataConfig().max_image_pixels)
    except Refused as exc:
        raise Refusal(400, "INVALID_PARAMETER_VALUE", f"{name}: {exc}") from None
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        line = f"{name}: not a whole JPEG or PNG image ({' '.join(str(exc).split())[:160]})"
        raise Refusal(400, "INVALID_PARAMETER_VALUE", line) from None
    return np.frombuffer(raw, np.uint8).reshape(image_shape)
