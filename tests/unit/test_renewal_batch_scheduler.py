"""A gateway's RenewalBatch through the scheduler's real batch loop (`Pipeline.on_batch`, in process): each
renewal judged as if it had come alone, at its own send time; what is absorbed answered in one
RenewalReplies record; events marked with their place in the batch, and a batch torn by a crash applied
again from the renewal after the last one whose events landed."""

from __future__ import annotations

from unittest import mock

import pytest

from spotreel.adapters.kafka import BATCH_REPLY_KEY_PREFIX, CMD_ENTRY_HEADER, CMD_OFFSET_HEADER
from spotreel.adapters.partitioning import partition_for
from spotreel.codec import Codec
from spotreel.domain import commands as c
from spotreel.domain import events as ev
from spotreel.platform.topics import assignments_topic, commands_deadletter_topic, events_topic, replies_topic

from spotreel.services.scheduler import clock as sched_clock
from tests.unit.jobkit import T0, submit
from tests.unit.schedloop import Producer, run, scheduler

TTL = 12_000
GW = "gw-test"
codec = Codec.default()


def _leased(tmp_path, now: list[int], jobs: int = 2, partitions: int = 1):
    """A scheduler with `jobs` jobs, each leased to its own worker (w0, w1, ...) and the lease confirmed by a
    first renewal sent alone. Returns (scheduler, producer, [(job, epoch, worker)], next offset of partition 0)."""
    sched, producer = scheduler(tmp_path, now, partitions=partitions, prefix="unit.batch")
    offsets = [0] * partitions
    held = []
    for i in range(jobs):
        sub = submit(key=f"k{i}")
        p = partition_for(sub.job_id, partitions)
        now[0] += 10
        run(sched, codec, [sub, c.RequestWork(f"rw{i}", f"w{i}", "h100", ("tiny-t2v",), (), False, TTL, now[0])],
            offsets[p], partition=p)
        state = sched.get(sub.job_id)
        assert state.lease is not None and state.lease.worker_id == f"w{i}"
        run(sched, codec, [c.RenewLease(f"confirm{i}", sub.job_id, state.epoch, f"w{i}")], offsets[p] + 2,
            partition=p)
        offsets[p] += 3
        assert sched.get(sub.job_id).lease.confirmed
        held.append((sub.job_id, state.epoch, f"w{i}"))
    return sched, producer, held, offsets[0]


def _answers(sched, producer: Producer, since: int) -> dict[str, list[tuple[str, dict[str, bytes]]]]:
    """command id -> [(how it was answered, the record's headers)] for the records sent from `since` on."""
    found: dict[str, list[tuple[str, dict[str, bytes]]]] = {}
    for rec in producer.records[since:]:
        if rec.topic == replies_topic(sched.settings) and rec.key.startswith(BATCH_REPLY_KEY_PREFIX):
            replies = codec.decode_message(rec.value)
            for r in (*replies.renewed, *replies.progressed):
                found.setdefault(r.causation_id, []).append((f"batch-reply {type(r).__name__}", {}))
        elif rec.topic == replies_topic(sched.settings):
            r = codec.decode_message(rec.value)
            found.setdefault(r.causation_id, []).append((f"reply {type(r).__name__}", {}))
        elif rec.topic == events_topic(sched.settings):
            e = codec.decode_message(rec.value)
            cid = e.command_id if isinstance(e, ev.CommandRejected) else getattr(e, "causation_id", None)
            found.setdefault(cid, []).append((type(e).__name__, dict(rec.headers or ())))
    return found


def _batch(*renewals: tuple[object, int]) -> c.RenewalBatch:
    return c.RenewalBatch("rb-1", GW, tuple(c.batched(cmd, sent) for cmd, sent in renewals))


@pytest.fixture
def two_leases(tmp_path):
    """Two jobs leased and confirmed on one partition, the scheduler's clock the test's (`now`, moved on a
    second): (now, scheduler, producer, [(job, epoch, worker)] * 2, next offset)."""
    now = [T0]
    with mock.patch.object(sched_clock, "now_ms", lambda: now[0]):
        sched, producer, held, offset = _leased(tmp_path, now)
        now[0] += 1_000
        yield now, sched, producer, held, offset


