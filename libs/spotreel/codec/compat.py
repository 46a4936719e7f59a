"""BACKWARD compatibility: can the current (reader) schema read every record an older writer produced?

Events are kept forever, so a change must let today's reader resolve data written under EVERY released
version, not only the last one (Confluent calls this BACKWARD_TRANSITIVE). Two independent verdicts:

* `rule_problems` walks reader and writer side by side with the Avro specification's resolution rules
  (fields matched by name or reader alias, defaults for new fields, numeric and string/bytes promotions,
  union branch matching, enum symbols, fixed sizes, named-type names);
* `empirical_problems` writes sample records with the old schema, one per union branch and enum symbol, and
  reads them back with the new schema through fastavro, the library that will actually do it in production.

A change passes only when both agree it is safe; a disagreement is reported, since it means either the rules
here or fastavro's resolution differ from the specification.
"""

from __future__ import annotations

from dataclasses import dataclass
from io import BytesIO
from typing import Any, Literal

from fastavro import schemaless_reader, schemaless_writer

from spotreel.codec.registry import SchemaEntry, load_current, load_released, schema_root
from spotreel.codec.upcast import LIFTS, Lift, complete, has_field

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
# writer type -> reader types it may be read as, besides itself (Avro spec, "Schema Resolution").
PROMOTIONS = {
    "int": frozenset({"long", "float", "double"}),
    "long": frozenset({"float", "double"}),
    "float": frozenset({"double"}),
    "string": frozenset({"bytes"}),
    "bytes": frozenset({"string"}),
}
_MAX_SAMPLES = 256
_MAX_DEPTH = 8


def _named(schema: Any) -> dict[str, Any]:
    return dict(schema.get("__named_schemas", {})) if isinstance(schema, dict) else {}


def _kind(schema: Any) -> str:
    if isinstance(schema, list):
        return "union"
    return schema if isinstance(schema, str) else schema["type"]


def _label(schema: Any) -> str:
    if isinstance(schema, list):
        return "[" + ", ".join(_label(b) for b in schema) + "]"
    if isinstance(schema, str):
        return schema
    return str(schema.get("name") or schema["type"])


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _names_match(writer: dict[str, Any], reader: dict[str, Any]) -> bool:
    # Avro compares unqualified names; a reader alias (short or full) also accepts the writer's name.
    aliases = set(reader.get("aliases", ()))
    written = _short(writer["name"])
    return written == _short(reader["name"]) or writer["name"] in aliases or written in aliases


class _Resolver:
    def __init__(self, reader: Any, writer: Any) -> None:
        self.rnamed = _named(reader)
        self.wnamed = _named(writer)
        self.problems: list[str] = []
        self._seen: set[tuple[str, str]] = set()

    def _deref(self, schema: Any, named: dict[str, Any]) -> Any:
        if isinstance(schema, str) and schema not in PRIMITIVES:
            return named[schema]
        return schema

    def matches(self, writer: Any, reader: Any) -> bool:
        """Whether a reader union branch is the one resolution picks for this writer type (shallow)."""
        writer, reader = self._deref(writer, self.wnamed), self._deref(reader, self.rnamed)
        wk, rk = _kind(writer), _kind(reader)
        if wk in PRIMITIVES:
            return rk == wk or rk in PROMOTIONS.get(wk, ())
        if wk != rk:
            return False
        if wk == "array":
            return self.matches(writer["items"], reader["items"])
        if wk == "map":
            return self.matches(writer["values"], reader["values"])
        if wk == "fixed" and writer["size"] != reader["size"]:
            return False
        return wk in ("record", "enum", "fixed") and _names_match(writer, reader)

    def resolve(self, writer: Any, reader: Any, path: str) -> None:
        writer, reader = self._deref(writer, self.wnamed), self._deref(reader, self.rnamed)
        wk, rk = _kind(writer), _kind(reader)
        if wk == "union":
            for branch in writer:
                self._resolve_branch(branch, reader, f"{path}<{_label(branch)}>")
            return
        if rk == "union":
            self._resolve_branch(writer, reader, path)
            return
        if wk in PRIMITIVES or rk in PRIMITIVES:
            if not (wk == rk or rk in PROMOTIONS.get(wk, ())):
                self.problems.append(
                    f"{path}: type changed from {_label(writer)} to {_label(reader)}, which Avro cannot promote"
                )
            return
        if wk != rk:
            self.problems.append(f"{path}: changed from a {wk} to a {rk}")
            return
        if wk == "array":
            self.resolve(writer["items"], reader["items"], f"{path}[]")
        elif wk == "map":
            self.resolve(writer["values"], reader["values"], f"{path}{{}}")
        elif not _names_match(writer, reader):
            self.problems.append(
                f"{path}: {wk} renamed from {writer['name']} to {reader['name']} without an alias"
            )
        elif wk == "fixed":
            if writer["size"] != reader["size"]:
                self.problems.append(f"{path}: fixed size changed from {writer['size']} to {reader['size']}")
        elif wk == "enum":
            self._resolve_enum(writer, reader, path)
        elif wk == "record":
            self._resolve_record(writer, reader, path)

    def _resolve_branch(self, writer: Any, reader: Any, path: str) -> None:
        if _kind(reader) != "union":
            self.resolve(writer, reader, path)
            return
        for branch in reader:
            if self.matches(writer, branch):
                self.resolve(writer, branch, path)
                return
        self.problems.append(
            f"{path}: writer type {_label(writer)} matches no branch of the reader union {_label(reader)}"
        )

    def _resolve_enum(self, writer: dict[str, Any], reader: dict[str, Any], path: str) -> None:
        lost = [s for s in writer["symbols"] if s not in reader["symbols"]]
        if lost and "default" not in reader:
            self.problems.append(f"{path}: enum symbols removed without an enum default: {', '.join(lost)}")

    def _resolve_record(self, writer: dict[str, Any], reader: dict[str, Any], path: str) -> None:
        key = (writer["name"], reader["name"])
        if key in self._seen:  # recursive types: once per pair is enough
            return
        self._seen.add(key)
        written = {f["name"]: f for f in writer["fields"]}
        for rfield in reader["fields"]:
            wfield = next(
                (written[n] for n in (rfield["name"], *rfield.get("aliases", ())) if n in written),
                None,
            )
            where = f"{path}.{rfield['name']}"
            if wfield is not None:
                self.resolve(wfield["type"], rfield["type"], where)
            elif "default" not in rfield:
                self.problems.append(f"{where}: new field without a default (old records do not have it)")


