"""Decode a spotreel Kafka record value with nothing but this directory and fastavro.

    python decode_example.py RECORD_FILE          # the raw value bytes of one Kafka record
    python decode_example.py - < RECORD_FILE
    python decode_example.py --hex c301...        # the same bytes, hex-encoded

Prints the record's schema name and its fields as JSON. Deliberately standalone (no spotreel imports):
it is the proof that any consumer holding schemas/ can read the topics.

Each value is Avro single-object encoded: C3 01, then the 8-byte little-endian CRC-64-AVRO fingerprint of
the writer schema's Parsing Canonical Form, then the Avro binary body. Older records may carry the
fingerprint of a version under released/; they are read with the current schema of the same name.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import fastavro
from fastavro.schema import fingerprint, to_parsing_canonical_form

HERE = Path(__file__).resolve().parent


def load(schema_dir: Path = HERE) -> dict[bytes, tuple[dict, dict]]:
    """fingerprint -> (writer schema, reader schema)."""
    current = {}
    for path in sorted(schema_dir.glob("*.avsc")):
        schema = fastavro.parse_schema(json.loads(path.read_text(encoding="utf-8")))
        current[schema["name"]] = schema
    table = {}
    for path in sorted(schema_dir.glob("released/*.avsc")) + sorted(schema_dir.glob("*.avsc")):
        writer = fastavro.parse_schema(json.loads(path.read_text(encoding="utf-8")))
        key = bytes.fromhex(fingerprint(to_parsing_canonical_form(writer), "CRC-64-AVRO"))
        table[key] = (writer, current.get(writer["name"], writer))
    return table


def decode(value: bytes, table: dict[bytes, tuple[dict, dict]]) -> tuple[str, dict]:
    if value[:2] != b"\xc3\x01" or len(value) < 10:
        raise ValueError("not an Avro single-object encoded record")
    found = table.get(bytes(value[2:10]))
    if found is None:
        raise ValueError(f"unknown writer schema fingerprint {bytes(value[2:10]).hex()}")
    writer, reader = found
    return reader["name"], fastavro.schemaless_reader(io.BytesIO(value[10:]), writer, reader)


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
