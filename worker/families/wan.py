"""The Wan family: Wan 2.1 text-to-video (diffusers' WanPipeline, UMT5 text encoder), and Wan 2.2's two
experts (a second transformer below the boundary timestep) where the directory has `transformer_2`.

Mirrors WanPipeline.__call__: UMT5 embeddings trimmed to the prompt and zero-padded to 512 tokens, float32
latents (B, 16, (F-1)/4+1, H/8, W/8) drawn from our CPU generator, per step the transformer on the
conditional and (under guidance) the negative embeddings in two calls, then scheduler.step — UniPC or
DPM++ on flow-matching sigmas, neither draws noise. Frames must be 4n+1 and sizes multiples of 16 (VAE ×8,
patch 2) at full scale; the family reads both factors from the model's configs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from spotreel.worker.families.base import Family, video_to_uint8

MAX_SEQUENCE_LENGTH = 512  # WanPipeline's default


class WanFamily(Family):
    name = "wan"
    samplers = {"unipc": "UniPCMultistepScheduler", "dpmpp": "DPMSolverMultistepScheduler"}
    default_sampler = "unipc"

    def __init__(self, pipe, device, dtype) -> None:
        super().__init__(pipe, device, dtype)
        first = pipe.transformer if pipe.transformer is not None else pipe.transformer_2
        self.transformer_dtype = first.dtype
        self.in_channels = first.config.in_channels
        patch = first.config.patch_size
        self.multiple_h = pipe.vae_scale_factor_spatial * patch[1]
        self.multiple_w = pipe.vae_scale_factor_spatial * patch[2]
        self.temporal = pipe.vae_scale_factor_temporal

    def check(self, req) -> None:
        super().check(req)
        if req.height % self.multiple_h or req.width % self.multiple_w:
            raise ValueError(f"width and height must be multiples of {self.multiple_w} and {self.multiple_h} "
                             f"for this model, got {req.width}x{req.height}")
        if (req.num_frames - 1) % self.temporal:
            raise ValueError(f"frames must be {self.temporal}n+1 for this model, got {req.num_frames}")

    @torch.no_grad()
    def encode(self, req) -> dict[str, Any]:
        embeds, negative = self.pipe.encode_prompt(
            prompt=req.prompt, negative_prompt=req.negative_prompt or None,
            do_classifier_free_guidance=req.guidance_scale > 1.0, num_videos_per_prompt=1,
            max_sequence_length=MAX_SEQUENCE_LENGTH, device=self.device)
        return {"embeds": embeds.to(self.transformer_dtype),
                "negative": None if negative is None else negative.to(self.transformer_dtype)}

    def latents(self, req, generator, scheduler, image=None) -> torch.Tensor:
        return self.pipe.prepare_latents(1, self.in_channels, req.height, req.width, req.num_frames,
                                         torch.float32, self.device, generator, None)

    @torch.no_grad()
    def denoise(self, req, i, scheduler, latents, cond, extra, generator):
        pipe = self.pipe
        t = scheduler.timesteps[i]
        boundary = pipe.config.boundary_ratio
        model = pipe.transformer
        guidance = req.guidance_scale
        if boundary is not None and t < boundary * scheduler.config.num_train_timesteps:
            model = pipe.transformer_2  # Wan 2.2 low-noise expert (guidance_scale_2 = guidance_scale)
        model_in = latents.to(self.transformer_dtype)
        if pipe.config.expand_timesteps:
            mask = torch.ones(latents.shape, dtype=torch.float32, device=self.device)
            timestep = (mask[0][0][:, ::2, ::2] * t).flatten().unsqueeze(0).expand(latents.shape[0], -1)
        else:
            timestep = t.expand(latents.shape[0])
        with model.cache_context("cond"):
            noise = model(hidden_states=model_in, timestep=timestep, encoder_hidden_states=cond["embeds"],
                          return_dict=False)[0]
        if guidance > 1.0:
            with model.cache_context("uncond"):
                uncond = model(hidden_states=model_in, timestep=timestep, encoder_hidden_states=cond["negative"],
                               return_dict=False)[0]
            noise = uncond + guidance * (noise - uncond)
        return scheduler.step(noise, t, latents, return_dict=False)[0], extra

    @torch.no_grad()
    def decode(self, req, latents) -> np.ndarray:
        vae = self.pipe.vae
        latents = latents.to(vae.dtype)
        z = vae.config.z_dim
        mean = torch.tensor(vae.config.latents_mean).view(1, z, 1, 1, 1).to(latents.device, latents.dtype)
        std = 1.0 / torch.tensor(vae.config.latents_std).view(1, z, 1, 1, 1).to(latents.device, latents.dtype)
        return video_to_uint8(vae.decode(latents / std + mean, return_dict=False)[0])
