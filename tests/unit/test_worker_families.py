"""Every model family on its tiny random-weight build: the worker's own step loop equals the stock diffusers
pipeline bit for bit, and a resume from a checkpoint (tensors + JSON through the real encoder) at a step in
the middle finishes bit-identical to the undisturbed run for every exact-resume sampler, multistep ones
included (their previous model outputs travel in the checkpoint)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from spotreel.worker.checkpoints import decode, encode
from spotreel.worker.families import scheduler_state
from spotreel.worker.hf_logging import quietly
from spotreel.model_registry import parse
from spotreel.worker.render_loop import Renderer, RenderRequest

pytestmark = pytest.mark.unit

# family -> (width, height, frames) its tiny build takes, and the samplers it offers
SHAPES = {"wan": (16, 16, 5), "ltx": (32, 32, 9), "cogvideox": (16, 16, 9), "unet3d": (32, 32, 4)}
SAMPLERS = {"wan": ["unipc", "dpmpp"], "ltx": ["flow_euler"], "cogvideox": ["ddim", "dpmpp"],
            "unet3d": ["unipc", "dpmpp"]}  # unet3d's ddim/euler_a: tests/unit/test_worker_render_loop.py
CASES = [(f, s) for f, ss in SAMPLERS.items() for s in ss]


@pytest.fixture(scope="module")
def model_dirs(settings) -> dict[str, Path]:
    from spotreel.worker.model_tiny import ensure_tiny_model

    return {f: ensure_tiny_model(settings.cache_dir, family=f) for f in SAMPLERS}


@pytest.fixture(scope="module")
def renderers(model_dirs) -> dict[str, Renderer]:
    return {f: quietly(lambda d=d: Renderer(d)) for f, d in model_dirs.items()}


def request(family: str, **over) -> RenderRequest:
    w, h, f = SHAPES[family]
    base = dict(prompt="a red fox running in the snow", seed=7, num_steps=5, width=w, height=h, num_frames=f,
                fps=8, sampler=SAMPLERS[family][0])
    base.update(over)
    return RenderRequest(**base)


def run(r: Renderer, req: RenderRequest):
    state = r.start(req)
    while not state.done:
        state = r.step(state)
    return state


def stock_latents(model_dir: Path, family: str, req: RenderRequest, scheduler_cls: str) -> torch.Tensor:
    import diffusers
    from diffusers import DiffusionPipeline

    pipe = quietly(lambda: DiffusionPipeline.from_pretrained(model_dir))
    pipe.set_progress_bar_config(disable=True)
    pipe.scheduler = getattr(diffusers, scheduler_cls).from_config(pipe.scheduler.config)
    kw = dict(prompt=req.prompt, negative_prompt=req.negative_prompt or None, num_inference_steps=req.num_steps,
              height=req.height, width=req.width, num_frames=req.num_frames, guidance_scale=req.guidance_scale,
              output_type="latent", generator=torch.Generator().manual_seed(req.seed))
    if family == "ltx":
        kw["frame_rate"] = req.fps
    if family == "cogvideox":
        kw["max_sequence_length"] = pipe.transformer.config.max_text_seq_length
    out = pipe(**kw)
    return out.frames


@pytest.mark.parametrize("family,sampler", CASES)
@pytest.mark.parametrize("guidance,negative", [(1.0, ""), (4.0, "blurry dark")])
def test_family_loop_matches_the_stock_pipeline(renderers, model_dirs, family, sampler, guidance, negative):
    r = renderers[family]
    req = request(family, sampler=sampler, guidance_scale=guidance, negative_prompt=negative)
    ours = run(r, req).latents
    stock = stock_latents(model_dirs[family], family, req, r.family.samplers[sampler])
    assert ours.shape == stock.shape
    assert torch.equal(ours, stock)


@pytest.mark.parametrize("family,sampler", CASES)
def test_resume_mid_render_is_bit_identical(renderers, family, sampler):
    r = renderers[family]
    req = request(family, sampler=sampler, guidance_scale=3.0, num_steps=6)
    state, blob = r.start(req), None
    while not state.done:
        if state.step == 3:
            blob = encode(r.snapshot(state))
        state = r.step(state)
    resumed = r.resume(req, decode(blob))
    assert resumed.step == 3
    while not resumed.done:
        resumed = r.step(resumed)
    assert torch.equal(resumed.latents, state.latents), f"{family}/{sampler}: resume at step 3 diverged"
    assert np.array_equal(r.finish(resumed), r.finish(state))


@pytest.mark.parametrize("family,sampler", [("wan", "unipc"), ("unet3d", "dpmpp"), ("cogvideox", "dpmpp")])
def test_multistep_resume_needs_more_than_the_step_index(renderers, family, sampler):
    """The control: restoring only timesteps and step index (what a single-step sampler needs) diverges for a
    multistep sampler, so the scheduler state in the checkpoint is what makes the resume above exact."""
    r = renderers[family]
    req = request(family, sampler=sampler, num_steps=6)
    state, ckpt = r.start(req), None
    while not state.done:
        if state.step == 3:
            ckpt = r.snapshot(state)
        state = r.step(state)
    assert ckpt is not None
    naive = r.resume(req, ckpt)
    fresh = r.family.scheduler(req)
    if hasattr(fresh, "set_begin_index"):  # CogVideoX's DPM has no step index: its state is `extra`
        fresh.set_begin_index(3)
    naive = type(naive)(**{**naive.__dict__, "scheduler": fresh,
                           "extra": {k: None for k in naive.extra}})
    while not naive.done:
        naive = r.step(naive)
    assert not torch.equal(naive.latents, state.latents)


def test_scheduler_state_is_tensors_and_json_only(renderers):
    import json

    r = renderers["wan"]
    state = r.step(r.step(r.start(request("wan"))))
    tensors, doc = scheduler_state.dump(state.scheduler)
    json.dumps(doc)  # plain JSON
    assert all(isinstance(t, torch.Tensor) for t in tensors.values())
    assert doc["attrs"]["_step_index"] == {"json": 2}
    assert any(k.startswith("sched.model_outputs.") for k in tensors)


def test_family_sizes_frames_and_samplers_are_checked(renderers):
    with pytest.raises(ValueError, match="4n\\+1"):
        renderers["wan"].check(request("wan", num_frames=6))
    with pytest.raises(ValueError, match="multiples of"):
        renderers["wan"].check(request("wan", width=24))
    with pytest.raises(ValueError, match="sampler"):
        renderers["ltx"].check(request("ltx", sampler="ddim"))
    assert {r.family.name: r.default_sampler for r in renderers.values()} == {
        "wan": "unipc", "ltx": "flow_euler", "cogvideox": "ddim", "unet3d": "ddim"}


def test_fps_is_in_the_fingerprint_only_where_it_changes_frames(renderers):
    assert renderers["ltx"].fingerprint(request("ltx", fps=24)) != renderers["ltx"].fingerprint(request("ltx"))
    assert renderers["wan"].fingerprint(request("wan", fps=24)) == renderers["wan"].fingerprint(request("wan"))


def test_wan22_two_experts_match_the_stock_pipeline_and_resume(tmp_path):
    """Wan 2.2's layout: a second transformer takes the steps below boundary_ratio × 1000."""
    from diffusers import WanPipeline

    from spotreel.worker.model_tiny_dit import build_wan

    torch.manual_seed(5)
    base = build_wan()
    second = build_wan().transformer  # other random weights, same architecture
    pipe = WanPipeline(tokenizer=base.tokenizer, text_encoder=base.text_encoder, transformer=base.transformer,
                       transformer_2=second, vae=base.vae, scheduler=base.scheduler, boundary_ratio=0.5)
    quietly(lambda: pipe.save_pretrained(tmp_path, safe_serialization=True))
    r = quietly(lambda: Renderer(tmp_path))
    req = request("wan", guidance_scale=3.0, num_steps=6)
    state, blob = r.start(req), None
    while not state.done:
        if state.step == 4:  # past the switch: the low-noise expert is running
            blob = encode(r.snapshot(state))
        state = r.step(state)
    assert torch.equal(state.latents, stock_latents(tmp_path, "wan", req, "UniPCMultistepScheduler"))
    resumed = r.resume(req, decode(blob))
    while not resumed.done:
        resumed = r.step(resumed)
    assert torch.equal(resumed.latents, state.latents)
    # Both experts ran: with the second one's weights zeroed the result changes.
    with torch.no_grad():
        for p in r.family.pipe.transformer_2.parameters():
            p.zero_()
    again = r.start(req)
    while not again.done:
        again = r.step(again)
    assert not torch.equal(again.latents, state.latents)


