"""Every schema the codec can read or write, keyed by record full name and by writer fingerprint.

Two sets are loaded from the schemas directory:

* the current schemas, `<Name>.avsc`: what we write, and the reader schema for everything we read;
* every released version, `released/<Name>.v<N>.avsc`: writer schemas only. Events are kept forever, so a
  record written under v1 must still decode after v5 ships; it is read with the current schema of the same
  full name as the reader (Avro schema resolution), which the compatibility check guarantees will work.
  A version older than a lift (upcast.py: fields moved into a nested record) is instead resolved against
  the newest released version of its own shape, lifted, and completed with the current schema's defaults.

Each file is one self-contained schema (no references to types defined in other files), so that the
fingerprint of a file covers every byte layout it describes and a plain consumer can parse each file alone.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from fastavro.schema import fingerprint as _fastavro_fingerprint
from fastavro.schema import parse_schema, to_parsing_canonical_form

from spotreel.codec.upcast import LIFTS, has_field

SCHEMA_PACKAGE = "spotreel.schemas"
RELEASED_DIR = "released"
_RELEASED_NAME = re.compile(r"^(?P<stem>.+)\.v(?P<version>[1-9][0-9]*)\.avsc$")


class SchemaLoadError(Exception):
    """A schema file is missing, unparsable, or clashes with another one. Raised at load time only."""


@dataclass(frozen=True)
class SchemaEntry:
    full_name: str
    fingerprint: bytes  # 8 bytes, little-endian CRC-64-AVRO of the Parsing Canonical Form
    canonical: str
    schema: Any  # fastavro-parsed
    raw: Any  # the JSON as written in the file, kept for the compatibility check and for `release`
    source: str  # file name, for reports
    version: int | None  # None for the current schema, N for released/<stem>.vN.avsc


def fingerprint_of(parsed_schema: Any) -> tuple[str, bytes]:
    canonical = to_parsing_canonical_form(parsed_schema)
    # fastavro renders the Rabin fingerprint as the hex of its little-endian bytes, which is exactly
    # the byte order the single-object encoding puts on the wire.
    return canonical, bytes.fromhex(_fastavro_fingerprint(canonical, "CRC-64-AVRO"))


def _full_name(raw: Any) -> str:
    if not isinstance(raw, dict) or raw.get("type") not in ("record", "enum", "fixed") or "name" not in raw:
        raise SchemaLoadError("a schema file must hold one named type (record, enum or fixed)")
    name: str = raw["name"]
    if "." in name:
        return name
    namespace = raw.get("namespace")
    return f"{namespace}.{name}" if namespace else name


def make_entry(raw: Any, source: str, version: int | None = None) -> SchemaEntry:
    """Parse one self-contained schema (already JSON-decoded)."""
    full_name = _full_name(raw)
    try:
        # A fresh name table per file: a reference to a type defined elsewhere fails here, by design.
        parsed = parse_schema(raw, {})
    except Exception as exc:  # fastavro raises several unrelated types for bad schemas
        raise SchemaLoadError(f"{source}: {type(exc).__name__}: {exc}") from exc
    assert isinstance(parsed, dict)  # a named type (checked by _full_name) parses to a dict
    _binary_defaults_to_bytes(parsed, set(), parsed.get("__named_schemas", {}))
    canonical, fp = fingerprint_of(parsed)
    return SchemaEntry(full_name, fp, canonical, parsed, raw, source, version)


def _binary_defaults_to_bytes(schema: Any, seen: set[str], named: Mapping[str, Any]) -> None:
    """Turn the JSON-string defaults of bytes/fixed fields into bytes, in the parsed schema.

    The Avro spec writes such defaults as strings whose code points 0-255 are the bytes; fastavro passes the
    string through untouched, so the writer fails on a missing bytes field and the reader fills one in
    with a str. Defaults are not part of the canonical form, so the fingerprint is unaffected.
    """
    if isinstance(schema, list):
        for branch in schema:
            _binary_defaults_to_bytes(branch, seen, named)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind == "array":
            _binary_defaults_to_bytes(schema["items"], seen, named)
        elif kind == "map":
            _binary_defaults_to_bytes(schema["values"], seen, named)
        elif kind == "record" and schema["name"] not in seen:
            seen.add(schema["name"])
            for field in schema["fields"]:
                _binary_defaults_to_bytes(field["type"], seen, named)
                if "default" in field:
                    field["default"] = _default_value(field["type"], field["default"], named)


def _default_value(schema: Any, value: Any, named: Mapping[str, Any]) -> Any:
    if isinstance(schema, list):  # a union's default belongs to its first branch
        return _default_value(schema[0], value, named)
    if isinstance(schema, str):
        if schema == "bytes":
            return value.encode("latin-1") if isinstance(value, str) else value
        schema = named.get(schema, schema)
        if isinstance(schema, str):
            return value
    kind = schema["type"]
    if kind in ("bytes", "fixed") and isinstance(value, str):
        return value.encode("latin-1")
    if kind == "array" and isinstance(value, list):
        return [_default_value(schema["items"], v, named) for v in value]
    if kind == "map" and isinstance(value, dict):
        return {k: _default_value(schema["values"], v, named) for k, v in value.items()}
    if kind == "record" and isinstance(value, dict):
        types = {f["name"]: f["type"] for f in schema["fields"]}
        return {k: _default_value(types[k], v, named) if k in types else v for k, v in value.items()}
    return value


def _read_json(item: Traversable | Path) -> Any:
    try:
        return json.loads(item.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SchemaLoadError(f"{item.name}: {exc}") from exc


def schema_root(directory: Traversable | Path | str | None = None) -> Traversable:
    """The schemas directory: an explicit one, else the installed `spotreel.schemas` package."""
    if directory is None:
        return resources.files(SCHEMA_PACKAGE)
    return Path(directory) if isinstance(directory, (str, os.PathLike)) else directory


def load_current(root: Traversable) -> dict[str, SchemaEntry]:
    entries: dict[str, SchemaEntry] = {}
    for item in sorted(root.iterdir(), key=lambda t: t.name):
        if not item.is_file() or not item.name.endswith(".avsc"):
            continue
        entry = make_entry(_read_json(item), item.name)
        if entry.full_name in entries:
            other = entries[entry.full_name].source
            raise SchemaLoadError(f"{item.name} and {other} both define {entry.full_name}")
        entries[entry.full_name] = entry
    return entries


def load_released(root: Traversable) -> dict[str, list[SchemaEntry]]:
    """Released versions by full name, oldest first."""
    released_dir = root / RELEASED_DIR
    if not released_dir.is_dir():
        return {}
    found: dict[str, dict[int, SchemaEntry]] = {}
    for item in released_dir.iterdir():
        match = _RELEASED_NAME.match(item.name)
        if not item.is_file() or not item.name.endswith(".avsc"):
            continue
        if match is None:
            raise SchemaLoadError(f"{RELEASED_DIR}/{item.name}: released files are named <Name>.v<N>.avsc")
        version = int(match["version"])
        entry = make_entry(_read_json(item), f"{RELEASED_DIR}/{item.name}", version)
        versions = found.setdefault(entry.full_name, {})
        if version in versions:
            raise SchemaLoadError(f"{entry.source} and {versions[version].source} are both v{version}")
        versions[version] = entry
    return {name: [versions[v] for v in sorted(versions)] for name, versions in found.items()}


@dataclass(frozen=True)
class ReadPlan:
    """How to decode a body that carries one particular fingerprint."""

    full_name: str
    writer: Any
    reader: Any | None  # None when the writer *is* the current schema, which spares fastavro a resolution
    # For a version older than a lift (upcast.py): the lift, and the current schema the lifted dict is
    # completed against. `reader` is then the newest released version of the writer's own shape.
    lift: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    complete_to: Any | None = None


class SchemaRegistry:
    def __init__(self, current: Mapping[str, SchemaEntry], released: Mapping[str, list[SchemaEntry]]) -> None:
        self.current: dict[str, SchemaEntry] = dict(current)
        self.released: dict[str, list[SchemaEntry]] = {k: list(v) for k, v in released.items()}
        self.plans: dict[bytes, ReadPlan] = {}
        for entry in self.current.values():
            self._add_plan(entry, None)
        for name, versions in self.released.items():
            reader = self.current.get(name)
            for entry in versions:
                if entry.fingerprint in self.plans:
                    continue  # unchanged since that release: the current plan already covers it
                lift = LIFTS.get(name)
                if reader is not None and lift is not None and not has_field(entry.schema, lift.creates) \
                        and has_field(reader.schema, lift.creates):
                    before = [v for v in versions if not has_field(v.schema, lift.creates)][-1]
                    resolve = None if before.fingerprint == entry.fingerprint else before.schema
                    self._add_plan(entry, resolve, lift.apply, reader.schema)
                    continue
                # A record type that was dropped from schemas/ still decodes, under its own released shape.
                self._add_plan(entry, reader.schema if reader is not None else None)

    def _add_plan(self, entry: SchemaEntry, reader: Any | None,
                  lift: Callable[[dict[str, Any]], dict[str, Any]] | None = None, complete_to: Any = None) -> None:
        other = self.plans.get(entry.fingerprint)
        if other is not None and other.full_name != entry.full_name:
            raise SchemaLoadError(f"{entry.source}: fingerprint collides with {other.full_name}")
        self.plans[entry.fingerprint] = ReadPlan(entry.full_name, entry.schema, reader, lift, complete_to)

    @classmethod
    def load(cls, directory: Path | str | None = None, *, include_released: bool = True) -> SchemaRegistry:
        root = schema_root(directory)
        return cls(load_current(root), load_released(root) if include_released else {})

    @classmethod
    def from_schemas(cls, schemas: Iterable[Any], released: Iterable[Any] = ()) -> SchemaRegistry:
        """Build from in-memory schema dicts (tests, tools); `released` are older writer versions."""
        current = {e.full_name: e for e in (make_entry(s, "<memory>") for s in schemas)}
        old: dict[str, list[SchemaEntry]] = {}
        for i, raw in enumerate(released, start=1):
            entry = make_entry(raw, "<memory>", i)
            old.setdefault(entry.full_name, []).append(entry)
        return cls(current, old)

    def entry(self, name: str) -> SchemaEntry | None:
        """Look up by full name, or by short name when it is unambiguous."""
        found = self.current.get(name)
        if found is not None or "." in name:
            return found
        matches = [e for n, e in self.current.items() if n.rsplit(".", 1)[-1] == name]
        return matches[0] if len(matches) == 1 else None
