"""Resume in half precision: Wan and LTX-Video keep float32 latents under a bf16/fp16 model, so a resume must
give back the latents in the checkpoint's own dtype. Casting them to the model's dtype rounded them: on an H100
(bench/family_bench.py) and here on a CPU in bfloat16 the resumed render then ended on other latents, while the
float32 tests in test_worker_families.py could not see it."""

from __future__ import annotations

import pytest
import torch

from spotreel.worker.checkpoints import decode, encode
from spotreel.worker.hf_logging import quietly
from spotreel.worker.render_loop import Renderer, RenderRequest

pytestmark = pytest.mark.unit

# family -> (width, height, frames) of its tiny build, a sampler, and the latents' dtype under a bf16 model
CASES = {"wan": ((16, 16, 5), "unipc", torch.float32), "ltx": ((32, 32, 9), "flow_euler", torch.float32),
         "cogvideox": ((16, 16, 9), "dpmpp", torch.bfloat16)}


@pytest.mark.parametrize("family", sorted(CASES))
def test_resume_in_bfloat16_is_bit_identical(settings, family):
    from spotreel.worker.model_tiny import ensure_tiny_model

    (w, h, f), sampler, latents_dtype = CASES[family]
    r = quietly(lambda: Renderer(ensure_tiny_model(settings.cache_dir, family=family), dtype=torch.bfloat16))
    req = RenderRequest(prompt="a red fox running in the snow", negative_prompt="blurry", seed=7, num_steps=4,
                        width=w, height=h, num_frames=f, fps=8, sampler=sampler, guidance_scale=3.0)
    state, blob = r.start(req), b""
    while not state.done:
        if state.step == 2:
            blob = encode(r.snapshot(state))
        state = r.step(state)
    assert state.latents.dtype == latents_dtype
    resumed = r.resume(req, decode(blob))
    assert resumed.latents.dtype == latents_dtype
    while not resumed.done:
        resumed = r.step(resumed)
    assert torch.equal(resumed.latents, state.latents), f"{family}: a bf16 resume at step 2 diverged"
