"""How far behind the gateway runs, and the work it turns away first while it is: load shedding by
criticality.

Three measures, taken together (`behind_ms`, the largest of them):
- the event loop's lag: one task sleeps `every_s` at a time and notes how much later than asked it woke (the
  time the loop takes to get through what is ready);
- how old the worker requests are when a handler starts on them: the worker's send time
  (`X-Spotreel-Sent-At`) to now, the median of those read in the last `window_s`; requests waiting in the
  gateway's sockets show here, and not in the loop's lag, while the process is short of CPU;
- how long the scheduler takes to judge lease holders' commands (the verdict wait; `verdict_seconds` for
  one still pending), the median of the last `window_s`: the control plane behind the gateway.
A median of at least MIN_SAMPLES, so one worker's clock off by seconds or one slow verdict sheds nothing, and
behind for SUSTAIN measurements in a row (3 s), so a backlog worked off after a freeze sheds nothing either.
Why all three: at twice the peak's demand the loop's lag alone stays under its threshold while renewals wait
for many seconds and live workers lose their leases (docs/decisions/0006-load-shedding-by-how-far-behind.md).

While `behind_ms` is at or above a kind of request's threshold (GatewayConfig: `shed_idle_polls_lag_seconds`,
`shed_submissions_lag_seconds`; 0 never sheds), requests of that kind are answered at once with 503
`overloaded` and a Retry-After, before any Kafka or Cassandra work: an idle worker's lease poll (it asks
again later; a lease already waiting for it at the desk is still handed over) and a new submission or DAG
(the client retries with its Idempotency-Key). What a lease holder sends (renewals, progress, checkpoints,
completions, releases) is never shed: turning it away would cost the fleet its leases, the failure the
shedding is there to prevent.
"""

from __future__ import annotations

import asyncio
import math
import statistics
import time
from collections import deque
from typing import Callable

# A shed request is told to come back after the lag, within these bounds (seconds): a gateway that was far
# behind may have caught up long before its lag would say, and a request shed again costs next to nothing.
MIN_RETRY_S = 1
MAX_RETRY_S = 10


def retry_after_s(behind_ms: int, threshold_s: float) -> int | None:
    """Seconds to tell a shed request to wait, or None to serve it: shed while the gateway is `threshold_s`
    or more behind (0: never), for as long as it is behind, within [MIN_RETRY_S, MAX_RETRY_S]."""
    if threshold_s <= 0 or behind_ms < threshold_s * 1000:
        return None
    return min(MAX_RETRY_S, max(MIN_RETRY_S, math.ceil(behind_ms / 1000)))


# Samples a median needs before it counts.
MIN_SAMPLES = 8
# Measurements in a row (every 250 ms: 3 s) the gateway must have been behind before it sheds: right after a
# freeze the backlog it reads is old, and shedding it then (submissions, idle polls) would drain it faster
# than a worker given a lease held through the freeze could renew it, costing that worker its lease.
SUSTAIN = 12


def recent_median(samples: deque[tuple[float, int]], now: float, window_s: float) -> int:
    """The median of the values noted within `window_s` of `now` (older ones dropped from the left); 0 with
    fewer than MIN_SAMPLES."""
    while samples and samples[0][0] < now - window_s:
        samples.popleft()
    if len(samples) < MIN_SAMPLES:
        return 0
    return int(statistics.median(v for _, v in samples))


class LoopWatch:
    def __init__(self, every_s: float = 0.25, window_s: float = 2.0, sustain: int = SUSTAIN,
                 on_measure: Callable[[float], None] = lambda s: None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.every_s = every_s
        self.window_s = window_s
        self.lag_ms = 0
        # What shedding goes by: the largest of the three measures, as low as it was over the last `sustain`
        # measurements (a backlog worked off within that long after a freeze sheds nothing).
        self.behind_ms = 0
        self._measured: deque[int] = deque(maxlen=max(1, sustain))
        self._ages: deque[tuple[float, int]] = deque(maxlen=4096)
        self._waits: deque[tuple[float, int]] = deque(maxlen=4096)
        self._on_measure = on_measure  # seconds behind, after each measurement
        self._clock = clock

    def note_age(self, ms: int) -> None:
        """A worker request's age when its handler started (its send time to now)."""
        self._ages.append((self._clock(), ms))

    def note_verdict_wait(self, ms: int) -> None:
        """How long a lease holder's command waited for the scheduler's verdict."""
        self._waits.append((self._clock(), ms))

    def measure(self) -> int:
        now = self._clock()
        self._measured.append(max(self.lag_ms, recent_median(self._ages, now, self.window_s),
                                  recent_median(self._waits, now, self.window_s)))
        self.behind_ms = min(self._measured)
        return self.behind_ms

    async def run(self) -> None:
        """Measures until cancelled."""
        loop = asyncio.get_running_loop()
        while True:
            asked = loop.time() + self.every_s
            await asyncio.sleep(self.every_s)
            self.lag_ms = max(0, int((loop.time() - asked) * 1000))
            self._on_measure(self.measure() / 1000)

    def shed(self, threshold_s: float) -> int | None:
        """Retry-After seconds for a request whose kind sheds at `threshold_s` behind, None to serve it."""
        return retry_after_s(self.behind_ms, threshold_s)
