"""The OpenAPI 3.1 document of the public API, assembled here from its parts: openapi_parts (building
blocks), openapi_bodies (the video, DAG and submission bodies), openapi_schedules, openapi_workers (the
worker API) and openapi_rules (patterns and the model registry's rules). A unit test walks the app's router
and checks that every route is here and that nothing here is missing from the router."""

from __future__ import annotations

from typing import Any

from spotreel.api.config import GatewayConfig
from spotreel.api.submission import PRIORITY_RANGE
from spotreel.readmodel.webhooks import FINAL, PENDING
from spotreel.services.gateway.openapi_bodies import dag_body, submit_body
from spotreel.services.gateway.openapi_openai import openai_paths
from spotreel.services.gateway.openapi_parts import (ERROR, IDEMPOTENCY, STALE_PAGE, error_responses,
                                                     json_content, operation, page_token_param)
from spotreel.services.gateway.openapi_schedules import schedule_paths
from spotreel.services.gateway.openapi_workers import worker_paths
from spotreel.services.gateway.public import guards
from spotreel.services.gateway.public.videos import STATUSES


RULES = f"""Rules every operation follows:
- Every error is JSON: {{"error": {{"code", "message", "field"?}}}} (plus details some codes add); under
  /openai/v1, the OpenAI-compatible surface, OpenAI's {{"error": {{"message", "type", "param", "code"}}}}.
- A method a path does not serve is 405 `method_not_allowed`, with an `Allow` header listing the methods it does.
- A public POST, PATCH or DELETE that carries a body must send `Content-Type: application/json` (or
  `application/*+json`; charset, if given, utf-8): otherwise 415 `unsupported_media_type`. /internal/ is exempt,
  and /openai/v1 takes multipart/form-data too (what the openai SDK sends).
- A JSON string or key holding a lone UTF-16 surrogate (`\\ud800`) is 422 `invalid_field`, naming the field.
- A header line (name and value) over {guards.MAX_HEADER_BYTES} bytes is 431 `header_too_large`, naming the
  header; a request target over {guards.MAX_TARGET_BYTES} bytes is 414 `uri_too_long`. Past
  {guards.PARSER_CAP_BYTES} bytes, or for malformed HTTP, the HTTP parser itself answers a text/plain 400 and
  closes the connection.
- Optional body fields given as null take their default."""


USAGE = {"type": "object", "required": ["tenant", "used_gpu_seconds", "fair_share_gpu_seconds", "leases_held",
                                        "half_life_seconds", "as_of"],
         "properties": {"tenant": {"type": "string"}, "used_gpu_seconds": {"type": "number"},
                        "wasted_gpu_seconds": {"type": "number", "description": "of used_gpu_seconds, the time "
                                               "after a lease's newest checkpoint when it ended without success "
                                               "(work redone by a next lease, or lost with the job)"},
                        "fair_share_gpu_seconds": {"type": "number"}, "leases_held": {"type": "integer"},
                        "half_life_seconds": {"type": ["integer", "null"]}, "as_of": {"type": ["integer", "null"]}}}


ACCEPTED = {"type": "object", "required": ["job_id", "status", "queue_position", "estimated_wait_seconds"],
            "properties": {"job_id": {"type": "string"}, "status": {"type": "string"},
                           "idempotency_key": {"type": "string"}, "replayed": {"type": "boolean"},
                           "queue_position": {"type": ["integer", "null"]},
                           "estimated_wait_seconds": {"type": ["integer", "null"]},
                           "estimate_unavailable_reason": {"type": "string"},
                           "warnings": {"type": "array", "description": "accepted, but: no_webhook_secret (a "
                                        "callback_url for a tenant without a signing secret gets no webhooks)",
                                        "items": {"type": "object", "required": ["code", "message"],
                                                  "properties": {"code": {"type": "string"},
                                                                 "field": {"type": "string"},
                                                                 "message": {"type": "string"}}}}}}
DAG_ACCEPTED = {"type": "object", "required": ["videos", "order"], "properties": {
    "idempotency_key": {"type": "string"}, "dag_policy": {"type": "string"},
    "order": {"type": "array", "items": {"type": "string"}},
    "videos": {"type": "array", "items": {"allOf": [ACCEPTED, {"type": "object", "properties": {
        "key": {"type": "string"}}}]}}}}
COMMAND = {"type": "object", "properties": {"job_id": {"type": "string"}, "command_id": {"type": "string"},
                                            "requested": {"type": "string"}, "status": {"type": "string"}}}
