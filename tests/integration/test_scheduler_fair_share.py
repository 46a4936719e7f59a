"""Fair share across partitions against the real scheduler and Kafka (services/scheduler/fairshare.py).

Two scheduler processes share four partitions. Tenant a (weight 3) and tenant b (weight 1), their weights
published the way `spotreel tenant set` publishes them (`<prefix>.tenants`). Every job of a hashes to partitions 0-1 and every job of b to partitions 2-3, so no
partition ever sees both tenants: whatever split they get comes from the usage shared on
`<prefix>.tenant-usage` and the requesters' routing by `PoolStats.min_share`. Eight simulated workers (the
Kafka transport's simulator, which asks partitions through the shared dispatch library) keep the pool
saturated with jobs of about 2 seconds. Their GPU-seconds, measured from the events (lease granted -> succeeded), split
within 10% of 75/25; a newcomer's single job is leased before the pool has turned over once (fewer grants in
between than there are workers); the per-tenant usage the schedulers publish (GET /v1/usage's source) and
export (Prometheus) equals what the events show."""

from __future__ import annotations

import asyncio
import time
import urllib.request
import uuid

import pytest

from spotreel.adapters.kafka import produce_command
from spotreel.adapters.partitioning import partition_for
from spotreel.domain import events as ev
from spotreel.domain.plans import settings_for
from spotreel.services.simulator.kafka_link import KafkaLink
from spotreel.platform.ports import free_port
from spotreel.tenancy import publish_settings, settings_record
from spotreel.services.gateway.public.usage import KafkaTenantUsage
from tests.integration.schedkit import (GPU, MODEL, Bus, SchedulerProc, make_topics, scheduler_settings, submit,
                                        teardown)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

PARTS = 4
WORKERS = 8
RUN_S = 2.0
MEASURE_S = 30.0


def _jobs(tenant: str, partitions: set[int], n: int, run: str) -> list:
    out, i = [], 0
    while len(out) < n:
        job = submit(tenant, f"{run}-{i}", model=MODEL, gpu_type=GPU)
        i += 1
        if partition_for(job.job_id, PARTS) in partitions:
            out.append(job)
    return out


async def _worker(link: KafkaLink, worker_id: str, stop: asyncio.Event) -> None:
    while not stop.is_set():
        status, lease = await link.call("POST", f"/internal/workers/{worker_id}/lease",
                                        {"gpu_type": GPU, "models": [MODEL], "wait_seconds": 1.0}, 10)
        if status != 200:
            continue
        # Run times vary by up to 30% either way (a hash of the job), as renders do; identical ones would
        # keep the eight workers in lockstep, asking all at once.
        await asyncio.sleep(RUN_S * (0.7 + 0.6 * (int(lease["job_id"][1:9], 16) % 1000) / 1000))
        await link.call("POST", f"/internal/leases/{lease['job_id']}/complete",
                        {"epoch": lease["epoch"], "worker_id": worker_id, "artifact_key": f"v/{lease['job_id']}",
                         "artifact_checksum": "sum", "artifact_size_bytes": 1}, 30)


async def _fleet(settings, during) -> None:
    link = KafkaLink(settings)
    await link.start()
    stop = asyncio.Event()
    tasks = [asyncio.create_task(_worker(link, f"w{i}", stop)) for i in range(WORKERS)]
    try:
        await during()
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 60)
        link.close()


