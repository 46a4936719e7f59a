"""The lift of records written before RenderSpec (codec/upcast.py): every released flat version of SubmitJob,
JobSubmitted and WorkAssigned must decode to the message the same bytes decoded to before the change (the
flat fields read with the last flat schema, which was current then), with its video nested in `spec`."""

from __future__ import annotations

import dataclasses
import importlib.util
import typing
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest
from fastavro import schemaless_reader, schemaless_writer

from spotreel.codec import Codec
from spotreel.codec.codec import MARKER
from spotreel.codec.compat import _sample, check_schemas, lift_problems
from spotreel.codec.errors import CodecError
from spotreel.codec.registry import SchemaRegistry
from spotreel.codec.upcast import LIFTS, RENDER_SPEC_FIELDS, Lift, nest_render_spec
from spotreel.domain import commands as c
from spotreel.domain import events as ev
from spotreel.domain.spec import SPEC_FIELDS, RenderSpec

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
CODEC = Codec.default()
REGISTRY = CODEC.registry
CARRIERS = {"spotreel.v1.SubmitJob": c.SubmitJob, "spotreel.v1.JobSubmitted": ev.JobSubmitted,
            "spotreel.v1.WorkAssigned": ev.WorkAssigned, "spotreel.v1.CreateSchedule": c.CreateSchedule,
            "spotreel.v1.ScheduleCreated": ev.ScheduleCreated}
FLAT = [(name, entry) for name in CARRIERS for entry in REGISTRY.released[name]
        if not any(f["name"] == "spec" for f in entry.schema["fields"])]


def test_the_lift_knows_the_spec_the_domain_defines() -> None:
    assert RENDER_SPEC_FIELDS == SPEC_FIELDS
    assert set(LIFTS) == set(CARRIERS)


def test_the_flat_versions_are_the_ones_the_docs_name() -> None:
    assert sorted((n.rsplit(".", 1)[1], e.version) for n, e in FLAT) == [
        ("CreateSchedule", 1), ("CreateSchedule", 2), ("CreateSchedule", 3),
        ("JobSubmitted", 1), ("JobSubmitted", 2), ("JobSubmitted", 3),
        ("ScheduleCreated", 1), ("ScheduleCreated", 2), ("ScheduleCreated", 3),
        ("SubmitJob", 1), ("SubmitJob", 2), ("SubmitJob", 3),
        ("WorkAssigned", 1), ("WorkAssigned", 2)]


def _written(entry: Any, record: dict[str, Any]) -> bytes:
    out = BytesIO()
    out.write(MARKER + entry.fingerprint)
    schemaless_writer(out, entry.schema, record, disable_tuple_notation=True)
    return out.getvalue()


def _as_before(name: str, data: bytes) -> Any:
    """What the codec decoded these bytes to before RenderSpec: read with the last flat version (the current
    schema then), and the flat fields built into the message the way the dataclass has them now."""
    last_flat = [e for n, e in FLAT if n == name][-1]
    writer = next(e for n, e in FLAT if n == name and e.fingerprint == data[2:10])
    flat = schemaless_reader(BytesIO(data[10:]), writer.schema, last_flat.schema)
    cls = CARRIERS[name]
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {"spec": RenderSpec.from_flat(flat)}
    for f in dataclasses.fields(cls):
        if f.name == "spec":
            continue
        value = flat[f.name] if f.name in flat else f.default
        kwargs[f.name] = tuple(value) if typing.get_origin(hints[f.name]) is tuple else value
    return cls(**kwargs)


@pytest.mark.parametrize(("name", "entry"), FLAT, ids=lambda v: getattr(v, "source", v))
@pytest.mark.parametrize("k", range(6))
def test_every_flat_version_decodes_to_the_same_message_nested(name: str, entry: Any, k: int) -> None:
    named = dict(entry.schema.get("__named_schemas", {}))
    record = _sample(entry.schema, named, k, 0)
    data = _written(entry, record)
    message = CODEC.decode_message(data)
    assert type(message) is CARRIERS[name]
    assert message == _as_before(name, data)
    for field in SPEC_FIELDS:  # the video's values, where the writer had them; a later option is null
        assert getattr(message.spec, field) == record.get(field), field
    # And the dict API gives the current shape: exactly today's fields, spec nested.
    full_name, decoded = CODEC.decode(data)
    assert full_name == name
    assert list(decoded) == [f["name"] for f in REGISTRY.current[name].schema["fields"]]
    assert decoded["spec"] == {f: record.get(f) for f in SPEC_FIELDS}
    # Written again today, it carries the current fingerprint and decodes to itself.
    again = CODEC.encode_message(message)
    assert again[2:10] == REGISTRY.current[name].fingerprint and CODEC.decode_message(again) == message


