"""Creating tenants and their API keys. The key is shown once; only its SHA-256 is stored."""

from __future__ import annotations

import re
import secrets

from spotreel.infra.seed import api_key_hash
from spotreel.services.webhooks.signing import new_secret

_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


def new_key() -> str:
    return "sr_" + secrets.token_urlsafe(32)


def create_tenant(session, name: str, rate_per_minute: int = 600, max_in_flight: int = 100,
                  weight: float = 1.0) -> str:
    """Create the tenant if missing (an existing one keeps its settings) and return a fresh key for it."""
    if not _NAME.match(name):
        raise ValueError(f"tenant name {name!r}: use lowercase letters, digits, '-' and '_' (max 63)")
    session.execute(
        "INSERT INTO tenants (tenant_id, name, weight, max_in_flight, rate_per_minute, disabled, created_at) "
        "VALUES (%s, %s, %s, %s, %s, false, toTimestamp(now())) IF NOT EXISTS",
        (name, name, weight, max_in_flight, rate_per_minute))
    key = new_key()
    session.execute(
        "INSERT INTO api_keys (key_hash, key_prefix, tenant_id, kind, name, created_at) "
        "VALUES (%s, %s, %s, 'tenant', %s, toTimestamp(now()))",
        (api_key_hash(key), key[:8], name, f"{name} key"))
    return key


def create_worker_key(session, name: str) -> str:
    """A key for the worker API (/internal/…), never valid on /v1; shown once, stored as its SHA-256."""
    if not _NAME.match(name):
        raise ValueError(f"worker key name {name!r}: use lowercase letters, digits, '-' and '_' (max 63)")
    key = "srw_" + secrets.token_urlsafe(32)
    session.execute(
        "INSERT INTO api_keys (key_hash, key_prefix, tenant_id, kind, name, created_at) "
        "VALUES (%s, %s, '', 'worker', %s, toTimestamp(now()))",
        (api_key_hash(key), key[:8], name))
    return key


def create_webhook_secret(session, name: str, rotate: bool = False) -> str | None:
    """The tenant's webhook signing secret, made now and returned once; None when it already has one
    (unless `rotate`). Stored as is: signing needs the secret itself, not a hash of it."""
    secret = new_secret()
    if rotate:
        row = session.execute("UPDATE tenants SET webhook_secret = %s WHERE tenant_id = %s IF EXISTS",
                              (secret, name)).one()
    else:
        row = session.execute("UPDATE tenants SET webhook_secret = %s WHERE tenant_id = %s IF webhook_secret = null",
                              (secret, name)).one()
    applied = row[0] if row is not None else False
    if not applied and rotate:
        raise ValueError(f"no tenant named {name!r}")
    return secret if applied else None
