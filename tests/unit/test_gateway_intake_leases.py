"""Leases judged by when their holders sent their renewals (spotreel.dispatch.intake, the gateway's
worker_api/intake.py, the scheduler's intake.py): a gateway behind does not cost a live worker its lease,
and a silent worker's lease still expires on time where its gateway keeps vouching."""

from __future__ import annotations

import asyncio

from hypothesis import given
from hypothesis import strategies as st

from spotreel.dispatch import intake
from spotreel.domain import commands as c
from spotreel.domain.decide import decide
from spotreel.domain.evolve import fold
from spotreel.domain.leases import judged_at
from spotreel.domain.timers import TimerKind
from spotreel.services.gateway.worker_api.intake import Intake
from spotreel.services.scheduler.intake import GatewayIntake
from spotreel.services.scheduler.partition import PartitionState
from tests.unit.jobkit import TTL, kinds, leased_job

HOLD = 30_000


def acked() -> None:
    """What a sender does once Kafka acknowledged a command produced in the current intake origin."""
    hook = intake.produced_hook()
    if hook is not None:
        hook()


# -- the headers ----------------------------------------------------------------------------------------


def test_the_send_time_a_worker_tells_is_believed_only_when_plausible() -> None:
    read = 1_000_000_000
    assert intake.sent_ms(str(read - 4_000), read) == read - 4_000
    assert intake.sent_ms(None, read) == read
    assert intake.sent_ms("soon", read) == read
    assert intake.sent_ms(str(read - intake.MAX_AGE_MS - 1), read) == read  # a clock far behind
    assert intake.sent_ms(str(read + 2_000), read) == read  # ahead: never later than the reading
    assert intake.sent_ms(str(read + intake.MAX_AHEAD_MS + 1), read) == read


def test_commands_produced_for_a_worker_request_carry_its_gateway_and_send_time() -> None:
    assert intake.kafka_headers(None) is None
    produced = []
    with intake.origin("gw-1", 1234, lambda: produced.append(True)):
        headers = intake.kafka_headers([("traceparent", b"00-x")])
        acked()
    assert headers == [("traceparent", b"00-x"), (intake.GATEWAY_HEADER, b"gw-1"), (intake.SENT_HEADER, b"1234")]
    assert produced == [True]
    assert intake.read(headers) == ("gw-1", 1234)
    assert intake.read([("traceparent", b"00-x")]) == (None, None)
    assert intake.read([(intake.SENT_HEADER, b"garbage")]) == (None, None)
    assert intake.kafka_headers(None) is None  # the block's origin is gone


# -- the gateway's vouched time -------------------------------------------------------------------------


def test_the_gateway_vouches_for_no_later_than_its_oldest_unproduced_lease_command_and_its_lag() -> None:
    now = [10_000]
    gw = Intake(lambda: now[0], gateway_id="gw-a")
    assert gw.vouched_ms() == 10_000
    with gw.reading(None):  # a heartbeat read at 10,000 whose command is not produced yet
        now[0] = 12_000
        assert gw.vouched_ms() == 10_000
        with gw.reading(None, counted=False):  # a lease poll waits for work: it holds nothing back...
            assert gw.vouched_ms() == 10_000
        acked()  # on Kafka now
    gw.pulse()
    assert gw.vouched_ms() == 12_000  # nothing being produced, nothing read since the last pulse
    gw.lag_ms = 1_500  # the loop runs late: requests not read yet may be that old
    assert gw.vouched_ms() == 10_500
    pulse = gw.pulse(leaving=True)
    assert (pulse.gateway_id, pulse.vouched_ms, pulse.leaving) == ("gw-a", 10_500, True)


def test_while_the_gateway_works_off_a_backlog_it_vouches_no_later_than_what_it_reads() -> None:
    now = [100_000]
    gw = Intake(lambda: now[0], gateway_id="gw-a")
    # Thawed after a freeze: it reads requests sent 20 s ago, produced at once, the loop on time again.
    for sent in (80_000, 80_500, 81_000):
        with gw.reading(str(sent)):
            acked()
    assert gw.vouched_ms() == 81_000  # what was sent after 81,000 may still wait in its sockets
    assert gw.pulse().vouched_ms == 81_000
    with gw.reading(str(now[0] - 30)):  # caught up: what it reads now was sent a moment ago
        acked()
    assert gw.pulse().vouched_ms == now[0] - 30
    # A renewal sent before a lease's deadline and read after it holds the vouched time back to when it was
    # sent, not to when it was read, until Kafka has it.
    with gw.reading(str(now[0] - 9_000)):
        gw.pulse()  # the frontier of the window before
        assert gw.vouched_ms() == now[0] - 9_000
        acked()