def test_a_real_v1_submit_decodes_with_its_values_in_spec() -> None:
    v1 = REGISTRY.released["spotreel.v1.SubmitJob"][0]
    flat = {"command_id": "c1", "job_id": "j1", "tenant": "acme", "idempotency_key": "k", "request_hash": "h",
            "model": "tiny-t2v", "gpu_type": "h100", "prompt": "a red fox in snow", "duration_s": 4.0,
            "resolution": "512x512", "fps": 8, "seed": 7, "num_steps": 20}
    record = {f["name"]: flat.get(f["name"], f.get("default")) for f in v1.schema["fields"]}
    message = CODEC.decode_message(_written(v1, record))
    assert message == c.SubmitJob(
        command_id="c1", job_id="j1", tenant="acme", idempotency_key="k", request_hash="h", gpu_type="h100",
        spec=RenderSpec(model="tiny-t2v", prompt="a red fox in snow", duration_s=4.0, resolution="512x512",
                        fps=8, seed=7, num_steps=20))


def test_nest_render_spec_moves_exactly_the_video_fields() -> None:
    record = {"job_id": "j", "model": "m", "prompt": "p", "duration_s": 1.0, "resolution": "8x8", "fps": 8,
              "seed": 1, "num_steps": 2, "sampler": "ddim", "priority": 3}
    assert nest_render_spec(record) == {
        "job_id": "j", "priority": 3,
        "spec": {"model": "m", "prompt": "p", "duration_s": 1.0, "resolution": "8x8", "fps": 8, "seed": 1,
                 "num_steps": 2, "guidance_scale": None, "negative_prompt": None, "sampler": "ddim",
                 "input_image": None}}
    with pytest.raises(KeyError):
        nest_render_spec({"model": "m"})  # a required video field missing: not a flat carrier


def test_the_check_finds_a_lift_that_does_not_reach_the_current_shape() -> None:
    name = "spotreel.v1.JobSubmitted"
    current, old = REGISTRY.current[name], REGISTRY.released[name][0]
    before = REGISTRY.released[name][2]
    assert lift_problems(current.schema, old.schema, before.schema, LIFTS[name]) == []
    no_op = Lift(name, "spec", lambda r: r)
    assert lift_problems(current.schema, old.schema, before.schema, no_op)


def test_the_repo_check_passes_and_reports_the_lifted_versions() -> None:
    reports = {r.full_name: r for r in check_schemas()}
    assert all(r.ok for r in reports.values())
    assert reports["spotreel.v1.WorkAssigned"].lifted == ((1, 2), (2, 2))
    assert reports["spotreel.v1.SubmitJob"].lifted == ((1, 3), (2, 3), (3, 3))
    assert reports["spotreel.v1.CreateSchedule"].lifted == ((1, 3), (2, 3), (3, 3))
    assert reports["spotreel.v1.ScheduleCreated"].lifted == ((1, 3), (2, 3), (3, 3))


def test_a_body_the_lift_cannot_take_is_one_codec_error() -> None:
    name = "spotreel.v1.WorkAssigned"
    entry = REGISTRY.released[name][0]
    plan = REGISTRY.plans[entry.fingerprint]
    assert plan.lift is not None
    broken = SchemaRegistry(REGISTRY.current, REGISTRY.released)
    broken.plans[entry.fingerprint] = dataclasses.replace(plan, lift=lambda r: {**r, "unexpected": 1})
    record = _sample(entry.schema, dict(entry.schema.get("__named_schemas", {})), 0, 0)
    with pytest.raises(CodecError) as err:
        Codec(broken).decode(_written(entry, record))
    assert err.value.reason == "bad_body" and "lift" in err.value.detail


def test_decode_example_lifts_as_the_codec_does() -> None:
    spec = importlib.util.spec_from_file_location("decode_example", REPO / "schemas" / "decode_example.py")
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    table = example.load()
    for name, entry in FLAT:
        record = _sample(entry.schema, dict(entry.schema.get("__named_schemas", {})), 1, 0)
        data = _written(entry, record)
        got_name, got = example.decode(data, table)
        assert got_name == name.rsplit(".", 1)[1] or got_name == name
        assert got["spec"] == CODEC.decode(data)[1]["spec"]
        assert set(got) - {"spec"} <= set(CODEC.decode(data)[1])
