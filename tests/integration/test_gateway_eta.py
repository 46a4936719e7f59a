"""The 202's queue position and estimated wait come from the scheduler's pool-stats records on Kafka:
null with a reason before there is any measurement, then the fluid estimate from queued jobs, busy and
idle workers and the measured generation time."""

from __future__ import annotations

import asyncio
import time

import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer
from confluent_kafka import Producer

from spotreel.codec import Codec
from spotreel.domain import events as ev
from spotreel.domain import ids
from spotreel.platform.topics import pool_stats_topic
from spotreel.services.gateway.app import create_app
from spotreel.api.config import GatewayConfig
from spotreel.tenancy import create_tenant
from spotreel.services.gateway.wiring import real_deps
from tests.integration import test_gateway_api
from tests.integration.test_gateway_api import BODY, auth

POOL = ids.pool_key("tiny-t2v", "any")
# Bound, not imported by name: see test_gateway_dags.py.
gw_settings = test_gateway_api.gw_settings


@pytest_asyncio.fixture(loop_scope="function")
async def eta_gw(gw_settings, cql):
    key = create_tenant(cql, "eta")
    with real_deps(gw_settings, session=cql) as deps:
        app = create_app(gw_settings, deps, GatewayConfig(pool_stats_cache_seconds=0.0))
        client = TestClient(TestServer(app))
        await client.start_server()
        try:
            yield client, key, deps
        finally:
            await client.close()


def publish(settings, *records: ev.PoolStats) -> None:
    codec, p = Codec.default(), Producer({"bootstrap.servers": settings.kafka_bootstrap})
    for r in records:
        p.produce(pool_stats_topic(settings), key=f"{r.pool}/{r.partition}".encode(), value=codec.encode_message(r),
                  partition=r.partition)
    assert p.flush(30) == 0


async def test_estimate_is_null_without_statistics_then_follows_the_pool_stats_topic(eta_gw, gw_settings):
    client, key, deps = eta_gw
    first = await (await client.post("/v1/videos", json=BODY, headers=auth(key, "eta-0"))).json()
    assert first["estimated_wait_seconds"] is None
    assert first["estimate_unavailable_reason"] == "no statistics for this pool yet"

    now = int(time.time() * 1000)
    # Partition 0: 3 queued, 2 busy workers taking 60 s a video; partition 1: 1 queued, nothing measured.
    publish(gw_settings,
            ev.PoolStats(pool=POOL, partition=0, at_ms=now, queued=3, leased=2, oldest_wait_ms=0, mean_run_ms=60_000),
            ev.PoolStats(pool=POOL, partition=1, at_ms=now, queued=1, leased=0, oldest_wait_ms=0))
    deadline = time.monotonic() + 30
    while (await deps.pools.load(POOL)) is None or (await deps.pools.load(POOL)).queued != 4:
        assert time.monotonic() < deadline, "the gateway never saw the pool-stats records"
        await asyncio.sleep(0.1)

    r = await client.post("/v1/videos", json=BODY, headers=auth(key, "eta-1"))
    body = await r.json()
    # 4 jobs ahead → position 5; 2 workers at 60 s: ceil(5 * 60 / 2) = 150 s.
    assert (body["queue_position"], body["estimated_wait_seconds"]) == (5, 150)
    assert "estimate_unavailable_reason" not in body

    # No worker at all in the pool: no honest number.
    publish(gw_settings, ev.PoolStats(pool=POOL, partition=0, at_ms=now + 1, queued=3, leased=0, oldest_wait_ms=0,
                                      mean_run_ms=60_000))
    deadline = time.monotonic() + 30
    while (await deps.pools.load(POOL)).workers_active != 0:
        assert time.monotonic() < deadline, "the gateway never saw the update"
        await asyncio.sleep(0.1)
    body = await (await client.post("/v1/videos", json=BODY, headers=auth(key, "eta-2"))).json()
    assert body["estimated_wait_seconds"] is None and body["estimate_unavailable_reason"] == "no active worker in this pool"
    assert body["queue_position"] == 5
