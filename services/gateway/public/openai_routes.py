"""The OpenAI Videos API on the gateway, under /openai/v1 (`OpenAI(base_url=".../openai/v1")`).

Mounted beside the native API rather than over it: /v1/videos keeps its own body, answers and error shape
for the CLI and existing clients, and the compatible surface speaks the SDK's (the Video object, cursor pages,
`{"error": {"message", "type", "param", "code"}}`, app.py's error middleware). Underneath it is the one
submission path: a create or remix is translated into a POST /v1/videos body (api/openai_videos.py), judged
by the same `normalize`, and admitted, claimed and produced by the same `accept` (public/submit.py), so the
Idempotency-Key, admission, 429s and the model registry behave exactly as they do natively.

DELETE is the native erasure (public/erasure.py: data key, objects, EraseJob, which cancels an unfinished
video) and marks the video deleted (jobs_by_id.deleted_at); this surface answers 404 for it from then on.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from typing import Any

import aiohttp
from aiohttp import web

from spotreel.api import input_image
from spotreel.api import openai_videos as oa
from spotreel.api.errors import ApiError
from spotreel.api.submission import JOB_ID, check_idempotency_key, normalize
from spotreel.domain import expiry
from spotreel.domain.images import ImageRef
from spotreel.readmodel.jobs import JobListItem, JobView
from spotreel.services.gateway.auth import TENANT
from spotreel.services.gateway.public.erasure import erase_job
from spotreel.services.gateway.public.personal_view import opened, opened_all
from spotreel.services.gateway.context import Gateway, gateway
from spotreel.services.gateway.deps import Claim, Tenant
from spotreel.services.gateway.public.guards import is_json
from spotreel.services.gateway.jsonbody import read_object
from spotreel.services.gateway.public.lookup import find, job_id_of, status_of
from spotreel.services.gateway.public.submit import accept

PREFIX = "/openai/v1"
# The payload of webhooks of videos made here (services/webhooks/payload.py `openai_style`).
OPENAI_STYLE = "openai"
# How long the SDK's poll helper waits between retrieves (it reads this header).
POLL_AFTER_MS = 1000
VARIANTS = {"video": None, "thumbnail": "image/png", "spritesheet": "image/png"}
_FORM_TYPES = ("multipart/form-data", "application/x-www-form-urlencoded")
_OBJECT_FIELD = re.compile(r"[a-z_]{1,64}\[[a-z_]{1,64}\]")


def video_json(found: JobView | Claim, tenant: Tenant) -> dict[str, Any]:
    if isinstance(found, Claim):
        return oa.video_object(job_id=found.job_id, status="accepted", model=found.model, prompt=found.prompt,
                               params=found.params, created_at_ms=found.accepted_at_ms,
                               updated_at_ms=found.accepted_at_ms, progress_pct=0.0,
                               idempotency_key=found.idempotency_key, error=None, terminal_reason=None,
                               expires_at_ms=None)
    return oa.video_object(job_id=found.job_id, status=found.status, model=found.model, prompt=found.prompt,
                           params=found.params, created_at_ms=found.created_at_ms, updated_at_ms=found.updated_at_ms,
                           progress_pct=found.progress_pct, idempotency_key=found.idempotency_key, error=found.error,
                           terminal_reason=found.terminal_reason,
                           expires_at_ms=expiry.video_expires_at_ms(found.status, found.updated_at_ms, tenant.plan))


async def _visible(gw: Gateway, tenant: str, job_id: str) -> JobView | Claim:
    """The tenant's video, unless it was deleted here (404 then, as for a video that never was)."""
    found = await find(gw.deps, tenant, job_id)
    # A video known only from its claim has its placeholder row, where a deletion is marked too.
    row = found if isinstance(found, JobView) else await gw.deps.reads.get_job(job_id)
    if row is not None and row.deleted_at_ms is not None:
        raise ApiError(404, "not_found", "no such video (it was deleted)")
    return found


