"""POST /v1/videos body → (normalized body, SubmitJob). Every refusal names the offending field.

The request hash covers the normalized body (defaults applied, `delay_seconds` kept as sent rather than
turned into a run_at), so a retry of the same request hashes the same even seconds later, and a client
that spells out a default gets the same job as one that leaves it out.
"""

from __future__ import annotations

import math
import re
from typing import Any

from spotreel.domain import ids, limits
from spotreel.domain.commands import SubmitJob
from spotreel.domain.decide import submission_problem
from spotreel.domain.images import ImageRef
from spotreel.domain.spec import RenderSpec
from spotreel.model_registry import SAMPLERS
from spotreel.api.config import GatewayConfig
from spotreel.api.errors import ApiError, ModelRefusal, invalid
from spotreel.webhooks.filters import DEFAULT_FILTER as DEFAULT_WEBHOOK_FILTER
from spotreel.webhooks.filters import FILTERS as WEBHOOK_FILTERS
from spotreel.webhooks.targets import url_refusal

# The job's retry and time policy (domain/limits.py), with the domain's limits and SubmitJob's defaults.
POLICY_DEFAULTS = {"timeout_seconds": None, "max_attempts": SubmitJob.max_attempts,
                   "backoff_base_seconds": SubmitJob.backoff_base_ms // 1000,
                   "backoff_max_seconds": SubmitJob.backoff_max_ms // 1000}
POLICY_LIMITS = {"timeout_seconds": (limits.MIN_TIMEOUT_MS // 1000, limits.MAX_TIMEOUT_MS // 1000),
                 "max_attempts": (1, limits.MAX_ATTEMPTS),
                 "backoff_base_seconds": (0, limits.MAX_BACKOFF_MS // 1000),
                 "backoff_max_seconds": (0, limits.MAX_BACKOFF_MS // 1000)}
KNOWN = frozenset({"prompt", "model", "gpu_type", "duration", "resolution", "fps", "seed", "priority",
                   "callback_url", "run_at", "delay_seconds", "parents", "dag_policy", "num_steps", *POLICY_DEFAULTS,
                   "webhook_events", "guidance_scale", "negative_prompt", "sampler"})
# Matched whole (fullmatch): `$` alone would let a trailing newline through. The OpenAPI document anchors
# these (openapi_rules.anchored).
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}")
RESOLUTION = re.compile(r"([1-9][0-9]{1,3})x([1-9][0-9]{1,3})")
JOB_ID = re.compile(r"j[0-9a-f]{32}")
KEY = re.compile(r"[!-~]{1,200}")  # printable ASCII
_JOB_ID = re.compile(rf"^{JOB_ID.pattern}$")  # the worker API (gateway worker_api/routes.py) still matches with this one
CALLBACK = re.compile(r"https?://\S{1,2000}")
RESERVED_KEY_PREFIX = "schedule:"
MAX_SEED = 2**63 - 1
MAX_RUN_AT_MS = limits.MAX_TIME_MS  # the end of year 9999: a later time cannot be read back (limits.py)
PRIORITY_RANGE = (0, 9)
DAG_POLICIES = ("fail_fast", "continue")
# Every sampler some model family takes; with a registry, a job's must be one of its model's family's.
ALL_SAMPLERS = tuple(dict.fromkeys(s for family in SAMPLERS.values() for s in family))


def check_idempotency_key(key: str) -> str:
    if not KEY.fullmatch(key):
        raise ApiError(400, "invalid_header", "Idempotency-Key must be 1-200 printable ASCII characters",
                       field="Idempotency-Key")
    if key.startswith(RESERVED_KEY_PREFIX):
        # The namespace of cron occurrences (ids.occurrence_idempotency_key): a client key there could
        # name a scheduled job's id and be judged against that job's request instead of its own.
        raise ApiError(400, "invalid_header", f"Idempotency-Key must not start with {RESERVED_KEY_PREFIX!r}",
                       field="Idempotency-Key")
    return key


def resolution_rule(cfg: GatewayConfig) -> str:
    return (f"WIDTHxHEIGHT, each a multiple of {cfg.resolution_multiple} from {cfg.min_side} to {cfg.max_side}, "
            f"at most {cfg.max_pixels} pixels")


def _resolution(body: dict[str, Any], cfg: GatewayConfig) -> str | None:
    """Refused here, not by a worker after the job waited in the queue: diffusers' VAEs work in blocks of
    8 pixels, and the pixel cap bounds what one job may ask of a GPU."""
    v = _str(body, "resolution")
    if v is None:
        return None
    m = RESOLUTION.fullmatch(v)
    sides = (int(m[1]), int(m[2])) if m else ()
    if not m or sides[0] * sides[1] > cfg.max_pixels or not all(
            cfg.min_side <= n <= cfg.max_side and n % cfg.resolution_multiple == 0 for n in sides):
        raise invalid("resolution", f"resolution must be {resolution_rule(cfg)} (e.g. 512x512); got {v!r}")
    return v


def _callback(body: dict[str, Any], allow_private: bool) -> str | None:
    """The webhook sender's own rule (spotreel.webhooks.targets): a URL it would refuse is refused at
    submit, where the client sees why, instead of a webhook silently never sent."""
    v = _str(body, "callback_url")
    if v is None:
        return None
    if not CALLBACK.fullmatch(v):
        raise invalid("callback_url", "callback_url must be an http(s) URL of at most 2000 characters after "
                                      "the scheme, without whitespace")
    why = url_refusal(v, allow_private)
    if why is not None:
        raise invalid("callback_url", f"callback_url can never be delivered: {why}")
    return v


def _webhook_events(body: dict[str, Any], callback: str | None) -> dict[str, Any]:
    """`webhook_events`: which notifications the callback gets (services/webhooks/payload.py). Kept in the
    body (and so in the request hash) only when it differs from the default, so bodies without it, or
    spelling out the default, hash as before."""
    v = body.get("webhook_events")
    if v is None:
        return {}
    if not isinstance(v, list) or not v or any(not isinstance(e, str) or e not in WEBHOOK_FILTERS for e in v) \
            or len(set(v)) != len(v):
        raise invalid("webhook_events", f"webhook_events must be a non-empty list of distinct values from "
                                        f"{list(WEBHOOK_FILTERS)}")
    if callback is None:
        raise invalid("webhook_events", "webhook_events needs a callback_url")
    return {} if set(v) == DEFAULT_WEBHOOK_FILTER else {"webhook_events": sorted(v)}


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
    if pattern is not None and not pattern.fullmatch(v):
        raise invalid(name, f"{name} {what}")
    return v


def policy_defaults(cfg: GatewayConfig | None) -> dict[str, Any]:
    """The operator's defaults of the fields above (GatewayConfig.default_*)."""
    cfg = cfg or GatewayConfig()
    return {"timeout_seconds": None, "max_attempts": cfg.default_max_attempts,
            "backoff_base_seconds": cfg.default_backoff_base_seconds,
            "backoff_max_seconds": cfg.default_backoff_max_seconds}


def _policy(body: dict[str, Any], cfg: GatewayConfig | None = None) -> dict[str, Any]:
    """The retry and time policy as given, each field within its limit (422 naming it). Only values other than
    the default are kept, so a body that spells out a default hashes like one that leaves it out (and like
    bodies sent before these fields existed).

    The two backoff fields never conflict: a given `backoff_max_seconds` caps every delay, so a base above it
    is lowered to it (every delay is the max: what min(max, base x 2^n) gives anyway); a max left out is the
    default or the base, whichever is larger (a large base alone is not cut by a default the client never
    chose).

    The defaults are the operator's (`policy_defaults`); a value equal to the built-in default
    (POLICY_DEFAULTS) is dropped only where the operator's default is the same, so request hashes stay what they
    were under the built-in defaults and a value given explicitly is never replaced by the operator's."""
    defaults = policy_defaults(cfg)
    got = {name: _int(body, name, *POLICY_LIMITS[name]) for name in POLICY_DEFAULTS}
    base, most = got["backoff_base_seconds"], got["backoff_max_seconds"]
    if base is None:
        base = defaults["backoff_base_seconds"]
    if most is None:
        most = max(defaults["backoff_max_seconds"], base)
    got["backoff_base_seconds"], got["backoff_max_seconds"] = min(base, most), most
    return {k: v for k, v in got.items()
            if v is not None and (v != POLICY_DEFAULTS[k] or v != defaults[k])}


def _render_options(body: dict[str, Any], cfg: GatewayConfig) -> dict[str, Any]:
    """`guidance_scale`, `negative_prompt`, `sampler`: how this job is rendered (null or absent: the model's
    default, from the registry entry or the worker). Kept in the body (and so in the request hash) only when
    given, so bodies without them hash as before these fields existed."""
    out: dict[str, Any] = {}
    g = body.get("guidance_scale")
    if g is not None:
        lo, hi = limits.MIN_GUIDANCE_SCALE, limits.MAX_GUIDANCE_SCALE
        # Compared as given: a huge JSON integer would overflow float().
        if isinstance(g, bool) or not isinstance(g, (int, float)) or not lo <= g <= hi:
            raise invalid("guidance_scale", f"guidance_scale must be a number from {lo:g} (no guidance) to {hi:g}")
        out["guidance_scale"] = float(g)
    neg = _str(body, "negative_prompt")
    if neg is not None:
        if len(neg) > cfg.max_prompt_chars:
            raise invalid("negative_prompt", f"negative_prompt is {len(neg)} characters; the limit is "
                                             f"{cfg.max_prompt_chars}")
        if "\x00" in neg:
            raise invalid("negative_prompt", "negative_prompt must not contain NUL")
        out["negative_prompt"] = neg
    sampler = _str(body, "sampler")
    if sampler is not None:
        if sampler not in ALL_SAMPLERS:
            raise invalid("sampler", f"sampler must be one of {list(ALL_SAMPLERS)} (each model takes its family's: "
                                     f"`spotreel model list`); got {sampler!r}")
        out["sampler"] = sampler
    return out


def normalize(body: Any, cfg: GatewayConfig, *, allow_private_callbacks: bool = False,
              image: ImageRef | None = None) -> dict[str, Any]:
    """`allow_private_callbacks`: the deployment's webhook_allow_private, the setting the sender obeys.
    `image`: the input image of an image-to-video job, already checked and stored by the caller (the
    OpenAI-compatible surface's input_reference); the body itself cannot name one. Its reference joins the
    normalized body (and so the request hash: the same key with another image is another request)."""
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
    # null means "the default" for every optional field, as for those read through _int and _str.
    duration = body.get("duration")
    if duration is None:
        duration = cfg.default_duration_s
    # Compared as given: math.isfinite would overflow on a huge JSON integer.
    if isinstance(duration, bool) or not isinstance(duration, (int, float)) \
            or not (isinstance(duration, int) or math.isfinite(duration)) or not 0 < duration <= cfg.max_duration_s:
        raise invalid("duration", f"duration must be a number of seconds in (0, {cfg.max_duration_s}]")
    resolution = _resolution(body, cfg)
    callback = _callback(body, allow_private_callbacks)
    if body.get("run_at") is not None and body.get("delay_seconds") is not None:
        raise invalid("delay_seconds", "give run_at or delay_seconds, not both")
    parents = body.get("parents")
    if parents is None:
        parents = []
    if not isinstance(parents, list) or len(parents) > cfg.max_parents:
        raise invalid("parents", f"parents must be a list of at most {cfg.max_parents} video ids")
    for p in parents:
        if not isinstance(p, str) or not JOB_ID.fullmatch(p):
            raise invalid("parents", f"parents: {p!r} is not a video id")
    if len(set(parents)) != len(parents):
        raise invalid("parents", "parents must be distinct")
    dag_policy = _str(body, "dag_policy")
    if dag_policy is None:  # "" is refused like any other unknown policy, not read as the default
        dag_policy = DAG_POLICIES[0]
    if dag_policy not in DAG_POLICIES:
        raise invalid("dag_policy", f"dag_policy must be one of {list(DAG_POLICIES)}")
    normalized = {
        "prompt": prompt,
        "model": _str(body, "model", NAME, "must be a model name ([A-Za-z0-9._:-], up to 64)") or cfg.default_model,
        "gpu_type": _str(body, "gpu_type", NAME, "must be a GPU type name ([A-Za-z0-9._:-], up to 64)")
        or cfg.default_gpu_type,
        "duration": float(duration),
        "resolution": resolution or cfg.default_resolution,
        "fps": _int(body, "fps", 1, cfg.max_fps) or cfg.default_fps,
        "num_steps": _int(body, "num_steps", 1, cfg.max_num_steps) or cfg.default_num_steps,
        "seed": _int(body, "seed", 0, MAX_SEED),
        "priority": _int(body, "priority", *PRIORITY_RANGE) or 0,
        "callback_url": callback,
        # run_at is epoch milliseconds, like every time in the domain.
        "run_at": _int(body, "run_at", 0, MAX_RUN_AT_MS),
        "delay_seconds": _int(body, "delay_seconds", 0, cfg.max_delay_s),
        "parents": parents,
        "dag_policy": dag_policy,
        **_policy(body, cfg),
        **_webhook_events(body, callback),
        **_render_options(body, cfg),
    }
    if image is not None:
        normalized["input_image"] = image.text()
    if cfg.models is not None:
        # The operator's registry (spotreel.model_registry): sizes, frames, steps, samplers and whether it
        # takes an image.
        problem = cfg.models.problem(model=normalized["model"], resolution=normalized["resolution"],
                                     duration_s=normalized["duration"], fps=normalized["fps"],
                                     num_steps=normalized["num_steps"], sampler=normalized.get("sampler"),
                                     has_image=image is not None)
        if problem is not None:
            raise ModelRefusal(*problem)
        # A duration between two frame counts the model takes renders the nearest (5 s at 16 fps on a 4n+1
        # grid: 81 frames), and the job carries that duration, so the worker renders exactly that count.
        entry = cfg.models.models[normalized["model"]]
        frames = entry.frames_for(normalized["duration"], normalized["fps"])
        if frames != max(1, round(normalized["duration"] * normalized["fps"])):
            normalized["duration"] = frames / normalized["fps"]
    return normalized


def policy_fields(body: dict[str, Any], cfg: GatewayConfig | None = None) -> dict[str, Any]:
    """SubmitJob's retry and time fields from a normalized body (the operator's defaults where it has none,
    and for the fields a submission cannot set: preemptions and poison; the stuck rule is `stuck_fields`)."""
    defaults = policy_defaults(cfg)
    cfg = cfg or GatewayConfig()

    def get(name: str) -> Any:
        return body.get(name, defaults[name])
    timeout = get("timeout_seconds")
    return {"max_attempts": get("max_attempts"), "backoff_base_ms": get("backoff_base_seconds") * 1000,
            "backoff_max_ms": get("backoff_max_seconds") * 1000,
            "timeout_ms": timeout * 1000 if timeout is not None else None,
            "max_preemptions": cfg.default_max_preemptions, "poison_threshold": cfg.default_poison_threshold,
            "poison_window_ms": cfg.default_poison_window_seconds * 1000}


def stuck_fields(cfg: GatewayConfig | None = None) -> dict[str, Any]:
    """SubmitJob's stuck rule: the operator's (a submission sets none)."""
    cfg = cfg or GatewayConfig()
    return {"stuck_steps": cfg.default_stuck_steps, "stuck_min_ms": cfg.default_stuck_min_seconds * 1000}


def build_submit(tenant: str, key: str, body: dict[str, Any], now_ms: int, command_id: str,
                 cfg: GatewayConfig | None = None) -> SubmitJob:
    job_id = ids.job_id_for(tenant, key)
    # No seed given: one derived from the job, so a retried request and a resumed run agree on it.
    seed = body["seed"] if body["seed"] is not None else int(job_id[1:16], 16)
    run_at = body["run_at"]
    if body["delay_seconds"] is not None:
        run_at = now_ms + body["delay_seconds"] * 1000
    submit = SubmitJob(
        command_id=command_id, job_id=job_id, tenant=tenant, idempotency_key=key,
        request_hash=ids.request_hash(body), gpu_type=body["gpu_type"],
        spec=RenderSpec(model=body["model"], prompt=body["prompt"], duration_s=body["duration"],
                        resolution=body["resolution"], fps=body["fps"], seed=seed, num_steps=body["num_steps"],
                        guidance_scale=body.get("guidance_scale"), negative_prompt=body.get("negative_prompt"),
                        sampler=body.get("sampler"), input_image=body.get("input_image")),
        priority=body["priority"], callback_url=body["callback_url"],
        run_at_ms=run_at, parents=tuple(body["parents"]), dag_policy=body["dag_policy"], **policy_fields(body, cfg),
        **stuck_fields(cfg),
    )
    problem = submission_problem(submit)
    if problem is not None:
        # The domain has the last word; reaching this means the gateway's own checks missed a rule.
        raise ApiError(422, "invalid_request", problem)
    return submit
