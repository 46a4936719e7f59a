"""The single error type the codec lets out, so a consumer needs exactly one `except` around decode."""

from __future__ import annotations

from typing import Literal

Reason = Literal[
    "not_bytes",  # decode was handed something that is not a bytes-like object
    "truncated",  # the header or the body ends before the writer schema says it should
    "bad_marker",  # not Avro single-object encoding (first two bytes are not C3 01)
    "unknown_schema",  # the fingerprint names no schema this registry knows, current or released
    "bad_body",  # the body does not decode under its writer schema, or bytes are left over
    "unknown_record",  # encode was asked for a record name the registry does not have
    "invalid_record",  # encode was handed a value that does not match the schema
    "not_a_message",  # encode_message / decode_message outside the registered dataclasses
]


class CodecError(Exception):
    """Raised for every encode/decode failure; `reason` is a stable machine-readable code."""

    def __init__(self, reason: Reason, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason: Reason = reason
        self.detail = detail
