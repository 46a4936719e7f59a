"""One error shape for every answer: `{"error": {"code", "message", "field"?}}` plus optional extras."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, field: str | None = None,
                 retry_after: int | None = None, headers: dict[str, str] | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.retry_after = retry_after
        self.headers = dict(headers or {})
        self.extra = extra

    def response(self) -> web.Response:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field is not None:
            body["field"] = self.field
        body.update(self.extra)
        headers = dict(self.headers)
        if self.retry_after is not None:
            headers["Retry-After"] = str(max(1, self.retry_after))
        return web.json_response({"error": body}, status=self.status, headers=headers, dumps=json.dumps)


class ModelRefusal(ApiError):
    """A well-formed value the named model cannot render (its registry entry's sizes, frames, steps or
    samplers). Natively the same 422 `invalid_field` as any bad field; the OpenAI-compatible surface tells it
    apart (422 there, where a malformed field is 400)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(422, "invalid_field", message, field=field)


def invalid(field: str, message: str) -> ApiError:
    return ApiError(422, "invalid_field", message, field=field)


def not_found() -> ApiError:
    # Also the answer for another tenant's job: a 403 would confirm that the id exists.
    return ApiError(404, "not_found", "no such video")
