"""Still images of a rendered video: a thumbnail (its first frame) and a spritesheet (up to 16 frames picked
evenly, in a grid), both PNG. Made from the MP4 when asked for (the OpenAI-compatible surface's
`download_content(variant=...)`), so the worker stores nothing more than the video: decoding a few seconds of
small frames costs less than a second, and the images are wanted rarely.

PNG is written here with zlib (RGB, 8 bits, no filter), so no imaging library is needed.
"""

from __future__ import annotations

import math
import struct
import zlib

import numpy as np

SPRITES_MAX = 16


def png(image: np.ndarray) -> bytes:
    """An (H, W, 3) uint8 image as a PNG file."""
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"an image must be (H, W, 3) uint8, got {image.shape} {image.dtype}")
    h, w, _ = image.shape
    raw = b"".join(b"\x00" + image[y].tobytes() for y in range(h))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))


def spritesheet(frames: np.ndarray, most: int = SPRITES_MAX) -> np.ndarray:
    """Up to `most` of (T, H, W, 3) frames, picked evenly from first to last, tiled row by row in a grid of
    ceil(sqrt(n)) columns; cells left over are black."""
    t, h, w, c = frames.shape
    n = min(t, most)
    picked = frames[np.linspace(0, t - 1, n).round().astype(int)]
    cols = math.ceil(math.sqrt(n))
    rows = math.ceil(n / cols)
    sheet = np.zeros((rows * h, cols * w, c), dtype=np.uint8)
    for i, frame in enumerate(picked):
        r, k = divmod(i, cols)
        sheet[r * h:(r + 1) * h, k * w:(k + 1) * w] = frame
    return sheet


def preview(mp4: bytes, variant: str) -> bytes:
    """`thumbnail` or `spritesheet` of an MP4, as PNG."""
    from spotreel.media.video import decode_frames

    frames = decode_frames(mp4)
    return png(frames[0] if variant == "thumbnail" else spritesheet(frames))
