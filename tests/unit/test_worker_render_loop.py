"""The render loop on the tiny model: faithful to diffusers, deterministic, and resumable in memory.

The S3 round trip of the same resume lives in tests/integration/test_worker_checkpoints.py.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch

from spotreel.worker.checkpoints import CheckpointMismatch, decode, encode
from spotreel.worker.render_loop import Renderer, RenderRequest

pytestmark = pytest.mark.unit

SAMPLERS = ["ddim", "euler_a"]


def request(**over) -> RenderRequest:
    base = dict(prompt="a red fox running in the snow", seed=11, num_steps=8, width=32, height=32,
                num_frames=4, fps=8, sampler="ddim")
    base.update(over)
    return RenderRequest(**base)


@pytest.fixture(scope="module")
def renderer(tiny_model_dir: Path) -> Renderer:
    return Renderer(tiny_model_dir)


def run(r: Renderer, req: RenderRequest):
    state = r.start(req)
    while not state.done:
        state = r.step(state)
    return state


@pytest.mark.parametrize("sampler", SAMPLERS)
@pytest.mark.parametrize("guidance", [1.0, 3.0])
def test_own_loop_matches_the_stock_diffusers_pipeline(renderer: Renderer, tiny_model_dir: Path,
                                                       sampler: str, guidance: float) -> None:
    from diffusers import DiffusionPipeline, EulerAncestralDiscreteScheduler

    from spotreel.worker.hf_logging import quietly

    req = request(sampler=sampler, guidance_scale=guidance)
    ours = run(renderer, req).latents
    pipe = quietly(lambda: DiffusionPipeline.from_pretrained(tiny_model_dir))
    pipe.set_progress_bar_config(disable=True)
    if sampler == "euler_a":
        pipe.scheduler = EulerAncestralDiscreteScheduler.from_config(pipe.scheduler.config)
    stock = pipe(prompt=req.prompt, num_inference_steps=req.num_steps, height=req.height, width=req.width,
                 num_frames=req.num_frames, guidance_scale=guidance, output_type="latent",
                 generator=torch.Generator().manual_seed(req.seed)).frames
    assert torch.equal(ours, stock)


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_in_memory_resume_at_a_random_step_is_bit_identical(renderer: Renderer, sampler: str) -> None:
    req = request(sampler=sampler, seed=random.randrange(2**32))
    k = random.randrange(0, req.num_steps + 1)
    state = renderer.start(req)
    blob = None
    while True:
        if state.step == k:
            blob = encode(renderer.snapshot(state))
        if state.done:
            break
        state = renderer.step(state)
    expected = renderer.finish(state)
    resumed = renderer.resume(req, decode(blob))
    assert resumed.step == k and resumed.progress == k / req.num_steps
    while not resumed.done:
        resumed = renderer.step(resumed)
    assert np.array_equal(renderer.finish(resumed), expected), f"resume from step {k} diverged ({req})"


def test_frames_are_uint8_video_of_the_requested_shape(renderer: Renderer) -> None:
    frames = renderer.finish(run(renderer, request(num_frames=3, width=48, height=32, num_steps=2)))
    assert frames.dtype == np.uint8 and frames.shape == (3, 32, 48, 3)
    assert frames.std() > 0  # random weights still draw something, not a blank frame


def test_same_request_same_frames_other_seed_other_frames(renderer: Renderer) -> None:
    a = renderer.finish(run(renderer, request(num_steps=3)))
    b = renderer.finish(run(renderer, request(num_steps=3)))
    c = renderer.finish(run(renderer, request(num_steps=3, seed=12)))
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


def test_fingerprint_covers_what_changes_frames_and_not_fps(renderer: Renderer) -> None:
    base = renderer.fingerprint(request())
    assert renderer.fingerprint(request(fps=24)) == base
    for change in (dict(prompt="x"), dict(seed=1), dict(num_steps=9), dict(width=64), dict(height=64),
                   dict(num_frames=5), dict(sampler="euler_a"), dict(guidance_scale=2.0)):
        assert renderer.fingerprint(request(**change)) != base, change


def test_resume_with_another_request_is_a_mismatch(renderer: Renderer) -> None:
    state = renderer.step(renderer.start(request()))
    ckpt = renderer.snapshot(state)
    with pytest.raises(CheckpointMismatch):
        renderer.resume(request(seed=99), ckpt)
    with pytest.raises(CheckpointMismatch):
        renderer.resume(request(sampler="euler_a"), ckpt)


def test_stepping_past_the_end_is_refused(renderer: Renderer) -> None:
    state = run(renderer, request(num_steps=1))
    assert state.done and state.progress == 1.0
    with pytest.raises(ValueError, match="already finished"):
        renderer.step(state)


def test_sizes_the_model_cannot_take_are_refused(renderer: Renderer) -> None:
    with pytest.raises(ValueError, match="multiples of 4"):
        renderer.start(request(width=30))


def test_a_directory_without_a_model_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="model_index.json"):
        Renderer(tmp_path)


@pytest.mark.parametrize("over, match", [
    (dict(num_steps=0), "num_steps"), (dict(width=-1), "width"), (dict(fps=True), "fps"),
    (dict(sampler="plms"), "sampler"), (dict(guidance_scale=0.5), "guidance_scale"), (dict(seed=-1), "seed"),
    (dict(prompt=None), "prompt"),
])
def test_bad_requests_are_refused(over: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        request(**over)


def test_request_from_job_settings() -> None:
    req = RenderRequest.from_job(prompt="p", seed=1, num_steps=4, resolution="64x32", duration_s=1.5, fps=8)
    assert (req.width, req.height, req.num_frames, req.fps) == (64, 32, 12, 8)
    with pytest.raises(ValueError, match="resolution"):
        RenderRequest.from_job(prompt="p", seed=1, num_steps=4, resolution="64by32", duration_s=1, fps=8)
    with pytest.raises(ValueError, match="duration"):
        RenderRequest.from_job(prompt="p", seed=1, num_steps=4, resolution="64x32", duration_s=0, fps=8)


def test_cpu_thread_count_is_part_of_the_fingerprint_and_is_pinned(renderer: Renderer,
                                                                   tiny_model_dir: Path) -> None:
    """1 and 2 torch threads give different bits on a CPU, so a checkpoint must not cross thread counts."""
    before = torch.get_num_threads()
    other = 2 if before == 1 else 1
    state = renderer.start(request(num_steps=2))
    torch.set_num_threads(other)
    try:
        with pytest.raises(RuntimeError, match="threads changed"):
            renderer.step(state)
        elsewhere = Renderer(tiny_model_dir)
        assert elsewhere.numerics["threads"] == other
        assert elsewhere.fingerprint(request()) != renderer.fingerprint(request())
        with pytest.raises(CheckpointMismatch):
            elsewhere.resume(request(num_steps=2), renderer.snapshot(state))
    finally:
        torch.set_num_threads(before)
    assert renderer.step(state).step == 1
