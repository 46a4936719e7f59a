"""Lifts: the explicit step for released versions whose shape Avro schema resolution cannot reach.

Resolution matches fields by name, so a change that moves fields into a nested record would read a record
written before it with the moved fields dropped and the new record missing. Such a change declares a lift
here instead, and the registry reads a record written under an older version in three steps:

1. resolve it against the newest released version still in the old shape (Avro resolution: fields added
   since the writer's version get their defaults), which the compatibility check verifies as usual;
2. lift that dict into the new shape (a pure function on dicts, tested on every released version);
3. complete it against the current schema: fields added after the lift get their schema defaults.

So a record written under any released version still decodes to the same message as before, and a
Kafka consumer that follows schemas/README.md does the same (decode_example.py).

The one lift so far nests the video's fields in RenderSpec (domain/spec.py): SubmitJob and JobSubmitted up
to v3, WorkAssigned up to v2, and the schedule records CreateSchedule and ScheduleCreated (their job
template) up to v3 carried them flat. Which versions are old is read from the schemas
themselves (a released version without the field the lift creates), not from a version number.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

# The fields of spotreel.v1.RenderSpec, in its order (tests/unit/test_codec_upcast.py holds them equal to
# domain/spec.py's); the render options were added to the flat records later, so older versions lack them,
# and input_image came after the lift (no flat record has it: a lifted one reads it as null).
RENDER_SPEC_FIELDS = ("model", "prompt", "duration_s", "resolution", "fps", "seed", "num_steps",
                      "guidance_scale", "negative_prompt", "sampler", "input_image")
_RENDER_SPEC_OPTIONAL = frozenset({"guidance_scale", "negative_prompt", "sampler", "input_image"})


def nest_render_spec(record: dict[str, Any]) -> dict[str, Any]:
    """Move the flat video fields of an old record into its `spec` (an optional one it lacks is null)."""
    spec = {}
    for name in RENDER_SPEC_FIELDS:
        if name in record:
            spec[name] = record.pop(name)
        elif name in _RENDER_SPEC_OPTIONAL:
            spec[name] = None
        else:
            raise KeyError(f"a flat record without {name!r} cannot be lifted into a RenderSpec")
    record["spec"] = spec
    return record


@dataclass(frozen=True)
class Lift:
    full_name: str
    # The field the lift creates: a released version without it is in the old shape and gets lifted.
    creates: str
    apply: Callable[[dict[str, Any]], dict[str, Any]]


LIFTS: dict[str, Lift] = {
    lift.full_name: lift
    for lift in (
        Lift("spotreel.v1.SubmitJob", "spec", nest_render_spec),
        Lift("spotreel.v1.JobSubmitted", "spec", nest_render_spec),
        Lift("spotreel.v1.WorkAssigned", "spec", nest_render_spec),
        Lift("spotreel.v1.CreateSchedule", "spec", nest_render_spec),
        Lift("spotreel.v1.ScheduleCreated", "spec", nest_render_spec),
    )
}


def has_field(schema: Any, name: str) -> bool:
    return any(f["name"] == name for f in schema["fields"])


def complete(record: dict[str, Any], current: Any) -> dict[str, Any]:
    """The lifted record with exactly the current schema's fields: a missing one gets its default."""
    out: dict[str, Any] = {}
    for field in current["fields"]:
        name = field["name"]
        if name in record:
            out[name] = record.pop(name)
        elif "default" in field:
            default = field["default"]
            out[name] = list(default) if isinstance(default, list) else dict(default) if isinstance(default, dict) else default
        else:
            raise KeyError(f"{current['name']}.{name}: not in the lifted record and no default")
    if record:
        raise KeyError(f"{current['name']}: the lift left fields the current schema lacks: {sorted(record)}")
    return out
