"""MP4 encoding: a real, decodable H.264 (or MPEG-4) file with the frames we gave it."""

from __future__ import annotations

import numpy as np
import pytest

from spotreel.media.video import available_codec, decode_frames, encode_mp4, frames_checksum, probe

pytestmark = pytest.mark.unit


def gradient_frames(t: int = 12, h: int = 48, w: int = 64) -> np.ndarray:
    """Smooth moving colour ramps: easy for a lossy codec, so decoded frames stay close to the input."""
    y, x = np.mgrid[0:h, 0:w]
    frames = [np.stack([(x * 4 + i * 8) % 256, (y * 5) % 256, np.full_like(x, 40 + i * 10)], axis=-1)
              for i in range(t)]
    return np.asarray(frames, dtype=np.uint8)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def test_h264_is_available_in_the_bundled_ffmpeg() -> None:
    assert available_codec() == "libx264"


@pytest.mark.parametrize("codec, expect", [(None, "h264"), ("mpeg4", "mpeg4")])
def test_mp4_decodes_with_the_right_codec_frame_count_size_and_rate(codec, expect: str) -> None:
    frames = gradient_frames()
    mp4 = encode_mp4(frames, fps=12, codec=codec)
    assert mp4[4:8] == b"ftyp"
    info = probe(mp4)
    assert info["codec"] == expect
    assert (info["frames"], info["width"], info["height"], info["fps"]) == (12, 64, 48, 12.0)
    back = decode_frames(mp4)
    assert back.shape == frames.shape and back.dtype == np.uint8
    assert psnr(back, frames) > 30, "decoded video should look like what was encoded"


def test_odd_sizes_are_padded_to_even_for_yuv420() -> None:
    frames = gradient_frames(t=3, h=31, w=33)
    info = probe(encode_mp4(frames, fps=8))
    assert (info["frames"], info["width"], info["height"]) == (3, 34, 32)


def test_single_frame_video() -> None:
    assert probe(encode_mp4(gradient_frames(t=1), fps=1))["frames"] == 1


def test_encoding_is_repeatable_within_one_build() -> None:
    frames = gradient_frames()
    assert encode_mp4(frames, fps=8) == encode_mp4(frames, fps=8)


def test_frames_checksum_sees_one_changed_value_and_the_shape() -> None:
    frames = gradient_frames()
    base = frames_checksum(frames)
    assert base == frames_checksum(frames.copy())
    changed = frames.copy()
    changed[5, 10, 10, 1] ^= 1
    assert frames_checksum(changed) != base
    assert frames_checksum(frames.reshape(6, 96, 64, 3)) != base


@pytest.mark.parametrize("bad, match", [
    (np.zeros((4, 8, 8, 3), dtype=np.float32), "uint8"),
    (np.zeros((8, 8, 3), dtype=np.uint8), "shape"),
    (np.zeros((0, 8, 8, 3), dtype=np.uint8), "shape"),
    (np.zeros((2, 8, 8, 4), dtype=np.uint8), "shape"),
])
def test_bad_frames_are_refused(bad: np.ndarray, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        encode_mp4(bad, fps=8)


def test_bad_fps_and_unknown_codec_are_refused() -> None:
    with pytest.raises(ValueError, match="fps"):
        encode_mp4(gradient_frames(t=2), fps=0)
    with pytest.raises(ValueError, match="not in this FFmpeg build"):
        encode_mp4(gradient_frames(t=2), fps=8, codec="no-such-codec")