async def _fields(request: web.Request) -> dict[str, Any]:
    """The create request's fields: a JSON object, or a form (what the SDK sends), its `name[]` fields as
    lists, its `name[key]` fields as an object (a reference object such as input_reference[image_url]) and a
    file part as the bytes of its upload."""
    if is_json(request):
        return await read_object(request)
    if request.content_type not in _FORM_TYPES:
        given = request.headers.get("Content-Type")
        raise ApiError(415, "unsupported_media_type", "the body must be multipart/form-data or JSON; got "
                       f"{given if given is not None else 'no Content-Type'}", field="Content-Type")
    form = await request.post()
    out: dict[str, Any] = {}
    for name in form.keys():
        values = [v.file.read() if isinstance(v, web.FileField) else v for v in form.getall(name)]
        if name.endswith("[]"):
            out[name[:-2]] = values
        elif _OBJECT_FIELD.fullmatch(name):
            outer, inner = name[:-1].split("[", 1)
            into = out.setdefault(outer, {})
            if not isinstance(into, dict):
                raise oa.bad_request(f"{outer} is given both as a value and as an object", outer)
            into[inner] = values[-1]
        else:
            out[name] = values[-1]
    return out


async def _image(gw: Gateway, value: Any) -> ImageRef:
    """Check the request's input_reference and store the image once by its hash; its reference for the job."""
    if gw.deps.images is None:
        raise ApiError(503, "storage_unavailable", "no object store is configured for input images", retry_after=30)
    image = await asyncio.to_thread(input_image.read, value, gw.cfg)
    ref = ImageRef.for_content(image.sha256, image.media_type)
    try:
        await gw.deps.images.put(ref, image.data)
    except Exception as exc:  # the store's errors (botocore's, a socket's): the client may retry
        raise ApiError(503, "storage_unavailable", f"the input image could not be stored: {type(exc).__name__}",
                       retry_after=5) from exc
    return ref


async def _submit(request: web.Request, body: dict[str, Any], key: str, fresh: bool,
                  image: ImageRef | None = None) -> web.Response:
    gw = gateway(request)
    normalized = normalize(body, gw.cfg, allow_private_callbacks=bool(gw.settings.webhook_allow_private),
                           image=image)
    answer = await accept(gw, request[TENANT], key, normalized, fresh_key=fresh, webhook_style=OPENAI_STYLE)
    found = await opened(gw.deps.vault, await find(gw.deps, request[TENANT].tenant_id, answer["job_id"]))
    headers = {"Location": f"{PREFIX}/videos/{answer['job_id']}", "Idempotency-Key": key}
    return web.json_response(video_json(found, request[TENANT]), headers=headers)


def _key(request: web.Request) -> tuple[str, bool]:
    given = request.headers.get("Idempotency-Key")
    if given is None:
        return "gen-" + uuid.uuid4().hex, True
    return check_idempotency_key(given), False


