"""Key-encryption keys: what wraps the data keys the keystore holds.

`KeyEncryptionKey` is the interface a cloud KMS implements (wrap/unwrap a data key, with the key id as
context; AWS KMS Encrypt/Decrypt with an encryption context, or GCP KMS with additional authenticated data,
fit it). `LocalKek` is the dev stack's: 32 random bytes, base64 in a file the devstack creates, used with
AES-256-GCM. Its `kek_id` is derived from the key by HMAC, so the keystore can say which KEK wrapped a row
without holding anything that helps recover it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from pathlib import Path
from typing import Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

KEK_BYTES = 32


class KekError(RuntimeError):
    """The key-encryption key is missing, malformed, or not the one the keystore's keys were wrapped with."""


class KeyEncryptionKey(Protocol):
    kek_id: str

    def wrap(self, data_key: bytes, key_id: str) -> bytes: ...

    def unwrap(self, wrapped: bytes, key_id: str) -> bytes:
        """The data key; KekError when `wrapped` was not made by this KEK for `key_id`."""


def _context(key_id: str) -> bytes:
    return f"spotreel.data-key.v1|{key_id}".encode()


class LocalKek:
    def __init__(self, key: bytes) -> None:
        if len(key) != KEK_BYTES:
            raise KekError(f"a key-encryption key is {KEK_BYTES} bytes; this one is {len(key)}")
        self._aead = AESGCM(key)
        self.kek_id = "local:" + hmac.new(key, b"spotreel kek id", hashlib.sha256).hexdigest()[:16]

    def __repr__(self) -> str:  # never the key itself, in a log line or a traceback
        return f"LocalKek({self.kek_id})"

    def wrap(self, data_key: bytes, key_id: str) -> bytes:
        nonce = os.urandom(12)
        return nonce + self._aead.encrypt(nonce, data_key, _context(key_id))

    def unwrap(self, wrapped: bytes, key_id: str) -> bytes:
        try:
            return self._aead.decrypt(wrapped[:12], wrapped[12:], _context(key_id))
        except InvalidTag:
            raise KekError(f"data key {key_id} was not wrapped by key-encryption key {self.kek_id}") from None

    @classmethod
    def from_file(cls, path: Path) -> LocalKek:
        try:
            text = path.read_text(encoding="ascii").strip()
        except FileNotFoundError:
            raise KekError(f"key-encryption key file {path} does not exist") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise KekError(f"key-encryption key file {path} cannot be read: {type(exc).__name__}") from None
        try:
            key = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise KekError(f"key-encryption key file {path} is not base64") from None
        return cls(key)


def create_kek_file(path: Path) -> bool:
    """Write a new random KEK to `path` (mode 0600) unless a file is there; True when this call wrote it.
    Written whole to a private temporary file and linked into place, which fails if the name exists: processes
    starting together agree on one key, and none reads a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(base64.b64encode(os.urandom(KEK_BYTES)).decode() + "\n")
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        return True
    finally:
        tmp.unlink(missing_ok=True)
