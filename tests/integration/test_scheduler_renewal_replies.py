"""Renewals answered without an event (domain/renewals.py), against the real scheduler process and Kafka:
a lease kept alive by absorbed renewals writes one LeaseRenewed event (the confirmation) and answers the
rest on the replies topic; it still expires one TTL after its last renewal; and when the scheduler is
killed (-9) and a new one takes over, the new owner, which never saw the absorbed renewals, keeps the live
lease (a full TTL from the takeover) and expires the silent one."""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest

from spotreel.domain import commands as c
from spotreel.domain import events as ev
from tests.integration.leasekit import Renewer, leased
from tests.integration.schedkit import Bus, SchedulerProc, drop_topics, make_topics, scheduler_settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

TTL_MS = 4_000


@pytest.fixture
def env(stack, tmp_path):
    settings = scheduler_settings("rr" + uuid.uuid4().hex[:10], partitions=1)
    make_topics(settings)
    procs = [SchedulerProc(settings, tmp_path, "a")]
    bus = Bus(settings)
    try:
        procs[0].wait_owning({0})
        yield settings, procs, bus, tmp_path
    except BaseException:
        for p in procs:
            print(f"----- tail of {p.log_path.name} -----\n{p.log()[-4000:]}")
        raise
    finally:
        bus.close()
        for p in procs:
            if p.proc.poll() is None:
                os.killpg(p.proc.pid, signal.SIGCONT)
            p.stop()
        drop_topics(settings)


def test_absorbed_renewals_keep_the_lease_without_events_and_it_expires_after_the_last(env) -> None:
    settings, _, bus, _ = env
    job_id, epoch, worker = leased(bus, "live", TTL_MS)
    r = Renewer(settings, job_id, epoch, worker)
    r.start()
    time.sleep(3 * TTL_MS / 1000)
    r.stop()
    bus.wait_for(lambda: bus.renewals_accepted(job_id) >= r.sent, 20, f"all {r.sent} renewals answered")
    events = bus.job_events(job_id)
    replies = bus.job_replies(job_id)
    # One event, the confirmation; every other renewal is a reply "as of" the stored version.
    assert sum(isinstance(e, ev.LeaseRenewed) for e in events) == 1
    assert len(replies) == r.sent - 1 >= 10
    stored_version = max(e.version for e in events if not isinstance(e, ev.CommandRejected))
    assert {x.version for x in replies} == {stored_version}
    assert not [e for e in events if isinstance(e, (ev.LeaseExpired, ev.CommandRejected))]
    # The lease lived on those replies, and ends one TTL after the last of them.
    last = max(replies, key=lambda x: x.lease_expires_at_ms)
    expired = bus.wait_event(job_id, ev.LeaseExpired, timeout=TTL_MS / 1000 + 15)
    assert 0 <= expired.at_ms - last.lease_expires_at_ms < 3_000


def test_a_new_owner_keeps_the_live_lease_it_never_saw_renewed_and_expires_the_silent_one(env) -> None:
    settings, procs, bus, tmp = env
    live = leased(bus, "live", TTL_MS)
    r = Renewer(settings, *live)
    r.start()
    time.sleep(2 * TTL_MS / 1000)  # the stored deadline (the confirmation's) is long past
    silent_job, silent_epoch, silent_worker = leased(bus, "silent", TTL_MS)
    bus.send(c.RenewLease("silent-confirm", silent_job, silent_epoch, silent_worker))
    bus.wait_for(lambda: bus.renewals_accepted(silent_job) >= 1, 20, "the silent lease's confirmation")
    procs[0].kill9()
    successor = SchedulerProc(settings, tmp, "b")
    procs.append(successor)
    successor.wait_owning({0}, timeout=90)
    taken_over_ms = int(time.time() * 1000)
    sent_at_takeover = r.sent
    time.sleep(2.5 * TTL_MS / 1000)
    r.stop()
    # Every renewal was accepted, before and after the takeover; the live lease never lapsed.
    bus.wait_for(lambda: bus.renewals_accepted(live[0]) >= r.sent, 30, f"all {r.sent} renewals answered")
    assert r.sent - sent_at_takeover >= 8
    history = bus.job_events(live[0])
    assert not [e for e in history if isinstance(e, (ev.LeaseExpired, ev.CommandRejected))], history
    # The silent lease, confirmed just before the kill, expires under the new owner, within a TTL of the
    # takeover (the grace a new owner gives every held lease) and not before its own deadline.
    expired = bus.wait_event(silent_job, ev.LeaseExpired, timeout=TTL_MS / 1000 + 20)
    assert expired.epoch == silent_epoch
    assert expired.at_ms <= taken_over_ms + TTL_MS + 3_000
