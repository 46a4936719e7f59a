"""A lease granted after the worker's long-poll gave up is not orphaned (gateway lease desk, domain
`leases.UNCLAIMED`), against the real scheduler process, Kafka and Cassandra, with the gateway served the
way `spotreel gateway` serves it (handlers are not cancelled when their client goes).

The scheduler is stopped (SIGSTOP) while the job and the worker's RequestWork wait on the same commands
partition, so the grant is certain to come after the worker's HTTP client has timed out and hung up."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
import uuid
from dataclasses import replace

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web

from spotreel.adapters.partitioning import partition_for
from spotreel.domain import events as ev
from spotreel.domain.leases import UNCLAIMED
from spotreel.platform.migrate import migrate
from spotreel.services.gateway.app import create_app, serve_metrics
from spotreel.api.config import GatewayConfig
from spotreel.tenancy import create_worker_key
from spotreel.services.gateway.wiring import real_deps
from tests.integration.schedkit import GPU, MODEL, scheduler_plane, submit

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

HOLD_S = 3.0
TTL_MS = 120_000  # far beyond the test: a job back in the queue early was released, not expired
METRICS_URL: dict[str, str] = {}  # gateway URL -> its internal metrics endpoint (the fixture serves both)


@pytest.fixture
def plane(settings, unique, cql, tmp_path):
    s = replace(settings, topic_prefix=f"test.{unique}", cassandra_keyspace=unique, partitions=3)
    migrate(cql, unique, say=lambda *_: None)
    with scheduler_plane(s, tmp_path) as (proc, bus):
        yield s, proc, bus


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest_asyncio.fixture(loop_scope="function")
async def gateway(plane, cql):
    s, proc, bus = plane
    key = create_worker_key(cql, "fleet-u")
    # The verdict in the answer (the fenced heartbeat below must see its 409, however slow the scheduler).
    cfg = GatewayConfig(unclaimed_lease_hold_seconds=HOLD_S, lease_ttl_ms=TTL_MS, renewal_answer_seconds=5.0)
    with real_deps(s, session=cql) as deps:
        app = create_app(s, deps, cfg)
        metrics_port = _free_port()
        serve_metrics(app, "127.0.0.1", metrics_port)  # as `spotreel gateway --metrics-port`
        runner = web.AppRunner(app, handler_cancellation=False)  # as web.run_app
        await runner.setup()
        port = _free_port()
        METRICS_URL[f"http://127.0.0.1:{port}"] = f"http://127.0.0.1:{metrics_port}"
        await web.TCPSite(runner, "127.0.0.1", port).start()
        try:
            async with aiohttp.ClientSession() as session:
                yield f"http://127.0.0.1:{port}", session, key
        finally:
            await runner.cleanup()


def _worker_on(partition: int, partitions: int) -> str:
    """A worker id whose first RequestWork goes to `partition` (no pool stats yet: the ring starts there)."""
    while True:
        wid = f"w-{uuid.uuid4().hex[:8]}"
        if partition_for(wid, partitions) == partition:
            return wid


async def _poll(session, url, key, wid, wait: float, client_timeout: float):
    body = {"gpu_type": GPU, "models": [MODEL], "wait_seconds": wait}
    async with session.post(f"{url}/internal/workers/{wid}/lease", json=body,
                            headers={"Authorization": f"Bearer {key}"},
                            timeout=aiohttp.ClientTimeout(total=client_timeout)) as r:
        return r.status, (await r.json() if r.status == 200 else None)


async def _abandoned_poll(plane, gateway, tag: str):
    """Job queued behind a stopped scheduler, a poll whose client hangs up, then the scheduler resumes and
    grants the lease to a worker that is no longer waiting. Returns (job id, worker id, JobLeased)."""
    s, proc, bus = plane
    url, session, key = gateway
    job = submit("acme", f"{tag}-{uuid.uuid4().hex[:6]}")
    wid = _worker_on(partition_for(job.job_id, s.partitions), s.partitions)
    os.killpg(proc.proc.pid, signal.SIGSTOP)
    try:
        bus.send(job)
        with pytest.raises(asyncio.TimeoutError):
            await _poll(session, url, key, wid, wait=20.0, client_timeout=1.5)
    finally:
        os.killpg(proc.proc.pid, signal.SIGCONT)
    leased = await asyncio.to_thread(bus.wait_event, job.job_id, ev.JobLeased, 60)
    assert leased.worker_id == wid
    return job.job_id, wid, leased


async def _metric(session, url: str, outcome: str) -> float:
    async with session.get(f"{METRICS_URL[url]}/metrics") as r:
        text = await r.text()
    for line in text.splitlines():
        if line.startswith("spotreel_gateway_lease_answers_total") and f'outcome="{outcome}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_the_next_poll_of_the_worker_that_hung_up_gets_that_same_lease(plane, gateway) -> None:
    s, proc, bus = plane
    url, session, key = gateway
    job_id, wid, leased = await _abandoned_poll(plane, gateway, "claim")
    await asyncio.sleep(1.0)  # the answer reaches the gateway just after JobLeased: let it be parked
    t0 = time.monotonic()
    status, body = await _poll(session, url, key, wid, wait=10.0, client_timeout=30.0)
    assert status == 200, body
    assert (body["job_id"], body["epoch"], body["worker_id"]) == (job_id, leased.epoch, wid)
    assert time.monotonic() - t0 < 2.0  # parked: handed over at once, no new RequestWork round trip
    # Parked and claimed (or, had the answer been slower than the sleep, delivered to this poll directly).
    assert await _metric(session, url, "claimed") + await _metric(session, url, "delivered") == 1.0
    assert await _metric(session, url, "claimed") == 1.0
    # The worker holds it as any lease: its heartbeat is accepted, and nothing releases it after the hold.
    async with session.post(f"{url}/internal/leases/{job_id}/heartbeat", json={"epoch": leased.epoch,
                            "worker_id": wid}, headers={"Authorization": f"Bearer {key}"}) as r:
        assert r.status in (200, 202), await r.text()
    await asyncio.sleep(HOLD_S + 1.0)
    await asyncio.to_thread(bus.poll, 0.5)
    assert [type(e).__name__ for e in bus.job_events(job_id)].count("JobLeased") == 1
    assert not [e for e in bus.job_events(job_id) if isinstance(e, (ev.LeaseReleased, ev.LeaseExpired))]
    assert await _metric(session, url, "released") == 0.0


async def test_a_lease_nobody_claims_is_back_in_the_queue_after_the_hold_not_the_ttl(plane, gateway) -> None:
    s, proc, bus = plane
    url, session, key = gateway
    job_id, wid, leased = await _abandoned_poll(plane, gateway, "release")
    released = await asyncio.to_thread(bus.wait_event, job_id, ev.LeaseReleased, 30)
    requeued = await asyncio.to_thread(bus.wait_event, job_id, ev.JobRequeued, 30)
    assert (released.reason, released.epoch, released.worker_id, released.preemptions) == (
        UNCLAIMED, leased.epoch, wid, 0)
    assert requeued.reason == UNCLAIMED
    # Freed a few seconds after the grant, where the TTL would have taken two minutes.
    assert released.at_ms - leased.at_ms < HOLD_S * 1000 + 5_000 < TTL_MS
    assert await _metric(session, url, "released") == 1.0
    # Another worker gets the job at once, under a newer epoch; the budgets are untouched.
    other = _worker_on((partition_for(job_id, s.partitions) + 1) % s.partitions, s.partitions)
    status, body = await _poll(session, url, key, other, wait=20.0, client_timeout=40.0)
    assert status == 200 and body["job_id"] == job_id and body["epoch"] == leased.epoch + 1, body
    await asyncio.to_thread(bus.poll, 0.5)
    state = bus.state(job_id)
    assert state.preemptions == 0 and state.attempts_used == 0
    # The first worker, if it turns up late with the old epoch, is fenced off.
    async with session.post(f"{url}/internal/leases/{job_id}/heartbeat", json={"epoch": leased.epoch,
                            "worker_id": wid}, headers={"Authorization": f"Bearer {key}"}) as r:
        assert r.status == 409
