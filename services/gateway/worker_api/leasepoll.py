"""The lease long-poll, POST /internal/workers/{id}/lease (DESIGN §3): RequestWork to the partitions that pool
stats show with work, the answer waited for through the lease desk (leasedesk.py) and written while the worker
is still there, a lease whose worker is gone parked for its next poll, and a grant that reaches its worker late
renewed on its behalf."""

from __future__ import annotations

import asyncio
import logging
import time

from aiohttp import web

from spotreel.api.errors import ApiError, invalid
from spotreel.dispatch.asking import Asking
from spotreel.dispatch.order import request_order
from spotreel.domain import commands as cmd
from spotreel.domain import events as ev
from spotreel.domain import limits
from spotreel.domain.records import replace
from spotreel.domain.spec import flattened
from spotreel.personal.fields import open_spec
from spotreel.personal.vault import Erased
from spotreel.services.gateway.context import Gateway, gateway
from spotreel.services.gateway.worker_api.idlepolls import IdlePolls
from spotreel.services.gateway.worker_api.leasedesk import SUPERSEDED, LeaseDesk, Poll
from spotreel.services.gateway.worker_api.wire import (DESK, IDLE, INTAKE, PROFILES, fingerprint_of, model_list, note_age,
                                                       read_body, take, work_bus, worker_id_of)

log = logging.getLogger("spotreel.gateway")


def _order(bus, worker_id: str, models: tuple[str, ...], partitions: int, skip: set[int]) -> list[int]:
    return request_order(worker_id, partitions, bus.partitions_with_work(models), skip)


def _connected(request: web.Request) -> bool:
    transport = request.transport
    return transport is not None and not transport.is_closing()


async def lease(request: web.Request) -> web.StreamResponse:
    """Long-poll: RequestWork to partitions that pool stats show with work (then the rest), until a lease or
    the deadline. 200 with the lease, 204 when nothing came. Answers go through the lease desk
    (leasedesk.py): a lease that arrives after this poll ended waits for the worker's next poll, then is
    released, so no grant is left to its TTL."""
    gw, wid = gateway(request), worker_id_of(request)
    note_age(request, gw)
    body = await read_body(request)
    known = request.app[PROFILES].get(wid, {})
    f = take({k: v for k, v in body.items() if k not in ("models", "warm_models")},
             {"gpu_type": ("str", False), "draining": ("bool", False), "wait_seconds": ("float", False),
              "lease_ttl_ms": ("int", False), "fingerprint": ("str", False)})
    gpu = f.get("gpu_type") or known.get("gpu_type")
    fingerprint = fingerprint_of(f.get("fingerprint", known.get("fingerprint", "")))
    models = model_list(body["models"], "models") if "models" in body else known.get("models")
    warm = model_list(body["warm_models"], "warm_models") if "warm_models" in body else known.get("warm_models", ())
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
    bus = work_bus(gw)
    await bus.ensure_started()
    desk = request.app[DESK]
    poll = desk.open(wid, tuple(models), draining, lambda: _connected(request))
    try:
        answer = desk.claim(poll)
        claimed = answer is not None
        if answer is None:
            # Idle, nothing parked for it: the first thing a gateway behind turns away (loopwatch.py).
            gw.shed("shed_idle_poll", gw.cfg.shed_idle_polls_lag_seconds, "poll")
            answer, reason = await _wait_for_lease(request, gw, bus, desk, poll, (gpu, models, warm, ttl, fingerprint),
                                                   wait)
        if answer is None:
            return web.Response(status=204, headers={"X-Spotreel-No-Work": reason})
        return await _deliver(request, gw, desk, answer, claimed)
    finally:
        desk.close(poll)


async def _wait_for_lease(request: web.Request, gw: Gateway, bus, desk: LeaseDesk, poll: Poll, ask: tuple,
                          wait: float) -> tuple[ev.WorkAssigned | None, str]:
    gpu, models, warm, _ttl, _fp = ask
    idle = _idle_polls(request, gw, bus)
    offer = None if poll.draining else cmd.IdleWorker(poll.worker_id, gpu, tuple(models), tuple(warm))
    if offer is not None:
        idle.offer(offer)  # the gateway's pulses vouch for its presence while the poll lasts (idlepolls.py)
    try:
        return await _ask_until(gw, bus, desk, poll, idle, ask, wait)
    finally:
        if offer is not None:
            idle.withdraw(offer)


async def _ask_until(gw: Gateway, bus, desk: LeaseDesk, poll: Poll, idle: IdlePolls, ask: tuple,
                     wait: float) -> tuple[ev.WorkAssigned | None, str]:
    gpu, models, warm, ttl, fingerprint = ask
    wid, draining, n = poll.worker_id, poll.draining, gw.settings.partitions
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
                                                            gw.deps.clock_ms(), fingerprint), partition=p)
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
        request.app[INTAKE].presence = holder[0].vouch  # the pulses, if this gateway sends them, vouch
    return holder[0]


async def _deliver(request: web.Request, gw: Gateway, desk: LeaseDesk, answer: ev.WorkAssigned,
                   claimed: bool) -> web.StreamResponse:
    """Write the lease here rather than after the handler returns, so a client that is gone is noticed and
    the lease parked for its next poll instead of being lost."""
    # The pool's measured lease losses ride along: the worker's checkpoint interval weighs them against its
    # prior MTBF (worker/interval.py).
    losses, leased_s = work_bus(gw).lease_losses(answer.pool)
    # A traced job's grant names its trace, so the worker's spans join it (spotreel/runtime/tracing.py).
    trace = getattr(work_bus(gw), "lease_trace", lambda *_: None)(answer.job_id, answer.epoch)
    response = web.json_response({**flattened(await _opened(gw, answer)), "heartbeat_seconds": gw.cfg.heartbeat_seconds,
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


async def _opened(gw: Gateway, answer: ev.WorkAssigned) -> ev.WorkAssigned:
    """The grant with its prompt in plain text: the one place a worker outside the platform gets it. A job
    erased while it was being leased has no key: its prompt goes out empty, and the cancel its erasure sent
    reaches the worker with its first renewal."""
    if gw.deps.vault is None:
        return answer
    try:
        return replace(answer, spec=await open_spec(answer.spec, gw.deps.vault))
    except Erased:
        log.warning("lease %s/%s is of an erased job: delivered without its prompt", answer.job_id, answer.epoch)
        return replace(answer, spec=replace(answer.spec, prompt="", negative_prompt=None))


def _renew_late_delivery(gw: Gateway, answer: ev.WorkAssigned) -> None:
    """A grant about to reach its worker more than a third of its TTL after it was made (it waited in this
    gateway, frozen or far behind, or parked for the worker's next poll) is renewed on the holder's behalf: the
    worker's own first renewal comes a heartbeat later, and by then this gateway's pulses may have vouched
    past the lease's deadline, expiring a lease whose holder was never silent. Handed
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
