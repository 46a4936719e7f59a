"""The worker API (/internal) against the real scheduler process, Kafka and Cassandra: simulated workers
register, long-poll a lease, heartbeat, report progress, hand back and complete; a worker whose lease was
superseded gets 409 with the scheduler's reason. One scheduler, topic prefix and keyspace for the module (its start
costs more than a test here): each test has a tenant, models (pools) and worker ids of its own, and a gateway
of its own in the test process."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import replace

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer

from spotreel.platform.migrate import migrate
from spotreel.services.gateway.app import create_app
from spotreel.api.config import GatewayConfig
from spotreel.tenancy import create_tenant, create_worker_key
from spotreel.services.gateway.wiring import real_deps
from tests.integration.schedkit import SchedulerProc, drop_topics, make_topics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def plane_cql(cassandra_cluster):
    """A session on the module's own keyspace, dropped at the end."""
    keyspace = "gw" + uuid.uuid4().hex[:12]
    session = cassandra_cluster.connect()
    migrate(session, keyspace, say=lambda *_: None)
    yield session
    session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}")
    session.shutdown()


@pytest.fixture(scope="module")
def wk_settings(settings, plane_cql, tmp_path_factory):
    s = replace(settings, topic_prefix=f"test.{plane_cql.keyspace}", cassandra_keyspace=plane_cql.keyspace,
                partitions=3)
    make_topics(s)
    proc = SchedulerProc(s, tmp_path_factory.mktemp("gw-workers"))
    try:
        proc.wait_owning({0, 1, 2})
        yield s
    finally:
        proc.stop()
        drop_topics(s)


async def _client(settings, cql, cfg: GatewayConfig):
    # The tenant is the test's own: idempotency keys and quotas never meet another test's.
    tenant = create_tenant(cql, f"alpha-{uuid.uuid4().hex[:10]}")
    keys = {"tenant": tenant, "worker": create_worker_key(cql, "fleet-a")}
    with real_deps(settings, session=cql) as deps:
        client = TestClient(TestServer(create_app(settings, deps, cfg)))
        await client.start_server()
        try:
            yield client, keys
        finally:
            await client.close()


@pytest_asyncio.fixture(loop_scope="function")
async def gw(wk_settings, plane_cql):
    # Every answer carries its verdict, however slow the scheduler.
    async for pair in _client(wk_settings, plane_cql, GatewayConfig(verdict_seconds=10.0,
                                                                    renewal_answer_seconds=10.0)):
        yield pair


@pytest_asyncio.fixture(loop_scope="function")
async def gw_late(wk_settings, plane_cql):
    # A renewal is answered before its verdict can come; the verdict is watched for 10 s.
    async for pair in _client(wk_settings, plane_cql, GatewayConfig(verdict_seconds=10.0,
                                                                    renewal_answer_seconds=0.0)):
        yield pair


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
    # the pool's measured lease losses ride along (a new pool: none lost yet)
    assert a["pool_lease_losses_1h"] == 0 and a["pool_leased_seconds_1h"] >= 0

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
    worker = f"w-new-{uuid.uuid4().hex[:8]}"  # never registered, whatever ran before on this scheduler
    unregistered = await client.post(f"/internal/workers/{worker}/lease", json={}, headers=w)
    assert unregistered.status == 409 and (await unregistered.json())["error"]["code"] == "worker_not_registered"
    assert (await client.post(f"/internal/workers/{worker}/lease", json={"models": "m"}, headers=w)).status == 422
    assert (await client.post(f"/internal/workers/{worker}/lease", headers={})).status == 401
    bad = await client.post(f"/internal/leases/j{'0' * 32}/heartbeat", json={"epoch": "one", "worker_id": "w"},
                            headers=w)
    assert bad.status == 422 and (await bad.json())["error"]["field"] == "epoch"
    assert (await client.post("/internal/leases/nope/heartbeat", json={"epoch": 1, "worker_id": "w"},
                              headers=w)).status == 404


