"""/v1/schedules: cron schedules as a resource. Each schedule is its own aggregate on Kafka (CreateSchedule,
PauseSchedule, ResumeSchedule, DeleteSchedule keyed by schedule_id); the projector writes schedules_by_id,
schedules_by_tenant and occurrences_by_schedule, which GET reads.

POST body: {"cron", "timezone"?, "catch_up"?, "catch_up_grace_seconds"?, "catch_up_max_runs"?, "overlap"?,
"start_at"?, "job": {the fields of POST /v1/videos but run_at, delay_seconds, parents, dag_policy and
webhook_events}}. The job is checked by POST /v1/videos' own `normalize` (the model registry included), so a
template is refused exactly where a one-off video would be, the field named `job.<field>`.
The schedule id is derived from (tenant, Idempotency-Key) like a video's (`ids.schedule_id_for`); the key is
claimed in submission_claims with the request's hash, so a retry with the same key and body is the same
schedule (`replayed`) and another body is 409; so is the same key once its schedule is deleted
(`schedule_deleted`: the key names that schedule for good). Until the projector has written the schedule, GET answers from
the claim with status "accepted" (never 404 after a 202).

DELETE produces a DeleteSchedule and waits (GatewayConfig.schedule_delete_wait_seconds) until the read model
shows the schedule deleted: then 200 `deleted`, and from then on the schedule's own routes answer 404
`schedule_deleted` (the list keeps it, status `deleted`, for the record). If the scheduler or projector is
slower than that, 202 with the status the schedule still had: the command is durable and applies later.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from typing import Any

from aiohttp import web

from spotreel.domain import commands as cmd
from spotreel.domain import ids
from spotreel.domain.cron import CronError, MissedPolicy, validate, validate_zone
from spotreel.domain.schedules import OverlapPolicy
from spotreel.domain.spec import RenderSpec
from spotreel.personal.fields import open_mapping, seal_mapping, seal_record
from spotreel.services.gateway.public import pagetokens
from spotreel.services.gateway.auth import TENANT
from spotreel.services.gateway.context import Gateway, gateway
from spotreel.services.gateway.deps import Claim
from spotreel.api.config import GatewayConfig
from spotreel.api.errors import ApiError, invalid
from spotreel.services.gateway.jsonbody import read_object
from spotreel.api.submission import MAX_RUN_AT_MS, check_idempotency_key, normalize, policy_fields
from spotreel.services.gateway.public.views import ACCEPTED, iso
from spotreel.readmodel.schedules import OccurrenceView, ScheduleView

SCHEDULE_ID = re.compile(r"s[0-9a-f]{32}")
_DIGITS = re.compile(r"[0-9]{1,9}")
KNOWN = frozenset({"cron", "timezone", "catch_up", "catch_up_grace_seconds", "catch_up_max_runs", "overlap",
                   "start_at", "job"})
NOT_IN_TEMPLATE = ("run_at", "delay_seconds", "parents", "dag_policy")
# Job fields a schedule cannot carry yet (the gateway stores a job's event filter by job id at submit, and an
# occurrence's job is submitted by the scheduler): 422 rather than silently dropped.
UNSUPPORTED_IN_TEMPLATE = ("webhook_events",)
# Shown in a schedule's job whether set or not (null: no time limit, the model's default).
OPTIONS = ("timeout_seconds", "guidance_scale", "negative_prompt", "sampler")
CATCH_UP = tuple(p.value for p in MissedPolicy)
OVERLAP = OverlapPolicy.ALL
MAX_GRACE_S = 86_400
MAX_CATCH_UP_RUNS = 1000
MAX_CRON_CHARS = 200
# Page-token scopes: distinct from every video status filter (PageTokens MACs the scope with the state).
LIST_SCOPE = "\x01schedules"


def _occurrences_scope(schedule_id: str) -> str:
    return "\x01occurrences:" + schedule_id


def not_found() -> ApiError:
    return ApiError(404, "not_found", "no such schedule")


def _int(body: dict[str, Any], name: str, lo: int, hi: int, default: int) -> int:
    v = body.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise invalid(name, f"{name} must be an integer between {lo} and {hi}")
    return v


def _choice(body: dict[str, Any], name: str, allowed: tuple[str, ...]) -> str:
    v = body.get(name)
    if v is None:
        return allowed[0]
    if v not in allowed:
        raise invalid(name, f"{name} must be one of {list(allowed)}")
    return v


def normalize_schedule(body: Any, gw: Gateway) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_json", "the body must be a JSON object")
    unknown = sorted(set(body) - KNOWN)
    if unknown:
        raise invalid(unknown[0], f"unknown field {unknown[0]!r}")
    cron = body.get("cron")
    if not isinstance(cron, str) or not cron.strip() or len(cron) > MAX_CRON_CHARS:
        raise invalid("cron", f"cron is required: a 5-field cron expression or @macro, up to {MAX_CRON_CHARS} "
                              "characters")
    try:
        cron = validate(cron)
    except CronError as err:
        raise invalid("cron", str(err)) from None
    zone = body.get("timezone")
    if zone is None:
        zone = "UTC"
    try:
        validate_zone(zone)
    except CronError as err:
        raise invalid("timezone", str(err)) from None
    job = body.get("job")
    if not isinstance(job, dict):
        raise invalid("job", "job is required: an object with the fields of POST /v1/videos")
    for name in NOT_IN_TEMPLATE:
        if name in job:
            raise invalid(f"job.{name}", f"{name} has no meaning in a schedule's job; each occurrence runs when due")
    for name in UNSUPPORTED_IN_TEMPLATE:
        if name in job:
            raise invalid(f"job.{name}", f"{name} is not supported in a schedule's job")
    try:
        template = normalize(job, gw.cfg, allow_private_callbacks=bool(gw.settings.webhook_allow_private))
    except ApiError as exc:
        exc.field = f"job.{exc.field}" if exc.field else "job"
        raise
    for name in NOT_IN_TEMPLATE:
        template.pop(name, None)
    start_at = body.get("start_at")
    if start_at is not None and (isinstance(start_at, bool) or not isinstance(start_at, int)
                                 or not 0 <= start_at <= MAX_RUN_AT_MS):
        raise invalid("start_at", f"start_at must be epoch milliseconds between 0 and {MAX_RUN_AT_MS}")
    return {
        "cron": cron, "timezone": zone,
        "catch_up": _choice(body, "catch_up", CATCH_UP),
        "catch_up_grace_seconds": _int(body, "catch_up_grace_seconds", 0, MAX_GRACE_S, 60),
        "catch_up_max_runs": _int(body, "catch_up_max_runs", 1, MAX_CATCH_UP_RUNS, 100),
        "overlap": _choice(body, "overlap", OVERLAP),
        "start_at": start_at,
        "job": template,
    }


def build_create(tenant: str, schedule_id: str, body: dict[str, Any], command_id: str,
                 cfg: GatewayConfig | None = None) -> cmd.CreateSchedule:
    job = body["job"]
    # No seed given: one derived from the schedule, the same for every occurrence (a template is fixed).
    seed = job["seed"] if job["seed"] is not None else int(schedule_id[1:16], 16)
    spec = RenderSpec(model=job["model"], prompt=job["prompt"], duration_s=job["duration"],
                      resolution=job["resolution"], fps=job["fps"], seed=seed, num_steps=job["num_steps"],
                      guidance_scale=job.get("guidance_scale"), negative_prompt=job.get("negative_prompt"),
                      sampler=job.get("sampler"))
    return cmd.CreateSchedule(
        command_id=command_id, schedule_id=schedule_id, tenant=tenant, cron=body["cron"], timezone=body["timezone"],
        missed_policy=body["catch_up"], spec=spec, gpu_type=job["gpu_type"], priority=job["priority"],
        callback_url=job["callback_url"], start_ms=body["start_at"], grace_ms=body["catch_up_grace_seconds"] * 1000,
        max_catchup=body["catch_up_max_runs"], overlap_policy=body["overlap"], **policy_fields(job, cfg),
    )


def schedule_json(s: ScheduleView) -> dict[str, Any]:
    t = s.template
    job = {"prompt": t.get("prompt"), "model": t.get("model"), "gpu_type": t.get("gpu_type"),
           "duration": t.get("duration_s"), "resolution": t.get("resolution"), "fps": t.get("fps"),
           "seed": t.get("seed"), "num_steps": t.get("num_steps"), "priority": t.get("priority"),
           "callback_url": t.get("callback_url"),
           "timeout_seconds": t["timeout_ms"] // 1000 if t.get("timeout_ms") is not None else None,
           "guidance_scale": t.get("guidance_scale"), "negative_prompt": t.get("negative_prompt"),
           "sampler": t.get("sampler")}
    return {"id": s.schedule_id, "status": s.status, "cron": s.cron, "timezone": s.timezone,
            "catch_up": s.catch_up, "catch_up_grace_seconds": s.grace_ms // 1000,
            "catch_up_max_runs": s.max_catch_up, "overlap": s.overlap_policy, "job": job,
            "created_at": iso(s.created_at_ms), "updated_at": iso(s.updated_at_ms),
            "next_occurrence_at": iso(s.next_occurrence_at_ms) if s.status == "active" else None,
            "last_tick_at": iso(s.last_tick_at_ms), "version": s.version}


def claim_schedule_json(c: Claim) -> dict[str, Any]:
    """A schedule known only from the gateway's claim: accepted, not yet projected."""
    b = c.params
    job = dict(b.get("job", {}))
    job.pop("run_at", None)
    job.update({name: job.get(name) for name in OPTIONS})
    return {"id": c.job_id, "status": ACCEPTED, "cron": b.get("cron"), "timezone": b.get("timezone"),
            "catch_up": b.get("catch_up"), "catch_up_grace_seconds": b.get("catch_up_grace_seconds"),
            "catch_up_max_runs": b.get("catch_up_max_runs"), "overlap": b.get("overlap"), "job": job,
            "created_at": iso(c.accepted_at_ms), "updated_at": iso(c.accepted_at_ms), "next_occurrence_at": None,
            "last_tick_at": None, "version": 0}