# -- VAE tiling and slicing (the VAE's own enable_tiling / enable_slicing), and the registry's caps ---------
# The tiny builds' tiles are set smaller than their frames where the VAE's default tile would cover the
# whole frame, so the tiled path really runs; slicing decodes a batch item by item (UNet3D: frame by frame).

# family -> (width, height, frames) at least two of its tiles wide, sampler, tile settings for its VAE
TILE_CASES = {
    "unet3d": ((32, 32, 2), "unipc", dict(tile_sample_min_size=16, tile_latent_min_size=8)),
    "wan": ((32, 32, 5), "unipc", dict(tile_sample_min_height=16, tile_sample_min_width=16,
                                         tile_sample_stride_height=8, tile_sample_stride_width=8)),
    "ltx": ((64, 64, 9), "flow_euler", dict(tile_sample_min_height=32, tile_sample_min_width=32,
                                            tile_sample_stride_height=16, tile_sample_stride_width=16)),
    "cogvideox": ((32, 32, 9), "ddim", dict(tile_sample_min_height=16, tile_sample_min_width=16,
                                            tile_latent_min_height=8, tile_latent_min_width=8,
                                            tile_overlap_factor_height=0.5, tile_overlap_factor_width=0.5)),
}


def _tile_request(family: str, **over) -> RenderRequest:
    (w, h, f), sampler, _ = TILE_CASES[family]
    return RenderRequest(**{**dict(prompt="a fox", seed=3, num_steps=2, width=w, height=h, num_frames=f, fps=8,
                                   sampler=sampler), **over})


