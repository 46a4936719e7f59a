"""spotreel.client.kafka refuses what the gateway refuses before anything reaches Kafka (no broker here)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from spotreel.client.kafka import InvalidRequest, KafkaJobClient
from spotreel.config.settings import Settings


@pytest.fixture
def client():
    kc = KafkaJobClient(replace(Settings(), kafka_port=9), ack_timeout_s=1)
    yield kc
    kc.consumer.close()


@pytest.mark.parametrize("body,field", [
    ({"prompt": "x", "resolution": "10x10"}, "resolution"),
    ({"prompt": "x", "callback_url": "http://169.254.169.254/"}, "callback_url"),
    ({"prompt": "x", "run_at": 1, "delay_seconds": 1}, "delay_seconds"),
    ({"prompt": ""}, "prompt"),
    ({"prompt": "x", "colour": "red"}, "colour"),
])
def test_a_body_the_gateway_refuses_is_refused_here(client, body, field):
    with pytest.raises(InvalidRequest) as err:
        client.submit("acme", "k1", body)
    assert err.value.field == field and err.value.status == 422


@pytest.mark.parametrize("key", ["", "schedule:x", "with space", "x" * 201])
def test_idempotency_keys_follow_the_gateways_rule(client, key):
    with pytest.raises(InvalidRequest) as err:
        client.submit("acme", key, {"prompt": "x"})
    assert err.value.status == 400


def test_priority_bounds(client):
    with pytest.raises(InvalidRequest):
        client.set_priority("j" + "0" * 32, 10)


def test_webhook_event_filters_need_the_gateway(client):
    with pytest.raises(InvalidRequest) as err:
        client.submit("acme", "k1", {"prompt": "x", "callback_url": "https://h.example.com/", "webhook_events": ["started"]})
    assert err.value.field == "webhook_events"


async def test_the_same_job_and_hash_as_the_gateways(client, monkeypatch):
    """The SubmitJob this client would produce equals the gateway's for the same tenant, key and body (but the
    random command id and the submit time)."""
    from aiohttp.test_utils import TestClient, TestServer

    from spotreel.services.gateway.app import create_app
    from tests.unit.gateway_fakes import fake_deps

    produced = []
    monkeypatch.setattr(client, "_send", lambda command, request_hash=None: produced.append(command))
    body = {"prompt": "a fox", "fps": 12, "resolution": "512x320", "max_attempts": 3, "priority": 4}
    deps = fake_deps()
    api = TestClient(TestServer(create_app(Settings(), deps)))
    await api.start_server()
    try:
        r = await api.post("/v1/videos", json=body, headers={"Authorization": "Bearer key-a", "Idempotency-Key": "o-1"})
        assert r.status == 202
    finally:
        await api.close()
    client.submit("tenant-a", "o-1", body, now_ms=deps.clock_ms())
    [mine], [theirs] = produced, deps.commands.sent
    assert replace(mine, command_id="") == replace(theirs, command_id="")