def occurrence_json(o: OccurrenceView) -> dict[str, Any]:
    out: dict[str, Any] = {"occurrence_at": iso(o.occurrence_at_ms), "status": o.status}
    if o.status == "skipped":
        out.update(last_occurrence_at=iso(o.last_occurrence_at_ms), reason=o.reason)
    else:
        out.update(job_id=o.job_id, fired_at=iso(o.fired_at_ms), ended_at=iso(o.ended_at_ms), late=bool(o.late))
    return out


def deleted_error(schedule_id: str) -> ApiError:
    return ApiError(404, "schedule_deleted", f"schedule {schedule_id} was deleted; it is still listed, with status "
                    "deleted, by GET /v1/schedules", schedule_status="deleted")


async def _find(gw: Gateway, tenant: str, schedule_id: str) -> ScheduleView | Claim:
    """The tenant's schedule (or its claim, before the projector wrote it): 404 for another tenant's or an
    unknown id; 404 `schedule_deleted` once it is deleted."""
    if not SCHEDULE_ID.fullmatch(schedule_id):
        raise not_found()
    found = await gw.deps.reads.get_schedule(schedule_id)
    if found is not None:
        if found.tenant_id != tenant:
            raise not_found()
        if found.status == "deleted":
            raise deleted_error(schedule_id)
        return found
    claim = await gw.deps.reads.get_claim(schedule_id)
    if claim is None or claim.tenant_id != tenant:
        raise not_found()
    return claim


