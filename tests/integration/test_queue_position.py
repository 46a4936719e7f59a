"""The queue position and ETA the gateway tells follow the order the live scheduler then really dispatches in.

A real scheduler process (one partition, so the one worker's requests need no routing) and the gateway's
real pool-stats reader and admission (services/gateway/public/queueplace.py, admission.py), on the real Kafka.
Tenant b runs one warm-up job first, so the pool has a measured generation time and b a usage. Then seven
jobs are queued with no worker asking: c's priority-5 job, a's four and b's two of priority 1 (a weight 2.5,
b weight 1). The gateway is asked each job's position and wait (the positions read off the records the
scheduler publishes: counts per tier and tenant, each tenant's usage, weight and room). Then one simulated
worker takes them one at a time: the order of the grants is the order told: the higher tier first although
c is the newest job, then a and b interleaved by their shares (c, a, a, a, b, a, b).
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from spotreel.adapters.kafka import produce_command
from spotreel.domain import events as ev
from spotreel.domain.plans import settings_for
from spotreel.services.simulator.kafka_link import KafkaLink
from spotreel.services.gateway.public.admission import Admission
from spotreel.api.config import GatewayConfig
from spotreel.services.gateway.deps import Tenant
from spotreel.services.gateway.public.poolview import KafkaPoolStats
from spotreel.tenancy import publish_settings, settings_record
from tests.integration.schedkit import GPU, MODEL, POOL, Bus, SchedulerProc, drop_topics, make_topics, \
    scheduler_settings, submit

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

RUN_S = 0.5


async def _work(settings, n: int) -> None:
    """One simulated worker: take `n` leases one after another, each `RUN_S` long."""
    link = KafkaLink(settings)
    await link.start()
    try:
        done = 0
        while done < n:
            status, lease = await link.call("POST", "/internal/workers/w1/lease",
                                            {"gpu_type": GPU, "models": [MODEL], "wait_seconds": 1.0}, 10)
            if status != 200:
                continue
            await asyncio.sleep(RUN_S)
            await link.call("POST", f"/internal/leases/{lease['job_id']}/complete",
                            {"epoch": lease["epoch"], "worker_id": "w1", "artifact_key": f"v/{lease['job_id']}",
                             "artifact_checksum": "sum", "artifact_size_bytes": 1}, 30)
            done += 1
        # Ask once more with nothing queued: the scheduler counts the worker idle, so the pool has one.
        await link.call("POST", "/internal/workers/w1/lease", {"gpu_type": GPU, "models": [MODEL], "wait_seconds": 0.5},
                        10)
    finally:
        link.close()


def _until(what: str, check, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_positions_told_are_the_order_the_scheduler_dispatches_in(stack, tmp_path):
    settings = scheduler_settings("qp" + uuid.uuid4().hex[:10], partitions=1)
    make_topics(settings)
    for tenant, weight in (("a", 2.5), ("b", 1.0), ("c", 1.0)):
        publish_settings(settings, settings_record(tenant, settings_for(None, weight=weight)))
    proc = SchedulerProc(settings, tmp_path)
    bus = Bus(settings)
    pools = None
    run = uuid.uuid4().hex[:6]
    try:
        proc.wait_owning({0})
        # The simulated worker declares no warm model: no model switch in the wait, so it is the queue's alone.
        pools = KafkaPoolStats(settings)
        admission = Admission(GatewayConfig(pool_stats_cache_seconds=0.0, model_switch_seconds=0.0), reads=None,
                              pools=pools)
        bus.send(submit("b", f"{run}-warm", model=MODEL, gpu_type=GPU))
        asyncio.run(_work(settings, 1))
        _until("no measured generation time", lambda: any(r.mean_run_ms > 0 for r in pools.records(POOL)))

        jobs = [submit("a", f"{run}-a{i}", model=MODEL, gpu_type=GPU, priority=1) for i in range(4)]
        jobs += [submit("b", f"{run}-b{i}", model=MODEL, gpu_type=GPU, priority=1) for i in range(2)]
        jobs += [submit("c", f"{run}-c0", model=MODEL, gpu_type=GPU, priority=5)]
        for job in jobs:  # one at a time, so each tenant's jobs are queued in this order
            produce_command(bus.prod, settings, bus.codec, job)
            bus.prod.flush(10)
        _until("the pool-stats never showed the seven queued jobs",
               lambda: any(r.queued == 7 and r.tenant_standing for r in pools.records(POOL)))

        bus.poll(0.5)
        # A tenant's jobs of one tier go oldest first: (queued at, job id), as the read model lists them.
        age = {e.job_id: (e.at_ms, e.job_id) for e in bus.events if isinstance(e, ev.JobQueued)}
        told = {}
        for job in jobs:
            own = sum(1 for j in jobs if (j.tenant, j.priority) == (job.tenant, job.priority)
                      and age[j.job_id] < age[job.job_id])
            told[job.job_id] = asyncio.run(admission.estimate(POOL, Tenant(job.tenant), job.priority, own))
        print({j.idempotency_key: (told[j.job_id].queue_position, told[j.job_id].wait_seconds, told[j.job_id].reason) for j in jobs})

        asyncio.run(_work(settings, len(jobs)))
        _until("not every job was leased", lambda: (bus.poll(0.2), sum(
            isinstance(e, ev.JobLeased) and e.job_id in told for e in bus.events))[1] == len(jobs))
        order = [e.job_id for e in sorted((e for e in bus.events if isinstance(e, ev.JobLeased) and e.job_id in told),
                                          key=lambda e: e.at_ms)]
        tenant = {j.job_id: j.tenant for j in jobs}
        print("granted:", [tenant[j] for j in order])
        assert [tenant[j] for j in order] == ["c", "a", "a", "a", "b", "a", "b"]
        assert {j: told[j].queue_position for j in order} == {j: i + 1 for i, j in enumerate(order)}
        waits = [told[j].wait_seconds for j in order]
        assert all(w is not None for w in waits) and waits == sorted(waits) and waits[0] < waits[-1]
    except BaseException:
        print(f"----- tail of {proc.log_path.name} -----\n{proc.log()[-4000:]}")
        raise
    finally:
        if pools is not None:
            pools.close()
        bus.close()
        proc.stop()
        drop_topics(settings)
