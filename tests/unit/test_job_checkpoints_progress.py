"""Checkpoints (current lease only, keep latest N, resume point) and honest progress across a resume."""

from __future__ import annotations

import pytest

from spotreel.domain import ids, progress
from spotreel.domain.events import CheckpointRecorded, JobLeased
from spotreel.domain.state import Status
from tests.unit.jobkit import Driver, kinds, leased_job, rejection

pytestmark = pytest.mark.unit


def _keys(d: Driver) -> list[str]:
    return [cp.key for cp in d.s.checkpoints]


def test_only_the_latest_n_checkpoints_are_kept_and_the_rest_are_named_for_gc() -> None:
    d = leased_job()  # keep_checkpoints defaults to 3
    for step in (2, 4, 6):
        d.checkpoint(step, step * 5.0)
    out = d.checkpoint(8, 40.0)
    assert isinstance(out[0], CheckpointRecorded)
    assert out[0].pruned_keys == (ids.checkpoint_key(d.job_id, 1, 2),)
    assert [cp.step for cp in d.s.checkpoints] == [4, 6, 8]


def test_keep_checkpoints_is_a_job_setting() -> None:
    d = leased_job(keep_checkpoints=1)
    d.checkpoint(1, 5.0)
    out = d.checkpoint(2, 10.0)
    assert out[0].pruned_keys == (ids.checkpoint_key(d.job_id, 1, 1),)
    assert _keys(d) == [ids.checkpoint_key(d.job_id, 1, 2)]


def test_checkpoints_only_from_the_current_lease() -> None:
    d = leased_job()
    d.checkpoint(5, 25.0)
    d.expire()
    d.grant(worker="w2")
    assert rejection(d.checkpoint(9, 45.0, epoch=1, worker="w1")) == "stale_epoch"
    assert _keys(d) == [ids.checkpoint_key(d.job_id, 1, 5)]


def test_a_checkpoint_must_move_forward() -> None:
    d = leased_job()
    d.checkpoint(5, 25.0)
    assert rejection(d.checkpoint(5, 25.0, key="other")) == "checkpoint_not_newer"
    assert rejection(d.checkpoint(4, 20.0)) == "checkpoint_not_newer"
    assert rejection(d.checkpoint(6, 30.0, key=ids.checkpoint_key(d.job_id, 1, 5))) == "checkpoint_not_newer"
    assert rejection(d.checkpoint(7, 130.0)) == "invalid_request"
    assert rejection(d.checkpoint(7, 30.0, key="")) == "invalid_request"


def test_the_next_lease_resumes_from_the_newest_checkpoint() -> None:
    d = leased_job()
    d.checkpoint(5, 25.0)
    d.checkpoint(10, 50.0)
    d.release()
    out = d.grant(worker="w2")
    leased = out[0]
    assert isinstance(leased, JobLeased)
    assert (leased.resume_checkpoint_key, leased.resume_step, leased.resume_progress_pct) == (
        ids.checkpoint_key(d.job_id, 1, 10),
        10,
        50.0,
    )


def test_a_checkpoint_the_worker_could_not_load_is_dropped_and_the_older_one_is_used() -> None:
    d = leased_job()
    d.checkpoint(5, 25.0)
    d.checkpoint(10, 50.0)
    d.release()
    d.grant(worker="w2")
    bad = ids.checkpoint_key(d.job_id, 1, 10)
    out = d.fail(invalid_checkpoint_key=bad)
    assert out[0].invalid_checkpoint_key == bad
    assert _keys(d) == [ids.checkpoint_key(d.job_id, 1, 5)]
    d.activate(advance=10**9)
    assert d.grant(worker="w3")[0].resume_step == 5
    # An unknown key is not echoed into the event.
    assert d.fail(invalid_checkpoint_key="nope")[0].invalid_checkpoint_key is None


def test_progress_is_honest_across_a_resume() -> None:
    d = leased_job()
    d.progress(20.0, step=4)
    d.checkpoint(4, 20.0)
    d.progress(35.0, step=7)
    d.expire()
    assert d.s.phase == "interrupted" and d.s.progress_pct == 35.0
    d.grant(worker="w2")
    s = d.s
    # Restarted below the high-water mark: says so instead of jumping back to 20%.
    assert (s.progress_pct, s.reported_pct, s.resuming, s.resume_from_pct, s.phase) == (35.0, 20.0, True, 20.0, "resuming")
    d.progress(30.0, step=6)
    assert (d.s.progress_pct, d.s.reported_pct, d.s.phase, d.s.status) == (35.0, 30.0, "resuming", Status.RUNNING)
    d.progress(35.0, step=7, phase="denoising")
    assert (d.s.progress_pct, d.s.resuming, d.s.resume_from_pct, d.s.phase) == (35.0, False, None, "denoising")
    d.progress(60.0, step=12, phase="encoding")
    assert d.s.progress_pct == 60.0 and d.s.phase == "encoding"
    view = progress.view(d.s)
    assert (view.progress_pct, view.reported_pct, view.step, view.resuming) == (60.0, 60.0, 12, False)


def test_a_lease_without_checkpoint_after_progress_resumes_from_zero() -> None:
    d = leased_job()
    d.progress(10.0)
    d.release()
    d.grant(worker="w2")
    assert (d.s.resuming, d.s.resume_from_pct, d.s.reported_pct, d.s.progress_pct) == (True, 0.0, 0.0, 10.0)


def test_a_lease_that_starts_at_the_high_water_mark_is_not_resuming() -> None:
    d = leased_job()
    d.checkpoint(4, 20.0)
    d.release()
    d.grant(worker="w2")
    assert (d.s.resuming, d.s.phase, d.s.reported_pct) == (False, "starting", 20.0)


def test_progress_never_decreases_over_any_history() -> None:
    d = leased_job()
    seen = []
    for pct in (10.0, 5.0, 30.0, 12.0):
        d.progress(pct)
        seen.append(d.s.progress_pct)
    d.release()
    d.grant(worker="w2")
    seen.append(d.s.progress_pct)
    d.complete()
    seen.append(d.s.progress_pct)
    assert seen == sorted(seen) and seen[-1] == 100.0
    assert kinds(d.history[-1:]) == ["JobSucceeded"]
