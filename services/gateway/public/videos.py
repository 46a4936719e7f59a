"""/v1/videos routes: reads from the read model, lifecycle commands to Kafka. The route table here is the
one the OpenAPI test compares with openapi.py."""

from __future__ import annotations

import re

from aiohttp import web

from spotreel.domain import commands as cmd
from spotreel.domain import expiry
from spotreel.services.gateway.public import dags, erasure, pagetokens, stream
from spotreel.services.gateway.auth import TENANT
from spotreel.services.gateway.context import gateway
from spotreel.api.errors import invalid
from spotreel.services.gateway.jsonbody import read_object
from spotreel.services.gateway.public.lookup import conflict, find, job_id_of, status_of
from spotreel.services.gateway.public.pending import explain
from spotreel.services.gateway.public.personal_view import opened, opened_all
from spotreel.api.submission import PRIORITY_RANGE
from spotreel.services.gateway.public.submit import submit_video
from spotreel.services.gateway.public.views import (ACCEPTED, TERMINAL, attempt_json, claim_json, event_json, iso,
                                             job_json, list_item_json, webhook_json)
from spotreel.readmodel.jobs import JobView

_DIGITS = re.compile(r"[0-9]{1,9}")
STATUSES = frozenset({ACCEPTED, "scheduled", "waiting", "queued", "leased", "running", "paused", *TERMINAL})


async def get_video(request: web.Request) -> web.Response:
    deps = gateway(request).deps
    found = await opened(deps.vault, await find(deps, request[TENANT].tenant_id, job_id_of(request)))
    body = job_json(found) if isinstance(found, JobView) else claim_json(found)
    # When the janitor deletes the video under the tenant's plan (domain/expiry.py); /content answers 410
    # `video_expired` from then on. Null: not succeeded, or a plan that keeps videos.
    body["expires_at"] = iso(expiry.video_expires_at_ms(status_of(found), found.updated_at_ms
                                                        if isinstance(found, JobView) else 0, request[TENANT].plan))
    callback = found.params.get("callback_url")
    body["webhook"] = webhook_json(callback, await deps.reads.webhook_state(found.job_id) if callback else None)
    body["pending_reason"] = await explain(deps, request[TENANT], found, deps.clock_ms(), body.get("run_at"),
                                           admission=gateway(request).admission)
    return web.json_response(body)


async def list_videos(request: web.Request) -> web.Response:
    gw = gateway(request)
    q = request.query
    status = q.get("status")
    if status is not None and status not in STATUSES:
        raise invalid("status", f"status must be one of {sorted(STATUSES)}")
    given = q.get("limit", str(gw.cfg.default_page_size))
    # Digits only: int() would also take " 5", "1_0" or other scripts' digits.
    if not _DIGITS.fullmatch(given) or not 1 <= int(given) <= gw.cfg.max_page_size:
        raise invalid("limit", f"limit must be an integer between 1 and {gw.cfg.max_page_size}")
    limit = int(given)
    tenant = request[TENANT].tenant_id
    try:
        state = gw.page_tokens.state(tenant, status, q.get("page_token"))
        page = await gw.deps.reads.list_jobs(tenant, status, limit, state)
    except ValueError as exc:  # a refused token (pagetokens), or a signed state Cassandra itself refused
        raise pagetokens.refusal(exc) from None
    token = gw.page_tokens.issue(tenant, status, page.page_state)
    return web.json_response({"videos": [list_item_json(i) for i in await opened_all(gw.deps.vault, page.items)], "next_page_token": token})


async def video_events(request: web.Request) -> web.Response:
    gw = gateway(request)
    job_id = job_id_of(request)
    await find(gw.deps, request[TENANT].tenant_id, job_id)
    events = await gw.deps.reads.job_events(job_id)
    return web.json_response({"job_id": job_id, "events": [event_json(e) for e in events]})


async def video_attempts(request: web.Request) -> web.Response:
    gw = gateway(request)
    job_id = job_id_of(request)
    await find(gw.deps, request[TENANT].tenant_id, job_id)
    attempts = await gw.deps.reads.job_attempts(job_id)
    return web.json_response({"job_id": job_id, "attempts": [attempt_json(a) for a in attempts]})


async def _command(request: web.Request, action: str, make, allowed=None) -> web.Response:
    """Produce a lifecycle command for a job the tenant can see. The read model may lag, so only what it
    cannot get wrong is refused here (terminal states are absorbing); the scheduler judges the rest and
    records a CommandRejected in the job's history when it says no."""
    gw = gateway(request)
    job_id = job_id_of(request)
    found = await find(gw.deps, request[TENANT].tenant_id, job_id)
    status = status_of(found)
    if allowed is None and status in TERMINAL:
        raise conflict(f"cannot {action} a video that is {status}", status)
    if allowed is not None and status not in allowed:
        raise conflict(f"cannot {action} a video that is {status}", status)
    command = make(gw.new_id(), job_id)
    await gw.deps.commands.send(command)
    gw.metrics.commands.labels(type(command).__name__).inc()
    return web.json_response({"job_id": job_id, "command_id": command.command_id, "requested": action,
                              "status": status}, status=202)


async def cancel_video(request: web.Request) -> web.Response:
    return await _command(request, "cancel", lambda c, j: cmd.CancelJob(c, j, reason="user"))


async def pause_video(request: web.Request) -> web.Response:
    return await _command(request, "pause", lambda c, j: cmd.PauseJob(c, j, reason="user"))


async def resume_video(request: web.Request) -> web.Response:
    return await _command(request, "resume", lambda c, j: cmd.ResumeJob(c, j))


async def retry_video(request: web.Request) -> web.Response:
    return await _command(request, "retry", lambda c, j: cmd.RequeueJob(c, j, reason="user"),
                          allowed=frozenset({"failed", "dead_lettered"}))


async def patch_video(request: web.Request) -> web.Response:
    body = await read_object(request)
    other = sorted(set(body) - {"priority"})
    if other:
        raise invalid(other[0], "only priority can be changed")
    priority = body.get("priority")
    lo, hi = PRIORITY_RANGE
    if isinstance(priority, bool) or not isinstance(priority, int) or not lo <= priority <= hi:
        raise invalid("priority", f"priority must be an integer between {lo} and {hi}")
    gateway(request).admission.check_priority(request[TENANT], priority)
    return await _command(request, "reprioritize", lambda c, j: cmd.Reprioritize(c, j, priority=priority))


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_post("/v1/videos", submit_video)
    router.add_post("/v1/dags", dags.submit_dag)
    router.add_get("/v1/videos", list_videos, allow_head=False)
    router.add_get("/v1/videos/{id}", get_video, allow_head=False)
    router.add_delete("/v1/videos/{id}", erasure.erase_video)
    router.add_patch("/v1/videos/{id}", patch_video)
    router.add_get("/v1/videos/{id}/events", video_events, allow_head=False)
    router.add_get("/v1/videos/{id}/attempts", video_attempts, allow_head=False)
    router.add_get("/v1/videos/{id}/stream", stream.stream_video, allow_head=False)
    router.add_get("/v1/videos/{id}/content", stream.video_content, allow_head=False)
    router.add_post("/v1/videos/{id}/cancel", cancel_video)
    router.add_post("/v1/videos/{id}/pause", pause_video)
    router.add_post("/v1/videos/{id}/resume", resume_video)
    router.add_post("/v1/videos/{id}/retry", retry_video)
