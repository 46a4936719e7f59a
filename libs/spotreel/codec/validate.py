"""Strict value checks compiled once per schema, run before fastavro writes.

fastavro's writer coerces instead of refusing: 1.7 into a long is written as 1, True as 1, the string
"ab" into an array of strings as ["a", "b"], any truthy value as boolean true, and unknown keys are
dropped. On an event log that is kept forever, a silent coercion is a corrupted fact, so every record is
checked against its schema first. fastavro's own `validate` costs as much as the write itself; these
checks (generated code per record type, closures for the rest) cost about a fifth of a write on the domain
messages, and they name the offending field.

A check returns None when the value fits, else `(path, message)`.
"""

from __future__ import annotations

from typing import Any, Callable

Problem = tuple[str, str]
Check = Callable[[Any], "Problem | None"]

_MISSING = object()
_INT_RANGE = (-(2**31), 2**31 - 1)
_LONG_RANGE = (-(2**63), 2**63 - 1)


def _describe(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:40] + '...' if len(text) > 40 else text}"


def _join(head: str, tail: str) -> str:
    if not tail:
        return head
    return f"{head}{tail}" if tail.startswith("[") else f"{head}.{tail}"


def _integer(kind: str, low: int, high: int) -> Check:
    def check(v: Any) -> Problem | None:
        # `type(...) is int` on purpose: bool is an int subclass and must not pass for a number.
        if type(v) is int and low <= v <= high:
            return None
        return "", f"expected {kind}, got {_describe(v)}"

    return check


def _floating(kind: str) -> Check:
    def check(v: Any) -> Problem | None:
        t = type(v)
        if t is float or t is int:
            return None
        return "", f"expected {kind}, got {_describe(v)}"

    return check


def _null(v: Any) -> Problem | None:
    return None if v is None else ("", f"expected null, got {_describe(v)}")


def _boolean(v: Any) -> Problem | None:
    return None if v is True or v is False else ("", f"expected boolean, got {_describe(v)}")


def _string(v: Any) -> Problem | None:
    return None if isinstance(v, str) else ("", f"expected string, got {_describe(v)}")


def _bytes(v: Any) -> Problem | None:
    return None if isinstance(v, (bytes, bytearray)) else ("", f"expected bytes, got {_describe(v)}")


_PRIMITIVES: dict[str, Check] = {
    "null": _null,
    "boolean": _boolean,
    "int": _integer("int", *_INT_RANGE),
    "long": _integer("long", *_LONG_RANGE),
    "float": _floating("float"),
    "double": _floating("double"),
    "string": _string,
    "bytes": _bytes,
}


# Primitive tests as Python expressions over `x`, for the generated record checks; same rules as above.
_INLINE = {
    "null": "x is None",
    "boolean": "x is True or x is False",
    "int": f"type(x) is int and {_INT_RANGE[0]} <= x <= {_INT_RANGE[1]}",
    "long": f"type(x) is int and {_LONG_RANGE[0]} <= x <= {_LONG_RANGE[1]}",
    "float": "type(x) is float or type(x) is int",
    "double": "type(x) is float or type(x) is int",
    "string": "isinstance(x, str)",
    "bytes": "isinstance(x, (bytes, bytearray))",
}


def _inline_test(schema: Any) -> str | None:
    """An expression for a primitive or a union of primitives, else None (a compiled check is called)."""
    if isinstance(schema, dict) and schema.get("type") in _INLINE:
        schema = schema["type"]
    if isinstance(schema, str):
        return _INLINE.get(schema)
    if isinstance(schema, list):
        parts = [_inline_test(b) for b in schema]
        if all(p is not None for p in parts):
            return " or ".join(f"({p})" for p in parts)
    return None


def _label(schema: Any) -> str:
    if isinstance(schema, list):
        return "one of [" + ", ".join(_label(b).removeprefix("one of ") for b in schema) + "]"
    if isinstance(schema, dict):
        return str(schema.get("name", schema["type"]))
    name: str = schema  # the name of a primitive or a named type
    return name