def _limit(gw: Gateway, request: web.Request) -> int:
    given = request.query.get("limit", str(gw.cfg.default_page_size))
    if not _DIGITS.fullmatch(given) or not 1 <= int(given) <= gw.cfg.max_page_size:
        raise invalid("limit", f"limit must be an integer between 1 and {gw.cfg.max_page_size}")
    return int(given)


async def create_schedule(request: web.Request) -> web.Response:
    gw = gateway(request)
    tenant = request[TENANT]
    given = request.headers.get("Idempotency-Key")
    key = check_idempotency_key(given) if given is not None else "gen-" + uuid.uuid4().hex
    body = normalize_schedule(await read_object(request), gw)
    schedule_id = ids.schedule_id_for(tenant.tenant_id, key)
    create = build_create(tenant.tenant_id, schedule_id, body, gw.new_id(), gw.cfg)
    now = gw.deps.clock_ms()
    job = body["job"]
    prompt, params = job["prompt"], body
    if gw.deps.vault is not None:
        # The template's personal fields under the schedule's data key, which every occurrence's job copies:
        # erasing the schedule (or its tenant) erases theirs (docs/decisions/0035-crypto-shredding.md).
        sealer = await gw.deps.vault.sealer(schedule_id, tenant.tenant_id)
        create = seal_record(create, sealer)
        prompt, params = create.spec.prompt, {**body, "job": seal_mapping(job, sealer)}
    mine = Claim(job_id=schedule_id, tenant_id=tenant.tenant_id, idempotency_key=key,
                 request_hash=ids.request_hash(body), accepted_at_ms=now, model=job["model"],
                 pool=ids.pool_key(job["model"], job["gpu_type"]), priority=job["priority"], prompt=prompt,
                 params=params)
    held = await gw.deps.reads.get_claim(schedule_id)
    replay = held is not None
    if held is None:
        gw.admission.check_rate(tenant, now)
        held = await gw.deps.reads.claim(mine)
    if held.request_hash != mine.request_hash:
        raise ApiError(409, "idempotency_key_reused", "this Idempotency-Key was already used with a different "
                       "request body", field="Idempotency-Key", schedule_id=schedule_id)
    status = ACCEPTED
    if replay:
        existing = await gw.deps.reads.get_schedule(schedule_id)
        status = existing.status if existing is not None else ACCEPTED
        if status == "deleted":
            # The key names that schedule for good (its id derives from the key): a replay cannot bring it
            # back, and a 202 for a schedule that reads as gone would promise what GET then refuses.
            raise ApiError(409, "schedule_deleted", f"the schedule this Idempotency-Key created ({schedule_id}) "
                           "was deleted; a new schedule needs another key", field="Idempotency-Key",
                           schedule_id=schedule_id, schedule_status=status)
    try:
        # Sent again on a replay: harmless (the domain refuses a second CreateSchedule, schedule_exists) and
        # it completes a request whose first send was not acknowledged.
        await gw.deps.commands.send(create)
    except Exception:
        if not replay:
            await gw.deps.reads.drop_claim(held)
        raise
    gw.metrics.commands.labels("CreateSchedule").inc()
    return web.json_response({"schedule_id": schedule_id, "status": status, "idempotency_key": key,
                              "replayed": replay}, status=202, headers={"Idempotency-Key": key})