async def create_video(request: web.Request) -> web.Response:
    gw = gateway(request)
    gw.shed("shed_submission", gw.cfg.shed_submissions_lag_seconds, "submit")
    key, fresh = _key(request)
    # An image may come with the request: the body limit here is the other requests' plus the largest image
    # as a base64 data: URL (a third bigger than its bytes).
    request = request.clone(client_max_size=gw.cfg.max_body_bytes + (gw.cfg.max_image_bytes + 2) // 3 * 4 + 1024)
    fields = await _fields(request)
    body = oa.native_body(fields, gw.cfg)
    reference = fields.get("input_reference")
    image = await _image(gw, reference) if reference is not None else None
    return await _submit(request, body, key, fresh, image)


async def remix_video(request: web.Request) -> web.Response:
    gw = gateway(request)
    gw.shed("shed_submission", gw.cfg.shed_submissions_lag_seconds, "submit")
    tenant = request[TENANT]
    source = await opened(gw.deps.vault, await _visible(gw, tenant.tenant_id, job_id_of(request)))
    fields = await _fields(request)
    unknown = sorted(set(fields) - {"prompt"})
    if unknown:
        raise oa.bad_request(f"unknown parameter {unknown[0]!r}: a remix takes a new prompt only", unknown[0],
                             "unknown_parameter")
    body = oa.remix_body({"model": source.model, "priority": source.priority, "params": source.params},
                         fields.get("prompt"))
    given, fresh = _key(request)
    return await _submit(request, body, oa.remix_key(source.job_id, given), fresh, oa.remix_image(
        {"params": source.params}))


async def retrieve_video(request: web.Request) -> web.Response:
    gw = gateway(request)
    found = await opened(gw.deps.vault, await _visible(gw, request[TENANT].tenant_id, job_id_of(request)))
    return web.json_response(video_json(found, request[TENANT]), headers={"openai-poll-after-ms": str(POLL_AFTER_MS)})


async def list_videos(request: web.Request) -> web.Response:
    gw = gateway(request)
    q = request.query
    given = q.get("limit", "20")
    if not given.isascii() or not given.isdigit() or not 1 <= int(given) <= gw.cfg.max_page_size:
        raise oa.bad_request(f"limit must be an integer from 1 to {gw.cfg.max_page_size}", "limit")
    limit = int(given)
    order = q.get("order", "desc")
    if order not in ("asc", "desc"):
        raise oa.bad_request("order must be asc or desc", "order")
    tenant = request[TENANT]
    after = None
    if q.get("after"):
        try:
            mark = await _visible(gw, tenant.tenant_id, _checked_id(q["after"]))
        except ApiError as exc:
            raise oa.bad_request(f"after: {exc.message}", "after") from None
        if not isinstance(mark, JobView) or mark.created_at_ms is None:
            raise oa.bad_request("after names a video not listed yet (just accepted); try again in a moment",
                                 "after")
        after = (mark.created_at_ms, mark.job_id)
    rows: list[JobListItem] = await gw.deps.reads.list_jobs_from(tenant.tenant_id, after, order == "asc", limit + 1)
    page, more = rows[:limit], len(rows) > limit
    views = await opened_all(gw.deps.vault, [v for v in await asyncio.gather(
        *(gw.deps.reads.get_job(r.job_id) for r in page)) if v is not None])
    data = [video_json(v, tenant) for v in views if v is not None and v.deleted_at_ms is None]
    # The cursor is the last row read, listed or not, so a page of deleted videos does not end the listing.
    return web.json_response({"object": "list", "data": data, "has_more": more,
                              "first_id": page[0].job_id if page else None,
                              "last_id": page[-1].job_id if page else None})


def _checked_id(job_id: str) -> str:
    if not JOB_ID.fullmatch(job_id):
        raise ApiError(404, "not_found", "no such video")
    return job_id


async def delete_video(request: web.Request) -> web.Response:
    gw = gateway(request)
    job_id = job_id_of(request)
    tenant = request[TENANT].tenant_id
    found = await _visible(gw, tenant, job_id)
    # The native erasure (public/erasure.py): data key, objects, EraseJob (which cancels a live job first).
    await erase_job(gw, tenant, job_id, by=f"tenant:{tenant}", reason="deleted")
    await gw.deps.reads.mark_deleted(found.job_id, gw.deps.clock_ms())
    return web.json_response({"id": job_id, "object": "video.deleted", "deleted": True})


async def download_content(request: web.Request) -> web.StreamResponse:
    gw = gateway(request)
    variant = request.query.get("variant", "video")
    if variant not in VARIANTS:
        raise oa.bad_request(f"variant must be one of {', '.join(VARIANTS)}", "variant")
    tenant = request[TENANT]
    found = await _visible(gw, tenant.tenant_id, job_id_of(request))
    status = status_of(found)
    if status != "succeeded" or not isinstance(found, JobView) or not found.result_key:
        raise ApiError(409, "video_not_ready", f"the video is {oa.STATUS.get(status, status)}; its content exists "
                       "once it is completed", video_status=status)
    expires_at = expiry.video_expires_at_ms(status, found.updated_at_ms, tenant.plan)
    if expiry.due(expires_at, gw.deps.clock_ms()):
        raise ApiError(404, "video_expired", f"the video expired at {expires_at // 1000 if expires_at else 0} "
                       "(Unix seconds) and is deleted")
    if gw.deps.presign is None:
        raise ApiError(503, "storage_unavailable", "no object store is configured", retry_after=30)
    url = gw.deps.presign(found.result_key)
    if variant == "video":
        raise web.HTTPFound(url)
    from spotreel.media.previews import preview

    async with aiohttp.ClientSession() as http, http.get(url) as got:
        if got.status != 200:
            raise ApiError(503, "storage_unavailable", f"the object store answered {got.status}", retry_after=5)
        mp4 = await got.read()
    image = await asyncio.to_thread(preview, mp4, variant)
    return web.Response(body=image, content_type=VARIANTS[variant])


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_post(f"{PREFIX}/videos", create_video)
    router.add_get(f"{PREFIX}/videos", list_videos, allow_head=False)
    router.add_get(f"{PREFIX}/videos/{{id}}", retrieve_video, allow_head=False)
    router.add_delete(f"{PREFIX}/videos/{{id}}", delete_video)
    router.add_get(f"{PREFIX}/videos/{{id}}/content", download_content, allow_head=False)
    router.add_post(f"{PREFIX}/videos/{{id}}/remix", remix_video)
