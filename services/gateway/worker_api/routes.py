"""The worker API under /internal/ (DESIGN §3): register, lease long-poll, and the fenced lease commands.

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

import asyncio
import logging
import json
import math
import time
from typing import Any, Callable

from aiohttp import web

from spotreel.dispatch import intake as dispatch_intake
from spotreel.dispatch import verdicts
from spotreel.dispatch.asking import Asking
from spotreel.dispatch.intake import SENT_AT_HTTP_HEADER
from spotreel.dispatch.order import request_order
from spotreel.domain import commands as cmd
from spotreel.domain import events as ev
from spotreel.domain import limits
from spotreel.domain.spec import flattened
from spotreel.platform.seed import api_key_hash
from spotreel.api.config import GatewayConfig
from spotreel.services.gateway.context import GATEWAY, Gateway, gateway
from spotreel.services.gateway.deps import Deps, StoreUnavailable
from spotreel.services.gateway.worker_api.idlepolls import IdlePolls
from spotreel.services.gateway.worker_api.intake import Intake, intake_middleware
from spotreel.services.gateway.worker_api.intake import start_pulses as intake_start_pulses
from spotreel.services.gateway.jsonbody import whole_number
from spotreel.api.errors import ApiError, invalid, not_found
from spotreel.services.gateway.worker_api.leasedesk import SUPERSEDED, LeaseDesk, Poll
from spotreel.services.gateway.metrics import Metrics
from spotreel.api.submission import _JOB_ID
from spotreel.settings import Settings

log = logging.getLogger("spotreel.gateway")
WORKER = web.RequestKey("worker_key", str)
PROFILES = web.AppKey("worker_profiles", dict)
DESK = web.AppKey("lease_desk", LeaseDesk)
IDLE = web.AppKey("idle_polls", list)  # [IdlePolls] once made
INTAKE = web.AppKey("intake", Intake)
_WORKER_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:")
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


# -- helpers ----------------------------------------------------------------------------------------------

def _gw(request: web.Request) -> Gateway:
    return gateway(request)


def _worker_id(request: web.Request) -> str:
    wid = request.match_info["id"]
    if not 1 <= len(wid) <= 128 or not set(wid) <= _WORKER_ID_CHARS:
        raise invalid("id", "worker id: 1-128 of letters, digits and -_.:")
    return wid


def _job_id(request: web.Request) -> str:
    job_id = request.match_info["job_id"]
    if not _JOB_ID.match(job_id):
        raise not_found()
    return job_id


async def _body(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    try:
        # `1.0` is the integer 1, as in the public API (jsonbody.py) and JSON Schema: an epoch written so
        # was refused although /openapi.json documents it `integer` (schemathesis).
        body = json.loads(raw or b"{}", parse_float=whole_number)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise ApiError(400, "invalid_json", "the body is not valid JSON") from None
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_json", "the body must be a JSON object")
    return body


_TYPES: dict[str, tuple[type, ...]] = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,)}


def _take(body: dict[str, Any], spec: dict[str, tuple]) -> dict[str, Any]:
    """Fields by name: (type, required) or (type, required, largest int). bool is not an int here; unknown
    fields are refused."""
    extra = set(body) - set(spec) - {"command_id"}
    if extra:
        raise invalid(sorted(extra)[0], "unknown field")
    out: dict[str, Any] = {}
    for name, (kind, required, *bound) in spec.items():
        if name not in body or body[name] is None:
            if required:
                raise invalid(name, f"{name} is required")
            continue
        value = body[name]
        if isinstance(value, bool) and kind != "bool" or not isinstance(value, _TYPES[kind]):
            raise invalid(name, f"{name} must be a {kind}")
        # Every integer here (epochs, steps, sizes, milliseconds) is an Avro long and never negative; a float
        # must be a number (Python's json accepts NaN and Infinity).
        top = bound[0] if bound else MAX_LONG
        if kind == "int" and not 0 <= value <= top:
            raise invalid(name, f"{name} must be between 0 and {top}")
        if kind == "float":
            try:
                value = float(value)
            except OverflowError:
                value = math.inf
            if not math.isfinite(value):
                raise invalid(name, f"{name} must be a finite number")
        out[name] = value
    return out


def _models(value: Any, field: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(m, str) and m for m in value):
        raise invalid(field, f"{field} must be a list of model names")
    return tuple(value)


def _bus(gw: Gateway):
    if gw.deps.work is None:
        raise ApiError(503, "dispatch_unavailable", "this gateway has no connection to the scheduler",
                       retry_after=gw.cfg.retry_after_unavailable_s)
    return gw.deps.work


# -- register and lease -----------------------------------------------------------------------------------

async def register(request: web.Request) -> web.Response:
    gw, wid = _gw(request), _worker_id(request)
    body = await _body(request)
    f = _take({k: v for k, v in body.items() if k not in ("models", "warm_models")},
              {"gpu_type": ("str", True), "draining": ("bool", False)})
    profile = {"gpu_type": f["gpu_type"], "models": _models(body.get("models"), "models"),
               "warm_models": _models(body.get("warm_models", []), "warm_models")}
    # A hint for lease requests that omit their profile; each lease request may carry its own, so a fleet
    # behind several gateways does not depend on which one saw the registration.
    request.app[PROFILES][wid] = profile
    return web.json_response({
        "worker_id": wid, "key_name": request[WORKER], **{k: list(v) if isinstance(v, tuple) else v
                                                          for k, v in profile.items()},
        "lease_ttl_ms": gw.cfg.lease_ttl_ms, "heartbeat_seconds": gw.cfg.heartbeat_seconds,
        "progress_seconds": gw.cfg.progress_seconds, "max_poll_seconds": gw.cfg.lease_poll_max_seconds})


def _order(bus, worker_id: str, models: tuple[str, ...], partitions: int, skip: set[int]) -> list[int]:
    return request_order(worker_id, partitions, bus.partitions_with_work(models), skip)


def _note_age(request: web.Request, gw: Gateway) -> None:
    """How long the request waited to be read (its X-Spotreel-Sent-At to now): what the gateway sheds by."""
    now = gw.deps.clock_ms()
    gw.watch.note_age(now - dispatch_intake.sent_ms(request.headers.get(SENT_AT_HTTP_HEADER), now))


def _connected(request: web.Request) -> bool:
    transport = request.transport
    return transport is not None and not transport.is_closing()


async def lease(request: web.Request) -> web.StreamResponse:
    """Long-poll: RequestWork to partitions that pool stats show with work (then the rest), until a lease or
    the deadline. 200 with the lease, 204 when nothing came. Answers go through the lease desk
    (leasedesk.py): a lease that arrives after this poll ended waits for the worker's next poll, then is
    released, so no grant is left to its TTL."""
    gw, wid = _gw(request), _worker_id(request)
    _note_age(request, gw)
    body = await _body(request)
    known = request.app[PROFILES].get(wid, {})
    f = _take({k: v for k, v in body.items() if k not in ("models", "warm_models")},
              {"gpu_type": ("str", False), "draining": ("bool", False), "wait_seconds": ("float", False),
               "lease_ttl_ms": ("int", False)})
    gpu = f.get("gpu_type") or known.get("gpu_type")
    models = _models(body["models"], "models") if "models" in body else known.get("models")
    warm = _models(body["warm_models"], "warm_models") if "warm_models" in body else known.get("warm_models", ())
    if not gpu or not models:
        # Well-formed, but what is missing would come from a registration this worker has not made: a
        # conflict with the worker's state, not a malformed body.
        raise ApiError(409, "worker_not_registered", f"worker {wid} has not registered: give gpu_type and models "
                       "in the poll, or POST /internal/workers/{id}/register first",
                       missing=[n for n, v in (("gpu_type", gpu), ("models", models)) if not v])
    wait = f.get("wait_seconds", gw.cfg.lease_poll_default_seconds)
    if not 0 <= wait <= gw.cfg.lease_poll_max_seconds:
        raise invalid("wait_seconds", f"wait_seconds must be between 0 and {gw.cfg.lease_poll_max_seconds}")
    ttl = f.get("lease_ttl_ms", gw.cfg.lease_ttl_ms)
    if not limits.MIN_LEASE_TTL_MS <= ttl <= limits.MAX_LEASE_TTL_MS:
        raise invalid("lease_ttl_ms", f"lease_ttl_ms must be between {limits.MIN_LEASE_TTL_MS} and "
                                      f"{limits.MAX_LEASE_TTL_MS}")
    draining = f.get("draining", False)
    bus = _bus(gw)
    await bus.ensure_started()
    desk = request.app[DESK]
    poll = desk.open(wid, tuple(models), draining, lambda: _connected(request))
    try:
        answer = desk.claim(poll)
        claimed = answer is not None
        if answer is None:
            # Idle, nothing parked for it: the first thing a gateway behind turns away (loopwatch.py).
            gw.shed("shed_idle_poll", gw.cfg.shed_idle_polls_lag_seconds, "poll")
            answer, reason = await _wait_for_lease(request, gw, bus, desk, poll, (gpu, models, warm, ttl), wait)
        if answer is None:
            return web.Response(status=204, headers={"X-Spotreel-No-Work": reason})
        return await _deliver(request, gw, desk, answer, claimed)
    finally:
        desk.close(poll)


async def _wait_for_lease(request: web.Request, gw: Gateway, bus, desk: LeaseDesk, poll: Poll, ask: tuple,
                          wait: float) -> tuple[ev.WorkAssigned | None, str]:
    gpu, models, warm, ttl = ask
    wid, draining, n = poll.worker_id, poll.draining, gw.settings.partitions
    idle = _idle_polls(request, gw, bus)
    # Two Kafka hops: even a zero wait gives the answer already on its way a moment to arrive.
    deadline = time.monotonic() + max(wait, 0.5)
    reason = "no_work"
    asked = False  # a draining poll asks once: the scheduler must hear that the worker drains
    while time.monotonic() < deadline and poll.alive():
        # An unanswered request of this worker (maybe from its previous poll) is waited for, not repeated.
        if not desk.waiting(wid) and not (draining and asked):
            if draining:
                p, rid = _order(bus, wid, models, n, set())[0], f"rw-{gw.new_id()}"
            else:
                # Idle workers take turns (dispatch/asking.py): a partition is asked within its queue.
                got = await idle.next(wid, models, deadline - time.monotonic())
                if got is None:
                    continue
                p, rid = got
            desk.sent(rid, wid, p)
            bus.watch_answer(rid, lambda answer, rid=rid: (idle.answered(rid, answer), desk.on_answer(answer)))
            try:
                await gw.deps.commands.send(cmd.RequestWork(rid, wid, gpu, models, warm, draining, ttl,
                                                            gw.deps.clock_ms()), partition=p)
            except BaseException:
                desk.unsent(rid)
                idle.answered(rid, None)
                raise
            gw.metrics.commands.labels("RequestWork").inc()
            asked = True
        answer = await poll.next(min(deadline - time.monotonic(), desk.until_stale(wid)))
        if answer is SUPERSEDED:
            return None, "superseded"
        if isinstance(answer, ev.WorkAssigned):
            return answer, ""
        if isinstance(answer, ev.NoWorkAvailable):
            reason = answer.reason
            if draining:
                break  # a draining worker gets no lease: one answer is the whole story
    return None, reason


def _idle_polls(request: web.Request, gw: Gateway, bus) -> IdlePolls:
    """The gateway's idle polls (idlepolls.py), made on first use: its stats hook needs the running loop."""
    holder = request.app[IDLE]
    if not holder:
        asking = Asking(gw.settings.partitions, scout_s=max(gw.cfg.idle_pass_seconds, 0.05),
                        stale_s=gw.cfg.lease_request_stale_seconds)
        holder.append(IdlePolls(asking, bus.work_view, gw.new_id))
        bus.on_work_change(holder[0].stats_changed)
    return holder[0]


