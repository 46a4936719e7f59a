"""The LTX-Video image-to-video family on its tiny random-weight build (LTXImageToVideoPipeline): the worker's
own step loop equals the stock pipeline bit for bit for the same image, a resume mid-render from a checkpoint
(through the real encoder) finishes bit-identical without the image, the image's hash is in the fingerprint,
and a request whose image and model disagree is refused."""

from __future__ import annotations

import hashlib
import io

import numpy as np
import pytest
import torch

from spotreel.worker.checkpoints import decode, encode
from spotreel.worker.hf_logging import quietly
from spotreel.worker.render_loop import Renderer, RenderRequest, decode_image

pytestmark = pytest.mark.unit


def png(width: int = 40, height: int = 24, shade: int = 0) -> bytes:
    from PIL import Image

    x = np.linspace(0, 255, width, dtype=np.float32)[None, :, None]
    y = np.linspace(0, 255, height, dtype=np.float32)[:, None, None]
    rgb = np.concatenate([np.broadcast_to(x, (height, width, 1)), np.broadcast_to(y, (height, width, 1)),
                          np.full((height, width, 1), shade, np.float32)], axis=2).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(rgb).save(out, format="PNG")
    return out.getvalue()


IMAGE = png()
OTHER = png(shade=200)


@pytest.fixture(scope="module")
def model_dir(settings):
    from spotreel.worker.model_tiny import ensure_tiny_model

    return ensure_tiny_model(settings.cache_dir, family="ltx-i2v")


@pytest.fixture(scope="module")
def renderer(model_dir) -> Renderer:
    return quietly(lambda: Renderer(model_dir))


@pytest.fixture(scope="module")
def t2v() -> Renderer:
    from spotreel.worker.model_tiny import ensure_tiny_model
    from spotreel.config.settings import Settings

    return quietly(lambda: Renderer(ensure_tiny_model(Settings().cache_dir, family="ltx")))


def request(image: bytes = IMAGE, **over) -> RenderRequest:
    base = dict(prompt="a red fox running in the snow", seed=7, num_steps=5, width=32, height=32, num_frames=9,
                fps=8, sampler="flow_euler", image_sha256=hashlib.sha256(image).hexdigest())
    base.update(over)
    return RenderRequest(**base)


def run(r: Renderer, req: RenderRequest, image: bytes = IMAGE):
    state = r.start(req, image)
    while not state.done:
        state = r.step(state)
    return state


@pytest.mark.parametrize("guidance,negative", [(1.0, ""), (4.0, "blurry dark")])
def test_image_loop_matches_the_stock_pipeline(renderer, model_dir, guidance, negative):
    from diffusers import DiffusionPipeline

    req = request(guidance_scale=guidance, negative_prompt=negative)
    ours = run(renderer, req).latents
    pipe = quietly(lambda: DiffusionPipeline.from_pretrained(model_dir))
    pipe.set_progress_bar_config(disable=True)
    assert type(pipe).__name__ == "LTXImageToVideoPipeline"
    stock = pipe(image=decode_image(IMAGE), prompt=req.prompt, negative_prompt=negative or None,
                 num_inference_steps=req.num_steps, height=req.height, width=req.width, num_frames=req.num_frames,
                 guidance_scale=guidance, frame_rate=req.fps, output_type="latent",
                 generator=torch.Generator().manual_seed(req.seed)).frames
    assert ours.shape == stock.shape
    assert torch.equal(ours, stock)


def test_the_image_conditions_the_video(renderer):
    a = renderer.finish(run(renderer, request()))
    b = renderer.finish(run(renderer, request(OTHER), OTHER))
    assert a.shape == (9, 32, 32, 3)
    assert not np.array_equal(a, b)
    assert renderer.fingerprint(request()) != renderer.fingerprint(request(OTHER))


def test_resume_mid_render_is_bit_identical_without_the_image(renderer):
    req = request(guidance_scale=3.0, num_steps=6)
    state, blob = renderer.start(req, IMAGE), None
    while not state.done:
        if state.step == 3:
            blob = encode(renderer.snapshot(state))
        state = renderer.step(state)
    resumed = renderer.resume(req, decode(blob))
    assert resumed.step == 3
    while not resumed.done:
        resumed = renderer.step(resumed)
    assert torch.equal(resumed.latents, state.latents)
    assert np.array_equal(renderer.finish(resumed), renderer.finish(state))


def test_image_and_model_must_agree(renderer, t2v):
    with pytest.raises(ValueError, match="needs an input image"):
        renderer.check(request(image_sha256=""))
    with pytest.raises(ValueError, match="takes no input image"):
        t2v.check(request())
    with pytest.raises(ValueError, match="does not have the request's sha256"):
        renderer.start(request(), OTHER)
    with pytest.raises(ValueError, match="does not decode"):
        junk = b"\x89PNG\r\n\x1a\nnot really"
        renderer.start(request(junk), junk)


def test_a_text_request_fingerprints_without_the_image_field():
    assert "image_sha256" not in request(image_sha256="").frame_settings()
    assert request().frame_settings()["image_sha256"] == hashlib.sha256(IMAGE).hexdigest()
