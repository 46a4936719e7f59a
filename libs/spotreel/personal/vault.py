"""The vault: data keys made, cached, unwrapped and deleted; personal fields sealed and opened.

What a service holds (the gateway, the webhook sender, a Kafka worker). Keystore calls are blocking and run
in a thread from the async methods. Unwrapped data keys are cached for `cache_seconds` (a job's views and
lease open the same key again and again): an erase in one process evicts its own cache at once, and every
other process stops opening the job's fields when its entry ages out, so that window is the setting.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import os
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Iterable

from spotreel.personal import envelope
from spotreel.personal.kek import KekError, KeyEncryptionKey
from spotreel.personal.keystore import Keystore, WrappedKey

log = logging.getLogger("spotreel.personal")

CHECK_KEY_ID = "kek-check"
CACHE_ENTRIES = 4096


class Erased(LookupError):
    """The data key is gone (the job was erased): its personal fields cannot be opened by anyone."""


@dataclass(frozen=True)
class Sealer:
    """Seals the fields of one key id with its data key (already unwrapped)."""

    key_id: str
    _data_key: bytes

    def __repr__(self) -> str:
        return f"Sealer({self.key_id})"

    def keyed_hash(self, digest: str) -> str:
        """A request hash that says nothing once the key is gone: the plain SHA-256 of a body holding a prompt
        would let anyone confirm a guessed prompt of an erased job; this HMAC under its data key cannot."""
        return hmac.new(self._data_key, b"spotreel.request-hash.v1|" + digest.encode(), hashlib.sha256).hexdigest()

    def seal(self, field: str, value: str | None) -> str | None:
        if value is None or envelope.is_sealed(value):
            return value
        return envelope.seal(self._data_key, self.key_id, field, value)


class Vault:
    def __init__(self, keystore: Keystore, kek: KeyEncryptionKey, previous: KeyEncryptionKey | None = None,
                 cache_seconds: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.keystore = keystore
        self.kek = kek
        self.previous = previous
        self.cache_seconds = cache_seconds
        self._clock = clock
        self._cache: OrderedDict[str, tuple[float, bytes]] = OrderedDict()

    def __repr__(self) -> str:
        return f"Vault({self.kek.kek_id})"

    # -- start ----------------------------------------------------------------------------------------

    def check(self) -> None:
        """Fail now, with a clear error, when the configured KEK is not the keystore's: never later, on a job."""
        stored = self.keystore.check_value()
        if stored is None:
            stored = self.keystore.put_check_value(self.kek.kek_id, self.kek.wrap(os.urandom(32), CHECK_KEY_ID),
                                                   only_if_absent=True)
        kek_id, wrapped = stored
        for kek in (self.kek, self.previous):
            if kek is None:
                continue
            try:
                kek.unwrap(wrapped, CHECK_KEY_ID)
                return
            except KekError:
                continue
        raise KekError(f"the configured key-encryption key ({self.kek.kek_id}) is not the one this keystore's "
                       f"data keys are wrapped with ({kek_id}): refusing to start rather than fail on every job")

    # -- keys -------------------------------------------------------------------------------------------

    def _cached(self, key_id: str) -> bytes | None:
        hit = self._cache.get(key_id)
        if hit is None:
            return None
        if self._clock() - hit[0] > self.cache_seconds:
            del self._cache[key_id]
            return None
        self._cache.move_to_end(key_id)
        return hit[1]

    def _remember(self, key_id: str, data_key: bytes) -> None:
        self._cache[key_id] = (self._clock(), data_key)
        while len(self._cache) > CACHE_ENTRIES:
            self._cache.popitem(last=False)

    def _unwrap(self, stored: WrappedKey) -> bytes:
        keks = [k for k in (self.kek, self.previous) if k is not None]
        # The KEK that wrapped it first; the other one too, since a kek_id is only a hint.
        keks.sort(key=lambda k: k.kek_id != stored.kek_id)
        for kek in keks:
            try:
                return kek.unwrap(stored.wrapped, stored.key_id)
            except KekError:
                continue
        raise KekError(f"data key {stored.key_id} is wrapped by {stored.kek_id}, which is not configured")

    def sealer_sync(self, key_id: str, tenant_id: str) -> Sealer:
        """The data key of `key_id`, made and stored when it has none."""
        data_key = self._cached(key_id)
        if data_key is None:
            fresh = envelope.new_data_key()
            ours = WrappedKey(key_id, tenant_id, self.kek.kek_id, self.kek.wrap(fresh, key_id))
            stored = self.keystore.put_if_absent(ours)
            # Not ours: another accept of the same job stored its key first, and that key is the job's.
            data_key = fresh if stored.wrapped == ours.wrapped else self._unwrap(stored)
            self._remember(key_id, data_key)
        return Sealer(key_id, data_key)

    def data_key_sync(self, key_id: str) -> bytes:
        data_key = self._cached(key_id)
        if data_key is None:
            stored = self.keystore.get(key_id)
            if stored is None:
                raise Erased(key_id)
            data_key = self._unwrap(stored)
            self._remember(key_id, data_key)
        return data_key

    # -- fields -------------------------------------------------------------------------------------------

    def open_sync(self, field: str, value: str | None) -> str | None:
        """The text of a field: plain text as it is (written before encryption), an envelope opened. Raises
        Erased when its key is gone, envelope.EnvelopeError when it does not verify."""
        if value is None or not envelope.is_sealed(value):
            return value
        return envelope.open_envelope(self.data_key_sync(envelope.key_id_of(value)), field, value)

    async def sealer(self, key_id: str, tenant_id: str) -> Sealer:
        data_key = self._cached(key_id)
        if data_key is not None:
            return Sealer(key_id, data_key)
        return await asyncio.to_thread(self.sealer_sync, key_id, tenant_id)

    async def open(self, field: str, value: str | None) -> str | None:
        if value is None or not envelope.is_sealed(value):
            return value
        key_id = envelope.key_id_of(value)
        data_key = self._cached(key_id)
        if data_key is None:
            data_key = await asyncio.to_thread(self.data_key_sync, key_id)
        return envelope.open_envelope(data_key, field, value)

    async def open_or_none(self, field: str, value: str | None) -> str | None:
        """As `open`, with None for an erased field (a view shows it gone; nothing else can be shown)."""
        try:
            return await self.open(field, value)
        except Erased:
            return None

    # -- erasure and rotation -------------------------------------------------------------------------------

    def erase_sync(self, key_id: str, tenant_id: str) -> None:
        self._cache.pop(key_id, None)
        self.keystore.delete(key_id, tenant_id)

    async def erase(self, key_id: str, tenant_id: str) -> None:
        await asyncio.to_thread(self.erase_sync, key_id, tenant_id)

    def tenant_key_ids(self, tenant_id: str) -> list[str]:
        return self.keystore.tenant_keys(tenant_id)

    def rotate(self, new: KeyEncryptionKey, only: Iterable[str] | None = None) -> int:
        """Re-wrap every data key under `new` (the log is not touched: envelopes name key ids, not KEKs), then
        the check value, so processes still on the old KEK fail at their next start. Returns how many keys."""
        wanted = None if only is None else set(only)
        count = 0
        for stored in self.keystore.scan():
            if wanted is not None and stored.key_id not in wanted:
                continue
            data_key = self._unwrap(stored)
            self.keystore.replace(WrappedKey(stored.key_id, stored.tenant_id, new.kek_id,
                                             new.wrap(data_key, stored.key_id)))
            count += 1
        self.keystore.put_check_value(new.kek_id, new.wrap(os.urandom(32), CHECK_KEY_ID), only_if_absent=False)
        self.previous, self.kek = self.kek, new
        log.info("re-wrapped %d data keys under %s", count, new.kek_id)
        return count
