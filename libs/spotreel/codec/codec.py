"""Avro single-object encoding for every record on Kafka.

    C3 01 | 8-byte little-endian CRC-64-AVRO fingerprint of the writer schema | Avro binary body

The fingerprint makes each record self-describing: any consumer holding schemas/ can find the writer
schema, and a record written under an older released schema is read with the current one.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Any, Iterable

from fastavro import schemaless_reader, schemaless_writer

from spotreel.codec.errors import CodecError
from spotreel.codec.mapping import DataclassMapping, MappingError, describe_schema_type, mapping_for
from spotreel.codec.registry import SchemaEntry, SchemaLoadError, SchemaRegistry
from spotreel.codec.upcast import complete
from spotreel.codec.validate import Check, compile_check

MARKER = b"\xc3\x01"
HEADER_SIZE = len(MARKER) + 8
MESSAGE_MODULES = ("spotreel.domain.commands", "spotreel.domain.events")
# Records in schemas/ that no domain dataclass mirrors: adapter-level envelopes such as the dead-letter
# record, which wraps bytes that by definition did not decode as a message.
NON_MESSAGE_SCHEMAS = frozenset({"spotreel.v1.DeadLetteredCommand"})


@dataclass(frozen=True)
class _Writer:
    entry: SchemaEntry
    header: bytes
    check: Check
    short_name: str


def domain_messages(modules: Iterable[str] = MESSAGE_MODULES) -> list[type]:
    """Every dataclass defined in the domain's command and event modules (each one is a message)."""
    found: list[type] = []
    for module_name in modules:
        module = importlib.import_module(module_name)
        for value in vars(module).values():
            if isinstance(value, type) and value.__module__ == module_name and dataclasses.is_dataclass(value):
                found.append(value)
    return found


def mapping_drift(mapping: DataclassMapping, entry: SchemaEntry) -> list[str]:
    """How a dataclass and its schema disagree (names, order, types, defaults); empty when they match."""
    schema_fields = entry.schema["fields"]
    problems: list[str] = []
    class_names = [f.name for f in mapping.fields]
    schema_names = [f["name"] for f in schema_fields]
    if class_names != schema_names:
        problems.append(f"fields differ: dataclass {class_names} vs schema {schema_names}")
        return problems
    defaults = {f.name: f for f in dataclasses.fields(mapping.cls)}
    for spec, field in zip(mapping.fields, schema_fields):
        schema_type = describe_schema_type(field["type"])
        if spec.avro_type != schema_type:
            problems.append(f"{spec.name}: dataclass maps to {spec.avro_type}, schema says {schema_type}")
        elif isinstance(spec.hint, type) and dataclasses.is_dataclass(spec.hint) and isinstance(field["type"], dict):
            # A nested record (RenderSpec): its fields must match its dataclass too.
            nested = SchemaEntry(schema_type, b"", "", field["type"], None, entry.source, None)
            problems += [f"{spec.name}.{p}" for p in mapping_drift(mapping_for(spec.hint), nested)]
        # A schema default without a dataclass default is fine (optionals default to null in the schema
        # even where Python's field order forbids a default); the reverse would mean a field that old
        # writers lack and the schema cannot fill in.
        dc_default = defaults[spec.name].default
        if dc_default is dataclasses.MISSING:
            continue
        if "default" not in field:
            problems.append(f"{spec.name}: the dataclass has a default, the schema has none")
        elif _avro_default(dc_default) != field["default"]:
            problems.append(f"{spec.name}: default {dc_default!r} vs schema default {field['default']!r}")
    return problems


def _avro_default(value: Any) -> Any:
    # Compare like for like with the JSON default in the .avsc.
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, (tuple, frozenset)):
        return [_avro_default(v) for v in value]
    return value


