"""The OpenAI Videos API's words → spotreel's, and back. Pure: no I/O, no clock.

A create request (`prompt`, `model`, `seconds`, `size`, plus spotreel's own options as extra fields) becomes
a body for POST /v1/videos (`native_body`), which the gateway then validates and admits exactly as it does a
native one (api/submission.py `normalize`, public/submit.py `accept`): this module only renames and converts.
`seconds` becomes a duration and `size` a resolution, judged by the model's registry entry (its fps and its
sizes, `seconds_and_size`); a read-model job becomes the SDK's Video object (`video_object`).

Multipart forms carry every value as text, so the integer and number fields are read from text here (a
JSON body's numbers pass through unchanged, and normalize judges them).
"""

from __future__ import annotations

import re
from typing import Any

from spotreel.api.config import GatewayConfig
from spotreel.api.errors import ApiError, ModelRefusal
from spotreel.domain import images
from spotreel.domain.images import ImageRef
from spotreel.model_registry import ModelEntry

# spotreel's own options a compatible request may carry beside the OpenAI fields (the SDK's `extra_body`),
# under their POST /v1/videos names; `pool` is the native `gpu_type`.
EXTRA_FIELDS = frozenset({"priority", "seed", "num_steps", "guidance_scale", "negative_prompt", "sampler",
                          "callback_url", "pool", "timeout_seconds", "max_attempts", "backoff_base_seconds",
                          "backoff_max_seconds", "webhook_events", "run_at", "delay_seconds"})
OPENAI_FIELDS = frozenset({"prompt", "model", "seconds", "size", "input_reference"})
_INTEGER_FIELDS = frozenset({"priority", "seed", "num_steps", "timeout_seconds", "max_attempts",
                             "backoff_base_seconds", "backoff_max_seconds", "run_at", "delay_seconds"})
_NUMBER_FIELDS = frozenset({"guidance_scale"})
_INTEGER = re.compile(r"-?[0-9]{1,19}")
_NUMBER = re.compile(r"-?[0-9]{1,10}(\.[0-9]{1,10})?")
_SECONDS = re.compile(r"[0-9]{1,5}(\.[0-9]{1,6})?")
_SIZE = re.compile(r"[1-9][0-9]{0,4}x[1-9][0-9]{0,4}")

# spotreel's status → the SDK's four. A paused or not yet due video waits, so it is `queued`; every end
# that is not a success (failed, cancelled, dead-lettered) is `failed`, with the reason in `error`.
STATUS = {"accepted": "queued", "scheduled": "queued", "waiting": "queued", "queued": "queued",
          "paused": "queued", "leased": "in_progress", "running": "in_progress", "succeeded": "completed",
          "failed": "failed", "cancelled": "failed", "dead_lettered": "failed"}
# A native field's name as the compatible surface calls it, for `param` in errors.
PARAM = {"duration": "seconds", "resolution": "size", "gpu_type": "pool"}
# Idempotency keys of remixes: `remix:<source id>/<the client's key or a fresh one>`, so the job's own key
# says which video it was remixed from (no field of the job's events holds it).
REMIX_PREFIX = "remix:"
_REMIX_KEY = re.compile(r"remix:(j[0-9a-f]{32})/.+")


def bad_request(message: str, param: str | None = None, code: str = "invalid_value") -> ApiError:
    return ApiError(400, code, message, field=param)


def _from_text(name: str, value: Any) -> Any:
    """A multipart field's text as the JSON value POST /v1/videos takes (a JSON body's values unchanged)."""
    if not isinstance(value, str):
        return value
    if name in _INTEGER_FIELDS:
        if not _INTEGER.fullmatch(value):
            raise bad_request(f"{name} must be an integer; got {value!r}", name)
        return int(value)
    if name in _NUMBER_FIELDS:
        if not _NUMBER.fullmatch(value):
            raise bad_request(f"{name} must be a number; got {value!r}", name)
        return float(value)
    return value


def model_fps(cfg: GatewayConfig, entry: ModelEntry | None) -> int:
    return entry.fps if entry is not None and entry.fps else cfg.default_fps