def test_the_gateway_pulses_every_partition_and_survives_a_partition_it_cannot_reach() -> None:
    sent: list[tuple[str, int]] = []

    async def send(pulse, partition):
        if partition == 1:
            raise RuntimeError("broker away")
        sent.append((pulse.gateway_id, partition))

    gw = Intake(lambda: 5_000, gateway_id="gw-b")
    asyncio.run(gw.send_all(send, 3))
    assert sent == [("gw-b", 0), ("gw-b", 2)] and gw.sent == 1


# -- the scheduler: judging and holding -----------------------------------------------------------------


@given(appended=st.integers(0, 10**12), behind=st.integers(-10**6, 10**7))
def test_a_renewal_through_a_gateway_is_judged_between_its_append_time_less_the_hold_and_its_append_time(
        appended: int, behind: int) -> None:
    judged = GatewayIntake(hold_ms=HOLD).judged_ms(appended, appended - behind)
    assert appended - HOLD <= judged <= appended
    assert GatewayIntake(hold_ms=0).judged_ms(appended, appended - behind) == appended
    assert GatewayIntake(hold_ms=HOLD).judged_ms(None, appended) is None


def test_a_renewal_sent_in_time_but_appended_late_renews_the_lease() -> None:
    d = leased_job()
    state = d.s
    epoch, worker = d.lease()
    deadline = state.lease.expires_at_ms
    renew = c.RenewLease("r", state.job_id, epoch, worker)
    appended = deadline + 10_000  # ten seconds in a gateway's queue
    # Judged at the append time, as a Kafka worker's is: too late.
    late = decide(state, renew, judged_at(renew, appended, appended))
    assert kinds(late) == ["CommandRejected"] and late[0].reason == "lease_expired"
    # Its expiry judged at the send time the gateway stamped: in time; the renewal counts from when it got
    # through, so the holder, which waited for this answer, has a whole TTL for its next one.
    sent = deadline - 2_000
    fenced_at = GatewayIntake(hold_ms=HOLD).judged_ms(appended, sent)
    renewed = decide(state, renew, judged_at(renew, appended, appended), fenced_at)
    assert kinds(renewed) == ["LeaseRenewed"]
    assert renewed[0].lease_expires_at_ms == appended + TTL
    # Sent after the deadline: late, whatever the gateway did.
    too_late = decide(state, renew, appended, GatewayIntake(hold_ms=HOLD).judged_ms(appended, deadline))
    assert kinds(too_late) == ["CommandRejected"] and too_late[0].reason == "lease_expired"
    # A send time after `now` is no later than `now`.
    assert kinds(decide(state, renew, deadline - 1, deadline + 50_000)) == ["LeaseRenewed"]


def test_a_holder_whose_previous_request_was_stuck_in_a_frozen_gateway_is_in_time_while_its_expiry_is_held(
) -> None:
    d = leased_job()
    state = d.s
    epoch, worker = d.lease()
    deadline = state.lease.expires_at_ms
    g = GatewayIntake(hold_ms=HOLD)
    g.pulse(c.GatewayPulse("p", "gw-a", deadline - 18_000), deadline - 17_000)  # then it froze 25 s
    # The holder waited for the answer to its last renewal (sent before the freeze) and sent the next one
    # after the thaw, past the deadline, before the gateway vouched for anything newer.
    sent, appended = deadline + 6_000, deadline + 7_000
    renew = c.RenewLease("r", state.job_id, epoch, worker)
    assert kinds(decide(state, renew, appended, g.judged_ms(appended, sent))) == ["CommandRejected"]
    assert kinds(decide(state, renew, appended, g.judged_ms(appended, sent, "gw-a"))) == ["LeaseRenewed"]
    # Once the gateway has vouched past the deadline, a renewal sent after it is late.
    g.pulse(c.GatewayPulse("q", "gw-a", deadline + 6_500), deadline + 7_000)
    assert kinds(decide(state, renew, appended, g.judged_ms(appended, sent, "gw-a"))) == ["CommandRejected"]
    # And never earlier than the append time less the hold.
    assert g.judged_ms(deadline + HOLD + 50_000, deadline + HOLD + 49_000, "gw-unknown") == deadline + HOLD + 49_000


def _partition_with_lease(via: str | None) -> tuple[PartitionState, dict, int, str]:
    d = leased_job()
    s = d.s
    part = PartitionState(0)
    part.intake.hold_ms = HOLD
    part.observe(None, s)
    if via is not None:
        part.intake.came(s.lease.worker_id, via)
    return part, {s.job_id: s}, s.lease.expires_at_ms, s.job_id


