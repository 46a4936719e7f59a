"""A faster `dataclasses.replace` for the domain's frozen records.

`evolve` and the scheduler's renewal path copy JobState (about 45 fields) several times per command, and
`dataclasses.replace` rebuilds each copy through `__init__`: a getattr per field and a full argument list,
which makes it the largest single cost of a renewal in the scheduler (bench/handler_bench.py). A frozen
dataclass without `__post_init__` has nothing in `__init__` but the field assignments, so copying its
instance dict and updating the changed names gives the same object. Classes with `__post_init__` (or
slots, or init-only fields) take the standard path, and an unknown field name is still a TypeError.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

T = TypeVar("T")

_FAST: dict[type, frozenset[str] | None] = {}


def _fields_if_plain(cls: type) -> frozenset[str] | None:
    """The init fields of `cls` when a dict copy equals `__init__`, else None."""
    if cls not in _FAST:
        plain = (dataclasses.is_dataclass(cls) and not hasattr(cls, "__post_init__")
                 and "__slots__" not in cls.__dict__
                 and all(f.init and f._field_type is dataclasses._FIELD for f in dataclasses.fields(cls)))  # type: ignore[attr-defined]
        _FAST[cls] = frozenset(f.name for f in dataclasses.fields(cls)) if plain else None
    return _FAST[cls]


def replace(obj: T, /, **changes: Any) -> T:
    """`dataclasses.replace(obj, **changes)`, without the trip through `__init__` where it is not needed."""
    names = _fields_if_plain(type(obj))
    if names is None or not changes.keys() <= names:
        return dataclasses.replace(obj, **changes)  # type: ignore[type-var]
    new = object.__new__(type(obj))
    object.__setattr__(new, "__dict__", {**obj.__dict__, **changes})
    return new