def test_each_renewal_of_a_batch_is_answered_once_and_the_absorbed_ones_in_one_record(two_leases) -> None:
    now, sched, producer, held, offset = two_leases
    (j0, e0, w0), (j1, e1, w1) = held
    since = len(producer.records)
    before = [sched.parts[0].view(sched.get(j)).lease.expires_at_ms for j in (j0, j1)]
    run(sched, codec, [_batch((c.RenewLease("a", j0, e0, w0), now[0]),
                              (c.ReportProgress("b", j1, e1, w1, 3, 15.0), now[0]),
                              (c.RenewLease("stale", j0, e0 + 5, w0), now[0]))], offset)
    answers = _answers(sched, producer, since)
    assert set(answers) == {"a", "b", "stale"}
    assert all(len(v) == 1 for v in answers.values()), answers
    assert answers["a"][0][0] == "batch-reply LeaseRenewed"
    batch_replies = [r for r in producer.records[since:] if r.key.startswith(BATCH_REPLY_KEY_PREFIX)]
    assert len(batch_replies) == 1 and batch_replies[0].key == BATCH_REPLY_KEY_PREFIX + GW.encode()
    # The refused renewal is an event like any command's, marked with the batch's offset and its place.
    how, headers = answers["stale"][0]
    assert how == "CommandRejected"
    assert headers[CMD_OFFSET_HEADER] == str(offset).encode() and headers[CMD_ENTRY_HEADER] == b"2"
    part = sched.parts[0]
    assert (part.applied_upto, part.applied_entry) == (offset, None)
    after = [part.view(sched.get(j)).lease.expires_at_ms for j in (j0, j1)]
    assert all(a > b for a, b in zip(after, before)), "the batch's renewals did not move the deadlines"


def test_each_renewal_is_judged_at_its_own_send_time(tmp_path) -> None:
    now = [T0]
    with mock.patch.object(sched_clock, "now_ms", lambda: now[0]):
        sched, producer, held, offset = _leased(tmp_path, now)
        (j0, e0, w0), (j1, e1, w1) = held
        part = sched.parts[0]
        deadline = max(part.view(sched.get(j)).lease.expires_at_ms for j in (j0, j1))
        now[0] = deadline + 500  # the batch reaches the log after both deadlines
        since = len(producer.records)
        run(sched, codec, [_batch((c.RenewLease("in-time", j0, e0, w0), deadline - 1_000),
                                  (c.RenewLease("too-late", j1, e1, w1), deadline + 400))],
            offset, appended_ms=now[0])
        answers = _answers(sched, producer, since)
        assert answers["in-time"][0][0].endswith("LeaseRenewed"), answers
        assert answers["too-late"][0][0] == "CommandRejected", answers
        rejected = codec.decode_message(next(r.value for r in producer.records[since:]
                                             if r.topic == events_topic(sched.settings)
                                             and b"too-late" in r.value))
        assert rejected.reason == "lease_expired"


def test_a_torn_batch_is_applied_again_from_the_renewal_after_the_last_that_landed(two_leases) -> None:
    now, sched, producer, held, offset = two_leases
    (j0, e0, w0), (j1, e1, w1) = held
    batch = _batch((c.RenewLease("first", j0, e0, w0), now[0]), (c.RenewLease("second", j1, e1, w1), now[0]))
    part = sched.parts[0]
    # What catch-up finds after a crash that left the first renewal's events on the topic, not the second's.
    part.applied_upto, part.applied_entry = offset, 0
    since = len(producer.records)
    run(sched, codec, [batch], offset)
    assert set(_answers(sched, producer, since)) == {"second"}
    assert (part.applied_upto, part.applied_entry) == (offset, None)
    # Delivered once more (the commit did not happen): now applied whole, so skipped whole.
    since = len(producer.records)
    run(sched, codec, [batch], offset)
    assert _answers(sched, producer, since) == {}


def test_a_batch_with_a_renewal_of_another_partition_is_dead_lettered_whole(tmp_path) -> None:
    now = [T0]
    with mock.patch.object(sched_clock, "now_ms", lambda: now[0]):
        sched, producer, held, offset = _leased(tmp_path, now, jobs=4, partitions=2)
        by_part = {partition_for(j, 2): (j, e, w) for j, e, w in held}
        assert len(by_part) == 2, "the four jobs all fell on one partition"
        (j0, e0, w0), (j1, e1, w1) = by_part[0], by_part[1]
        since = len(producer.records)
        counted = sched.metrics.registry.get_sample_value("spotreel_scheduler_commands_total")
        run(sched, codec, [_batch((c.RenewLease("here", j0, e0, w0), now[0]),
                                  (c.RenewLease("elsewhere", j1, e1, w1), now[0]))], offset, partition=0)
        assert _answers(sched, producer, since) == {}
        dead = producer.to(commands_deadletter_topic(sched.settings))
        assert len(dead) == 1
        name, letter = codec.decode(dead[0].value)
        assert name == "spotreel.v1.DeadLetteredCommand"
        assert letter["reason"] == "wrong_partition" and "elsewhere" in letter["detail"]
        assert sched.metrics.registry.get_sample_value("spotreel_scheduler_commands_total") == counted + 1


def test_catch_up_reads_how_much_of_the_last_batch_landed_from_its_events() -> None:
    from spotreel.services.scheduler.catchup import CatchUp, note_applied

    def headers(offset: int, entry: int | None = None) -> list[tuple[str, bytes]]:
        found = [(CMD_OFFSET_HEADER, str(offset).encode())]
        return found + ([(CMD_ENTRY_HEADER, str(entry).encode())] if entry is not None else [])

    caught = CatchUp()
    for h in (headers(4), headers(7, 0), headers(7, 2), headers(7, 2)):
        note_applied(caught, h)
    assert (caught.applied_upto, caught.applied_entry) == (7, 2)  # renewals 0..2 of the batch at 7 landed
    note_applied(caught, headers(9))
    assert (caught.applied_upto, caught.applied_entry) == (9, None)  # a whole command after it
    assert note_applied(caught, []) is None and caught.applied_upto == 9


