"""Renewals answered before their verdict (libs/spotreel/dispatch/lateverdicts.py): what a late verdict
asks of the holder is kept for its lease until a newer verdict says otherwise, and `settled_within` waits for
a verdict without cancelling it."""

from __future__ import annotations

import asyncio
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spotreel.dispatch.aio import settled_within
from spotreel.domain import events as ev
from spotreel.dispatch.lateverdicts import MIN_ANSWER_WAIT_S, LateVerdicts, answer_wait_s, tells

pytestmark = pytest.mark.unit
JOB = "j" + "2" * 32


def renewed(at_ms: int, cancel: bool = False, drain: bool = False) -> ev.LeaseRenewed:
    return ev.LeaseRenewed(job_id=JOB, version=4, at_ms=at_ms, causation_id="c", epoch=2,
                           lease_expires_at_ms=at_ms + 30_000, cancel_requested=cancel, drain_requested=drain)


def refused(at_ms: int, reason: str) -> ev.CommandRejected:
    return ev.CommandRejected(job_id=JOB, version=0, at_ms=at_ms, causation_id="c", command_id="k", command_type="RenewLease",
                              reason=reason, detail="", epoch_given=2, current_epoch=3)


def test_only_what_asks_something_of_the_holder_is_kept() -> None:
    assert tells(renewed(1, cancel=True)) and tells(renewed(1, drain=True)) and not tells(renewed(1))
    assert tells(refused(1, "stale_epoch")) and tells(refused(1, "lease_expired")) and tells(refused(1, "terminal"))
    # A refusal of that one command says nothing of the lease.
    assert not tells(refused(1, "invalid_progress")) and not tells(refused(1, "unknown_epoch"))


def test_a_kept_verdict_belongs_to_its_lease_and_the_newest_verdict_decides() -> None:
    late = LateVerdicts()
    late.note(JOB, 2, "w", renewed(100, cancel=True))
    assert late.kept(JOB, 2, "w").cancel_requested
    assert late.kept(JOB, 3, "w") is None and late.kept(JOB, 2, "other") is None, "another lease hears nothing"
    late.note(JOB, 2, "w", renewed(90))  # older, from the other topic: changes nothing
    assert late.kept(JOB, 2, "w") is not None
    late.note(JOB, 2, "w", renewed(110))  # newer and asks nothing: the drain/cancel is withdrawn
    assert late.kept(JOB, 2, "w") is None
    late.note(JOB, 2, "w", renewed(105, drain=True))  # older than the plain one: not kept
    assert late.kept(JOB, 2, "w") is None
    late.note(JOB, 2, "w", renewed(115, cancel=True))
    # A checkpoint recorded or a refusal of that one command says nothing of the cancel: it stays.
    late.note(JOB, 2, "w", ev.CheckpointRecorded(job_id=JOB, version=5, at_ms=116, causation_id="c", epoch=2,
                                                 checkpoint_key="k", step=3, progress_pct=15.0, checksum="0" * 64,
                                                 size_bytes=1, pruned_keys=()))
    late.note(JOB, 2, "w", refused(117, "invalid_progress"))
    assert late.kept(JOB, 2, "w").cancel_requested
    late.note(JOB, 2, "w", refused(120, "stale_epoch"))
    assert late.kept(JOB, 2, "w").reason == "stale_epoch" and len(late) == 1


def test_the_remembered_jobs_are_bounded_oldest_first() -> None:
    late = LateVerdicts(max_jobs=3)
    for i in range(5):
        job = f"j{i}"
        late.note(job, 1, "w", ev.CommandRejected(job_id=job, version=0, at_ms=i, causation_id="c", command_id="k",
                                                  command_type="RenewLease", reason="terminal", detail="",
                                                  epoch_given=1, current_epoch=1))
    assert len(late) == 3 and late.kept("j0", 1, "w") is None and late.kept("j4", 1, "w") is not None


async def test_a_followed_verdict_is_kept_when_it_comes_and_dropped_when_it_does_not() -> None:
    loop = asyncio.get_running_loop()
    late = LateVerdicts()
    waits: list[int] = []
    fut = loop.create_future()
    late.follow(fut, JOB, 2, "w", time.monotonic(), 5.0, waits.append)
    fut.set_result(renewed(100, cancel=True))
    await asyncio.sleep(0)
    assert len(waits) == 1 and late.kept(JOB, 2, "w").cancel_requested
    never = loop.create_future()
    late.follow(never, "j-other", 1, "w", time.monotonic(), 0.02, waits.append)
    await asyncio.sleep(0.05)
    assert never.cancelled() and len(waits) == 2 and waits[1] >= 20, "the wait counts up to the end of watching"
    assert late.kept("j-other", 1, "w") is None


async def test_settled_within_waits_without_cancelling() -> None:
    loop = asyncio.get_running_loop()
    fut = loop.create_future()
    loop.call_later(0.01, fut.set_result, "verdict")
    assert await settled_within(fut, 5.0) and fut.result() == "verdict"
    slow = loop.create_future()
    assert not await settled_within(slow, 0.01)
    assert not slow.done(), "left for the caller to go on watching"
    slow.set_result("late")  # and it still resolves normally
    assert await settled_within(slow, 0) and slow.result() == "late"
    caller = asyncio.create_task(settled_within(loop.create_future(), 5.0))
    await asyncio.sleep(0.01)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller


@given(st.floats(0.0, 5.0), st.floats(-5.0, 30.0))
def test_a_renewal_is_answered_within_its_budget_counted_from_the_send(answer_s, waited_s) -> None:
    wait = answer_wait_s(answer_s, waited_s)
    # Never more than what is left of the budget once it has waited (a clock ahead counts as no wait) ...
    assert wait <= max(answer_s - max(0.0, waited_s), min(MIN_ANSWER_WAIT_S, answer_s)) + 1e-9
    # ... never less than a moment for a verdict already on its way, unless no wait at all was asked.
    assert wait >= min(MIN_ANSWER_WAIT_S, answer_s)
    assert answer_wait_s(answer_s, 0.0) == answer_s


def test_the_wait_shrinks_by_how_long_the_request_waited_to_be_read() -> None:
    assert answer_wait_s(1.0, 0.25) == 0.75
    assert answer_wait_s(1.0, 3.0) == MIN_ANSWER_WAIT_S  # late already: answered once on the log
    assert answer_wait_s(0.0, 3.0) == 0.0
