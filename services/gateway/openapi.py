"""The OpenAPI 3.1 document of the public API. A unit test walks the app's router and checks that every
route is here and that nothing here is missing from the router."""

from __future__ import annotations

from typing import Any

ERROR = {"$ref": "#/components/schemas/Error"}
ID = {"name": "id", "in": "path", "required": True, "schema": {"type": "string", "pattern": "^j[0-9a-f]{32}$"}}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*codes: int) -> dict[str, Any]:
    text = {400: "malformed request", 401: "missing or unknown API key", 404: "no such video (or not yours)",
            409: "conflict with the video's state or with an earlier use of the Idempotency-Key",
            413: "body too large", 422: "a field is invalid (error.field names it)",
            429: "rate or in-flight quota exceeded (Retry-After)",
            503: "Kafka, Cassandra or capacity unavailable (Retry-After)"}
    return {str(c): _json(ERROR, text[c]) for c in codes}


def _op(summary: str, ok: dict[str, tuple[str, dict[str, Any]]], errors: tuple[int, ...], *, path_id: bool = True,
        body: dict[str, Any] | None = None, params: list[dict[str, Any]] | None = None, public: bool = False):
    op: dict[str, Any] = {"summary": summary,
                          "responses": {code: ({"description": d} if not s else _json(s, d))
                                        for code, (d, s) in ok.items()} | _errors(*errors)}
    parameters = ([ID] if path_id else []) + (params or [])
    if parameters:
        op["parameters"] = parameters
    if body is not None:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
    if public:
        op["security"] = []
    return op


SUBMIT = {
    "type": "object", "required": ["prompt"], "additionalProperties": False,
    "properties": {
        "prompt": {"type": "string", "minLength": 1, "maxLength": 4000},
        "model": {"type": "string"}, "gpu_type": {"type": "string"},
        "duration": {"type": "number", "exclusiveMinimum": 0, "description": "seconds"},
        "resolution": {"type": "string", "pattern": "^[1-9][0-9]{1,3}x[1-9][0-9]{1,3}$"},
        "fps": {"type": "integer", "minimum": 1}, "num_steps": {"type": "integer", "minimum": 1},
        "seed": {"type": "integer", "minimum": 0, "description": "default: derived from the job id"},
        "priority": {"type": "integer", "minimum": 0, "maximum": 9, "description": "higher runs first"},
        "callback_url": {"type": "string", "format": "uri"},
        "run_at": {"type": "integer", "description": "epoch milliseconds; exclusive with delay_seconds"},
        "delay_seconds": {"type": "integer", "minimum": 0},
        "parents": {"type": "array", "items": {"type": "string"}, "description": "DAG parents (video ids)"},
        "dag_policy": {"type": "string", "enum": ["fail_fast", "continue"]},
    },
}
ACCEPTED = {"type": "object", "required": ["job_id", "status", "queue_position", "estimated_wait_seconds"],
            "properties": {"job_id": {"type": "string"}, "status": {"type": "string"},
                           "idempotency_key": {"type": "string"}, "replayed": {"type": "boolean"},
                           "queue_position": {"type": ["integer", "null"]},
                           "estimated_wait_seconds": {"type": ["integer", "null"]},
                           "estimate_unavailable_reason": {"type": "string"}}}
COMMAND = {"type": "object", "properties": {"job_id": {"type": "string"}, "command_id": {"type": "string"},
                                            "requested": {"type": "string"}, "status": {"type": "string"}}}
