"""How much GPU memory a whole (untiled) VAE decode takes, per model family, and so whether `--vae-tiling auto`
tiles: a measurement, not a guess (issue 15, item 4).

Measured on an NVIDIA H100 80GB (torch 2.11, diffusers 0.39) with random weights of the real architectures in
the dtype each is served in, decode only (bench/vae_bench.py; bench/results/worker-h100-vae-2026-11-26.json;
bench/README.md "VAE decode"). The memory a whole decode allocates above the weights ("extra") is, per family:

| family    | measured extra (whole decode)                                        | grows with       |
|-----------|----------------------------------------------------------------------|------------------|
| wan       | 832x480 x33 4.27, x81 4.39 GiB; 1280x720 x81 10.12 GiB               | width × height   |
| cogvideox | 720x480 x25 14.74, x49 14.75 GiB; 1360x768 x49 44.55 GiB             | width × height   |
| unet3d    | 576x320 x24 8.44, x48 16.48 GiB                                      | × frames (batch) |
| ltx       | 768x512 x33 1.25, x121 4.48 GiB                                      | × frames         |

Wan's and CogVideoX's VAEs decode a few latent frames at a time with a cache, so a longer video costs almost
nothing more (Wan: 6 bytes per output voxel, the bf16 frames themselves) while a larger frame costs in
proportion to its pixels; zeroscope's decodes every frame as one batch and LTX-Video's the whole clip at
once, so theirs grows with frames too. A voxel count (the old rule) is therefore the wrong measure for
two of the four families: at the same 32 M voxels Wan needs 4 GiB, zeroscope 60 GiB. `COST` is fitted
through those points, rounded up (it overestimates every measured case by 0.1–1.2%).

The budget: auto tiles when the estimate exceeds `SHARE` of the GPU's memory. On those runs the caching
allocator reserved up to 2.0× a decode's extra (zeroscope x48: 33.5 GiB reserved above the weights for
16.5 allocated; Wan and CogVideoX 1.4×), so a decode estimated at a quarter of the card can hold about half
of it, leaving the other half to the weights and the real text encoder (about 10 GiB in 16-bit; Wan 2.1
14B's transformer is about 28 GiB in bf16). Tiling is not free: tiled + sliced decodes took 1.3–2.9× as
long (Wan 832x480 x81 2.15 → 4.49 s, CogVideoX 720x480 x49 2.34 → 3.49 s), so a decode that fits stays
whole. On an 80 GB H100 (79.2 GiB) that is 19.8 GiB: every size above decodes whole except CogVideoX at
1360x768 (44.5 GiB: tiled, 8.5 GiB peak); on a 24 GiB card CogVideoX-2B at 720x480 tiles and Wan at
832x480 does not.

Pure arithmetic, no torch: the Renderer asks with the device's total memory (a property of the GPU model,
which the render's fingerprint already holds, so workers on the same GPU model decide the same).
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
