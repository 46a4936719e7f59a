"""Retry delays: exponential with full jitter, capped (a receiver that is down is not hammered in step
by every notifier replica), and a bounded number of attempts."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 8
    base_s: float = 1.0
    cap_s: float = 300.0
    timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1 or self.base_s <= 0 or self.cap_s < self.base_s or self.timeout_s <= 0:
            raise ValueError(f"bad retry policy {self}")

    def delay(self, failed_attempts: int, rnd: random.Random) -> float:
        """Seconds to wait after the `failed_attempts`-th failure: uniform in [0, min(cap, base·2^(n-1))]."""
        ceiling = min(self.cap_s, self.base_s * 2 ** min(failed_attempts - 1, 30))
        return rnd.uniform(0, ceiling)


def retryable(status: int) -> bool:
    """A receiver error worth retrying: server errors, timeouts and throttling. Other 4xx say the request
    itself is refused (410 Gone above all), and sending it again would not change that."""
    return status >= 500 or status in (408, 409, 425, 429)
