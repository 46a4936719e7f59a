"""Every domain command and event through the real codec and the real schemas/: round trips with generated
values, and no drift between the dataclasses and the .avsc files in either direction."""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spotreel.codec import NON_MESSAGE_SCHEMAS, Codec, CodecError, domain_messages
from spotreel.codec.codec import mapping_drift
from spotreel.codec.mapping import mapping_for
from tests.harness.hypothesis_profiles import examples

pytestmark = pytest.mark.unit

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
MESSAGES = domain_messages()
CODEC = Codec.default()

LONGS = st.integers(min_value=-(2**63), max_value=2**63 - 1)


def strategy_for(hint: Any) -> st.SearchStrategy[Any]:
    """Values of a message field type, over the whole range its Avro type can carry."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        (inner,) = [a for a in typing.get_args(hint) if a is not type(None)]
        return st.none() | strategy_for(inner)
    if typing.get_origin(hint) is tuple:
        item, _ = typing.get_args(hint)
        return st.lists(strategy_for(item), max_size=5).map(tuple)
    simple: dict[Any, st.SearchStrategy[Any]] = {
        str: st.text(),
        int: LONGS,
        # NaN round-trips bit for bit but never compares equal; test_codec covers it separately.
        float: st.floats(allow_nan=False),
        bool: st.booleans(),
        bytes: st.binary(),
    }
    if hint in simple:
        return simple[hint]
    if dataclasses.is_dataclass(hint):  # a nested record (RenderSpec)
        return messages_of(hint)
    raise AssertionError(f"no strategy for message field type {hint!r}")


def messages_of(cls: type) -> st.SearchStrategy[Any]:
    hints = typing.get_type_hints(cls)
    return st.builds(cls, **{f.name: strategy_for(hints[f.name]) for f in dataclasses.fields(cls)})


def test_the_domain_has_messages() -> None:
    names = {cls.__name__ for cls in MESSAGES}
    assert {"SubmitJob", "RenewLease", "CompleteJob", "JobSubmitted", "JobLeased", "CommandRejected"} <= names
    assert set(CODEC.message_classes) == set(MESSAGES)


@pytest.mark.parametrize("cls", MESSAGES, ids=lambda c: c.__name__)
def test_message_round_trips(cls: type) -> None:
    @settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(message=messages_of(cls))
    def round_trip(message: Any) -> None:
        data = CODEC.encode_message(message)
        back = CODEC.decode_message(data)
        assert type(back) is cls
        assert back == message
        assert hash(back) == hash(message)
        assert dataclasses.replace(back) == message  # behaves as if built through __init__
        assert CODEC.encode_message(back) == data  # canonical: equal messages, equal bytes

    round_trip()


@pytest.mark.parametrize("cls", MESSAGES, ids=lambda c: c.__name__)
def test_dataclass_and_schema_agree(cls: type) -> None:
    path = SCHEMAS / f"{cls.__name__}.avsc"
    assert path.is_file(), f"{cls.__name__} has no {path.name}"
    entry = CODEC.registry.current[f"spotreel.v1.{cls.__name__}"]
    assert entry.source == path.name
    mapping = mapping_for(cls)
    assert [f["name"] for f in entry.schema["fields"]] == [f.name for f in dataclasses.fields(cls)]
    assert mapping_drift(mapping, entry) == []
    assert cls.__dataclass_params__.frozen  # type: ignore[attr-defined]


def test_every_schema_is_a_message_or_listed_as_not_one() -> None:
    message_names = {f"spotreel.v1.{cls.__name__}" for cls in MESSAGES}
    on_disk = {}
    for path in SCHEMAS.glob("*.avsc"):
        raw = json.loads(path.read_text())
        on_disk[f"{raw['namespace']}.{raw['name']}"] = path.name
    orphans = set(on_disk) - message_names - NON_MESSAGE_SCHEMAS
    assert not orphans, f"schemas without a dataclass (and not listed in NON_MESSAGE_SCHEMAS): {sorted(orphans)}"
    assert NON_MESSAGE_SCHEMAS <= set(on_disk)
    for name, file in on_disk.items():
        assert file == name.rsplit(".", 1)[-1] + ".avsc", f"{file} holds {name}"


def test_dead_letter_record_holds_arbitrary_bytes() -> None:
    poison = b"\xc3\x01" + b"\x00" * 8 + b"garbage"
    record = {
        "reason": "unknown_schema",
        "detail": "no schema has fingerprint 0000000000000000",
        "source_topic": "spotreel.commands",
        "source_partition": 2,
        "source_offset": 12345,
        "original_key": b"job-1",
        "original": poison,
        "at_ms": 1_700_000_000_000,
    }
    name, back = CODEC.decode(CODEC.encode("DeadLetteredCommand", record))
    assert name == "spotreel.v1.DeadLetteredCommand"
    assert back == record
    with pytest.raises(CodecError) as info:
        CODEC.decode_message(CODEC.encode("DeadLetteredCommand", record))
    assert info.value.reason == "not_a_message"


@pytest.mark.parametrize("cls", MESSAGES, ids=lambda c: c.__name__)
def test_every_truncation_of_a_message_is_truncated(cls: type) -> None:
    @settings(max_examples=10, deadline=None)
    @given(message=messages_of(cls))
    def cut(message: Any) -> None:
        data = CODEC.encode_message(message)
        for n in range(len(data)):
            with pytest.raises(CodecError) as info:
                CODEC.decode_message(data[:n])
            assert info.value.reason == "truncated", n

    cut()
