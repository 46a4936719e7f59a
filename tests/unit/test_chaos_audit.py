"""The whole-system chaos test's judge (tests/chaos/audit.py) flags each broken history it is meant to."""

from __future__ import annotations

from dataclasses import replace

from spotreel.domain import events as ev
from tests.chaos.audit import audit, audit_job
from tests.unit.jobkit import Driver


def _run(resume: bool = True) -> Driver:
    d = Driver()
    d.submit()
    d.grant()
    d.progress(10.0, 2)
    d.checkpoint(4, 20.0)
    d.expire()
    d.grant(worker="w2")
    d.progress(30.0, 6)
    d.complete()
    return d


def test_a_clean_preempted_and_resumed_history_passes():
    d = _run()
    a = audit_job(d.job_id, d.history)
    assert a.problems == []
    assert a.succeeded is not None and a.succeeded.epoch == 2
    assert a.resumes == 1 and [le.epoch for le in a.leases] == [1, 2]
    assert a.kinds["LeaseExpired"] == 1


def test_stale_commands_are_counted_as_rejections_not_problems():
    d = _run()
    d.progress(50.0, 8, epoch=1, worker="w1")
    a = audit_job(d.job_id, d.history)
    assert a.problems == []
    assert [(r.reason, r.epoch_given) for r in a.stale_rejections] == [("terminal", 1)]


def test_an_event_applied_for_an_old_epoch_is_a_problem():
    d = _run()
    i = next(i for i, e in enumerate(d.history) if isinstance(e, ev.ProgressReported) and e.epoch == 2)
    d.history[i] = replace(d.history[i], epoch=1)
    assert any("applied for epoch 1 while the live lease was 2" in p for p in audit_job(d.job_id, d.history).problems)


def test_a_duplicated_or_lost_event_and_a_second_terminal_are_problems():
    d = _run()
    done = d.history[-1]
    assert isinstance(done, ev.JobSucceeded)
    twice = audit_job(d.job_id, [*d.history, done]).problems
    assert any("expected" in p for p in twice) and any("2 terminal events" in p for p in twice)
    lost = audit_job(d.job_id, [e for e in d.history if not isinstance(e, ev.JobLeased) or e.epoch == 1]).problems
    assert any("(lost or duplicated)" in p for p in lost)


def test_a_video_outside_its_epoch_and_a_job_without_an_end_are_problems():
    d = _run()
    d.history[-1] = replace(d.history[-1], artifact_key=d.history[-1].artifact_key.replace("e00000002", "e00000001"))
    assert any(p.startswith("video ") for p in audit_job(d.job_id, d.history).problems)
    unfinished = audit(d.history[:-1], [d.job_id, "jnever"])
    assert any("0 terminal events" in p for p in unfinished.problems)
    assert any(p.startswith("jnever: no JobSubmitted") for p in unfinished.problems)
