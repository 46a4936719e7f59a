"""The lease desk (services/gateway/worker_api/leasedesk.py) and the lease long-poll around it, without servers: a fake
bus plays the scheduler's answers. What must hold: every grant to one of this gateway's requests ends up
with the worker (the poll that waits, or its next poll) or is released as unclaimed under its epoch; never
dropped, never handed to a draining worker, never released once delivered."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web

from spotreel.domain import commands as cmd
from spotreel.dispatch.order import WorkView
from spotreel.domain import events as ev
from spotreel.domain.leases import UNCLAIMED
from spotreel.domain.spec import RenderSpec
from spotreel.services.gateway.app import create_app
from spotreel.services.gateway.loopwatch import LoopWatch
from spotreel.api.config import GatewayConfig
from spotreel.services.gateway.worker_api.leasedesk import SUPERSEDED, LeaseDesk
from spotreel.config.settings import Settings
from tests.unit.gateway_fakes import WORKER_KEY, fake_deps
from tests.unit.gateway_fakes import Clock as DepsClock

pytestmark = pytest.mark.unit

W = {"Authorization": f"Bearer {WORKER_KEY}"}


def assigned(rid: str, worker: str = "w1", job: str = "j" + "a" * 32, epoch: int = 3, model: str = "m",
             partition: int = 0) -> ev.WorkAssigned:
    return ev.WorkAssigned(rid, worker, job, epoch, epoch, 1000, 30_000, 31_000, f"{model}@cpu", "cpu",
                           RenderSpec(model, "a fox", 2.0, "64x64", 8, 7, 20), partition=partition)


def nothing(rid: str, worker: str = "w1", partition: int = 0) -> ev.NoWorkAvailable:
    return ev.NoWorkAvailable(rid, worker, 1000, "no_queued_job", partition)


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Sink:
    def __init__(self) -> None:
        self.sent: list[tuple[Any, int | None]] = []
        self.on_send = lambda command, partition: None

    async def send(self, command: Any, partition: int | None = None) -> None:
        self.sent.append((command, partition))
        self.on_send(command, partition)

    def send_nowait(self, command: Any, partition: int | None = None) -> asyncio.Future[None]:
        self.sent.append((command, partition))
        self.on_send(command, partition)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    def of(self, cls: type) -> list[Any]:
        return [c for c, _ in self.sent if isinstance(c, cls)]


def desk_with(sink: Sink, **kw: Any) -> tuple[LeaseDesk, list[str]]:
    forgotten: list[str] = []
    return LeaseDesk(sink.send, forget_answer=forgotten.append, **kw), forgotten


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


# --- the desk ---------------------------------------------------------------------------------------------


async def test_an_answer_to_a_request_of_another_gateway_is_ignored() -> None:
    sink = Sink()
    desk, _ = desk_with(sink)
    desk.on_answer(assigned("rw-not-mine"))
    await settle()
    assert desk.parked() == 0 and sink.sent == []


async def test_a_lease_goes_to_the_open_poll_of_its_worker_whichever_poll_asked() -> None:
    sink = Sink()
    desk, forgotten = desk_with(sink)
    first = desk.open("w1", ("m",), False, lambda: True)
    desk.sent("rw-1", "w1", 2)
    desk.close(first)  # its deadline passed before the answer
    second = desk.open("w1", ("m",), False, lambda: True)
    assert [s.partition for s in desk.waiting("w1")] == [2]  # the next poll waits for it, asks nothing new
    desk.on_answer(assigned("rw-1"))
    got = await second.next(1.0)
    assert isinstance(got, ev.WorkAssigned) and got.request_id == "rw-1"
    assert desk.parked() == 0 and forgotten == ["rw-1"] and desk.waiting("w1") == []


async def test_a_lease_with_no_poll_is_parked_claimed_by_the_next_poll_and_not_released() -> None:
    sink = Sink()
    desk, _ = desk_with(sink, hold_s=0.2)
    desk.sent("rw-1", "w1", 0)
    desk.on_answer(assigned("rw-1"))
    assert desk.parked("w1") == 1
    poll = desk.open("w1", ("m",), False, lambda: True)
    got = desk.claim(poll)
    assert got is not None and got.request_id == "rw-1" and desk.parked() == 0
    await asyncio.sleep(0.3)
    assert sink.sent == []


async def test_an_unclaimed_lease_is_released_under_its_epoch_after_the_hold() -> None:
    sink = Sink()
    outcomes: list[str] = []
    desk = LeaseDesk(sink.send, hold_s=0.05, on_outcome=outcomes.append)
    desk.sent("rw-9", "w1", 4)
    desk.on_answer(assigned("rw-9", epoch=5))
    await asyncio.sleep(0.2)
    [release] = sink.of(cmd.ReleaseLease)
    assert (release.job_id, release.epoch, release.worker_id, release.reason) == ("j" + "a" * 32, 5, "w1", UNCLAIMED)
    assert release.command_id == "unclaimed-rw-9" and desk.parked() == 0 and outcomes == ["released"]


async def test_a_poll_whose_client_is_gone_does_not_take_the_lease() -> None:
    sink = Sink()
    desk, _ = desk_with(sink, hold_s=5)
    connected = [True]
    poll = desk.open("w1", ("m",), False, lambda: connected[0])
    desk.sent("rw-1", "w1", 0)
    connected[0] = False
    desk.on_answer(assigned("rw-1"))
    assert poll.queue.empty() and desk.parked("w1") == 1


async def test_a_lease_written_to_a_worker_that_polls_again_without_acting_on_it_is_written_again() -> None:
    """A write can succeed into a socket whose client just gave up: the holder's next poll within the hold,
    with no command for the lease in between, is the sign it never arrived. Same lease, same epoch; not after
    the worker acted on it, not once the hold passed, and released if the worker would not take it now."""
    sink, clock, outcomes = Sink(), Clock(), []
    desk = LeaseDesk(sink.send, hold_s=5.0, clock=clock, on_outcome=outcomes.append)
    lease = assigned("rw-1", epoch=6)
    desk.delivered(lease)
    clock.t += 1
    again = desk.claim(desk.open("w1", ("m",), False, lambda: True))
    assert again is lease and outcomes == ["delivered", "redelivered"]
    desk.delivered(again, claimed=True)
    assert desk.claim(desk.open("w2", ("m",), False, lambda: True)) is None  # another worker: nothing of w1's
    desk.confirm("w1", "j" + "b" * 32)  # a command for another job confirms nothing
    desk.confirm("w1", lease.job_id)  # a renewal (or progress, completion...) of it: it arrived
    assert desk.claim(desk.open("w1", ("m",), False, lambda: True)) is None
    desk.delivered(lease)
    clock.t += 5.0
    assert desk.claim(desk.open("w1", ("m",), False, lambda: True)) is None  # too old to tell: the TTL decides
    desk.delivered(lease)
    assert desk.claim(desk.open("w1", ("m",), True, lambda: True)) is None  # draining now: handed back
    await settle()
    [release] = sink.of(cmd.ReleaseLease)
    assert (release.job_id, release.epoch, release.reason) == (lease.job_id, 6, UNCLAIMED)


async def test_any_event_of_the_job_after_the_write_confirms_it_whichever_gateway_took_the_command() -> None:
    """Behind a balancer the holder's renewals may go through another gateway: this one sees them as events of
    the job (the dispatch listener's observer), and then does not write the lease again. The watch ends when
    the entry does: confirmed, written again, or after the hold."""
    watched: dict[str, Any] = {}

    def watch(job_id: str, on_event: Any) -> None:
        if on_event is None:
            watched.pop(job_id, None)
        else:
            watched[job_id] = on_event

    desk = LeaseDesk(Sink().send, hold_s=0.2, watch=watch)
    lease = assigned("rw-1", epoch=4)
    desk.delivered(lease)
    assert set(watched) == {lease.job_id}
    watched[lease.job_id](object())  # e.g. a LeaseRenewed on the replies topic
    assert watched == {} and desk.claim(desk.open("w1", ("m",), False, lambda: True)) is None
    desk.delivered(lease)
    await asyncio.sleep(0.3)  # the hold passed: forgotten, no longer watched
    assert watched == {} and desk.claim(desk.open("w1", ("m",), False, lambda: True)) is None


async def test_a_draining_worker_or_one_that_serves_other_models_gets_no_parked_lease() -> None:
    sink = Sink()
    desk, _ = desk_with(sink, hold_s=5)
    desk.sent("rw-1", "w1", 0)
    desk.sent("rw-2", "w1", 1)
    desk.on_answer(assigned("rw-1", job="j" + "1" * 32))
    desk.on_answer(assigned("rw-2", job="j" + "2" * 32, model="other"))
    assert desk.claim(desk.open("w1", ("m",), True, lambda: True)) is None  # draining
    await settle()
    assert sorted(c.job_id for c in sink.of(cmd.ReleaseLease)) == ["j" + "1" * 32, "j" + "2" * 32]
    # And a lease arriving while the worker drains is released at once.
    desk.sent("rw-3", "w1", 0)
    desk.on_answer(assigned("rw-3", job="j" + "3" * 32))
    await settle()
    assert len(sink.of(cmd.ReleaseLease)) == 3 and desk.parked() == 0


async def test_closing_a_poll_with_a_lease_still_in_its_queue_parks_it() -> None:
    sink = Sink()
    desk, _ = desk_with(sink, hold_s=5)
    poll = desk.open("w1", ("m",), False, lambda: True)
    desk.sent("rw-1", "w1", 0)
    desk.on_answer(assigned("rw-1"))
    desk.close(poll)  # cancelled before it read its queue
    assert desk.parked("w1") == 1


async def test_a_newer_poll_supersedes_an_open_one() -> None:
    desk, _ = desk_with(Sink())
    old = desk.open("w1", ("m",), False, lambda: True)
    new = desk.open("w1", ("m",), False, lambda: True)
    assert await old.next(0.1) is SUPERSEDED and old.closed and not new.closed


async def test_a_refusal_frees_the_worker_to_ask_again_and_a_later_grant_for_it_still_counts() -> None:
    sink = Sink()
    desk, _ = desk_with(sink, hold_s=5)
    poll = desk.open("w1", ("m",), False, lambda: True)
    desk.sent("rw-1", "w1", 3)
    desk.on_answer(nothing("rw-1", partition=3))
    assert isinstance(await poll.next(0.1), ev.NoWorkAvailable) and desk.waiting("w1") == []
    desk.close(poll)
    # A scheduler that crashed after refusing may decide the redelivered request again and grant it.
    desk.on_answer(assigned("rw-1"))
    assert desk.parked("w1") == 1


async def test_an_unanswered_request_blocks_a_new_one_until_it_is_stale_and_is_forgotten_at_last() -> None:
    clock = Clock()
    forgotten: list[str] = []
    desk = LeaseDesk(Sink().send, stale_s=30, forget_s=600, clock=clock, forget_answer=forgotten.append)
    desk.sent("rw-1", "w1", 1)
    assert len(desk.waiting("w1")) == 1 and desk.until_stale("w1") == 30
    clock.t += 31
    assert desk.waiting("w1") == [] and desk.asking("w1") == {1}  # stale: ask elsewhere, not there again
    assert desk.until_stale("w1") == float("inf")
    clock.t += 600
    desk.sent("rw-2", "w2", 0)  # remembering a new one purges the old
    assert forgotten == ["rw-1"] and desk.asking("w1") == set()
    desk.on_answer(assigned("rw-1"))  # too late to be told apart from another gateway's
    assert desk.parked() == 0


async def test_the_number_of_remembered_requests_is_bounded() -> None:
    forgotten: list[str] = []
    desk = LeaseDesk(Sink().send, max_remembered=3, forget_answer=forgotten.append)
    for i in range(5):
        desk.sent(f"rw-{i}", f"w{i}", 0)
    assert forgotten == ["rw-0", "rw-1"]


async def test_shutdown_releases_every_parked_lease() -> None:
    sink = Sink()
    desk, _ = desk_with(sink, hold_s=60)
    for i in range(3):
        desk.sent(f"rw-{i}", f"w{i}", 0)
        desk.on_answer(assigned(f"rw-{i}", worker=f"w{i}", job="j" + str(i) * 32))
    await desk.aclose()
    assert len(sink.of(cmd.ReleaseLease)) == 3 and desk.parked() == 0


# --- the long-poll, over HTTP, with a scripted scheduler ---------------------------------------------------


class FakeBus:
    """The gateway's view of the scheduler: RequestWork commands in, answers out when the test says."""

    def __init__(self) -> None:
        self.watchers: dict[str, Any] = {}

    async def ensure_started(self) -> None:
        pass

    def partitions_with_work(self, models) -> list[int]:
        return []

    def work_view(self, models: Any) -> WorkView:
        return WorkView((), {}, {}, frozenset())  # no pool stats: the gateway scouts

    def on_work_change(self, callback: Any) -> None:
        pass

    def lease_losses(self, pool: str) -> tuple[int, float]:
        return (3, 5400.0) if pool == "m@cpu" else (0, 0.0)

    def watch_answer(self, rid: str, callback) -> None:
        self.watchers[rid] = callback

    def expect_verdict(self, command_id: str, job_id: str) -> asyncio.Future:
        verdict = asyncio.get_running_loop().create_future()
        verdict.set_result(None)  # as a verdict that did not come in time: the answer says "pending"
        return verdict

    def forget_verdict(self, command_id: str, job_id: str) -> None:
        pass

    def observe_job(self, job_id: str, callback: Any) -> None:
        pass

    def forget_answer(self, rid: str) -> None:
        self.watchers.pop(rid, None)

    def answer(self, a: Any) -> None:
        if a.request_id in self.watchers:
            self.watchers[a.request_id](a)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest_asyncio.fixture(loop_scope="function", params=[False, True], ids=["run_app", "cancelling"])
async def served(request):
    """The app as `spotreel gateway` serves it (handlers run on when a client goes) and as aiohttp's test
    server does (handlers cancelled when their client goes)."""
    sink, bus = Sink(), FakeBus()
    deps = fake_deps(commands=sink, work=bus)
    cfg = GatewayConfig(unclaimed_lease_hold_seconds=2.0, idle_pass_seconds=0.05)
    app = create_app(Settings(partitions=3), deps, cfg)
    runner = web.AppRunner(app, handler_cancellation=request.param)
    await runner.setup()
    port = _free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        async with aiohttp.ClientSession() as session:
            yield f"http://127.0.0.1:{port}", session, sink, bus
    finally:
        await runner.cleanup()


async def _poll(session, url: str, worker: str = "w1", wait: float = 2.0, client_timeout: float | None = None,
                **extra: Any):
    body = {"gpu_type": "cpu", "models": ["m"], "wait_seconds": wait, **extra}
    timeout = aiohttp.ClientTimeout(total=client_timeout or wait + 10)
    async with session.post(f"{url}/internal/workers/{worker}/lease", json=body, headers=W, timeout=timeout) as r:
        return r.status, (await r.json() if r.status == 200 else None)


async def _wait_for(pred, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not pred():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_a_poll_answered_in_time_gets_its_lease(served) -> None:
    url, session, sink, bus = served
    sink.on_send = lambda c, p: isinstance(c, cmd.RequestWork) and asyncio.get_running_loop().call_later(
        0.1, bus.answer, assigned(c.command_id, partition=p))
    status, body = await _poll(session, url)
    assert status == 200 and body["epoch"] == 3 and body["heartbeat_seconds"] > 0
    assert len(sink.of(cmd.RequestWork)) == 1 and sink.of(cmd.ReleaseLease) == []
    # the pool's measured lease losses ride along for the worker's checkpoint interval
    assert (body["pool_lease_losses_1h"], body["pool_leased_seconds_1h"]) == (3, 5400.0)


async def test_a_client_that_gave_up_gets_the_lease_on_its_next_poll(served) -> None:
    url, session, sink, bus = served
    with pytest.raises(asyncio.TimeoutError):
        await _poll(session, url, wait=5.0, client_timeout=0.3)  # the worker's HTTP client times out
    [request] = sink.of(cmd.RequestWork)
    await asyncio.sleep(0.2)  # the handler notices the disconnect (or is cancelled)
    bus.answer(assigned(request.command_id, epoch=7))  # the scheduler's grant arrives afterwards
    status, body = await _poll(session, url, wait=2.0)
    assert status == 200 and body["epoch"] == 7 and body["request_id"] == request.command_id
    assert len(sink.of(cmd.RequestWork)) == 1  # claimed, not asked again
    await asyncio.sleep(2.3)
    assert sink.of(cmd.ReleaseLease) == []  # delivered: never released


async def test_a_lease_parked_for_its_worker_is_handed_over_while_idle_polls_are_shed(served, monkeypatch) -> None:
    url, session, sink, bus = served
    with pytest.raises(asyncio.TimeoutError):
        await _poll(session, url, wait=5.0, client_timeout=0.3)
    [request] = sink.of(cmd.RequestWork)
    await asyncio.sleep(0.2)
    bus.answer(assigned(request.command_id, epoch=7))  # parked: its poll had ended
    monkeypatch.setattr(LoopWatch, "shed", lambda self, threshold_s: 4)  # the gateway far behind from now on
    status, body = await _poll(session, url, wait=2.0)
    assert status == 200 and body["epoch"] == 7  # the grant is not lost to the shedding
    status, _ = await _poll(session, url, worker="w2", wait=2.0)
    assert status == 503  # an idle poll with nothing parked is turned away
    assert len(sink.of(cmd.RequestWork)) == 1


async def test_a_lease_the_worker_never_acted_on_comes_again_on_its_next_poll_and_not_after_a_renewal(
        served) -> None:
    url, session, sink, bus = served
    sink.on_send = lambda c, p: isinstance(c, cmd.RequestWork) and asyncio.get_running_loop().call_soon(
        bus.answer, assigned(c.command_id, epoch=8, partition=p))
    first = await _poll(session, url)
    again = await _poll(session, url)  # as if the first answer never reached the worker
    assert first[0] == again[0] == 200 and again[1]["epoch"] == 8 and again[1]["request_id"] == first[1]["request_id"]
    assert len(sink.of(cmd.RequestWork)) == 1
    job = first[1]["job_id"]
    async with session.post(f"{url}/internal/leases/{job}/heartbeat", json={"epoch": 8, "worker_id": "w1"},
                            headers=W) as r:
        assert r.status == 202  # the fake bus has no verdict: what matters is that the worker acted on it
    third = await _poll(session, url)
    assert third[0] == 200 and third[1]["request_id"] != first[1]["request_id"]
    assert len(sink.of(cmd.RequestWork)) == 2 and sink.of(cmd.ReleaseLease) == []


async def test_a_poll_past_its_deadline_leaves_the_late_lease_to_the_next_poll(served) -> None:
    url, session, sink, bus = served
    assert (await _poll(session, url, wait=0.5))[0] == 204
    [request] = sink.of(cmd.RequestWork)
    poll = asyncio.create_task(_poll(session, url, wait=3.0))
    await asyncio.sleep(0.3)
    assert len(sink.of(cmd.RequestWork)) == 1  # the open request is waited for, not repeated
    bus.answer(assigned(request.command_id))
    status, body = await poll
    assert status == 200 and body["request_id"] == request.command_id


async def test_a_lease_no_poll_claims_is_released_as_unclaimed(served) -> None:
    url, session, sink, bus = served
    assert (await _poll(session, url, wait=0.5))[0] == 204
    [request] = sink.of(cmd.RequestWork)
    bus.answer(assigned(request.command_id, epoch=4))
    await _wait_for(lambda: sink.of(cmd.ReleaseLease), timeout=5.0)  # hold 2 s
    [release] = sink.of(cmd.ReleaseLease)
    assert (release.epoch, release.worker_id, release.reason) == (4, "w1", UNCLAIMED)


async def test_refusals_move_the_poll_on_and_a_draining_worker_asks_once(served) -> None:
    url, session, sink, bus = served
    sink.on_send = lambda c, p: isinstance(c, cmd.RequestWork) and asyncio.get_running_loop().call_soon(
        bus.answer, nothing(c.command_id, partition=p))
    assert (await _poll(session, url, wait=0.6))[0] == 204
    asked = {p for c, p in sink.sent if isinstance(c, cmd.RequestWork)}
    assert asked == {0, 1, 2}  # every partition said no, then it kept asking until its deadline
    sink.sent.clear()
    assert (await _poll(session, url, wait=2.0, draining=True))[0] == 204
    [request] = sink.of(cmd.RequestWork)
    assert request.draining


async def test_a_grant_delivered_late_is_renewed_on_its_holders_behalf(served) -> None:
    """A grant older than a third of its TTL when it reaches its worker (it waited in a frozen gateway) gets a
    RenewLease at delivery, produced in the poll's intake context; a fresh grant gets none."""
    url, session, sink, bus = served
    now = DepsClock.now  # the fake deps' clock, which the gateway reads
    for age_ms, renewed in ((0, False), (9_000, False), (11_000, True)):
        worker = f"w-{age_ms}"

        def answer(c, p, worker=worker, age_ms=age_ms):
            if isinstance(c, cmd.RequestWork):
                grant = dataclasses.replace(assigned(c.command_id, worker=worker, partition=p, epoch=9),
                                            at_ms=now - age_ms)  # TTL 30 s: a third is 10 s
                asyncio.get_running_loop().call_soon(bus.answer, grant)
        sink.on_send = answer
        before = len(sink.of(cmd.RenewLease))
        status, body = await _poll(session, url, worker=worker)
        assert status == 200 and body["epoch"] == 9
        renewals = sink.of(cmd.RenewLease)[before:]
        assert bool(renewals) is renewed, (age_ms, renewals)
        if renewed:
            [r] = renewals
            assert (r.job_id, r.epoch, r.worker_id) == (body["job_id"], 9, worker)
