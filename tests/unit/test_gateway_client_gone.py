"""A client gone before its request was read (it gave up on a gateway far behind) is a quiet 499, not a 500
with a traceback per request."""

from __future__ import annotations

import logging

import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer

from spotreel.api.config import GatewayConfig
from spotreel.services.gateway.worker_api import routes as internal
from spotreel.services.gateway.app import create_app
from spotreel.config.settings import Settings
from tests.unit.gateway_fakes import WORKER_KEY, fake_deps
from tests.unit.test_gateway_store_outage import AcceptingBus

JOB = "j" + "3" * 32
W = {"Authorization": f"Bearer {WORKER_KEY}"}
BEAT = {"epoch": 4, "worker_id": "w-1"}


@pytest_asyncio.fixture(loop_scope="function")
async def client():
    deps = fake_deps(work=AcceptingBus())
    c = TestClient(TestServer(create_app(Settings(), deps, GatewayConfig(lease_ttl_ms=30_000))))
    await c.start_server()
    try:
        yield c, deps
    finally:
        await c.close()


async def test_a_client_gone_before_its_body_was_read_is_a_quiet_499(client, monkeypatch, caplog):
    c, deps = client

    async def gone(request):
        raise ConnectionResetError("Connection lost")

    monkeypatch.setattr(internal, "read_body", gone)
    with caplog.at_level(logging.ERROR):
        r = await c.post(f"/internal/leases/{JOB}/heartbeat", json=BEAT, headers=W)
    assert r.status == 499 and (await r.json())["error"]["code"] == "client_closed_request"
    assert not [rec for rec in caplog.records if rec.levelno >= logging.ERROR], caplog.text
    assert deps.commands.sent == []