def _ask(request_id: str, worker: str, at_ms: int) -> c.RequestWork:
    return c.RequestWork(request_id, worker, "h100", ("tiny-t2v",), (), False, TTL, at_ms)


def _lease_answers(sched, producer: Producer, since: int) -> dict[str, list[str]]:
    """request id -> how each answer came: `assigned <job>:<epoch>` alone on the assignments topic, or
    `refused <reason>` inside a batch's RenewalReplies."""
    found: dict[str, list[str]] = {}
    for rec in producer.records[since:]:
        if rec.topic == assignments_topic(sched.settings):
            a = codec.decode_message(rec.value)
            how = f"assigned {a.job_id}:{a.epoch}" if isinstance(a, ev.WorkAssigned) else f"alone {a.reason}"
            found.setdefault(a.request_id, []).append(how)
        elif rec.topic == replies_topic(sched.settings) and rec.key.startswith(BATCH_REPLY_KEY_PREFIX):
            for r in codec.decode_message(rec.value).refused:
                found.setdefault(r.request_id, []).append(f"refused {r.reason}")
    return found


def test_lease_requests_in_a_batch_are_granted_alone_and_refused_together(two_leases) -> None:
    now, sched, producer, held, offset = two_leases
    (j0, e0, w0), _ = held
    queued = submit(key="queued")
    run(sched, codec, [queued], offset)
    since = len(producer.records)
    timed = sched.metrics.registry.get_sample_value("spotreel_scheduler_dispatch_seconds_count") or 0
    run(sched, codec, [c.RenewalBatch("rb-2", GW, (c.batched(c.RenewLease("hb", j0, e0, w0), now[0]),),
                                      (_ask("rw-a", "idle-a", now[0]), _ask("rw-b", "idle-b", now[0]),
                                       _ask("rw-c", w0, now[0])))], offset + 1, appended_ms=now[0])
    # Every request's answer is timed, the refusals sent inside the replies record too.
    assert sched.metrics.registry.get_sample_value("spotreel_scheduler_dispatch_seconds_count") == timed + 3
    lease = sched.get(queued.job_id).lease
    assert lease is not None and lease.worker_id == "idle-a"
    answers = _lease_answers(sched, producer, since)
    assert answers == {"rw-a": [f"assigned {queued.job_id}:{sched.get(queued.job_id).epoch}"],
                       "rw-b": ["refused no_queued_job"], "rw-c": ["refused worker_holds_lease"]}
    # The renewal's reply and the two refusals share one record; the grant's event carries its place.
    batch_replies = [r for r in producer.records[since:] if r.key.startswith(BATCH_REPLY_KEY_PREFIX)]
    assert len(batch_replies) == 1 and len(codec.decode_message(batch_replies[0].value).renewed) == 1
    granted = [dict(r.headers) for r in producer.to(events_topic(sched.settings))[-3:]
               if isinstance(codec.decode_message(r.value), ev.JobLeased)]
    assert granted == [{CMD_OFFSET_HEADER: str(offset + 1).encode(), CMD_ENTRY_HEADER: b"1"}]


def test_a_redelivered_batch_answers_its_lease_requests_again_and_never_grants_twice(two_leases) -> None:
    now, sched, producer, held, offset = two_leases
    (j0, e0, w0), _ = held
    queued = submit(key="queued")
    run(sched, codec, [queued], offset)
    batch = c.RenewalBatch("rb-3", GW, (c.batched(c.RenewLease("hb", j0, e0, w0), now[0]),),
                           (_ask("rw-a", "idle-a", now[0]), _ask("rw-b", "idle-b", now[0])))
    run(sched, codec, [batch], offset + 1)
    epoch = sched.get(queued.job_id).epoch
    part = sched.parts[0]
    # Torn after the grant's events (entry 1) landed: the grant is answered again, the next request judged.
    part.applied_upto, part.applied_entry = offset + 1, 1
    since = len(producer.records)
    run(sched, codec, [batch], offset + 1)
    assert _lease_answers(sched, producer, since) == {"rw-a": [f"assigned {queued.job_id}:{epoch}"],
                                                      "rw-b": ["refused no_queued_job"]}
    # Applied whole and delivered again (the commit did not happen): both answered again, nothing decided.
    since = len(producer.records)
    run(sched, codec, [batch], offset + 1)
    assert _lease_answers(sched, producer, since) == {"rw-a": [f"assigned {queued.job_id}:{epoch}"],
                                                      "rw-b": ["alone no_queued_job"]}
    assert sched.get(queued.job_id).epoch == epoch
    assert not any(isinstance(codec.decode_message(r.value), ev.JobLeased) for r in producer.records[since:])
