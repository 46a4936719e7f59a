"""spotreel.client.kafka refuses what the gateway refuses before anything reaches Kafka (no broker here)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from spotreel.client.kafka import InvalidRequest, KafkaJobClient
from spotreel.settings import Settings


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
