"""How far behind the gateway's event loop runs, and the work it turns away first while it is: load shedding
by criticality.

One task sleeps `every_s` at a time and notes how much later than asked it woke: the time the loop takes to
get through what is ready (every request read, every answer handed over). A gateway short of CPU, or with
a backlog in its sockets, shows it here before its clients time out.

While that lag is at or above a kind of request's threshold (GatewayConfig: `shed_idle_polls_lag_seconds`,
`shed_submissions_lag_seconds`; 0 never sheds), requests of that kind are answered at once with 503
`overloaded` and a Retry-After, before any Kafka or Cassandra work: an idle worker's lease poll (it asks
again later; a lease already waiting for it at the desk is still handed over) and a new submission or DAG
(the client retries with its Idempotency-Key). What a lease holder sends (renewals, progress, checkpoints,
completions, releases) is never shed: turning it away would cost the fleet its leases, the failure the
shedding is there to prevent (issue 11, the starved box in bench/README.md).
"""

from __future__ import annotations

import asyncio
import math

# A shed request is told to come back after the lag, within these bounds (seconds): a gateway that was far
# behind may have caught up long before its lag would say, and a request shed again costs next to nothing.
MIN_RETRY_S = 1
MAX_RETRY_S = 10


def retry_after_s(lag_ms: int, threshold_s: float) -> int | None:
    """Seconds to tell a shed request to wait, or None to serve it: shed while the loop's lag is at or above
    `threshold_s` (0: never), for as long as the loop is behind, within [MIN_RETRY_S, MAX_RETRY_S]."""
    if threshold_s <= 0 or lag_ms < threshold_s * 1000:
        return None
    return min(MAX_RETRY_S, max(MIN_RETRY_S, math.ceil(lag_ms / 1000)))


class LoopWatch:
    def __init__(self, every_s: float = 0.25, on_lag=lambda seconds: None) -> None:
        self.every_s = every_s
        self.lag_ms = 0
        self._on_lag = on_lag

    async def run(self) -> None:
        """Measures until cancelled."""
        loop = asyncio.get_running_loop()
        while True:
            asked = loop.time() + self.every_s
            await asyncio.sleep(self.every_s)
            self.lag_ms = max(0, int((loop.time() - asked) * 1000))
            self._on_lag(self.lag_ms / 1000)

    def shed(self, threshold_s: float) -> int | None:
        """Retry-After seconds for a request whose kind sheds at `threshold_s` of lag, None to serve it."""
        return retry_after_s(self.lag_ms, threshold_s)
