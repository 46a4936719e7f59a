"""Webhook signatures, two schemes on every delivery, both HMAC-SHA256 with the tenant's secret:

- spotreel's own (`Spotreel-Timestamp`, `Spotreel-Signature: v1=<hex>` over "<timestamp>.<body>", the secret's
  text as the key), for the receivers written against it;
- Standard Webhooks (`webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64>` over
  "<id>.<timestamp>.<body>", the key the base64 after `whsec_`), which the `standardwebhooks` library and the
  `openai` SDK's `webhooks.verify_signature` check. Secrets are `whsec_` and base64 of 24 random bytes; a
  secret made before they were (`whsec_` and URL-safe text) is not base64, so its Standard Webhooks signature
  is keyed by its text and those libraries cannot check it: rotating it makes one they can.

The timestamp is inside the signed text so a captured request cannot be replayed later with a fresh
timestamp; receivers refuse timestamps outside a tolerance window (`verify`). The event id travels in its
own header so receivers can drop a re-delivery they already handled. While a rotated secret's predecessor
is still valid (tenancy.create_webhook_secret), each header lists one signature per secret, newest first.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Mapping, Sequence

TIMESTAMP_HEADER = "Spotreel-Timestamp"
SIGNATURE_HEADER = "Spotreel-Signature"
EVENT_ID_HEADER = "Spotreel-Event-Id"
EVENT_TYPE_HEADER = "Spotreel-Event-Type"
# Standard Webhooks (standardwebhooks.com).
STANDARD_ID_HEADER = "webhook-id"
STANDARD_TIMESTAMP_HEADER = "webhook-timestamp"
STANDARD_SIGNATURE_HEADER = "webhook-signature"
SCHEME = "v1"
DEFAULT_TOLERANCE_S = 300
SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(24)).decode()


def signature(secret: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret.encode(), str(timestamp).encode() + b"." + body, hashlib.sha256)
    return f"{SCHEME}={mac.hexdigest()}"


def standard_key(secret: str) -> bytes:
    """The Standard Webhooks key of a secret: the bytes of its base64 after `whsec_`; the text itself for a
    secret that is not base64 (one made before secrets were)."""
    if secret.startswith(SECRET_PREFIX):
        try:
            return base64.b64decode(secret[len(SECRET_PREFIX):], validate=True)
        except (binascii.Error, ValueError):
            pass
    return secret.encode()


def standard_signature(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(standard_key(secret), f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256)
    return f"{SCHEME},{base64.b64encode(mac.digest()).decode()}"


def headers(secret: str | Sequence[str], timestamp: int, body: bytes, event_id: str,
            event_type: str) -> dict[str, str]:
    """Both schemes' headers; `secret` one secret, or several (newest first) while a rotation's window lasts."""
    keys = [secret] if isinstance(secret, str) else list(secret)
    return {
        "Content-Type": "application/json",
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: ",".join(signature(k, timestamp, body) for k in keys),
        EVENT_ID_HEADER: event_id,
        EVENT_TYPE_HEADER: event_type,
        STANDARD_ID_HEADER: event_id,
        STANDARD_TIMESTAMP_HEADER: str(timestamp),
        STANDARD_SIGNATURE_HEADER: " ".join(standard_signature(k, event_id, timestamp, body) for k in keys),
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