async def get_schedule(request: web.Request) -> web.Response:
    gw = gateway(request)
    found = await _find(gw, request[TENANT].tenant_id, request.match_info["id"])
    body = schedule_json(found) if isinstance(found, ScheduleView) else claim_schedule_json(found)
    return web.json_response(await _opened_job(gw, body))


async def _opened_job(gw: Gateway, body: dict[str, Any]) -> dict[str, Any]:
    """A schedule's answer with its template's personal fields in plain text (null once erased)."""
    if gw.deps.vault is not None:
        body["job"] = await open_mapping(body["job"], gw.deps.vault)
    return body


async def list_schedules(request: web.Request) -> web.Response:
    gw = gateway(request)
    limit = _limit(gw, request)
    tenant = request[TENANT].tenant_id
    try:
        state = gw.page_tokens.state(tenant, LIST_SCOPE, request.query.get("page_token"))
        page = await gw.deps.reads.list_schedules(tenant, limit, state)
    except ValueError as exc:
        raise pagetokens.refusal(exc) from None
    return web.json_response({"schedules": [await _opened_job(gw, schedule_json(s)) for s in page.items],
                              "next_page_token": gw.page_tokens.issue(tenant, LIST_SCOPE, page.page_state)})


async def schedule_occurrences(request: web.Request) -> web.Response:
    gw = gateway(request)
    tenant = request[TENANT].tenant_id
    schedule_id = request.match_info["id"]
    await _find(gw, tenant, schedule_id)
    limit = _limit(gw, request)
    scope = _occurrences_scope(schedule_id)
    try:
        state = gw.page_tokens.state(tenant, scope, request.query.get("page_token"))
        page = await gw.deps.reads.schedule_occurrences(schedule_id, limit, state)
    except ValueError as exc:
        raise pagetokens.refusal(exc) from None
    return web.json_response({"schedule_id": schedule_id, "occurrences": [occurrence_json(o) for o in page.items],
                              "next_page_token": gw.page_tokens.issue(tenant, scope, page.page_state)})


