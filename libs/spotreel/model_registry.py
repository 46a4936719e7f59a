"""The model registry: the operator's file naming every model the service renders and what it accepts.

One TOML file (`SPOTREEL_MODEL_REGISTRY`), one table per model name (the `model` of a submission and the
MODEL of a worker's `--pool MODEL@GPU`):

    [models.wan-1.3b]
    directory = "/models/Wan2.1-T2V-1.3B-Diffusers"   # a diffusers directory (model_index.json)
    family = "wan"                                    # unet3d | wan | ltx | cogvideox
    dtype = "bfloat16"                                # float32 | float16 | bfloat16 (on a GPU)
    sizes = ["832x480", "480x832"]                    # WIDTHxHEIGHT the model is meant for, or a rule:
                                                      # { multiple = 8, min = 16, max = 512 } (each side)
    frames = { min = 5, max = 81, step = 4 }          # frame counts min, min+step, ... <= max (4n+1 here)
    steps = { min = 1, max = 50 }
    sampler = "unipc"                                 # default sampler (the family's exact-resume ones)
    guidance_scale = 5.0                              # default guidance of a job that names none
    pool = "a100"                                     # the GPU type its workers run on
    fps = 16                                          # frames per second its videos play at (optional)
    takes_image = false                               # true: an image-to-video pipeline (optional)

The gateway checks a submission against its model's entry (`problem`: the field and the allowed values,
answered 422), a job's `sampler` included (one of its family's, SAMPLERS); `spotreel model list` prints the
file; a worker started with `--model NAME` loads the entry's directory, and renders a job that names no
sampler or guidance with the entry's. The frame count of a job is round(duration × fps), as the worker
computes it; the gateway takes a duration from frames_min / fps to frames_max / fps and, where that count is
off the entry's grid (4n+1), moves the job's duration to the nearest count on it (`frames_for`). `fps`, where
given, is the rate the OpenAI-compatible surface renders the model's `seconds` at (the native API takes the
job's own `fps`); without it that surface uses the gateway's default fps. `takes_image = true` marks an
image-to-video model (its pipeline conditions on an image: Wan I2V, LTX-Video image-to-video, CogVideoX
I2V): every job of it brings an image (the compatible surface's `input_reference`), and a model without it
takes none (`image_problem`). Pure
functions and a loader; nothing here talks to a service.

The local stack's registry (`platform.seed.local_registry_text`): `spotreel infra up` writes it to `$SPOTREEL_HOME/models.toml`
when SPOTREEL_MODEL_REGISTRY is unset and hands it to the gateway it starts; `registry_path` finds it for the
commands an operator runs by hand (`spotreel model list`, `spotreel worker --model`).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spotreel.platform.seed import LOCAL_REGISTRY_FILE

# The pool a worker serves without --pool, where a submission with the gateway's defaults goes
# (GatewayConfig.default_model @ default_gpu_type); the capacity manager's default too.
DEFAULT_POOL = "tiny-t2v@any"

FAMILIES = ("unet3d", "wan", "ltx", "cogvideox")
DTYPES = ("float32", "float16", "bfloat16")
SAMPLERS = {"unet3d": ("ddim", "euler_a", "unipc", "dpmpp"), "wan": ("unipc", "dpmpp"), "ltx": ("flow_euler",),
            "cogvideox": ("ddim", "dpmpp")}
_SIZE = re.compile(r"([1-9][0-9]{0,4})x([1-9][0-9]{0,4})")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}")


class RegistryError(ValueError):
    """The registry file is unreadable or an entry is malformed (the message names the entry and key)."""


@dataclass(frozen=True)
class ModelEntry:
    name: str
    directory: str
    family: str
    dtype: str
    sizes: tuple[str, ...]
    frames_min: int
    frames_max: int
    frames_step: int
    steps_min: int
    steps_max: int
    sampler: str
    guidance_scale: float
    pool: str
    # A size rule instead of a list (sizes then empty): each side a multiple of side_multiple in [side_min, side_max].
    side_multiple: int = 0
    side_min: int = 0
    side_max: int = 0
    # The frame rate the model's videos are meant to play at; 0: not stated (the gateway's default applies).
    fps: int = 0
    # An image-to-video model: each job is conditioned on an input image, and needs one.
    takes_image: bool = False

    def image_problem(self, has_image: bool) -> str | None:
        """Why a job of this model with (or without) an input image cannot be rendered; None: it can."""
        if has_image and not self.takes_image:
            return f"model {self.name} renders text-to-video only: it takes no input image"
        if not has_image and self.takes_image:
            return f"model {self.name} renders image-to-video: a job needs an input image (input_reference)"
        return None

    def size_allowed(self, resolution: str) -> bool:
        if not self.side_multiple:
            return resolution in self.sizes
        m = _SIZE.fullmatch(resolution)
        return m is not None and all(self.side_min <= int(n) <= self.side_max and int(n) % self.side_multiple == 0
                                     for n in m.groups())

    def size_rule(self) -> str:
        if not self.side_multiple:
            return ", ".join(self.sizes)
        return f"WIDTHxHEIGHT, each side a multiple of {self.side_multiple} from {self.side_min} to {self.side_max}"

    def samplers(self) -> tuple[str, ...]:
        """The samplers a job of this model may name: its family's exact-resume ones."""
        return SAMPLERS[self.family]

    def frame_rule(self) -> str:
        form = f"{self.frames_step}n+{self.frames_min % self.frames_step}" if self.frames_step > 1 else "any"
        return f"{form} from {self.frames_min} to {self.frames_max}"

    def frames_allowed(self, n: int) -> bool:
        return self.frames_min <= n <= self.frames_max and (n - self.frames_min) % self.frames_step == 0

    def duration_bounds(self, fps: int) -> tuple[float | None, float]:
        """The durations this model renders at `fps`: from frames_min / fps (None when frames_min is 1: any
        positive duration renders at least one frame) to frames_max / fps, both inclusive."""
        return (self.frames_min / fps if self.frames_min > 1 else None), self.frames_max / fps

    def frames_for(self, duration_s: float, fps: int) -> int:
        """The frame count a job of `duration_s` at `fps` renders: round(duration x fps), at least 1, moved to
        the nearest count on the model's grid (81 for 5 s at 16 fps on a 4n+1 grid: 80 is not on it)."""
        return self.snap_frames(max(1, round(duration_s * fps)))

    def snap_frames(self, n: int) -> int:
        """The frame count on this model's grid (frames_min + k * frames_step, within its range) nearest `n`;
        a tie goes to the longer video."""
        steps = (self.frames_max - self.frames_min) // self.frames_step
        k = min(max(0, (n - self.frames_min + self.frames_step // 2) // self.frames_step), steps)
        return self.frames_min + k * self.frames_step

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "directory": self.directory, "family": self.family, "dtype": self.dtype,
                "sizes": list(self.sizes) if not self.side_multiple else self.size_rule(),
                "frames": self.frame_rule(), "steps": [self.steps_min, self.steps_max],
                "sampler": self.sampler, "samplers": list(self.samplers()), "guidance_scale": self.guidance_scale,
                "pool": self.pool, "fps": self.fps or None, "takes_image": self.takes_image}


@dataclass(frozen=True)
class ModelRegistry:
    models: dict[str, ModelEntry]

    def names(self) -> list[str]:
        return sorted(self.models)

    def problem(self, *, model: str, resolution: str, duration_s: float, fps: int,
                num_steps: int, sampler: str | None = None, has_image: bool = False) -> tuple[str, str] | None:
        """(field, message) for the first setting `model` cannot take, None when it can take them all.
        `sampler`: the job's (None: the entry's default); `has_image`: whether the job brings an input image."""
        entry = self.models.get(model)
        if entry is None:
            return "model", f"unknown model {model!r}; known models: {', '.join(self.names()) or '(none)'}"
        if not entry.size_allowed(resolution):
            return "resolution", f"model {model} renders resolutions {entry.size_rule()}; got {resolution!r}"
        lo, hi = entry.duration_bounds(fps)
        if duration_s > hi or (lo is not None and duration_s < lo):
            since = f"from {lo!r}" if lo is not None else "above 0"
            return "duration", (f"model {model} renders frames {entry.frame_rule()}: at {fps} fps, duration "
                                f"{since} to {hi!r} s (duration x fps frames, rounded to the nearest count the model "
                                f"takes); got {duration_s!r}")
        if not entry.steps_min <= num_steps <= entry.steps_max:
            return "num_steps", f"model {model} takes num_steps from {entry.steps_min} to {entry.steps_max}"
        if sampler is not None and sampler not in entry.samplers():
            return "sampler", (f"model {model} ({entry.family} family) takes samplers {', '.join(entry.samplers())}; "
                               f"got {sampler!r}")
        image = entry.image_problem(has_image)
        if image is not None:
            return "input_image", image
        return None

    def image_models(self) -> list[str]:
        return [name for name in self.names() if self.models[name].takes_image]


def parse(doc: dict[str, Any]) -> ModelRegistry:
    models = doc.get("models", {})
    if not isinstance(models, dict):
        raise RegistryError("the registry needs a [models.NAME] table per model")
    return ModelRegistry({name: _entry(name, spec) for name, spec in models.items()})


def load(path: str | Path) -> ModelRegistry:
    try:
        with open(path, "rb") as fh:
            return parse(tomllib.load(fh))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise RegistryError(f"cannot read the model registry {path}: {exc}") from exc


def _entry(name: str, spec: Any) -> ModelEntry:
    def fail(msg: str) -> RegistryError:
        return RegistryError(f"model {name!r}: {msg}")

    if not _NAME.fullmatch(name):
        raise fail("the name must be [A-Za-z0-9._:-], up to 64 characters")
    if not isinstance(spec, dict):
        raise fail("must be a table")
    unknown = set(spec) - {"directory", "family", "dtype", "sizes", "frames", "steps", "sampler",
                           "guidance_scale", "pool", "fps", "takes_image"}
    if unknown:
        raise fail(f"unknown keys {sorted(unknown)}")
    family = spec.get("family")
    if family not in FAMILIES:
        raise fail(f"family must be one of {list(FAMILIES)}")
    dtype = spec.get("dtype", "float16")
    if dtype not in DTYPES:
        raise fail(f"dtype must be one of {list(DTYPES)}")
    directory = spec.get("directory")
    if not isinstance(directory, str) or not directory:
        raise fail("directory is required")
    sizes = spec.get("sizes")
    rule: tuple[int, int, int] = (0, 0, 0)
    if isinstance(sizes, dict):
        if set(sizes) - {"multiple", "min", "max"}:
            raise fail("a sizes rule has only the keys multiple, min and max")
        rule = (sizes.get("multiple", 8), sizes.get("min", 16), sizes.get("max"))
        if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in rule) or rule[1] > rule[2]:
            raise fail("sizes.multiple, sizes.min and sizes.max must be positive integers, min <= max")
        sizes = []
    elif not isinstance(sizes, list) or not sizes or not all(isinstance(s, str) and _SIZE.fullmatch(s) for s in sizes):
        raise fail("sizes must be a non-empty list of WIDTHxHEIGHT strings, or a table {multiple, min, max}")
    frames = spec.get("frames", {})
    steps = spec.get("steps", {})
    if not isinstance(frames, dict) or not isinstance(steps, dict):
        raise fail("frames and steps are tables {min, max[, step]}")
    f_min, f_max, f_step = frames.get("min", 1), frames.get("max"), frames.get("step", 1)
    s_min, s_max = steps.get("min", 1), steps.get("max")
    for key, v in (("frames.min", f_min), ("frames.max", f_max), ("frames.step", f_step), ("steps.min", s_min),
                   ("steps.max", s_max)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise fail(f"{key} must be a positive integer")
    if f_min > f_max or s_min > s_max:
        raise fail("a min is above its max")
    sampler = spec.get("sampler", SAMPLERS[family][0])
    if sampler not in SAMPLERS[family]:
        raise fail(f"sampler must be one of the {family} family's {list(SAMPLERS[family])}")
    guidance = spec.get("guidance_scale", 1.0)
    if isinstance(guidance, bool) or not isinstance(guidance, (int, float)) or not guidance >= 1.0:
        raise fail("guidance_scale must be a number >= 1.0")
    pool = spec.get("pool", "any")
    if not isinstance(pool, str) or not _NAME.fullmatch(pool):
        raise fail("pool must be a GPU type name")
    fps = spec.get("fps", 0)
    if "fps" in spec and (isinstance(fps, bool) or not isinstance(fps, int) or not 1 <= fps <= 240):
        raise fail("fps must be an integer from 1 to 240")
    takes_image = spec.get("takes_image", False)
    if not isinstance(takes_image, bool):
        raise fail("takes_image must be true or false")
    return ModelEntry(name, directory, family, dtype, tuple(sizes), f_min, f_max, f_step, s_min, s_max, sampler,
                      float(guidance), pool, *rule, fps=fps, takes_image=takes_image)


# -- finding the file ---------------------------------------------------------------------------------


def registry_path(settings: Any) -> str:
    """The registry file to read: SPOTREEL_MODEL_REGISTRY, else the local stack's `$SPOTREEL_HOME/models.toml`
    when `infra up` wrote one; "" when there is none. For commands run by hand; the services read only the
    setting (`infra up` sets it for those it starts)."""
    if settings.model_registry:
        return str(settings.model_registry)
    local = Path(settings.home) / LOCAL_REGISTRY_FILE
    return str(local) if local.is_file() else ""
