"""S3 calls of a render retried within a time budget, so that a store that blips or restarts costs the job
time, not an attempt.

Each call is first retried by botocore itself (SPOTREEL_S3_RETRY_MODE, _MAX_ATTEMPTS, short connect and read
timeouts: spotreel.platform.s3). That rides out a lost packet or one 503, but not a store that is down for
20 s, and botocore knows nothing of what the call is for. Here the worker adds what only it knows: how long
this call may take in all (a periodic checkpoint little, the final video much more), exponential backoff with
jitter between the tries, and when to stop early (a preemption notice, a lease already lost).

`Budget.wait_before` and `transient` are pure; `call_within` runs them with a clock, a sleep and a random
source that tests replace.

The budget bounds when a try may start, not how long the last one runs: a try started just before the budget
ends may take up to one call's own bound (botocore's tries times the read timeout, plus its backoff) more.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from typing import Callable, TypeVar

log = logging.getLogger("spotreel.worker.storage")

T = TypeVar("T")

# Answers of a store that is overloaded, restarting or briefly unable to serve: worth another try.
TRANSIENT_CODES = frozenset({
    "InternalError", "ServiceUnavailable", "SlowDown", "Throttling", "ThrottlingException", "RequestTimeout",
    "RequestTimeoutException", "PriorRequestNotComplete", "RequestLimitExceeded", "TooManyRequests",
    "BandwidthLimitExceeded", "EC2ThrottledException", "OperationAborted",
})


@dataclass(frozen=True)
class StorageBudgets:
    """Seconds within which a try of an S3 call may still start: `checkpoint_s` for a periodic or emergency
    checkpoint (skipped past it), `storage_s` for what the job cannot do without, the resume checkpoint's read
    and the video's upload (the attempt fails past it). `spotreel worker --checkpoint-budget/--storage-budget`."""

    checkpoint_s: float = 10.0
    storage_s: float = 120.0


@dataclass(frozen=True)
class Budget:
    """`total_s`: how long after the first try another may still start. Delays: equal jitter on a capped
    exponential (half of min(cap, base * 2^(n-1)) fixed, half spread by the jitter), as the domain's retry
    backoff, so a fleet that lost its store together does not come back in step."""

    total_s: float
    base_s: float = 0.25
    cap_s: float = 4.0

    def __post_init__(self) -> None:
        if not (self.total_s >= 0 and self.base_s > 0 and self.cap_s >= self.base_s):
            raise ValueError(f"bad storage budget {self}")

    def delay(self, failures: int, fraction: float) -> float:
        """Seconds to wait after the `failures`-th failed try (1-based); `fraction` in [0, 1) is the jitter."""
        ceiling = min(self.cap_s, self.base_s * 2 ** min(max(failures, 1) - 1, 30))
        return ceiling / 2 + ceiling / 2 * min(max(fraction, 0.0), 1.0)

    def wait_before(self, failures: int, elapsed_s: float, fraction: float) -> float | None:
        """The wait before the next try after `failures` failed ones and `elapsed_s` since the first began;
        None when no try can start inside the budget any more. A wait that would end past the budget is cut
        to end on its edge, for one last try, when at least `base_s` is left (less is not worth a try)."""
        left = self.total_s - elapsed_s
        wait = self.delay(failures, fraction)
        if wait <= left:
            return wait
        return left if left >= self.base_s else None


def transient(exc: BaseException) -> bool:
    """An error another try may not repeat: the store unreachable, a timeout, a connection cut mid-answer,
    throttling, a 5xx. A 4xx (missing key, refused precondition, denied) says the same the next time."""
    # Imported here: `spotreel worker`'s option parsing imports this module (StorageBudgets), botocore need not.
    from botocore.exceptions import BotoCoreError, ClientError, ConnectionError as BotoConnectionError
    from botocore.exceptions import HTTPClientError, IncompleteReadError

    if isinstance(exc, (BotoConnectionError, HTTPClientError, IncompleteReadError)):
        return True
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {}) or {}
        status = int((exc.response.get("ResponseMetadata", {}) or {}).get("HTTPStatusCode") or 0)
        return status >= 500 or status in (408, 429) or error.get("Code") in TRANSIENT_CODES
    if isinstance(exc, BotoCoreError):
        return False
    return isinstance(exc, (ConnectionError, TimeoutError))  # the socket's own, outside botocore's wrapping


class StorageUnavailable(Exception):
    """The store did not answer within the budget (or the worker stopped trying: `interrupted`)."""

    def __init__(self, what: str, tries: int, elapsed_s: float, last: BaseException, interrupted: bool = False):
        self.what, self.tries, self.elapsed_s, self.last, self.interrupted = what, tries, elapsed_s, last, interrupted
        how = "stopped" if interrupted else "failed"
        super().__init__(f"{what} {how} after {tries} {'try' if tries == 1 else 'tries'} over {elapsed_s:.1f} s: "
                         f"{type(last).__name__}: {last}")


def call_within(budget: Budget, what: str, call: Callable[[], T], *, stop: Callable[[], bool] = lambda: False,
                on_retry: Callable[[BaseException], None] = lambda exc: None,
                clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], object] = time.sleep,
                rnd: Callable[[], float] = random.random) -> T:
    """`call()` until it returns, raises a non-transient error (re-raised as is), the budget runs out or
    `stop()` says to give up (both StorageUnavailable). `on_retry` sees each transient error that is retried."""
    began = clock()
    tries = 0
    while True:
        tries += 1
        try:
            return call()
        except Exception as exc:
            if not transient(exc):
                raise
            elapsed = clock() - began
            wait = budget.wait_before(tries, elapsed, rnd())
            if wait is None or stop():
                raise StorageUnavailable(what, tries, elapsed, exc, interrupted=wait is not None) from exc
            log.warning("%s: try %d failed (%s: %s); again in %.2f s", what, tries, type(exc).__name__, exc, wait)
            on_retry(exc)
            sleep(wait)
            if stop():
                raise StorageUnavailable(what, tries, clock() - began, exc, interrupted=True) from exc