async def _deliver(request: web.Request, gw: Gateway, desk: LeaseDesk, answer: ev.WorkAssigned,
                   claimed: bool) -> web.StreamResponse:
    """Write the lease here rather than after the handler returns, so a client that is gone is noticed and
    the lease parked for its next poll instead of being lost."""
    # The pool's measured lease losses ride along: the worker's checkpoint interval weighs them against its
    # prior MTBF (worker/interval.py).
    losses, leased_s = _bus(gw).lease_losses(answer.pool)
    # A traced job's grant names its trace, so the worker's spans join it (spotreel/tracing.py).
    trace = getattr(_bus(gw), "lease_trace", lambda *_: None)(answer.job_id, answer.epoch)
    response = web.json_response({**flattened(answer), "heartbeat_seconds": gw.cfg.heartbeat_seconds,
                                  "progress_seconds": gw.cfg.progress_seconds,
                                  "pool_lease_losses_1h": losses, "pool_leased_seconds_1h": leased_s,
                                  **({"traceparent": trace} if trace else {})})
    written = False
    try:
        if _connected(request):
            if gw.deps.clock_ms() > answer.at_ms + answer.lease_ttl_ms // 3:
                _renew_late_delivery(gw, answer)
            await response.prepare(request)
            await response.write_eof()
            written = True
    except ConnectionError:
        pass
    finally:
        if written:
            desk.delivered(answer, claimed)
        else:
            desk.park(answer)
    return response


