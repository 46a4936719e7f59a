"""A job's conditioning image, by reference: where it is stored, its content hash and its media type.

The image itself is never in a command or event. The gateway stores it once under a key made from its
SHA-256 (`image_key`), so the same image sent for many jobs is one object, and the job's RenderSpec carries
the reference as one text field, `input_image` (`ImageRef.text`: compact JSON with sorted keys), the way
every other field of the spec is a plain value. The worker reads the object by its key and checks the bytes
against the hash before rendering; the hash is part of the render's fingerprint, so a checkpoint of one
image's render is never resumed for another. Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

MEDIA_TYPES = ("image/png", "image/jpeg", "image/webp")
KEY_PREFIX = "inputs/sha256/"
MAX_REF_CHARS = 512
_SHA256 = re.compile(r"[0-9a-f]{64}")


def image_key(sha256: str) -> str:
    """The object key of the image with this SHA-256 (hex) in the artifacts bucket."""
    return f"{KEY_PREFIX}{sha256}"


@dataclass(frozen=True)
class ImageRef:
    key: str
    sha256: str
    media_type: str

    def problem(self) -> str | None:
        if not _SHA256.fullmatch(self.sha256):
            return "input_image.sha256 must be 64 lowercase hex digits"
        if self.key != image_key(self.sha256):
            return f"input_image.key must be {image_key('<sha256>')!r} of its own sha256"
        if self.media_type not in MEDIA_TYPES:
            return f"input_image.media_type must be one of {list(MEDIA_TYPES)}"
        return None

    def text(self) -> str:
        return json.dumps({"key": self.key, "media_type": self.media_type, "sha256": self.sha256},
                          sort_keys=True, separators=(",", ":"))

    @classmethod
    def for_content(cls, sha256: str, media_type: str) -> ImageRef:
        return cls(image_key(sha256), sha256, media_type)


def parse(text: str) -> ImageRef:
    """The reference out of RenderSpec.input_image; ValueError naming what is wrong."""
    if not isinstance(text, str) or len(text) > MAX_REF_CHARS:
        raise ValueError(f"input_image must be a JSON object of at most {MAX_REF_CHARS} characters")
    try:
        doc = json.loads(text)
    except ValueError:
        raise ValueError("input_image must be a JSON object {key, sha256, media_type}") from None
    if not isinstance(doc, dict) or set(doc) != {"key", "sha256", "media_type"} \
            or not all(isinstance(v, str) for v in doc.values()):
        raise ValueError("input_image must be a JSON object of exactly the strings key, sha256 and media_type")
    ref = ImageRef(doc["key"], doc["sha256"], doc["media_type"])
    problem = ref.problem()
    if problem is not None:
        raise ValueError(problem)
    return ref


def problem(text: str | None) -> str | None:
    """Why RenderSpec.input_image is not a valid reference (None: absent, or fine)."""
    if text is None:
        return None
    try:
        parse(text)
    except ValueError as exc:
        return str(exc)
    return None
