"""The /v1/schedules part of /openapi.json: the schedule body (a cron expression, its zone and policies, and a
job template with the video's fields) and the schedule routes."""

from __future__ import annotations

from typing import Any

from spotreel.api.config import GatewayConfig
from spotreel.api.submission import MAX_RUN_AT_MS
from spotreel.domain.cron import expression_pattern, zone_names
from spotreel.services.gateway.openapi_bodies import video_fields
from spotreel.services.gateway.openapi_parts import IDEMPOTENCY, operation, optional, page_token_param
from spotreel.services.gateway.openapi_rules import anchored, registry_rules
from spotreel.services.gateway.public import schedules as sched


SCHEDULE_ID = {"name": "id", "in": "path", "required": True,
               "schema": {"type": "string", "pattern": anchored(sched.SCHEDULE_ID.pattern)}}
SCHEDULE_COMMAND = {"type": "object", "properties": {
    "schedule_id": {"type": "string"}, "command_id": {"type": "string"}, "requested": {"type": "string"},
    "status": {"type": "string"}}}
SCHEDULE_STATUSES = ["accepted", "active", "paused", "deleted"]


def _schedule_body(cfg: GatewayConfig, private: bool) -> dict[str, Any]:
    fields = optional(video_fields(cfg, private), "prompt")
    job = {"type": "object", "required": ["prompt"], "additionalProperties": False,
           "allOf": [*registry_rules(cfg)],
           "properties": {k: v for k, v in fields.items()
                          if k not in sched.NOT_IN_TEMPLATE + sched.UNSUPPORTED_IN_TEMPLATE}}
    job["properties"]["seed"] = {**fields["seed"], "description": "default: derived from the schedule id; the "
                                 "same for every occurrence"}
    return {"type": "object", "required": ["cron", "job"], "additionalProperties": False, "properties": optional({
        "cron": {"type": "string", "minLength": 1, "maxLength": sched.MAX_CRON_CHARS,
                 "pattern": expression_pattern(),
                 "description": "five fields (minute hour day-of-month month day-of-week; names, ranges, steps, "
                                "L and D#K) or @yearly @monthly @weekly @daily @hourly; hashed (H) and random (R) "
                                "fields are refused. The pattern is the grammar (domain/cron.py); an expression "
                                "that matches it but never fires (0 0 30 2 *) is 422 too"},
        "timezone": {"type": "string", "default": "UTC", "enum": list(zone_names()),
                     "description": "IANA zone the expression is read in (the names of the gateway host's tz "
                                    "database). A local time in a spring-forward gap "
                                    "runs once, at the first instant after the gap; one in a fall-back overlap "
                                    "runs once, at its first occurrence"},
        "catch_up": {"type": "string", "enum": list(sched.CATCH_UP), "default": sched.CATCH_UP[0],
                     "description": "missed occurrences (the scheduler was down or late): skip runs the latest only "
                                    "if within catch_up_grace_seconds; run_once runs the latest; run_all runs each, "
                                    "at most catch_up_max_runs (the latest ones)"},
        "catch_up_grace_seconds": {"type": "integer", "minimum": 0, "maximum": sched.MAX_GRACE_S, "default": 60},
        "catch_up_max_runs": {"type": "integer", "minimum": 1, "maximum": sched.MAX_CATCH_UP_RUNS, "default": 100},
        "overlap": {"type": "string", "enum": list(sched.OVERLAP), "default": sched.OVERLAP[0],
                    "description": "an occurrence due while an earlier occurrence's job has not ended: allow "
                                   "runs it too; skip does not run it (listed as skipped, reason overlap); "
                                   "cancel_previous runs it and cancels the earlier jobs"},
        "start_at": {"type": "integer", "minimum": 0, "maximum": MAX_RUN_AT_MS,
                     "description": "epoch milliseconds; occurrences at or after it count (default: from now)"},
        "job": job,
    }, "cron", "job")}