class Codec:
    """Encode and decode records; thread-safe after construction (it only reads its tables)."""

    def __init__(self, registry: SchemaRegistry, messages: Iterable[type] = ()) -> None:
        self.registry = registry
        self._plans = registry.plans
        self._writers: dict[str, _Writer] = {}
        for entry in registry.current.values():
            short_name = entry.full_name.rsplit(".", 1)[-1]
            header = MARKER + entry.fingerprint
            self._writers[entry.full_name] = _Writer(entry, header, compile_check(entry.schema), short_name)
        for name in {w.short_name for w in self._writers.values()}:
            same = [w for w in self._writers.values() if w.short_name == name]
            if len(same) == 1:
                self._writers.setdefault(name, same[0])
        self._by_class: dict[type, tuple[DataclassMapping, _Writer]] = {}
        self._by_name: dict[str, DataclassMapping] = {}
        for cls in messages:
            self._register(cls)

    def _register(self, cls: type) -> None:
        try:
            mapping = mapping_for(cls)
        except MappingError as exc:
            raise SchemaLoadError(f"{getattr(cls, '__name__', cls)}: {exc}") from exc
        writer = self._writers.get(mapping.full_name)
        if writer is None:
            raise SchemaLoadError(f"{mapping.full_name}: a message class with no schema in schemas/")
        drift = mapping_drift(mapping, writer.entry)
        if drift:
            raise SchemaLoadError(f"{mapping.full_name} does not match its schema: " + "; ".join(drift))
        self._by_class[cls] = (mapping, writer)
        self._by_name[mapping.full_name] = mapping

    @classmethod
    def default(cls, schema_dir: Path | str | None = None) -> Codec:
        """The codec every service uses: all schemas in schemas/ plus the domain's commands and events."""
        return cls(SchemaRegistry.load(schema_dir), domain_messages())

    @property
    def message_classes(self) -> tuple[type, ...]:
        return tuple(self._by_class)

    # -- dicts ---------------------------------------------------------------------------------------

    def encode(self, name_or_message: str | type, record: Any) -> bytes:
        """Encode `record` (a dict) under the current schema named by full/short name or message class."""
        if isinstance(name_or_message, str):
            writer = self._writers.get(name_or_message)
        else:
            found = self._by_class.get(name_or_message)
            writer = found[1] if found is not None else None
        if writer is None:
            raise CodecError("unknown_record", f"no schema for {name_or_message!r}")
        return self._write(writer, record)

    def _write(self, writer: _Writer, record: Any) -> bytes:
        problem = writer.check(record)
        if problem is not None:
            path, message = problem
            where = f"{writer.short_name}.{path}" if path else writer.short_name
            raise CodecError("invalid_record", f"{where}: {message}")
        out = BytesIO()
        out.write(writer.header)
        try:
            # Tuple notation off: otherwise a tuple in a union slot is read as (branch name, value).
            schemaless_writer(out, writer.entry.schema, record, disable_tuple_notation=True)
        except Exception as exc:  # the check above should make this unreachable; keep the one-error promise
            raise CodecError("invalid_record", f"{writer.short_name}: {type(exc).__name__}: {exc}") from exc
        return out.getvalue()

    def decode(self, data: Any) -> tuple[str, dict[str, Any]]:
        """(record full name, record dict) read with the current schema of that name."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise CodecError("not_bytes", f"expected bytes, got {type(data).__name__}")
        size = len(data)
        if data[:2] != MARKER:
            if size < 2 and MARKER.startswith(bytes(data)):
                raise CodecError("truncated", f"{size} bytes, shorter than the header")
            raise CodecError("bad_marker", f"starts with {bytes(data[:2]).hex()}, not c301")
        if size < HEADER_SIZE:
            raise CodecError("truncated", f"{size} bytes, shorter than the {HEADER_SIZE}-byte header")
        fingerprint = bytes(data[2:HEADER_SIZE])
        plan = self._plans.get(fingerprint)
        if plan is None:
            raise CodecError("unknown_schema", f"no schema has fingerprint {fingerprint.hex()}")
        body = BytesIO(data)
        body.seek(HEADER_SIZE)
        try:
            record = schemaless_reader(body, plan.writer, plan.reader)
        except Exception as exc:  # fastavro raises whatever the bad bytes provoke; there is one error out
            # A short read is not always an EOFError (a cut-off double surfaces as IndexError), but it
            # always leaves the reader at the end of the input.
            if isinstance(exc, EOFError) or body.tell() >= size:
                detail = f"{plan.full_name} body ends early: {type(exc).__name__}: {exc}"
                raise CodecError("truncated", detail) from exc
            raise CodecError("bad_body", f"{plan.full_name}: {type(exc).__name__}: {exc}") from exc
        if body.tell() != size:
            raise CodecError("bad_body", f"{plan.full_name}: {size - body.tell()} bytes after the record")
        if plan.lift is not None:  # written before a lift (upcast.py): the old shape, lifted to today's
            try:
                record = complete(plan.lift(record), plan.complete_to)  # type: ignore[arg-type]
            except Exception as exc:  # a lift that cannot take this record: the one error out
                raise CodecError("bad_body", f"{plan.full_name}: lift: {type(exc).__name__}: {exc}") from exc
        # A record schema reads to a dict; fastavro's signature names every Avro value it could read.
        return plan.full_name, record  # type: ignore[return-value]

    # -- dataclasses -----------------------------------------------------------------------------------

    def encode_message(self, message: Any) -> bytes:
        found = self._by_class.get(type(message))
        if found is None:
            raise CodecError("not_a_message", f"{type(message).__name__} is not a registered message class")
        mapping, writer = found
        try:
            record = mapping.to_record(message)
        except Exception as exc:  # e.g. a nested field holding the wrong kind of object
            raise CodecError("invalid_record", f"{writer.short_name}: {type(exc).__name__}: {exc}") from exc
        return self._write(writer, record)

    def decode_message(self, data: Any) -> Any:
        name, record = self.decode(data)
        mapping = self._by_name.get(name)
        if mapping is None:
            raise CodecError("not_a_message", f"{name} decodes, but is not a registered message class")
        try:
            # _register verified that this schema's fields are the class's fields, name for name.
            return mapping.from_record(record, exact_fields=True)
        except Exception as exc:  # a constructor that validates may refuse what the bytes say
            raise CodecError("bad_body", f"{name}: {type(exc).__name__}: {exc}") from exc
