"""The OpenAPI 3.1 document of the public API. A unit test walks the app's router and checks that every
route is here and that nothing here is missing from the router."""

from __future__ import annotations

from typing import Any

from spotreel.domain import limits
from spotreel.domain.cron import WHITESPACE, expression_pattern, zone_names
from spotreel.services.gateway.public import guards, pagetokens
from spotreel.api.config import GatewayConfig
from spotreel.services.gateway.public.dags import MAX_NODES, NODE_KEY
from spotreel.api.submission import JOB_ID as VIDEO_ID
from spotreel.api.submission import (ALL_SAMPLERS, DAG_POLICIES, KEY, MAX_RUN_AT_MS, MAX_SEED, NAME,
                                                  POLICY_DEFAULTS, POLICY_LIMITS, PRIORITY_RANGE, RESERVED_KEY_PREFIX, resolution_rule)
from spotreel.services.gateway.public.videos import STATUSES
from spotreel.services.gateway.public import schedules as sched
from spotreel import webhook_targets
from spotreel.webhook_filters import FILTERS as WEBHOOK_FILTERS
from spotreel.readmodel.webhooks import FINAL, PENDING
from spotreel.services.gateway.openapi_rules import anchored, registry_rules, resolution_pattern


ERROR = {"$ref": "#/components/schemas/Error"}


