"""The vault a process starts with, from its settings: the KEK file, the keystore, the start check."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from spotreel.personal.kek import KekError, LocalKek, create_kek_file
from spotreel.personal.keystore import CassandraKeystore, Keystore
from spotreel.personal.vault import Vault

log = logging.getLogger("spotreel.personal")


def kek_path(settings: Any) -> Path:
    return Path(settings.kek_file) if settings.kek_file else Path(settings.home) / "keys" / "kek"


def open_vault(settings: Any, keystore: Keystore) -> Vault:
    """The vault, checked. A keystore that has never held a key (a new deployment, a test's keyspace) and no
    KEK file: the file is made (the dev stack's first start). A keystore that holds keys and no file, or a
    file of another KEK: KekError, before anything is served."""
    path = kek_path(settings)
    if not path.exists():
        stored = keystore.check_value()
        if stored is not None:
            raise KekError(f"key-encryption key file {path} is missing, and this keystore's data keys are wrapped "
                           f"by {stored[0]}: restore the file (or set SPOTREEL_KEK_FILE) to start")
        if create_kek_file(path):
            log.warning("created a new key-encryption key at %s", path)
    kek = LocalKek.from_file(path)
    previous = LocalKek.from_file(Path(settings.kek_previous_file)) if settings.kek_previous_file else None
    vault = Vault(keystore, kek, previous, cache_seconds=float(settings.data_key_cache_seconds))
    vault.check()
    return vault


def open_cassandra_vault(settings: Any, session: Any) -> Vault | None:
    """None when personal-field encryption is off (SPOTREEL_PERSONAL_ENCRYPTION=0)."""
    if not settings.personal_encryption:
        return None
    return open_vault(settings, CassandraKeystore(session))
