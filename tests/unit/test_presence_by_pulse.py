"""Idle HTTP workers' presence in the gateway's pulses (domain/presence.py): the idle polls vouch for the
workers whose presence is due (services/gateway/worker_api/idlepolls.py), each partition's pulse carries its
own (worker_api/intake.py), and the scheduler counts them as their RequestWork would, answering nothing
(services/scheduler/handler.py) -- through its real batch loop, in process."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from spotreel.adapters.partitioning import partition_for
from spotreel.codec import Codec
from spotreel.dispatch.asking import Asking
from spotreel.dispatch.order import PoolQueues
from spotreel.domain import commands as c
from spotreel.domain.ids import pool_key
from spotreel.platform.topics import assignments_topic, replies_topic
from spotreel.services.gateway.worker_api.idlepolls import IdlePolls
from spotreel.services.gateway.worker_api.intake import Intake
from spotreel.services.scheduler.poolstats import pool_stats
from tests.unit.jobkit import T0, submit
from tests.unit.schedloop import run, scheduler

pytestmark = pytest.mark.unit

N = 4
M = ("m",)
codec = Codec.default()


def _polls(now: list[float]) -> IdlePolls:
    queues = PoolQueues()
    for p in range(N):
        queues.record(SimpleNamespace(pool="m@gpu", partition=p, queued=0))
    ids = iter(range(10_000))
    return IdlePolls(Asking(N, presence_s=7.5), queues.view, lambda: str(next(ids)), clock=lambda: now[0])


def _idle(worker_id: str) -> c.IdleWorker:
    return c.IdleWorker(worker_id, "gpu", M, ())


def test_due_workers_are_vouched_to_their_own_partition_once_per_presence_interval() -> None:
    now = [100.0]
    polls = _polls(now)
    workers = [_idle(f"w{i}") for i in range(40)]
    for w in workers:
        polls.offer(w)
    due = polls.vouch()
    assert sorted(w.worker_id for ws in due.values() for w in ws) == sorted(w.worker_id for w in workers)
    assert all(partition_for(w.worker_id, N) == p for p, ws in due.items() for w in ws)
    now[0] += 7.0
    assert polls.vouch() == {}  # vouched 7 s ago: not due yet
    polls.asking.sent("r1", "w3", 2, M, now[0])  # w3 asked a hinted partition: that is its presence too
    now[0] += 0.6
    again = polls.vouch()
    assert sorted(w.worker_id for ws in again.values() for w in ws) == sorted(
        w.worker_id for w in workers if w.worker_id != "w3")


def test_a_poll_that_ended_is_not_vouched_and_a_newer_poll_keeps_its_offer() -> None:
    now = [5.0]
    polls = _polls(now)
    old, new, gone = _idle("w1"), c.IdleWorker("w1", "gpu", M, ("m",)), _idle("w2")
    polls.offer(old)
    polls.offer(new)  # the worker polled again before its old poll's handler ended
    polls.offer(gone)
    polls.withdraw(old)
    polls.withdraw(gone)
    assert [w for ws in polls.vouch().values() for w in ws] == [new]


async def test_once_the_pulses_vouch_an_idle_poll_with_nothing_in_sight_asks_nobody() -> None:
    now = [50.0]
    polls = _polls(now)
    # Before any pulse: an idle worker whose presence is due asks its own partition.
    assert await polls.next("w1", M, 0.0) == (partition_for("w1", N), "rw-0")
    polls.offer(_idle("w2"))
    assert polls.vouch() == {partition_for("w2", N): [_idle("w2")]}
    # From the first pulse on, presence goes in the pulses: the poll waits for work in sight instead.
    assert await polls.next("w2", M, 0.0) is None
    assert await polls.next("w3", M, 0.05) is None


def test_each_partition_gets_its_own_idle_list_and_the_same_vouched_time() -> None:
    sent: dict[int, c.GatewayPulse] = {}

    async def send(pulse, partition):
        sent[partition] = pulse

    gw = Intake(lambda: 9_000, gateway_id="gw-v")
    lists = {1: [_idle("a"), _idle("b")], 3: [_idle("c")]}
    gw.presence = lambda: lists
    asyncio.run(gw.send_all(send, N))
    assert {p: [w.worker_id for w in s.idle] for p, s in sent.items()} == {0: [], 1: ["a", "b"], 2: [], 3: ["c"]}
    assert {(s.gateway_id, s.vouched_ms, s.command_id) for s in sent.values()} == {
        ("gw-v", 9_000, sent[0].command_id)}
    asyncio.run(gw.send_all(send, N, leaving=True))  # a leaving gateway vouches for nobody
    assert all(s.leaving and s.idle == () for s in sent.values())


def test_a_pulse_round_trips_through_the_codec_and_one_without_idle_workers_reads_as_none() -> None:
    pulse = c.GatewayPulse("gp-1", "gw", 5, False, (c.IdleWorker("w", "h100", ("a", "b"), ("a",)),))
    assert codec.decode_message(codec.encode_message(pulse)) == pulse
    assert codec.decode_message(codec.encode_message(c.GatewayPulse("gp-2", "gw", 5))).idle == ()


def test_the_scheduler_counts_vouched_workers_idle_answers_nothing_and_skips_a_holder(tmp_path) -> None:
    now = [T0]
    sched, producer = scheduler(tmp_path, now, prefix="unit.presence")
    pool = pool_key("tiny-t2v", "h100")
    sub = submit(key="held")
    run(sched, codec, [sub, c.RequestWork("rw-h", "holder", "h100", ("tiny-t2v",), (), False, 30_000, now[0])], 0)
    assert sched.get(sub.job_id).lease.worker_id == "holder"
    before = len(producer.records)
    idle = tuple(c.IdleWorker(f"w{i}", "h100", ("tiny-t2v",), ("tiny-t2v",) if i < 2 else ()) for i in range(5))
    run(sched, codec, [c.GatewayPulse("gp", "gw-x", now[0], False, (*idle, c.IdleWorker("holder", "h100",
                                                                                         ("tiny-t2v",))))], 2)
    part = sched.parts[0]
    assert part.workers.idle_count(pool) == 5 and part.workers.warm_idle_in(pool) == 2
    assert "holder" not in set(part.workers.idle_since(pool, 0))
    stats = [s for s in pool_stats(part, now[0]) if s.pool == pool]
    assert stats and stats[0].idle_workers == 5
    answers = [r for r in producer.records[before:]
               if r.topic in (replies_topic(sched.settings), assignments_topic(sched.settings))]
    assert answers == []  # a vouched worker asked for nothing