def _pool_stats(settings, pool: str, partition: int, want, timeout: float = 60.0):
    """The latest pool-stats record of (pool, partition) once `want(record)` holds."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    from spotreel.codec import Codec
    from spotreel.platform.topics import pool_stats_topic

    codec = Codec.default()
    cons = Consumer({"bootstrap.servers": settings.kafka_bootstrap, "group.id": f"ps-{uuid.uuid4()}",
                     "enable.auto.commit": False})
    cons.assign([TopicPartition(pool_stats_topic(settings), partition, OFFSET_BEGINNING)])
    last = None
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            for msg in cons.consume(200, 0.2):
                if not msg.error() and msg.key() == f"{pool}/{partition}".encode():
                    last = codec.decode_message(msg.value())
            if last is not None and want(last):
                return last
        raise AssertionError(f"no pool-stats record of {pool}/{partition} as wanted; last: {last}")
    finally:
        cons.close()


async def test_checkpoint_write_time_reaches_pool_stats_through_the_http_worker_api(gw, wk_settings):
    """duration_ms: HttpTransport -> POST /internal/leases/{job}/checkpoint -> RecordCheckpoint -> the
    scheduler's pool-stats record (mean_checkpoint_ms)."""
    import asyncio

    from spotreel.adapters.partitioning import partition_for
    from spotreel.domain.ids import pool_key
    from spotreel.worker.transport import WorkerProfile
    from spotreel.worker.transport_http import HttpTransport

    client, keys = gw
    w = bearer(keys["worker"])
    model = f"m-{uuid.uuid4().hex[:8]}"
    r = await client.post("/v1/videos", json={"prompt": "a slow fox", "model": model, "gpu_type": "cpu"},
                          headers={**bearer(keys["tenant"]), "Idempotency-Key": f"ck-{model}"})
    assert r.status == 202, await r.text()
    job_id = (await r.json())["job_id"]

    transport = HttpTransport(str(client.make_url("")), keys["worker"], WorkerProfile("w-ck", "cpu", (model,)))
    lease = await asyncio.to_thread(transport.lease, 20.0)
    assert lease is not None and lease.job_id == job_id

    fence = {"epoch": lease.epoch, "worker_id": "w-ck"}
    base = {**fence, "checkpoint_key": f"ckpt/{job_id}/e{lease.epoch}/s9.safetensors", "step": 9,
            "progress_pct": 45.0, "checksum": "c" * 64, "size_bytes": 10}
    for bad in (-1, 86_400_001, 2**63, 1.5, True, "120"):
        r = await client.post(f"/internal/leases/{job_id}/checkpoint", json={**base, "duration_ms": bad}, headers=w)
        assert r.status == 422, (bad, await r.text())
        assert (await r.json())["error"]["field"] == "duration_ms"

    first = await asyncio.to_thread(transport.checkpoint, lease, f"ckpt/{job_id}/e{lease.epoch}/s4.safetensors",
                                    4, 20.0, "a" * 64, 10, 150)
    assert first.accepted, first
    r = await client.post(f"/internal/leases/{job_id}/checkpoint", json={**base, "duration_ms": 50}, headers=w)
    assert r.status == 200 and (await r.json())["event"] == "CheckpointRecorded", await r.text()
    # Without duration_ms the checkpoint still counts; it just adds nothing to the mean.
    r = await client.post(f"/internal/leases/{job_id}/checkpoint",
                          json={**base, "checkpoint_key": f"ckpt/{job_id}/e{lease.epoch}/s12.safetensors",
                                "step": 12, "progress_pct": 60.0}, headers=w)
    assert r.status == 200, await r.text()
    # Each answer came after the scheduler applied its command: a record stamped later has seen all three.
    answered_ms = int(time.time() * 1000)

    rec = _pool_stats(wk_settings, pool_key(model, "cpu"), partition_for(job_id, wk_settings.partitions),
                      lambda s: s.at_ms > answered_ms)
    assert rec.mean_checkpoint_ms == 100.0 and rec.leased == 1


