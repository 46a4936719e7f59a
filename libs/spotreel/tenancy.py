"""Creating tenants and their API keys (the key is shown once; only its SHA-256 is stored), and their plans.

A tenant's plan (domain/plans.py) lives in its Cassandra row, which the gateway reads (rate, highest
priority, unfinished jobs); the scheduler does not read Cassandra, so `publish_settings` also writes it to
the compacted `<prefix>.tenants` topic, which every scheduler instance reads (weight, in-flight ceiling)."""

from __future__ import annotations

import re
import secrets
from datetime import datetime, timedelta, timezone
import time

from spotreel.domain import plans
from spotreel.domain.events import TenantSettings
from spotreel.platform.seed import api_key_hash
from spotreel.webhooks.signing import new_secret

_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


def new_key() -> str:
    return "sr_" + secrets.token_urlsafe(32)


def create_tenant(session, name: str, rate_per_minute: int = 600, max_in_flight: int = 100,
                  weight: float = 1.0, *, plan: str | None = None, max_priority: int = plans.MAX_TIER) -> str:
    """Create the tenant if missing (an existing one keeps its settings) and return a fresh key for it.
    `plan` None: a tenant without a plan ("custom"), the given settings as they are."""
    if not _NAME.match(name):
        raise ValueError(f"tenant name {name!r}: use lowercase letters, digits, '-' and '_' (max 63)")
    problem = plans.plan_problem(weight, max_in_flight, rate_per_minute, max_priority)
    if problem is not None:
        raise ValueError(problem)
    session.execute(
        "INSERT INTO tenants (tenant_id, name, weight, max_in_flight, rate_per_minute, disabled, created_at, plan, "
        "max_priority) VALUES (%s, %s, %s, %s, %s, false, toTimestamp(now()), %s, %s) IF NOT EXISTS",
        (name, name, weight, max_in_flight, rate_per_minute, plan, max_priority))
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


# How long a rotated secret's predecessor still signs (beside the new one), so receivers can move over.
ROTATION_WINDOW_S = 24 * 3600


def create_webhook_secret(session, name: str, rotate: bool = False,
                          keep_previous_s: int = ROTATION_WINDOW_S) -> str | None:
    """The tenant's webhook signing secret, made now and returned once; None when it already has one
    (unless `rotate`). Stored as is: signing needs the secret itself, not a hash of it. A rotation keeps the
    secret it replaces signing too for `keep_previous_s` (0: not at all), each webhook then carrying both
    signatures, so a receiver that still holds the old one keeps verifying until it has the new one."""
    secret = new_secret()
    if rotate:
        old = session.execute("SELECT webhook_secret FROM tenants WHERE tenant_id = %s", (name,)).one()
        previous = old.webhook_secret if old is not None and keep_previous_s > 0 else None
        until = datetime.now(timezone.utc) + timedelta(seconds=keep_previous_s) if previous else None
        row = session.execute("UPDATE tenants SET webhook_secret = %s, webhook_secret_previous = %s, "
                              "webhook_secret_previous_until = %s WHERE tenant_id = %s IF EXISTS",
                              (secret, previous, until, name)).one()
    else:
        row = session.execute("UPDATE tenants SET webhook_secret = %s WHERE tenant_id = %s IF webhook_secret = null",
                              (secret, name)).one()
    applied = row[0] if row is not None else False
    if not applied and rotate:
        raise ValueError(f"no tenant named {name!r}")
    return secret if applied else None


def tenant_plan(session, name: str) -> plans.Plan | None:
    """The tenant's settings as its row holds them (a row from before plans: "custom", every tier allowed);
    None when there is no such tenant."""
    row = session.execute("SELECT plan, weight, max_in_flight, rate_per_minute, max_priority FROM tenants "
                          "WHERE tenant_id = %s", (name,)).one()
    if row is None:
        return None
    c = plans.CUSTOM
    return plans.Plan(row.plan or c.name, row.weight if row.weight is not None else c.weight, row.max_in_flight,
                      row.rate_per_minute or c.rate_per_minute,
                      row.max_priority if row.max_priority is not None else c.max_priority)


def set_tenant(session, name: str, plan: plans.Plan) -> None:
    """Write the tenant's settings; ValueError when there is no such tenant."""
    row = session.execute(
        "UPDATE tenants SET plan = %s, weight = %s, max_in_flight = %s, rate_per_minute = %s, max_priority = %s "
        "WHERE tenant_id = %s IF EXISTS",
        (plan.name, plan.weight, plan.max_in_flight, plan.rate_per_minute, plan.max_priority, name)).one()
    if row is None or not row[0]:
        raise ValueError(f"no tenant named {name!r}")