VIDEO = {"$ref": "#/components/schemas/Video"}
ERASED = {"type": "object", "properties": {"job_id": {"type": "string"}, "erased": {"type": "boolean"},
                                           "command_id": {"type": "string"},
                                           "objects_deleted": {"type": "integer", "minimum": 0}},
          "required": ["job_id", "erased", "command_id", "objects_deleted"]}
# services/webhooks/store.py: PENDING, "retrying", FINAL.
WEBHOOK_STATES = (PENDING, "retrying", *sorted(FINAL))
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
        "limits": {"type": "object", "description": "the job's retry and time policy as submitted (POST "
                   "/v1/videos); stuck_steps and stuck_min_seconds are the deployment's stuck rule: a lease "
                   "whose step has not advanced for max(stuck_min_seconds, stuck_steps x its mean step time) "
                   "is ended as a failed attempt (error stuck) and retried",
                   "properties": {"timeout_seconds": {"type": ["integer", "null"]},
                                  "max_attempts": {"type": ["integer", "null"]},
                                  "backoff_base_seconds": {"type": ["integer", "null"]},
                                  "backoff_max_seconds": {"type": ["integer", "null"]},
                                  "stuck_steps": {"type": ["integer", "null"]},
                                  "stuck_min_seconds": {"type": ["integer", "null"]}}},
        "result": {"type": "object", "properties": {"content_url": {"type": "string"}, "sha256": {"type": "string"},
                                                    "size_bytes": {"type": "integer"}}},
        "expires_at": {"type": ["string", "null"], "format": "date-time",
                       "description": "when the video is deleted under the tenant's plan (its content answers 410 "
                                      "video_expired from then on); null: not succeeded, or a plan that keeps videos"},
        "pending_reason": {
            "type": ["object", "null"], "required": ["code", "message"],
            "description": "null while the job holds a lease or is terminal; else why it does not run yet, from "
                           "the read model and the pool's pool-stats over all partitions (about a second old): "
                           "accepted (not recorded by the scheduler yet), paused, parents_unfinished, "
                           "retry_backoff or run_at_future (with run_at), tenant_at_ceiling (tenant_leases >= "
                           "max_in_flight of its plan), behind_higher_tier (higher_tier_jobs of a higher priority "
                           "queued in the pool, all tenants: tiers go first whoever's they are), waiting_for_worker "
                           "(the next worker of the pool). Those two also carry queue_position and "
                           "estimated_wait_seconds: the job's place in dispatch's order (tier, then the tenants' "
                           "fair shares, then age) and the wait that follows, as the 202 computes them; null with "
                           "estimate_unavailable_reason when they cannot be told. pool_stats is null "
                           "when no recent statistics exist for the pool",
            "properties": {"code": {"type": "string", "enum": [
                "accepted", "paused", "parents_unfinished", "retry_backoff", "run_at_future", "tenant_at_ceiling",
                "behind_higher_tier", "waiting_for_worker", "scheduled"]},
                "message": {"type": "string"}, "pool": {"type": "string"},
                "run_at": {"type": ["string", "null"]},
                "higher_tier_jobs": {"type": "integer", "minimum": 1},
                "tenant_leases": {"type": "integer"}, "max_in_flight": {"type": "integer"},
                "queue_position": {"type": ["integer", "null"], "minimum": 1},
                "estimated_wait_seconds": {"type": ["integer", "null"]},
                "estimate_unavailable_reason": {"type": "string"},
                "pool_stats": {"type": ["object", "null"], "properties": {
                    "queued_by_tier": {"type": "object", "additionalProperties": {"type": "integer"}},
                    "busy_workers": {"type": "integer"}, "idle_workers": {"type": "integer"}}}}},
        "webhook": {"type": ["object", "null"], "required": ["state", "attempts", "last_error"],
                    "description": "null without a callback_url; else what became of the job's newest "
                                   "webhook: pending (nothing tried yet), retrying, delivered, failed (the "
                                   "receiver answered a permanent 4xx), gave_up (attempts used up), refused "
                                   "(the address may not be called) or no_secret (the tenant has no signing "
                                   "secret: spotreel tenant webhook-secret)",
                    "properties": {"state": {"type": "string", "enum": list(WEBHOOK_STATES)},
                                   "attempts": {"type": "integer", "minimum": 0},
                                   "last_error": {"type": ["string", "null"]},
                                   "last_status": {"type": ["integer", "null"]},
                                   "event_id": {"type": ["string", "null"]},
                                   "event_type": {"type": ["string", "null"]},
                                   "updated_at": {"type": ["string", "null"]}}},
    },
}
LAST_EVENT_ID = {"name": "Last-Event-ID", "in": "header", "required": False, "schema": {"type": "string"},
                 "description": "the id of the last event received: a reconnecting client gets only states of "
                                "a later version (nothing twice, nothing missed); anything but a decimal "
                                "version counts as absent"}
