"""GET /v1/videos/{id} shows what became of the job's webhook (issue 13, item 5), from the row the notifier
writes (services/webhooks/store.py), and the order rule that keeps that row on the newest outcome."""

from __future__ import annotations

from datetime import datetime, timezone

import jsonschema_rs
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import given, strategies as st

from spotreel.services.gateway.app import create_app
from spotreel.services.gateway.openapi import LINKS, document
from spotreel.services.webhooks.store import JobWebhookState, state_timestamp
from spotreel.config.settings import Settings
from tests.unit.gateway_fakes import fake_deps, job_view, serving

A = {"Authorization": "Bearer key-a"}
HOOK = "https://hooks.example.com/h"


@pytest_asyncio.fixture(loop_scope="function")
async def api():
    deps = fake_deps()
    async with serving(deps) as client:
        yield client, deps


def video_schema() -> dict:
    return document()["components"]["schemas"]["Video"]


async def get(client, job_id: str) -> dict:
    r = await client.get(f"/v1/videos/{job_id}", headers=A)
    assert r.status == 200, await r.text()
    body = await r.json()
    jsonschema_rs.validate(video_schema(), body)
    return body


async def test_no_callback_no_webhook(api):
    client, deps = api
    job = "j" + "1" * 32
    deps.reads.jobs[job] = job_view(job, "tenant-a", params={"callback_url": None})
    assert (await get(client, job))["webhook"] is None


async def test_a_just_accepted_job_with_a_callback_is_pending(api):
    client, deps = api
    r = await client.post("/v1/videos", json={"prompt": "x", "callback_url": HOOK}, headers=A)
    assert r.status == 202
    body = await get(client, (await r.json())["job_id"])
    assert body["status"] == "accepted"
    assert body["webhook"]["state"] == "pending" and body["webhook"]["attempts"] == 0


async def test_the_notifiers_outcome_is_shown(api):
    client, deps = api
    job = "j" + "2" * 32
    deps.reads.jobs[job] = job_view(job, "tenant-a", status="succeeded", params={"callback_url": HOOK})
    assert (await get(client, job))["webhook"]["state"] == "pending"  # no row yet
    deps.reads.webhooks[job] = JobWebhookState(
        "gave_up", 8, 503, "HTTP 503", f"{job}.v9", "video.succeeded", datetime(2026, 1, 2, tzinfo=timezone.utc))
    hook = (await get(client, job))["webhook"]
    assert hook == {"state": "gave_up", "attempts": 8, "last_error": "HTTP 503", "last_status": 503,
                    "event_id": f"{job}.v9", "event_type": "video.succeeded", "updated_at": "2026-01-02T00:00:00.000Z"}


def test_links_name_operations_that_exist_and_take_the_new_id():
    doc = document()
    ids = {op.get("operationId") for ops in doc["paths"].values() for op in ops.values()}
    for (path, method, source), targets in LINKS.items():
        links = doc["paths"][path][method]["responses"]["202"]["links"]
        assert set(links) == set(targets)
        for name, link in links.items():
            assert link["operationId"] in ids and link["parameters"] == {"id": source}
            target, verb = targets[name]
            assert doc["paths"][target][verb]["operationId"] == name


outcome = st.tuples(st.integers(1, 10_000), st.booleans(), st.integers(0, 5_000_000))


@given(outcome, outcome)
def test_the_state_row_keeps_the_newest_outcome(a, b):
    """A later event beats an earlier one; within an event, a final outcome beats every attempt (a restarted
    notifier counts attempts from 1 again) and a later attempt an earlier one; everything beats pending (0)."""
    (va, fa, na), (vb, fb, nb) = sorted([a, b])
    ta, tb = state_timestamp(va, fa, na), state_timestamp(vb, fb, nb)
    assert ta > 0 and tb > 0
    if va < vb:
        assert ta < tb
    elif fa != fb:
        assert (ta < tb) == fb
    elif min(na, nb) < (1 << 20) - 1:
        assert (ta < tb) == (na < nb) or na == nb


async def test_a_callback_without_a_signing_secret_is_accepted_with_a_warning():
    from spotreel.services.gateway.deps import Tenant

    deps = fake_deps()
    client = TestClient(TestServer(create_app(Settings(), deps)))
    await client.start_server()
    try:
        deps.auth.tenants["tenant-a"] = Tenant("tenant-a", webhook_secret_set=False)
        r = await client.post("/v1/videos", json={"prompt": "x", "callback_url": HOOK}, headers=A)
        assert r.status == 202
        [warning] = (await r.json())["warnings"]
        assert warning["code"] == "no_webhook_secret" and warning["field"] == "callback_url"
        r = await client.post("/v1/videos", json={"prompt": "y"}, headers=A)
        assert "warnings" not in await r.json()
        deps.auth.tenants["tenant-b"] = Tenant("tenant-b", webhook_secret_set=True)
        r = await client.post("/v1/videos", json={"prompt": "z", "callback_url": HOOK},
                              headers={"Authorization": "Bearer key-b"})
        assert "warnings" not in await r.json()
    finally:
        await client.close()
