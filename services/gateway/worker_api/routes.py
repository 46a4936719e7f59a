"""The worker API under /internal/ (DESIGN §3): register, the lease long-poll (leasepoll.py), and the fenced lease
commands.

Credentials: a worker key (`Authorization: Bearer <key>`), an api_keys row of kind 'worker' looked up by
its SHA-256 like tenant keys; tenant keys are refused here and worker keys on /v1. The local stack seeds one
(`spotreel.platform.seed.DEV_WORKER_KEY`); `spotreel worker-key create NAME` makes more. A key is a fleet
credential, not bound to one worker id: what keeps a worker from acting on another's job is the lease
epoch + worker_id every command carries, judged by the scheduler.

Verdicts (how a worker learns its command was refused): both, in this order —
1. early 409 from the read model: epochs only grow, and the projector can only lag, so a read-model epoch
   above the one given proves the command stale without asking anyone;
2. otherwise the command is produced and the gateway waits (bounded, `verdict_seconds`) for the
   scheduler's verdict on the events topic through the shared consumer (spotreel.dispatch): the event caused by
   the command → 200, a CommandRejected for it → 409 with its reason. No verdict in time → 202
   {"verdict": "pending"}: the command is durable and will be judged; the worker's next heartbeat tells.
The scheduler stays the only authority; step 1 only saves a round trip for what is already certain, and is
skipped while the read model does not answer (as is a fresh credential check for a key already known).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

from aiohttp import web

from spotreel.api.config import GatewayConfig
from spotreel.api.errors import ApiError, invalid
from spotreel.dispatch import lateverdicts, verdicts
from spotreel.domain import commands as cmd
from spotreel.domain import events as ev
from spotreel.platform.seed import api_key_hash
from spotreel.services.gateway.context import GATEWAY, gateway
from spotreel.services.gateway.deps import Deps, StoreUnavailable
from spotreel.services.gateway.metrics import Metrics
from spotreel.services.gateway.worker_api.intake import Intake, intake_middleware
from spotreel.services.gateway.worker_api.intake import start_pulses as intake_start_pulses
from spotreel.services.gateway.worker_api.leasedesk import LeaseDesk
from spotreel.services.gateway.worker_api.leasepoll import lease
from spotreel.services.gateway.worker_api.wire import (DESK, IDLE, INTAKE, LATE, PROFILES, WORKER, fingerprint_of, job_id_of, model_list,
                                                       note_age, read_body, take, work_bus, worker_id_of)
from spotreel.config.settings import Settings

log = logging.getLogger("spotreel.gateway")
AUTH_CACHE_SECONDS = 30.0
MAX_LONG = 2**63 - 1
# A checkpoint write that took longer than a day is a broken clock or unit, not a cost to average in.
MAX_CHECKPOINT_MS = 24 * 3600 * 1000


# -- auth -------------------------------------------------------------------------------------------------

def _auth_middleware(deps: Deps):
    cache: dict[str, tuple[float, str | None]] = {}

    @web.middleware
    async def authenticate(request: web.Request, handler):
        scheme, _, key = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise ApiError(401, "unauthorized", "send the worker key as 'Authorization: Bearer <key>'")
        digest = api_key_hash(key.strip())
        now = time.monotonic()
        hit = cache.get(digest)
        if hit is None or now >= hit[0]:
            try:
                name = await deps.auth.worker_key_name(digest)
            except StoreUnavailable:
                if hit is None or hit[1] is None:
                    raise
                # Cassandra is down (a restart): a key that was valid a moment ago stays valid until it
                # answers again, or every running job would lose its lease to the outage. Revocations
                # take effect once the store is back.
                name = hit[1]
            if len(cache) > 10_000:
                cache.clear()
            hit = cache[digest] = (now + (AUTH_CACHE_SECONDS if name else 2.0), name)
        if hit[1] is None:
            raise ApiError(401, "unauthorized", "unknown worker key (tenant API keys are not valid here)")
        request[WORKER] = hit[1]
        return await handler(request)

    return authenticate


# -- register -------------------------------------------------------------------------------------------

async def register(request: web.Request) -> web.Response:
    gw, wid = gateway(request), worker_id_of(request)
    body = await read_body(request)
    f = take({k: v for k, v in body.items() if k not in ("models", "warm_models")},
             {"gpu_type": ("str", True), "draining": ("bool", False), "fingerprint": ("str", False)})
    profile = {"gpu_type": f["gpu_type"], "models": model_list(body.get("models"), "models"),
               "warm_models": model_list(body.get("warm_models", []), "warm_models"),
               "fingerprint": fingerprint_of(f.get("fingerprint", ""))}
    # A hint for lease requests that omit their profile; each lease request may carry its own, so a fleet
    # behind several gateways does not depend on which one saw the registration.
    request.app[PROFILES][wid] = profile
    return web.json_response({
        "worker_id": wid, "key_name": request[WORKER], **{k: list(v) if isinstance(v, tuple) else v
                                                          for k, v in profile.items()},
        "lease_ttl_ms": gw.cfg.lease_ttl_ms, "heartbeat_seconds": gw.cfg.heartbeat_seconds,
        "progress_seconds": gw.cfg.progress_seconds, "max_poll_seconds": gw.cfg.lease_poll_max_seconds})


# -- fenced lease commands --------------------------------------------------------------------------------

FENCE = {"epoch": ("int", True), "worker_id": ("str", True)}


async def _fenced(request: web.Request, spec: dict[str, tuple],
                  make: Callable[[str, str, dict[str, Any]], Any], answers: bool = False):
    """Send a lease holder's command and answer with the scheduler's verdict, which is the only judge: a stale
    epoch comes back as a CommandRejected (409). No read of the job on the way, so a fleet's heartbeats cost
    Kafka round trips only. With `answers`, the reply also carries what the verdict asks of the holder
    (cancel, drain) and the new expiry."""
    gw, job_id = gateway(request), job_id_of(request)
    read_at = time.monotonic()
    age_s = note_age(request, gw) / 1000.0
    body = await read_body(request)
    f = take(body, {**FENCE, **spec})
    request.app[DESK].confirm(f["worker_id"], job_id)  # the lease written to this worker reached it
    command_id = body.get("command_id")
    if command_id is None or command_id == "":
        command_id = f"wk-{gw.new_id()}"
    # Any other falsy value ({}, 0, false) is not "absent": refused like every non-string.
    elif not isinstance(command_id, str) or len(command_id) > 128:
        raise invalid("command_id", "command_id must be a string of at most 128 characters")
    command = make(command_id, job_id, f)
    bus = work_bus(gw)
    await bus.ensure_started()
    fut = bus.expect_verdict(command_id, job_id)
    sent_at = time.monotonic()
    try:
        await gw.deps.commands.send(command)
    except BaseException:
        bus.forget_verdict(command_id, job_id)
        raise
    gw.metrics.commands.labels(type(command).__name__).inc()
    # A renewal is answered within renewal_answer_seconds of the worker's send (the time its request waited
    # to be read counts); its verdict is then followed and told on the holder's next renewal.
    answer_s = gw.cfg.verdict_seconds
    if gw.cfg.renewal_answer_seconds < gw.cfg.verdict_seconds:
        answer_s = lateverdicts.answer_wait_s(gw.cfg.renewal_answer_seconds, age_s + time.monotonic() - read_at)
    verdict, kept = await lateverdicts.verdict_of(
        bus, request.app[LATE], fut, command_id, (job_id, f["epoch"], f["worker_id"]), sent_at, renewal=answers,
        answer_s=answer_s, verdict_s=gw.cfg.verdict_seconds, on_wait=gw.watch.note_verdict_wait)
    if kept is not None:
        gw.metrics.late_verdicts_told.labels("refused" if isinstance(kept, ev.CommandRejected) else "asked").inc()
        if isinstance(kept, ev.CommandRejected):
            verdict = kept
    answer: dict[str, Any] = {"job_id": job_id, "command_id": command_id, "epoch": f["epoch"]}
    if isinstance(verdict, ev.CommandRejected):
        if verdict.reason == "stale_epoch":
            gw.metrics.rejections.labels("stale_epoch").inc()
        raise ApiError(409, verdict.reason, verdict.detail or f"{verdict.command_type} rejected: {verdict.reason}",
                       reason=verdict.reason, command_id=command_id, epoch_given=verdict.epoch_given,
                       current_epoch=verdict.current_epoch)
    if verdict is None:
        answer["verdict"] = "pending"
        status = 202
    else:
        answer |= {"verdict": "accepted", "event": type(verdict).__name__}
        status = 200
    if answers:
        answer |= _instructions(verdict)
        if kept is not None:  # a cancel or drain asked in a verdict that came after its own answer
            told = verdicts.instructions(kept) or {}
            answer["cancel"], answer["drain"] = bool(told.get("cancel")), bool(told.get("drain"))
        # Behind: tell the holder to space its renewals out instead of adding to the backlog.
        pace = verdicts.pace(verdict, time.monotonic() - sent_at, gw.cfg.lease_ttl_ms,
                             slow_s=gw.cfg.slow_verdict_seconds)
        if pace is not None:
            answer["renew_in_seconds"] = pace
    return web.json_response(answer, status=status)


def _instructions(verdict) -> dict[str, Any]:
    """What a renewal's answer tells the worker beside the new expiry: stop (cancel) or checkpoint and hand
    the lease back (drain: the job was paused). From the verdict itself; a verdict still pending tells
    nothing yet (both false), and the worker hears it on a later renewal. A pending verdict means the
    control plane is behind, and the read model is further behind still: reading it then would add a
    Cassandra read to every pending answer exactly when the box is short of CPU."""
    told = verdicts.instructions(verdict)
    return told if told is not None else {"cancel": False, "drain": False}


async def heartbeat(request: web.Request) -> web.Response:
    return await _fenced(request, {}, lambda c, j, f: cmd.RenewLease(c, j, f["epoch"], f["worker_id"]),
                         answers=True)


async def progress(request: web.Request) -> web.Response:
    return await _fenced(
        request, {"step": ("int", True), "progress_pct": ("float", True), "phase": ("str", False)},
        lambda c, j, f: cmd.ReportProgress(c, j, f["epoch"], f["worker_id"], f["step"], f["progress_pct"],
                                           f.get("phase", "denoising")), answers=True)


async def checkpoint(request: web.Request) -> web.Response:
    return await _fenced(
        request, {"checkpoint_key": ("str", True), "step": ("int", True), "progress_pct": ("float", True),
                  "checksum": ("str", True), "size_bytes": ("int", True),
                  "duration_ms": ("int", False, MAX_CHECKPOINT_MS), "fingerprint": ("str", False)},
        lambda c, j, f: cmd.RecordCheckpoint(c, j, f["epoch"], f["worker_id"], f["checkpoint_key"], f["step"],
                                             f["progress_pct"], f["checksum"], f["size_bytes"],
                                             f.get("duration_ms"), fingerprint_of(f.get("fingerprint"))))


async def complete(request: web.Request) -> web.Response:
    return await _fenced(
        request, {"artifact_key": ("str", True), "artifact_checksum": ("str", True),
                  "artifact_size_bytes": ("int", True)},
        lambda c, j, f: cmd.CompleteJob(c, j, f["epoch"], f["worker_id"], f["artifact_key"],
                                        f["artifact_checksum"], f["artifact_size_bytes"]))


async def fail(request: web.Request) -> web.Response:
    return await _fenced(
        request, {"error_code": ("str", True), "error_message": ("str", True), "retryable": ("bool", False),
                  "invalid_checkpoint_key": ("str", False)},
        lambda c, j, f: cmd.FailJob(c, j, f["epoch"], f["worker_id"], f["error_code"], f["error_message"],
                                    f.get("retryable", True), f.get("invalid_checkpoint_key")))


async def release(request: web.Request) -> web.Response:
    return await _fenced(
        request, {"reason": ("str", False)},
        lambda c, j, f: cmd.ReleaseLease(c, j, f["epoch"], f["worker_id"], f.get("reason", "preempted")))


# -- the sub-app ------------------------------------------------------------------------------------------

LEASE_ACTIONS = {"heartbeat": heartbeat, "progress": progress, "checkpoint": checkpoint, "complete": complete,
                 "fail": fail, "release": release}


def build(settings: Settings, deps: Deps, cfg: GatewayConfig | None = None,
          metrics: Metrics | None = None) -> web.Application:
    cfg = cfg or GatewayConfig()
    intake = Intake(deps.clock_ms)
    sub = web.Application(middlewares=[_auth_middleware(deps), intake_middleware(intake)])
    sub[INTAKE] = intake
    sub[PROFILES] = {}
    outcomes = metrics.lease_answers if metrics is not None else None
    desk = LeaseDesk(deps.commands.send, hold_s=cfg.unclaimed_lease_hold_seconds, stale_s=cfg.lease_request_stale_seconds,
                     forget_answer=deps.work.forget_answer if deps.work is not None else (lambda rid: None),
                     on_outcome=(lambda o: outcomes.labels(o).inc()) if outcomes is not None else (lambda o: None),
                     watch=getattr(deps.work, "observe_job", None) or (lambda job_id, on_event: None))
    sub[DESK] = desk
    sub[LATE] = lateverdicts.LateVerdicts()
    sub[IDLE] = []

    async def release_parked(_app: web.Application) -> None:
        await desk.aclose()

    sub.on_shutdown.append(release_parked)
    sub.router.add_post("/workers/{id}/register", register)
    sub.router.add_post("/workers/{id}/lease", lease)
    for action, handler in LEASE_ACTIONS.items():
        sub.router.add_post(f"/leases/{{job_id}}/{action}", handler)
    return sub


def mount(app: web.Application, settings: Settings, deps: Deps, cfg: GatewayConfig | None = None,
          metrics: Metrics | None = None) -> None:
    sub = build(settings, deps, cfg, metrics)
    app[INTAKE] = sub[INTAKE]
    if GATEWAY in app:
        # Found on the sub-app itself: `request.config_dict` builds a chain of both apps on every call, a
        # visible share of the gateway's CPU at a fleet's few hundred worker requests a second.
        sub[GATEWAY] = app[GATEWAY]
    app.add_subapp("/internal/", sub)


def start_pulses(app: web.Application, settings: Settings, deps: Deps, every_s: float) -> None:
    """The gateway's pulses while `app` runs (intake.py); only the gateway service starts them."""
    intake_start_pulses(app, INTAKE, settings, deps, every_s)

