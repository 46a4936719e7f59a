"""The OpenAI-compatible surface (/openai/v1, public/openai_routes.py) in /openapi.json: the Videos API's
operations as this gateway serves them, with the SDK's Video object, cursor pages and OpenAI's error shape
`{"error": {"message", "type", "param", "code"}}` (not the native one). The fields a create takes are the
OpenAI ones plus spotreel's own options (api/openai_videos.py EXTRA_FIELDS), as a form (what the SDK sends)
or JSON; `input_reference` is an uploaded image, or `{"image_url": "data:..."}`."""

from __future__ import annotations

from typing import Any

from spotreel.api import openai_videos as oa
from spotreel.api.config import GatewayConfig
from spotreel.api.submission import JOB_ID
from spotreel.services.gateway.openapi_parts import TRANSPORT
from spotreel.services.gateway.openapi_rules import anchored
from spotreel.services.gateway.public.openai_routes import PREFIX, VARIANTS

OPENAI_ERROR = {"type": "object", "required": ["error"], "properties": {"error": {
    "type": "object", "required": ["message", "type", "param", "code"],
    "properties": {"message": {"type": "string"}, "type": {"type": "string"},
                   "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]}}}}}
VIDEO = {"type": "object", "required": ["id", "object", "status", "model", "progress", "created_at", "seconds",
                                        "size"],
         "properties": {
             "id": {"type": "string"}, "object": {"const": "video"},
             "status": {"enum": sorted(set(oa.STATUS.values()))}, "model": {"type": "string"},
             "prompt": {"type": ["string", "null"]}, "progress": {"type": "integer", "minimum": 0, "maximum": 100},
             "created_at": {"type": "integer", "description": "Unix seconds"},
             "completed_at": {"type": ["integer", "null"]}, "expires_at": {"type": ["integer", "null"]},
             "seconds": {"type": "string"}, "size": {"type": "string"},
             "error": {"type": ["object", "null"], "properties": {"code": {"type": "string"},
                                                                 "message": {"type": "string"}}},
             "remixed_from_video_id": {"type": ["string", "null"]}}}
PAGE = {"type": "object", "required": ["object", "data", "has_more", "first_id", "last_id"],
        "properties": {"object": {"const": "list"}, "data": {"type": "array", "items": VIDEO},
                       "has_more": {"type": "boolean"}, "first_id": {"type": ["string", "null"]},
                       "last_id": {"type": ["string", "null"]}}}
DELETED = {"type": "object", "required": ["id", "object", "deleted"],
           "properties": {"id": {"type": "string"}, "object": {"const": "video.deleted"},
                          "deleted": {"const": True}}}
ID = {"name": "id", "in": "path", "required": True, "schema": {"type": "string", "pattern": anchored(JOB_ID.pattern)}}
IDEMPOTENCY = {"name": "Idempotency-Key", "in": "header", "required": False,
               "schema": {"type": "string", "pattern": "^[!-~]{1,200}$"},
               "description": "the same key and body: the same video; the same key with another body: 409"}
_ERRORS = {400: "a malformed or unsupported parameter (error.param names it; an image that is not a PNG, JPEG "
                "or WebP within the limits, or one given to a model that takes none)",
           401: "missing or unknown API key", 403: "the tenant's plan or state does not allow it",
           404: "no such video (or not yours, or deleted), or an unknown model (code model_not_found)",
           409: "the Idempotency-Key was used with another body, or the video's content is not ready",
           413: "body too large", 415: "the body is neither multipart/form-data nor JSON",
           422: "a value the model cannot render (its sizes, frames at its fps; code unsupported_value)",
           429: "rate or quota exceeded (Retry-After)", 503: "a store or the scheduler is unavailable (Retry-After)"}


def _responses(ok: dict[str, Any], errors: tuple[int, ...]) -> dict[str, Any]:
    out = dict(ok)
    for code in errors:
        out[str(code)] = {"description": _ERRORS[code], "content": {"application/json": {"schema": OPENAI_ERROR}}}
    return out | TRANSPORT


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _create_body(cfg: GatewayConfig) -> dict[str, Any]:
    extra = {name: {"description": "spotreel's own option, as POST /v1/videos takes it"
                    + (" (gpu_type there)" if name == "pool" else "")} for name in sorted(oa.EXTRA_FIELDS)}
    fields = {"prompt": {"type": "string", "minLength": 1, "maxLength": cfg.max_prompt_chars},
              "model": {"type": "string", "description": f"a model of the registry (default {cfg.default_model})"},
              "seconds": {"type": "string", "pattern": anchored(oa._SECONDS.pattern),
                          "description": "length in seconds, rendered at the model's fps"},
              "size": {"type": "string", "pattern": anchored(oa._SIZE.pattern), "description": "WIDTHxHEIGHT"},
              **extra}
    reference = {"description": f"the first frame's image of an image-to-video model (registry takes_image): "
                 f"PNG, JPEG or WebP, at most {cfg.max_image_bytes} bytes, {cfg.max_image_side} pixels a side and "
                 f"{cfg.max_image_pixels} in all; stored once by its SHA-256"}
    form = {"type": "object", "required": ["prompt"], "properties": {
        **fields, "input_reference": {**reference, "type": "string", "format": "binary"},
        "input_reference[image_url]": {"type": "string", "description": "a base64 data: URL of the image"}}}
    body = {"type": "object", "required": ["prompt"], "properties": {
        **fields, "input_reference": {**reference, "type": "object", "additionalProperties": False,
                                      "properties": {"image_url": {"type": "string", "pattern": "^data:image/",
                                                                   "description": "a base64 data: URL"}}}}}
    return {"required": True, "content": {"multipart/form-data": {"schema": form},
                                          "application/json": {"schema": body}}}


def openai_paths(cfg: GatewayConfig) -> dict[str, Any]:
    videos, one = f"{PREFIX}/videos", f"{PREFIX}/videos/{{id}}"
    return {
        videos: {
            "post": {"summary": "the SDK's videos.create: submit a video (text-to-video, or image-to-video with "
                                "input_reference) through the same checks and admission as POST /v1/videos",
                     "parameters": [IDEMPOTENCY], "requestBody": _create_body(cfg),
                     "responses": _responses({"200": _json(VIDEO, "the video, queued")},
                                             (400, 401, 403, 404, 409, 413, 415, 422, 429, 503))},
            "get": {"summary": "the SDK's videos.list: the tenant's videos by creation time, a cursor page",
                    "parameters": [
                        {"name": "after", "in": "query", "schema": {"type": "string"},
                         "description": "last_id of the previous page"},
                        {"name": "limit", "in": "query",
                         "schema": {"type": "integer", "minimum": 1, "maximum": cfg.max_page_size, "default": 20}},
                        {"name": "order", "in": "query", "schema": {"enum": ["asc", "desc"], "default": "desc"}}],
                    "responses": _responses({"200": _json(PAGE, "a page")}, (400, 401, 503))},
        },
        one: {
            "get": {"summary": "the SDK's videos.retrieve (the answer's openai-poll-after-ms paces its poll)",
                    "parameters": [ID], "responses": _responses({"200": _json(VIDEO, "the video")},
                                                                (401, 404, 503))},
            "delete": {"summary": "the SDK's videos.delete: an unfinished video is cancelled; 404 here after",
                       "parameters": [ID], "responses": _responses({"200": _json(DELETED, "deleted")},
                                                                   (401, 404, 503))},
        },
        f"{one}/content": {"get": {
            "summary": "the SDK's videos.download_content: the MP4 (a redirect to a presigned URL), or a PNG "
                       "thumbnail (first frame) or spritesheet made from its frames",
            "parameters": [ID, {"name": "variant", "in": "query",
                                "schema": {"enum": list(VARIANTS), "default": "video"}}],
            "responses": _responses({"200": {"description": "thumbnail or spritesheet",
                                             "content": {"image/png": {"schema": {"type": "string",
                                                                                  "format": "binary"}}}},
                                     "302": {"description": "variant video: redirect to a presigned URL"}},
                                    (400, 401, 404, 409, 503))}},
        f"{one}/remix": {"post": {
            "summary": "the SDK's videos.remix: a new video of the earlier one's settings (its input image "
                       "too) and a new prompt",
            "parameters": [ID, IDEMPOTENCY],
            "requestBody": {"required": True, "content": {
                ctype: {"schema": {"type": "object", "required": ["prompt"], "additionalProperties": False,
                                   "properties": {"prompt": {"type": "string", "minLength": 1}}}}
                for ctype in ("multipart/form-data", "application/json")}},
            "responses": _responses({"200": _json(VIDEO, "the new video, queued")},
                                    (400, 401, 403, 404, 409, 413, 415, 422, 429, 503))}},
    }
