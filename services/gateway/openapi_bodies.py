"""The request bodies of /openapi.json that submit videos: POST /v1/videos, a DAG's nodes and a schedule's job
template share the video's fields (the limits submission.normalize applies) and its cross-field rules."""

from __future__ import annotations

from typing import Any

from spotreel.api.config import GatewayConfig
from spotreel.api.submission import JOB_ID as VIDEO_ID
from spotreel.api.submission import (ALL_SAMPLERS, DAG_POLICIES, MAX_RUN_AT_MS, MAX_SEED, NAME, policy_defaults,
                                     POLICY_LIMITS, PRIORITY_RANGE, resolution_rule)
from spotreel.domain import limits
from spotreel.domain.cron import WHITESPACE
from spotreel.webhooks import targets as webhook_targets
from spotreel.webhooks.filters import FILTERS as WEBHOOK_FILTERS
from spotreel.services.gateway.openapi_parts import nullable, optional
from spotreel.services.gateway.openapi_rules import anchored, registry_rules, resolution_pattern
from spotreel.services.gateway.public.dags import MAX_NODES, NODE_KEY


# What submission.normalize refuses in a prompt: empty after str.strip(), and NUL. The whitespace is spelled
# out, every character str.strip() removes: a pattern's \s means other characters to a JSON Schema (ECMA-262)
# validator than to Python (U+001C..U+001F, U+0085 are whitespace to Python only), and schemathesis found a
# prompt of U+001C the document allowed and the gateway refused.
NO_NUL = "^[^\\u0000]*$"
PROMPT = f"^[^\\u0000]*[^{WHITESPACE[1:-1]}\\u0000][^\\u0000]*$"


def video_fields(cfg: GatewayConfig, private: bool) -> dict[str, Any]:
    """POST /v1/videos fields, the limits submission.normalize applies. Every field but prompt is optional
    and may be null (its default): optional(). `private`: the deployment's webhook_allow_private."""
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
        **_policy_fields(cfg),
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


def _policy_fields(cfg: GatewayConfig) -> dict[str, Any]:
    """The job's retry and time policy: submission.POLICY_LIMITS and the operator's defaults (domain/limits.py)."""
    defaults = policy_defaults(cfg)
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
        out[name] = {"type": "integer", "minimum": lo, "maximum": hi, "default": defaults[name],
                     "description": text}
    return out


# Both given (non-null): 422 on delay_seconds. A null one counts as not given.
ONE_START = {"anyOf": [{"properties": {"run_at": {"type": "null"}}},
                       {"properties": {"delay_seconds": {"type": "null"}}}]}
# webhook_events (non-null) needs a callback_url (non-null): 422 on webhook_events.
EVENTS_NEED_CALLBACK = {"anyOf": [{"properties": {"webhook_events": {"type": "null"}}},
                                  {"required": ["callback_url"], "properties": {"callback_url": {"type": "string"}}}]}


def video_rules(cfg: GatewayConfig) -> dict[str, Any]:
    return {"allOf": [ONE_START, EVENTS_NEED_CALLBACK, *registry_rules(cfg)]}


def submit_body(cfg: GatewayConfig, private: bool) -> dict[str, Any]:
    return {"type": "object", "required": ["prompt"], "additionalProperties": False, **video_rules(cfg),
            "properties": optional({
                **video_fields(cfg, private),
                "parents": {"type": "array", "maxItems": cfg.max_parents, "uniqueItems": True,
                            "items": {"type": "string", "pattern": anchored(VIDEO_ID.pattern)},
                            "description": "DAG parents: ids of the tenant's videos (409 unknown_parent otherwise: "
                                           "the request is well formed, the tenant has no such video)"},
                "dag_policy": {"type": "string", "enum": list(DAG_POLICIES), "default": DAG_POLICIES[0]},
            }, "prompt")}


def dag_body(cfg: GatewayConfig, private: bool) -> dict[str, Any]:
    node = {"type": "object", "required": ["key", "prompt"], "additionalProperties": False, **video_rules(cfg),
            "properties": optional({
                "key": {"type": "string", "pattern": anchored(NODE_KEY.pattern)},
                **video_fields(cfg, private),
                "parents": {"type": "array", "maxItems": cfg.max_parents, "uniqueItems": True,
                            "items": {"type": "string", "pattern": anchored(NODE_KEY.pattern)},
                            "description": "keys of other nodes, or ids of the tenant's videos"}}, "key", "prompt")}
    return {"type": "object", "required": ["nodes"], "additionalProperties": False, "properties": {
        "nodes": {"type": "array", "minItems": 1, "maxItems": MAX_NODES, "items": node},
        "dag_policy": nullable({"type": "string", "enum": list(DAG_POLICIES), "default": DAG_POLICIES[0]})}}
