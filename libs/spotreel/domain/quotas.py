"""Per-tenant quotas: the in-flight cap used at dispatch and the rate limit used at admission.

The rate limit is a token bucket kept as plain state (``TokenBucket``) that the caller stores and passes
back in; ``admit`` returns the next state. It counts whole tokens refilled on a fixed integer period, so
that ``retry_after_ms`` is exact: asking again at ``now_ms + retry_after_ms`` is admitted (if nothing else
took the tokens), which a float bucket cannot promise.
"""

from __future__ import annotations

from dataclasses import dataclass


def has_in_flight_room(in_flight: int, max_in_flight: int | None) -> bool:
    return max_in_flight is None or in_flight < max_in_flight


@dataclass(frozen=True)
class RateLimit:
    burst: int
    per_token_ms: int

    def __post_init__(self) -> None:
        if self.burst < 1:
            raise ValueError(f"rate limit burst must be >= 1, got {self.burst}")
        if self.per_token_ms < 1:
            raise ValueError(f"rate limit per_token_ms must be >= 1, got {self.per_token_ms}")

    @classmethod
    def per_second(cls, rate: float, burst: int) -> RateLimit:
        if not rate > 0:
            raise ValueError(f"rate must be positive, got {rate}")
        # Millisecond granularity caps the expressible rate at 1000/s, ample for job submission.
        return cls(burst=burst, per_token_ms=max(1, round(1000 / rate)))


@dataclass(frozen=True)
class TokenBucket:
    tokens: int
    updated_ms: int

    @classmethod
    def full(cls, limit: RateLimit, now_ms: int) -> TokenBucket:
        return cls(tokens=limit.burst, updated_ms=now_ms)


@dataclass(frozen=True)
class Admission:
    admitted: bool
    bucket: TokenBucket
    retry_after_ms: int


def refill(bucket: TokenBucket, limit: RateLimit, now_ms: int) -> TokenBucket:
    if now_ms <= bucket.updated_ms:
        return bucket
    earned, _ = divmod(now_ms - bucket.updated_ms, limit.per_token_ms)
    tokens = bucket.tokens + earned
    if tokens >= limit.burst:
        # A full bucket stops earning, so the partial period must not carry over either.
        return TokenBucket(tokens=limit.burst, updated_ms=now_ms)
    # Keep the unspent part of the current period by advancing the stamp only by whole periods.
    return TokenBucket(tokens=tokens, updated_ms=bucket.updated_ms + earned * limit.per_token_ms)


def admit(bucket: TokenBucket | None, limit: RateLimit, now_ms: int, cost: int = 1) -> Admission:
    if not 1 <= cost <= limit.burst:
        raise ValueError(f"cost must be between 1 and the burst ({limit.burst}), got {cost}")
    current = refill(bucket if bucket is not None else TokenBucket.full(limit, now_ms), limit, now_ms)
    if current.tokens >= cost:
        return Admission(True, TokenBucket(current.tokens - cost, current.updated_ms), 0)
    missing = cost - current.tokens
    # updated_ms may sit ahead of now_ms only if the caller's clock went back; never report a negative wait.
    until_next = current.updated_ms + limit.per_token_ms - now_ms
    retry = max(1, until_next + (missing - 1) * limit.per_token_ms)
    return Admission(False, current, retry)


def refund(bucket: TokenBucket | None, limit: RateLimit, now_ms: int, cost: int = 1) -> TokenBucket:
    """Give back tokens taken for work that turned out not to be new (a replayed submission), never above the
    burst; a bucket never charged is full already."""
    if bucket is None:
        return TokenBucket.full(limit, now_ms)
    current = refill(bucket, limit, now_ms)
    if current.tokens + cost >= limit.burst:
        return TokenBucket(tokens=limit.burst, updated_ms=max(now_ms, current.updated_ms))
    return TokenBucket(tokens=current.tokens + cost, updated_ms=current.updated_ms)