def rule_problems(reader: Any, writer: Any) -> list[str]:
    """Why `reader` (fastavro-parsed) cannot read data written with `writer`; empty when it can."""
    resolver = _Resolver(reader, writer)
    resolver.resolve(writer, reader, _short(_label(reader)))
    return resolver.problems


# -- empirical check ------------------------------------------------------------------------------------


def _variety(schema: Any, named: dict[str, Any], seen: set[str]) -> int:
    """How many samples it takes to visit every union branch and enum symbol at least once."""
    if isinstance(schema, list):
        return max([len(schema), *(_variety(b, named, seen) for b in schema)])
    if isinstance(schema, str):
        if schema in PRIMITIVES or schema in seen:
            return 1
        seen.add(schema)
        return _variety(named[schema], named, seen)
    kind = schema["type"]
    if kind == "enum":
        return len(schema["symbols"])
    if kind == "array":
        return _variety(schema["items"], named, seen)
    if kind == "map":
        return _variety(schema["values"], named, seen)
    if kind == "record":
        seen.add(schema["name"])
        return max([1, *(_variety(f["type"], named, seen) for f in schema["fields"])])
    return 2 if kind == "boolean" else 1


def _sample(schema: Any, named: dict[str, Any], k: int, depth: int) -> Any:
    if isinstance(schema, list):
        if depth >= _MAX_DEPTH and "null" in schema:
            return None  # ends recursive types
        return _sample(schema[k % len(schema)], named, k, depth + 1)
    if isinstance(schema, str) and schema not in PRIMITIVES:
        schema = named[schema]
    kind = _kind(schema)
    simple = {
        "null": None,
        "boolean": k % 2 == 1,
        "int": -k if k % 2 else k,
        "long": (k * 1_000_003) * (-1 if k % 2 else 1),
        "float": k + 0.5,
        "double": k + 0.25,
        "string": f"s{k}",
        "bytes": f"b{k}".encode(),
    }
    if kind in simple:
        return simple[kind]
    if kind == "enum":
        return schema["symbols"][k % len(schema["symbols"])]
    if kind == "fixed":
        return bytes([k % 256]) * schema["size"]
    if kind == "array":
        if depth >= _MAX_DEPTH:
            return []
        return [_sample(schema["items"], named, k + i, depth + 1) for i in range(2)]
    if kind == "map":
        return {} if depth >= _MAX_DEPTH else {f"k{k}": _sample(schema["values"], named, k, depth + 1)}
    return {f["name"]: _sample(f["type"], named, k, depth + 1) for f in schema["fields"]}


def empirical_problems(reader: Any, writer: Any) -> list[str]:
    """Write varied records with `writer`, read them with `reader`; each failure becomes a problem."""
    named = _named(writer)
    count = min(_MAX_SAMPLES, max(2, _variety(writer, named, set())))
    problems: list[str] = []
    for k in range(count):
        record = _sample(writer, named, k, 0)
        out = BytesIO()
        schemaless_writer(out, writer, record, disable_tuple_notation=True)
        data = out.getvalue()
        body = BytesIO(data)
        try:
            schemaless_reader(body, writer, reader)
        except Exception as exc:  # whatever fastavro raises is the finding
            problems.append(
                f"sample {k} written with the old schema does not read: {type(exc).__name__}: {exc}"
            )
            continue
        if body.tell() != len(data):
            problems.append(f"sample {k}: {len(data) - body.tell()} bytes left unread")
    return problems