def _page_token(listing: str) -> dict[str, Any]:
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
RULES = f"""Rules every operation follows:
- Every error is JSON: {{"error": {{"code", "message", "field"?}}}} (plus details some codes add).
- A method a path does not serve is 405 `method_not_allowed`, with an `Allow` header listing the methods it does.
- A public POST, PATCH or DELETE that carries a body must send `Content-Type: application/json` (or
  `application/*+json`; charset, if given, utf-8): otherwise 415 `unsupported_media_type`. /internal/ is exempt.
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


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*codes: int) -> dict[str, Any]:
    text = {400: "malformed request", 401: "missing or unknown API key",
            403: "the tenant's plan does not allow this priority (error.max_priority), or the tenant is disabled",
            404: "no such video or schedule (or not yours), or a deleted schedule (error.code schedule_deleted)",
            410: "the video expired under the tenant's plan and is deleted (error.code video_expired, "
                 "error.expired_at_ms)",
            409: "conflict with the video's state, an earlier use of the Idempotency-Key, or a stale lease epoch",
            413: "body too large", 415: "the body is not application/json",
            422: "a field is invalid (error.field names it)",
            429: "rate or in-flight quota exceeded (Retry-After)",
            503: "Kafka, Cassandra or capacity unavailable, or (error.code overloaded; submissions and idle "
                 "lease polls only) the gateway too far behind to take new work (Retry-After)"}
    return {str(c): _json(ERROR, text[c]) for c in codes}


# Any request can meet these (guards.py), so every operation lists them, by reference.
TRANSPORT = {"414": {"$ref": "#/components/responses/UriTooLong"},
             "431": {"$ref": "#/components/responses/HeaderTooLarge"}}


def _op(summary: str, ok: dict[str, tuple[str, dict[str, Any]]], errors: tuple[int, ...], *, path_id: bool = True,
        body: dict[str, Any] | None = None, params: list[dict[str, Any]] | None = None, public: bool = False):
    op: dict[str, Any] = {"summary": summary,
                          "responses": {code: ({"description": d} if not s else _json(s, d))
                                        for code, (d, s) in ok.items()} | _errors(*errors) | TRANSPORT}
    parameters = ([ID] if path_id else []) + (params or [])
    if parameters:
        op["parameters"] = parameters
    if body is not None:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
    if public:
        op["security"] = []
    return op


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
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


def _optional(fields: dict[str, Any], *required: str) -> dict[str, Any]:
    return {k: (v if k in required else _nullable(v)) for k, v in fields.items()}


# What submission.normalize refuses in a prompt: empty after str.strip(), and NUL. The whitespace is spelled
# out, every character str.strip() removes: a pattern's \s means other characters to a JSON Schema (ECMA-262)
# validator than to Python (U+001C..U+001F, U+0085 are whitespace to Python only), and schemathesis found a
# prompt of U+001C the document allowed and the gateway refused.
NO_NUL = "^[^\\u0000]*$"
PROMPT = f"^[^\\u0000]*[^{WHITESPACE[1:-1]}\\u0000][^\\u0000]*$"


def _video_fields(cfg: GatewayConfig, private: bool) -> dict[str, Any]:
    """POST /v1/videos fields, the limits submission.normalize applies. Every field but prompt is optional
    and may be null (its default): _optional below. `private`: the deployment's webhook_allow_private."""
    return {
        "prompt": {"type": "string", "minLength": 1, "maxLength": cfg.max_prompt_chars, "pattern": PROMPT,
                   "description": "at least one non-whitespace character; no NUL"},
        "model": {"type": "string", "pattern": anchored(NAME.pattern), "default": cfg.default_model,
                  "description": "with a model registry (SPOTREEL_MODEL_REGISTRY; the local stack has one), one of "
                                 "its models, and resolution, duration (frames_min / fps to frames_max / fps), "
                                 "num_steps and sampler within its entry (422 naming the field and the allowed "
                                 "values; an unknown model: 422 listing the known ones; the anyOf states each "
                                 "model's names, sizes, steps and samplers, not its duration range)"},
        "gpu_type": {"type": "string", "pattern": anchored(NAME.pattern), "default": cfg.default_gpu_type},
        "duration": {"type": "number", "exclusiveMinimum": 0, "maximum": cfg.max_duration_s,
                     "default": cfg.default_duration_s,
                     "description": "seconds; with a model registry, a frame count round(duration x fps) off the "
                                    "model's grid (such as 4n+1) renders the nearest count on it, and the job "
                                    "carries the duration that count gives"},
        # With a registry the pattern is in each model's anyOf branch (registry_rules), already within this
        # rule: two patterns on one value would make generators draw from one and filter by the other.
        "resolution": {"type": "string", "default": cfg.default_resolution,
                       **({"pattern": resolution_pattern(cfg)} if cfg.models is None else {}),
                       "description": resolution_rule(cfg) + ("" if cfg.models is None else
                                                               "; and one of its model's (see the anyOf)")},
        "fps": {"type": "integer", "minimum": 1, "maximum": cfg.max_fps, "default": cfg.default_fps},
        "num_steps": {"type": "integer", "minimum": 1, "maximum": cfg.max_num_steps,
                      "default": cfg.default_num_steps},
        "seed": {"type": "integer", "minimum": 0, "maximum": MAX_SEED,
                 "description": "default: derived from the job id"},
        "priority": {"type": "integer", "minimum": PRIORITY_RANGE[0], "maximum": PRIORITY_RANGE[1], "default": 0,
                     "description": "higher runs first"},
        "callback_url": {
            "type": "string", "minLength": 1, "maxLength": webhook_targets.MAX_URL_CHARS,
            "pattern": webhook_targets.callback_pattern(private),
            "description": "where webhooks go (which ones: webhook_events): http(s), a host, a port other than "
                           "0 and 22, then path, query and fragment in printable ASCII (percent-encode the rest). "
                           + ("The host: a DNS name or an IP literal (this deployment allows private addresses)."
                              if private else
                              "The host: a DNS name that is not localhost or *.localhost; IP literals are refused "
                              "(the pattern says all of it). The name is resolved at delivery, and a webhook to a "
                              "loopback, private, link-local, multicast, reserved or otherwise not global "
                              "address is not sent (the video's webhook.state: refused)")},
        "webhook_events": {
            "type": "array", "minItems": 1, "uniqueItems": True,
            "items": {"type": "string", "enum": list(WEBHOOK_FILTERS)},
            "description": "which webhooks callback_url gets (needs callback_url): started (each lease), "
                           "progress (25/50/75 % milestones, each once), completed (video.succeeded), failed "
                           "(video.failed, video.cancelled, video.dead_lettered). Default: completed and failed"},
        "run_at": {"type": "integer", "minimum": 0, "maximum": MAX_RUN_AT_MS,
                   "description": "epoch milliseconds; exclusive with delay_seconds (both given: 422, field "
                                  "delay_seconds)"},
        "delay_seconds": {"type": "integer", "minimum": 0, "maximum": cfg.max_delay_s,
                          "description": "exclusive with run_at"},
        **_policy_fields(),
        "guidance_scale": {"type": ["number", "null"], "minimum": limits.MIN_GUIDANCE_SCALE,
                           "maximum": limits.MAX_GUIDANCE_SCALE, "default": None,
                           "description": "classifier-free guidance; 1: none. null: the model's default"},
        "negative_prompt": {"type": ["string", "null"], "maxLength": cfg.max_prompt_chars, "default": None,
                            "pattern": NO_NUL,
                            "description": "what the video should not show (with guidance above 1); no NUL. "
                                           "null: the model's default"},
        "sampler": {"type": ["string", "null"], "enum": [*ALL_SAMPLERS, None], "default": None,
                    "description": "denoising sampler, one the model's family resumes exactly (with a registry: "
                                   "its family's, 422 listing them otherwise). null: the model's default"},
    }


