"""Avro codec for every Kafka record: single-object framing, schema registry, dataclass mapping, and the
BACKWARD-compatibility check that guards schema changes."""

from spotreel.codec.codec import HEADER_SIZE, MARKER, NON_MESSAGE_SCHEMAS, Codec, domain_messages
from spotreel.codec.errors import CodecError
from spotreel.codec.registry import SchemaEntry, SchemaLoadError, SchemaRegistry

__all__ = [
    "HEADER_SIZE",
    "MARKER",
    "NON_MESSAGE_SCHEMAS",
    "Codec",
    "CodecError",
    "SchemaEntry",
    "SchemaLoadError",
    "SchemaRegistry",
    "domain_messages",
]