def lift_problems(current: Any, old: Any, before: Any, lift: Lift) -> list[str]:
    """Write varied records with `old`, read them as the registry does (resolved to `before`, the newest
    version of the old shape, lifted, completed) and write the result with `current`: each failure is a
    problem. The lift's meaning (which value lands where) is tested in tests/unit/test_codec_upcast.py."""
    named = _named(old)
    count = min(_MAX_SAMPLES, max(2, _variety(old, named, set())))
    problems: list[str] = []
    for k in range(count):
        out = BytesIO()
        schemaless_writer(out, old, _sample(old, named, k, 0), disable_tuple_notation=True)
        try:
            record = schemaless_reader(BytesIO(out.getvalue()), old, None if old is before else before)
            lifted = complete(lift.apply(record), current)  # type: ignore[arg-type]
            schemaless_writer(BytesIO(), current, lifted, disable_tuple_notation=True)
        except Exception as exc:  # whatever the lift or fastavro raises is the finding
            problems.append(f"sample {k} written with the old schema does not lift: {type(exc).__name__}: {exc}")
    return problems


@dataclass(frozen=True)
class Verdict:
    compatible: bool
    rule_problems: list[str]
    empirical_problems: list[str]

    @property
    def disagreement(self) -> bool:
        return bool(self.rule_problems) != bool(self.empirical_problems)


def check_pair(reader: Any, writer: Any) -> Verdict:
    rules = rule_problems(reader, writer)
    empirical = empirical_problems(reader, writer)
    return Verdict(not rules and not empirical, rules, empirical)


# -- whole directory --------------------------------------------------------------------------------------

Status = Literal["unchanged", "compatible", "new", "incompatible", "removed"]


@dataclass(frozen=True)
class SchemaReport:
    full_name: str
    source: str
    status: Status
    versions: tuple[int, ...] = ()  # released versions it was checked against
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    # Released versions older than a lift (upcast.py), checked as resolved to the last version of their shape
    # and then lifted: (version, that last version).
    lifted: tuple[tuple[int, int], ...] = ()

    @property
    def ok(self) -> bool:
        return self.status not in ("incompatible", "removed")


def check_entry(current: SchemaEntry, released: list[SchemaEntry]) -> SchemaReport:
    if not released:
        return SchemaReport(current.full_name, current.source, "new")
    versions = tuple(e.version or 0 for e in released)
    status: Status = "unchanged" if released[-1].fingerprint == current.fingerprint else "compatible"
    problems: list[str] = []
    notes: list[str] = []
    lifted_from: list[tuple[int, int]] = []
    lift = LIFTS.get(current.full_name)
    lifted = lift is not None and has_field(current.schema, lift.creates)
    for old in released:
        if old.fingerprint == current.fingerprint:
            continue
        if lift is not None and lifted and not has_field(old.schema, lift.creates):
            # Older than the lift (upcast.py): resolution up to the newest version of its own shape, then
            # the lift; each checked.
            before = [v for v in released if not has_field(v.schema, lift.creates)][-1]
            lift_found = lift_problems(current.schema, old.schema, before.schema, lift)
            problems += [f"vs v{old.version} (lift): {p}" for p in lift_found]
            lifted_from.append((old.version or 0, before.version or 0))
            if before is old:
                continue
            verdict = check_pair(before.schema, old.schema)
            problems += [f"vs v{old.version} as v{before.version}: {p}" for p in verdict.rule_problems]
            problems += [f"vs v{old.version} as v{before.version} (fastavro): {p}" for p in verdict.empirical_problems]
            continue
        verdict = check_pair(current.schema, old.schema)
        problems += [f"vs v{old.version}: {p}" for p in verdict.rule_problems]
        problems += [f"vs v{old.version} (fastavro): {p}" for p in verdict.empirical_problems]
        if verdict.disagreement:
            side = "rules" if verdict.rule_problems else "fastavro"
            notes.append(f"vs v{old.version}: only the {side} check found a problem")
    if problems:
        status = "incompatible"
    return SchemaReport(current.full_name, current.source, status, versions, tuple(problems), tuple(notes),
                        tuple(lifted_from))


_REMOVED = "released, but gone from schemas/: records already written could no longer be read as messages"


def check_schemas(directory: Any = None) -> list[SchemaReport]:
    """Check every current schema against all of its released versions; also flag removed schemas."""
    root = schema_root(directory)
    current = load_current(root)
    released = load_released(root)
    reports = [check_entry(entry, released.get(name, [])) for name, entry in current.items()]
    for name, versions in released.items():
        if name not in current:
            reports.append(
                SchemaReport(
                    name,
                    versions[-1].source,
                    "removed",
                    tuple(e.version or 0 for e in versions),
                    (_REMOVED,),
                )
            )
    return sorted(reports, key=lambda r: r.full_name)
