"""`pending_reason`: why a job does not run yet, from its read-model row, the pool's pool-stats and the
tenant's leases (services/gateway/public/pending.py), in GET /v1/videos/{id} and the SSE stream."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import pytest_asyncio

from spotreel.domain import events as ev
from spotreel.api import sse
from spotreel.api.config import GatewayConfig
from spotreel.services.gateway.deps import Tenant
from spotreel.services.gateway.public.pending import PoolQueue, pending_reason, pool_queue
from tests.unit.gateway_fakes import fake_deps, job_view, serving

pytestmark = pytest.mark.unit

A = {"Authorization": "Bearer key-a"}
JOB = "j" + "b" * 32
NOW = 1_700_000_000_000
POOL = "tiny-t2v@any"


def _stats(partition: int, tiers: dict[int, int], at_ms: int = NOW, leased: int = 2, idle: int = 0):
    return ev.PoolStats(pool=POOL, partition=partition, at_ms=at_ms, queued=sum(tiers.values()), leased=leased,
                        oldest_wait_ms=0, queued_by_tier=tuple(f"{k}={v}" for k, v in tiers.items()),
                        idle_workers=idle)


def test_pool_queue_sums_tiers_and_busy_workers_over_fresh_partitions_only() -> None:
    q = pool_queue([_stats(0, {1: 2, 9: 1}), _stats(1, {9: 2}, idle=1), _stats(2, {5: 7}, at_ms=NOW - 60_000)],
                   NOW, 30_000)
    assert q == PoolQueue({1: 2, 9: 3}, 4, 1)
    assert pool_queue([_stats(0, {1: 1}, at_ms=NOW - 60_000)], NOW, 30_000) is None


@pytest.mark.parametrize("status, kw, code", [
    ("paused", {}, "paused"),
    ("waiting", {}, "parents_unfinished"),
    ("scheduled", {"run_at_ms": NOW + 5_000}, "run_at_future"),
    ("scheduled", {"run_at_ms": NOW + 5_000, "attempt": 1, "error": "oom"}, "retry_backoff"),
])
def test_a_job_that_is_not_queued_says_what_holds_it(status, kw, code) -> None:
    job = job_view(JOB, "tenant-a", status, **kw)
    assert pending_reason(job, status, NOW, None)["code"] == code


def test_a_queued_job_is_behind_higher_tiers_or_waits_for_a_worker_or_its_tenants_ceiling() -> None:
    job = job_view(JOB, "tenant-a", "queued", priority=3)
    pool = PoolQueue({9: 2, 5: 1, 3: 4, 1: 6}, 4, 0)
    behind = pending_reason(job, "queued", NOW, pool)
    assert behind["code"] == "behind_higher_tier" and behind["higher_tier_jobs"] == 3
    top = pending_reason(job_view(JOB, "tenant-a", "queued", priority=9), "queued", NOW, pool)
    assert top["code"] == "waiting_for_worker" and top["pool_stats"]["busy_workers"] == 4
    assert pending_reason(job, "queued", NOW, None)["pool_stats"] is None
    ceiling = pending_reason(job, "queued", NOW, pool, tenant_leases=2, max_in_flight=2)
    assert ceiling["code"] == "tenant_at_ceiling" and ceiling["max_in_flight"] == 2
    assert pending_reason(job, "queued", NOW, pool, tenant_leases=1, max_in_flight=2)["code"] == "behind_higher_tier"
    for status in ("leased", "running", "succeeded"):
        assert pending_reason(job_view(JOB, "tenant-a", status), status, NOW, pool) is None


@dataclass
class FakePools:
    recs: list = field(default_factory=list)

    def records(self, pool: str) -> list:
        return [r for r in self.recs if r.pool == pool]

    async def load(self, pool: str):
        return None


@pytest_asyncio.fixture(loop_scope="function")
async def gw():
    pools = FakePools([_stats(0, {9: 1, 0: 1}), _stats(1, {0: 3})])
    deps = fake_deps(pools=pools)
    deps.auth.tenants["tenant-a"] = Tenant("tenant-a", max_in_flight=1)
    deps.reads.jobs[JOB] = job_view(JOB, "tenant-a", "queued", version=2)
    async with serving(deps, GatewayConfig(stream_poll_seconds=0.01)) as client:
        yield client, deps, pools


async def test_get_video_and_the_stream_carry_the_pending_reason_and_tell_when_it_changes(gw) -> None:
    client, deps, pools = gw
    body = await (await client.get(f"/v1/videos/{JOB}", headers=A)).json()
    assert body["pending_reason"]["code"] == "behind_higher_tier" and body["pending_reason"]["higher_tier_jobs"] == 1
    # Another of the tenant's jobs takes its only in-flight slot: now the ceiling holds it.
    deps.reads.jobs["j" + "c" * 32] = job_view("j" + "c" * 32, "tenant-a", "running")
    body = await (await client.get(f"/v1/videos/{JOB}", headers=A)).json()
    assert body["pending_reason"]["code"] == "tenant_at_ceiling"
    del deps.reads.jobs["j" + "c" * 32]
    r = await client.get(f"/v1/videos/{JOB}/stream", headers=A)
    first = await r.content.readuntil(b"\n\n")
    msg = next(sse.parse(first.splitlines(keepends=True)))
    assert msg.event == "status" and msg.data["pending_reason"]["code"] == "behind_higher_tier"
    pools.recs = [_stats(0, {0: 1}), _stats(1, {0: 3})]  # the priority-9 job was leased
    second = await r.content.readuntil(b"\n\n")
    msg = next(sse.parse(second.splitlines(keepends=True)))
    assert (msg.event, msg.id) == ("pending", "2") and msg.data["pending_reason"]["code"] == "waiting_for_worker"
    r.close()
    leased = job_view(JOB, "tenant-a", "running", version=3)
    deps.reads.jobs[JOB] = leased
    body = await (await client.get(f"/v1/videos/{JOB}", headers=A)).json()
    assert body["pending_reason"] is None


def _placed(partition: int, groups: dict[tuple[int, str], int], standing: dict[str, str]):
    tiers: dict[int, int] = {}
    for (tier, _), n in groups.items():
        tiers[tier] = tiers.get(tier, 0) + n
    return ev.PoolStats(pool=POOL, partition=partition, at_ms=NOW, queued=sum(groups.values()), leased=2,
                        oldest_wait_ms=0, queued_by_tier=tuple(f"{k}={v}" for k, v in tiers.items()),
                        queued_by_tier_tenant=tuple(f"{k}/{t}={v}" for (k, t), v in groups.items()),
                        tenant_standing=tuple(f"{t}={s}" for t, s in standing.items()))


async def test_a_queued_job_carries_its_place_in_dispatch_order(gw) -> None:
    """Tier first (b's priority-9 job), then the tenant furthest below its share (a, usage 0, before b at 70
    GPU-s), then age (the older of a's two jobs): the job is third."""
    client, deps, pools = gw
    deps.auth.tenants["tenant-a"] = Tenant("tenant-a")
    deps.reads.jobs["j" + "d" * 32] = job_view("j" + "d" * 32, "tenant-a", "queued")  # submitted after JOB
    standing = {"tenant-a": "0.0/1.0/", "tenant-b": "70.0/1.0/"}
    pools.recs = [_placed(0, {(9, "tenant-b"): 1, (0, "tenant-a"): 2}, standing), _placed(1, {(0, "tenant-b"): 2},
                                                                                          standing)]
    reason = (await (await client.get(f"/v1/videos/{JOB}", headers=A)).json())["pending_reason"]
    assert reason["code"] == "behind_higher_tier" and reason["queue_position"] == 3
    assert reason["estimated_wait_seconds"] is None and reason["estimate_unavailable_reason"]
    # a's usage rises past b's: b's two priority-0 jobs go before a's two.
    pools.recs = [_placed(0, {(9, "tenant-b"): 1, (0, "tenant-a"): 2}, {**standing, "tenant-a": "500.0/1.0/"}),
                  _placed(1, {(0, "tenant-b"): 2}, {**standing, "tenant-a": "500.0/1.0/"})]
    reason = (await (await client.get(f"/v1/videos/{JOB}", headers=A)).json())["pending_reason"]
    assert reason["queue_position"] == 5
