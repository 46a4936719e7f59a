"""What the demo asks for, turned into the public API's request body. Pure: no I/O, no clock."""

from __future__ import annotations

import re
from dataclasses import dataclass

from spotreel.demo.errors import DemoError

DEFAULT_PROMPT = "a red fox running in snow"
DEFAULT_SEED = 42
DEFAULT_FRAMES = 8
DEFAULT_FPS = 8
DEFAULT_STEPS = 20
# The tiny model needs sizes in multiples of 4; 32x32 keeps a 20-step render to seconds on 2 CPU cores.
DEFAULT_RESOLUTION = "32x32"
DEFAULT_MODEL = "tiny-t2v"
_RESOLUTION = re.compile(r"^([1-9][0-9]{0,3})x([1-9][0-9]{0,3})$")
_POOL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}@[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$")


@dataclass(frozen=True)
class VideoRequest:
    prompt: str
    frames: int
    fps: int
    steps: int
    seed: int
    resolution: str
    pool: str  # MODEL@GPU: the worker serves it and the job is submitted into it

    def __post_init__(self) -> None:
        if not self.prompt.strip():
            raise DemoError("--prompt must not be empty")
        for name in ("frames", "fps", "steps"):
            if getattr(self, name) < 1:
                raise DemoError(f"--{name} must be at least 1")
        if self.seed < 0:
            raise DemoError("--seed must not be negative")
        m = _RESOLUTION.match(self.resolution)
        if not m or int(m[1]) % 4 or int(m[2]) % 4:
            raise DemoError(f"--resolution must be WIDTHxHEIGHT in multiples of 4 (e.g. 32x32), got {self.resolution!r}")
        if not _POOL.match(self.pool):
            raise DemoError(f"--pool must look like MODEL@GPU, got {self.pool!r}")

    @property
    def size(self) -> tuple[int, int]:
        width, height = self.resolution.split("x")
        return int(width), int(height)

    @property
    def model(self) -> str:
        return self.pool.rpartition("@")[0]

    @property
    def gpu_type(self) -> str:
        return self.pool.rpartition("@")[2]

    def body(self) -> dict[str, object]:
        """POST /v1/videos body. The API speaks in seconds; the worker renders round(duration * fps)
        frames, so frames / fps gives exactly the frames asked for."""
        return {"prompt": self.prompt, "model": self.model, "gpu_type": self.gpu_type,
                "duration": self.frames / self.fps, "fps": self.fps, "resolution": self.resolution,
                "num_steps": self.steps, "seed": self.seed}

    def describe(self) -> str:
        return (f"{self.resolution}, {self.frames} frames at {self.fps} fps, {self.steps} steps, seed {self.seed}, "
                f"pool {self.pool}")


def private_pool(token: str, model: str = DEFAULT_MODEL) -> str:
    """A pool only this run's worker serves: a job queued by someone else on a shared stack cannot take
    the demo's worker, and no other worker can take the demo's job."""
    return f"{model}@demo-{token}"
