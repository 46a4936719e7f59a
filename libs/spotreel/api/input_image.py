"""An image-to-video request's `input_reference` → the checked image bytes, or a 400 saying what is wrong.

The OpenAI SDK sends the image two ways: an uploaded file (a multipart file part: its bytes), or a
reference object `{"image_url": ...}` / `{"file_id": ...}` (JSON, or the form fields
`input_reference[image_url]`). spotreel takes the upload and an `image_url` that is a base64 `data:` URL;
it fetches no remote URL (the gateway makes no requests on a client's behalf) and has no Files API, so a
`file_id` or an http(s) URL is refused with a 400 naming the forms it takes.

The image is judged by its bytes, not by a declared type: PNG, JPEG or WebP by their signatures, at most
`max_image_bytes`, at most `max_image_pixels` and `max_side` per side, and it must decode whole (Pillow).
The worker resizes it to the video's size, as the diffusers pipeline does.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import re
from dataclasses import dataclass
from typing import Any

from spotreel.api.config import GatewayConfig
from spotreel.api.errors import ApiError

PARAM = "input_reference"
_DATA_URL = re.compile(r"data:(image/[a-z0-9.+-]+)?(;[a-z0-9-]+=[^;,]*)*;base64,", re.IGNORECASE)
FORMATS = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp"}


@dataclass(frozen=True)
class InputImage:
    data: bytes
    media_type: str
    sha256: str
    width: int
    height: int


def bad(message: str, code: str = "invalid_image") -> ApiError:
    return ApiError(400, code, message, field=PARAM)


def sniff(data: bytes) -> str | None:
    """The media type by the file's signature: PNG, JPEG or WebP, else None."""
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "image/png"
    if data[:3] == b"\xff\xd8\xff":
        return "image/jpeg"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def image_bytes(value: Any, cfg: GatewayConfig) -> bytes:
    """The bytes `input_reference` names (an upload's own, or a data URL's), unchecked beyond the size."""
    if isinstance(value, (bytes, bytearray)):
        data = bytes(value)
    elif isinstance(value, dict):
        unknown = sorted(set(value) - {"image_url", "file_id"})
        if unknown:
            raise bad(f"input_reference takes image_url (a base64 data: URL) or an uploaded file; got the key "
                      f"{unknown[0]!r}", "invalid_value")
        if "file_id" in value:
            raise bad("input_reference.file_id is not supported: this server has no Files API; upload the image "
                      "as input_reference, or send it as image_url: a base64 data: URL", "unsupported_parameter")
        url = value.get("image_url")
        if not isinstance(url, str):
            raise bad("input_reference.image_url must be a string: a base64 data: URL", "invalid_value")
        m = _DATA_URL.match(url)
        if m is None:
            raise bad("input_reference.image_url must be a base64 data: URL (data:image/png;base64,...); this "
                      "server fetches no remote URLs", "unsupported_parameter")
        payload = url[m.end():]
        if len(payload) > (cfg.max_image_bytes + 2) // 3 * 4 + 4:
            raise too_large(cfg, len(payload) * 3 // 4)
        try:
            data = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise bad("input_reference.image_url's data is not valid base64") from None
    else:
        raise bad("input_reference must be an uploaded image file, or an object {\"image_url\": \"data:...\"}",
                  "invalid_value")
    if len(data) > cfg.max_image_bytes:
        raise too_large(cfg, len(data))
    if not data:
        raise bad("input_reference is empty")
    return data


def too_large(cfg: GatewayConfig, size: int) -> ApiError:
    return bad(f"input_reference is {size} bytes; the limit is {cfg.max_image_bytes}", "image_too_large")


def check(data: bytes, cfg: GatewayConfig) -> InputImage:
    """The image if it is a PNG, JPEG or WebP within the limits that decodes whole; else a 400."""
    media_type = sniff(data)
    if media_type is None:
        raise bad("input_reference must be a PNG, JPEG or WebP image (judged by its bytes)", "unsupported_image_type")
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            width, height = im.size
            if width * height > cfg.max_image_pixels or max(width, height) > cfg.max_image_side:
                raise bad(f"input_reference is {width}x{height} pixels; the limits are {cfg.max_image_side} per "
                          f"side and {cfg.max_image_pixels} in all", "image_too_large")
            if FORMATS.get(im.format or "") != media_type:
                raise bad(f"input_reference's bytes begin as {media_type} but decode as {im.format}")
            im.load()
    except ApiError:
        raise
    except Exception as exc:  # Pillow's errors for truncated or corrupt files are of many kinds
        raise bad(f"input_reference does not decode as {media_type}: {type(exc).__name__}: {exc}") from None
    return InputImage(data, media_type, hashlib.sha256(data).hexdigest(), width, height)


def read(value: Any, cfg: GatewayConfig) -> InputImage:
    return check(image_bytes(value, cfg), cfg)
