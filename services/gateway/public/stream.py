"""GET /v1/videos/{id}/stream (Server-Sent Events) and GET /v1/videos/{id}/content (302 to S3; 410 Gone once
the video expired under the tenant's plan, domain/expiry.py).

The stream polls the read model rather than tailing Kafka: the read model is what GET shows, so the two
can never disagree, and a gateway needs no consumer per open stream. Each `status` event is the job's
state at one event version and carries that version as its SSE id; a client that reconnects with
`Last-Event-ID` gets only states past it (spotreel/api/sse.py), so a dropped connection loses nothing and repeats
nothing. States the projector wrote between two polls arrive as the newest of them (the job's history,
every event, is GET …/events).
"""

from __future__ import annotations

import asyncio
import time

from aiohttp import web

from spotreel.domain import expiry
from spotreel.api import sse
from spotreel.services.gateway.auth import TENANT
from spotreel.services.gateway.context import gateway
from spotreel.api.errors import ApiError
from spotreel.services.gateway.public.lookup import conflict, find, job_id_of, status_of
from spotreel.services.gateway.public.pending import explain, tenant_leases
from spotreel.services.gateway.public.queueplace import newer_of_tier
from spotreel.services.gateway.public.views import TERMINAL, claim_json, job_json
from spotreel.readmodel.jobs import JobView

HEARTBEAT_SECONDS = 15.0
# How often a stream re-counts the tenant's leases for `pending_reason` (tenant_at_ceiling) and its queued
# jobs submitted after this one (queue_position).
LEASES_EVERY_SECONDS = 5.0


def _snapshot(found) -> dict:
    body = job_json(found) if isinstance(found, JobView) else claim_json(found)
    return {k: body[k] for k in ("id", "status", "progress", "attempt", "error", "version", "run_at")} | (
        {"result": body["result"]} if "result" in body else {})


def _gist(reason: dict | None) -> tuple:
    """What makes a new `pending` event worth sending: the reason and its counts, not its wording."""
    if reason is None:
        return ()
    stats = reason.get("pool_stats") or {}
    return (reason["code"], reason.get("higher_tier_jobs"), reason.get("tenant_leases"),
            stats.get("idle_workers"), stats.get("busy_workers"), reason.get("queue_position"))


async def stream_video(request: web.Request) -> web.StreamResponse:
    gw = gateway(request)
    tenant, job_id = request[TENANT].tenant_id, job_id_of(request)
    found = await find(gw.deps, tenant, job_id)  # 404 before the stream starts, as a normal JSON error
    seen = sse.resume_from(request.headers.get("Last-Event-ID"))
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    last_sent = time.monotonic()
    deadline = time.monotonic() + gw.cfg.stream_max_seconds
    told: tuple | None = None  # the reason last told; a resumed client is not told again what it had
    counted: list = [None, -LEASES_EVERY_SECONDS]  # the tenant's lease count and when it was read

    async def leases() -> int | None:
        # Two read-model queries: at most every few seconds per stream, not every poll.
        if time.monotonic() - counted[1] >= LEASES_EVERY_SECONDS:
            counted[:] = [await tenant_leases(gw.deps, request[TENANT]), time.monotonic()]
        return counted[0]

    behind: list = [0, -LEASES_EVERY_SECONDS]  # the tenant's queued jobs submitted after this one, and when

    async def newer() -> int:
        if time.monotonic() - behind[1] >= LEASES_EVERY_SECONDS:
            view = found if isinstance(found, JobView) else None
            n = 0 if view is None else await newer_of_tier(gw.deps.reads, tenant, job_id, view.priority)
            behind[:] = [n, time.monotonic()]
        return behind[0]

    while True:
        snap = _snapshot(found)
        reason = await explain(gw.deps, request[TENANT], found, gw.deps.clock_ms(), snap["run_at"], leases,
                               gw.admission, newer)
        snap["pending_reason"] = reason
        if sse.is_new(snap["version"], seen):
            await response.write(sse.frame("status", snap, snap["version"]))
            seen, last_sent, told = snap["version"], time.monotonic(), _gist(reason)
        elif told is None:
            told = _gist(reason)
        elif reason is not None and _gist(reason) != told:
            # The reason moved without a new version (the pool's queue or workers changed): a `pending`
            # event, with the id of the version the client has, so a reconnect resumes as before.
            await response.write(sse.frame("pending", {"id": snap["id"], "version": seen, "pending_reason": reason},
                                           seen))
            last_sent, told = time.monotonic(), _gist(reason)
        elif time.monotonic() - last_sent > HEARTBEAT_SECONDS:
            await response.write(sse.KEEP_ALIVE)  # proxies drop silent connections
            last_sent = time.monotonic()
        if status_of(found) in TERMINAL or time.monotonic() > deadline:
            # The id is what the client has now seen: a client that reconnects after a deadline's end
            # resumes from there (it can tell a deadline from the end of the job by the last status).
            await response.write(sse.frame("end", {}, seen))
            break
        await asyncio.sleep(gw.cfg.stream_poll_seconds)
        found = await find(gw.deps, tenant, job_id)
    await response.write_eof()
    return response


async def video_content(request: web.Request) -> web.Response:
    gw = gateway(request)
    found = await find(gw.deps, request[TENANT].tenant_id, job_id_of(request))
    status = status_of(found)
    if status != "succeeded" or not isinstance(found, JobView) or not found.result_key:
        raise conflict(f"the video is {status}; content exists once it has succeeded", status)
    expires_at = expiry.video_expires_at_ms(status, found.updated_at_ms, request[TENANT].plan)
    if expiry.due(expires_at, gw.deps.clock_ms()):
        plan = request[TENANT].plan
        raise ApiError(410, "video_expired", f"the video expired {expiry.VIDEO_RETENTION_DAYS[plan]} days after "
                       f"it succeeded (plan {plan}) and is deleted; submit it again (a new Idempotency-Key) to "
                       "render a new one", expired_at_ms=expires_at)
    if gw.deps.presign is None:
        raise ApiError(503, "storage_unavailable", "no object store is configured", retry_after=30)
    raise web.HTTPFound(gw.deps.presign(found.result_key))