async def _command(request: web.Request, action: str, make) -> tuple[Gateway, cmd.ScheduleCommand, str]:
    """Produce a schedule command for a schedule the tenant can see. Only what the read model cannot get
    wrong is refused here (a deleted schedule stays deleted: 404); the scheduler judges the rest (pausing a
    paused schedule or resuming an active one changes nothing), since the read model may lag a pause or
    resume sent a moment ago."""
    gw = gateway(request)
    found = await _find(gw, request[TENANT].tenant_id, request.match_info["id"])
    command = make(gw.new_id(), request.match_info["id"])
    await gw.deps.commands.send(command)
    gw.metrics.commands.labels(type(command).__name__).inc()
    return gw, command, found.status if isinstance(found, ScheduleView) else ACCEPTED


def _answer(schedule_id: str, command: cmd.ScheduleCommand, action: str, status: str, code: int = 202) -> web.Response:
    return web.json_response({"schedule_id": schedule_id, "command_id": command.command_id, "requested": action,
                              "status": status}, status=code)


async def _deleted(gw: Gateway, schedule_id: str) -> bool:
    """Whether the read model shows the schedule deleted within schedule_delete_wait_seconds (read again after
    20 ms, then less and less often, at most every 250 ms)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + gw.cfg.schedule_delete_wait_seconds
    pause = 0.02
    while True:
        found = await gw.deps.reads.get_schedule(schedule_id)
        if found is not None and found.status == "deleted":
            return True
        left = deadline - loop.time()
        if left <= 0:
            return False
        await asyncio.sleep(min(pause, left))
        pause = min(pause * 2, 0.25)


async def delete_schedule(request: web.Request) -> web.Response:
    gw, command, status = await _command(request, "delete", lambda c, s: cmd.DeleteSchedule(c, s))
    schedule_id = request.match_info["id"]
    if await _deleted(gw, schedule_id):
        return _answer(schedule_id, command, "delete", "deleted", 200)
    return _answer(schedule_id, command, "delete", status)


async def pause_schedule(request: web.Request) -> web.Response:
    _, command, status = await _command(request, "pause", lambda c, s: cmd.PauseSchedule(c, s))
    return _answer(request.match_info["id"], command, "pause", status)


async def resume_schedule(request: web.Request) -> web.Response:
    _, command, status = await _command(request, "resume", lambda c, s: cmd.ResumeSchedule(c, s))
    return _answer(request.match_info["id"], command, "resume", status)


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_post("/v1/schedules", create_schedule)
    router.add_get("/v1/schedules", list_schedules, allow_head=False)
    router.add_get("/v1/schedules/{id}", get_schedule, allow_head=False)
    router.add_delete("/v1/schedules/{id}", delete_schedule)
    router.add_get("/v1/schedules/{id}/occurrences", schedule_occurrences, allow_head=False)
    router.add_post("/v1/schedules/{id}/pause", pause_schedule)
    router.add_post("/v1/schedules/{id}/resume", resume_schedule)
