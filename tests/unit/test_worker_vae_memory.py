"""`--vae-tiling auto`'s rule (worker/vae_memory.py) against the H100 measurement it was fitted to
(bench/results/worker-h100-vae-2026-11-26.json), and the Renderer's fallback where there is no GPU."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from spotreel.worker import vae_memory
from spotreel.worker.render_loop import DEFAULT_TILE_ABOVE_VOXELS, Renderer, RenderRequest

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results" / "worker-h100-vae-2026-11-26.json"
GIB = 2**30
H100 = 85_031_714_816  # torch.cuda.get_device_properties(...).total_memory of an H100 80GB HBM3 (79.2 GiB)


def _measured() -> list[tuple[str, int, int, int, float]]:
    run = json.loads(RESULTS.read_text())["run"]
    assert run["environment"]["gpu_memory_gib"] == round(H100 / GIB, 1)
    rows = []
    for family, fam in run["families"].items():
        for case in fam["cases"]:
            whole = [d for d in case["decodes"] if d["decode"] == "whole"][-1]
            rows.append((family, case["width"], case["height"], case["frames"], whole["extra_gib"]))
    return rows


def test_the_estimate_covers_every_measured_decode_and_stays_close() -> None:
    rows = _measured()
    assert {r[0] for r in rows} == set(vae_memory.COST)
    for family, w, h, f, extra_gib in rows:
        estimate = vae_memory.whole_decode_bytes(family, w, h, f) / GIB
        # never under what was measured, at most 2% over
        assert extra_gib <= estimate <= extra_gib * 1.02, (family, w, h, f, extra_gib, estimate)


def test_on_an_h100_only_cogvideox_at_1360x768_tiles_among_the_measured_sizes() -> None:
    tiled = {(fam, w, h, f) for fam, w, h, f, _ in _measured() if vae_memory.tiles(fam, w, h, f, H100)}
    assert tiled == {("cogvideox", 1360, 768, 49)}


def test_length_matters_only_where_the_vae_decodes_all_frames_at_once() -> None:
    # Wan decodes a few latent frames at a time: a long 832x480 video still fits whole...
    assert not vae_memory.tiles("wan", 832, 480, 1001, H100)
    # ...while zeroscope batches every frame: 100 frames at 576x320 (18 M voxels, below the old voxel
    # threshold of 832x480x81 = 32 M, which decoded it whole) needs ~34 GiB and tiles.
    assert 576 * 320 * 100 < DEFAULT_TILE_ABOVE_VOXELS
    assert vae_memory.tiles("unet3d", 576, 320, 100, H100)
    assert not vae_memory.tiles("unet3d", 576, 320, 48, H100)


def test_a_smaller_gpu_tiles_sooner() -> None:
    small = 24 * GIB
    assert vae_memory.tiles("cogvideox", 720, 480, 49, small)  # 14.7 GiB > 6 GiB
    assert not vae_memory.tiles("wan", 832, 480, 81, small)  # 4.4 GiB
    assert vae_memory.tiles("wan", 1280, 720, 81, small)  # 10.1 GiB


def test_an_unmeasured_family_has_no_estimate() -> None:
    assert vae_memory.whole_decode_bytes("someday", 64, 64, 9) is None
    assert vae_memory.tiles("someday", 64, 64, 9, H100) is None


def _bare_renderer(family: str, tile_above_voxels: int | None) -> Renderer:
    """Only what `tiled` reads: a CPU Renderer has no GPU memory to weigh, so the voxel threshold decides."""
    r = Renderer.__new__(Renderer)
    r.vae_tiling, r.tile_above_voxels = "auto", tile_above_voxels
    r.device, r.family = torch.device("cpu"), SimpleNamespace(name=family)
    return r


@pytest.mark.parametrize("family", ["wan", "someday"])
def test_on_a_cpu_auto_keeps_the_voxel_threshold(family: str) -> None:
    def req(w: int, h: int, f: int) -> RenderRequest:
        return RenderRequest(prompt="x", seed=1, num_steps=1, width=w, height=h, num_frames=f, fps=8)

    r = _bare_renderer(family, None)
    assert not r.tiled(req(832, 480, 81)) and r.tiled(req(832, 480, 85))
    r.tile_above_voxels = 32 * 32 * 5  # the operator's --vae-tile-above
    assert not r.tiled(req(32, 32, 5)) and r.tiled(req(32, 32, 9))
    r.vae_tiling = "off"
    assert not r.tiled(req(832, 480, 85))