class _Compiler:
    def __init__(self) -> None:
        # Named types are compiled once; a forward slot lets a recursive record refer to itself.
        self.named: dict[str, list[Check]] = {}

    def compile(self, schema: Any) -> Check:
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                return _PRIMITIVES[schema]
            forward = self.named[schema]
            return lambda v: forward[0](v)
        if isinstance(schema, list):
            return self._union(schema)
        kind = schema["type"]
        if kind in _PRIMITIVES:  # {"type": "long", "logicalType": ...}
            return _PRIMITIVES[kind]
        if kind == "array":
            return self._array(self.compile(schema["items"]))
        if kind == "map":
            return self._map(self.compile(schema["values"]))
        slot: list[Check] = [lambda v: None]
        self.named[schema["name"]] = slot
        if kind == "record":
            slot[0] = self._record(schema)
        elif kind == "enum":
            slot[0] = self._enum(schema)
        elif kind == "fixed":
            slot[0] = self._fixed(schema)
        else:
            raise ValueError(f"unsupported schema type {kind!r}")
        return slot[0]

    def _record(self, schema: dict[str, Any]) -> Check:
        """A record check generated as straight-line Python: one function per record type, primitives and
        optionals tested inline, which is what makes the check cheap next to the write itself."""
        short = schema["name"].rsplit(".", 1)[-1]
        # Names travel in `env`, never spliced into the source: the text is built only from repr()s and
        # fixed fragments.
        env: dict[str, Any] = {"_MISSING": _MISSING, "_describe": _describe, "_join": _join, "short": short}
        lines = [
            "def check(v):",
            "    if not isinstance(v, dict):",
            "        return '', 'expected record ' + short + ', got ' + _describe(v)",
            "    present = 0",
        ]
        for i, field in enumerate(schema["fields"]):
            name = field["name"]
            test = _inline_test(field["type"])
            lines += [f"    x = v.get({name!r}, _MISSING)", "    if x is _MISSING:"]
            if "default" in field:
                lines.append("        pass")
            else:
                lines.append(f"        return {name!r}, 'missing (the field has no default)'")
            lines += ["    else:", "        present += 1"]
            if test is not None:
                env[f"want_{i}"] = _label(field["type"])
                lines += [
                    f"        if not ({test}):",
                    f"            return {name!r}, 'expected ' + want_{i} + ', got ' + _describe(x)",
                ]
            else:
                env[f"sub_{i}"] = self.compile(field["type"])
                lines += [
                    f"        problem = sub_{i}(x)",
                    "        if problem is not None:",
                    f"            return _join({name!r}, problem[0]), problem[1]",
                ]
        env["names"] = frozenset(f["name"] for f in schema["fields"])
        lines += [
            "    if present != len(v):",
            "        extra = sorted(str(k) for k in v if k not in names)",
            "        return extra[0], 'not a field of ' + short",
            "    return None",
        ]
        exec(compile("\n".join(lines), f"<check {schema['name']}>", "exec"), env)  # noqa: S102 (our own text)
        check: Check = env["check"]
        return check

    @staticmethod
    def _enum(schema: dict[str, Any]) -> Check:
        symbols = frozenset(schema["symbols"])
        short = schema["name"].rsplit(".", 1)[-1]

        def check(v: Any) -> Problem | None:
            if isinstance(v, str) and v in symbols:
                return None
            return "", f"expected a symbol of enum {short}, got {_describe(v)}"

        return check

    @staticmethod
    def _fixed(schema: dict[str, Any]) -> Check:
        size = schema["size"]

        def check(v: Any) -> Problem | None:
            if isinstance(v, (bytes, bytearray)) and len(v) == size:
                return None
            return "", f"expected {size} fixed bytes, got {_describe(v)}"

        return check

    @staticmethod
    def _array(item_check: Check) -> Check:
        def check(v: Any) -> Problem | None:
            # A str is a sequence too; fastavro would happily write it as an array of characters.
            if not isinstance(v, (list, tuple)):
                return "", f"expected array, got {_describe(v)}"
            for i, item in enumerate(v):
                problem = item_check(item)
                if problem is not None:
                    return _join(f"[{i}]", problem[0]), problem[1]
            return None

        return check

    @staticmethod
    def _map(value_check: Check) -> Check:
        def check(v: Any) -> Problem | None:
            if not isinstance(v, dict):
                return "", f"expected map, got {_describe(v)}"
            for key, item in v.items():
                if not isinstance(key, str):
                    return "", f"map keys must be strings, got {_describe(key)}"
                problem = value_check(item)
                if problem is not None:
                    return _join(f"[{key!r}]", problem[0]), problem[1]
            return None

        return check

    def _union(self, branches: list[Any]) -> Check:
        checks = [self.compile(b) for b in branches]
        # The optional case, ["null", X], is nearly every union here: test None first without a call.
        nullable = "null" in branches
        rest = [c for b, c in zip(branches, checks) if b != "null"]
        names = ", ".join(b if isinstance(b, str) else str(b.get("name", b.get("type"))) for b in branches)

        def check(v: Any) -> Problem | None:
            if v is None and nullable:
                return None
            for branch_check in rest:
                if branch_check(v) is None:
                    return None
            return "", f"expected one of [{names}], got {_describe(v)}"

        return check


def compile_check(parsed_schema: Any) -> Check:
    """A check for values of `parsed_schema` (a fastavro-parsed, self-contained schema)."""
    return _Compiler().compile(parsed_schema)
