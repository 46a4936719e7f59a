"""Priority preemption end to end: a priority-9 job submitted to a pool whose only worker renders priority-1
work starts after one checkpoint-and-release and a lease round trip; the priority-1 job resumes afterwards,
with no attempt spent, and its video is bit-identical to an uninterrupted render. Every grant's reasons are
on its JobLeased (`replay --why`).

Real scheduler, gateway and `spotreel worker` (HTTP transport, tiny model) from workerkit. The scheduler is
started with a 1 s minimum run (SPOTREEL_PREEMPT_MIN_RUN_S) so the test need not wait a minute; the worker
holds at step 6 for a few seconds (the test-only hang hook) so the priority-1 job is still running when the
preemption arrives, whatever the machine's speed.
"""

from __future__ import annotations

import uuid

import pytest

from spotreel.domain import events as ev
from spotreel.services.scheduler.replay import why
from spotreel.worker.render_loop import TEST_HANG_ENV
from tests.integration.workerkit import events_of, reference_checksum, start_plane, video_frames_checksum, wait_done

pytestmark = pytest.mark.timeout(240)

SAMPLER = "ddim"


@pytest.fixture(scope="module")
def plane(settings, stack, tmp_path_factory):
    with pytest.MonkeyPatch.context() as m:
        m.setenv("SPOTREEL_PREEMPT_MIN_RUN_S", "1")
        m.setenv("SPOTREEL_PREEMPT_PER_MINUTE", "2")
        gen = start_plane(settings, stack, tmp_path_factory.mktemp("priority-preemption"))
        p = next(gen)
    yield p
    next(gen, None)


def test_a_priority_9_job_preempts_priority_1_work_which_resumes_bit_identical(plane, monkeypatch):
    model = f"tiny-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv(TEST_HANG_ENV, "6:4")
    w = plane.worker("w", model, "http", "--sampler", SAMPLER, "--checkpoint-every", "0.3", "--lease-ttl-ms", "3000")
    try:
        w.wait_ready()
        low = plane.submit(model, "low", priority=1)
        w.wait_line(lambda l: l.get("event") == "step" and l.get("job_id") == low.job_id and l["step"] >= 3,
                    what="step 3 of the priority-1 job")
        high = plane.submit(model, "high", priority=9)
        leased_high = plane.bus.wait_event(high.job_id, ev.JobLeased, timeout=60)
        wait_done(plane.bus, high.job_id, timeout=90)
        done_low = wait_done(plane.bus, low.job_id, timeout=90)
    finally:
        w.stop()
    submitted = next(e for e in plane.bus.job_events(high.job_id) if isinstance(e, ev.JobSubmitted))
    asked = events_of(plane.bus, low.job_id, ev.PreemptRequested)
    released = events_of(plane.bus, low.job_id, ev.LeaseReleased)
    requeued = events_of(plane.bus, low.job_id, ev.JobRequeued)
    low_leases = events_of(plane.bus, low.job_id, ev.JobLeased)
    assert [(a.epoch, a.for_priority, a.reason) for a in asked] == [(1, 9, "preempted_for")]
    assert [(r.epoch, r.reason, r.preemptions) for r in released] == [(1, "preempted_for", 0)]
    assert [r.reason for r in requeued] == ["preempted_for"]
    assert not events_of(plane.bus, low.job_id, ev.AttemptFailed)
    assert not events_of(plane.bus, low.job_id, ev.LeaseExpired)
    # The high job got the freed worker: within a lease round trip of the release, before the low job again.
    assert leased_high.worker_id == w.worker_id
    assert released[0].at_ms <= leased_high.at_ms < low_leases[1].at_ms
    handover_ms = leased_high.at_ms - released[0].at_ms
    print(f"P9 submit -> preemption asked {asked[0].at_ms - submitted.at_ms} ms; asked -> released "
          f"{released[0].at_ms - asked[0].at_ms} ms (includes the rest of the 4 s hold at step 6); released -> "
          f"P9 leased {handover_ms} ms; P9 submit -> leased {leased_high.at_ms - submitted.at_ms} ms")
    assert handover_ms < 5_000
    # Resumed from the checkpoint written on the way out, and bit-identical to an undisturbed render.
    assert low_leases[1].resume_step is not None and low_leases[1].resume_step >= 6
    assert done_low.epoch == 2
    assert video_frames_checksum(plane, done_low.artifact_key) == reference_checksum(plane.model_dir, low, SAMPLER)
    # Each grant carries why it was made (`spotreel replay --why`): the real dispatch path records it.
    why_high, why_low = why(plane.settings, high.job_id), why(plane.settings, low.job_id)
    print("\n".join(why_high + why_low))
    assert len(why_high) == 1 and "priority 9" in why_high[0] and "only one with a candidate" in why_high[0]
    assert len(why_low) == 2 and all("priority 1" in line for line in why_low)