def _renew_late_delivery(gw: Gateway, answer: ev.WorkAssigned) -> None:
    """A grant about to reach its worker more than a third of its TTL after it was made (it waited in this
    gateway, frozen or far behind, or parked for the worker's next poll) is renewed on the holder's behalf: the
    worker's own first renewal comes a heartbeat later, and by then this gateway's pulses may have vouched
    past the lease's deadline, expiring a lease whose holder was never silent (a CI run lost one so). Handed
    to the producer before this returns, so it is on the partition ahead of the next pulse, and produced in
    the poll's intake context, so it is judged at the poll's send time (services/scheduler/intake.py). Its
    ack is not awaited: the poll's connection is not held while Kafka is slow or away, and a renewal that
    fails only leaves the worker's own."""
    command = cmd.RenewLease(f"dl-{gw.new_id()}", answer.job_id, answer.epoch, answer.worker_id)
    try:
        sent = asyncio.ensure_future(gw.deps.commands.send_nowait(command))
    except Exception as exc:  # the producer's queue is full: the worker's own renewals still come
        log.warning("renewal of late-delivered lease %s/%s not sent: %s", answer.job_id, answer.epoch, exc)
        return

    def settled(fut: asyncio.Future) -> None:
        if fut.cancelled():
            return
        if fut.exception() is not None:
            log.warning("renewal of late-delivered lease %s/%s not acknowledged: %s", answer.job_id,
                        answer.epoch, fut.exception())
        else:
            gw.metrics.commands.labels("RenewLease").inc()
    sent.add_done_callback(settled)


