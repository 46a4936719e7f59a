"""The envelope a personal string field carries in place of its text: `sr-enc:1:<key_id>:<nonce+ciphertext>`.

A string, so the field keeps its Avro type `string` and records written before encryption (plain text) and
after (envelopes) are read by the same schema; `is_sealed` tells them apart. The data key is named by the
envelope (`key_id`: the job's id, or the schedule's for a template its occurrences copy), and the key id
and field name are the AEAD's associated data: an envelope moved to another job or another field fails its
tag check instead of opening to the wrong text.

Pure functions over bytes; the keys come in as arguments.
"""

from __future__ import annotations

import base64
import binascii
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

PREFIX = "sr-enc:1:"
NONCE_BYTES = 12
DATA_KEY_BYTES = 32


class EnvelopeError(ValueError):
    """An envelope that is malformed, or whose tag does not verify under the key given: never garbage text."""


def new_data_key() -> bytes:
    return AESGCM.generate_key(bit_length=DATA_KEY_BYTES * 8)


def is_sealed(value: object) -> bool:
    return isinstance(value, str) and value.startswith(PREFIX)


def _aad(key_id: str, field: str) -> bytes:
    return f"spotreel.personal.v1|{key_id}|{field}".encode()


def seal(data_key: bytes, key_id: str, field: str, text: str) -> str:
    if not key_id:
        raise ValueError("an envelope needs a key id")
    nonce = os.urandom(NONCE_BYTES)
    body = AESGCM(data_key).encrypt(nonce, text.encode("utf-8"), _aad(key_id, field))
    return f"{PREFIX}{key_id}:{base64.urlsafe_b64encode(nonce + body).decode().rstrip('=')}"


def key_id_of(envelope: str) -> str:
    if not is_sealed(envelope):
        raise EnvelopeError("not an envelope")
    rest = envelope[len(PREFIX):]
    key_id, sep, _ = rest.rpartition(":")
    if not sep or not key_id:
        raise EnvelopeError("envelope without a key id")
    return key_id


def open_envelope(data_key: bytes, field: str, envelope: str) -> str:
    key_id = key_id_of(envelope)
    b64 = envelope.rpartition(":")[2]
    try:
        raw = base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4))
    except (binascii.Error, ValueError):
        raise EnvelopeError(f"envelope of key {key_id} is not base64") from None
    if len(raw) < NONCE_BYTES + 16:
        raise EnvelopeError(f"envelope of key {key_id} is too short")
    try:
        text = AESGCM(data_key).decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], _aad(key_id, field))
    except InvalidTag:
        raise EnvelopeError(f"envelope of key {key_id} ({field}) does not verify under its data key") from None
    return text.decode("utf-8")
