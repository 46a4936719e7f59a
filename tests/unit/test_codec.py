"""The codec's machinery on test-only schemas (tests/unit/codec_fixtures): framing, the dataclass mapping for
every supported type, strict encoding, decoding records of an older released schema, and the one error type.
"""

from __future__ import annotations

import enum
import importlib.util
import io
import json
import re
import shutil
import struct
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spotreel.codec import HEADER_SIZE, MARKER, Codec, CodecError, SchemaLoadError, SchemaRegistry
from spotreel.codec.registry import fingerprint_of
from tests.harness.hypothesis_profiles import examples

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).parent / "codec_fixtures"
REPO = Path(__file__).resolve().parents[2]


class Status(enum.Enum):
    PENDING = "pending"
    SENT = "sent"
    LOST = "lost"


@dataclass(frozen=True)
class Address:
    city: str
    zip: str | None = None


@dataclass(frozen=True)
class Shipment:
    shipment_id: str
    status: Status
    origin: Address
    stops: tuple[Address, ...] = ()
    destination: Address | None = None
    weights: dict[str, float] | None = None
    tags: frozenset[str] = frozenset()
    payload: bytes = b""
    history: tuple[Status, ...] = ()
    count: int = 0
    fragile: bool = False


@dataclass(frozen=True)
class Ping:
    ping_id: str
    seq: int
    ratio: float
    ok: bool = True
    note: str | None = None
    hops: tuple[str, ...] = ()


@pytest.fixture(scope="module")
def registry() -> SchemaRegistry:
    return SchemaRegistry.load(FIXTURES)


@pytest.fixture(scope="module")
def codec(registry: SchemaRegistry) -> Codec:
    return Codec(registry, [Ping])


@pytest.fixture(scope="module")
def full_codec(registry: SchemaRegistry) -> Codec:
    return Codec(registry, [Ping, Shipment])


PING = Ping("p-1", 7, 0.5, note="hello", hops=("a", "b"))


def _rabin64(data: bytes) -> int:
    """CRC-64-AVRO as the Avro specification spells it out (section "Schema Fingerprints")."""
    empty = 0xC15D213AA4D7A795
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (empty & -(fp & 1))
        table.append(fp)
    fp = empty
    for byte in data:
        fp = (fp >> 8) ^ table[(fp ^ byte) & 0xFF]
    return fp


# -- framing -------------------------------------------------------------------------------------------


def test_frame_is_marker_fingerprint_body(codec: Codec, registry: SchemaRegistry) -> None:
    data = codec.encode_message(PING)
    entry = registry.current["spotreel.v1.Ping"]
    assert data[:2] == MARKER == b"\xc3\x01"
    assert data[2:HEADER_SIZE] == entry.fingerprint
    # Recomputed from the specification's algorithm, not fastavro's: little-endian on the wire.
    canonical = fastavro.schema.to_parsing_canonical_form(entry.raw)
    assert data[2:HEADER_SIZE] == struct.pack("<Q", _rabin64(canonical.encode()))
    body = fastavro.schemaless_reader(io.BytesIO(data[HEADER_SIZE:]), entry.schema)
    assert body["seq"] == 7 and body["hops"] == ["a", "b"]


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        # Apache Avro's published vectors (share/test/data/schema-tests.txt), as Java's signed longs.
        ("null", 7195948357588979594),
        ("int", 8247732601305521295),
        ({"type": "fixed", "name": "foo", "size": 15}, 1756455273707447556),
        ({"type": "record", "name": "foo", "fields": [{"name": "f1", "type": "boolean"}]}, 7843277075252814651),
    ],
)
def test_fingerprint_matches_avro_reference_vectors(schema: object, expected: int) -> None:
    _, wire = fingerprint_of(fastavro.parse_schema(schema))
    assert struct.unpack("<q", wire)[0] == expected


