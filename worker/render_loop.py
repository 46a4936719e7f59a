"""The render loop: a diffusers text-to-video model driven one denoising step at a time.

Stock pipelines run all steps in one call and cannot start mid-way, so the worker owns the loop
(encode prompt → seeded latents → per step: model, guidance, scheduler.step → VAE decode). Each kind of
pipeline is a family (`families/`: UNet3D, Wan, LTX-Video, CogVideoX) that mirrors its stock pipeline.
Everything that decides the next latents — latents, the scheduler's whole internal state (step index,
sigmas, a multistep sampler's previous outputs), loop state a family keeps outside the scheduler, the RNG
state of our own CPU `torch.Generator` — is in the state and goes into a checkpoint, so a resume on a
fresh process continues bit for bit.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from spotreel.domain import resume_match
from spotreel.worker import vae_memory
from spotreel.worker.checkpoints import Checkpoint, CheckpointMismatch
from spotreel.worker.families import family_for
from spotreel.worker.families import scheduler_state as sched_state
from spotreel.worker.hf_logging import quietly

# Bump when the loop changes in a way that makes old checkpoints resume differently.
# 2: families; the checkpoint carries the scheduler's whole state.
LOOP_VERSION = 2
VAE_TILING = ("off", "on", "auto")
# `--vae-tiling auto` on a GPU, for the measured families (vae_memory.py): tiles when a whole decode's estimated
# memory exceeds a quarter of the GPU's (docs/decisions/0013-vae-tiling-by-estimated-memory.md). Otherwise (a CPU, an unmeasured family, or an operator's
# --vae-tile-above) it tiles above this many output pixels × frames, Wan 2.1 1.3B's largest output.
DEFAULT_TILE_ABOVE_VOXELS = 832 * 480 * 81
# Every sampler some family offers; each family accepts its own subset (Renderer.check says which).
SAMPLERS = ("ddim", "euler_a", "unipc", "dpmpp", "flow_euler")
_RESOLUTION = re.compile(r"^([1-9][0-9]{0,4})x([1-9][0-9]{0,4})$")
_SHA256 = re.compile(r"[0-9a-f]{64}")


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
    negative_prompt: str = ""
    # The sha256 (hex) of the job's conditioning image, "" for text-to-video. The hash, not the pixels, is
    # what the fingerprint holds: `Renderer.start` takes the image's bytes and checks them against it.
    image_sha256: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.prompt, str) or not isinstance(self.negative_prompt, str):
            raise ValueError("prompt and negative_prompt must be strings")
        if self.image_sha256 and not _SHA256.fullmatch(self.image_sha256):
            raise ValueError(f"image_sha256 must be 64 lowercase hex digits, got {self.image_sha256!r}")
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
                 sampler: str = "ddim", guidance_scale: float = 1.0, negative_prompt: str = "",
                 image_sha256: str = "") -> "RenderRequest":
        """From a job's settings as the lease carries them: resolution "WxH", duration in seconds."""
        m = _RESOLUTION.match(resolution or "")
        if not m:
            raise ValueError(f"resolution must look like 256x256 (WIDTHxHEIGHT), got {resolution!r}")
        if not duration_s > 0:
            raise ValueError(f"duration must be positive, got {duration_s!r}")
        frames = max(1, round(duration_s * fps))
        return cls(prompt=prompt, seed=seed, num_steps=num_steps, width=int(m[1]), height=int(m[2]),
                   num_frames=frames, fps=fps, sampler=sampler, guidance_scale=guidance_scale,
                   negative_prompt=negative_prompt, image_sha256=image_sha256)

    def frame_settings(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("fps")
        if not d["image_sha256"]:
            d.pop("image_sha256")  # a text-to-video request fingerprints as before the field existed
        return d


@dataclass(frozen=True)
class RenderState:
    """One point of a render. `step` consumes it: the scheduler and generator inside move on."""

    request: RenderRequest
    step: int
    num_steps: int
    fingerprint: str
    latents: torch.Tensor
    cond: dict[str, Any]
    scheduler: Any
    generator: torch.Generator
    extra: dict[str, torch.Tensor | None] = field(default_factory=dict)

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

    def __init__(self, model_dir: str | Path, device: str = "cpu", dtype: torch.dtype | None = None,
                 vae_tiling: str = "auto", tile_above_voxels: int | None = None,
                 limits: Any = None, fingerprint_override: str = "") -> None:
        """`vae_tiling`: off, on, or auto (see `tiled`); `tile_above_voxels` (width × height × frames): the
        operator's threshold for auto, None for the measured rule (DEFAULT_TILE_ABOVE_VOXELS where none is). `limits`: the model's registry entry (model_registry.ModelEntry), whose sizes, frame range
        and step range `check` holds a request to; None: only what the family itself can render."""
        from diffusers import DiffusionPipeline

        if vae_tiling not in VAE_TILING or not (tile_above_voxels is None or tile_above_voxels > 0):
            raise ValueError(f"vae_tiling must be one of {VAE_TILING} and tile_above_voxels > 0, got "
                             f"{vae_tiling!r}, {tile_above_voxels!r}")
        self.vae_tiling, self.tile_above_voxels, self.limits = vae_tiling, tile_above_voxels, limits

        self.model_dir = Path(model_dir)
        if not (self.model_dir / "model_index.json").is_file():
            raise FileNotFoundError(f"{self.model_dir} is not a diffusers model directory (no model_index.json)")
        self.device = torch.device(device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("device 'cuda' was asked for but torch sees no CUDA device")
        self.dtype = dtype or (torch.float16 if self.device.type == "cuda" else torch.float32)
        pipe = quietly(lambda: DiffusionPipeline.from_pretrained(self.model_dir, torch_dtype=self.dtype))
        pipe.to(self.device)
        pipe.set_progress_bar_config(disable=True)
        self.family = family_for(pipe, self.device, self.dtype)
        for module in self.family.modules():
            module.eval()
            module.requires_grad_(False)
        self.default_sampler = self.family.default_sampler
        self.model_id = _model_identity(self.model_dir)
        self._hang = _test_hang_spec(os.environ.get(TEST_HANG_ENV))
        self.numerics = self._numerics()
        # Fields laid over the stated environment (settings.worker_fingerprint_override): a test's way to be a
        # worker of another device kind or dtype without one. Part of the render fingerprint too, so this
        # worker's own checkpoints and the scheduler's view of them agree.
        self.fingerprint_override = resume_match.parse(fingerprint_override)

    # -- identity ------------------------------------------------------------------------------------------

    def fingerprint(self, req: RenderRequest) -> str:
        settings = req.frame_settings()
        if self.family.fps_changes_frames:
            settings["fps"] = req.fps
        if self.tiled(req):
            settings["vae"] = "tiled"  # tiles blend at their seams: other frames than one whole decode
        doc = {"loop": LOOP_VERSION, "family": self.family.name, "model": self.model_id, "dtype": str(self.dtype),
               "numerics": self.numerics, "request": settings}
        if self.fingerprint_override:
            doc["override"] = self.fingerprint_override
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()

    def environment(self, with_model: bool = True) -> dict[str, str]:
        """What a checkpoint of this worker needs to resume exactly (domain/resume_match.py), request aside:
        loop version, torch and diffusers builds, device kind and GPU model (or CPU threads), the VAE tiling
        rule, and with the model its family, weights identity and dtype."""
        import diffusers

        env = {"loop": str(LOOP_VERSION), "torch": torch.__version__, "diffusers": diffusers.__version__,
               **{k: str(v) for k, v in self.numerics.items() if k != "torch"},
               "vae": f"{self.vae_tiling}:{self.tile_above_voxels or ''}"}
        if with_model:
            env.update(family=self.family.name, weights=self.model_id[:16], dtype=str(self.dtype).removeprefix("torch."))
        return {**env, **self.fingerprint_override}

    def worker_fingerprint(self, single_model: bool = True) -> str:
        """The fingerprint this worker states when it asks for work: with its model when it serves only that
        one, the environment alone when it serves several (a lease may bring any of them)."""
        return resume_match.encode(self.environment(with_model=single_model))

    def checkpoint_fingerprint(self) -> str:
        """The fingerprint of a checkpoint this renderer writes (RecordCheckpoint.fingerprint)."""
        return resume_match.encode(self.environment())

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

    def start(self, req: RenderRequest, image: bytes | None = None) -> RenderState:
        """`image`: the job's conditioning image (PNG, JPEG or WebP bytes) whose sha256 the request names."""
        self.family.check(req)
        self.check_image(req)
        pil = None
        if req.image_sha256:
            if image is None or hashlib.sha256(image).hexdigest() != req.image_sha256:
                raise ValueError(f"the image given does not have the request's sha256 {req.image_sha256[:16]}…")
            pil = decode_image(image)
        scheduler = self.family.scheduler(req)
        generator = torch.Generator("cpu").manual_seed(req.seed)
        # Latents first, as every stock pipeline draws them before anything else uses the generator.
        latents = self.family.latents(req, generator, scheduler, image=pil)
        return RenderState(req, 0, req.num_steps, self.fingerprint(req), latents, self.family.encode(req),
                           scheduler, generator, self.family.initial_extra())

    def resume(self, req: RenderRequest, ckpt: Checkpoint) -> RenderState:
        self.family.check(req)
        self.check_image(req)
        fp = self.fingerprint(req)
        if ckpt.fingerprint != fp:
            raise CheckpointMismatch(f"checkpoint fingerprint {ckpt.fingerprint[:16]}… does not match this "
                                     f"render's {fp[:16]}… (other model, settings or loop version)")
        if not 0 <= ckpt.step <= req.num_steps:
            raise CheckpointMismatch(f"checkpoint step {ckpt.step} is outside 0..{req.num_steps}")
        scheduler = self.family.scheduler(req)
        saved = ckpt.tensors.get("scheduler.timesteps")
        if saved is None or not torch.equal(saved, scheduler.timesteps.cpu()):
            raise CheckpointMismatch("the scheduler's timesteps differ from the checkpoint's")
        doc = ckpt.meta.get("scheduler_state")
        if not isinstance(doc, dict):
            raise CheckpointMismatch("the checkpoint carries no scheduler state")
        try:
            sched_state.load(scheduler, ckpt.tensors, doc, self.device)
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointMismatch(f"the checkpoint's scheduler state does not fit: {exc}") from exc
        generator = torch.Generator("cpu")
        generator.set_state(ckpt.tensors["rng.state"].clone())
        # The latents keep the dtype they were saved in: Wan and LTX-Video keep float32 latents under a 16-bit
        # model, and rounding them to the model's dtype made a resumed render end elsewhere (the fingerprint
        # holds the dtype, so a checkpoint here comes from a renderer of this one's dtype).
        latents = ckpt.tensors["latents"].to(device=self.device)
        extra: dict[str, torch.Tensor | None] = {}
        for name in ckpt.meta.get("extra", []):
            t = ckpt.tensors.get(f"extra.{name}")
            extra[name] = None if t is None else t.to(self.device)
        return RenderState(req, ckpt.step, req.num_steps, fp, latents, self.family.encode(req), scheduler,
                           generator, extra)

    @torch.no_grad()
    def step(self, state: RenderState) -> RenderState:
        if state.done:
            raise ValueError(f"render already finished all {state.num_steps} steps")
        if self.device.type == "cpu" and torch.get_num_threads() != self.numerics["threads"]:
            raise RuntimeError(f"torch CPU threads changed from {self.numerics['threads']} to "
                               f"{torch.get_num_threads()} after the Renderer was built; set them before")
        if self._hang is not None and self._hang[0] == state.step:
            self._hang_once()
        latents, extra = self.family.denoise(state.request, state.step, state.scheduler, state.latents,
                                             state.cond, state.extra, state.generator)
        return replace(state, step=state.step + 1, latents=latents, extra=extra)

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
        sched_tensors, sched_doc = sched_state.dump(state.scheduler)
        tensors.update(sched_tensors)
        for name, value in state.extra.items():
            if value is not None:
                tensors[f"extra.{name}"] = value.detach().to("cpu").contiguous().clone()
        meta = {"sampler": state.request.sampler, "scheduler": type(state.scheduler).__name__,
                "num_steps": state.num_steps, "dtype": str(self.dtype), "numerics": self.numerics,
                "loop": LOOP_VERSION, "family": self.family.name, "scheduler_state": sched_doc,
                "extra": sorted(state.extra)}
        return Checkpoint(step=state.step, fingerprint=state.fingerprint, tensors=tensors, meta=meta)

    @torch.no_grad()
    def finish(self, state: RenderState) -> np.ndarray:
        """Decode the latents to uint8 frames (T, H, W, 3); may be called before the last step (preview)."""
        vae = self.family.pipe.vae
        if self.tiled(state.request):
            vae.enable_tiling()
            vae.enable_slicing()
        else:
            vae.disable_tiling()
            vae.disable_slicing()
        return self.family.decode(state.request, state.latents)

    def tiled(self, req: RenderRequest) -> bool:
        """Whether the VAE decodes `req` in tiles (and slices): the whole video at once needs memory in
        proportion to width × height × frames, which a long or large video may not have. Tiles (spatial,
        and temporal for LTX-Video) are the VAE's own (`enable_tiling`, every family's VAE has it; a frame
        smaller than one tile decodes whole); slicing decodes a batch one item at a time, which for UNet3D
        (frames folded into the batch) means frame by frame. Tiled frames differ a little from a whole
        decode, so the choice is in the fingerprint; it depends only on the request, this worker's settings
        and, on a GPU, the GPU's total memory (its model is in the fingerprint too), so every worker with the
        same settings on the same GPU model decides the same. Auto on a GPU without `tile_above_voxels`:
        the measured estimate of a whole decode's memory against a share of the GPU's (vae_memory.tiles)."""
        if self.vae_tiling != "auto":
            return self.vae_tiling == "on"
        if self.tile_above_voxels is None and self.device.type == "cuda":
            total = torch.cuda.get_device_properties(self.device).total_memory
            measured = vae_memory.tiles(self.family.name, req.width, req.height, req.num_frames, total)
            if measured is not None:
                return measured
        return req.width * req.height * req.num_frames > (self.tile_above_voxels or DEFAULT_TILE_ABOVE_VOXELS)

    # -- helpers -------------------------------------------------------------------------------------------

    def check(self, req: RenderRequest) -> None:
        """ValueError when this model cannot render `req` at all (a request error: retrying cannot help): what
        the family can render, and, with the registry's entry, what the operator allows (the gateway refuses
        such a submission already; this holds a job submitted another way, or before the entry changed)."""
        self.family.check(req)
        self.check_image(req)
        e = self.limits
        if e is None:
            return
        if not e.size_allowed(f"{req.width}x{req.height}"):
            raise ValueError(f"model {e.name} renders resolutions {e.size_rule()}; got {req.width}x{req.height}")
        if not e.frames_allowed(req.num_frames):
            raise ValueError(f"model {e.name} takes frames {e.frame_rule()}; the job asks for {req.num_frames}")
        if not e.steps_min <= req.num_steps <= e.steps_max:
            raise ValueError(f"model {e.name} takes num_steps from {e.steps_min} to {e.steps_max}; got {req.num_steps}")


    def check_image(self, req: RenderRequest) -> None:
        """ValueError when the request's image and the model disagree: an image for a text-to-video model
        (nothing would use it), or none for an image-to-video one (it has no first frame to start from)."""
        if req.image_sha256 and not self.family.takes_image:
            raise ValueError("this model renders text-to-video only: it takes no input image")
        if not req.image_sha256 and self.family.takes_image:
            raise ValueError("this model renders image-to-video: a job needs an input image (input_reference)")


def decode_image(data: bytes):
    """The image's pixels as an RGB PIL image (the gateway checked the bytes decode; this holds a job sent
    another way)."""
    import io

    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            im.load()
            return im.convert("RGB")
    except Exception as exc:
        raise ValueError(f"the input image does not decode: {type(exc).__name__}: {exc}") from exc


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
