"""Checkpoints know where they can resume (domain/resume_match.py): the grant resumes from the newest
checkpoint the worker's fingerprint can use, or step 0, spending nothing; dispatch waits a bounded time for a
matching worker."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spotreel.domain import commands as c
from spotreel.domain import ids
from spotreel.domain import resume_match as rm
from spotreel.domain.events import CheckpointRecorded, JobLeased
from spotreel.domain.state import Checkpoint
from tests.unit.jobkit import Driver, kinds

pytestmark = pytest.mark.unit

F1 = rm.encode({"family": "unet3d", "torch": "2.13.0", "diffusers": "0.39.0", "device": "cpu", "dtype": "torch.float32"})
F2 = rm.encode({"family": "unet3d", "torch": "2.13.0", "diffusers": "0.39.0", "device": "cuda", "dtype": "torch.float16"})


def _grant(d: Driver, worker: str, fp: str) -> JobLeased:
    out = d.grant(worker=worker, fingerprint=fp)
    assert kinds(out) == ["JobLeased"], kinds(out)
    return out[0]


def test_encode_is_canonical_and_parse_inverts_it() -> None:
    assert rm.encode({"b": 2, "a": "x;y=z%"}) == "a=x%3By%3Dz%25;b=2"
    assert rm.parse(rm.encode({"b": 2, "a": "x;y=z%"})) == {"a": "x;y=z%", "b": "2"}
    assert rm.differences(F1, F2) == ("device", "dtype")


@given(st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=8), max_size=6))
def test_parse_inverts_encode(fields: dict[str, str]) -> None:
    assert rm.parse(rm.encode(fields)) == fields


def test_a_worker_of_another_fingerprint_starts_at_step_0_without_spending_anything() -> None:
    d = Driver()
    d.submit()
    _grant(d, "wa", F1)
    d.checkpoint(5, 25.0)
    d.checkpoint(10, 50.0)
    d.release()
    assert [cp.fingerprint for cp in d.s.checkpoints] == [F1, F1]
    leased = _grant(d, "wb", F2)
    assert (leased.resume_checkpoint_key, leased.resume_step, leased.resume_reason) == (None, None, "none_compatible")
    assert leased.resume_skipped_keys == tuple(cp.key for cp in d.s.checkpoints)
    assert leased.worker_fingerprint == F2 and "device, dtype" in (leased.resume_detail or "")
    assert (d.s.attempts_used, d.s.recent_failures_ms, d.s.step) == (0, (), 0)
    # Its own line goes on below the skipped checkpoints, which stay for a worker that can use them.
    out = d.checkpoint(3, 15.0)
    assert isinstance(out[0], CheckpointRecorded) and out[0].fingerprint == F2
    assert [(cp.step, cp.fingerprint) for cp in d.s.checkpoints] == [(3, F2), (5, F1), (10, F1)]
    d.release()
    again = _grant(d, "wa2", F1)
    assert (again.resume_step, again.resume_reason) == (10, "newest")
    d.release()
    other = _grant(d, "wb2", F2)
    assert (other.resume_step, other.resume_reason) == (3, "older_compatible")
    assert other.resume_skipped_keys == (ids.checkpoint_key(d.job_id, 1, 5), ids.checkpoint_key(d.job_id, 1, 10))
    assert d.s.attempts_used == 0


def test_a_worker_that_states_less_is_judged_on_what_it_states() -> None:
    env = rm.encode({"torch": "2.13.0", "diffusers": "0.39.0", "device": "cpu"})
    assert rm.compatible(F1, env) and not rm.compatible(F2, env)
    assert rm.differences(F2, env) == ("device",)
    assert rm.differences(env, F1) == ("dtype", "family")  # the checkpoint says nothing of them: no match


def test_a_checkpoint_carries_its_writers_fingerprint_when_given() -> None:
    d = Driver()
    d.submit()
    env = rm.encode({"device": "cpu"})
    _grant(d, "wa", env)
    e, w = d.lease()
    out = d.send(c.RecordCheckpoint("ck", d.job_id, e, w, ids.checkpoint_key(d.job_id, e, 4), 4, 20.0, "s", 1,
                                    fingerprint=F1))
    assert out[0].fingerprint == F1
    d.checkpoint(6, 30.0)
    assert [cp.fingerprint for cp in d.s.checkpoints] == [F1, env]


def test_without_fingerprints_the_newest_is_used_as_before() -> None:
    d = Driver()
    d.submit()
    _grant(d, "wa", "")
    d.checkpoint(5, 25.0)
    d.release()
    leased = _grant(d, "wb", F2)
    assert (leased.resume_step, leased.resume_reason, leased.resume_skipped_keys) == (5, "newest", ())
    d.release()
    plain = _grant(d, "wc", "")
    assert (plain.resume_step, plain.resume_reason) == (5, None)


def test_a_lease_may_not_checkpoint_behind_where_it_started() -> None:
    d = Driver()
    d.submit()
    _grant(d, "wa", F1)
    d.checkpoint(6, 30.0)
    d.release()
    _grant(d, "wb", F1)
    assert kinds(d.checkpoint(6, 30.0, key="other")) == ["CommandRejected"]
    assert kinds(d.checkpoint(8, 40.0)) == ["CheckpointRecorded"]


fingerprints = st.sampled_from(["", F1, F2])
steps = st.lists(st.integers(0, 50), min_size=0, max_size=6, unique=True).map(sorted)


@given(steps, st.lists(fingerprints, min_size=6, max_size=6), fingerprints)
def test_the_choice_is_the_newest_usable_checkpoint(step_list: list[int], fps: list[str], worker: str) -> None:
    cps = tuple(Checkpoint(f"k{s}", s, 0.0, 1, "c", 1, 0, fp) for s, fp in zip(step_list, fps))
    choice = rm.choose_resume(cps, worker)
    usable = [cp for cp in cps if rm.compatible(cp.fingerprint, worker)]
    assert choice.checkpoint == (usable[-1] if usable else None)
    newer = [cp for cp in cps if choice.checkpoint is None or cp.step > choice.checkpoint.step]
    assert choice.skipped == tuple(newer)
    assert all(not rm.compatible(cp.fingerprint, worker) for cp in choice.skipped)
    if not cps:
        assert choice.reason == "no_checkpoint"


@given(fingerprints, fingerprints, st.lists(fingerprints, max_size=4), st.integers(0, 20_000), st.integers(0, 20_000))
def test_dispatch_holds_only_for_a_present_match_and_only_for_a_while(
        newest_fp: str, worker: str, idle: list[str], waited: int, hold: int) -> None:
    newest = Checkpoint("k", 5, 25.0, 1, "c", 1, 0, newest_fp)
    held = rm.hold_for_match(newest, worker, idle, waited, hold)
    if held:
        assert waited < hold and not rm.compatible(newest_fp, worker) and any(fp and rm.compatible(newest_fp, fp)
                                                                            for fp in idle)
    else:
        assert waited >= hold or rm.compatible(newest_fp, worker) or not newest_fp or \
            not any(fp and rm.compatible(newest_fp, fp) for fp in idle)
    assert not rm.hold_for_match(None, worker, idle, waited, hold)