def test_dict_round_trip_and_lookup_by_short_name(codec: Codec) -> None:
    record = {"ping_id": "x", "seq": -1, "ratio": 2, "ok": False, "note": None, "hops": []}
    name, decoded = codec.decode(codec.encode("Ping", record))
    assert name == "spotreel.v1.Ping"
    assert decoded == {**record, "ratio": 2.0}
    assert codec.encode("spotreel.v1.Ping", record) == codec.encode(Ping, record)


def test_defaults_fill_missing_keys(codec: Codec) -> None:
    _, decoded = codec.decode(codec.encode("Ping", {"ping_id": "x", "seq": 1, "ratio": 1.0}))
    assert decoded == {"ping_id": "x", "seq": 1, "ratio": 1.0, "ok": True, "note": None, "hops": []}


def test_encoding_is_deterministic(codec: Codec) -> None:
    assert codec.encode_message(PING) == codec.encode_message(Ping(**PING.__dict__))


def test_nan_and_infinities_survive(codec: Codec) -> None:
    for value in (float("nan"), float("inf"), float("-inf"), -0.0):
        back = codec.decode_message(codec.encode_message(Ping("p", 1, value)))
        assert struct.pack("<d", back.ratio) == struct.pack("<d", value)


# -- dataclass mapping for every supported field type ----------------------------------------------------

addresses = st.builds(Address, city=st.text(), zip=st.none() | st.text())
shipments = st.builds(
    Shipment,
    shipment_id=st.text(),
    status=st.sampled_from(Status),
    origin=addresses,
    stops=st.lists(addresses, max_size=3).map(tuple),
    destination=st.none() | addresses,
    weights=st.none() | st.dictionaries(st.text(), st.floats(allow_nan=False), max_size=3),
    tags=st.frozensets(st.text(), max_size=4),
    payload=st.binary(),
    history=st.lists(st.sampled_from(Status), max_size=4).map(tuple),
    count=st.integers(-(2**63), 2**63 - 1),
    fragile=st.booleans(),
)


@settings(max_examples=examples(200), deadline=None)
@given(shipment=shipments)
def test_nested_dataclasses_round_trip(full_codec: Codec, shipment: Shipment) -> None:
    data = full_codec.encode_message(shipment)
    assert full_codec.decode_message(data) == shipment
    assert full_codec.encode_message(full_codec.decode_message(data)) == data


def test_frozenset_encodes_sorted_and_enums_by_member_name(full_codec: Codec) -> None:
    codec = full_codec
    shipment = Shipment("s", Status.SENT, Address("x"), tags=frozenset({"b", "c", "a"}), history=(Status.LOST,))
    _, record = codec.decode(codec.encode_message(shipment))
    assert record["tags"] == ["a", "b", "c"]
    assert record["status"] == "SENT" and record["history"] == ["LOST"]


def test_class_that_disagrees_with_its_schema_is_refused_at_construction(registry: SchemaRegistry) -> None:
    @dataclass(frozen=True)
    class Ping:  # noqa: F811 - same record name, wrong field type
        ping_id: str
        seq: float
        ratio: float
        ok: bool = True
        note: str | None = None
        hops: tuple[str, ...] = ()

    with pytest.raises(SchemaLoadError, match="seq: dataclass maps to double, schema says long"):
        Codec(registry, [Ping])

    @dataclass(frozen=True)
    class Unknown:
        x: str

    with pytest.raises(SchemaLoadError, match="no schema"):
        Codec(registry, [Unknown])


# -- strict encoding: a wrong value is refused, naming the field -------------------------------------------