PRIORITY = {"type": "object", "required": ["priority"], "additionalProperties": False, "properties": {
    "priority": {"type": "integer", "minimum": PRIORITY_RANGE[0], "maximum": PRIORITY_RANGE[1]}}}


def _media_type_rule(paths: dict[str, Any]) -> None:
    """415 on every operation guards.json_bodies judges: public, and a method whose body counts (the
    OpenAI-compatible surface states its own)."""
    for path, ops in paths.items():
        if path.startswith(guards.OWN_PARSING):
            continue
        for method, op in ops.items():
            if method.upper() in guards.BODY_METHODS:
                op["responses"] |= error_responses(415)


# OpenAPI links (stateful testing, and clients that follow them): what an accepted create leads to. Each
# target gets an operationId named here; the link passes the new id as the target's path parameter.
LINKS = {
    ("/v1/videos", "post", "$response.body#/job_id"): {
        "GetVideo": ("/v1/videos/{id}", "get"), "GetVideoEvents": ("/v1/videos/{id}/events", "get"),
        "GetVideoAttempts": ("/v1/videos/{id}/attempts", "get"), "CancelVideo": ("/v1/videos/{id}/cancel", "post"),
        "SetVideoPriority": ("/v1/videos/{id}", "patch"), "PauseVideo": ("/v1/videos/{id}/pause", "post"),
        "ResumeVideo": ("/v1/videos/{id}/resume", "post"), "RetryVideo": ("/v1/videos/{id}/retry", "post"),
        "GetVideoContent": ("/v1/videos/{id}/content", "get")},
    ("/v1/dags", "post", "$response.body#/videos/0/job_id"): {
        "GetVideo": ("/v1/videos/{id}", "get"), "CancelVideo": ("/v1/videos/{id}/cancel", "post")},
    ("/v1/schedules", "post", "$response.body#/schedule_id"): {
        "GetSchedule": ("/v1/schedules/{id}", "get"), "DeleteSchedule": ("/v1/schedules/{id}", "delete"),
        "GetScheduleOccurrences": ("/v1/schedules/{id}/occurrences", "get"),
        "PauseSchedule": ("/v1/schedules/{id}/pause", "post"), "ResumeSchedule": ("/v1/schedules/{id}/resume", "post")},
}


def _links(paths: dict[str, Any]) -> None:
    for (path, method, source), targets in LINKS.items():
        links = paths[path][method]["responses"]["202"].setdefault("links", {})
        for op_id, (target, verb) in targets.items():
            paths[target][verb]["operationId"] = op_id
            links[op_id] = {"operationId": op_id, "parameters": {"id": source}}


