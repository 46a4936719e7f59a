"""The .avsc files and the message dataclasses must agree field by field, since the codec maps one onto the
other generically and outside consumers read the topics with the .avsc files alone."""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from pathlib import Path

import fastavro
import pytest

from spotreel.domain import commands, events
from spotreel.domain.spec import RenderSpec

pytestmark = pytest.mark.unit

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
MESSAGES = (*commands.ALL_COMMANDS, *events.ALL_EVENTS)


def _avro_type(t: object) -> object:
    simple = {str: "string", int: "long", float: "double", bool: "boolean"}
    if t in simple:
        return simple[t]
    if typing.get_origin(t) in (typing.Union, types.UnionType):
        (inner,) = [a for a in typing.get_args(t) if a is not type(None)]
        return ["null", _avro_type(inner)]
    if typing.get_origin(t) is tuple and typing.get_args(t) == (str, Ellipsis):
        return {"type": "array", "items": "string"}
    if t is RenderSpec:  # the one nested record, defined inline (checked field by field in _check_record)
        return "record RenderSpec"
    raise AssertionError(f"field type {t!r} is not allowed in a message")


def _check_record(schema: dict, cls: type) -> None:
    assert schema["type"] == "record"
    assert schema["name"] == cls.__name__
    assert schema["namespace"] == "spotreel.v1"
    hints = typing.get_type_hints(cls)
    fields = dataclasses.fields(cls)
    assert [f["name"] for f in schema["fields"]] == [f.name for f in fields]
    for spec, field in zip(schema["fields"], fields, strict=True):
        want_type = _avro_type(hints[field.name])
        if want_type == "record RenderSpec":
            _check_record(spec["type"], RenderSpec)
            assert "default" not in spec, "spec has no default: a record without it is lifted (codec/upcast.py)"
            continue
        assert spec["type"] == want_type, field.name
        if isinstance(spec["type"], list):
            assert "default" in spec and spec["default"] is None, f"{field.name} needs default null"
        if field.default is not dataclasses.MISSING:
            want = list(field.default) if isinstance(field.default, tuple) else field.default
            assert spec.get("default", "<none>") == want, field.name


def _load(cls: type) -> dict:
    return json.loads((SCHEMAS / f"{cls.__name__}.avsc").read_text())


@pytest.mark.parametrize("cls", MESSAGES, ids=lambda c: c.__name__)
def test_schema_matches_dataclass(cls: type) -> None:
    schema = _load(cls)
    _check_record(schema, cls)
    fastavro.parse_schema(schema)


def test_every_carrier_holds_the_same_render_spec() -> None:
    """RenderSpec is defined inline in each file that carries it (each file stands alone, registry.py), and
    every copy is the same definition, docs included, so it is one type under one name."""
    carriers = {cls.__name__: cls for cls in (*MESSAGES, *events.SCHEDULER_RECORDS)
                if any(typing.get_type_hints(cls)[f.name] is RenderSpec for f in dataclasses.fields(cls))}
    assert set(carriers) == {"SubmitJob", "JobSubmitted", "WorkAssigned", "CreateSchedule", "ScheduleCreated"}
    copies = [next(f["type"] for f in _load(cls)["fields"] if f["name"] == "spec") for cls in carriers.values()]
    assert all(copy == copies[0] for copy in copies)


@pytest.mark.parametrize("cls", MESSAGES, ids=lambda c: c.__name__)
def test_messages_are_frozen(cls: type) -> None:
    assert dataclasses.is_dataclass(cls)
    assert cls.__dataclass_params__.frozen


def test_every_message_has_exactly_one_schema_file() -> None:
    # Adapters may add records of their own (a dead-letter wrapper, say); every domain message needs one.
    names = [p.stem for p in SCHEMAS.glob("*.avsc")]
    assert {c.__name__ for c in MESSAGES} <= set(names)
    assert len(names) == len(set(names))


def test_job_commands_and_events_carry_the_common_fields() -> None:
    for cls in commands.JOB_COMMANDS:
        names = [f.name for f in dataclasses.fields(cls)]
        assert names[:2] == ["command_id", "job_id"], cls
    for cls in commands.WORKER_COMMANDS:
        names = {f.name for f in dataclasses.fields(cls)}
        assert {"epoch", "worker_id"} <= names, cls
    for cls in events.JOB_EVENTS:
        names = [f.name for f in dataclasses.fields(cls)]
        assert names[:4] == ["job_id", "version", "at_ms", "causation_id"], cls
    for cls in events.SCHEDULE_EVENTS:
        names = [f.name for f in dataclasses.fields(cls)]
        assert names[:4] == ["schedule_id", "version", "at_ms", "causation_id"], cls
