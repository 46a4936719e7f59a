"""A grant whose answer leaves the scheduler late does not cost its holder the lease.

A scheduler stopped between writing grants' JobLeased events and sending their answers (as the frozen-scheduler
test, tests/integration/test_lease_plane_overload.py, can stop it) sends the answers late; counted from the
grant, the TTL could run out before the workers' first renewals, and live workers would lose their leases. Here the real batch loop (`Pipeline.on_batch`) runs in process with a producer
that acknowledges the events only after the clock jumped past a TTL, as the pause did."""

from __future__ import annotations

from unittest import mock

from spotreel.codec import Codec
from spotreel.domain import commands as c
from spotreel.platform.topics import assignments_topic, events_topic

from spotreel.services.scheduler import clock as sched_clock
from tests.unit.jobkit import T0, submit
from tests.unit.schedloop import run as _run
from tests.unit.schedloop import scheduler

TTL = 12_000
PAUSE = 15_000  # longer than a TTL


def test_a_grant_answered_after_a_pause_runs_a_full_ttl_from_its_answer(tmp_path) -> None:
    codec = Codec.default()
    now, paused = [T0], [False]

    def on_send(topic: str) -> None:
        # The first JobLeased goes out, then the process stops for longer than a TTL before its ack.
        if topic == events_topic(sched.settings) and now[0] > T0 and not paused[0]:
            paused[0] = True
            now[0] += PAUSE

    sched, producer = scheduler(tmp_path, now, on_send, prefix="unit.late")
    with mock.patch.object(sched_clock, "now_ms", lambda: now[0]):
        sub = submit()
        _run(sched, codec, [sub], 0)
        now[0] += 100
        job = sub.job_id
        _run(sched, codec, [c.RequestWork("rw1", "w1", "h100", ("tiny-t2v",), (), False, TTL, now[0])], 1)
        granted = sched.get(job)
        answered_at = next(at for topic, at in producer.sent if topic == assignments_topic(sched.settings))
        assert answered_at - granted.lease.granted_at_ms >= PAUSE
        part = sched.parts[0]
        # The owner judges by a TTL from the answer, not from the grant.
        assert part.view(granted).lease.expires_at_ms == answered_at + TTL
        assert granted.lease.expires_at_ms == granted.lease.granted_at_ms + TTL  # the stored state as written
        # No expiry is due at the old deadline; the worker's first renewal, after it, confirms the lease.
        now[0] = granted.lease.expires_at_ms + 1_000
        assert not [t for t in part.due(now[0], sched.get) if t.key == job]
        _run(sched, codec, [c.RenewLease("r1", job, granted.epoch, "w1")], 2)
        assert sched.get(job).lease.confirmed, "the live worker's first renewal was refused"
        # A silent holder still expires: a TTL after its last renewal.
        later = sched.get(job)
        now[0] = part.view(later).lease.expires_at_ms + 1
        assert [t for t in part.due(now[0], sched.get) if t.key == job]
