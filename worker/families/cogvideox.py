"""The CogVideoX family (diffusers' CogVideoXPipeline, T5 text encoder): CogVideoX-2b/5b.

Mirrors CogVideoXPipeline.__call__: T5 embeddings (negative in front under guidance) padded to the
transformer's text length, latents (B, F', C, H/8, W/8) in the embeddings' dtype times init_noise_sigma,
per step scale_model_input → transformer on both halves → guidance → scheduler.step with our generator.
CogVideoX's DPM scheduler hands back the previous x0, which the next step needs: it is loop state kept in
`extra` and checkpointed with the latents. Dynamic CFG (use_dynamic_cfg) is not offered.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from spotreel.worker.families.base import Family, video_to_uint8


class CogVideoXFamily(Family):
    name = "cogvideox"
    samplers = {"ddim": "CogVideoXDDIMScheduler", "dpmpp": "CogVideoXDPMScheduler"}
    default_sampler = "ddim"

    def __init__(self, pipe, device, dtype) -> None:
        super().__init__(pipe, device, dtype)
        self.spatial = pipe.vae_scale_factor_spatial
        self.temporal = pipe.vae_scale_factor_temporal
        cfg = pipe.transformer.config
        self.multiple = self.spatial * cfg.patch_size
        self.max_sequence_length = cfg.max_text_seq_length

    def check(self, req) -> None:
        super().check(req)
        if req.height % self.multiple or req.width % self.multiple:
            raise ValueError(f"width and height must be multiples of {self.multiple} for this model, "
                             f"got {req.width}x{req.height}")
        if (req.num_frames - 1) % self.temporal:
            raise ValueError(f"frames must be {self.temporal}n+1 for this model, got {req.num_frames}")

    def _frames(self, req) -> tuple[int, int]:
        """(frames handed to prepare_latents, latent frames padded in front for patch_size_t)."""
        num_frames = req.num_frames
        latent_frames = (num_frames - 1) // self.temporal + 1
        pt = self.pipe.transformer.config.patch_size_t
        additional = 0
        if pt is not None and latent_frames % pt != 0:
            additional = pt - latent_frames % pt
            num_frames += additional * self.temporal
        return num_frames, additional

    @torch.no_grad()
    def encode(self, req) -> dict[str, Any]:
        guided = req.guidance_scale > 1.0
        embeds, neg = self.pipe.encode_prompt(req.prompt, req.negative_prompt or None, guided,
                                              num_videos_per_prompt=1,
                                              max_sequence_length=self.max_sequence_length, device=self.device)
        if guided:
            embeds = torch.cat([neg, embeds], dim=0)
        rotary = None
        if self.pipe.transformer.config.use_rotary_positional_embeddings:
            latent_frames = (self._frames(req)[0] - 1) // self.temporal + 1
            rotary = self.pipe._prepare_rotary_positional_embeddings(req.height, req.width, latent_frames,
                                                                     self.device)
        return {"embeds": embeds, "rotary": rotary}

    def latents(self, req, generator, scheduler, image=None) -> torch.Tensor:
        frames, _ = self._frames(req)
        # prepare_latents scales by the pipeline's own scheduler's init_noise_sigma (1.0 for both samplers)
        return self.pipe.prepare_latents(1, self.pipe.transformer.config.in_channels, frames, req.height,
                                         req.width, self.dtype, self.device, generator, None)

    def initial_extra(self):
        return {"old_pred_original_sample": None}

    @torch.no_grad()
    def denoise(self, req, i, scheduler, latents, cond, extra, generator):
        from diffusers import CogVideoXDPMScheduler

        t = scheduler.timesteps[i]
        guided = req.guidance_scale > 1.0
        model_in = scheduler.scale_model_input(torch.cat([latents] * 2) if guided else latents, t)
        transformer = self.pipe.transformer
        with transformer.cache_context("cond_uncond"):
            noise = transformer(hidden_states=model_in, encoder_hidden_states=cond["embeds"],
                                timestep=t.expand(model_in.shape[0]), image_rotary_emb=cond["rotary"],
                                return_dict=False)[0]
        noise = noise.float()
        if guided:
            uncond, text = noise.chunk(2)
            noise = uncond + req.guidance_scale * (text - uncond)
        kwargs = _step_kwargs(scheduler, generator)
        if not isinstance(scheduler, CogVideoXDPMScheduler):
            latents = scheduler.step(noise, t, latents, **kwargs, return_dict=False)[0]
        else:
            prev_t = scheduler.timesteps[i - 1] if i > 0 else None
            latents, old = scheduler.step(noise, extra["old_pred_original_sample"], t, prev_t, latents, **kwargs,
                                          return_dict=False)
            extra = {"old_pred_original_sample": old}
        return latents.to(self.dtype), extra

    @torch.no_grad()
    def decode(self, req, latents) -> np.ndarray:
        _, additional = self._frames(req)
        return video_to_uint8(self.pipe.decode_latents(latents[:, additional:]))


def _step_kwargs(scheduler, generator) -> dict[str, Any]:
    """CogVideoXPipeline.prepare_extra_step_kwargs with eta 0.0, asked of the scheduler we step."""
    import inspect

    params = inspect.signature(scheduler.step).parameters
    kwargs: dict[str, Any] = {}
    if "eta" in params:
        kwargs["eta"] = 0.0
    if "generator" in params:
        kwargs["generator"] = generator
    return kwargs