def test_an_expiry_waits_for_the_holders_gateway_to_vouch_past_the_deadline() -> None:
    part, states, deadline, job = _partition_with_lease("gw-a")
    part.intake.pulse(c.GatewayPulse("p1", "gw-a", deadline - 8_000), deadline - 7_000)  # then it froze
    assert part.due(deadline + 5_000, states.get) == []
    assert part.gateway_held
    # It vouches again, past the deadline: every renewal it took in before is in the log already.
    part.intake.pulse(c.GatewayPulse("p2", "gw-a", deadline + 1), deadline + 6_000)
    fired = part.due(deadline + 6_000, states.get)
    assert [(t.kind, t.key) for t in fired] == [(TimerKind.EXPIRE_LEASE, job)]
    assert not part.gateway_held


def test_a_gateway_that_never_vouches_again_holds_an_expiry_no_longer_than_the_hold() -> None:
    part, states, deadline, job = _partition_with_lease("gw-a")
    part.intake.pulse(c.GatewayPulse("p1", "gw-a", deadline - 8_000), deadline - 7_000)
    assert part.due(deadline + HOLD - 1, states.get) == []
    fired = part.due(deadline + HOLD, states.get)
    assert [(t.kind, t.key) for t in fired] == [(TimerKind.EXPIRE_LEASE, job)]


def test_a_silent_worker_behind_a_gateway_that_keeps_vouching_expires_on_time() -> None:
    part, states, deadline, job = _partition_with_lease("gw-a")
    part.intake.pulse(c.GatewayPulse("p1", "gw-a", deadline + 500), deadline + 1_000)
    fired = part.due(deadline, states.get)
    assert [(t.kind, t.key) for t in fired] == [(TimerKind.EXPIRE_LEASE, job)]


def test_no_hold_for_a_kafka_worker_a_gateway_that_never_pulsed_or_one_that_left() -> None:
    for via, pulses in ((None, [c.GatewayPulse("p", "gw-a", 0)]), ("gw-quiet", []),
                        ("gw-a", [c.GatewayPulse("p", "gw-a", 0), c.GatewayPulse("q", "gw-a", 0, leaving=True)])):
        part, states, deadline, job = _partition_with_lease(via)
        for pulse in pulses:
            part.intake.pulse(pulse, deadline - 1_000)
        fired = part.due(deadline, states.get)
        assert [(t.kind, t.key) for t in fired] == [(TimerKind.EXPIRE_LEASE, job)], via


def test_a_worker_that_moves_to_the_kafka_transport_or_another_gateway_is_held_by_that_one_only() -> None:
    part, states, deadline, job = _partition_with_lease("gw-a")
    part.intake.pulse(c.GatewayPulse("p1", "gw-a", 0), deadline - 1_000)  # gw-a is far behind
    part.intake.pulse(c.GatewayPulse("p2", "gw-b", deadline + 10), deadline - 1_000)
    worker = states[job].lease.worker_id
    part.intake.came(worker, "gw-b")
    assert [t.key for t in part.due(deadline, states.get)] == [job]


def test_a_vouched_time_never_goes_back() -> None:
    g = GatewayIntake(hold_ms=HOLD)
    g.pulse(c.GatewayPulse("p1", "gw", 5_000), 6_000)
    g.pulse(c.GatewayPulse("p2", "gw", 4_000), 7_000)  # an older pulse read later (a retry)
    assert g.gateways["gw"].vouched_ms == 5_000


# -- the worker API's middleware ------------------------------------------------------------------------


async def test_the_worker_api_stamps_each_request_and_counts_lease_commands_until_produced() -> None:
    from aiohttp import web
    from aiohttp.test_utils import TestClient, TestServer

    from spotreel.services.gateway.worker_api.intake import intake_middleware

    now = [50_000]
    gw = Intake(lambda: now[0], gateway_id="gw-t")
    seen: list = []

    async def handler(request: web.Request) -> web.Response:
        seen.append((intake.kafka_headers(None), gw.vouched_ms()))
        now[0] += 1_000
        acked()
        seen.append(gw.vouched_ms())
        return web.Response()

    app = web.Application(middlewares=[intake_middleware(gw)])
    app.router.add_post("/leases/{job}/heartbeat", handler)
    app.router.add_post("/workers/{id}/lease", handler)
    async with TestClient(TestServer(app)) as c:
        r = await c.post("/leases/j1/heartbeat", headers={intake.SENT_AT_HTTP_HEADER: "49000"})
        assert r.status == 200
        r = await c.post("/workers/w1/lease")
        assert r.status == 200
    (headers, during), after, (poll_headers, poll_during), poll_after = seen
    assert headers == [(intake.GATEWAY_HEADER, b"gw-t"), (intake.SENT_HEADER, b"49000")]
    # The heartbeat, sent at 49,000, read at 50,000: nothing later is vouched for while it is produced, nor
    # anything sent after it until the next pulse (it may be what a backlog reads).
    assert during == 49_000 and after == 49_000
    assert poll_headers == [(intake.GATEWAY_HEADER, b"gw-t"), (intake.SENT_HEADER, b"51000")]  # read time
    assert poll_during == 51_000 and poll_after == 51_000  # a poll holds nothing back but its send time