def _policy_fields() -> dict[str, Any]:
    """The job's retry and time policy: submission.POLICY_LIMITS and POLICY_DEFAULTS (domain/limits.py)."""
    lo, hi = POLICY_LIMITS["timeout_seconds"]
    out: dict[str, Any] = {"timeout_seconds": {
        "type": ["integer", "null"], "minimum": lo, "maximum": hi, "default": None,
        "description": "the most rendering wall time the job may use, summed over all its attempts (time "
                       "holding a worker's lease; queued, backoff and paused time do not count). Past it the "
                       "job fails for good: status failed, terminal_reason timeout. null: no limit"}}
    about = {"max_attempts": "visible failures (a worker's error, or a step that stopped advancing: stuck) "
                             "allowed before the job is dead-lettered; preemptions do not count, and a failure "
                             "reported as not retryable (e.g. invalid_request) fails the job at once",
             "backoff_base_seconds": "delay after the first failure, doubled per failure ('equal jitter': "
                                     "between half and all of it)",
             "backoff_max_seconds": "cap of every backoff delay: given below backoff_base_seconds, every delay is "
                                    "this max (the base is lowered to it); left out, the default or the base, "
                                    "whichever is larger"}
    for name, text in about.items():
        lo, hi = POLICY_LIMITS[name]
        out[name] = {"type": "integer", "minimum": lo, "maximum": hi, "default": POLICY_DEFAULTS[name],
                     "description": text}
    return out


# Both given (non-null): 422 on delay_seconds. A null one counts as not given.
ONE_START = {"anyOf": [{"properties": {"run_at": {"type": "null"}}},
                       {"properties": {"delay_seconds": {"type": "null"}}}]}
# webhook_events (non-null) needs a callback_url (non-null): 422 on webhook_events.
EVENTS_NEED_CALLBACK = {"anyOf": [{"properties": {"webhook_events": {"type": "null"}}},
                                  {"required": ["callback_url"], "properties": {"callback_url": {"type": "string"}}}]}


def _video_rules(cfg: GatewayConfig) -> dict[str, Any]:
    return {"allOf": [ONE_START, EVENTS_NEED_CALLBACK, *registry_rules(cfg)]}


def _submit(cfg: GatewayConfig, private: bool) -> dict[str, Any]:
    return {"type": "object", "required": ["prompt"], "additionalProperties": False, **_video_rules(cfg),
            "properties": _optional({
                **_video_fields(cfg, private),
                "parents": {"type": "array", "maxItems": cfg.max_parents, "uniqueItems": True,
                            "items": {"type": "string", "pattern": anchored(VIDEO_ID.pattern)},
                            "description": "DAG parents: ids of the tenant's videos (409 unknown_parent otherwise: "
                                           "the request is well formed, the tenant has no such video)"},
                "dag_policy": {"type": "string", "enum": list(DAG_POLICIES), "default": DAG_POLICIES[0]},
            }, "prompt")}


def _dag(cfg: GatewayConfig, private: bool) -> dict[str, Any]:
    node = {"type": "object", "required": ["key", "prompt"], "additionalProperties": False, **_video_rules(cfg),
            "properties": _optional({
                "key": {"type": "string", "pattern": anchored(NODE_KEY.pattern)},
                **_video_fields(cfg, private),
                "parents": {"type": "array", "maxItems": cfg.max_parents, "uniqueItems": True,
                            "items": {"type": "string", "pattern": anchored(NODE_KEY.pattern)},
                            "description": "keys of other nodes, or ids of the tenant's videos"}}, "key", "prompt")}
    return {"type": "object", "required": ["nodes"], "additionalProperties": False, "properties": {
        "nodes": {"type": "array", "minItems": 1, "maxItems": MAX_NODES, "items": node},
        "dag_policy": _nullable({"type": "string", "enum": list(DAG_POLICIES), "default": DAG_POLICIES[0]})}}


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
IDEMPOTENCY = {"name": "Idempotency-Key", "in": "header", "required": False,
               "schema": {"type": "string", "minLength": 1, "maxLength": 200,
                          "pattern": f"^(?!{RESERVED_KEY_PREFIX}){KEY.pattern}$"},
               "description": "1-200 printable ASCII characters, not starting with 'schedule:' (else 400). "
                              "Same key + same body → same job. Absent: the gateway makes one and returns it "
                              "in the Idempotency-Key header and the body; reuse it to retry safely."}
