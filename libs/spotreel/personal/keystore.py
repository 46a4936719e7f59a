"""Where wrapped data keys are kept: Cassandra (migration 0015), or memory for unit tests.

Synchronous (the vault runs it off the event loop). `put_if_absent` is a lightweight transaction: two
gateways accepting the same job (a client's retry on another gateway) end with one data key, the one both
then seal with, so no envelope on the log is under a key that was overwritten.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterator, Protocol


@dataclass(frozen=True)
class WrappedKey:
    key_id: str
    tenant_id: str
    kek_id: str
    wrapped: bytes


class Keystore(Protocol):
    def put_if_absent(self, key: WrappedKey) -> WrappedKey:
        """Store `key` unless its id has one; return the one stored now."""
    def get(self, key_id: str) -> WrappedKey | None: ...
    def replace(self, key: WrappedKey) -> None:
        """Overwrite a key's wrapping (KEK rotation)."""
    def delete(self, key_id: str, tenant_id: str) -> None: ...
    def tenant_keys(self, tenant_id: str) -> list[str]: ...
    def scan(self) -> Iterator[WrappedKey]: ...
    def check_value(self) -> tuple[str, bytes] | None: ...
    def put_check_value(self, kek_id: str, wrapped: bytes, *, only_if_absent: bool) -> tuple[str, bytes]: ...


class MemoryKeystore:
    def __init__(self) -> None:
        self.keys: dict[str, WrappedKey] = {}
        self.check: tuple[str, bytes] | None = None

    def put_if_absent(self, key: WrappedKey) -> WrappedKey:
        return self.keys.setdefault(key.key_id, key)

    def get(self, key_id: str) -> WrappedKey | None:
        return self.keys.get(key_id)

    def replace(self, key: WrappedKey) -> None:
        self.keys[key.key_id] = key

    def delete(self, key_id: str, tenant_id: str) -> None:
        self.keys.pop(key_id, None)

    def tenant_keys(self, tenant_id: str) -> list[str]:
        return [k.key_id for k in self.keys.values() if k.tenant_id == tenant_id]

    def scan(self) -> Iterator[WrappedKey]:
        yield from list(self.keys.values())

    def check_value(self) -> tuple[str, bytes] | None:
        return self.check

    def put_check_value(self, kek_id: str, wrapped: bytes, *, only_if_absent: bool) -> tuple[str, bytes]:
        if self.check is None or not only_if_absent:
            self.check = (kek_id, wrapped)
        return self.check


class CassandraKeystore:
    def __init__(self, session: Any) -> None:
        self.session = session
        p = session.prepare
        self._put = p("INSERT INTO data_keys (key_id, tenant_id, kek_id, wrapped, created_at) VALUES (?, ?, ?, ?, ?) "
                      "IF NOT EXISTS")
        self._by_tenant = p("INSERT INTO data_keys_by_tenant (tenant_id, key_id) VALUES (?, ?)")
        self._get = p("SELECT key_id, tenant_id, kek_id, wrapped FROM data_keys WHERE key_id = ?")
        self._replace = p("UPDATE data_keys SET kek_id = ?, wrapped = ? WHERE key_id = ? IF EXISTS")
        self._delete = p("DELETE FROM data_keys WHERE key_id = ?")
        self._delete_by_tenant = p("DELETE FROM data_keys_by_tenant WHERE tenant_id = ? AND key_id = ?")
        self._tenant = p("SELECT key_id FROM data_keys_by_tenant WHERE tenant_id = ?")
        self._check = p("SELECT kek_id, wrapped FROM kek_check WHERE name = 'current'")
        self._put_check = p("INSERT INTO kek_check (name, kek_id, wrapped) VALUES ('current', ?, ?) IF NOT EXISTS")
        self._set_check = p("INSERT INTO kek_check (name, kek_id, wrapped) VALUES ('current', ?, ?)")

    def put_if_absent(self, key: WrappedKey) -> WrappedKey:
        # The tenant index first: a key whose index row is missing could escape the tenant-wide erase.
        self.session.execute(self._by_tenant, (key.tenant_id, key.key_id))
        row = self.session.execute(
            self._put, (key.key_id, key.tenant_id, key.kek_id, key.wrapped,
                        datetime.fromtimestamp(time.time(), tz=timezone.utc))).one()
        if row is None or row.applied:
            return key
        return WrappedKey(row.key_id, row.tenant_id or "", row.kek_id or "", bytes(row.wrapped))

    def get(self, key_id: str) -> WrappedKey | None:
        row = self.session.execute(self._get, (key_id,)).one()
        if row is None:
            return None
        return WrappedKey(row.key_id, row.tenant_id or "", row.kek_id or "", bytes(row.wrapped))

    def replace(self, key: WrappedKey) -> None:
        # IF EXISTS: a key erased while the rotation ran is not brought back.
        self.session.execute(self._replace, (key.kek_id, key.wrapped, key.key_id))

    def delete(self, key_id: str, tenant_id: str) -> None:
        self.session.execute(self._delete, (key_id,))
        self.session.execute(self._delete_by_tenant, (tenant_id, key_id))

    def tenant_keys(self, tenant_id: str) -> list[str]:
        return [r.key_id for r in self.session.execute(self._tenant, (tenant_id,))]

    def scan(self) -> Iterator[WrappedKey]:
        for row in self.session.execute("SELECT key_id, tenant_id, kek_id, wrapped FROM data_keys"):
            yield WrappedKey(row.key_id, row.tenant_id or "", row.kek_id or "", bytes(row.wrapped))

    def check_value(self) -> tuple[str, bytes] | None:
        row = self.session.execute(self._check).one()
        return None if row is None else (row.kek_id, bytes(row.wrapped))

    def put_check_value(self, kek_id: str, wrapped: bytes, *, only_if_absent: bool) -> tuple[str, bytes]:
        if not only_if_absent:
            self.session.execute(self._set_check, (kek_id, wrapped))
            return kek_id, wrapped
        row = self.session.execute(self._put_check, (kek_id, wrapped)).one()
        if row is None or row.applied:
            return kek_id, wrapped
        return row.kek_id, bytes(row.wrapped)