def _default_size(cfg: GatewayConfig, entry: ModelEntry | None) -> str:
    """The model's first listed size; for a model with a size rule the gateway's default resolution where
    the rule allows it, else the largest square it allows."""
    if entry is None:
        return cfg.default_resolution
    if entry.sizes:
        return entry.sizes[0]
    if entry.size_allowed(cfg.default_resolution):
        return cfg.default_resolution
    side = entry.side_max - entry.side_max % entry.side_multiple
    return f"{side}x{side}"


def seconds_and_size(cfg: GatewayConfig, entry: ModelEntry | None, seconds: Any,
                     size: Any) -> tuple[float, str, int]:
    """(duration in seconds, resolution, fps) of a request's `seconds` and `size` for the model. A value of the
    wrong form is 400; one the model cannot render (its frames at its fps, its sizes) is a ModelRefusal (422),
    naming what it takes. Left out: the gateway's default duration and `_default_size`."""
    fps = model_fps(cfg, entry)
    if seconds is None:
        duration = cfg.default_duration_s
    else:
        text = str(seconds) if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) else seconds
        if not isinstance(text, str) or not _SECONDS.fullmatch(text) or float(text) <= 0:
            raise bad_request(f"seconds must be a positive number of seconds as a string (e.g. \"4\"); got "
                              f"{seconds!r}", "seconds")
        duration = float(text)
    if size is None:
        resolution = _default_size(cfg, entry)
    elif not isinstance(size, str) or not _SIZE.fullmatch(size):
        raise bad_request(f"size must be WIDTHxHEIGHT (e.g. \"832x480\"); got {size!r}", "size")
    else:
        resolution = size
    if entry is not None:
        if not entry.size_allowed(resolution):
            raise ModelRefusal("resolution", f"model {entry.name} renders sizes {entry.size_rule()}; got "
                                             f"{resolution!r}")
        frames = round(duration * fps)
        if not entry.frames_min <= frames <= entry.frames_max:
            raise ModelRefusal("duration", f"model {entry.name} renders frame counts {entry.frame_rule()} at {fps} fps, so "
                                           f"seconds from {entry.frames_min / fps:g} to {entry.frames_max / fps:g}; "
                                           f"got {duration:g} ({frames} frames)")
    return duration, resolution, fps


def native_body(fields: dict[str, Any], cfg: GatewayConfig) -> dict[str, Any]:
    """A compatible create request's fields → a POST /v1/videos body (before normalize judges it). Raises
    ApiError 404 `model_not_found` for a model the registry does not name, before anything is written."""
    unknown = sorted(set(fields) - OPENAI_FIELDS - EXTRA_FIELDS)
    if unknown:
        raise bad_request(f"unknown parameter {unknown[0]!r}; spotreel's own options are "
                          f"{', '.join(sorted(EXTRA_FIELDS))}", unknown[0], "unknown_parameter")
    prompt = fields.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise bad_request("prompt is required and must be a non-empty string", "prompt", "missing_required_parameter")
    model = fields.get("model")
    if model is None:
        model = cfg.default_model
    if not isinstance(model, str):
        raise bad_request("model must be a string", "model")
    entry = None
    if cfg.models is not None:
        entry = cfg.models.models.get(model)
        if entry is None:
            raise ApiError(404, "model_not_found", f"the model {model!r} does not exist; this deployment renders "
                           f"{', '.join(cfg.models.names()) or '(none)'}", field="model")
    if entry is not None:
        # Before the image is read or stored: a model that cannot use it (or needs one) refuses first.
        given = fields.get("input_reference") is not None
        if given and not entry.takes_image:
            others = cfg.models.image_models()
            raise bad_request(f"model {model} renders text-to-video only and takes no input_reference; "
                              f"image-to-video models here: {', '.join(others) or '(none)'}",
                              "input_reference", "unsupported_parameter")
        if not given and entry.takes_image:
            raise bad_request(f"model {model} renders image-to-video: input_reference (the first frame's image) "
                              "is required", "input_reference", "missing_required_parameter")
    duration, resolution, fps = seconds_and_size(cfg, entry, fields.get("seconds"), fields.get("size"))
    body: dict[str, Any] = {"prompt": prompt, "model": model, "duration": duration, "resolution": resolution,
                            "fps": fps}
    for name in sorted(EXTRA_FIELDS & set(fields)):
        body["gpu_type" if name == "pool" else name] = _from_text(name, fields[name])
    return body


