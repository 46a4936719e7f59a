"""One webhook, delivered: signed POST, retried with backoff and jitter, never to a refused address."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from typing import Awaitable, Callable

import aiohttp

from spotreel.webhooks import signing
from spotreel.services.webhooks.addresses import GuardedResolver, RefusedAddress, check_url
from spotreel.services.webhooks.backoff import RetryPolicy, retryable
from spotreel.services.webhooks.payload import Notification
from spotreel.services.webhooks.store import DeliveryResult

USER_AGENT = "spotreel-webhooks/1"


class Stopping(Exception):
    """The notifier is shutting down mid-backoff; the event stays uncommitted and is re-read after restart."""


@dataclass(frozen=True)
class Attempt:
    ok: bool
    retry: bool
    status: int | None = None
    error: str | None = None
    refused: bool = False


class Sender:
    def __init__(self, policy: RetryPolicy, allow_private: bool, *, rnd: random.Random | None = None,
                 clock_s: Callable[[], float] = time.time) -> None:
        self.policy = policy
        self.allow_private = allow_private
        self.rnd = rnd or random.Random()
        self.clock_s = clock_s
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> "Sender":
        connector = aiohttp.TCPConnector(resolver=GuardedResolver(self.allow_private), use_dns_cache=False,
                                         limit=200, limit_per_host=20)
        # trust_env=False: no proxy from the environment, which would bypass the address checks.
        self._session = aiohttp.ClientSession(connector=connector, trust_env=False,
                                              timeout=aiohttp.ClientTimeout(total=self.policy.timeout_s),
                                              headers={"User-Agent": USER_AGENT})
        return self

    async def __aexit__(self, *exc) -> None:
        if self._session is not None:
            await self._session.close()

    async def attempt(self, url: str, secret: str | tuple[str, ...], note: Notification) -> Attempt:
        assert self._session is not None, "use Sender as an async context manager"
        try:
            await check_url(url, self.allow_private)
            hdrs = signing.headers(secret, int(self.clock_s()), note.body, note.event_id, note.event_type)
            # No redirects: a 30x to an internal address would walk around the address checks.
            async with self._session.post(url, data=note.body, headers=hdrs, allow_redirects=False) as resp:
                await resp.read()
                if 200 <= resp.status < 300:
                    return Attempt(True, False, resp.status)
                return Attempt(False, retryable(resp.status), resp.status, f"receiver answered {resp.status}")
        except RefusedAddress as exc:
            return Attempt(False, False, error=str(exc), refused=True)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            return Attempt(False, True, error=f"{type(exc).__name__}: {exc}"[:500])

    async def deliver(self, url: str, secret: str | tuple[str, ...], note: Notification,
                      on_failure: Callable[[Attempt, int], Awaitable[None]] | None = None,
                      stop: asyncio.Event | None = None) -> DeliveryResult:
        """Attempts until one succeeds, one fails for good, or `policy.max_attempts` are used."""
        last = Attempt(False, True)
        for n in range(1, self.policy.max_attempts + 1):
            last = await self.attempt(url, secret, note)
            if last.ok:
                return DeliveryResult("delivered", n, last.status, None)
            if last.refused:
                return DeliveryResult("refused", n, None, last.error)
            if not last.retry:
                return DeliveryResult("failed", n, last.status, last.error)
            if on_failure is not None:
                await on_failure(last, n)
            if n < self.policy.max_attempts:
                delay = self.policy.delay(n, self.rnd)
                if stop is None:
                    await asyncio.sleep(delay)
                else:
                    try:
                        await asyncio.wait_for(stop.wait(), delay)
                    except asyncio.TimeoutError:
                        pass
                    if stop.is_set():
                        raise Stopping()
        return DeliveryResult("gave_up", self.policy.max_attempts, last.status, last.error)
