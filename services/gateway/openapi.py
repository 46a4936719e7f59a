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
            409: "conflict with the video's state, an earlier use of the Idempotency-Key, or a stale lease epoch",
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
DAG = {"type": "object", "required": ["nodes"], "additionalProperties": False, "properties": {
    "nodes": {"type": "array", "minItems": 1, "maxItems": 100, "items": {
        "type": "object", "required": ["key", "prompt"], "additionalProperties": False,
        "properties": {"key": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"},
                       **{k: v for k, v in SUBMIT["properties"].items() if k not in ("dag_policy", "parents")},
                       "parents": {"type": "array", "items": {"type": "string"},
                                   "description": "keys of other nodes, or ids of the tenant's videos"}}}},
    "dag_policy": {"type": "string", "enum": ["fail_fast", "continue"]}}}
DAG_ACCEPTED = {"type": "object", "required": ["videos", "order"], "properties": {
    "idempotency_key": {"type": "string"}, "dag_policy": {"type": "string"},
    "order": {"type": "array", "items": {"type": "string"}},
    "videos": {"type": "array", "items": {"allOf": [ACCEPTED, {"type": "object", "properties": {
        "key": {"type": "string"}}}]}}}}
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


WORKER_ID = {"name": "id", "in": "path", "required": True, "description": "the worker's id",
             "schema": {"type": "string", "pattern": "^[A-Za-z0-9_.:-]{1,128}$"}}
JOB_ID = {"name": "job_id", "in": "path", "required": True, "schema": {"type": "string", "pattern": "^j[0-9a-f]{32}$"}}
WORKER_SECURITY = [{"workerKey": []}]
FENCE = {"epoch": {"type": "integer", "description": "the lease's fencing epoch"}, "worker_id": {"type": "string"},
         "command_id": {"type": "string", "description": "optional; default: one the gateway makes"}}
VERDICT = {"type": "object", "properties": {
    "job_id": {"type": "string"}, "command_id": {"type": "string"}, "epoch": {"type": "integer"},
    "verdict": {"type": "string", "enum": ["accepted", "pending"]}, "event": {"type": "string"},
    "cancel": {"type": "boolean", "description": "heartbeat/progress: stop, the job was cancelled"},
    "drain": {"type": "boolean", "description": "heartbeat/progress: checkpoint and release (paused)"},
    "lease_expires_at_ms": {"type": "integer"}}}
LEASE_BODIES = {
    "heartbeat": ("renew the lease; the answer carries cancel/drain instructions", {}),
    "progress": ("report progress", {"step": {"type": "integer"}, "progress_pct": {"type": "number"},
                                     "phase": {"type": "string"}}),
    "checkpoint": ("record a durable checkpoint object", {
        "checkpoint_key": {"type": "string"}, "step": {"type": "integer"}, "progress_pct": {"type": "number"},
        "checksum": {"type": "string"}, "size_bytes": {"type": "integer"},
        "duration_ms": {"type": "integer", "minimum": 0, "maximum": 86_400_000,
                        "description": "optional: how long writing the checkpoint took (feeds the pool's "
                                       "checkpoint cost, mean_checkpoint_ms)"}}),
    "complete": ("complete the job with its uploaded artifact", {
        "artifact_key": {"type": "string"}, "artifact_checksum": {"type": "string"},
        "artifact_size_bytes": {"type": "integer"}}),
    "fail": ("report a visible failure", {"error_code": {"type": "string"}, "error_message": {"type": "string"},
                                          "retryable": {"type": "boolean"},
                                          "invalid_checkpoint_key": {"type": "string"}}),
    "release": ("hand the lease back (preempted, drained, cancelled)", {"reason": {"type": "string"}}),
}


def _worker_paths() -> dict[str, Any]:
    def op(summary, ok, errors, params, body):
        o = _op(summary, ok, errors, path_id=False, params=params, body=body)
        o["security"] = WORKER_SECURITY
        return o

    profile = {"type": "object", "properties": {"gpu_type": {"type": "string"},
                                                "models": {"type": "array", "items": {"type": "string"}},
                                                "warm_models": {"type": "array", "items": {"type": "string"}}}}
    paths: dict[str, Any] = {
        "/internal/workers/{id}/register": {"post": op(
            "register a worker's profile; answers the lease and heartbeat cadence",
            {"200": ("registered", {"type": "object"})}, (400, 401, 422), [WORKER_ID], profile)},
        "/internal/workers/{id}/lease": {"post": op(
            "long-poll for a lease (RequestWork to the scheduler, answer on the assignments topic); a lease "
            "granted after an earlier poll of this worker ended is handed to this one at once",
            {"200": ("a lease: job, epoch, expiry, what to run and where to resume", {"type": "object"}),
             "204": ("no work within wait_seconds (X-Spotreel-No-Work says why)", {})}, (400, 401, 422, 503), [WORKER_ID],
            {**profile, "properties": {**profile["properties"], "wait_seconds": {"type": "number"},
                                       "draining": {"type": "boolean"}, "lease_ttl_ms": {"type": "integer"}}})},
    }
    for action, (summary, fields) in LEASE_BODIES.items():
        paths[f"/internal/leases/{{job_id}}/{action}"] = {"post": op(
            summary + "; fenced by the lease epoch (409 when stale)",
            {"200": ("the scheduler accepted it", VERDICT), "202": ("durable, no verdict yet", VERDICT)},
            (400, 401, 404, 409, 422, 503), [JOB_ID],
            {"type": "object", "required": ["epoch", "worker_id", *fields], "properties": {**FENCE, **fields}})}
    return paths


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
        "/v1/dags": {"post": _op(
            "submit videos with dependencies among them; each node is accepted like POST /v1/videos, in "
            "topological order, under the Idempotency-Key '<key>/<node key>'",
            {"202": ("accepted", DAG_ACCEPTED)}, (400, 401, 409, 413, 422, 429, 503), path_id=False, body=DAG,
            params=[IDEMPOTENCY])},
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
        **_worker_paths(),
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "spotreel public API", "version": "1"},
        "security": [{"apiKey": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {"apiKey": {"type": "http", "scheme": "bearer"},
                                "workerKey": {"type": "http", "scheme": "bearer",
                                              "description": "worker key (kind 'worker'); only for /internal"}},
            "schemas": {
                "Video": VIDEO_SCHEMA,
                "Error": {"type": "object", "required": ["error"], "properties": {"error": {
                    "type": "object", "required": ["code", "message"],
                    "properties": {"code": {"type": "string"}, "message": {"type": "string"},
                                   "field": {"type": "string"}}}}},
            },
        },
    }
