"""The building blocks of /openapi.json every part of it uses: error answers, the transport errors any
request can meet, an operation, nullable and optional body fields, the video id and page-token parameters."""

from __future__ import annotations

from typing import Any

from spotreel.api.submission import JOB_ID as VIDEO_ID
from spotreel.api.submission import KEY, RESERVED_KEY_PREFIX
from spotreel.services.gateway.openapi_rules import anchored
from spotreel.services.gateway.public import pagetokens

ERROR = {"$ref": "#/components/schemas/Error"}


def page_token_param(listing: str) -> dict[str, Any]:
    return {"name": "page_token", "in": "query",
            "schema": {"type": "string", "pattern": anchored(pagetokens.TOKEN.pattern)},
            "description": f"next_page_token of the previous page of the same listing{listing}. A token that "
                           "does not verify (from before a gateway restart or from another replica without the "
                           "shared SPOTREEL_GATEWAY_TOKEN_KEY, from another listing, or not from this API): 409 "
                           "stale_page_token, list again from the start"}


# The 409 of a listing: the page_token only (pagetokens.refusal).
STALE_PAGE = {"409": {"description": "stale_page_token: the page_token does not verify (see page_token)",
                      "content": {"application/json": {"schema": ERROR}}}}
ID = {"name": "id", "in": "path", "required": True,
      "schema": {"type": "string", "pattern": anchored(VIDEO_ID.pattern)}}


def json_content(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def error_responses(*codes: int) -> dict[str, Any]:
    text = {400: "malformed request", 401: "missing or unknown API key",
            403: "the tenant's plan does not allow this priority (error.max_priority), or the tenant is disabled",
            404: "no such video or schedule (or not yours), or a deleted schedule (error.code schedule_deleted)",
            410: "the video expired under the tenant's plan and is deleted (error.code video_expired, "
                 "error.expired_at_ms), or it was erased (error.code erased, error.erased_at_ms)",
            409: "conflict with the video's state, an earlier use of the Idempotency-Key, or a stale lease epoch",
            413: "body too large", 415: "the body is not application/json",
            422: "a field is invalid (error.field names it)",
            429: "rate or in-flight quota exceeded (Retry-After)",
            503: "Kafka, Cassandra or capacity unavailable, or (error.code overloaded; submissions and idle "
                 "lease polls only) the gateway too far behind to take new work (Retry-After)"}
    return {str(c): json_content(ERROR, text[c]) for c in codes}


# Any request can meet these (guards.py), so every operation lists them, by reference.
TRANSPORT = {"414": {"$ref": "#/components/responses/UriTooLong"},
             "431": {"$ref": "#/components/responses/HeaderTooLarge"}}


def operation(summary: str, ok: dict[str, tuple[str, dict[str, Any]]], errors: tuple[int, ...], *, path_id: bool = True,
        body: dict[str, Any] | None = None, params: list[dict[str, Any]] | None = None, public: bool = False):
    op: dict[str, Any] = {"summary": summary,
                          "responses": {code: ({"description": d} if not s else json_content(s, d))
                                        for code, (d, s) in ok.items()} | error_responses(*errors) | TRANSPORT}
    parameters = ([ID] if path_id else []) + (params or [])
    if parameters:
        op["parameters"] = parameters
    if body is not None:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
    if public:
        op["security"] = []
    return op


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """An optional body field: the gateway reads null as "not given" (its default), so null is valid."""
    out = dict(schema)
    kind = out.get("type")
    if isinstance(kind, str):
        out["type"] = [kind, "null"]
    elif isinstance(kind, list) and "null" not in kind:
        out["type"] = [*kind, "null"]
    if "enum" in out and None not in out["enum"]:
        out["enum"] = [*out["enum"], None]
    return out


def optional(fields: dict[str, Any], *required: str) -> dict[str, Any]:
    return {k: (v if k in required else nullable(v)) for k, v in fields.items()}


IDEMPOTENCY = {"name": "Idempotency-Key", "in": "header", "required": False,
               "schema": {"type": "string", "minLength": 1, "maxLength": 200,
                          "pattern": f"^(?!{RESERVED_KEY_PREFIX}){KEY.pattern}$"},
               "description": "1-200 printable ASCII characters, not starting with 'schedule:' (else 400). "
                              "Same key + same body → same job. Absent: the gateway makes one and returns it "
                              "in the Idempotency-Key header and the body; reuse it to retry safely."}