SCHEDULE_SCHEMA = {"type": "object", "required": ["id", "status", "cron", "timezone"], "properties": {
    "id": {"type": "string"}, "status": {"type": "string", "enum": SCHEDULE_STATUSES},
    "cron": {"type": ["string", "null"]}, "timezone": {"type": ["string", "null"]},
    "catch_up": {"type": ["string", "null"]}, "overlap": {"type": ["string", "null"]},
    "job": {"type": "object", "description": "the template each occurrence's video is submitted with; "
                                             "timeout_seconds, guidance_scale, negative_prompt and sampler are "
                                             "null where the schedule set none",
            "properties": {"timeout_seconds": {"type": ["integer", "null"]},
                           "guidance_scale": {"type": ["number", "null"]},
                           "negative_prompt": {"type": ["string", "null"]},
                           "sampler": {"type": ["string", "null"]}}},
    "next_occurrence_at": {"type": ["string", "null"]},
    "last_tick_at": {"type": ["string", "null"]}, "version": {"type": "integer"}}}


def schedule_paths(cfg: GatewayConfig, private: bool) -> dict[str, Any]:
    page = [{"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": cfg.max_page_size,
                                                         "default": cfg.default_page_size}},
            page_token_param("")]
    ok202 = {"202": ("command acknowledged by Kafka", SCHEDULE_COMMAND)}
    # 404 is also a deleted schedule's (error.code schedule_deleted), once the read model shows it deleted.
    errors = (401, 404, 503)

    def op(summary, ok, errs, **kw):
        return operation(summary, ok, errs, path_id=False, **kw)

    return {
        "/v1/schedules": {
            "post": op("create a cron schedule: one video job per occurrence; answered once the CreateSchedule is "
                       "durable in Kafka. Same Idempotency-Key and body: the same schedule",
                       {"202": ("accepted", {"type": "object", "required": ["schedule_id", "status"], "properties": {
                           "schedule_id": {"type": "string"}, "status": {"type": "string"},
                           "idempotency_key": {"type": "string"}, "replayed": {"type": "boolean"}}})},
                       (400, 401, 409, 413, 422, 429, 503), body=_schedule_body(cfg, private), params=[IDEMPOTENCY]),
            "get": op("the tenant's schedules, newest first (deleted ones included, status deleted: the only "
                      "route that still shows one)", {"200": ("a page", {
                "type": "object", "properties": {"schedules": {"type": "array", "items": SCHEDULE_SCHEMA},
                                                 "next_page_token": {"type": ["string", "null"]}}})},
                      (401, 422, 503), params=page),
        },
        "/v1/schedules/{id}": {
            "get": op("a schedule: expression, zone, policies, job template, next occurrence",
                      {"200": ("the schedule", SCHEDULE_SCHEMA)}, (401, 404, 503), params=[SCHEDULE_ID]),
            "delete": op("delete: no occurrence fires after it; jobs already submitted keep running. Answered 200 "
                         "once the read model shows the schedule deleted (from then on its routes answer 404 "
                         "schedule_deleted), or 202 if that takes longer than the gateway waits (the command is "
                         "durable and applies later)",
                         {"200": ("deleted", SCHEDULE_COMMAND), **ok202}, errors, params=[SCHEDULE_ID]),
        },
        "/v1/schedules/{id}/occurrences": {"get": op(
            "past occurrences, newest first: fired ones with their video's id (status fired until the job ends, "
            "then its terminal status), and skipped ranges with the reason (missed, paused, overlap)",
            {"200": ("a page", {"type": "object", "properties": {
                "occurrences": {"type": "array", "items": {"type": "object"}},
                "next_page_token": {"type": ["string", "null"]}}})}, (401, 404, 422, 503),
            params=[SCHEDULE_ID, *page])},
        "/v1/schedules/{id}/pause": {"post": op("pause: nothing fires; what falls in the pause is skipped, not "
                                                "caught up", ok202, errors, params=[SCHEDULE_ID])},
        "/v1/schedules/{id}/resume": {"post": op("resume: the next occurrence from now on fires", ok202, errors,
                                                 params=[SCHEDULE_ID])},
    }
