"""How much GPU memory a whole (untiled) VAE decode takes, per model family, and so whether `--vae-tiling auto`
tiles: an estimate fitted to measurements, not a guess.

The measurements: an NVIDIA H100 80GB with random weights of the real architectures in the dtype each is
served in, decode only (bench/vae_bench.py; bench/results/worker-h100-vae-2026-11-26.json, which
tests/unit/test_worker_vae_memory.py holds the estimate to; bench/README.md, "Worker: when `--vae-tiling auto`
tiles"). Wan's and CogVideoX's VAEs decode a few latent frames at a time with a cache, so a longer video
costs almost nothing more (Wan: the bf16 frames themselves) while a larger frame costs in proportion to its
pixels; zeroscope's decodes every frame as one batch and LTX-Video's the whole clip at once, so theirs grows
with frames too. A voxel count is therefore the wrong measure for two of the four families. `COST` (bytes per
pixel of a frame, bytes per output voxel) is fitted through those points, rounded up, so it never
underestimates a measured case.

The budget: auto tiles when the estimate exceeds `SHARE` of the GPU's memory. The caching allocator reserved
up to twice a decode's extra, so a decode estimated at a quarter of the card can hold about half of it,
leaving the other half to the weights and the real text encoder. Tiling is not free (tiled + sliced decodes
are slower), so a decode that fits stays whole
(docs/decisions/0013-vae-tiling-by-estimated-memory.md).
"""

from __future__ import annotations

from typing import NamedTuple


class DecodeCost(NamedTuple):
    """Bytes a whole decode allocates above the weights: per pixel of one frame, plus per output voxel."""

    per_pixel: int
    per_voxel: int


# Fitted through the measured cases above (bytes), rounded up.
COST: dict[str, DecodeCost] = {
    "wan": DecodeCost(per_pixel=11_350, per_voxel=7),
    "cogvideox": DecodeCost(per_pixel=45_850, per_voxel=0),
    "unet3d": DecodeCost(per_pixel=2_400, per_voxel=1_960),
    "ltx": DecodeCost(per_pixel=120, per_voxel=101),
}
# Auto tiles when a whole decode's estimated extra memory exceeds this share of the GPU's total memory.
SHARE = 0.25


def whole_decode_bytes(family: str, width: int, height: int, frames: int) -> int | None:
    """Estimated bytes a whole decode of `family` allocates above the weights; None for an unmeasured family."""
    cost = COST.get(family)
    if cost is None:
        return None
    pixels = width * height
    return cost.per_pixel * pixels + cost.per_voxel * pixels * frames


def tiles(family: str, width: int, height: int, frames: int, device_memory_bytes: int,
          share: float = SHARE) -> bool | None:
    """Whether auto tiles a decode on a GPU of `device_memory_bytes`; None for an unmeasured family (the caller
    falls back to its voxel threshold)."""
    estimate = whole_decode_bytes(family, width, height, frames)
    if estimate is None:
        return None
    return estimate > share * device_memory_bytes
