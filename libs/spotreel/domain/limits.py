"""A job's time limits: the rendering timeout and the stuck rule. Pure arithmetic on state, no clock.

Both are deadlines of the current lease that `timers.timers_for` arms and the scheduler fires as an
`ExpireLease` with `rule` TIMEOUT or STUCK; `decide` (leases.enforce) judges that command at the time it
entered the commands log, like the lease expiry (leases.judged_at), so a report appended before the
deadline is always applied before the timer that it makes moot.

Timeout (`timeout_ms`, None = none): the job's rendering wall time, summed across attempts, may not exceed it.
  Rendering time is the time a job holds a lease: from JobLeased to the event that ended the lease (success,
  failure, expiry, release, cancel or pause confirmed), in the control plane's clock. A lease handed back as
  unclaimed never reached a worker and counts nothing; a manual requeue (RequeueJob) starts the sum over.
  The current lease's deadline is `granted_at + timeout_ms - render_ms`. Past it the lease is ended and the
  job fails for good: AttemptFailed(error_code "timeout", not retryable) + JobFailed(reason "timeout").
  Time spent queued, scheduled, in a retry backoff or paused does not count.

Stuck (`stuck_steps` N, `stuck_min_ms` floor; N = 0 disables it): a lease whose denoising step has not
  advanced for `max(stuck_min_ms, N x expected_step_ms)` is stuck. The expected step time is measured from the
  job's own steps under the current lease: (time of its latest step advance - time the lease was granted) /
  (steps advanced since the grant), i.e. the lease's mean time per step so far, startup included (so it
  errs long). Until a step has advanced it is unknown and the floor alone applies. A step advance is an
  accepted ProgressReported or CheckpointRecorded naming a higher step than the lease's latest. The rule
  watches the lease from its grant through the denoising steps; in the finishing phases (decoding, encoding,
  uploading: no steps there) it is off, and only the lease TTL and the timeout apply. A stuck lease is ended
  as a visible, retryable failure, the same as a FailJob(error_code "stuck") from the worker: AttemptFailed
  + JobScheduled(backoff), or dead-lettered by max_attempts / poison. The scheduler sees a step only when
  the worker reports it (every few seconds), so its judgement lags the worker's own watchdog
  (worker/stuck.py), which applies the same rule per step and reports first.
"""

from __future__ import annotations

import math

from spotreel.domain import images
from spotreel.domain.state import JobState, Status


class Rule:
    """ExpireLease.rule: which deadline of the lease the timer enforces."""

    TTL = "ttl"
    TIMEOUT = "timeout"
    STUCK = "stuck"

    ALL = frozenset({TTL, TIMEOUT, STUCK})


# Phases after the last denoising step: no step advances there, so the stuck rule does not apply.
FINISHING_PHASES = frozenset({"decoding", "encoding", "uploading"})

# The latest time a job or schedule may name (run_at, start_at): the last millisecond of year 9999, the latest a
# Python datetime holds. The read model stores these as CQL timestamps, and a later one cannot be decoded by the
# Python driver, which then drops its connection: one such row would make every read of the gateway fail
# (a run_at of 2**53 ms, as an API fuzzer draws, is one).
MAX_TIME_MS = 253_402_300_799_999
# The lease TTL a worker may ask for over HTTP (the gateway answers 422 outside it). The domain itself only
# refuses a TTL that is not positive or would end a lease past MAX_TIME_MS (lease_ttl_fits).
MIN_LEASE_TTL_MS = 1_000
MAX_LEASE_TTL_MS = 86_400_000  # a day


def lease_ttl_fits(ttl_ms: int, now_ms: int) -> bool:
    """A lease of `ttl_ms` granted at `now_ms` has a positive length and ends at a time the read model can hold."""
    return 0 < ttl_ms and now_ms + ttl_ms <= MAX_TIME_MS

# Limits on the policy a submission may set (the gateway answers 422 naming the field and the limit; a
# SubmitJob over Kafka beyond them is refused with invalid_request).
MAX_ATTEMPTS = 20
MAX_BACKOFF_MS = 86_400_000  # a day
MIN_TIMEOUT_MS = 1_000
MAX_TIMEOUT_MS = 7 * 86_400_000  # a week
MAX_STUCK_STEPS = 1_000
MIN_STUCK_MS = 1_000
MAX_STUCK_MS = 86_400_000