VIDEO = {"$ref": "#/components/schemas/Video"}
VIDEO_SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "string"}, "status": {"type": "string"}, "prompt": {"type": "string"},
        "model": {"type": "string"}, "priority": {"type": "integer"},
        "progress": {"type": "object", "description": "percent never decreases; while resuming, message reads "
                     "'resuming from checkpoint at N%' and current_percent shows the catch-up",
                     "properties": {"percent": {"type": "number"}, "phase": {"type": "string"},
                                    "resuming": {"type": "boolean"}, "resume_from_percent": {"type": "number"},
                                    "current_percent": {"type": "number"}, "message": {"type": "string"}}},
        "attempt": {"type": "object"},
        "result": {"type": "object", "properties": {"content_url": {"type": "string"}, "sha256": {"type": "string"},
                                                    "size_bytes": {"type": "integer"}}},
    },
}
IDEMPOTENCY = {"name": "Idempotency-Key", "in": "header", "required": False, "schema": {"type": "string"},
               "description": "Same key + same body → same job. Absent: the gateway makes one and returns it "
                              "in the Idempotency-Key header and the body; reuse it to retry safely."}


def document() -> dict[str, Any]:
    ok202 = {"202": ("command acknowledged by Kafka", COMMAND)}
    cmd_errors = (401, 404, 409, 503)
    paths = {
        "/healthz": {"get": _op("liveness", {"200": ("ok", {"type": "object"})}, (), path_id=False, public=True)},
        "/metrics": {"get": _op("Prometheus metrics", {"200": ("text exposition format", {})}, (), path_id=False,
                                public=True)},
        "/openapi.json": {"get": _op("this document", {"200": ("OpenAPI 3.1", {"type": "object"})}, (),
                                     path_id=False, public=True)},
        "/v1/videos": {
            "post": _op("submit a video job; answered once the SubmitJob is durable in Kafka",
                        {"202": ("accepted", ACCEPTED)}, (400, 401, 409, 413, 422, 429, 503), path_id=False,
                        body=SUBMIT, params=[IDEMPOTENCY]),
            "get": _op("the tenant's videos, newest first", {"200": ("a page", {"type": "object", "properties": {
                "videos": {"type": "array", "items": {"type": "object"}},
                "next_page_token": {"type": ["string", "null"]}}})}, (401, 422, 503), path_id=False,
                params=[{"name": "status", "in": "query", "schema": {"type": "string"}},
                        {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1}},
                        {"name": "page_token", "in": "query", "schema": {"type": "string"}}]),
        },
        "/v1/videos/{id}": {
            "get": _op("status, progress, attempt and result", {"200": ("the video", VIDEO)}, (401, 404, 503)),
            "patch": _op("change the priority", ok202, (400, 401, 404, 409, 422, 503),
                         body={"type": "object", "properties": {"priority": {"type": "integer"}}}),
            "delete": _op("cancel", ok202, cmd_errors),
        },
        "/v1/videos/{id}/events": {"get": _op("history (events and rejected commands)", {"200": ("history", {
            "type": "object"})}, (401, 404, 503))},
        "/v1/videos/{id}/attempts": {"get": _op("one entry per lease", {"200": ("attempts", {"type": "object"})},
                                                (401, 404, 503))},
        "/v1/videos/{id}/stream": {"get": _op("Server-Sent Events of status/progress until a terminal state",
                                              {"200": ("text/event-stream", {})}, (401, 404))},
        "/v1/videos/{id}/content": {"get": _op("the MP4", {"302": ("redirect to a presigned URL", {})},
                                               (401, 404, 409, 503))},
        "/v1/videos/{id}/pause": {"post": _op("pause", ok202, cmd_errors)},
        "/v1/videos/{id}/resume": {"post": _op("resume", ok202, cmd_errors)},
        "/v1/videos/{id}/retry": {"post": _op("requeue a failed or dead-lettered video", ok202, cmd_errors)},
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "spotreel public API", "version": "1"},
        "security": [{"apiKey": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {"apiKey": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Video": VIDEO_SCHEMA,
                "Error": {"type": "object", "required": ["error"], "properties": {"error": {
                    "type": "object", "required": ["code", "message"],
                    "properties": {"code": {"type": "string"}, "message": {"type": "string"},
                                   "field": {"type": "string"}}}}},
            },
        },
    }
