"""Bearer API keys → tenant. Keys are looked up by their SHA-256 (the only form stored), cached briefly so
a burst of requests costs one Cassandra read; a revoked key stops working within the cache time."""

from __future__ import annotations

import time

from aiohttp import web

from spotreel.platform.seed import api_key_hash
from spotreel.services.gateway.deps import AuthStore, Tenant
from spotreel.api.errors import ApiError

TENANT = web.RequestKey("tenant", Tenant)
# /metrics is not served here: the gateway serves it on its internal metrics port (app.serve_metrics).
PUBLIC_PATHS = frozenset({"/healthz", "/openapi.json"})
# Unknown keys are remembered for less time, so a key created a moment ago works almost at once.
NEGATIVE_CACHE_SECONDS = 2.0


class KeyCache:
    def __init__(self, store: AuthStore, ttl: float) -> None:
        self.store = store
        self.ttl = ttl
        self._entries: dict[str, tuple[float, Tenant | None]] = {}

    async def tenant(self, key: str) -> Tenant | None:
        digest = api_key_hash(key)
        now = time.monotonic()
        hit = self._entries.get(digest)
        if hit is not None and now < hit[0]:
            return hit[1]
        tenant = await self.store.tenant_for_key_hash(digest)
        if len(self._entries) > 10_000:
            self._entries.clear()  # bounded: guessed keys must not grow memory without limit
        self._entries[digest] = (now + (self.ttl if tenant else NEGATIVE_CACHE_SECONDS), tenant)
        return tenant


def _unauthorized(message: str) -> ApiError:
    return ApiError(401, "unauthorized", message)


def make_middleware(cache: KeyCache):
    @web.middleware
    async def authenticate(request: web.Request, handler):
        if request.path in PUBLIC_PATHS or request.path.startswith("/internal/"):
            # /internal/ carries worker credentials, checked by the worker sub-app itself.
            return await handler(request)
        header = request.headers.get("Authorization", "")
        scheme, _, key = header.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise _unauthorized("send the API key as 'Authorization: Bearer <key>'")
        tenant = await cache.tenant(key.strip())
        if tenant is None:
            raise _unauthorized("unknown API key")
        if tenant.disabled:
            raise ApiError(403, "tenant_disabled", "this tenant is disabled")
        request[TENANT] = tenant
        return await handler(request)

    return authenticate