PRIORITY = {"type": "object", "required": ["priority"], "additionalProperties": False, "properties": {
    "priority": {"type": "integer", "minimum": PRIORITY_RANGE[0], "maximum": PRIORITY_RANGE[1]}}}


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
    "cancel": {"type": "boolean", "description": "heartbeat/progress: stop, the job was cancelled"},
    "drain": {"type": "boolean", "description": "heartbeat/progress: checkpoint and release (paused)"},
    "lease_expires_at_ms": {"type": "integer"}}}
LEASE_BODIES = {
    "heartbeat": ("renew the lease; the answer carries cancel/drain instructions", {}, ()),
    "progress": ("report progress", {"step": LONG, "progress_pct": {"type": "number"},
                                     "phase": {"type": ["string", "null"]}}, ("step", "progress_pct")),
    "checkpoint": ("record a durable checkpoint object", {
        "checkpoint_key": {"type": "string"}, "step": LONG, "progress_pct": {"type": "number"},
        "checksum": {"type": "string"}, "size_bytes": LONG,
        "duration_ms": {"type": ["integer", "null"], "minimum": 0, "maximum": 86_400_000,
                        "description": "optional: how long writing the checkpoint took (feeds the pool's "
                                       "checkpoint cost, mean_checkpoint_ms)"}},
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


def _worker_paths(cfg: GatewayConfig) -> dict[str, Any]:
    def op(summary, ok, errors, params, body):
        o = _op(summary, ok, errors, path_id=False, params=params, body=body)
        o["security"] = WORKER_SECURITY
        return o

    profile = {"type": "object", "required": ["gpu_type", "models"], "additionalProperties": False,
               "properties": {"gpu_type": {"type": "string"}, "models": MODELS, "warm_models": MODELS,
                              "draining": {"type": ["boolean", "null"]}}}
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
                            "lease_ttl_ms": {**LONG, "type": ["integer", "null"]}}})},
    }
    for action, (summary, fields, required) in LEASE_BODIES.items():
        paths[f"/internal/leases/{{job_id}}/{action}"] = {"post": op(
            summary + "; fenced by the lease epoch (409 when stale)",
            {"200": ("the scheduler accepted it", VERDICT), "202": ("durable, no verdict yet", VERDICT)},
            (400, 401, 404, 409, 422, 503), [JOB_ID],
            {"type": "object", "required": ["epoch", "worker_id", *required], "additionalProperties": False,
             "properties": {**FENCE, **fields}})}
    return paths


SCHEDULE_ID = {"name": "id", "in": "path", "required": True,
               "schema": {"type": "string", "pattern": anchored(sched.SCHEDULE_ID.pattern)}}
SCHEDULE_COMMAND = {"type": "object", "properties": {
    "schedule_id": {"type": "string"}, "command_id": {"type": "string"}, "requested": {"type": "string"},
    "status": {"type": "string"}}}
SCHEDULE_STATUSES = ["accepted", "active", "paused", "deleted"]


