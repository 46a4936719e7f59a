"""In-memory stand-ins for the gateway's dependencies, for tests where no server is the subject, and the
gateway app served on them."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from spotreel.api.config import GatewayConfig
from spotreel.services.gateway.app import create_app
from spotreel.config.settings import Settings
from spotreel.services.gateway.deps import Claim, Deps, PoolLoad, SinkUnavailable, Tenant
from spotreel.readmodel.jobs import JobListItem, JobPage, JobView
from spotreel.readmodel.schedules import OccurrencePage, SchedulePage, ScheduleView

KEYS = {"key-a": "tenant-a", "key-b": "tenant-b"}
WORKER_KEY = "worker-key"


def job_view(job_id: str, tenant: str, status: str = "queued", **kw: Any) -> JobView:
    base = dict(job_id=job_id, tenant_id=tenant, status=status, pool="tiny-t2v@any", model="tiny-t2v", priority=0,
                prompt="p", params={}, idempotency_key="k", created_at_ms=1, updated_at_ms=1, run_at_ms=None,
                attempt=0, max_attempts=5, preemptions=0, lease_epoch=None, worker_id=None,
                lease_expires_at_ms=None, step=0, total_steps=20, progress_pct=0.0, reported_pct=0.0,
                phase="pending", resuming=False, resume_from_pct=None, checkpoint_key=None,
                cancel_requested=False, pause_requested=False, result_key=None, result_sha256=None,
                result_size_bytes=None, error=None, terminal_reason=None, version=2)
    base.update(kw)
    return JobView(**base)


@dataclass
class FakeSink:
    sent: list[Any] = field(default_factory=list)
    down: bool = False

    async def send(self, command: Any) -> None:
        if self.down:
            raise SinkUnavailable("broker down")
        self.sent.append(command)

    def send_nowait(self, command: Any) -> asyncio.Future[None]:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.down:
            done.set_exception(SinkUnavailable("broker down"))
        else:
            self.sent.append(command)
            done.set_result(None)
        return done


@dataclass
class FakeReads:
    jobs: dict[str, JobView] = field(default_factory=dict)
    claims: dict[str, Claim] = field(default_factory=dict)
    pools: dict[str, PoolLoad] = field(default_factory=dict)
    unfinished: int = 0
    webhooks: dict[str, Any] = field(default_factory=dict)
    webhook_filters: dict[str, list[str]] = field(default_factory=dict)
    webhook_styles: dict[str, str] = field(default_factory=dict)
    schedules: dict[str, ScheduleView] = field(default_factory=dict)

    async def get_job(self, job_id):
        return self.jobs.get(job_id)

    async def list_jobs(self, tenant, status, limit, page_state):
        mine = [j for j in self.jobs.values() if j.tenant_id == tenant and status in (None, j.status)]
        start = int(page_state or b"0")
        items = [JobListItem(j.job_id, j.status, j.priority, j.prompt, j.created_at_ms, j.updated_at_ms, j.version)
                 for j in mine[start:start + limit]]
        more = start + limit < len(mine)
        return JobPage(items, str(start + limit).encode() if more else None)

    async def job_events(self, job_id):
        return []

    async def job_attempts(self, job_id):
        return []

    async def pool_load(self, pool):
        return self.pools.get(pool)

    async def unfinished_jobs(self, tenant):
        return self.unfinished

    async def claim(self, claim):
        return self.claims.setdefault(claim.job_id, claim)

    async def get_claim(self, job_id):
        return self.claims.get(job_id)

    async def drop_claim(self, claim):
        if self.claims.get(claim.job_id, None) == claim:
            del self.claims[claim.job_id]

    async def list_jobs_from(self, tenant, after, ascending, limit):
        mine = sorted((j for j in self.jobs.values() if j.tenant_id == tenant and j.status != "accepted"),
                      key=lambda j: (-(j.created_at_ms or 0), j.job_id))
        if ascending:
            mine.reverse()
        if after is not None:
            ids = [j.job_id for j in mine]
            mine = mine[ids.index(after[1]) + 1:] if after[1] in ids else []
        return [JobListItem(j.job_id, j.status, j.priority, j.prompt, j.created_at_ms, j.updated_at_ms, j.version)
                for j in mine[:limit]]

    async def forget_claim_text(self, job_id):
        if job_id in self.claims:
            self.claims[job_id] = replace(self.claims[job_id], prompt="", params={})

    async def mark_deleted(self, job_id, at_ms):
        self.jobs[job_id] = replace(self.jobs[job_id], deleted_at_ms=at_ms)

    async def write_placeholder(self, claim):
        self.jobs.setdefault(claim.job_id, job_view(claim.job_id, claim.tenant_id, "accepted", version=0))

    async def write_webhook_events(self, job_id, events):
        self.webhook_filters[job_id] = list(events)

    async def write_webhook_style(self, job_id, style):
        self.webhook_styles[job_id] = style

    async def webhook_state(self, job_id):
        return self.webhooks.get(job_id)

    async def get_schedule(self, schedule_id):
        return self.schedules.get(schedule_id)

    async def list_schedules(self, tenant, limit, page_state):
        return SchedulePage([s for s in self.schedules.values() if s.tenant_id == tenant][:limit], None)

    async def schedule_occurrences(self, schedule_id, limit, page_state):
        return OccurrencePage([], None)


@dataclass
class FakeAuth:
    tenants: dict[str, Tenant] = field(default_factory=dict)
    lookups: int = 0

    async def tenant_for_key_hash(self, key_hash):
        self.lookups += 1
        for key, tenant in KEYS.items():
            if hashlib.sha256(key.encode()).hexdigest() == key_hash:
                return self.tenants.get(tenant, Tenant(tenant))
        return None

    async def worker_key_name(self, key_hash):
        return "fleet" if hashlib.sha256(WORKER_KEY.encode()).hexdigest() == key_hash else None


@dataclass
class Clock:
    now: int = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


def fake_deps(**kw: Any) -> Deps:
    counter = iter(range(1, 10**9))
    base = dict(commands=FakeSink(), reads=FakeReads(), auth=FakeAuth(), clock_ms=Clock(),
                presign=lambda key: f"http://s3.local/{key}?sig=x", new_id=lambda: f"cmd{next(counter)}")
    base.update(kw)
    return Deps(**base)


def with_status(deps: Deps, job_id: str, status: str, **kw: Any) -> None:
    deps.reads.jobs[job_id] = replace(deps.reads.jobs[job_id], status=status, version=3, **kw)


@asynccontextmanager
async def serving(deps: Deps, cfg: GatewayConfig | None = None,
                  settings: Settings | None = None) -> AsyncIterator[TestClient]:
    """The gateway app on `deps`, served on a loopback test port for the block, a client to it."""
    client = TestClient(TestServer(create_app(settings or Settings(), deps, cfg)))
    await client.start_server()
    try:
        yield client
    finally:
        await client.close()