def remix_body(source: dict[str, Any], prompt: Any) -> dict[str, Any]:
    """A POST /v1/videos body for a remix: the earlier video's model and render settings, a new prompt.
    `source`: the earlier job's model, priority and params (read-model or claim names)."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise bad_request("prompt is required and must be a non-empty string", "prompt", "missing_required_parameter")
    params = source["params"]
    body: dict[str, Any] = {"prompt": prompt, "model": source["model"], "priority": source["priority"]}
    duration = params.get("duration_s", params.get("duration"))
    if duration is not None:
        body["duration"] = duration
    for name in ("resolution", "fps", "num_steps", "seed", "gpu_type", "guidance_scale", "negative_prompt",
                 "sampler"):  # the input image, where the source had one, is the route's (`remix_image`)
        if params.get(name) is not None:
            body[name] = params[name]
    return body


def remix_image(source: dict[str, Any]) -> ImageRef | None:
    """The earlier video's input image, which its remix is conditioned on too (None: text-to-video)."""
    text = source["params"].get("input_image")
    return images.parse(text) if text else None


def remix_key(source_id: str, given: str) -> str:
    return f"{REMIX_PREFIX}{source_id}/{given}"


def remixed_from(idempotency_key: str) -> str | None:
    m = _REMIX_KEY.fullmatch(idempotency_key or "")
    return m[1] if m else None


def seconds_text(duration_s: Any) -> str:
    """A duration as the SDK's `seconds` string: "4" for 4.0, "0.5" for 0.5."""
    if not isinstance(duration_s, (int, float)) or isinstance(duration_s, bool):
        return ""
    return f"{duration_s:g}" if duration_s != int(duration_s) else str(int(duration_s))


def video_object(*, job_id: str, status: str, model: str, prompt: str, params: dict[str, Any], created_at_ms: int | None,
                 updated_at_ms: int | None, progress_pct: float, idempotency_key: str, error: str | None,
                 terminal_reason: str | None, expires_at_ms: int | None) -> dict[str, Any]:
    """The SDK's Video: times in Unix seconds, an integer progress, the four statuses."""
    state = STATUS.get(status, "queued")
    failure = None
    if state == "failed":
        failure = {"code": terminal_reason or status, "message": error or f"the video is {status}"}
    duration = params.get("duration_s", params.get("duration"))
    return {
        "id": job_id, "object": "video", "status": state, "model": model, "prompt": prompt,
        "progress": 100 if state == "completed" else max(0, min(100, int(progress_pct))),
        "created_at": (created_at_ms or 0) // 1000,
        "completed_at": (updated_at_ms // 1000) if state in ("completed", "failed") and updated_at_ms else None,
        "expires_at": expires_at_ms // 1000 if expires_at_ms is not None else None,
        "seconds": seconds_text(duration), "size": params.get("resolution", ""),
        "error": failure, "remixed_from_video_id": remixed_from(idempotency_key),
    }


def error_type(status: int) -> str:
    if status == 401:
        return "authentication_error"
    if status == 403:
        return "permission_error"
    if status == 429:
        return "rate_limit_error"
    if status >= 500:
        return "server_error"
    return "invalid_request_error"


def openai_error(exc: ApiError) -> tuple[int, dict[str, Any]]:
    """An ApiError in the OpenAI shape `{"error": {"message", "type", "param", "code"}}`. A malformed field
    (natively 422 `invalid_field`) is 400 there, as OpenAI answers a bad parameter; a value the model cannot
    render stays 422 (ModelRefusal)."""
    status = exc.status
    if status == 422 and exc.code == "invalid_field" and not isinstance(exc, ModelRefusal):
        status = 400
    param = PARAM.get(exc.field, exc.field) if exc.field is not None else None
    code = "unsupported_value" if isinstance(exc, ModelRefusal) else exc.code
    return status, {"error": {"message": exc.message, "type": error_type(status), "param": param, "code": code}}