def settings_record(name: str, plan: plans.Plan, at_ms: int | None = None) -> TenantSettings:
    return TenantSettings(tenant=name, plan=plan.name, weight=plan.weight, rate_per_minute=plan.rate_per_minute,
                          max_priority=plan.max_priority, at_ms=int(time.time() * 1000) if at_ms is None else at_ms,
                          max_in_flight=plan.max_in_flight)


def publish_settings(settings, record: TenantSettings, timeout: float = 10.0) -> None:
    """Produce the tenant's settings to `<prefix>.tenants` (key: tenant, compacted) and wait for the ack;
    RuntimeError if Kafka did not take it (the Cassandra row is written already: publishing again is safe)."""
    from spotreel.adapters.kafka import producer
    from spotreel.adapters.partitioning import partition_for
    from spotreel.codec import Codec
    from spotreel.platform.topics import ensure_topics, tenants_topic

    # The topic must exist with its partitions and compaction before anything is produced to it: Kafka would
    # otherwise create it with the broker's defaults, which `infra up` and the scheduler then refuse.
    ensure_topics(settings, say=lambda *a, **k: None)
    prod = producer(settings, acks="all")
    got: list = []
    prod.produce(tenants_topic(settings), key=record.tenant.encode(), value=Codec.default().encode_message(record),
                 partition=partition_for(record.tenant, settings.partitions),
                 on_delivery=lambda err, msg: got.append(err))
    prod.flush(timeout)
    if not got or got[0] is not None:
        raise RuntimeError(f"kafka did not take the settings of tenant {record.tenant}: "
                           f"{got[0] if got else 'no answer within %.0f s' % timeout}")


def list_tenants(session) -> list[dict]:
    """Every tenant's row as stored (the columns `spotreel tenant list` prints), by name; no secret."""
    rows = session.execute("SELECT tenant_id, plan, weight, max_in_flight, rate_per_minute, max_priority, disabled, "
                           "webhook_secret, created_at FROM tenants")
    return sorted(({"tenant": r.tenant_id, "plan": r.plan or plans.CUSTOM.name, "weight": r.weight,
                    "max_in_flight": r.max_in_flight, "rate_per_minute": r.rate_per_minute,
                    "max_priority": r.max_priority, "disabled": bool(r.disabled),
                    "webhook_secret": r.webhook_secret is not None,
                    "created_at": r.created_at.isoformat() if r.created_at else None} for r in rows),
                  key=lambda t: t["tenant"])


def disable_tenant(session, name: str, disabled: bool = True) -> None:
    """Refuse (or, with disabled=False, accept again) every request of the tenant's keys: 403 tenant_disabled
    once the gateway's key cache lets go (SPOTREEL_GATEWAY_AUTH_CACHE_SECONDS)."""
    row = session.execute("UPDATE tenants SET disabled = %s WHERE tenant_id = %s IF EXISTS", (disabled, name)).one()
    if row is None or not row[0]:
        raise ValueError(f"no tenant named {name!r}")


def list_worker_keys(session) -> list[dict]:
    """Every worker key: name, the key's first characters, when made and revoked (never the key)."""
    rows = session.execute("SELECT key_hash, key_prefix, kind, name, created_at, revoked_at FROM api_keys")
    return sorted(({"name": r.name, "prefix": r.key_prefix,
                    "created_at": r.created_at.isoformat() if r.created_at else None,
                    "revoked_at": r.revoked_at.isoformat() if r.revoked_at else None}
                   for r in rows if r.kind == "worker"), key=lambda k: (k["name"] or "", k["created_at"] or ""))


def revoke_worker_key(session, name: str, prefix: str | None = None) -> int:
    """Revoke the live worker keys named `name` (only the one starting with `prefix`, if given); the count
    revoked. A revoked key stops working once the gateway's key cache lets go."""
    rows = [r for r in session.execute("SELECT key_hash, key_prefix, kind, name, revoked_at FROM api_keys")
            if r.kind == "worker" and r.name == name and r.revoked_at is None
            and (prefix is None or (r.key_prefix or "").startswith(prefix) or prefix.startswith(r.key_prefix or "\0"))]
    for r in rows:
        session.execute("UPDATE api_keys SET revoked_at = toTimestamp(now()) WHERE key_hash = %s", (r.key_hash,))
    return len(rows)
