"""RenderSpec: what one video is, as asked for. Defined once and carried whole by every shape of a job.

A job's request splits in two. The render spec says what video to make (model, prompt, length, size, frame
rate, seed, denoising steps and the optional render options); everything else about a job says how and when
to run it (gpu_type and the pool it makes, priority, run_at, parents, retries, limits, callback). The spec
travels unchanged from SubmitJob through JobSubmitted and JobState to the WorkAssigned a worker renders from,
so it is one record there instead of ten fields copied by hand into each (schemas/README.md, "RenderSpec").

`gpu_type` is not part of it: it picks the hardware (with `model` it names the pool), and the same spec
rendered on another GPU type is the same video. The checks on a spec's values stay where the domain judges a
submission (decide.submission_problem, limits.render_problem), so a bad value is a CommandRejected with a
reason, never an exception while decoding a record already written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass(frozen=True)
class RenderSpec:
    model: str
    prompt: str
    duration_s: float
    resolution: str
    fps: int
    seed: int
    num_steps: int
    # Render options (limits.render_problem); None: the model's default (its registry entry, or the worker's
    # flags). The gateway checks the sampler against the model's family.
    guidance_scale: float | None = None
    negative_prompt: str | None = None
    sampler: str | None = None
    # The conditioning image of an image-to-video job, by reference (domain/images.py: its object key,
    # SHA-256 and media type as one JSON text), never its bytes; None: text-to-video.
    input_image: str | None = None

    def flat(self) -> dict[str, Any]:
        """The fields by name, as the flat shapes outside the records carry them (API JSON, worker answers)."""
        return dict(self.__dict__)

    @classmethod
    def from_flat(cls, values: Mapping[str, Any]) -> RenderSpec:
        """The spec out of a flat mapping holding its fields by name (other keys ignored; an optional field
        that is absent is None)."""
        return cls(**{name: values[name] for name in SPEC_FIELDS if name in values})


SPEC_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(RenderSpec))
# The spec's personal fields: carried sealed (spotreel/personal/fields.py lists the same names) and emptied
# from the state of an erased job. `prompt` is required, so it empties to "", the others to None.
PERSONAL_SPEC_FIELDS: tuple[str, ...] = ("prompt", "negative_prompt")


def flattened(message: Any) -> dict[str, Any]:
    """`dataclasses.asdict` of a record that carries a `spec`, with the spec's fields in its place: the flat
    JSON the worker API answered with before RenderSpec, which workers still read (worker/transport.py)."""
    out = asdict(message)
    out.update(out.pop("spec"))
    return out
