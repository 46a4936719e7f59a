"""Decode a spotreel Kafka record value with nothing but this directory and fastavro.

    python decode_example.py RECORD_FILE          # the raw value bytes of one Kafka record
    python decode_example.py - < RECORD_FILE
    python decode_example.py --hex c301...        # the same bytes, hex-encoded

Prints the record's schema name and its fields as JSON. Deliberately standalone (no spotreel imports):
it is the proof that any consumer holding schemas/ can read the topics.

Each value is Avro single-object encoded: C3 01, then the 8-byte little-endian CRC-64-AVRO fingerprint of
the writer schema's Parsing Canonical Form, then the Avro binary body. Older records may carry the
fingerprint of a version under released/; they are read with the current schema of the same name,
except a record written before its video's fields moved into the nested `spec` (RenderSpec: SubmitJob and
JobSubmitted up to v3, WorkAssigned up to v2). Avro resolution would drop those flat fields, so such a
record is read with the newest released version of its own (flat) shape and the fields are then moved
into `spec`, as spotreel's codec does (libs/spotreel/codec/upcast.py; README.md, "RenderSpec").
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import fastavro
from fastavro.schema import fingerprint, to_parsing_canonical_form

HERE = Path(__file__).resolve().parent


def _fields(schema: dict) -> dict[str, dict]:
    return {f["name"]: f for f in schema["fields"]}


def _version(path: Path) -> int:
    return int(path.name.rsplit(".v", 1)[1].removesuffix(".avsc"))


def load(schema_dir: Path = HERE) -> dict[bytes, tuple[dict, dict, tuple[str, ...]]]:
    """fingerprint -> (writer schema, reader schema, the fields to move into `spec` after reading)."""
    current = {}
    for path in sorted(schema_dir.glob("*.avsc")):
        schema = fastavro.parse_schema(json.loads(path.read_text(encoding="utf-8")))
        current[schema["name"]] = schema
    released = sorted(schema_dir.glob("released/*.avsc"), key=lambda p: (p.name.rsplit(".v", 1)[0], _version(p)))
    flat_last = {}  # name -> the newest released version without `spec`, where the current schema has one
    for path in released:
        schema = fastavro.parse_schema(json.loads(path.read_text(encoding="utf-8")))
        if "spec" in _fields(current.get(schema["name"], schema)) and "spec" not in _fields(schema):
            flat_last[schema["name"]] = schema
    table = {}
    for path in released + sorted(schema_dir.glob("*.avsc")):
        writer = fastavro.parse_schema(json.loads(path.read_text(encoding="utf-8")))
        key = bytes.fromhex(fingerprint(to_parsing_canonical_form(writer), "CRC-64-AVRO"))
        reader = current.get(writer["name"], writer)
        nest: tuple[str, ...] = ()
        if "spec" in _fields(reader) and "spec" not in _fields(writer):
            nest = tuple(_fields(_fields(reader)["spec"]["type"]))
            reader = flat_last[writer["name"]]
        table[key] = (writer, reader, nest)
    return table


def decode(value: bytes, table: dict[bytes, tuple[dict, dict, tuple[str, ...]]]) -> tuple[str, dict]:
    if value[:2] != b"\xc3\x01" or len(value) < 10:
        raise ValueError("not an Avro single-object encoded record")
    found = table.get(bytes(value[2:10]))
    if found is None:
        raise ValueError(f"unknown writer schema fingerprint {bytes(value[2:10]).hex()}")
    writer, reader, nest = found
    record = fastavro.schemaless_reader(io.BytesIO(value[10:]), writer, reader)
    if nest:  # written flat, before RenderSpec: the video's fields move into `spec`
        record["spec"] = {name: record.pop(name, None) for name in nest}
    return reader["name"], record


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--hex":
        value = bytes.fromhex(argv[1])
    elif len(argv) == 1:
        value = sys.stdin.buffer.read() if argv[0] == "-" else Path(argv[0]).read_bytes()
    else:
        print(__doc__, file=sys.stderr)
        return 2
    name, record = decode(value, load())
    as_text = lambda v: v.hex() if isinstance(v, bytes) else str(v)  # noqa: E731 (bytes fields, for JSON)
    print(json.dumps({"schema": name, "record": record}, default=as_text, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
