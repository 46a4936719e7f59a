"""The worker API (/internal) against the real scheduler process, Kafka and Cassandra: simulated workers
register, long-poll a lease, heartbeat, report progress, hand back and complete; a worker whose lease was
superseded gets 409 with the scheduler's reason. Per-test topic prefix and keyspace."""

from __future__ import annotations

import time
import uuid
from dataclasses import replace

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer

from spotreel.infra.migrate import migrate
from spotreel.services.gateway.app import create_app
from spotreel.services.gateway.config import GatewayConfig
from spotreel.services.gateway.tenants import create_tenant, create_worker_key
from spotreel.services.gateway.wiring import real_deps
from tests.integration.schedkit import SchedulerProc, drop_topics, make_topics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture
def wk_settings(settings, unique, cql, tmp_path):
    s = replace(settings, topic_prefix=f"test.{unique}", cassandra_keyspace=unique, partitions=3)
    make_topics(s)
    migrate(cql, unique, say=lambda *_: None)
    proc = SchedulerProc(s, tmp_path)
    try:
        proc.wait_owning({0, 1, 2})
        yield s
    finally:
        proc.stop()
        drop_topics(s)


@pytest_asyncio.fixture(loop_scope="function")
async def gw(wk_settings, cql):
    keys = {"tenant": create_tenant(cql, "alpha"), "worker": create_worker_key(cql, "fleet-a")}
    with real_deps(wk_settings, session=cql) as deps:
        client = TestClient(TestServer(create_app(wk_settings, deps, GatewayConfig(verdict_seconds=10.0))))
        await client.start_server()
        try:
            yield client, keys
        finally:
            await client.close()


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_workers_lease_heartbeat_progress_release_complete_and_stale_epoch_409(gw):
    client, keys = gw
    w = bearer(keys["worker"])
    model = f"m-{uuid.uuid4().hex[:8]}"
    r = await client.post("/v1/videos", json={"prompt": "a red fox", "model": model, "gpu_type": "cpu"},
                          headers={**bearer(keys["tenant"]), "Idempotency-Key": "k1"})
    assert r.status == 202, await r.text()
    job_id = (await r.json())["job_id"]

    # Credentials are separate: a tenant key is refused on /internal, a worker key on /v1.
    assert (await client.post("/internal/workers/w-a/register", json={"gpu_type": "cpu", "models": [model]},
                              headers=bearer(keys["tenant"]))).status == 401
    assert (await client.get("/v1/videos", headers=w)).status == 401

    reg = await client.post("/internal/workers/w-a/register", json={"gpu_type": "cpu", "models": [model]},
                            headers=w)
    assert reg.status == 200 and (await reg.json())["key_name"] == "fleet-a"

    t0 = time.monotonic()
    lease = await client.post("/internal/workers/w-a/lease", json={"wait_seconds": 20}, headers=w)
    assert lease.status == 200, await lease.text()
    a = await lease.json()
    assert a["job_id"] == job_id and a["worker_id"] == "w-a" and a["epoch"] >= 1 and a["model"] == model
    assert time.monotonic() - t0 < 20

    fence = {"epoch": a["epoch"], "worker_id": "w-a"}
    hb = await client.post(f"/internal/leases/{job_id}/heartbeat", json=fence, headers=w)
    assert hb.status == 200, await hb.text()
    hb = await hb.json()
    assert hb["event"] == "LeaseRenewed" and hb["cancel"] is False and hb["drain"] is False
    assert hb["lease_expires_at_ms"] > a["at_ms"]

    pr = await client.post(f"/internal/leases/{job_id}/progress",
                           json={**fence, "step": 5, "progress_pct": 25.0}, headers=w)
    assert pr.status == 200 and (await pr.json())["event"] == "ProgressReported", await pr.text()

    # Preempted: A hands the lease back; B gets the job under a newer epoch.
    rel = await client.post(f"/internal/leases/{job_id}/release", json={**fence, "reason": "preempted"}, headers=w)
    assert rel.status == 200, await rel.text()
    lease_b = await client.post("/internal/workers/w-b/lease",
                                json={"gpu_type": "cpu", "models": [model], "wait_seconds": 20}, headers=w)
    assert lease_b.status == 200, await lease_b.text()
    b = await lease_b.json()
    assert b["job_id"] == job_id and b["epoch"] > a["epoch"]

    # A, now stale, tries to complete: the scheduler rejects it and the gateway answers 409 with its reason.
    stale = await client.post(f"/internal/leases/{job_id}/complete",
                              json={**fence, "artifact_key": "videos/x.mp4", "artifact_checksum": "0" * 64,
                                    "artifact_size_bytes": 10}, headers=w)
    assert stale.status == 409, await stale.text()
    err = (await stale.json())["error"]
    assert err["epoch_given"] == a["epoch"] and err["current_epoch"] == b["epoch"] and err["reason"]

    fb = {"epoch": b["epoch"], "worker_id": "w-b"}
    assert (await client.post(f"/internal/leases/{job_id}/heartbeat", json=fb, headers=w)).status == 200
    done = await client.post(f"/internal/leases/{job_id}/complete",
                             json={**fb, "artifact_key": f"videos/{job_id}/e{b['epoch']}.mp4",
                                   "artifact_checksum": "a" * 64, "artifact_size_bytes": 1234}, headers=w)
    assert done.status == 200, await done.text()
    assert (await done.json())["event"] == "JobSucceeded"

    # Nothing left for this pool: the long-poll ends with 204 at its deadline.
    t0 = time.monotonic()
    empty = await client.post("/internal/workers/w-c/lease",
                              json={"gpu_type": "cpu", "models": [model], "wait_seconds": 1.5}, headers=w)
    assert empty.status == 204 and 1.0 < time.monotonic() - t0 < 8


async def test_worker_api_validation(gw):
    client, keys = gw
    w = bearer(keys["worker"])
    assert (await client.post("/internal/workers/w-a/lease", json={}, headers=w)).status == 422
    assert (await client.post("/internal/workers/w-a/lease", headers={})).status == 401
    bad = await client.post(f"/internal/leases/j{'0' * 32}/heartbeat", json={"epoch": "one", "worker_id": "w"},
                            headers=w)
    assert bad.status == 422 and (await bad.json())["error"]["field"] == "epoch"
    assert (await client.post("/internal/leases/nope/heartbeat", json={"epoch": 1, "worker_id": "w"},
                              headers=w)).status == 404
