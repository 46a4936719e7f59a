"""Frozen dataclasses <-> Avro record dicts, derived once per class from its type hints.

The Avro record name is the class name (namespace `spotreel.v1`) and the fields are the dataclass fields in
order. Type mapping:

    str -> string      int -> long       float -> double     bool -> boolean    bytes -> bytes
    X | None -> ["null", X]              tuple[X, ...] / frozenset[X] -> array of X
    dict[str, X] -> map of X             Enum -> enum (symbols are the member names)
    nested dataclass -> record

Most messages are flat, and for those a conversion is nearly free: the instance's own `__dict__` is
handed to the writer and the reader's dict is splatted into the constructor. Only fields that need a
change (list -> tuple, enum, nested record) get a converter, and the plan is cached per class.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from dataclasses import dataclass
from typing import Any, Callable

NAMESPACE = "spotreel.v1"

Convert = Callable[[Any], Any]

_PRIMITIVE_AVRO = {str: "string", int: "long", float: "double", bool: "boolean", bytes: "bytes"}


class MappingError(TypeError):
    """A dataclass uses a field type the codec cannot map onto Avro. Raised when a class is registered."""


def _optional_inner(hint: Any) -> Any | None:
    """X for `X | None` / `Optional[X]`, else None."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(hint)) == 2:
            return args[0]
        raise MappingError(f"{hint}: only `X | None` unions map onto Avro here")
    return None


def _sequence_item(hint: Any) -> tuple[type, Any] | None:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple, args[0]
        raise MappingError(f"{hint}: only variable-length tuple[X, ...] maps onto an Avro array")
    if origin is frozenset:
        return frozenset, args[0]
    return None


def _map_value(hint: Any) -> Any | None:
    if typing.get_origin(hint) is dict:
        key, value = typing.get_args(hint)
        if key is not str:
            raise MappingError(f"{hint}: Avro map keys are strings")
        return value
    return None


def avro_type_of(hint: Any) -> str:
    """A compact description of the Avro type a hint maps to, comparable with `describe_schema_type`."""
    inner = _optional_inner(hint)
    if inner is not None:
        return f"null|{avro_type_of(inner)}"
    seq = _sequence_item(hint)
    if seq is not None:
        return f"array<{avro_type_of(seq[1])}>"
    value = _map_value(hint)
    if value is not None:
        return f"map<{avro_type_of(value)}>"
    if hint in _PRIMITIVE_AVRO:
        return _PRIMITIVE_AVRO[hint]
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return f"{NAMESPACE}.{hint.__name__}"
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return f"{NAMESPACE}.{hint.__name__}"
    raise MappingError(f"{hint!r} has no Avro mapping")


def describe_schema_type(schema: Any) -> str:
    """The same compact description for a fastavro-parsed field type."""
    if isinstance(schema, list):
        return "|".join(describe_schema_type(b) for b in schema)
    if isinstance(schema, str):
        return schema
    kind = schema["type"]
    if kind == "array":
        return f"array<{describe_schema_type(schema['items'])}>"
    if kind == "map":
        return f"map<{describe_schema_type(schema['values'])}>"
    if kind in ("record", "enum", "fixed"):
        # Just the name: a second use of a named type inside one schema is only its name anyway.
        return str(schema["name"])
    return str(kind)


# Converters. `None` means "leave the value as it is", which is what keeps flat messages cheap. The
# combinators below close over a converter that is known not to be None (a lambda inside the branches
# would see the name's every assignment in the function, and the checker could not tell).


def _or_none(conv: Convert) -> Convert:
    return lambda v: None if v is None else conv(v)


def _each_to_list(conv: Convert) -> Convert:
    return lambda v: [conv(x) for x in v]


def _each_sorted(conv: Convert) -> Convert:
    return lambda v: sorted(conv(x) for x in v)


def _each_into(container: type, conv: Convert) -> Convert:
    return lambda v: container(conv(x) for x in v)


def _each_value(conv: Convert) -> Convert:
    return lambda v: {k: conv(x) for k, x in v.items()}


