"""POST /v1/schedules with the in-memory fakes: the CreateSchedule it produces, defaults, the rules the
OpenAPI document states (enums and bounds taken from the same constants), and 422 naming the field."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from spotreel.api.config import GatewayConfig
from spotreel.domain import commands as cmd
from spotreel.domain import ids
from spotreel.domain.cron import MissedPolicy
from spotreel.domain.schedules import OverlapPolicy
from spotreel.services.gateway.public import schedules as sched
from spotreel.readmodel.schedules import ScheduleView
from spotreel.services.gateway.openapi import document
from tests.unit.test_gateway_api import A, api  # noqa: F401 - the fixture

BODY = {"cron": "@daily", "job": {"prompt": "a sunrise"}}


async def create(client, body, key="s1"):
    return await client.post("/v1/schedules", json=body, headers={**A, "Idempotency-Key": key})


async def test_defaults_and_the_command_produced(api):  # noqa: F811
    client, deps = await api()
    r = await create(client, BODY)
    assert r.status == 202, await r.text()
    sid = (await r.json())["schedule_id"]
    assert sid == ids.schedule_id_for("tenant-a", "s1") and sched.SCHEDULE_ID.fullmatch(sid)
    [sent] = deps.commands.sent
    assert isinstance(sent, cmd.CreateSchedule)
    assert (sent.cron, sent.timezone, sent.missed_policy, sent.overlap_policy, sent.grace_ms, sent.max_catchup,
            sent.start_ms) == ("@daily", "UTC", "skip", "allow", 60_000, 100, None)
    assert sent.spec.seed == int(sid[1:16], 16) and sent.spec.prompt == "a sunrise"
    # The claim answers GET until the projector has written the schedule.
    got = await (await client.get(f"/v1/schedules/{sid}", headers=A)).json()
    assert got["status"] == "accepted" and got["job"]["prompt"] == "a sunrise"


@pytest.mark.parametrize("change, field", [
    ({"timezone": "Europe/Nowhere"}, "timezone"),
    ({"timezone": 5}, "timezone"),
    ({"timezone": {}}, "timezone"),  # unhashable: was a 500 (schemathesis)
    ({"timezone": []}, "timezone"),
    ({"catch_up": {}}, "catch_up"),
    ({"cron": "* * *"}, "cron"),
    ({"cron": "x" * 201}, "cron"),
    ({"cron": None}, "cron"),
    ({"catch_up_grace_seconds": 86_401}, "catch_up_grace_seconds"),
    ({"catch_up_max_runs": True}, "catch_up_max_runs"),
    ({"start_at": -1}, "start_at"),
    ({"overlap": "queue"}, "overlap"),
    ({"job": None}, "job"),
    ({"job": {"prompt": "x", "parents": []}}, "job.parents"),
    ({"job": {"prompt": "x", "resolution": "10x10"}}, "job.resolution"),
    ({"job": {"prompt": "x", "callback_url": "http://127.0.0.1:22/x"}}, "job.callback_url"),
])
async def test_refusals_name_the_field(api, change, field):  # noqa: F811
    client, deps = await api()
    r = await create(client, {**BODY, **change})
    assert r.status == 422, await r.text()
    assert (await r.json())["error"]["field"] == field
    assert deps.commands.sent == []


def test_the_document_states_the_rules_the_gateway_applies():
    body = document()["paths"]["/v1/schedules"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    props = body["properties"]
    assert body["required"] == ["cron", "job"] and body["additionalProperties"] is False
    # null: the default (None last in each enum)
    assert props["catch_up"]["enum"] == [*(p.value for p in MissedPolicy), None]
    assert props["overlap"]["enum"] == [*OverlapPolicy.ALL, None]
    assert "Europe/Paris" in props["timezone"]["enum"] and "Mars/Olympus" not in props["timezone"]["enum"]
    assert props["catch_up_grace_seconds"]["maximum"] == sched.MAX_GRACE_S
    assert props["catch_up_max_runs"]["maximum"] == sched.MAX_CATCH_UP_RUNS
    assert set(sched.NOT_IN_TEMPLATE).isdisjoint(props["job"]["properties"])
    assert set(body["properties"]) == sched.KNOWN
    ops = document()["paths"]["/v1/schedules/{id}"]
    [param] = ops["get"]["parameters"]
    assert param["schema"]["pattern"] == f"^{sched.SCHEDULE_ID.pattern}$"


# -- DELETE: answered once the read model shows it deleted, then the schedule's routes are 404 -----------------

def _projected(sid: str, status: str = "active") -> ScheduleView:
    return ScheduleView(sid, "tenant-a", status, "@daily", "UTC", "skip", 60_000, 100, "allow",
                        {"prompt": "a sunrise"}, 1, 1, None, None, 1)


async def _schedule(client, deps) -> str:
    sid = (await (await create(client, BODY)).json())["schedule_id"]
    deps.reads.schedules[sid] = _projected(sid)
    return sid


async def test_delete_answers_200_once_applied_and_the_schedule_is_gone_after(api):  # noqa: F811
    client, deps = await api()
    sid = await _schedule(client, deps)

    async def scheduler_and_projector():  # apply the DeleteSchedule a moment after it is produced
        while not isinstance(deps.commands.sent[-1], cmd.DeleteSchedule):
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        deps.reads.schedules[sid] = dataclasses.replace(deps.reads.schedules[sid], status="deleted")

    applying = asyncio.create_task(scheduler_and_projector())
    r = await client.delete(f"/v1/schedules/{sid}", headers=A)
    await applying
    assert r.status == 200, await r.text()
    answer = await r.json()
    assert answer["status"] == "deleted" and answer["command_id"] == deps.commands.sent[-1].command_id
    sent = len(deps.commands.sent)
    for method, path in [("GET", ""), ("GET", "/occurrences"), ("DELETE", ""), ("POST", "/pause"),
                         ("POST", "/resume")]:
        r = await client.request(method, f"/v1/schedules/{sid}{path}", headers=A)
        assert r.status == 404, (method, path, r.status)
        error = (await r.json())["error"]
        assert error["code"] == "schedule_deleted" and error["schedule_status"] == "deleted"
    assert len(deps.commands.sent) == sent  # nothing produced for a deleted schedule
    listed = await (await client.get("/v1/schedules", headers=A)).json()
    assert [(s["id"], s["status"]) for s in listed["schedules"]] == [(sid, "deleted")]
    # Another tenant gets the plain not_found: a deleted schedule's existence is the tenant's business.
    r = await client.get(f"/v1/schedules/{sid}", headers={"Authorization": "Bearer key-b"})
    assert r.status == 404 and (await r.json())["error"]["code"] == "not_found"


async def test_delete_answers_202_when_the_scheduler_is_slower_than_the_wait(api):  # noqa: F811
    client, deps = await api(GatewayConfig(schedule_delete_wait_seconds=0.2))
    sid = await _schedule(client, deps)
    started = asyncio.get_running_loop().time()
    r = await client.delete(f"/v1/schedules/{sid}", headers=A)
    assert r.status == 202 and (await r.json())["status"] == "active"
    assert 0.2 <= asyncio.get_running_loop().time() - started < 2
    assert isinstance(deps.commands.sent[-1], cmd.DeleteSchedule)
    # Not applied yet: the schedule still reads as it was (the 202 said so), and another DELETE is taken.
    assert (await client.get(f"/v1/schedules/{sid}", headers=A)).status == 200
    client0, _ = await api(GatewayConfig(schedule_delete_wait_seconds=0), deps=deps)
    assert (await client0.delete(f"/v1/schedules/{sid}", headers=A)).status == 202


def test_the_document_states_the_delete_answers_and_the_deleted_404():
    paths = document()["paths"]
    assert {"200", "202", "404"} <= set(paths["/v1/schedules/{id}"]["delete"]["responses"])
    for path, method in [("/v1/schedules/{id}", "get"), ("/v1/schedules/{id}/occurrences", "get"),
                         ("/v1/schedules/{id}/pause", "post"), ("/v1/schedules/{id}/resume", "post")]:
        described = paths[path][method]["responses"]["404"]["description"]
        assert "schedule_deleted" in described, (path, method)


async def test_a_replayed_create_of_a_deleted_schedule_is_409_not_a_schedule_that_reads_as_gone(api):  # noqa: F811
    client, deps = await api()
    sid = await _schedule(client, deps)
    deps.reads.schedules[sid] = dataclasses.replace(deps.reads.schedules[sid], status="deleted")
    sent = len(deps.commands.sent)
    r = await create(client, BODY)  # the same key and body: a replay
    assert r.status == 409, await r.text()
    error = (await r.json())["error"]
    assert error["code"] == "schedule_deleted" and error["schedule_id"] == sid and "another key" in error["message"]
    assert len(deps.commands.sent) == sent
    assert (await create(client, BODY, key="s2")).status == 202  # another key: a new schedule
