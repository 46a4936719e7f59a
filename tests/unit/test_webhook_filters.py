"""Webhook event filters (issue 13): what each kind of notification is, and POST /v1/videos `webhook_events`
(validated, in the request hash only when not the default, stored before the SubmitJob is produced)."""

from __future__ import annotations

import json

import pytest
import pytest_asyncio

from spotreel.domain import commands as cmd
from spotreel.domain import events as ev
from spotreel.api.config import GatewayConfig
from spotreel.services.gateway.openapi import document
from spotreel.api.submission import normalize
from spotreel.services.webhooks.payload import milestone, notification_for
from spotreel.webhooks.filters import FILTERS
from tests.unit.gateway_fakes import fake_deps, serving

A = {"Authorization": "Bearer key-a"}
HOOK = "https://hooks.example.com/h"


def leased(version: int = 3, attempt: int = 1) -> ev.JobLeased:
    return ev.JobLeased("j1", version, 1000, "c", "w1", "pool", 1, attempt, 30_000, 31_000, None, None, None)


def progress(pct: float, version: int = 5) -> ev.ProgressReported:
    return ev.ProgressReported("j1", version, 2000, "c", 1, int(pct), pct, "denoising", 40_000)


def test_each_kind_of_notification():
    started = notification_for(leased(attempt=2), "http://gw")
    assert (started.kind, started.event_type, started.event_id) == ("started", "video.started", "j1.v3")
    assert json.loads(started.body)["data"]["attempt"] == 2
    assert notification_for(progress(24.9), "http://gw") is None
    p = notification_for(progress(51.0), "http://gw")
    assert (p.kind, p.milestone, p.event_id, p.event_type) == ("progress", 50, "j1.progress-50", "video.progress")
    # The same milestone crossed by another report is the same notification id (sent once).
    assert notification_for(progress(74.0, version=9), "http://gw").event_id == "j1.progress-50"
    ok = notification_for(ev.JobSucceeded("j1", 9, 3000, "c", 1, "k", "sha", 10), "http://gw")
    assert ok.kind == "completed"
    for end in (ev.JobFailed("j1", 9, 1, "c", "boom", "E"), ev.JobCancelled("j1", 9, 1, "c", "user"),
                ev.JobDeadLettered("j1", 9, 1, "c", "poison", 3, 0)):
        assert notification_for(end, "http://gw").kind == "failed"
    assert notification_for(ev.JobQueued("j1", 2, 1000, "c", "submitted"), "http://gw") is None


@pytest.mark.parametrize("pct,m", [(0, None), (24.99, None), (25, 25), (49, 25), (50, 50), (99, 75), (100, 75)])
def test_milestones(pct, m):
    assert milestone(pct) == m


def test_the_filter_enters_the_hash_only_when_not_the_default():
    cfg = GatewayConfig()
    plain = normalize({"prompt": "x", "callback_url": HOOK}, cfg)
    assert normalize({"prompt": "x", "callback_url": HOOK, "webhook_events": ["failed", "completed"]}, cfg) == plain
    assert normalize({"prompt": "x", "callback_url": HOOK, "webhook_events": None}, cfg) == plain
    chosen = normalize({"prompt": "x", "callback_url": HOOK, "webhook_events": ["progress", "started"]}, cfg)
    assert chosen["webhook_events"] == ["progress", "started"]


@pytest_asyncio.fixture(loop_scope="function")
async def api():
    deps = fake_deps()
    async with serving(deps) as client:
        yield client, deps


@pytest.mark.parametrize("body", [
    {"prompt": "x", "callback_url": HOOK, "webhook_events": []},
    {"prompt": "x", "callback_url": HOOK, "webhook_events": ["finished"]},
    {"prompt": "x", "callback_url": HOOK, "webhook_events": ["started", "started"]},
    {"prompt": "x", "callback_url": HOOK, "webhook_events": "started"},
    {"prompt": "x", "webhook_events": ["started"]},
])
async def test_bad_filters_are_422_naming_the_field(api, body):
    client, deps = api
    r = await client.post("/v1/videos", json=body, headers=A)
    assert r.status == 422 and (await r.json())["error"]["field"] == "webhook_events"
    assert deps.commands.sent == [] and deps.reads.webhook_filters == {}


async def test_the_filter_is_stored_before_the_submission_is_produced(api):
    client, deps = api
    order = []
    write, send = deps.reads.write_webhook_events, deps.commands.send

    async def write_(job_id, events):
        order.append("filter")
        await write(job_id, events)

    async def send_(command):
        order.append(type(command).__name__)
        await send(command)
    deps.reads.write_webhook_events, deps.commands.send = write_, send_
    body = {"prompt": "x", "callback_url": HOOK, "webhook_events": ["started", "progress", "completed"]}
    r = await client.post("/v1/videos", json=body, headers={**A, "Idempotency-Key": "f1"})
    assert r.status == 202
    job = (await r.json())["job_id"]
    assert order == ["filter", "SubmitJob"]
    assert deps.reads.webhook_filters == {job: ["completed", "progress", "started"]}
    # Default filter: nothing stored, the notifier's default applies.
    r = await client.post("/v1/videos", json={"prompt": "y", "callback_url": HOOK}, headers={**A, "Idempotency-Key": "f2"})
    assert r.status == 202 and len(deps.reads.webhook_filters) == 1
    assert isinstance(deps.commands.sent[-1], cmd.SubmitJob)


async def test_a_schedule_job_cannot_carry_a_filter(api):
    client, _ = api
    r = await client.post("/v1/schedules", json={"cron": "@daily", "job": {
        "prompt": "x", "callback_url": HOOK, "webhook_events": ["started"]}}, headers=A)
    assert r.status == 422 and (await r.json())["error"]["field"] == "job.webhook_events"


def test_the_document_states_the_filter():
    doc = document()
    body = doc["paths"]["/v1/videos"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body["properties"]["webhook_events"]["items"]["enum"] == list(FILTERS)
    assert {"required": ["callback_url"], "properties": {"callback_url": {"type": "string"}}} \
        in body["allOf"][1]["anyOf"]
    sched = doc["paths"]["/v1/schedules"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert "webhook_events" not in sched["properties"]["job"]["properties"]


async def test_a_filter_that_cannot_be_stored_is_503_and_frees_the_key(api):
    from spotreel.services.gateway.deps import StoreUnavailable

    client, deps = api

    async def down(job_id, events):
        raise StoreUnavailable("cassandra down")
    deps.reads.write_webhook_events = down
    body = {"prompt": "x", "callback_url": HOOK, "webhook_events": ["started"]}
    r = await client.post("/v1/videos", json=body, headers={**A, "Idempotency-Key": "f3"})
    assert r.status == 503
    assert deps.commands.sent == [] and deps.reads.claims == {}
