"""The family interface and what families share (scheduler construction, frames to uint8)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch


class Family:
    """One kind of pipeline split into steps. `cond` is whatever the step needs from the prompt (embeddings,
    masks, rotary tables); `extra` is loop state a scheduler keeps outside itself (CogVideoX DPM's previous
    x0) and goes into checkpoints with the latents. Subclasses set `name`, `samplers` (sampler name ->
    scheduler class name in diffusers) and `default_sampler`, and implement the methods below."""

    name = ""
    samplers: dict[str, str] = {}
    default_sampler = ""

    def __init__(self, pipe, device: torch.device, dtype: torch.dtype) -> None:
        self.pipe, self.device, self.dtype = pipe, device, dtype
        self.scheduler_config = dict(pipe.scheduler.config)

    def modules(self) -> list[torch.nn.Module]:
        return [m for m in self.pipe.components.values() if isinstance(m, torch.nn.Module)]

    # -- to implement --------------------------------------------------------------------------------------

    def check(self, req) -> None:
        """ValueError when this model cannot render `req` (sizes, frame count, sampler)."""
        self.check_sampler(req)

    def encode(self, req) -> dict[str, Any]:
        raise NotImplementedError

    fps_changes_frames = False  # True where the frame rate conditions the model (LTX's rope scaling)
    # True for an image-to-video pipeline: every job brings an image (`latents(..., image=)`), none without.
    takes_image = False

    def latents(self, req, generator: torch.Generator, scheduler, image=None) -> torch.Tensor:
        """The starting latents; `image` (a PIL image) for a family that `takes_image`."""
        raise NotImplementedError

    def denoise(self, req, i: int, scheduler, latents: torch.Tensor, cond: dict[str, Any],
                extra: dict[str, torch.Tensor | None], generator: torch.Generator
                ) -> tuple[torch.Tensor, dict[str, torch.Tensor | None]]:
        raise NotImplementedError

    def decode(self, req, latents: torch.Tensor) -> np.ndarray:
        raise NotImplementedError

    def initial_extra(self) -> dict[str, torch.Tensor | None]:
        return {}

    # -- shared --------------------------------------------------------------------------------------------

    def check_sampler(self, req) -> None:
        if req.sampler not in self.samplers:
            raise ValueError(f"sampler {req.sampler!r} is not one of this {self.name} model's exact-resume "
                             f"samplers {sorted(self.samplers)}")

    def scheduler(self, req):
        """A fresh scheduler for `req` with its timesteps set, as the stock pipeline's __call__ sets them."""
        import diffusers

        cls = getattr(diffusers, self.samplers[req.sampler])
        with warnings.catch_warnings():
            # diffusers' sigma tables trip numpy 2's __array__ copy notice; the values are unaffected.
            warnings.simplefilter("ignore", DeprecationWarning)
            scheduler = cls.from_config(self.scheduler_config)
            self.set_timesteps(scheduler, req)
        if hasattr(scheduler, "set_begin_index"):
            scheduler.set_begin_index(0)
        return scheduler

    def set_timesteps(self, scheduler, req) -> None:
        scheduler.set_timesteps(req.num_steps, device=self.device)


def video_to_uint8(video: torch.Tensor) -> np.ndarray:
    """(B, C, T, H, W) in [-1, 1] -> uint8 (T, H, W, 3) of the first video."""
    frames = (video[0].float() / 2 + 0.5).clamp(0, 1).permute(1, 2, 3, 0)
    return (frames * 255).round().to(torch.uint8).cpu().numpy()