GOOD = {"ping_id": "x", "seq": 1, "ratio": 1.0, "ok": True, "note": None, "hops": ["a"]}


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"seq": 1.5}, "Ping.seq: expected long"),  # fastavro alone would write 1
        ({"seq": True}, "Ping.seq: expected long"),  # ... and 1 here
        ({"seq": "1"}, "Ping.seq: expected long"),
        ({"seq": 2**63}, "Ping.seq: expected long"),
        ({"seq": None}, "Ping.seq: expected long"),
        ({"ratio": "1.0"}, "Ping.ratio: expected double"),
        ({"ok": "false"}, "Ping.ok: expected boolean"),  # fastavro alone would write true
        ({"ok": 1}, "Ping.ok: expected boolean"),
        ({"note": 5}, "Ping.note: expected one of [null, string]"),
        ({"hops": "ab"}, "Ping.hops: expected array"),  # fastavro alone would write ["a", "b"]
        ({"hops": ["a", 3]}, "Ping.hops[1]: expected string"),
        ({"ping_id": b"x"}, "Ping.ping_id: expected string"),
        ({"surprise": 1}, "Ping.surprise: not a field of Ping"),
    ],
)
def test_invalid_record_names_the_field(codec: Codec, change: dict, where: str) -> None:
    with pytest.raises(CodecError, match=f"^invalid_record: {re.escape(where)}") as info:
        codec.encode("Ping", {**GOOD, **change})
    assert info.value.reason == "invalid_record"


def test_missing_required_field_and_non_dict(codec: Codec) -> None:
    with pytest.raises(CodecError, match="Ping.seq: missing") as info:
        codec.encode("Ping", {"ping_id": "x", "ratio": 1.0})
    assert info.value.reason == "invalid_record"
    with pytest.raises(CodecError, match="expected record Ping"):
        codec.encode("Ping", ["not", "a", "dict"])


def test_nested_path_in_error(full_codec: Codec) -> None:
    codec = full_codec
    record = {"shipment_id": "s", "status": "SENT", "origin": {"city": "x"}, "stops": [{"city": "y"}, {"city": 3}]}
    with pytest.raises(CodecError, match=r"Shipment\.stops\[1\]\.city: expected string"):
        codec.encode("Shipment", record)
    with pytest.raises(CodecError, match=r"Shipment\.status: expected a symbol of enum Status"):
        codec.encode("Shipment", {**record, "stops": [], "status": "GONE"})


def test_dataclass_with_wrong_value_is_refused(codec: Codec) -> None:
    with pytest.raises(CodecError, match="Ping.seq: expected long, got float") as info:
        codec.encode_message(Ping("p", 1.5, 0.0))  # type: ignore[arg-type]
    assert info.value.reason == "invalid_record"


def test_unknown_names_and_classes(codec: Codec) -> None:
    with pytest.raises(CodecError) as info:
        codec.encode("Nope", {})
    assert info.value.reason == "unknown_record"
    with pytest.raises(CodecError) as info:
        codec.encode_message(Address("x"))
    assert info.value.reason == "not_a_message"
    shipment = codec.encode("Shipment", {"shipment_id": "s", "status": "SENT", "origin": {"city": "x"}})
    assert codec.decode(shipment)[0] == "spotreel.v1.Shipment"
    with pytest.raises(CodecError) as info:
        codec.decode_message(shipment)  # decodes, but no dataclass is registered for it here
    assert info.value.reason == "not_a_message"


# -- older released writers ---------------------------------------------------------------------------


def test_record_written_with_released_v1_reads_with_current_schema(registry: SchemaRegistry) -> None:
    v1 = registry.released["spotreel.v1.Shipment"][0]
    old_codec = Codec(SchemaRegistry.from_schemas([v1.raw]))
    old = old_codec.encode("Shipment", {"shipment_id": "s", "status": "SENT", "origin": {"city": "x"}, "count": 5})
    assert old[2:HEADER_SIZE] == v1.fingerprint != registry.current["spotreel.v1.Shipment"].fingerprint
    name, record = Codec(registry).decode(old)
    assert name == "spotreel.v1.Shipment"
    assert record == {
        "shipment_id": "s",
        "status": "SENT",
        "origin": {"city": "x", "zip": None},
        "stops": [],
        "destination": None,
        "weights": None,
        "tags": [],
        "payload": b"",
        "history": [],
        "count": 5,  # written as an Avro int, promoted to long
        "fragile": False,
    }