def _wait_split(procs: list[SchedulerProc], timeout: float = 90.0) -> None:
    """Until both processes' latest assignments are non-empty and together cover every partition once."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        owned = [p.wait_owning(timeout=timeout) for p in procs]
        if all(owned) and sorted(x for o in owned for x in o) == list(range(PARTS)):
            print(f"partitions: {owned}")
            return
        time.sleep(0.5)
    raise AssertionError(f"the two schedulers did not split the partitions: {owned}")


def test_weights_three_to_one_hold_across_partitions_and_a_newcomer_is_served_at_once(stack, tmp_path):
    settings = scheduler_settings("fs" + uuid.uuid4().hex[:10], partitions=PARTS)
    make_topics(settings)
    for tenant, weight in (("a", 3.0), ("b", 1.0)):
        publish_settings(settings, settings_record(tenant, settings_for(None, weight=weight)))
    # Two scheduler processes, two partitions each: a partition's owner learns the other process's usage
    # only from the tenant-usage topic.
    ports = [free_port(), free_port()]
    procs = [SchedulerProc(settings, tmp_path, name, args=("--metrics-port", str(port)))
             for name, port in zip("ab", ports)]
    bus = Bus(settings)
    run = uuid.uuid4().hex[:6]
    with teardown(settings, procs, bus, tail=4000):
        _wait_split(procs)
        # More than either tenant can run in the time, so both stay backlogged throughout.
        backlog = _jobs("a", {0, 1}, 140, run) + _jobs("b", {2, 3}, 140, run)
        for job in backlog:
            produce_command(bus.prod, settings, bus.codec, job)
        bus.prod.flush(30)
        newcomer = _jobs("c", {3}, 1, run)[0]

        async def during() -> None:
            await asyncio.sleep(MEASURE_S / 2)
            produce_command(bus.prod, settings, bus.codec, newcomer)
            bus.prod.flush(10)
            await asyncio.sleep(MEASURE_S / 2)

        asyncio.run(_fleet(settings, during))
        bus.poll(3.0)

        granted = {e.job_id: e for e in bus.events if isinstance(e, ev.JobLeased)}
        done = [e for e in bus.events if isinstance(e, ev.JobSucceeded)]
        tenant_of = {j.job_id: j.tenant for j in [*backlog, newcomer]}
        used = {"a": 0.0, "b": 0.0}
        for e in done:
            if tenant_of[e.job_id] in used:
                used[tenant_of[e.job_id]] += (e.at_ms - granted[e.job_id].at_ms) / 1000
        total = used["a"] + used["b"]
        print(f"GPU-seconds a={used['a']:.1f} b={used['b']:.1f} share a={used['a'] / total:.3f}, "
              f"{len(done)} jobs done")
        assert len(done) >= 3 * WORKERS * 2  # the pool was busy, several turnovers
        queued_left = {t: sum(1 for j in backlog if j.tenant == t and j.job_id not in granted) for t in used}
        assert all(n > 0 for n in queued_left.values()), queued_left  # both backlogged to the end
        assert used["a"] / total == pytest.approx(0.75, abs=0.075)

        queued_at = next(e.at_ms for e in bus.job_events(newcomer.job_id) if isinstance(e, ev.JobQueued))
        leased = granted.get(newcomer.job_id)
        assert leased is not None, "the newcomer's job was never leased"
        between = [e for e in granted.values() if queued_at < e.at_ms < leased.at_ms]
        print(f"newcomer leased {leased.at_ms - queued_at} ms after it was queued, {len(between)} grants between")
        assert len(between) < WORKERS

        # Per-tenant usage as the scheduler publishes it (GET /v1/usage's source) and exports it (Prometheus)
        # equals the GPU-seconds the events show: every lease of a and b ended in a success.
        view = KafkaTenantUsage(settings)
        try:
            deadline = time.monotonic() + 30
            while asyncio.run(view.usage("a"))["used_gpu_seconds"] < used["a"] - 0.01 and time.monotonic() < deadline:
                time.sleep(0.2)
            for tenant in used:
                got = asyncio.run(view.usage(tenant))
                assert got["used_gpu_seconds"] == pytest.approx(used[tenant], abs=0.01), (tenant, got)
        finally:
            view.close()
        text = "".join(urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
                       for port in ports)
        for tenant in used:
            exported = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                           if line.startswith("spotreel_scheduler_tenant_gpu_seconds{") and f'tenant="{tenant}"' in line)
            assert exported == pytest.approx(used[tenant], abs=0.01), (tenant, exported)
