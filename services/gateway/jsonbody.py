"""The JSON body of a public request: parsed, an object, and text that can be written downstream.

Python's json accepts a lone UTF-16 surrogate escape ("\\ud800") and yields a str that cannot be encoded
as UTF-8, so it would only fail when Avro encodes the command (a 500 after the claim was written). It is
refused here, naming the field, before anything is written. The content type was checked already
(guards.py).

A number written with a fraction or exponent that is a whole number (`9.0`, `1e2`) is read as that integer:
JSON Schema, which /openapi.json speaks, counts it as an integer, so a field documented `integer` must take
it (schemathesis found `{"priority": 9.0}` refused). Fields that want a float (`duration`) convert anyway.
"""

from __future__ import annotations

import json
import re
from typing import Any

from aiohttp import web

from spotreel.api.errors import ApiError, invalid

_SURROGATE = re.compile("[\ud800-\udfff]")


def whole_number(text: str) -> float | int:
    """json.loads' parse_float: a whole number read as that integer (also the worker API's bodies)."""
    value = float(text)
    # Only finite whole values; integers this large are refused by every field's bounds later.
    return int(value) if value.is_integer() and abs(value) < 2**63 else value


def _printable(key: str) -> str:
    return key.encode("utf-8", "backslashreplace").decode("utf-8")


def surrogate_field(body: Any) -> str | None:
    """The path (`nodes[0].prompt`) of the first key or string holding a lone surrogate, or None.
    Iterative: nesting is bounded only by what json.loads accepted."""
    stack: list[tuple[str, Any]] = [("", body)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            if _SURROGATE.search(value):
                return path
        elif isinstance(value, dict):
            children = []
            for k, v in value.items():
                child = f"{path}.{_printable(k)}" if path else _printable(k)
                if _SURROGATE.search(k):
                    return child
                children.append((child, v))
            stack.extend(reversed(children))
        elif isinstance(value, list):
            stack.extend((f"{path}[{i}]", v) for i, v in reversed(list(enumerate(value))))
    return None


async def read_object(request: web.Request) -> dict[str, Any]:
    raw = await request.read()  # client_max_size turns an oversized body into 413 here
    try:
        body = json.loads(raw or b"null", parse_float=whole_number)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, "invalid_json", f"the body is not valid JSON: {exc}") from None
    except RecursionError:  # deeper than the parser's stack allows: no request of ours nests like that
        raise ApiError(400, "invalid_json", "the body is not valid JSON: nested too deeply") from None
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_json", "the body must be a JSON object")
    field = surrogate_field(body)
    if field is not None:
        raise invalid(field, f"{field} contains a lone UTF-16 surrogate (\\ud800-\\udfff): it is not text")
    return body
