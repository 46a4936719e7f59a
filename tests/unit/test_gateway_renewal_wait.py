"""A renewal (heartbeat, progress) waits for its verdict at most `renewal_verdict_seconds`, then answers 202
pending: the command is durable and the lease is judged by what was produced, so the worker need not wait;
other fenced commands (complete) wait up to `verdict_seconds`. A verdict in time is answered as before."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest_asyncio
from aiohttp import web

from spotreel.api.config import GatewayConfig
from spotreel.domain import events as ev
from spotreel.services.gateway.app import create_app
from spotreel.services.gateway.context import GATEWAY
from spotreel.settings import Settings
from tests.unit.gateway_fakes import fake_deps
from tests.unit.test_gateway_leasedesk import W, FakeBus, Sink, _free_port

JOB = "j" + "4" * 32
apps: dict[str, web.Application] = {}


class LateBus(FakeBus):
    """Every verdict comes `late_s` after it is expected (a LeaseRenewed: the gateway answers it as such)."""

    def __init__(self, late_s: float) -> None:
        super().__init__()
        self.late_s = late_s

    def expect_verdict(self, command_id: str, job_id: str) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        verdict = loop.create_future()
        event = ev.LeaseRenewed(job_id=job_id, version=5, at_ms=1, causation_id=command_id, epoch=2,
                                lease_expires_at_ms=1_000_000)
        loop.call_later(self.late_s, lambda: verdict.done() or verdict.set_result(event))
        return verdict


@pytest_asyncio.fixture(loop_scope="function")
async def gateway_with_late_verdicts():
    async def start(late_s: float, cfg: GatewayConfig):
        app = create_app(Settings(partitions=3), fake_deps(commands=Sink(), work=LateBus(late_s)), cfg)
        runner = web.AppRunner(app)
        await runner.setup()
        port = _free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        runners.append(runner)
        apps[f"http://127.0.0.1:{port}"] = app
        return f"http://127.0.0.1:{port}"

    runners: list[web.AppRunner] = []
    apps.clear()
    async with aiohttp.ClientSession() as session:
        yield start, session
    for runner in runners:
        await runner.cleanup()


async def _timed(session, url: str, action: str, body: dict) -> tuple[int, dict, float]:
    started = time.monotonic()
    async with session.post(f"{url}/internal/leases/{JOB}/{action}", json={"epoch": 2, "worker_id": "w1", **body},
                            headers=W) as r:
        return r.status, await r.json(), time.monotonic() - started


async def test_a_renewal_answers_pending_once_its_wait_is_up(gateway_with_late_verdicts):
    start, session = gateway_with_late_verdicts
    url = await start(1.5, GatewayConfig(renewal_verdict_seconds=0.3, verdict_seconds=5.0))
    for action, body in (("heartbeat", {}), ("progress", {"step": 1, "progress_pct": 5.0})):
        status, answer, took = await _timed(session, url, action, body)
        assert status == 202 and answer["verdict"] == "pending", answer
        assert 0.3 <= took < 1.2, (action, took)
        assert (answer["cancel"], answer["drain"]) == (False, False)  # nothing known yet: told on a later renewal
    # The gateway went on listening: its watch learns how late the verdicts really came (1.5 s), the
    # measure shedding starts from, not the 0.3 s it answered at.
    watch = apps[url][GATEWAY].watch
    await asyncio.sleep(1.5)
    assert [ms for _, ms in watch._waits] and min(ms for _, ms in watch._waits) >= 1400, watch._waits


async def test_a_verdict_that_never_comes_counts_as_verdict_seconds_in_the_watch(gateway_with_late_verdicts):
    start, session = gateway_with_late_verdicts
    url = await start(60.0, GatewayConfig(renewal_verdict_seconds=0.2, verdict_seconds=0.8))
    status, _, _ = await _timed(session, url, "heartbeat", {})
    assert status == 202
    watch = apps[url][GATEWAY].watch
    assert list(watch._waits) == []  # not yet: the gateway still listens
    await asyncio.sleep(0.9)
    assert [ms for _, ms in watch._waits] == [800]


async def test_a_verdict_in_time_is_answered_and_other_commands_wait_longer(gateway_with_late_verdicts):
    start, session = gateway_with_late_verdicts
    url = await start(0.1, GatewayConfig(renewal_verdict_seconds=0.5, verdict_seconds=5.0))
    status, answer, _ = await _timed(session, url, "heartbeat", {})
    assert status == 200 and answer["verdict"] == "accepted" and answer["event"] == "LeaseRenewed"
    slow = await start(1.0, GatewayConfig(renewal_verdict_seconds=0.2, verdict_seconds=5.0))
    status, answer, took = await _timed(session, slow, "complete", {
        "artifact_key": "k", "artifact_checksum": "c", "artifact_size_bytes": 1})
    assert status == 200 and answer["verdict"] == "accepted" and took >= 0.9  # waited past the renewals' bound


async def test_the_renewal_wait_never_exceeds_verdict_seconds(gateway_with_late_verdicts):
    start, session = gateway_with_late_verdicts
    url = await start(2.0, GatewayConfig(renewal_verdict_seconds=10.0, verdict_seconds=0.3))
    status, answer, took = await _timed(session, url, "heartbeat", {})
    assert status == 202 and answer["verdict"] == "pending" and took < 1.5
