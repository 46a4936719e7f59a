"""/v1/schedules against the real Kafka and Cassandra: POST produces a CreateSchedule (IANA zone, policies,
template), is idempotent per key and body, GET answers "accepted" until the projector's rows exist and then
the projected schedule; occurrences list fired jobs (with their video ids and outcomes) and skipped ones;
pause/resume/delete produce their commands (DELETE answers 200 once the read model shows it deleted, and the
schedule's routes are 404 after it); 422 names the field; other tenants get 404."""

from __future__ import annotations

import asyncio
import time

from spotreel.domain import commands as cmd
from spotreel.domain import ids
from spotreel.domain.schedules import decide_schedule, fold_schedule
from spotreel.services.projector.projection import project
from spotreel.services.projector.store import Store
from tests.integration.personalkit import plain
from tests.integration import test_gateway_api
from tests.integration.gatewaykit import commands_keyed
from tests.integration.test_gateway_api import auth

gw, gw_settings = test_gateway_api.gw, test_gateway_api.gw_settings

HOUR = 3_600_000
T = 1_772_841_600_000  # 2026-03-07 00:00 UTC; New York springs forward on 2026-03-08 at 07:00 UTC
BODY = {"cron": "30 2 * * *", "timezone": "America/New_York", "catch_up": "run_all", "overlap": "skip",
        "job": {"prompt": "dawn over the bay", "fps": 8, "duration": 2, "seed": 5}}


def schedule_commands(settings, schedule_id: str) -> list:
    return commands_keyed(settings, schedule_id)


def next_command(settings, schedule_id: str, kind: type, within_s: float = 20.0):
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        found = [c for c in schedule_commands(settings, schedule_id) if isinstance(c, kind)]
        if found:
            return found[-1]
        time.sleep(0.1)
    raise AssertionError(f"no {kind.__name__} for {schedule_id} on Kafka within {within_s} s")


class Projected:
    """What the scheduler and the projector do with a schedule's commands, at times the test picks."""

    def __init__(self, cql) -> None:
        self.state = None
        self.store = Store(cql)

    def apply(self, command, now_ms: int) -> tuple:
        events = decide_schedule(self.state, command, now_ms)
        self.state = fold_schedule(events, self.state)
        for e in events:
            self.store.write(project(None, e)[1])
        return events