def test_released_schema_without_current_still_decodes(tmp_path: Path) -> None:
    (tmp_path / "released").mkdir()
    shutil.copy(FIXTURES / "released" / "Shipment.v1.avsc", tmp_path / "released" / "Shipment.v1.avsc")
    registry = SchemaRegistry.load(tmp_path)
    entry = registry.released["spotreel.v1.Shipment"][0]
    data = Codec(SchemaRegistry.from_schemas([entry.raw])).encode(
        "Shipment", {"shipment_id": "s", "status": "PENDING", "origin": {"city": "x"}}
    )
    assert Codec(registry).decode(data)[1]["status"] == "PENDING"


def test_default_package_registry_loads_the_repo_schemas() -> None:
    registry = SchemaRegistry.load()
    on_disk = {json.loads(p.read_text())["name"] for p in (REPO / "schemas").glob("*.avsc")}
    assert {name.rsplit(".", 1)[-1] for name in registry.current} == on_disk


def test_cross_file_references_are_refused(tmp_path: Path) -> None:
    (tmp_path / "A.avsc").write_text(json.dumps({"type": "record", "name": "A", "fields": [{"name": "b", "type": "B"}]}))
    with pytest.raises(SchemaLoadError, match="A.avsc"):
        SchemaRegistry.load(tmp_path)


def test_duplicate_record_names_are_refused(tmp_path: Path) -> None:
    for name in ("One.avsc", "Two.avsc"):
        shutil.copy(FIXTURES / "Ping.avsc", tmp_path / name)
    with pytest.raises(SchemaLoadError, match="both define spotreel.v1.Ping"):
        SchemaRegistry.load(tmp_path)


# -- one error type for anything a decoder can be handed -------------------------------------------------


def _decode_error(codec: Codec, data: object) -> CodecError:
    try:
        codec.decode(data)
    except CodecError as exc:
        return exc
    raise AssertionError(f"{data!r} decoded")


def test_truncation_at_every_length(codec: Codec) -> None:
    for data in (codec.encode_message(PING), codec.encode("Shipment", {"shipment_id": "s", "status": "SENT", "origin": {"city": "x"}})):
        for n in range(len(data)):
            assert _decode_error(codec, data[:n]).reason == "truncated", n


def _bit_flips(data: bytes, first: int, end: int) -> Iterator[bytes]:
    """`data` with one bit flipped, for every bit of the bytes first..end-1."""
    for byte in range(first, end):
        for bit in range(8):
            bad = bytearray(data)
            bad[byte] ^= 1 << bit
            yield bytes(bad)


def test_marker_bit_flips(codec: Codec) -> None:
    for bad in _bit_flips(codec.encode_message(PING), 0, 2):
        assert _decode_error(codec, bad).reason == "bad_marker"


def test_fingerprint_bit_flips_are_unknown_schemas(codec: Codec) -> None:
    for bad in _bit_flips(codec.encode_message(PING), 2, HEADER_SIZE):
        assert _decode_error(codec, bad).reason == "unknown_schema"


def test_body_bit_flips_raise_only_codec_error(codec: Codec) -> None:
    data = codec.encode_message(PING)
    for bad in _bit_flips(data, HEADER_SIZE, len(data)):
        try:
            codec.decode(bad)
        except CodecError as exc:
            assert exc.reason in ("truncated", "bad_body")


def test_trailing_bytes_and_non_bytes(codec: Codec) -> None:
    assert _decode_error(codec, codec.encode_message(PING) + b"\x00").reason == "bad_body"
    for value in (None, "c301", 12, [0xC3, 0x01]):
        assert _decode_error(codec, value).reason == "not_bytes"
    assert codec.decode(bytearray(codec.encode_message(PING)))[1]["seq"] == 7
    assert codec.decode(memoryview(codec.encode_message(PING)))[1]["seq"] == 7