async def _submitted_and_leased(client, w: dict, t: dict, worker: str) -> tuple[str, dict]:
    """A job of a model of its own submitted with the tenant key `t`, leased by `worker`: (job id, fence)."""
    model = f"m-{uuid.uuid4().hex[:8]}"
    r = await client.post("/v1/videos", json={"prompt": "a heron", "model": model, "gpu_type": "cpu"},
                          headers={**t, "Idempotency-Key": f"k-{worker}"})
    assert r.status == 202, await r.text()
    lease = await client.post(f"/internal/workers/{worker}/lease", json={"gpu_type": "cpu", "models": [model],
                                                                         "wait_seconds": 20}, headers=w)
    assert lease.status == 200, await lease.text()
    return (await r.json())["job_id"], {"epoch": (await lease.json())["epoch"], "worker_id": worker}


async def test_pause_resume_and_cancel_reach_the_holder_in_its_renewal_answers(gw):
    # The answer's cancel/drain come from the scheduler's verdict (no read model on the way): a pause asks the
    # holder to drain, a resume withdraws it, a cancel tells it to stop, each on the very next renewal.
    client, keys = gw
    w, t = bearer(keys["worker"]), bearer(keys["tenant"])
    job_id, fence = await _submitted_and_leased(client, w, t, "w-h")

    async def renew(kind: str) -> dict:
        body = fence if kind == "heartbeat" else {**fence, "step": 3, "progress_pct": 10.0}
        r = await client.post(f"/internal/leases/{job_id}/{kind}", json=body, headers=w)
        assert r.status == 200, await r.text()
        return await r.json()

    async def tell(method: str, path: str) -> None:
        r = await client.request(method, f"/v1/videos/{job_id}{path}", headers=t)
        assert r.status == 202, await r.text()

    asks = lambda a: (a["cancel"], a["drain"])  # noqa: E731
    assert asks(await renew("heartbeat")) == (False, False)
    await tell("POST", "/pause")
    assert asks(await renew("heartbeat")) == (False, True)
    assert asks(await renew("progress")) == (False, True)
    await tell("POST", "/resume")
    assert asks(await renew("progress")) == (False, False)
    await tell("POST", "/cancel")
    answer = await renew("heartbeat")
    assert asks(answer) == (True, False) and answer["lease_expires_at_ms"] > 0
    assert asks(await renew("progress")) == (True, False)
    rel = await client.post(f"/internal/leases/{job_id}/release", json={**fence, "reason": "cancelled"}, headers=w)
    assert rel.status == 200, await rel.text()


async def test_a_verdict_that_comes_after_its_answer_is_told_on_the_next_renewal(gw_late):
    # Renewals answered at once (202 pending): a cancel asked in one renewal's verdict reaches the holder in a
    # later answer, and a refusal that proves the lease gone comes back as that later renewal's 409.
    client, keys = gw_late
    w, t = bearer(keys["worker"]), bearer(keys["tenant"])
    job_id, fence = await _submitted_and_leased(client, w, t, "w-l")

    async def heartbeat():
        r = await client.post(f"/internal/leases/{job_id}/heartbeat", json=fence, headers=w)
        return r.status, await r.json()

    status, first = await heartbeat()
    assert status == 202 and first["verdict"] == "pending" and (first["cancel"], first["drain"]) == (False, False)
    assert first["renew_in_seconds"] > 0  # no verdict in time: the holder is paced
    r = await client.post(f"/v1/videos/{job_id}/cancel", headers=t)
    assert r.status == 202, await r.text()

    async def until(done, what: str):
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            status, body = await heartbeat()
            if done(status, body):
                return status, body
            assert status == 202 and body["verdict"] == "pending", (status, body)
            await asyncio.sleep(0.3)
        raise AssertionError(f"no renewal answer told {what} within 15 s")

    status, told = await until(lambda s, b: s == 202 and b["cancel"], "the cancel")
    assert told["verdict"] == "pending" and told["drain"] is False
    rel = await client.post(f"/internal/leases/{job_id}/release", json={**fence, "reason": "cancelled"}, headers=w)
    assert rel.status == 200, await rel.text()
    status, refused = await until(lambda s, b: s == 409, "the refusal")
    assert refused["error"]["code"] in ("stale_epoch", "terminal"), refused  # released, and cancelled by it


