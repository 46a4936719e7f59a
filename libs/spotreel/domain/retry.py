"""Retry policy: what a visible failure or a lost lease does to a job. Pure arithmetic, no clock.

Two budgets, because preemption is not failure:

* `attempts_used` counts visible failures (FailJob). The failure that brings it to `max_attempts`
  dead-letters the job; before that the job retries after an exponential backoff with jitter.
* `preemptions` counts lost leases (ExpireLease) and graceful releases (ReleaseLease). Spot workers vanish
  for reasons that say nothing about the job, so these never touch `attempts_used`; they are capped only so
  a job that somehow always loses its worker cannot loop forever (default 50).

Poison: `poison_threshold` visible failures within `poison_window_ms` (the current one included) means the
job fails fast for a reason retries will not fix (bad prompt, model that crashes on load), so it is
dead-lettered at once instead of burning the rest of its attempts.

A failure whose error code is an outage of shared infrastructure (`INFRA_ERROR_CODES`: the object store did
not answer within the worker's storage budget) costs an attempt and backs off like any other, but is no
evidence of poison: it neither enters the poison window nor is judged by it. An outage hits every job in
flight at once, and a job that failed that way says nothing about its own inputs; counting it would
dead-letter healthy jobs as poison during one store outage (three in 60 s), though the worker's budget
(minutes) already spaces such failures of one job out. It still spends `max_attempts`, so an outage longer
than the attempts' budgets and backoffs together dead-letters the job (`max_attempts`), which a manual
requeue gives a fresh budget.

Jitter must not come from a random generator (decide stays a function of its inputs), so it is derived
from (job_id, attempt): replaying the history gives the same delay, and different jobs that failed
together still spread out.
"""

from __future__ import annotations

from dataclasses import dataclass

from spotreel.domain.ids import deterministic_fraction


# FailJob error codes that blame shared infrastructure, not the job (worker/job.py's STORAGE_UNAVAILABLE).
STORAGE_UNAVAILABLE = "storage_unavailable"
INFRA_ERROR_CODES = frozenset({STORAGE_UNAVAILABLE})


def counts_toward_poison(error_code: str) -> bool:
    return error_code not in INFRA_ERROR_CODES


class FailureOutcome:
    RETRY = "retry"
    FAILED = "failed"
    DEAD_LETTER = "dead_letter"


class DeadLetterReason:
    MAX_ATTEMPTS = "max_attempts"
    POISON = "poison"
    MAX_PREEMPTIONS = "max_preemptions"


@dataclass(frozen=True)
class FailureDecision:
    outcome: str
    attempts_used: int
    reason: str | None = None
    backoff_ms: int = 0


def backoff_ms(job_id: str, failures: int, base_ms: int, max_ms: int) -> int:
    """Delay before the next attempt after the `failures`-th visible failure (1-based).

    "Equal jitter": half of the capped exponential delay is fixed and half is spread by the jitter, so a
    retry never comes sooner than half the nominal delay yet jobs failing together do not retry together.
    """
    base_ms = max(0, base_ms)
    max_ms = max(base_ms, max_ms)
    exponent = min(max(failures, 1) - 1, 62)
    capped = min(max_ms, base_ms * (1 << exponent))
    half = capped // 2
    return half + int((capped - half) * deterministic_fraction(job_id, str(failures)))


def failures_in_window(recent_failures_ms: tuple[int, ...], now_ms: int, window_ms: int) -> tuple[int, ...]:
    """The failure times still inside the poison window ending at now_ms, oldest first."""
    return tuple(t for t in recent_failures_ms if now_ms - t <= window_ms)


def on_visible_failure(
    *,
    job_id: str,
    retryable: bool,
    attempts_used: int,
    max_attempts: int,
    recent_failures_ms: tuple[int, ...],
    now_ms: int,
    poison_threshold: int,
    poison_window_ms: int,
    backoff_base_ms: int,
    backoff_max_ms: int,
    poison_evidence: bool = True,
) -> FailureDecision:
    """`poison_evidence`: False for a failure that blames shared infrastructure (counts_toward_poison)."""
    used = attempts_used + 1
    if not retryable:
        return FailureDecision(FailureOutcome.FAILED, used, "non_retryable")
    recent = failures_in_window(recent_failures_ms, now_ms, poison_window_ms)
    if poison_evidence and len(recent) + 1 >= poison_threshold:
        return FailureDecision(FailureOutcome.DEAD_LETTER, used, DeadLetterReason.POISON)
    if used >= max_attempts:
        return FailureDecision(FailureOutcome.DEAD_LETTER, used, DeadLetterReason.MAX_ATTEMPTS)
    delay = backoff_ms(job_id, used, backoff_base_ms, backoff_max_ms)
    return FailureDecision(FailureOutcome.RETRY, used, None, delay)


def preemptions_exhausted(preemptions: int, max_preemptions: int) -> bool:
    """`preemptions` is the count including the one being decided."""
    return preemptions >= max_preemptions
