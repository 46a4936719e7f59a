"""The render loop: a diffusers text-to-video model driven one denoising step at a time.

Stock pipelines run all steps in one call and cannot start mid-way, so the worker owns the loop
(encode prompt → seeded latents → per step: scale_model_input, UNet, guidance, scheduler.step → VAE
decode). Everything that decides the next latents — latents, the scheduler's step index and timesteps,
the RNG state of our own CPU `torch.Generator` — is in the state and goes into a checkpoint, so a resume
on a fresh process continues bit for bit. The loop mirrors diffusers' TextToVideoSDPipeline, and the
same code runs a full ModelScope/zeroscope directory in fp16 on cuda.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import warnings
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from spotreel.worker.checkpoints import Checkpoint, CheckpointMismatch
from spotreel.worker.hf_logging import quietly

# Bump when the loop changes in a way that makes old checkpoints resume differently.
LOOP_VERSION = 1
SAMPLERS = ("ddim", "euler_a")
_RESOLUTION = re.compile(r"^([1-9][0-9]{0,4})x([1-9][0-9]{0,4})$")


@dataclass(frozen=True)
class RenderRequest:
    """What a job asks for; everything except `fps` decides the frames (fps only matters to the MP4)."""

    prompt: str
    seed: int
    num_steps: int
    width: int
    height: int
    num_frames: int
    fps: int
    sampler: str = "ddim"
    guidance_scale: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.prompt, str):
            raise ValueError("prompt must be a string")
        for name in ("num_steps", "width", "height", "num_frames", "fps"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not isinstance(self.seed, int) or not 0 <= self.seed < 2**63:
            raise ValueError(f"seed must be an integer in [0, 2**63), got {self.seed!r}")
        if self.sampler not in SAMPLERS:
            raise ValueError(f"sampler must be one of {SAMPLERS}, got {self.sampler!r}")
        if not self.guidance_scale >= 1.0:
            raise ValueError(f"guidance_scale must be >= 1.0, got {self.guidance_scale!r}")

    @classmethod
    def from_job(cls, *, prompt: str, seed: int, num_steps: int, resolution: str, duration_s: float, fps: int,
                 sampler: str = "ddim", guidance_scale: float = 1.0) -> "RenderRequest":
        """From a job's settings as the lease carries them: resolution "WxH", duration in seconds."""
        m = _RESOLUTION.match(resolution or "")
        if not m:
            raise ValueError(f"resolution must look like 256x256 (WIDTHxHEIGHT), got {resolution!r}")
        if not duration_s > 0:
            raise ValueError(f"duration must be positive, got {duration_s!r}")
        frames = max(1, round(duration_s * fps))
        return cls(prompt=prompt, seed=seed, num_steps=num_steps, width=int(m[1]), height=int(m[2]),
                   num_frames=frames, fps=fps, sampler=sampler, guidance_scale=guidance_scale)

    def frame_settings(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("fps")
        return d


@dataclass(frozen=True)
class RenderState:
    """One point of a render. `step` consumes it: the scheduler and generator inside move on."""

    request: RenderRequest
    step: int
    num_steps: int
    fingerprint: str
    latents: torch.Tensor
    embeds: torch.Tensor
    scheduler: Any
    generator: torch.Generator

    @property
    def done(self) -> bool:
        return self.step >= self.num_steps

    @property
    def progress(self) -> float:
        return self.step / self.num_steps


# TEST-ONLY hook, for the stuck-step tests (tests/integration/test_worker_stuck.py): "N" or "N:SECONDS" makes the
# first step this process runs from step N hang for SECONDS (for ever without). Nothing sets it outside tests.
TEST_HANG_ENV = "SPOTREEL_TEST_HANG_STEP"


def _test_hang_spec(value: str | None) -> tuple[int, float | None] | None:
    if not value:
        return None
    step, _, seconds = value.partition(":")
    return int(step), (float(seconds) if seconds else None)


class Renderer:
    """A loaded model. Build once per worker; every job runs through start/resume → step* → finish."""

    def __init__(self, model_dir: str | Path, device: str = "cpu", dtype: torch.dtype | None = None) -> None:
        from diffusers import DiffusionPipeline

        self.model_dir = Path(model_dir)
        if not (self.model_dir / "model_index.json").is_file():
            raise FileNotFoundError(f"{self.model_dir} is not a diffusers model directory (no model_index.json)")
        self.device = torch.device(device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("device 'cuda' was asked for but torch sees no CUDA device")
        self.dtype = dtype or (torch.float16 if self.device.type == "cuda" else torch.float32)
        pipe = quietly(lambda: DiffusionPipeline.from_pretrained(self.model_dir, torch_dtype=self.dtype))
        pipe.to(self.device)
        self.unet, self.vae = pipe.unet, pipe.vae
        self.text_encoder, self.tokenizer = pipe.text_encoder, pipe.tokenizer
        self._scheduler_config = dict(pipe.scheduler.config)
        for module in (self.unet, self.vae, self.text_encoder):
            module.eval()
            module.requires_grad_(False)
        self.vae_scale = 2 ** (len(self.vae.config.block_out_channels) - 1)
        # Each UNet down block but the last halves the latent size, so latents must divide by this.
        self._latent_multiple = 2 ** (len(self.unet.config.block_out_channels) - 1)
        self.model_id = _model_identity(self.model_dir)
        self._hang = _test_hang_spec(os.environ.get(TEST_HANG_ENV))
        self.numerics = self._numerics()

    # -- identity ------------------------------------------------------------------------------------------

    def fingerprint(self, req: RenderRequest) -> str:
        doc = {"loop": LOOP_VERSION, "model": self.model_id, "dtype": str(self.dtype),
               "numerics": self.numerics, "request": req.frame_settings()}
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()

    def _numerics(self) -> dict[str, Any]:
        """What besides the inputs decides the bits: on a CPU the thread count changes the order of float
        reductions (1 and 2 threads give different frames), on a GPU the device model; both with the torch
        build. A checkpoint from another numerical environment is a mismatch, not a silent divergence."""
        env: dict[str, Any] = {"device": self.device.type, "torch": torch.__version__}
        if self.device.type == "cuda":
            env["gpu"] = torch.cuda.get_device_name(self.device)
        else:
            env["threads"] = torch.get_num_threads()
        return env

    # -- the loop ------------------------------------------------------------------------------------------

    def start(self, req: RenderRequest) -> RenderState:
        self._check_size(req)
        scheduler = self._scheduler(req)
        generator = torch.Generator("cpu").manual_seed(req.seed)
        shape = (1, self.unet.config.in_channels, req.num_frames,
                 req.height // self.vae_scale, req.width // self.vae_scale)
        # Drawn on the CPU generator and moved, as diffusers' randn_tensor does: the same seed gives the
        # same starting noise on every device.
        latents = torch.randn(shape, generator=generator, dtype=self.dtype).to(self.device)
        latents = latents * scheduler.init_noise_sigma
        return RenderState(req, 0, req.num_steps, self.fingerprint(req), latents, self._embed(req),
                           scheduler, generator)

    def resume(self, req: RenderRequest, ckpt: Checkpoint) -> RenderState:
        self._check_size(req)
        fp = self.fingerprint(req)
        if ckpt.fingerprint != fp:
            raise CheckpointMismatch(f"checkpoint fingerprint {ckpt.fingerprint[:16]}… does not match this "
                                     f"render's {fp[:16]}… (other model, settings or loop version)")
        if not 0 <= ckpt.step <= req.num_steps:
            raise CheckpointMismatch(f"checkpoint step {ckpt.step} is outside 0..{req.num_steps}")
        scheduler = self._scheduler(req)
        saved = ckpt.tensors.get("scheduler.timesteps")
        if saved is None or not torch.equal(saved, scheduler.timesteps.cpu()):
            raise CheckpointMismatch("the scheduler's timesteps differ from the checkpoint's")
        generator = torch.Generator("cpu")
        generator.set_state(ckpt.tensors["rng.state"].clone())
        latents = ckpt.tensors["latents"].to(device=self.device, dtype=self.dtype)
        if hasattr(scheduler, "set_begin_index"):
            scheduler.set_begin_index(ckpt.step)
        return RenderState(req, ckpt.step, req.num_steps, fp, latents, self._embed(req), scheduler, generator)

    @torch.no_grad()
    def step(self, state: RenderState) -> RenderState:
        if state.done:
            raise ValueError(f"render already finished all {state.num_steps} steps")
        if self.device.type == "cpu" and torch.get_num_threads() != self.numerics["threads"]:
            raise RuntimeError(f"torch CPU threads changed from {self.numerics['threads']} to "
                               f"{torch.get_num_threads()} after the Renderer was built; set them before")
        if self._hang is not None and self._hang[0] == state.step:
            self._hang_once()
        sched, latents, req = state.scheduler, state.latents, state.request
        t = sched.timesteps[state.step]
        guided = req.guidance_scale > 1.0
        model_in = torch.cat([latents] * 2) if guided else latents
        model_in = sched.scale_model_input(model_in, t)
        noise = self.unet(model_in, t, encoder_hidden_states=state.embeds, return_dict=False)[0]
        if guided:
            uncond, text = noise.chunk(2)
            noise = uncond + req.guidance_scale * (text - uncond)
        # The scheduler works on frames as a batch of images, exactly as TextToVideoSDPipeline does.
        b, c, f, h, w = latents.shape
        flat = latents.permute(0, 2, 1, 3, 4).reshape(b * f, c, h, w)
        noise = noise.permute(0, 2, 1, 3, 4).reshape(b * f, c, h, w)
        flat = sched.step(noise, t, flat, generator=state.generator).prev_sample
        latents = flat[None, :].reshape(b, f, c, h, w).permute(0, 2, 1, 3, 4)
        return replace(state, step=state.step + 1, latents=latents)

    def _hang_once(self) -> None:
        """TEST-ONLY fault injection (see TEST_HANG_ENV): this process's first step from the given step hangs."""
        assert self._hang is not None
        seconds = self._hang[1]
        self._hang = None
        threading.Event().wait(seconds)  # None: for ever

    def snapshot(self, state: RenderState) -> Checkpoint:
        tensors = {
            "latents": state.latents.detach().to("cpu").contiguous().clone(),
            "rng.state": state.generator.get_state(),
            "scheduler.timesteps": state.scheduler.timesteps.detach().to("cpu").contiguous().clone(),
        }
        meta = {"sampler": state.request.sampler, "scheduler": type(state.scheduler).__name__,
                "num_steps": state.num_steps, "dtype": str(self.dtype), "numerics": self.numerics,
                "loop": LOOP_VERSION}
        return Checkpoint(step=state.step, fingerprint=state.fingerprint, tensors=tensors, meta=meta)

    @torch.no_grad()
    def finish(self, state: RenderState) -> np.ndarray:
        """Decode the latents to uint8 frames (T, H, W, 3); may be called before the last step (preview)."""
        latents = state.latents / self.vae.config.scaling_factor
        b, c, f, h, w = latents.shape
        images = self.vae.decode(latents.permute(0, 2, 1, 3, 4).reshape(b * f, c, h, w)).sample
        frames = (images.float() / 2 + 0.5).clamp(0, 1).permute(0, 2, 3, 1)
        return (frames * 255).round().to(torch.uint8).cpu().numpy()

    # -- helpers -------------------------------------------------------------------------------------------

    def check(self, req: RenderRequest) -> None:
        """ValueError when this model cannot render `req` at all (a request error: retrying cannot help)."""
        self._check_size(req)

    def _check_size(self, req: RenderRequest) -> None:
        multiple = self.vae_scale * self._latent_multiple
        if req.width % multiple or req.height % multiple:
            raise ValueError(f"width and height must be multiples of {multiple} for this model, "
                             f"got {req.width}x{req.height}")

    def _scheduler(self, req: RenderRequest):
        from diffusers import DDIMScheduler, EulerAncestralDiscreteScheduler

        cls = DDIMScheduler if req.sampler == "ddim" else EulerAncestralDiscreteScheduler
        with warnings.catch_warnings():
            # diffusers' sigma table trips numpy 2's __array__ copy notice; the values are unaffected.
            warnings.simplefilter("ignore", DeprecationWarning)
            scheduler = cls.from_config(self._scheduler_config)
            scheduler.set_timesteps(req.num_steps, device=self.device)
        if hasattr(scheduler, "set_begin_index"):
            scheduler.set_begin_index(0)
        return scheduler

    @torch.no_grad()
    def _embed(self, req: RenderRequest) -> torch.Tensor:
        """Prompt embeddings, with the empty prompt's in front when guidance is on (as diffusers does)."""
        prompts = [""] * (req.guidance_scale > 1.0) + [req.prompt]
        embeds = []
        for text in prompts:
            tokens = self.tokenizer(text, padding="max_length", max_length=self.tokenizer.model_max_length,
                                    truncation=True, return_tensors="pt")
            mask = None
            if getattr(self.text_encoder.config, "use_attention_mask", False):
                mask = tokens.attention_mask.to(self.device)
            out = self.text_encoder(tokens.input_ids.to(self.device), attention_mask=mask)[0]
            embeds.append(out.to(self.dtype))
        return torch.cat(embeds)


def _model_identity(model_dir: Path) -> str:
    """A hash of what the model is: every config and tokenizer file whole, and for each weight file its
    size plus its first and last MiB (hashing gigabytes of weights on every start would cost seconds)."""
    h = hashlib.sha256()
    for path in sorted(p for p in model_dir.rglob("*") if p.is_file()):
        rel = path.relative_to(model_dir).as_posix()
        if rel.startswith(".") or "/." in rel:
            continue
        h.update(rel.encode() + b"\0")
        size = path.stat().st_size
        if path.suffix in (".safetensors", ".bin", ".pt", ".ckpt", ".pth"):
            h.update(str(size).encode())
            with path.open("rb") as fh:
                h.update(fh.read(1 << 20))
                if size > 2 << 20:
                    fh.seek(-(1 << 20), 2)
                    h.update(fh.read())
        elif size <= 16 << 20:
            h.update(path.read_bytes())
        else:
            h.update(str(size).encode())
    return h.hexdigest()