# -- fenced lease commands --------------------------------------------------------------------------------

FENCE = {"epoch": ("int", True), "worker_id": ("str", True)}


async def _fenced(request: web.Request, spec: dict[str, tuple],
                  make: Callable[[str, str, dict[str, Any]], Any], answers: bool = False):
    """Send a lease holder's command and answer with the scheduler's verdict, which is the only judge: a stale
    epoch comes back as a CommandRejected (409). No read of the job on the way, so a fleet's heartbeats cost
    Kafka round trips only. With `answers`, the reply also carries what the verdict asks of the holder
    (cancel, drain) and the new expiry."""
    gw, job_id = _gw(request), _job_id(request)
    _note_age(request, gw)
    body = await _body(request)
    f = _take(body, {**FENCE, **spec})
    request.app[DESK].confirm(f["worker_id"], job_id)  # the lease written to this worker reached it
    command_id = body.get("command_id")
    if command_id is None or command_id == "":
        command_id = f"wk-{gw.new_id()}"
    # Any other falsy value ({}, 0, false) used to pass as "absent": refused like every non-string.
    elif not isinstance(command_id, str) or len(command_id) > 128:
        raise invalid("command_id", "command_id must be a string of at most 128 characters")
    command = make(command_id, job_id, f)
    bus = _bus(gw)
    await bus.ensure_started()
    fut = bus.expect_verdict(command_id, job_id)
    sent_at = time.monotonic()
    try:
        await gw.deps.commands.send(command)
        gw.metrics.commands.labels(type(command).__name__).inc()
        try:
            verdict = await asyncio.wait_for(fut, gw.cfg.verdict_seconds)
        except asyncio.TimeoutError:
            verdict = None
        gw.watch.note_verdict_wait(int((time.monotonic() - sent_at) * 1000))
    finally:
        bus.forget_verdict(command_id, job_id)
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
    control plane is behind, and the read model is further behind still: reading it then (as this did until
    2026-11-27) added a Cassandra read to every pending answer exactly when the box was short of CPU."""
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
                  "duration_ms": ("int", False, MAX_CHECKPOINT_MS)},
        lambda c, j, f: cmd.RecordCheckpoint(c, j, f["epoch"], f["worker_id"], f["checkpoint_key"], f["step"],
                                             f["progress_pct"], f["checksum"], f["size_bytes"],
                                             f.get("duration_ms")))


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
        # Found on the sub-app itself: `request.config_dict` builds a chain of both apps on every call
        # (7% of the gateway's CPU at the peak's few hundred worker requests a second).
        sub[GATEWAY] = app[GATEWAY]
    app.add_subapp("/internal/", sub)


def start_pulses(app: web.Application, settings: Settings, deps: Deps, every_s: float) -> None:
    """The gateway's pulses while `app` runs (intake.py); only the gateway service starts them."""
    intake_start_pulses(app, INTAKE, settings, deps, every_s)

