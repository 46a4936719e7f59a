"""The local stack's development seeds: the tenant and its API key (Settings.dev_api_key), so a fresh stack
accepts requests, and the model registry listing the tiny model, so its gateway checks what it accepts."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from spotreel.config.settings import Settings

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


# Under $SPOTREEL_HOME (model_registry.registry_path finds it there).
LOCAL_REGISTRY_FILE = "models.toml"


def local_registry_text(home: str | Path) -> str:
    """The model registry (format: spotreel/model_registry.py) `spotreel infra up` writes for the local stack:
    the tiny model every worker without --model-dir builds under `home` (worker/cli.py), at the sizes, frames
    and steps its tests and demo ask for. The gateway's defaults (256x256, 16 frames, 20 steps) are inside it."""
    directory = Path(home) / "models" / "tiny-t2v"
    return (
        "# The local stack's model registry, written by `spotreel infra up` (SPOTREEL_MODEL_REGISTRY was unset).\n"
        "# Edit it freely: `up` never overwrites it. Format: libs/spotreel/model_registry.py.\n"
        "[models.tiny-t2v]\n"
        f"directory = {json.dumps(str(directory))}\n"
        'family = "unet3d"\n'
        'dtype = "float32"\n'
        "sizes = { multiple = 8, min = 16, max = 512 }\n"
        "frames = { min = 1, max = 128 }\n"
        "steps = { min = 1, max = 100 }\n"
        'sampler = "ddim"\n'
        "guidance_scale = 1.0\n"
        'pool = "any"\n')