def _schedule_body(cfg: GatewayConfig, private: bool) -> dict[str, Any]:
    fields = _optional(_video_fields(cfg, private), "prompt")
    job = {"type": "object", "required": ["prompt"], "additionalProperties": False,
           "allOf": [*registry_rules(cfg)],
           "properties": {k: v for k, v in fields.items()
                          if k not in sched.NOT_IN_TEMPLATE + sched.UNSUPPORTED_IN_TEMPLATE}}
    job["properties"]["seed"] = {**fields["seed"], "description": "default: derived from the schedule id; the "
                                 "same for every occurrence"}
    return {"type": "object", "required": ["cron", "job"], "additionalProperties": False, "properties": _optional({
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


def _schedule_paths(cfg: GatewayConfig, private: bool) -> dict[str, Any]:
    page = [{"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": cfg.max_page_size,
                                                         "default": cfg.default_page_size}},
            _page_token("")]
    ok202 = {"202": ("command acknowledged by Kafka", SCHEDULE_COMMAND)}
    # 404 is also a deleted schedule's (error.code schedule_deleted), once the read model shows it deleted.
    errors = (401, 404, 503)

    def op(summary, ok, errs, **kw):
        return _op(summary, ok, errs, path_id=False, **kw)

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


def _media_type_rule(paths: dict[str, Any]) -> None:
    """415 on every operation guards.json_bodies judges: public, and a method whose body counts."""
    for path, ops in paths.items():
        if path.startswith("/internal/"):
            continue
        for method, op in ops.items():
            if method.upper() in guards.BODY_METHODS:
                op["responses"] |= _errors(415)


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
    cmd_errors = (401, 404, 409, 503)
    submit_errors = (400, 401, 403, 409, 413, 422, 429, 503)
    paths = {
        "/healthz": {"get": _op("liveness", {"200": ("ok", {"type": "object"})}, (), path_id=False, public=True)},
        "/openapi.json": {"get": _op("this document", {"200": ("OpenAPI 3.1", {"type": "object"})}, (),
                                     path_id=False, public=True)},
        "/v1/videos": {
            "post": _op("submit a video job; answered once the SubmitJob is durable in Kafka",
                        {"202": ("accepted", ACCEPTED)}, submit_errors, path_id=False,
                        body=_submit(cfg, private), params=[IDEMPOTENCY]),
            "get": _op("the tenant's videos, newest first", {"200": ("a page", {"type": "object", "properties": {
                "videos": {"type": "array", "items": {"type": "object"}},
                "next_page_token": {"type": ["string", "null"]}}})}, (401, 422, 503), path_id=False,
                params=[{"name": "status", "in": "query", "schema": {"type": "string", "enum": sorted(STATUSES)}},
                        {"name": "limit", "in": "query", "schema": {
                            "type": "integer", "minimum": 1, "maximum": cfg.max_page_size,
                            "default": cfg.default_page_size}},
                        _page_token(" (same status filter)")]),
        },
        "/v1/usage": {"get": _op(
            "the tenant's own GPU-seconds: ended leases' (used_gpu_seconds, no decay) and what fair share weighs "
            "it by (fair_share_gpu_seconds: decayed, plus the estimate of held leases), from the scheduler's "
            "tenant-usage reports", {"200": ("usage", USAGE)}, (401, 503), path_id=False)},
        "/v1/dags": {"post": _op(
            "submit videos with dependencies among them; each node is accepted like POST /v1/videos, in "
            "topological order, under the Idempotency-Key '<key>/<node key>'",
            {"202": ("accepted", DAG_ACCEPTED)}, submit_errors, path_id=False, body=_dag(cfg, private),
            params=[IDEMPOTENCY])},
        "/v1/videos/{id}": {
            "get": _op("status, progress, attempt and result", {"200": ("the video", VIDEO)}, (401, 404, 503)),
            "patch": _op("change the priority", ok202, (400, 401, 403, 404, 409, 413, 422, 503), body=PRIORITY),
        },
        "/v1/videos/{id}/cancel": {"post": _op(
            "cancel: the scheduler stops the video (ending its lease, if any) and records it cancelled; the video "
            "stays readable with its history, status cancelled", ok202, cmd_errors)},
        "/v1/videos/{id}/events": {"get": _op("history (events and rejected commands)", {"200": ("history", {
            "type": "object"})}, (401, 404, 503))},
        "/v1/videos/{id}/attempts": {"get": _op("one entry per lease", {"200": ("attempts", {"type": "object"})},
                                                (401, 404, 503))},
        "/v1/videos/{id}/stream": {"get": _op(
            "Server-Sent Events of status/progress until a terminal state; each event's id is the job's event "
            "version. `status` events carry pending_reason (as in GET /v1/videos/{id}); a `pending` event "
            "(id, version, pending_reason; the id of the version already sent) says the reason changed without "
            "a new version", {"200": ("text/event-stream", {})}, (401, 404), params=[LAST_EVENT_ID])},
        "/v1/videos/{id}/content": {"get": _op("the MP4", {"302": ("redirect to a presigned URL", {})},
                                               (401, 404, 409, 410, 503))},
        "/v1/videos/{id}/pause": {"post": _op("pause", ok202, cmd_errors)},
        "/v1/videos/{id}/resume": {"post": _op("resume", ok202, cmd_errors)},
        "/v1/videos/{id}/retry": {"post": _op("requeue a failed or dead-lettered video", ok202, cmd_errors)},
        **_schedule_paths(cfg, private),
        **_worker_paths(cfg),
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
                "UriTooLong": _json(ERROR, f"request target over {guards.MAX_TARGET_BYTES} bytes"),
                "HeaderTooLarge": _json(ERROR, f"a header line over {guards.MAX_HEADER_BYTES} bytes "
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