def test_invalid_utf8_is_bad_body(codec: Codec) -> None:
    data = codec.encode_message(Ping("\u00e9", 1, 1.0))
    index = data.index("\u00e9".encode())
    bad = data[:index] + b"\xff\xfe" + data[index + 2 :]
    assert _decode_error(codec, bad).reason == "bad_body"


@settings(max_examples=examples(500), deadline=None)
@given(data=st.binary(max_size=64))
def test_random_bytes_raise_only_codec_error(codec: Codec, data: bytes) -> None:
    try:
        codec.decode(data)
    except CodecError:
        pass


@settings(max_examples=examples(500), deadline=None)
@given(body=st.binary(max_size=64), which=st.sampled_from(["spotreel.v1.Ping", "spotreel.v1.Shipment"]))
def test_random_bodies_behind_a_valid_header_raise_only_codec_error(
    codec: Codec, registry: SchemaRegistry, body: bytes, which: str
) -> None:
    try:
        codec.decode(MARKER + registry.current[which].fingerprint + body)
    except CodecError as exc:
        assert exc.reason in ("truncated", "bad_body")


def test_decode_message_refusal_by_constructor_is_bad_body(registry: SchemaRegistry) -> None:
    @dataclass(frozen=True)
    class Ping:  # noqa: F811 - a constructor that validates
        ping_id: str
        seq: int
        ratio: float
        ok: bool = True
        note: str | None = None
        hops: tuple[str, ...] = ()

        def __post_init__(self) -> None:
            if self.seq < 0:
                raise ValueError("seq must not be negative")

    codec = Codec(registry, [Ping])
    data = codec.encode("Ping", {**GOOD, "seq": -1})
    with pytest.raises(CodecError, match="seq must not be negative") as info:
        codec.decode_message(data)
    assert info.value.reason == "bad_body"


# -- the plain-consumer example -------------------------------------------------------------------------


def _example_module():
    spec = importlib.util.spec_from_file_location("decode_example", REPO / "schemas" / "decode_example.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def test_decode_example_reads_current_and_released_records(registry: SchemaRegistry) -> None:
    example = _example_module()
    table = example.load(FIXTURES)
    codec = Codec(registry, [Ping])
    assert example.decode(codec.encode_message(PING), table) == ("spotreel.v1.Ping", {**PING.__dict__, "hops": ["a", "b"]})
    v1 = registry.released["spotreel.v1.Shipment"][0]
    old = Codec(SchemaRegistry.from_schemas([v1.raw])).encode(
        "Shipment", {"shipment_id": "s", "status": "SENT", "origin": {"city": "x"}}
    )
    name, record = example.decode(old, table)
    assert name == "spotreel.v1.Shipment" and record["fragile"] is False and record["origin"]["zip"] is None


def test_decode_example_script_reads_a_domain_record(tmp_path: Path) -> None:
    codec = Codec.default()
    data = codec.encode(
        "DeadLetteredCommand",
        {"reason": "bad_marker", "source_topic": "commands", "source_partition": 3, "source_offset": 9,
         "original": b"\x00\xff", "at_ms": 1},
    )
    (tmp_path / "value.bin").write_bytes(data)
    # A bare interpreter would do; the venv's is used only because fastavro lives there.
    out = subprocess.run(
        [sys.executable, "-I", str(REPO / "schemas" / "decode_example.py"), str(tmp_path / "value.bin")],
        capture_output=True, text=True, check=True, cwd=tmp_path,
    )
    printed = json.loads(out.stdout)
    assert printed["schema"] == "spotreel.v1.DeadLetteredCommand"
    assert printed["record"]["original"] == "00ff" and printed["record"]["source_offset"] == 9
    hexed = subprocess.run(
        [sys.executable, "-I", str(REPO / "schemas" / "decode_example.py"), "--hex", data.hex()],
        capture_output=True, text=True, check=True, cwd=tmp_path,
    )
    assert json.loads(hexed.stdout) == printed
