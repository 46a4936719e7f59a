"""POST /v1/videos body → (normalized body, SubmitJob). Every refusal names the offending field.

The request hash covers the normalized body (defaults applied, `delay_seconds` kept as sent rather than
turned into a run_at), so a retry of the same request hashes the same even seconds later, and a client
that spells out a default gets the same job as one that leaves it out.
"""

from __future__ import annotations

import math
import re
from typing import Any

from spotreel.domain import ids
from spotreel.domain.commands import SubmitJob
from spotreel.domain.decide import submission_problem
from spotreel.services.gateway.config import GatewayConfig
from spotreel.services.gateway.errors import ApiError, invalid

KNOWN = frozenset({"prompt", "model", "gpu_type", "duration", "resolution", "fps", "seed", "priority",
                   "callback_url", "run_at", "delay_seconds", "parents", "dag_policy", "num_steps"})
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$")
_RESOLUTION = re.compile(r"^([1-9][0-9]{1,3})x([1-9][0-9]{1,3})$")
_JOB_ID = re.compile(r"^j[0-9a-f]{32}$")
_KEY = re.compile(r"^[\x21-\x7e]{1,200}$")
MAX_SEED = 2**63 - 1
PRIORITY_RANGE = (0, 9)
MAX_STEPS = 500


def check_idempotency_key(key: str) -> str:
    if not _KEY.match(key):
        raise ApiError(400, "invalid_header", "Idempotency-Key must be 1-200 printable ASCII characters",
                       field="Idempotency-Key")
    if key.startswith("schedule:"):
        # The namespace of cron occurrences (ids.occurrence_idempotency_key): a client key there could
        # name a scheduled job's id and be judged against that job's request instead of its own.
        raise ApiError(400, "invalid_header", "Idempotency-Key must not start with 'schedule:'",
                       field="Idempotency-Key")
    return key


def _int(body: dict[str, Any], name: str, lo: int, hi: int) -> int | None:
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise invalid(name, f"{name} must be an integer")
    if not lo <= v <= hi:
        raise invalid(name, f"{name} must be between {lo} and {hi}")
    return v


def _str(body: dict[str, Any], name: str, pattern: re.Pattern[str] | None = None, what: str = "") -> str | None:
    v = body.get(name)
    if v is None:
        return None
    if not isinstance(v, str):
        raise invalid(name, f"{name} must be a string")
    if pattern is not None and not pattern.match(v):
        raise invalid(name, f"{name} {what}")
    return v


def normalize(body: Any, cfg: GatewayConfig) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_json", "the body must be a JSON object")
    unknown = sorted(set(body) - KNOWN)
    if unknown:
        raise invalid(unknown[0], f"unknown field {unknown[0]!r}")
    prompt = body.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise invalid("prompt", "prompt is required and must be a non-empty string")
    if len(prompt) > cfg.max_prompt_chars:
        raise invalid("prompt", f"prompt is {len(prompt)} characters; the limit is {cfg.max_prompt_chars}")
    if "\x00" in prompt:
        raise invalid("prompt", "prompt must not contain NUL")
    duration = body.get("duration", cfg.default_duration_s)
    # Compared as given: math.isfinite would overflow on a huge JSON integer.
    if isinstance(duration, bool) or not isinstance(duration, (int, float)) \
            or not (isinstance(duration, int) or math.isfinite(duration)) or not 0 < duration <= cfg.max_duration_s:
        raise invalid("duration", f"duration must be a number of seconds in (0, {cfg.max_duration_s}]")
    resolution = _str(body, "resolution", _RESOLUTION, "must look like 512x512 (WIDTHxHEIGHT, 10-9999)")
    callback = _str(body, "callback_url")
    if callback is not None and not re.match(r"^https?://[^\s]{1,2000}$", callback):
        raise invalid("callback_url", "callback_url must be an http(s) URL")
    if body.get("run_at") is not None and body.get("delay_seconds") is not None:
        raise invalid("delay_seconds", "give run_at or delay_seconds, not both")
    parents = body.get("parents", [])
    if not isinstance(parents, list) or len(parents) > cfg.max_parents:
        raise invalid("parents", f"parents must be a list of at most {cfg.max_parents} video ids")
    for p in parents:
        if not isinstance(p, str) or not _JOB_ID.match(p):
            raise invalid("parents", f"parents: {p!r} is not a video id")
    if len(set(parents)) != len(parents):
        raise invalid("parents", "parents must be distinct")
    dag_policy = _str(body, "dag_policy") or "fail_fast"
    if dag_policy not in ("fail_fast", "continue"):
        raise invalid("dag_policy", "dag_policy must be fail_fast or continue")
    return {
        "prompt": prompt,
        "model": _str(body, "model", _NAME, "must be a model name ([A-Za-z0-9._:-], up to 64)") or cfg.default_model,
        "gpu_type": _str(body, "gpu_type", _NAME, "must be a GPU type name") or cfg.default_gpu_type,
        "duration": float(duration),
        "resolution": resolution or cfg.default_resolution,
        "fps": _int(body, "fps", 1, cfg.max_fps) or cfg.default_fps,
        "num_steps": _int(body, "num_steps", 1, MAX_STEPS) or cfg.default_num_steps,
        "seed": _int(body, "seed", 0, MAX_SEED),
        "priority": _int(body, "priority", *PRIORITY_RANGE) or 0,
        "callback_url": callback,
        # run_at is epoch milliseconds, like every time in the domain.
        "run_at": _int(body, "run_at", 0, 2**53),
        "delay_seconds": _int(body, "delay_seconds", 0, cfg.max_delay_s),
        "parents": parents,
        "dag_policy": dag_policy,
    }


def build_submit(tenant: str, key: str, body: dict[str, Any], now_ms: int, command_id: str) -> SubmitJob:
    job_id = ids.job_id_for(tenant, key)
    # No seed given: one derived from the job, so a retried request and a resumed run agree on it.
    seed = body["seed"] if body["seed"] is not None else int(job_id[1:16], 16)
    run_at = body["run_at"]
    if body["delay_seconds"] is not None:
        run_at = now_ms + body["delay_seconds"] * 1000
    submit = SubmitJob(
        command_id=command_id, job_id=job_id, tenant=tenant, idempotency_key=key,
        request_hash=ids.request_hash(body), model=body["model"], gpu_type=body["gpu_type"],
        prompt=body["prompt"], duration_s=body["duration"], resolution=body["resolution"], fps=body["fps"],
        seed=seed, num_steps=body["num_steps"], priority=body["priority"], callback_url=body["callback_url"],
        run_at_ms=run_at, parents=tuple(body["parents"]), dag_policy=body["dag_policy"],
    )
    problem = submission_problem(submit)
    if problem is not None:
        # The domain has the last word; reaching this means the gateway's own checks missed a rule.
        raise ApiError(422, "invalid_request", problem)
    return submit