async def test_schedule_lifecycle_over_http(gw, gw_settings, cql):
    client, keys = gw
    r = await client.post("/v1/schedules", json=BODY, headers=auth(keys["a"], "dawn"))
    assert r.status == 202, await r.text()
    answer = await r.json()
    sid = answer["schedule_id"]
    assert sid == ids.schedule_id_for("alpha", "dawn") and answer == {
        "schedule_id": sid, "status": "accepted", "idempotency_key": "dawn", "replayed": False}
    [create] = schedule_commands(gw_settings, sid)
    assert isinstance(create, cmd.CreateSchedule)
    create = plain(gw_settings, cql, create)  # its template's prompt is sealed on the topic
    assert (create.tenant, create.cron, create.timezone, create.missed_policy, create.overlap_policy, create.spec.prompt,
            create.spec.seed, create.spec.fps) == ("alpha", "30 2 * * *", "America/New_York", "run_all", "skip",
                                         "dawn over the bay", 5, 8)

    # Before the projector: the claim answers, never 404.
    got = await (await client.get(f"/v1/schedules/{sid}", headers=auth(keys["a"]))).json()
    assert (got["status"], got["cron"], got["timezone"], got["job"]["prompt"]) == (
        "accepted", "30 2 * * *", "America/New_York", "dawn over the bay")
    again = await client.post("/v1/schedules", json=BODY, headers=auth(keys["a"], "dawn"))
    assert again.status == 202 and (await again.json())["replayed"] is True
    other = await client.post("/v1/schedules", json={**BODY, "overlap": "allow"}, headers=auth(keys["a"], "dawn"))
    assert other.status == 409 and (await other.json())["error"]["code"] == "idempotency_key_reused"

    p = Projected(cql)
    p.apply(create, T)
    view = await (await client.get(f"/v1/schedules/{sid}", headers=auth(keys["a"]))).json()
    assert view["status"] == "active" and view["overlap"] == "skip" and view["catch_up"] == "run_all"
    assert view["next_occurrence_at"] == "2026-03-07T07:30:00.000Z"  # 02:30 EST
    # 2026-03-07 02:30 EST fires; 2026-03-08 02:30 does not exist: 03:00 EDT, skipped (the first still runs).
    p.apply(cmd.FireOccurrence("f1", sid), T + 7 * HOUR + HOUR // 2)
    p.apply(cmd.FireOccurrence("f2", sid), T + 31 * HOUR)
    first = T + 7 * HOUR + HOUR // 2
    p.apply(cmd.EndOccurrence("e1", sid, first, "succeeded"), T + 32 * HOUR)
    occ = await (await client.get(f"/v1/schedules/{sid}/occurrences", headers=auth(keys["a"]))).json()
    assert occ["occurrences"] == [
        {"occurrence_at": "2026-03-08T07:00:00.000Z", "status": "skipped",
         "last_occurrence_at": "2026-03-08T07:00:00.000Z", "reason": "overlap"},
        {"occurrence_at": "2026-03-07T07:30:00.000Z", "status": "succeeded",
         "job_id": ids.job_id_for_occurrence("alpha", sid, first), "fired_at": "2026-03-07T07:30:00.000Z",
         "ended_at": "2026-03-08T08:00:00.000Z", "late": False},
    ]
    page = await (await client.get(f"/v1/schedules/{sid}/occurrences?limit=1", headers=auth(keys["a"]))).json()
    assert len(page["occurrences"]) == 1 and page["next_page_token"]
    rest = await (await client.get(f"/v1/schedules/{sid}/occurrences?limit=1&page_token={page['next_page_token']}",
                                   headers=auth(keys["a"]))).json()
    assert rest["occurrences"][0]["status"] == "succeeded"
    listed = await (await client.get("/v1/schedules", headers=auth(keys["a"]))).json()
    assert [s["id"] for s in listed["schedules"]] == [sid]

    # Pause, resume, delete: each a command on the schedule's key, 202; the projected status follows.
    r = await client.post(f"/v1/schedules/{sid}/pause", headers=auth(keys["a"]))
    assert r.status == 202 and (await r.json())["requested"] == "pause"
    pause = schedule_commands(gw_settings, sid)[-1]
    assert isinstance(pause, cmd.PauseSchedule)
    p.apply(pause, T + 33 * HOUR)
    view = await (await client.get(f"/v1/schedules/{sid}", headers=auth(keys["a"]))).json()
    assert view["status"] == "paused" and view["next_occurrence_at"] is None
    # Pausing again is the scheduler's to judge (the read model may lag a resume sent a moment ago).
    assert (await client.post(f"/v1/schedules/{sid}/pause", headers=auth(keys["a"]))).status == 202
    [refused] = p.apply(schedule_commands(gw_settings, sid)[-1], T + 33 * HOUR)
    assert refused.reason == "already_paused"
    assert (await client.post(f"/v1/schedules/{sid}/resume", headers=auth(keys["a"]))).status == 202
    p.apply(schedule_commands(gw_settings, sid)[-1], T + 80 * HOUR)
    view = await (await client.get(f"/v1/schedules/{sid}", headers=auth(keys["a"]))).json()
    assert view["status"] == "active" and view["next_occurrence_at"] == "2026-03-11T06:30:00.000Z"  # 02:30 EDT
    occ = await (await client.get(f"/v1/schedules/{sid}/occurrences", headers=auth(keys["a"]))).json()
    assert occ["occurrences"][0]["reason"] == "paused"
    # DELETE waits until the read model shows the schedule deleted (here: the test applies the command it
    # finds on Kafka while the request waits), answers 200, and the schedule's own routes are 404 after it.
    deleting = asyncio.create_task(client.delete(f"/v1/schedules/{sid}", headers=auth(keys["a"])))
    delete = await asyncio.to_thread(next_command, gw_settings, sid, cmd.DeleteSchedule)
    p.apply(delete, T + 81 * HOUR)
    r = await deleting
    assert r.status == 200 and (await r.json())["status"] == "deleted", await r.text()
    for method, path in [("GET", ""), ("GET", "/occurrences"), ("DELETE", ""), ("POST", "/pause"),
                         ("POST", "/resume")]:
        r = await client.request(method, f"/v1/schedules/{sid}{path}", headers=auth(keys["a"]))
        assert r.status == 404 and (await r.json())["error"]["code"] == "schedule_deleted", (method, path)
    listed = await (await client.get("/v1/schedules", headers=auth(keys["a"]))).json()
    assert [(s["id"], s["status"]) for s in listed["schedules"]] == [(sid, "deleted")]

    # Another tenant sees nothing; malformed ids are 404 too.
    for method, path in [("GET", ""), ("DELETE", ""), ("GET", "/occurrences"), ("POST", "/pause")]:
        assert (await client.request(method, f"/v1/schedules/{sid}{path}", headers=auth(keys["b"]))).status == 404
    assert (await client.get("/v1/schedules/nope", headers=auth(keys["a"]))).status == 404
    assert (await (await client.get("/v1/schedules", headers=auth(keys["b"]))).json())["schedules"] == []


async def test_invalid_schedules_are_422_naming_the_field(gw, gw_settings):
    client, keys = gw
    cases = [
        ({"timezone": "Mars/Olympus"}, "timezone"),
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "H * * * *"}, "cron"),
        ({"overlap": "sometimes"}, "overlap"),
        ({"catch_up": "always"}, "catch_up"),
        ({"catch_up_max_runs": 0}, "catch_up_max_runs"),
        ({"job": {**BODY["job"], "run_at": 5}}, "job.run_at"),
        ({"job": {**BODY["job"], "fps": 0}}, "job.fps"),
        ({"job": {"fps": 8}}, "job.prompt"),
        ({"every": "day"}, "every"),
    ]
    for i, (change, field) in enumerate(cases):
        r = await client.post("/v1/schedules", json={**BODY, **change}, headers=auth(keys["b"], f"bad-{i}"))
        assert r.status == 422, (change, await r.text())
        assert (await r.json())["error"]["field"] == field, change
        assert schedule_commands(gw_settings, ids.schedule_id_for("beta", f"bad-{i}")) == []
    r = await client.get("/v1/schedules?limit=0", headers=auth(keys["b"]))
    assert r.status == 422 and (await r.json())["error"]["field"] == "limit"
    r = await client.get("/v1/schedules?page_token=abc", headers=auth(keys["b"]))
    assert r.status == 422 and (await r.json())["error"]["field"] == "page_token"
