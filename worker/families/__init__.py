"""Model families: one small interface per kind of text-to-video pipeline, so the worker owns every loop.

A family wraps a pipeline loaded by `DiffusionPipeline.from_pretrained` and splits its `__call__` into the
pieces the worker needs to stop and resume anywhere: encode the prompt, prepare the starting latents, run
one denoising step (model, guidance, scheduler.step), decode. Each module mirrors its stock pipeline line
for line, and a unit test per family checks the latents equal the stock pipeline's bit for bit.
"""

from __future__ import annotations

from spotreel.worker.families.base import Family

# diffusers pipeline class (model_index.json's _class_name) -> family module and class
_BY_PIPELINE = {
    "TextToVideoSDPipeline": ("unet3d", "UNet3DFamily"),
    "WanPipeline": ("wan", "WanFamily"),
    "LTXPipeline": ("ltx", "LTXFamily"),
    "LTXImageToVideoPipeline": ("ltx", "LTXImageFamily"),
    "CogVideoXPipeline": ("cogvideox", "CogVideoXFamily"),
}
FAMILIES = ("unet3d", "wan", "ltx", "cogvideox")


def family_for(pipe, device, dtype) -> Family:
    import importlib

    name = type(pipe).__name__
    if name not in _BY_PIPELINE:
        raise ValueError(f"model pipeline {name} is not served by this worker; families served: "
                         f"{', '.join(f'{f} ({p})' for p, (f, _) in _BY_PIPELINE.items())}")
    module, cls = _BY_PIPELINE[name]
    return getattr(importlib.import_module(f"spotreel.worker.families.{module}"), cls)(pipe, device, dtype)


__all__ = ["FAMILIES", "Family", "family_for"]