@given(offset=st.integers(-60_000, 60_000), sent_back=st.integers(-10_000, 120_000))
def test_a_send_time_never_makes_an_in_time_renewal_late_nor_changes_how_long_it_renews(offset: int,
                                                                                      sent_back: int) -> None:
    d = leased_job()
    state = d.s
    epoch, worker = d.lease()
    now = state.lease.expires_at_ms + offset
    renew = c.RenewLease("r", state.job_id, epoch, worker)
    plain = decide(state, renew, now)
    told = decide(state, renew, now, now - sent_back)
    if kinds(plain) == ["LeaseRenewed"]:
        assert kinds(told) == ["LeaseRenewed"]
    if kinds(told) == ["LeaseRenewed"] and kinds(plain) == ["LeaseRenewed"]:
        assert told[0].lease_expires_at_ms == plain[0].lease_expires_at_ms
    if kinds(told) == ["LeaseRenewed"]:
        assert told[0].lease_expires_at_ms >= now  # counted from now, never from the send time


async def test_the_gateway_service_pulses_while_it_runs_and_says_it_leaves_when_it_stops() -> None:
    from aiohttp.test_utils import TestClient, TestServer

    from spotreel.services.gateway.app import create_app
    from spotreel.services.gateway.worker_api import routes
    from spotreel.config.settings import Settings
    from tests.unit.gateway_fakes import fake_deps

    sent: list[tuple[c.GatewayPulse, int]] = []

    class Sink:
        async def send(self, command, partition=None):
            sent.append((command, partition))

    deps = fake_deps()
    deps.commands = Sink()
    settings = Settings(partitions=3)
    app = create_app(settings, deps)
    routes.start_pulses(app, settings, deps, 0.05)
    async with TestClient(TestServer(app)):
        for _ in range(100):
            if len(sent) >= 6:
                break
            await asyncio.sleep(0.02)
    pulses = [p for p, _ in sent]
    assert len(sent) >= 9 and all(isinstance(p, c.GatewayPulse) for p in pulses)
    assert sorted(part for _, part in sent[:3]) == [0, 1, 2]  # each pulse to every partition
    assert len({p.gateway_id for p in pulses}) == 1
    assert [p.leaving for p in pulses[-3:]] == [True] * 3 and not any(p.leaving for p in pulses[:-3])
    quiet = create_app(settings, deps)
    hooks = len(quiet.on_startup), len(quiet.on_shutdown)
    routes.start_pulses(quiet, settings, deps, 0)  # 0: no pulses
    assert (len(quiet.on_startup), len(quiet.on_shutdown)) == hooks


def test_a_timer_of_a_deadline_the_lease_has_moved_past_is_dropped_not_held() -> None:
    """At a fleet's pace most due expiry timers are of deadlines a renewal moved on: judging each again every
    tick while the gateway's vouching lags (about a second) is work for nothing, many times a second."""
    part, states, deadline, job = _partition_with_lease("gw-a")
    s = states[job]
    renewed = fold(decide(s, c.RenewLease("r", job, s.lease.epoch, s.lease.worker_id), deadline - 1_000), s)
    part.observe(s, renewed)
    states[job] = renewed
    part.intake.pulse(c.GatewayPulse("p1", "gw-a", deadline - 8_000), deadline - 7_000)  # then it froze
    assert part.due(deadline + 5_000, states.get) == []
    assert not part.gateway_held  # the old deadline's timer is gone, not held
    later = renewed.lease.expires_at_ms
    assert later > deadline + 5_000
    assert part.due(later + 1, states.get) == []
    assert [e[0] for e in part.gateway_held] == [later]  # the live deadline's timer waits for the gateway
    part.intake.pulse(c.GatewayPulse("p2", "gw-a", later + 1), later + 2)
    assert [(t.kind, t.key) for t in part.due(later + 2, states.get)] == [(TimerKind.EXPIRE_LEASE, job)]
