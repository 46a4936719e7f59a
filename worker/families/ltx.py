"""The LTX-Video family (diffusers' LTXPipeline, T5 text encoder).

Mirrors LTXPipeline.__call__: T5 embeddings and masks (negative in front under guidance), packed float32
latents (B, tokens, C) from our CPU generator, flow-matching Euler sigmas linspace(1, 1/N) shifted by the
video's token count (mu), the transformer on both halves in one batch with rope scaling from the frame rate
(so fps changes the frames here: it is part of this family's fingerprint), then scheduler.step. Frames must
be 8n+1 and sizes multiples of 32 at full scale (read from the model's VAE). The decode supports VAEs
without timestep conditioning only (LTX-Video 0.9.0); 0.9.1+ decode with noise from the generator and are
refused at load.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from spotreel.worker.families.base import Family, video_to_uint8

MAX_SEQUENCE_LENGTH = 128  # LTXPipeline's default


class LTXFamily(Family):
    name = "ltx"
    samplers = {"flow_euler": "FlowMatchEulerDiscreteScheduler"}
    default_sampler = "flow_euler"
    fps_changes_frames = True

    def __init__(self, pipe, device, dtype) -> None:
        super().__init__(pipe, device, dtype)
        if pipe.vae.config.timestep_conditioning:
            raise ValueError("LTX-Video VAEs with timestep conditioning (0.9.1+) are not served yet")
        self.spatial = pipe.vae_spatial_compression_ratio
        self.temporal = pipe.vae_temporal_compression_ratio

    def check(self, req) -> None:
        super().check(req)
        if req.height % self.spatial or req.width % self.spatial:
            raise ValueError(f"width and height must be multiples of {self.spatial} for this model, "
                             f"got {req.width}x{req.height}")
        if (req.num_frames - 1) % self.temporal:
            raise ValueError(f"frames must be {self.temporal}n+1 for this model, got {req.num_frames}")

    def _shape(self, req) -> tuple[int, int, int]:
        return ((req.num_frames - 1) // self.temporal + 1, req.height // self.spatial, req.width // self.spatial)

    def set_timesteps(self, scheduler, req) -> None:
        from diffusers.pipelines.ltx.pipeline_ltx import calculate_shift

        f, h, w = self._shape(req)
        c = scheduler.config
        mu = calculate_shift(f * h * w, c.get("base_image_seq_len", 256), c.get("max_image_seq_len", 4096),
                             c.get("base_shift", 0.5), c.get("max_shift", 1.15))
        sigmas = np.linspace(1.0, 1 / req.num_steps, req.num_steps)
        scheduler.set_timesteps(sigmas=sigmas, device=self.device, mu=mu)

    @torch.no_grad()
    def encode(self, req) -> dict[str, Any]:
        guided = req.guidance_scale > 1.0
        embeds, mask, neg, neg_mask = self.pipe.encode_prompt(
            prompt=req.prompt, negative_prompt=req.negative_prompt or None, do_classifier_free_guidance=guided,
            num_videos_per_prompt=1, max_sequence_length=MAX_SEQUENCE_LENGTH, device=self.device)
        if guided:
            embeds, mask = torch.cat([neg, embeds], dim=0), torch.cat([neg_mask, mask], dim=0)
        return {"embeds": embeds, "mask": mask}

    def latents(self, req, generator, scheduler, image=None) -> torch.Tensor:
        return self.pipe.prepare_latents(1, self.pipe.transformer.config.in_channels, req.height, req.width,
                                         req.num_frames, torch.float32, self.device, generator, None)

    @torch.no_grad()
    def denoise(self, req, i, scheduler, latents, cond, extra, generator):
        t = scheduler.timesteps[i]
        guided = req.guidance_scale > 1.0
        model_in = (torch.cat([latents] * 2) if guided else latents).to(cond["embeds"].dtype)
        f, h, w = self._shape(req)
        rope = (self.temporal / req.fps, self.spatial, self.spatial)
        transformer = self.pipe.transformer
        with transformer.cache_context("cond_uncond"):
            noise = transformer(hidden_states=model_in, encoder_hidden_states=cond["embeds"],
                                timestep=t.expand(model_in.shape[0]), encoder_attention_mask=cond["mask"],
                                num_frames=f, height=h, width=w, rope_interpolation_scale=rope,
                                return_dict=False)[0]
        noise = noise.float()
        if guided:
            uncond, text = noise.chunk(2)
            noise = uncond + req.guidance_scale * (text - uncond)
        return scheduler.step(noise, t, latents, return_dict=False)[0], extra

    @torch.no_grad()
    def decode(self, req, latents) -> np.ndarray:
        pipe, vae = self.pipe, self.pipe.vae
        f, h, w = self._shape(req)
        latents = pipe._unpack_latents(latents, f, h, w, pipe.transformer_spatial_patch_size,
                                       pipe.transformer_temporal_patch_size)
        latents = pipe._denormalize_latents(latents, vae.latents_mean, vae.latents_std, vae.config.scaling_factor)
        latents = latents.to(self.dtype).to(vae.dtype)
        return video_to_uint8(vae.decode(latents, None, return_dict=False)[0])


class LTXImageFamily(LTXFamily):
    """LTX-Video image-to-video (diffusers' LTXImageToVideoPipeline): the job's image, resized to the video's
    size and encoded by the VAE (a sample drawn from our generator, as the stock pipeline draws it), is the
    first latent frame; a conditioning mask keeps that frame out of the denoising (its tokens get timestep 0
    and the scheduler steps only the frames after it). The first frame travels in the latents, so a resume
    needs the image's hash (in the fingerprint) but not the image."""

    takes_image = True

    def _mask(self, req) -> torch.Tensor:
        f, h, w = self._shape(req)
        mask = torch.zeros((1, 1, f, h, w), device=self.device, dtype=torch.float32)
        mask[:, :, 0] = 1.0
        mask = self.pipe._pack_latents(mask, self.pipe.transformer_spatial_patch_size,
                                       self.pipe.transformer_temporal_patch_size).squeeze(-1)
        return torch.cat([mask, mask]) if req.guidance_scale > 1.0 else mask

    @torch.no_grad()
    def encode(self, req) -> dict[str, Any]:
        return {**super().encode(req), "conditioning": self._mask(req)}

    def latents(self, req, generator, scheduler, image=None) -> torch.Tensor:
        if image is None:
            raise ValueError("this image-to-video model needs the job's image")
        pixels = self.pipe.video_processor.preprocess(image, height=req.height, width=req.width)
        pixels = pixels.to(device=self.device, dtype=self.pipe.text_encoder.dtype)
        latents, _ = self.pipe.prepare_latents(pixels, 1, self.pipe.transformer.config.in_channels, req.height,
                                               req.width, req.num_frames, torch.float32, self.device, generator,
                                               None)
        return latents

    @torch.no_grad()
    def denoise(self, req, i, scheduler, latents, cond, extra, generator):
        pipe = self.pipe
        t = scheduler.timesteps[i]
        guided = req.guidance_scale > 1.0
        model_in = (torch.cat([latents] * 2) if guided else latents).to(cond["embeds"].dtype)
        f, h, w = self._shape(req)
        rope = (self.temporal / req.fps, self.spatial, self.spatial)
        timestep = t.expand(model_in.shape[0]).unsqueeze(-1) * (1 - cond["conditioning"])
        with pipe.transformer.cache_context("cond_uncond"):
            noise = pipe.transformer(hidden_states=model_in, encoder_hidden_states=cond["embeds"],
                                     timestep=timestep, encoder_attention_mask=cond["mask"], num_frames=f,
                                     height=h, width=w, rope_interpolation_scale=rope, return_dict=False)[0]
        noise = noise.float()
        if guided:
            uncond, text = noise.chunk(2)
            noise = uncond + req.guidance_scale * (text - uncond)
        ps, pt = pipe.transformer_spatial_patch_size, pipe.transformer_temporal_patch_size
        noise = pipe._unpack_latents(noise, f, h, w, ps, pt)
        latents = pipe._unpack_latents(latents, f, h, w, ps, pt)
        stepped = scheduler.step(noise[:, :, 1:], t, latents[:, :, 1:], return_dict=False)[0]
        return pipe._pack_latents(torch.cat([latents[:, :, :1], stepped], dim=2), ps, pt), extra