@pytest.mark.parametrize("family", list(TILE_CASES))
def test_a_tiled_decode_has_the_shape_of_a_whole_one_and_really_tiles(renderers, family) -> None:
    r = renderers[family]
    vae = r.family.pipe.vae
    saved = {name: getattr(vae, name) for name in TILE_CASES[family][2]}
    try:
        _tiled_vs_whole(r, family)
    finally:
        r.vae_tiling = "auto"
        for name, value in saved.items():
            setattr(vae, name, value)


def _tiled_vs_whole(r: Renderer, family: str) -> None:
    r.vae_tiling = "off"
    for name, value in TILE_CASES[family][2].items():
        setattr(r.family.pipe.vae, name, value)
    req = _tile_request(family)
    state = r.start(req)
    while not state.done:
        state = r.step(state)
    whole = r.finish(state)
    r.vae_tiling = "on"
    tiled = r.finish(state)
    assert r.family.pipe.vae.use_tiling and r.family.pipe.vae.use_slicing
    assert tiled.shape == whole.shape == (req.num_frames, req.height, req.width, 3)
    assert not np.array_equal(tiled, whole)  # the seams blend: the tiled path ran
    r.vae_tiling = "off"
    assert np.array_equal(r.finish(state), whole) and not r.family.pipe.vae.use_tiling


def test_auto_tiles_above_the_size_and_the_choice_is_in_the_fingerprint(renderers, model_dirs) -> None:
    r = renderers["wan"]
    try:
        r.vae_tiling, r.tile_above_voxels = "auto", 32 * 32 * 5
        small, long = _tile_request("wan"), _tile_request("wan", num_frames=9)
        assert not r.tiled(small) and r.tiled(long)
        auto_small, auto_long = r.fingerprint(small), r.fingerprint(long)
        r.vae_tiling = "off"
        # a checkpoint of a tiled render is not resumed into a whole decode, nor the other way round; an
        # untiled render keeps the fingerprint it always had
        assert r.fingerprint(long) != auto_long and r.fingerprint(small) == auto_small
    finally:
        r.vae_tiling, r.tile_above_voxels = "auto", None
    with pytest.raises(ValueError, match="vae_tiling"):
        Renderer(model_dirs["wan"], vae_tiling="sometimes")


def test_the_worker_holds_a_job_to_its_registry_entry(renderers) -> None:
    entry = parse({"models": {"tiny-wan": {"directory": "/m", "family": "wan", "sizes": ["16x16"],
                                           "frames": {"min": 5, "max": 9, "step": 4},
                                           "steps": {"max": 10}}}}).models["tiny-wan"]
    r = renderers["wan"]
    r.check(_tile_request("wan", width=16, height=16, num_frames=13))  # the family alone takes 13 frames
    r.limits = entry
    try:
        r.check(_tile_request("wan", width=16, height=16, num_frames=9))
        with pytest.raises(ValueError, match="frames 4n\\+1 from 5 to 9; the job asks for 13"):
            r.check(_tile_request("wan", width=16, height=16, num_frames=13))
        with pytest.raises(ValueError, match="resolutions 16x16"):
            r.check(_tile_request("wan", num_frames=9))
        with pytest.raises(ValueError, match="num_steps from 1 to 10"):
            r.check(_tile_request("wan", width=16, height=16, num_frames=9, num_steps=11))
    finally:
        r.limits = None
