"""Retry policy: visible failures vs preemptions, backoff with deterministic jitter, poison, dead letters."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spotreel.domain import commands as c
from spotreel.domain import retry
from spotreel.domain.events import AttemptFailed, JobScheduled
from spotreel.domain.state import Status
from tests.unit.jobkit import Driver, kinds, leased_job, rejection
from tests.harness.hypothesis_profiles import examples

pytestmark = pytest.mark.unit

MINUTE = 60_000


def _run_and_fail(d: Driver, *, gap: int = 10 * MINUTE) -> tuple:
    """Let the backoff pass (and the poison window), lease again and fail."""
    if d.s.status == Status.SCHEDULED:
        d.activate(advance=gap)
    d.grant()
    return d.fail()


def test_a_retryable_failure_backs_off_then_requeues() -> None:
    d = leased_job()
    out = d.fail()
    assert kinds(out) == ["AttemptFailed", "JobScheduled"]
    failed, scheduled = out
    assert isinstance(failed, AttemptFailed) and failed.attempts_used == 1 and failed.retryable
    assert isinstance(scheduled, JobScheduled) and scheduled.reason == "backoff"
    delay = scheduled.run_at_ms - d.now
    assert retry.backoff_ms(d.job_id, 1, 2_000, 300_000) == delay and 1_000 <= delay < 2_000
    assert d.s.status == Status.SCHEDULED and d.s.last_error_code == "oom" and d.s.phase == "interrupted"
    assert rejection(d.activate(advance=delay - 1)) == "not_due"
    assert kinds(d.activate(advance=1)) == ["JobQueued"]


def test_exhausting_attempts_dead_letters() -> None:
    d = leased_job(max_attempts=3)
    d.fail()
    _run_and_fail(d)
    out = _run_and_fail(d)
    assert kinds(out) == ["AttemptFailed", "JobDeadLettered"]
    assert (out[1].reason, out[1].attempts_used) == ("max_attempts", 3)
    assert d.s.status == Status.DEAD_LETTERED


def test_a_non_retryable_failure_fails_the_job() -> None:
    d = leased_job()
    out = d.fail(retryable=False)
    assert kinds(out) == ["AttemptFailed", "JobFailed"]
    assert (out[1].reason, out[1].error_code) == ("non_retryable", "oom")
    assert d.s.status == Status.FAILED and d.s.terminal_reason == "non_retryable"


def test_fast_repeated_failures_are_poison() -> None:
    d = leased_job(max_attempts=10, poison_threshold=3, poison_window_ms=MINUTE)
    d.fail()
    _run_and_fail(d, gap=5_000)
    out = _run_and_fail(d, gap=10_000)
    assert kinds(out) == ["AttemptFailed", "JobDeadLettered"] and out[1].reason == "poison"
    assert d.s.attempts_used == 3


def test_failures_spread_beyond_the_window_are_not_poison() -> None:
    d = leased_job(max_attempts=10, poison_threshold=3, poison_window_ms=MINUTE)
    for _ in range(5):
        out = _run_and_fail(d, gap=2 * MINUTE) if d.s.status == Status.SCHEDULED else d.fail()
        assert kinds(out) == ["AttemptFailed", "JobScheduled"]
    assert len(d.s.recent_failures_ms) == 1


def test_preemptions_never_use_attempts() -> None:
    d = leased_job(max_attempts=1)
    for _ in range(10):
        d.expire()
        d.grant()
        d.release()
        d.grant()
    assert (d.s.attempts_used, d.s.preemptions, d.s.status) == (0, 20, Status.LEASED)


def test_preemptions_are_capped_separately() -> None:
    d = leased_job(max_preemptions=3)
    d.release()
    d.grant()
    d.expire()
    d.grant()
    out = d.release()
    assert kinds(out) == ["LeaseReleased", "JobDeadLettered"]
    assert (out[1].reason, out[1].preemptions, out[1].attempts_used) == ("max_preemptions", 3, 0)
    assert d.s.status == Status.DEAD_LETTERED


def test_manual_requeue_gives_a_fresh_budget_and_keeps_the_checkpoints() -> None:
    d = leased_job(max_attempts=1)
    d.checkpoint(6, 30.0)
    d.release()
    d.grant()
    d.fail()
    assert d.s.status == Status.DEAD_LETTERED and d.s.preemptions == 1
    out = d.requeue()
    assert kinds(out) == ["JobRequeued"] and out[0].budget_reset and out[0].reason == "manual"
    s = d.s
    assert (s.status, s.attempts_used, s.preemptions, s.recent_failures_ms, s.terminal_reason) == (
        Status.QUEUED, 0, 0, (), None)
    leased = d.grant()[0]
    assert leased.epoch == 3 and leased.resume_step == 6 and leased.attempt == 3


def test_a_failed_job_can_be_requeued_too() -> None:
    d = leased_job()
    d.fail(retryable=False)
    assert kinds(d.requeue()) == ["JobRequeued"]
    assert d.s.status == Status.QUEUED


@settings(max_examples=examples(1000), deadline=None)
@given(
    job=st.text(min_size=1, max_size=12),
    failures=st.integers(min_value=1, max_value=80),
    base=st.integers(min_value=0, max_value=60_000),
    extra=st.integers(min_value=0, max_value=10**7),
)
def test_backoff_is_bounded_deterministic_and_jittered(job: str, failures: int, base: int, extra: int) -> None:
    cap = base + extra
    delay = retry.backoff_ms(job, failures, base, cap)
    nominal = min(cap, base * 2 ** (failures - 1))
    assert nominal // 2 <= delay <= nominal
    assert delay == retry.backoff_ms(job, failures, base, cap)


def test_backoff_grows_exponentially_until_the_cap() -> None:
    nominal = [retry.backoff_ms("j", n, 1_000, 10**9) for n in range(1, 8)]
    for n, delay in enumerate(nominal, start=1):
        assert 1_000 * 2 ** (n - 1) // 2 <= delay <= 1_000 * 2 ** (n - 1)
    assert retry.backoff_ms("j", 60, 1_000, 30_000) <= 30_000


def test_jitter_spreads_jobs_that_failed_together() -> None:
    delays = {retry.backoff_ms(f"job-{i}", 3, 2_000, 300_000) for i in range(50)}
    assert len(delays) > 40


def test_failure_decision_table() -> None:
    common = dict(job_id="j", max_attempts=3, now_ms=10_000, poison_threshold=3, poison_window_ms=1_000,
                  backoff_base_ms=100, backoff_max_ms=1_000)
    d = retry.on_visible_failure(retryable=True, attempts_used=0, recent_failures_ms=(), **common)
    assert d.outcome == retry.FailureOutcome.RETRY and d.attempts_used == 1 and 50 <= d.backoff_ms <= 100
    d = retry.on_visible_failure(retryable=True, attempts_used=2, recent_failures_ms=(), **common)
    assert (d.outcome, d.reason) == (retry.FailureOutcome.DEAD_LETTER, "max_attempts")
    d = retry.on_visible_failure(retryable=True, attempts_used=1, recent_failures_ms=(9_000, 9_500), **common)
    assert (d.outcome, d.reason) == (retry.FailureOutcome.DEAD_LETTER, "poison")
    d = retry.on_visible_failure(retryable=True, attempts_used=1, recent_failures_ms=(8_000, 9_500), **common)
    assert d.outcome == retry.FailureOutcome.RETRY
    d = retry.on_visible_failure(retryable=False, attempts_used=0, recent_failures_ms=(), **common)
    assert (d.outcome, d.reason) == (retry.FailureOutcome.FAILED, "non_retryable")


def _storage_failure(d: Driver) -> tuple:
    e, w = d.lease()
    return d.send(c.FailJob(d.next_id("fail"), d.job_id, e, w, retry.STORAGE_UNAVAILABLE,
                            "upload of video failed after 9 tries over 120.0 s: EndpointConnectionError", True))


def test_store_outage_failures_are_no_evidence_of_poison() -> None:
    """Three storage_unavailable failures inside the poison window retry (each costs an attempt), where three
    of any other kind dead-letter the job as poison; and they leave nothing in the window for a later one."""
    d = leased_job(max_attempts=10, poison_threshold=3, poison_window_ms=MINUTE)
    began = d.now
    for n in range(1, 4):
        out = _storage_failure(d)
        assert kinds(out) == ["AttemptFailed", "JobScheduled"], n
        assert out[0].error_code == "storage_unavailable" and out[0].attempts_used == n
        d.activate(advance=out[1].run_at_ms - d.now)  # straight after the backoff
        d.grant()
    assert d.now - began < MINUTE and d.s.recent_failures_ms == () and d.s.attempts_used == 3
    assert kinds(d.fail()) == ["AttemptFailed", "JobScheduled"]  # one real failure in the window, not three


def test_store_outage_failures_still_spend_attempts() -> None:
    d = leased_job(max_attempts=2)
    _storage_failure(d)
    d.activate(advance=10 * MINUTE)
    d.grant()
    out = _storage_failure(d)
    assert kinds(out) == ["AttemptFailed", "JobDeadLettered"] and out[1].reason == "max_attempts"


def test_poison_evidence_off_skips_only_the_poison_rule() -> None:
    common = dict(job_id="j", max_attempts=3, now_ms=10_000, poison_threshold=3, poison_window_ms=1_000,
                  backoff_base_ms=100, backoff_max_ms=1_000, retryable=True, poison_evidence=False)
    d = retry.on_visible_failure(attempts_used=1, recent_failures_ms=(9_000, 9_500), **common)
    assert d.outcome == retry.FailureOutcome.RETRY
    d = retry.on_visible_failure(attempts_used=2, recent_failures_ms=(9_000, 9_500), **common)
    assert (d.outcome, d.reason) == (retry.FailureOutcome.DEAD_LETTER, "max_attempts")
    assert not retry.counts_toward_poison("storage_unavailable") and retry.counts_toward_poison("oom")
