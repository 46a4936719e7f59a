"""Opaque, authenticated page tokens for GET /v1/videos.

A token is Cassandra's paging state plus an HMAC over (tenant, status filter, state). Only tokens this
gateway issued reach Cassandra: the driver answers a malformed paging state with a protocol error and
closes its connection, so a forged token would otherwise let any tenant reset the gateway's Cassandra
connections at will. The key comes from SPOTREEL_GATEWAY_TOKEN_KEY (share it between replicas); without
it each process makes its own, and a token from another replica or before a restart is refused (422: start
the listing again).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets

MAC_BYTES = 16


class BadToken(ValueError):
    pass


class PageTokens:
    def __init__(self, key: str = "") -> None:
        self.key = key.encode() if key else secrets.token_bytes(32)

    def _mac(self, tenant: str, status: str | None, state: bytes) -> bytes:
        msg = tenant.encode() + b"\x00" + (status or "").encode() + b"\x00" + state
        return hmac.new(self.key, msg, hashlib.sha256).digest()[:MAC_BYTES]

    def issue(self, tenant: str, status: str | None, state: bytes | None) -> str | None:
        if not state:
            return None
        raw = self._mac(tenant, status, state) + state
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    def state(self, tenant: str, status: str | None, token: str | None) -> bytes | None:
        if not token:
            return None
        try:
            raw = base64.urlsafe_b64decode(token.encode() + b"=" * (-len(token) % 4))
        except (binascii.Error, ValueError, UnicodeEncodeError):
            raise BadToken("not base64") from None
        mac, state = raw[:MAC_BYTES], raw[MAC_BYTES:]
        if not state or not hmac.compare_digest(mac, self._mac(tenant, status, state)):
            raise BadToken("not issued here for this listing")
        return state
