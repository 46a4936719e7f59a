"""The latest time a job or schedule may name (domain limits.MAX_TIME_MS, the end of year 9999): the read
model keeps run_at and start_at as CQL timestamps, and the Python driver cannot decode a later one (it then
drops its connection, and every read of the gateway failed: schemathesis found it with run_at 2**53). The
gateway answers 422 past it and /openapi.json states it; the domain refuses a SubmitJob or CreateSchedule
past it (straight from Kafka) as invalid_request."""

from __future__ import annotations

import datetime

import pytest

from spotreel.api.config import GatewayConfig
from spotreel.api.errors import ApiError
from spotreel.api.submission import normalize
from spotreel.domain import events as ev
from spotreel.domain import limits
from spotreel.domain.decide import decide
from spotreel.domain.schedules import decide_schedule
from spotreel.services.gateway.openapi import document
from tests.unit.jobkit import submit
from tests.unit.test_job_schedules import T, create


def test_the_limit_is_the_last_millisecond_a_python_datetime_holds():
    epoch = datetime.datetime(1970, 1, 1)
    assert limits.MAX_TIME_MS == (datetime.datetime.max - epoch) // datetime.timedelta(milliseconds=1)
    datetime.datetime.fromtimestamp(limits.MAX_TIME_MS / 1000, tz=datetime.timezone.utc)  # decodes
    with pytest.raises((OverflowError, ValueError)):
        datetime.datetime.fromtimestamp((limits.MAX_TIME_MS + 1000) / 1000, tz=datetime.timezone.utc)


@pytest.mark.parametrize("run_at", [limits.MAX_TIME_MS + 1, 2**53, -1])
def test_a_submit_job_past_the_limit_is_refused_by_the_domain(run_at):
    [rejected] = decide(None, submit(run_at_ms=run_at), 1_700_000_000_000)
    assert isinstance(rejected, ev.CommandRejected) and rejected.reason == "invalid_request"
    assert "run_at_ms" in rejected.detail


def test_a_submit_job_at_the_limit_is_scheduled():
    events = decide(None, submit(run_at_ms=limits.MAX_TIME_MS), 1_700_000_000_000)
    assert [type(e).__name__ for e in events] == ["JobSubmitted", "JobScheduled"]


@pytest.mark.parametrize("start", [limits.MAX_TIME_MS + 1, 2**53])
def test_a_create_schedule_past_the_limit_is_refused_by_the_domain(start):
    [rejected] = decide_schedule(None, create(start_ms=start), T)
    assert isinstance(rejected, ev.ScheduleCommandRejected) and rejected.reason == "invalid_request"
    assert "start_ms" in rejected.detail


def test_the_gateway_refuses_past_the_limit_and_the_document_states_it():
    ok = normalize({"prompt": "x", "run_at": limits.MAX_TIME_MS}, GatewayConfig())
    assert ok["run_at"] == limits.MAX_TIME_MS
    with pytest.raises(ApiError) as refused:
        normalize({"prompt": "x", "run_at": limits.MAX_TIME_MS + 1}, GatewayConfig())
    assert refused.value.field == "run_at"
    paths = document()["paths"]
    video = paths["/v1/videos"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    schedule = paths["/v1/schedules"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert video["properties"]["run_at"]["maximum"] == limits.MAX_TIME_MS
    assert schedule["properties"]["start_at"]["maximum"] == limits.MAX_TIME_MS


def test_a_run_at_past_the_limit_already_in_the_log_is_projected_as_the_limit():
    """Records written before the limit existed: the projector stores the limit, a time the driver decodes."""
    import dataclasses

    from spotreel.services.projector.job_rows import job_row
    from spotreel.domain.evolve import fold

    events = decide(None, submit(run_at_ms=limits.MAX_TIME_MS), 1_700_000_000_000)
    late = [dataclasses.replace(e, run_at_ms=2**53) for e in events]
    state = fold(late)
    assert state.run_at_ms == 2**53  # the history is kept as written
    assert job_row(state)["run_at"] == limits.MAX_TIME_MS


def test_a_grant_whose_lease_would_end_after_the_limit_is_refused():
    from spotreel.domain import commands as c
    from tests.unit.jobkit import Driver

    d = Driver()
    d.submit()
    [refused] = d.send(c.GrantLease("g", d.job_id, "w1", d.s.pool, limits.MAX_TIME_MS))
    assert isinstance(refused, ev.CommandRejected) and refused.reason == "invalid_request"
    assert [type(e).__name__ for e in d.grant(ttl=10**9)] == ["JobLeased"]  # long, but within the limit


async def test_the_worker_api_takes_a_lease_ttl_within_its_documented_bounds():
    from aiohttp.test_utils import TestClient, TestServer

    from spotreel.services.gateway.app import create_app
    from spotreel.config.settings import Settings
    from tests.unit.gateway_fakes import WORKER_KEY, fake_deps

    client = TestClient(TestServer(create_app(Settings(), fake_deps())))
    await client.start_server()
    try:
        for ttl in (0, limits.MIN_LEASE_TTL_MS - 1, limits.MAX_LEASE_TTL_MS + 1, 2**62):
            r = await client.post("/internal/workers/w1/lease", headers={"Authorization": f"Bearer {WORKER_KEY}"},
                                  json={"gpu_type": "cpu", "models": ["m"], "wait_seconds": 0, "lease_ttl_ms": ttl})
            assert r.status == 422 and (await r.json())["error"]["field"] == "lease_ttl_ms", (ttl, r.status)
    finally:
        await client.close()
    body = document()["paths"]["/internal/workers/{id}/lease"]["post"]["requestBody"]["content"]
    rule = body["application/json"]["schema"]["properties"]["lease_ttl_ms"]
    assert (rule["minimum"], rule["maximum"]) == (limits.MIN_LEASE_TTL_MS, limits.MAX_LEASE_TTL_MS)
