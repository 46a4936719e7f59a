"""Webhook signatures: HMAC-SHA256 over "<timestamp>.<body>" with the tenant's secret.

The timestamp is inside the signed text so a captured request cannot be replayed later with a fresh
timestamp; receivers refuse timestamps outside a tolerance window (`verify`). The event id travels in its
own header so receivers can drop a re-delivery they already handled.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping

TIMESTAMP_HEADER = "Spotreel-Timestamp"
SIGNATURE_HEADER = "Spotreel-Signature"
EVENT_ID_HEADER = "Spotreel-Event-Id"
EVENT_TYPE_HEADER = "Spotreel-Event-Type"
SCHEME = "v1"
DEFAULT_TOLERANCE_S = 300


def new_secret() -> str:
    return "whsec_" + secrets.token_urlsafe(32)


def signature(secret: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret.encode(), str(timestamp).encode() + b"." + body, hashlib.sha256)
    return f"{SCHEME}={mac.hexdigest()}"


def headers(secret: str, timestamp: int, body: bytes, event_id: str, event_type: str) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: signature(secret, timestamp, body),
        EVENT_ID_HEADER: event_id,
        EVENT_TYPE_HEADER: event_type,
    }


class BadSignature(ValueError):
    pass


def verify(secret: str, got: Mapping[str, str], body: bytes, now_s: int,
           tolerance_s: int = DEFAULT_TOLERANCE_S) -> None:
    """What a receiver does: raise BadSignature unless the request is signed with `secret` and fresh."""
    raw_ts = got.get(TIMESTAMP_HEADER)
    if raw_ts is None or not raw_ts.isdigit():
        raise BadSignature(f"missing or malformed {TIMESTAMP_HEADER}")
    ts = int(raw_ts)
    if abs(now_s - ts) > tolerance_s:
        raise BadSignature(f"timestamp {ts} is more than {tolerance_s}s away from now ({now_s})")
    given = [part.strip() for part in got.get(SIGNATURE_HEADER, "").split(",")]
    expected = signature(secret, ts, body)
    # Several signatures may be listed (secret rotation); any valid one is enough. Constant-time compare.
    if not any(hmac.compare_digest(g, expected) for g in given):
        raise BadSignature("no signature matches")
