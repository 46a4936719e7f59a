"""Frames to MP4 and back with PyAV (FFmpeg bundled in the wheel): the worker encodes what it rendered
(worker/job.py), `spotreel demo` and the tests probe and decode what came back. Here, below both, so the
demo need not import the worker (docs/DESIGN.md, section 6).

H.264 (libx264) where the FFmpeg build has it, else MPEG-4 part 2. Encoders are not promised to be
bit-stable across builds, so identity of a render is judged on the uint8 frames through
`frames_checksum`, which the worker stores next to the video.
"""

from __future__ import annotations

import hashlib
import io
from fractions import Fraction

import av
import numpy as np

_PREFERRED_CODECS = ("libx264", "h264", "mpeg4")


def available_codec() -> str:
    for name in _PREFERRED_CODECS:
        try:
            codec = av.codec.Codec(name, "w")
        except Exception:  # the build lacks it
            continue
        if codec.type == "video":
            return name
    raise RuntimeError(f"this FFmpeg build has none of the video encoders {_PREFERRED_CODECS}")


def _check_frames(frames: np.ndarray) -> None:
    if not isinstance(frames, np.ndarray) or frames.dtype != np.uint8:
        raise ValueError("frames must be a numpy uint8 array")
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.shape[0] < 1:
        raise ValueError(f"frames must have shape (T>=1, H, W, 3), got {frames.shape}")


def frames_checksum(frames: np.ndarray) -> str:
    """sha256 over shape and bytes of the uint8 frames: equal checksums mean bit-identical videos."""
    _check_frames(frames)
    h = hashlib.sha256("x".join(map(str, frames.shape)).encode() + b"\0")
    h.update(np.ascontiguousarray(frames).tobytes())
    return h.hexdigest()


def encode_mp4(frames: np.ndarray, fps: int, codec: str | None = None) -> bytes:
    _check_frames(frames)
    if not isinstance(fps, int) or fps < 1:
        raise ValueError(f"fps must be a positive integer, got {fps!r}")
    if codec is None:
        codec = available_codec()
    else:
        try:
            av.codec.Codec(codec, "w")
        except Exception:
            raise ValueError(f"video encoder {codec!r} is not in this FFmpeg build") from None
    t, h, w, _ = frames.shape
    # yuv420p halves chroma resolution, so odd sizes get one repeated edge row or column.
    if h % 2 or w % 2:
        frames = np.pad(frames, ((0, 0), (0, h % 2), (0, w % 2), (0, 0)), mode="edge")
    buf = io.BytesIO()
    with av.open(buf, mode="w", format="mp4") as container:
        stream = container.add_stream(codec, rate=Fraction(fps, 1))
        stream.width, stream.height = frames.shape[2], frames.shape[1]
        stream.pix_fmt = "yuv420p"
        if codec in ("libx264", "h264"):
            # Deterministic single-threaded encode; good quality for tiny frames.
            stream.options = {"crf": "18", "preset": "medium", "threads": "1"}
        else:
            stream.options = {"qscale": "2", "threads": "1"}
            stream.bit_rate = 4_000_000
        for image in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return buf.getvalue()


def probe(mp4: bytes) -> dict:
    """Codec name, frame count, size and rate of the first video stream, read by FFmpeg's demuxer."""
    with av.open(io.BytesIO(mp4), mode="r") as container:
        stream = container.streams.video[0]
        count = sum(1 for _ in container.decode(stream))
        return {"codec": stream.codec_context.name, "frames": count, "width": stream.codec_context.width,
                "height": stream.codec_context.height, "fps": float(stream.average_rate or 0),
                "format": container.format.name}


def decode_frames(mp4: bytes) -> np.ndarray:
    with av.open(io.BytesIO(mp4), mode="r") as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    if not frames:
        raise ValueError("the video holds no frames")
    return np.stack(frames)
