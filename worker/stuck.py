"""The worker's own stuck rule: its denoising step stopped advancing, so it reports and lets the lease go.

The pulse thread renews the lease whatever the render loop does (pulse.py), so a step that hangs (a wedged
GPU, a deadlocked kernel) would otherwise hold the lease, and the GPU, for ever. `StepWatch` applies the
domain's rule (libs/spotreel/domain/limits.py) on the worker's side, per step instead of per report: the run
is stuck when no step advanced for `max(min_s, steps x expected)`, where `expected` is the mean time per step
since the run started (unknown before the first step, when `min_s` alone applies). It is off in the
finishing phases (decoding, encoding, uploading) and when `steps` is 0.

What happens then (pulse.py, job.py, runtime.py): the pulse sends FailJob(error_code "stuck", retryable), which
ends the lease as a visible failure (the job is retried after its backoff, on another worker if one asks
first), and stops renewing. A hung Python thread cannot be stopped, so if the step has not returned within
`STUCK_GRACE_S` the worker exits with status `STUCK_EXIT` (75, EX_TEMPFAIL): the GPU may be wedged and a fresh
process (started by the capacity manager or a supervisor) is the way back. The scheduler applies the same rule
to the reports it receives, so a worker whose watchdog is off, or that cannot reach the control plane, is
fenced all the same; with equal settings the worker's judgement comes first (it sees every step, the
scheduler only the reports, every few seconds).
"""

from __future__ import annotations

import threading
import time
from typing import Callable

STUCK_EXIT = 75
STUCK_GRACE_S = 5.0
# Same defaults as a job submitted without them (SubmitJob.stuck_steps / stuck_min_ms).
DEFAULT_STEPS = 10
DEFAULT_MIN_S = 120.0


class StepWatch:
    def __init__(self, steps: int, min_s: float, start_step: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.steps = steps
        self.min_s = min_s
        self._clock = clock
        self._lock = threading.Lock()
        now = clock()
        self._origin = (start_step, now)
        self._mark = (start_step, now)
        self._active = steps > 0

    def advanced(self, step: int) -> None:
        with self._lock:
            if step > self._mark[0]:
                self._mark = (step, self._clock())

    def finishing(self) -> None:
        """Past the last step: no more advances to wait for."""
        with self._lock:
            self._active = False

    def expected_s(self) -> float | None:
        with self._lock:
            (s0, t0), (s1, t1) = self._origin, self._mark
        return (t1 - t0) / (s1 - s0) if s1 > s0 else None

    def allowance_s(self) -> float:
        expected = self.expected_s()
        return self.min_s if expected is None else max(self.min_s, self.steps * expected)

    def overdue(self) -> str | None:
        """Why the run counts as stuck now, or None."""
        with self._lock:
            active, (step, at) = self._active, self._mark
        if not active:
            return None
        idle, allowance = self._clock() - at, self.allowance_s()
        if idle <= allowance:
            return None
        expected = self.expected_s()
        return (f"no step advance for {idle:.1f} s after step {step} (limit {allowance:.1f} s: "
                f"{self.steps} x {expected or 0:.3f} s per step, at least {self.min_s:.1f} s)")
