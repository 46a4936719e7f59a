"""Transport rules every request meets before a handler: header and request-target sizes, JSON bodies.

aiohttp's parser refuses an over-long header or URL itself, with a text/plain 400 that never reaches a
middleware. So the parser's caps are raised (`HANDLER_ARGS`, passed through `web.Application`, hence in
force however the app is served) and the real limit is applied here, answered like every other error.
Past the parser's caps (and for malformed HTTP) aiohttp still answers its own text/plain 400.
"""

from __future__ import annotations

import re

from aiohttp import web

from spotreel.api.errors import ApiError

# aiohttp's own default, so no request that passed before is refused now.
MAX_HEADER_BYTES = 8190
MAX_TARGET_BYTES = 8190
# What the parser buffers before giving up on its own (per header line, per request target).
PARSER_CAP_BYTES = 32 * 1024
HANDLER_ARGS = {"max_field_size": PARSER_CAP_BYTES, "max_line_size": PARSER_CAP_BYTES}

OWN_PARSING = ("/internal/", "/openai/")
BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_JSON_TYPE = re.compile(r"application/(?:json|[!#$&^_.+\w-]+\+json)")


@web.middleware
async def sizes(request: web.Request, handler):
    if len(request.raw_path) > MAX_TARGET_BYTES:
        raise ApiError(414, "uri_too_long",
                       f"the request target is {len(request.raw_path)} bytes; the limit is {MAX_TARGET_BYTES}")
    for name, value in request.raw_headers:
        if len(name) + len(value) > MAX_HEADER_BYTES:
            header = name.decode("latin-1")
            raise ApiError(431, "header_too_large",
                           f"header {header} is {len(name) + len(value)} bytes (name and value); the limit is "
                           f"{MAX_HEADER_BYTES}", field=header)
    return await handler(request)


def is_json(request: web.Request) -> bool:
    """application/json or application/*+json, in UTF-8 (RFC 8259 allows no other charset)."""
    if request.headers.get("Content-Type") is None or not _JSON_TYPE.fullmatch(request.content_type):
        return False
    return (request.charset or "utf-8").lower() in ("utf-8", "utf8")


@web.middleware
async def json_bodies(request: web.Request, handler):
    # The worker API (/internal/) keeps its own parsing, and so does the OpenAI-compatible surface (/openai/:
    # JSON or the forms its SDK sends); an unknown route or method answers 404/405 first.
    if request.method in BODY_METHODS and request.body_exists and not request.path.startswith(OWN_PARSING) \
            and request.match_info.http_exception is None and not is_json(request):
        given = request.headers.get("Content-Type")
        raise ApiError(415, "unsupported_media_type",
                       f"the body must be JSON (Content-Type: application/json); got "
                       f"{given if given is not None else 'no Content-Type'}", field="Content-Type")
    return await handler(request)