# Render options a job may set (None: its model's default, which the worker takes from the registry entry or
# its own flags). Which samplers a model takes is the registry's business (the gateway checks it); the domain
# holds what no model can take.
MIN_GUIDANCE_SCALE = 1.0
MAX_GUIDANCE_SCALE = 50.0
MAX_SAMPLER_CHARS = 32

DEFAULT_STUCK_STEPS = 10
DEFAULT_STUCK_MIN_MS = 120_000


def policy_problem(*, max_attempts: int, backoff_base_ms: int, backoff_max_ms: int, timeout_ms: int | None,
                   stuck_steps: int, stuck_min_ms: int) -> str | None:
    """The first limit a submission's retry and time policy breaks, naming the field and the limit."""
    checks = (
        (1 <= max_attempts <= MAX_ATTEMPTS, f"max_attempts must be between 1 and {MAX_ATTEMPTS}"),
        (0 <= backoff_base_ms <= MAX_BACKOFF_MS, f"backoff_base_ms must be between 0 and {MAX_BACKOFF_MS}"),
        (backoff_base_ms <= backoff_max_ms <= MAX_BACKOFF_MS,
         f"backoff_max_ms must be between backoff_base_ms and {MAX_BACKOFF_MS}"),
        (timeout_ms is None or MIN_TIMEOUT_MS <= timeout_ms <= MAX_TIMEOUT_MS,
         f"timeout_ms must be null or between {MIN_TIMEOUT_MS} and {MAX_TIMEOUT_MS}"),
        (0 <= stuck_steps <= MAX_STUCK_STEPS, f"stuck_steps must be between 0 and {MAX_STUCK_STEPS}"),
        (MIN_STUCK_MS <= stuck_min_ms <= MAX_STUCK_MS, f"stuck_min_ms must be between {MIN_STUCK_MS} and {MAX_STUCK_MS}"),
    )
    return next((why for ok, why in checks if not ok), None)


def render_problem(*, guidance_scale: float | None, negative_prompt: str | None, sampler: str | None,
                   input_image: str | None = None) -> str | None:
    """The first limit a job's render options break, naming the field (None: they are fine)."""
    image = images.problem(input_image)
    checks = (
        (guidance_scale is None or MIN_GUIDANCE_SCALE <= guidance_scale <= MAX_GUIDANCE_SCALE,
         f"guidance_scale must be null or between {MIN_GUIDANCE_SCALE:g} and {MAX_GUIDANCE_SCALE:g}"),
        (negative_prompt is None or "\x00" not in negative_prompt, "negative_prompt must not contain NUL"),
        (sampler is None or (0 < len(sampler) <= MAX_SAMPLER_CHARS and sampler.isascii() and sampler.isidentifier()),
         f"sampler must be null or a sampler name (letters, digits, _; up to {MAX_SAMPLER_CHARS})"),
        (image is None, image or ""),
    )
    return next((why for ok, why in checks if not ok), None)


def _held(state: JobState | None) -> bool:
    return state is not None and state.lease is not None and state.status in Status.HOLDING_LEASE


def render_ms_at(state: JobState, now_ms: int) -> int:
    """Rendering wall time used by `now_ms`: the ended leases' plus the current lease's so far."""
    current = max(0, now_ms - state.lease.granted_at_ms) if state.lease is not None else 0
    return state.render_ms + current


def timeout_at(state: JobState | None) -> int | None:
    """When the current lease uses up the job's rendering time; None without a timeout or a lease."""
    if not _held(state) or state.timeout_ms is None:  # type: ignore[union-attr]
        return None
    assert state is not None and state.lease is not None
    return state.lease.granted_at_ms + max(0, state.timeout_ms - state.render_ms)


def expected_step_ms(state: JobState) -> float | None:
    """The current lease's mean time per step so far (see the module doc); None before a step advanced."""
    if state.lease is None or state.step_mark is None:
        return None
    origin_step = state.step_origin
    mark_step, mark_at = state.step_mark
    if mark_step <= origin_step:
        return None
    return (mark_at - state.lease.granted_at_ms) / (mark_step - origin_step)


def stuck_after_ms(state: JobState) -> int:
    expected = expected_step_ms(state)
    if expected is None:
        return state.stuck_min_ms
    return max(state.stuck_min_ms, math.ceil(state.stuck_steps * expected))


def stuck_at(state: JobState | None) -> int | None:
    """When the current lease counts as stuck if no step advances before; None when the rule is off."""
    if not _held(state):
        return None
    assert state is not None
    if state.stuck_steps <= 0 or state.step_mark is None:
        return None
    return state.step_mark[1] + stuck_after_ms(state)