def _to_avro(hint: Any) -> Convert | None:
    inner = _optional_inner(hint)
    if inner is not None:
        conv = _to_avro(inner)
        return None if conv is None else _or_none(conv)
    seq = _sequence_item(hint)
    if seq is not None:
        container, item = seq
        conv = _to_avro(item)
        if container is frozenset:
            # Sorted, so equal sets always encode to equal bytes.
            return (lambda v: sorted(v)) if conv is None else _each_sorted(conv)
        return None if conv is None else _each_to_list(conv)
    value = _map_value(hint)
    if value is not None:
        conv = _to_avro(value)
        return None if conv is None else _each_value(conv)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return lambda v: v.name
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return mapping_for(hint).to_record
    if hint in _PRIMITIVE_AVRO:
        return None
    raise MappingError(f"{hint!r} has no Avro mapping")


def _from_avro(hint: Any) -> Convert | None:
    inner = _optional_inner(hint)
    if inner is not None:
        conv = _from_avro(inner)
        return None if conv is None else _or_none(conv)
    seq = _sequence_item(hint)
    if seq is not None:
        container, item = seq
        conv = _from_avro(item)
        return (lambda v: container(v)) if conv is None else _each_into(container, conv)
    value = _map_value(hint)
    if value is not None:
        conv = _from_avro(value)
        return None if conv is None else _each_value(conv)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return lambda v: hint[v]
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return mapping_for(hint).from_record
    if hint in _PRIMITIVE_AVRO:
        return None
    raise MappingError(f"{hint!r} has no Avro mapping")


@dataclass(frozen=True)
class FieldSpec:
    name: str
    hint: Any
    avro_type: str


class DataclassMapping:
    def __init__(self, cls: type) -> None:
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
            raise MappingError(f"{cls!r} is not a dataclass")
        hints = typing.get_type_hints(cls)
        self.cls = cls
        self.full_name = f"{NAMESPACE}.{cls.__name__}"
        self.fields = tuple(
            FieldSpec(f.name, hints[f.name], avro_type_of(hints[f.name])) for f in dataclasses.fields(cls)
        )
        self._names = tuple(f.name for f in self.fields)
        self._to = tuple((f.name, c) for f in self.fields if (c := _to_avro(f.hint)) is not None)
        self._from = tuple((f.name, c) for f in self.fields if (c := _from_avro(f.hint)) is not None)
        self._keys = frozenset(self._names)
        # A plain frozen dataclass's __init__ only stores its arguments (one object.__setattr__ each); when
        # nothing else runs in it, adopting the decoded dict as the instance dict builds the same object
        # several times faster. Anything with __post_init__, slots or init=False fields goes through __init__.
        self._adopt_dict = (
            not hasattr(cls, "__post_init__")
            and "__slots__" not in cls.__dict__
            and all(f.init for f in dataclasses.fields(cls))
        )

    def to_record(self, obj: Any) -> dict[str, Any]:
        state: dict[str, Any] | None = getattr(obj, "__dict__", None)
        if not self._to and state is not None and len(state) == len(self._names):
            # Read-only use by the writer, so the instance's own attribute dict is safe to pass as is.
            return state
        record = {name: getattr(obj, name) for name in self._names}
        for name, conv in self._to:
            record[name] = conv(record[name])
        return record

    def from_record(self, record: dict[str, Any], *, exact_fields: bool = False) -> Any:
        """Build the instance from a decoded record dict (which it takes over and may modify).

        `exact_fields` vouches that the keys are exactly the dataclass fields, as they are for a record
        fastavro read with a schema already checked against this class; it skips re-checking them.
        """
        for name, conv in self._from:
            if name in record:
                record[name] = conv(record[name])
        if self._adopt_dict and (exact_fields or record.keys() == self._keys):
            obj = _new(self.cls)
            _setattr(obj, "__dict__", record)
            return obj
        return self.cls(**record)


_new = object.__new__
_setattr = object.__setattr__


@functools.cache
def mapping_for(cls: type) -> DataclassMapping:
    """The mapping plan for a dataclass, built on first use and shared by every codec after that."""
    return DataclassMapping(cls)