def document(cfg: GatewayConfig | None = None, private: bool = False) -> dict[str, Any]:
    """`private`: the deployment's webhook_allow_private (callback_url takes IP literals and localhost)."""
    cfg = cfg or GatewayConfig()
    ok202 = {"202": ("command acknowledged by Kafka", COMMAND)}
    cmd_errors = (401, 404, 409, 410, 503)
    submit_errors = (400, 401, 403, 409, 413, 422, 429, 503)
    paths = {
        "/healthz": {"get": operation("liveness", {"200": ("ok", {"type": "object"})}, (), path_id=False, public=True)},
        "/openapi.json": {"get": operation("this document", {"200": ("OpenAPI 3.1", {"type": "object"})}, (),
                                     path_id=False, public=True)},
        "/v1/videos": {
            "post": operation("submit a video job; answered once the SubmitJob is durable in Kafka",
                        {"202": ("accepted", ACCEPTED)}, submit_errors, path_id=False,
                        body=submit_body(cfg, private), params=[IDEMPOTENCY]),
            "get": operation("the tenant's videos, newest first", {"200": ("a page", {"type": "object", "properties": {
                "videos": {"type": "array", "items": {"type": "object"}},
                "next_page_token": {"type": ["string", "null"]}}})}, (401, 422, 503), path_id=False,
                params=[{"name": "status", "in": "query", "schema": {"type": "string", "enum": sorted(STATUSES)}},
                        {"name": "limit", "in": "query", "schema": {
                            "type": "integer", "minimum": 1, "maximum": cfg.max_page_size,
                            "default": cfg.default_page_size}},
                        page_token_param(" (same status filter)")]),
        },
        "/v1/usage": {"get": operation(
            "the tenant's own GPU-seconds: ended leases' (used_gpu_seconds, no decay) and what fair share weighs "
            "it by (fair_share_gpu_seconds: decayed, plus the estimate of held leases), from the scheduler's "
            "tenant-usage reports", {"200": ("usage", USAGE)}, (401, 503), path_id=False)},
        "/v1/dags": {"post": operation(
            "submit videos with dependencies among them; each node is accepted like POST /v1/videos, in "
            "topological order, under the Idempotency-Key '<key>/<node key>'",
            {"202": ("accepted", DAG_ACCEPTED)}, submit_errors, path_id=False, body=dag_body(cfg, private),
            params=[IDEMPOTENCY])},
        "/v1/videos/{id}": {
            "get": operation("status, progress, attempt and result", {"200": ("the video", VIDEO)},
                             (401, 404, 410, 503)),
            "patch": operation("change the priority", ok202, (400, 401, 403, 404, 409, 410, 413, 422, 503),
                               body=PRIORITY),
            "delete": operation(
                "erase: the video's data key is deleted (its prompt, negative prompt and callback URL, kept "
                "encrypted, can no longer be read anywhere), its video and checkpoints are deleted, a running "
                "video is cancelled, and JobErased is recorded; the video answers 410 from then on. Repeating it "
                "is harmless", {"202": ("erasure done; JobErased acknowledged by Kafka", ERASED)}, (401, 404, 503)),
        },
        "/v1/videos/{id}/cancel": {"post": operation(
            "cancel: the scheduler stops the video (ending its lease, if any) and records it cancelled; the video "
            "stays readable with its history, status cancelled", ok202, cmd_errors)},
        "/v1/videos/{id}/events": {"get": operation("history (events and rejected commands)", {"200": ("history", {
            "type": "object"})}, (401, 404, 410, 503))},
        "/v1/videos/{id}/attempts": {"get": operation("one entry per lease", {"200": ("attempts", {"type": "object"})},
                                                (401, 404, 410, 503))},
        "/v1/videos/{id}/stream": {"get": operation(
            "Server-Sent Events of status/progress until a terminal state; each event's id is the job's event "
            "version. `status` events carry pending_reason (as in GET /v1/videos/{id}); a `pending` event "
            "(id, version, pending_reason; the id of the version already sent) says the reason changed without "
            "a new version", {"200": ("text/event-stream", {})}, (401, 404, 410), params=[LAST_EVENT_ID])},
        "/v1/videos/{id}/content": {"get": operation("the MP4", {"302": ("redirect to a presigned URL", {})},
                                               (401, 404, 409, 410, 503))},
        "/v1/videos/{id}/pause": {"post": operation("pause", ok202, cmd_errors)},
        "/v1/videos/{id}/resume": {"post": operation("resume", ok202, cmd_errors)},
        "/v1/videos/{id}/retry": {"post": operation("requeue a failed or dead-lettered video", ok202, cmd_errors)},
        **schedule_paths(cfg, private),
        **worker_paths(cfg),
        **openai_paths(cfg),
    }
    _media_type_rule(paths)
    for listing in ("/v1/videos", "/v1/schedules", "/v1/schedules/{id}/occurrences"):
        paths[listing]["get"]["responses"] |= STALE_PAGE
    _links(paths)
    return {
        "openapi": "3.1.0",
        "info": {"title": "spotreel public API", "version": "1", "description": RULES},
        "security": [{"apiKey": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {"apiKey": {"type": "http", "scheme": "bearer"},
                                "workerKey": {"type": "http", "scheme": "bearer",
                                              "description": "worker key (kind 'worker'); only for /internal"}},
            "responses": {
                "UriTooLong": json_content(ERROR, f"request target over {guards.MAX_TARGET_BYTES} bytes"),
                "HeaderTooLarge": json_content(ERROR, f"a header line over {guards.MAX_HEADER_BYTES} bytes "
                                               "(error.field names it)"),
            },
            "schemas": {
                "Video": VIDEO_SCHEMA,
                "Error": {"type": "object", "required": ["error"], "properties": {"error": {
                    "type": "object", "required": ["code", "message"],
                    "properties": {"code": {"type": "string"}, "message": {"type": "string"},
                                   "field": {"type": "string"},
                                   "allowed": {"type": "array", "items": {"type": "string"},
                                               "description": "405: the methods the path serves"}}}}},
            },
        },
    }
