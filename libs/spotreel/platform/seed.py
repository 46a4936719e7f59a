"""The development tenant and its API key (Settings.dev_api_key), so a fresh stack accepts requests."""

from __future__ import annotations

import hashlib

from spotreel.settings import Settings

DEV_TENANT = "dev"
# The local stack's worker credential (worker API, /internal/…): like the dev API key, not a secret; real
# fleets get their own with `spotreel worker-key create NAME`. Stored hashed like every key.
DEV_WORKER_KEY = "sr_worker_dev_local_key_not_secret"


def api_key_hash(key: str) -> str:
    # Keys are long random strings, so an unsalted SHA-256 cannot be reversed by guessing.
    return hashlib.sha256(key.encode()).hexdigest()


def seed_dev_tenant(session, settings: Settings, say=print) -> None:
    """Idempotent: lightweight transactions only insert what is missing, never overwrite."""
    session.execute(
        "INSERT INTO tenants (tenant_id, name, weight, max_in_flight, rate_per_minute, disabled, created_at) "
        "VALUES (%s, %s, %s, %s, %s, %s, toTimestamp(now())) IF NOT EXISTS",
        (DEV_TENANT, "Development tenant", 1.0, 100, 600, False),
    )
    session.execute(
        "INSERT INTO api_keys (key_hash, key_prefix, tenant_id, kind, name, created_at) "
        "VALUES (%s, %s, %s, %s, %s, toTimestamp(now())) IF NOT EXISTS",
        (api_key_hash(settings.dev_api_key), settings.dev_api_key[:8], DEV_TENANT, "tenant", "development key"),
    )
    session.execute(
        "INSERT INTO api_keys (key_hash, key_prefix, tenant_id, kind, name, created_at) "
        "VALUES (%s, %s, %s, %s, %s, toTimestamp(now())) IF NOT EXISTS",
        (api_key_hash(DEV_WORKER_KEY), DEV_WORKER_KEY[:8], "", "worker", "dev-workers"),
    )
