"""Standard Webhooks signatures beside spotreel's own, checked by the libraries receivers use: the `openai`
SDK's `webhooks.verify_signature` / `unwrap` and `standardwebhooks`; several secrets during a rotation;
OpenAI's event payload for a job made through the compatible surface."""

from __future__ import annotations

import json
import time

import openai
import pytest
import standardwebhooks
from hypothesis import given
from hypothesis import strategies as st

from spotreel.webhooks import signing
from spotreel.services.webhooks.payload import Notification, openai_style


def _note(event_type: str, kind: str, milestone: int | None = None) -> Notification:
    body = json.dumps({"id": "j1.v4", "type": event_type, "occurred_at_ms": 1_700_000_123_456,
                       "data": {"job_id": "j1"}}).encode()
    return Notification("j1.v4", event_type, "j1", body, 4, kind, milestone)


def test_a_new_secret_is_base64_that_both_libraries_read():
    secret = signing.new_secret()
    assert secret.startswith("whsec_") and len(signing.standard_key(secret)) == 24


@given(st.binary(max_size=300), st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=40))
def test_every_body_verifies_with_the_sdk_and_standardwebhooks(body, msg_id):
    secret = signing.new_secret()
    now = int(time.time())
    body = json.dumps({"raw": body.hex()}).encode()
    h = signing.headers(secret, now, body, msg_id, "video.succeeded")
    standardwebhooks.Webhook(secret).verify(body, h)
    openai.OpenAI(api_key="unused").webhooks.verify_signature(body, h, secret=secret)
    signing.verify(secret, h, body, now)


def test_during_a_rotation_each_scheme_lists_a_signature_per_secret():
    new, old = signing.new_secret(), signing.new_secret()
    body, now = b'{"a":1}', int(time.time())
    h = signing.headers((new, old), now, body, "j1.v2", "video.failed")
    assert len(h["webhook-signature"].split(" ")) == 2 and len(h["Spotreel-Signature"].split(",")) == 2
    for key in (new, old):
        standardwebhooks.Webhook(key).verify(body, h)
        openai.OpenAI(api_key="unused").webhooks.verify_signature(body, h, secret=key)
        signing.verify(key, h, body, now)
    with pytest.raises(openai.InvalidWebhookSignatureError):
        openai.OpenAI(api_key="unused").webhooks.verify_signature(body, h, secret=signing.new_secret())


def test_a_secret_made_before_base64_keeps_spotreels_scheme():
    legacy = "whsec_" + "-_" * 20  # URL-safe text, not base64
    body, now = b"{}", int(time.time())
    h = signing.headers(legacy, now, body, "j1.v2", "video.failed")
    signing.verify(legacy, h, body, now)
    assert signing.standard_key(legacy) == legacy.encode()


def test_openai_payload_for_ends_only():
    done = openai_style(_note("video.succeeded", "completed"))
    assert done is not None and json.loads(done.body) == {
        "id": "j1.v4", "object": "event", "created_at": 1_700_000_123, "type": "video.completed", "data": {"id": "j1"}}
    for end in ("video.failed", "video.cancelled", "video.dead_lettered"):
        note = openai_style(_note(end, "failed"))
        assert note is not None and json.loads(note.body)["type"] == "video.failed" == note.event_type
    assert openai_style(_note("video.started", "started")) is None
    assert openai_style(_note("video.progress", "progress", 50)) is None
    secret = signing.new_secret()
    h = signing.headers(secret, int(time.time()), done.body, done.event_id, done.event_type)
    event = openai.OpenAI(api_key="unused", webhook_secret=secret).webhooks.unwrap(done.body, h)
    assert event.type == "video.completed" and event.data.id == "j1"