async def test_renewals_of_many_workers_go_in_batches_and_each_gets_its_own_verdict(gw):
    # The renewal window (gateway README): heartbeats and progress reports sent together travel as RenewalBatch
    # records, and each request is still answered with its own verdict: the first renewal of each lease is
    # persisted (an event), the next ones absorbed (one RenewalReplies per batch), a stale epoch refused.
    from spotreel.services.gateway.context import GATEWAY

    client, keys = gw
    w, t = bearer(keys["worker"]), bearer(keys["tenant"])
    held = await asyncio.gather(*(_submitted_and_leased(client, w, t, f"w-batch-{i}") for i in range(9)))
    sender = client.server.app[GATEWAY].deps.commands
    batches, batched = sender.batches, sender.batched

    async def renew(job_id: str, fence: dict, kind: str, step: int = 0) -> tuple[int, dict]:
        body = fence if kind == "heartbeat" else {**fence, "step": step, "progress_pct": 5.0 * step}
        r = await client.post(f"/internal/leases/{job_id}/{kind}", json=body, headers=w)
        return r.status, await r.json()

    for round_, kind in enumerate(("heartbeat", "progress", "heartbeat")):
        answers = await asyncio.gather(*(renew(j, f, kind, round_) for j, f in held),
                                       renew(held[0][0], {**held[0][1], "epoch": held[0][1]["epoch"] + 7}, kind))
        *mine, stale = answers
        assert all(status == 200 and body["verdict"] == "accepted" for status, body in mine), answers
        assert {body["event"] for _, body in mine} == {"LeaseRenewed" if kind == "heartbeat" else "ProgressReported"}
        assert all(body["lease_expires_at_ms"] > 0 for _, body in mine)
        assert stale[0] == 409, stale
    renewals = 3 * 10
    assert sender.batched - batched == renewals
    assert sender.batches - batches < renewals / 2, (sender.batches - batches, renewals)


async def test_idle_workers_lease_polls_go_in_batches_and_each_is_granted_or_refused_on_its_own(gw):
    # Lease requests wait in the same window (gateway README): the polls of idle workers of a model nothing is
    # queued for travel in RenewalBatch records and each comes back refused by the scheduler (the reason it
    # gave, read from the batch's RenewalReplies, not the poll's own timeout); a worker polling for a model with
    # a job queued is granted it, alone on the assignments topic.
    from spotreel.services.gateway.context import GATEWAY

    client, keys = gw
    w, t = bearer(keys["worker"]), bearer(keys["tenant"])
    sender = client.server.app[GATEWAY].deps.commands
    batches, requests = sender.batches, sender.batched_requests
    idle_model = f"m-idle-{uuid.uuid4().hex[:8]}"

    async def poll(worker: str, model: str) -> tuple[int, str | None]:
        r = await client.post(f"/internal/workers/{worker}/lease",
                              json={"gpu_type": "cpu", "models": [model], "wait_seconds": 3}, headers=w)
        return r.status, r.headers.get("X-Spotreel-No-Work")

    idle = await asyncio.gather(*(poll(f"w-idle-{i}", idle_model) for i in range(12)))
    assert all(status == 204 for status, _ in idle), idle
    # Each idle worker asked its own partition (its presence) and heard the scheduler's "no queued job".
    assert {reason for _, reason in idle} == {"no_queued_job"}, idle
    assert sender.batched_requests - requests >= 12
    assert sender.batches - batches < 12, (sender.batches - batches, sender.batched_requests - requests)
    job_id, fence = await _submitted_and_leased(client, w, t, "w-idle-granted")
    assert job_id and fence["epoch"] >= 1
    assert sender.batched_requests - requests > 12
