"""The gateway's command and request ids (context.Gateway.new_id): unique, uuid-hex shaped, per process."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from spotreel.api.config import GatewayConfig
from spotreel.services.gateway.app import create_app
from spotreel.services.gateway.context import GATEWAY
from spotreel.config.settings import Settings
from tests.unit.gateway_fakes import fake_deps

pytestmark = pytest.mark.unit


def _gateway():
    deps = replace(fake_deps(), new_id=None)
    return create_app(Settings(), deps, GatewayConfig(lease_ttl_ms=30_000))[GATEWAY]


def test_ids_are_unique_32_hex_digits_and_two_gateways_draw_different_ones() -> None:
    first, second = _gateway(), _gateway()
    ids = [first.new_id() for _ in range(10_000)]
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
    assert not set(ids) & {second.new_id() for _ in range(10_000)}


def test_an_injected_id_source_wins() -> None:
    gw = create_app(Settings(), replace(fake_deps(), new_id=lambda: "cmd-7"), GatewayConfig(lease_ttl_ms=30_000))[GATEWAY]
    assert gw.new_id() == "cmd-7"
