"""The worker API keeps working while Cassandra is down (a restart): the read model only provides the early
409 and the cancel/drain hints, and the scheduler judges every command anyway. Found by the whole-system
chaos test, where a Cassandra restart made every HTTP worker lose its lease."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer

from spotreel.dispatch.order import WorkView
from spotreel.domain import events as ev
from spotreel.services.gateway.worker_api import routes as internal
from spotreel.services.gateway.app import create_app
from spotreel.services.gateway.deps import StoreUnavailable
from spotreel.config.settings import Settings
from tests.unit.gateway_fakes import WORKER_KEY, FakeAuth, FakeReads, fake_deps

JOB = "j" + "2" * 32
W = {"Authorization": f"Bearer {WORKER_KEY}"}


class DownReads(FakeReads):
    down = False

    async def get_job(self, job_id):
        if self.down:
            raise StoreUnavailable("no host available")
        return await super().get_job(job_id)


class DownAuth(FakeAuth):
    down = False

    async def worker_key_name(self, key_hash):
        if self.down:
            raise StoreUnavailable("no host available")
        return await super().worker_key_name(key_hash)


@dataclass
class AcceptingBus:
    """The scheduler's side as seen by the gateway: every command is renewed at once."""

    verdicts: list[str] = field(default_factory=list)

    async def ensure_started(self) -> None:
        pass

    def expect_verdict(self, command_id: str, job_id: str) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(ev.LeaseRenewed(job_id, 9, 0, command_id, 4, 123))
        self.verdicts.append(command_id)
        return fut

    def forget_verdict(self, command_id: str, job_id: str) -> None:
        pass

    def forget_answer(self, request_id: str) -> None:
        pass

    def partitions_with_work(self, models: Any) -> list[int]:
        return []

    def work_view(self, models: Any) -> WorkView:
        return WorkView((), {}, {}, frozenset())  # no pool stats: the gateway scouts

    def on_work_change(self, callback: Any) -> None:
        pass


@pytest_asyncio.fixture(loop_scope="function")
async def client():
    deps = fake_deps(reads=DownReads(), auth=DownAuth(), work=AcceptingBus())
    c = TestClient(TestServer(create_app(Settings(), deps)))
    await c.start_server()
    try:
        yield c, deps
    finally:
        await c.close()


async def test_fenced_commands_reach_the_scheduler_while_the_read_model_is_down(client, monkeypatch):
    c, deps = client
    monkeypatch.setattr(internal, "AUTH_CACHE_SECONDS", 0.0)  # every request looks its key up again
    beat = {"epoch": 4, "worker_id": "w-1"}
    assert (await c.post(f"/internal/leases/{JOB}/heartbeat", json=beat, headers=W)).status == 200
    deps.reads.down = deps.auth.down = True
    r = await c.post(f"/internal/leases/{JOB}/heartbeat", json=beat, headers=W)
    body = await r.json()
    assert r.status == 200, body
    assert body["event"] == "LeaseRenewed" and body["cancel"] is False and body["drain"] is False
    assert [type(x).__name__ for x in deps.commands.sent] == ["RenewLease", "RenewLease"]


async def test_a_key_never_seen_is_not_let_in_while_the_store_is_down(client):
    c, deps = client
    deps.auth.down = True
    r = await c.post(f"/internal/leases/{JOB}/heartbeat", json={"epoch": 4, "worker_id": "w-1"}, headers=W)
    assert r.status == 503 and (await r.json())["error"]["code"] == "store_unavailable"
    assert deps.commands.sent == []
