"""One source file -> the bytes stored in the Example (the directory source, and predict's input files).

Size caps are checked before any pixel or byte is read (Refused); any other failure raises as the decoder
raised it, and the caller names the file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO

# The decoders Pillow may use: the formats of the image extensions read (sources.IMAGE_EXTENSIONS), none of the
# dozens of others Pillow would otherwise try by content (a TIFF or PSD named .png reaches no decoder).
IMAGE_FORMATS = ("JPEG", "PNG")


class Refused(Exception):
    """A file refused before decoding (over a size cap); the message is the reason."""


def read_image_file(path: Path | IO[bytes], size: list, channels: int, max_pixels: int) -> tuple:
    """(raw uint8 HxWxC pixels, (width, height, mode) as the file's header gives them, before any
    conversion or resize: what the data report counts). Raises on an unreadable/corrupt/truncated image,
    Refused (before decoding any pixel: Image.open reads only the header) when the header's width x height
    is over `max_pixels`. `path`: a file, or a binary file object holding one (a served request's image)."""
    from PIL import Image

    try:  # a file of another format raises UnidentifiedImageError: an unreadable image
        image: Image.Image = Image.open(path, formats=IMAGE_FORMATS)
    except Image.DecompressionBombError as exc:  # Pillow's own limit, above ours unless raised
        raise Refused(
            f"image header says more than data.max_image_pixels={max_pixels} pixels ({exc})"
        ) from None
    with image:
        width, height = image.size
        header = (width, height, image.mode)
        if width * height > max_pixels:
            raise Refused(
                f"image header says {width}x{height} = {width * height} pixels, over "
                f"data.max_image_pixels={max_pixels}; refused before decoding"
            )
        image.load()  # decodes fully: a truncated or corrupt file raises here
        mode = "RGB" if channels == 3 else "L"
        if image.mode != mode:
            image = image.convert(mode)
        height, width = int(size[0]), int(size[1])
        if image.size != (width, height):
            image = image.resize((width, height), Image.Resampling.BILINEAR)
        return image.tobytes(), header


def decode_image_file(path: Path, size: list, channels: int, max_pixels: int) -> bytes:
    """Raw uint8 HxWxC pixels at `size` (height, width) and `channels` (read_image_file without the header)."""
    return read_image_file(path, size, channels, max_pixels)[0]


def decode_text_file(path: Path, max_bytes: int) -> bytes:
    """The file's bytes, after checking they are valid UTF-8 (raises UnicodeDecodeError otherwise); Refused
    when over `max_bytes` (checked on the open file, and the read is bounded, so a growing file cannot pass)."""
    with open(path, "rb") as fh:
        length = os.fstat(fh.fileno()).st_size
        raw = fh.read(max_bytes + 1) if length <= max_bytes else b""
    if length > max_bytes or len(raw) > max_bytes:
        raise Refused(
            f"{max(length, len(raw))} bytes, over data.max_text_bytes={max_bytes}; refused before reading"
        )
    raw.decode("utf-8")
    return raw
