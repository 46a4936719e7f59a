"""The UNet3D family: ModelScope text-to-video-ms and Zeroscope (diffusers' TextToVideoSDPipeline).

The loop mirrors TextToVideoSDPipeline.__call__: CLIP embeddings (empty prompt in front under guidance),
latents drawn on the CPU generator times init_noise_sigma, and per step scale_model_input → UNet → guidance
→ scheduler.step on the frames folded into the batch, with our generator (Euler ancestral draws from it).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from spotreel.worker.families.base import Family


class UNet3DFamily(Family):
    name = "unet3d"
    samplers = {"ddim": "DDIMScheduler", "euler_a": "EulerAncestralDiscreteScheduler",
                "unipc": "UniPCMultistepScheduler", "dpmpp": "DPMSolverMultistepScheduler"}
    default_sampler = "ddim"

    def __init__(self, pipe, device, dtype) -> None:
        super().__init__(pipe, device, dtype)
        self.unet, self.vae = pipe.unet, pipe.vae
        self.vae_scale = 2 ** (len(self.vae.config.block_out_channels) - 1)
        # Each UNet down block but the last halves the latent size, so latents must divide by this.
        self.latent_multiple = 2 ** (len(self.unet.config.block_out_channels) - 1)

    def check(self, req) -> None:
        super().check(req)
        multiple = self.vae_scale * self.latent_multiple
        if req.width % multiple or req.height % multiple:
            raise ValueError(f"width and height must be multiples of {multiple} for this model, "
                             f"got {req.width}x{req.height}")

    @torch.no_grad()
    def encode(self, req) -> dict[str, Any]:
        tok, enc = self.pipe.tokenizer, self.pipe.text_encoder
        prompts = [req.negative_prompt] * (req.guidance_scale > 1.0) + [req.prompt]
        embeds = []
        for text in prompts:
            tokens = tok(text, padding="max_length", max_length=tok.model_max_length, truncation=True,
                         return_tensors="pt")
            mask = None
            if getattr(enc.config, "use_attention_mask", False):
                mask = tokens.attention_mask.to(self.device)
            embeds.append(enc(tokens.input_ids.to(self.device), attention_mask=mask)[0].to(self.dtype))
        return {"embeds": torch.cat(embeds)}

    def latents(self, req, generator: torch.Generator, scheduler, image=None) -> torch.Tensor:
        shape = (1, self.unet.config.in_channels, req.num_frames, req.height // self.vae_scale,
                 req.width // self.vae_scale)
        # Drawn on the CPU generator and moved, as diffusers' randn_tensor does.
        latents = torch.randn(shape, generator=generator, dtype=self.dtype).to(self.device)
        return latents * scheduler.init_noise_sigma

    @torch.no_grad()
    def denoise(self, req, i, scheduler, latents, cond, extra, generator):
        t = scheduler.timesteps[i]
        guided = req.guidance_scale > 1.0
        model_in = torch.cat([latents] * 2) if guided else latents
        model_in = scheduler.scale_model_input(model_in, t)
        noise = self.unet(model_in, t, encoder_hidden_states=cond["embeds"], return_dict=False)[0]
        if guided:
            uncond, text = noise.chunk(2)
            noise = uncond + req.guidance_scale * (text - uncond)
        # The scheduler works on frames as a batch of images, exactly as TextToVideoSDPipeline does.
        b, c, f, h, w = latents.shape
        flat = latents.permute(0, 2, 1, 3, 4).reshape(b * f, c, h, w)
        noise = noise.permute(0, 2, 1, 3, 4).reshape(b * f, c, h, w)
        kwargs = {"generator": generator} if _takes_generator(scheduler) else {}
        flat = scheduler.step(noise, t, flat, **kwargs).prev_sample
        return flat[None, :].reshape(b, f, c, h, w).permute(0, 2, 1, 3, 4), extra

    @torch.no_grad()
    def decode(self, req, latents) -> np.ndarray:
        latents = latents / self.vae.config.scaling_factor
        b, c, f, h, w = latents.shape
        images = self.vae.decode(latents.permute(0, 2, 1, 3, 4).reshape(b * f, c, h, w)).sample
        frames = (images.float() / 2 + 0.5).clamp(0, 1).permute(0, 2, 3, 1)
        return (frames * 255).round().to(torch.uint8).cpu().numpy()


def _takes_generator(scheduler) -> bool:
    import inspect

    return "generator" in inspect.signature(scheduler.step).parameters
