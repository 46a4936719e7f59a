"""Opaque, authenticated page tokens for GET /v1/videos.

A token is Cassandra's paging state plus an HMAC over (tenant, status filter, state). Only tokens this
gateway issued reach Cassandra: the driver answers a malformed paging state with a protocol error and
closes its connection, so a forged token would otherwise let any tenant reset the gateway's Cassandra
connections at will. The key comes from SPOTREEL_GATEWAY_TOKEN_KEY (share it between replicas); without
it each process makes its own, and a token from another replica or before a restart is refused.

Two refusals, as /openapi.json states them: a page_token not of the form TOKEN describes (base64url, the MAC
and at least one byte of state) is 422, as any malformed field; one of that form that does not verify (issued
before a restart or by another replica without the shared key, for another listing, or made up) is 409
`stale_page_token`: a well-formed token is refused for the state of the server, not its spelling, and the
answer is the same whoever made it, so a forger learns nothing from it. Either way: list again from the start.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets

from spotreel.api.errors import ApiError, invalid

MAC_BYTES = 16
# Unpadded base64url of MAC_BYTES of MAC and at least one byte of paging state: 23 characters or more.
TOKEN = re.compile(r"[A-Za-z0-9_-]{%d,}" % -(-(MAC_BYTES + 1) * 4 // 3))
RESTART = "list again from the start"


class BadToken(ValueError):
    """Of the documented form, but not a token this gateway issued for this listing (or no longer valid)."""


class MalformedToken(BadToken):
    """Not of the documented form (TOKEN)."""


def refusal(exc: ValueError) -> ApiError:
    """The answer to a refused page_token: MalformedToken 422; BadToken, or a state Cassandra refused, 409."""
    if isinstance(exc, MalformedToken):
        return invalid("page_token", f"page_token must be a next_page_token this API returned ({TOKEN.pattern}): "
                                     + RESTART)
    return ApiError(409, "stale_page_token", "page_token is not one this API issued for this listing as it signs "
                    "them now (e.g. from before a restart): " + RESTART, field="page_token")


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
        if token is None:
            return None
        if not TOKEN.fullmatch(token):
            raise MalformedToken("not of the documented form")
        try:
            raw = base64.urlsafe_b64decode(token.encode() + b"=" * (-len(token) % 4))
        except (binascii.Error, ValueError, UnicodeEncodeError):
            raise BadToken("not base64") from None
        mac, state = raw[:MAC_BYTES], raw[MAC_BYTES:]
        if not state or not hmac.compare_digest(mac, self._mac(tenant, status, state)):
            raise BadToken("not issued here for this listing")
        return state
