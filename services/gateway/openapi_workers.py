"""The worker API's part of /openapi.json (/internal/, under a worker key): register, the lease long-poll and
the fenced lease commands."""

from __future__ import annotations

from typing import Any

from spotreel.api.config import GatewayConfig
from spotreel.domain import limits
from spotreel.services.gateway.openapi_parts import operation
from spotreel.services.gateway.worker_api.wire import MAX_FINGERPRINT_CHARS


WORKER_ID = {"name": "id", "in": "path", "required": True, "description": "the worker's id",
             "schema": {"type": "string", "pattern": "^[A-Za-z0-9_.:-]{1,128}$"}}
JOB_ID = {"name": "job_id", "in": "path", "required": True, "schema": {"type": "string", "pattern": "^j[0-9a-f]{32}$"}}
WORKER_SECURITY = [{"workerKey": []}]
# internal._take: unknown fields are 422, every integer is an Avro long and never negative, a required field
# may not be null, an optional one given as null counts as absent (internal.MAX_LONG).
LONG = {"type": "integer", "minimum": 0, "maximum": 2**63 - 1}
FENCE = {"epoch": {**LONG, "description": "the lease's fencing epoch"}, "worker_id": {"type": "string"},
         "command_id": {"type": ["string", "null"], "maxLength": 128,
                        "description": "optional (null or empty: one the gateway makes)"}}
VERDICT = {"type": "object", "properties": {
    "job_id": {"type": "string"}, "command_id": {"type": "string"}, "epoch": {"type": "integer"},
    "verdict": {"type": "string", "enum": ["accepted", "pending"]}, "event": {"type": "string"},
    "cancel": {"type": "boolean", "description": "heartbeat/progress: stop, the job was cancelled (from this "
                                                  "renewal's verdict, or from an earlier one's that came late)"},
    "drain": {"type": "boolean", "description": "heartbeat/progress: checkpoint and release (paused)"},
    "lease_expires_at_ms": {"type": "integer"},
    "renew_in_seconds": {"type": "number", "description": "heartbeat/progress: the scheduler is behind; send "
                                                          "the next renewal no sooner than this after this one"}}}
LEASE_BODIES = {
    "heartbeat": ("renew the lease; the answer carries cancel/drain instructions", {}, ()),
    "progress": ("report progress", {"step": LONG, "progress_pct": {"type": "number"},
                                     "phase": {"type": ["string", "null"]}}, ("step", "progress_pct")),
    "checkpoint": ("record a durable checkpoint object", {
        "checkpoint_key": {"type": "string"}, "step": LONG, "progress_pct": {"type": "number"},
        "checksum": {"type": "string"}, "size_bytes": LONG,
        "duration_ms": {"type": ["integer", "null"], "minimum": 0, "maximum": 86_400_000,
                        "description": "optional: how long writing the checkpoint took (feeds the pool's "
                                       "checkpoint cost, mean_checkpoint_ms)"},
        "fingerprint": {"type": ["string", "null"], "maxLength": MAX_FINGERPRINT_CHARS,
                        "description": "optional: the writer's numerical environment for this render (who can "
                                       "resume from it exactly); default: the one the lease was asked with"}},
        ("checkpoint_key", "step", "progress_pct", "checksum", "size_bytes")),
    "complete": ("complete the job with its uploaded artifact", {
        "artifact_key": {"type": "string"}, "artifact_checksum": {"type": "string"},
        "artifact_size_bytes": LONG}, ("artifact_key", "artifact_checksum", "artifact_size_bytes")),
    "fail": ("report a visible failure", {"error_code": {"type": "string"}, "error_message": {"type": "string"},
                                          "retryable": {"type": ["boolean", "null"]},
                                          "invalid_checkpoint_key": {"type": ["string", "null"]}},
             ("error_code", "error_message")),
    "release": ("hand the lease back (preempted, drained, cancelled)", {"reason": {"type": ["string", "null"]}}, ()),
}
MODELS = {"type": "array", "items": {"type": "string", "minLength": 1}}


def worker_paths(cfg: GatewayConfig) -> dict[str, Any]:
    def op(summary, ok, errors, params, body):
        o = operation(summary, ok, errors, path_id=False, params=params, body=body)
        o["security"] = WORKER_SECURITY
        return o

    profile = {"type": "object", "required": ["gpu_type", "models"], "additionalProperties": False,
               "properties": {"gpu_type": {"type": "string"}, "models": MODELS, "warm_models": MODELS,
                              "draining": {"type": ["boolean", "null"]},
                              "fingerprint": {"type": ["string", "null"], "maxLength": MAX_FINGERPRINT_CHARS,
                                              "description": "the worker's numerical environment (key=value;..."
                                                             "): which checkpoints it resumes exactly"}}}
    paths: dict[str, Any] = {
        "/internal/workers/{id}/register": {"post": op(
            "register a worker's profile; answers the lease and heartbeat cadence",
            {"200": ("registered", {"type": "object"})}, (400, 401, 422), [WORKER_ID], profile)},
        "/internal/workers/{id}/lease": {"post": op(
            "long-poll for a lease (RequestWork to the scheduler, answer on the assignments topic); a lease "
            "granted after an earlier poll of this worker ended is handed to this one at once",
            {"200": ("a lease: job, epoch, expiry, what to run and where to resume", {"type": "object"}),
             "204": ("no work within wait_seconds (X-Spotreel-No-Work says why)", {})}, (400, 401, 409, 422, 503),
            [WORKER_ID],
            {"type": "object", "additionalProperties": False,
             "description": "gpu_type and models may be left out once the worker registered (else 409 "
                            "worker_not_registered)",
             "properties": {**profile["properties"], "gpu_type": {"type": ["string", "null"]},
                            "wait_seconds": {"type": ["number", "null"], "minimum": 0,
                                             "maximum": cfg.lease_poll_max_seconds},
                            "lease_ttl_ms": {"type": ["integer", "null"], "minimum": limits.MIN_LEASE_TTL_MS,
                                             "maximum": limits.MAX_LEASE_TTL_MS}}})},
    }
    for action, (summary, fields, required) in LEASE_BODIES.items():
        paths[f"/internal/leases/{{job_id}}/{action}"] = {"post": op(
            summary + "; fenced by the lease epoch (409 when stale)",
            {"200": ("the scheduler accepted it", VERDICT),
             "202": ("durable, no verdict yet (a heartbeat or progress report is answered within "
                     "renewal_answer_seconds)", VERDICT)},
            (400, 401, 404, 409, 422, 503), [JOB_ID],
            {"type": "object", "required": ["epoch", "worker_id", *required], "additionalProperties": False,
             "properties": {**FENCE, **fields}})}
    return paths
