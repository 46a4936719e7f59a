"""`spotreel schedule create/list/get/occurrences/pause/resume/delete` as real processes against a real
gateway (real Kafka and Cassandra, per-test prefix and keyspace); the commands the CLI sent are read back
from the commands topic and decided, their events projected, so each step checks what was sent and shown."""

from __future__ import annotations

import asyncio
import json

import pytest

from spotreel.domain import commands as c
from spotreel.domain import ids
from tests.integration.personalkit import plain
from tests.integration import test_client_cli
from tests.integration.test_client_cli import spotreel
from tests.integration.test_gateway_schedules import HOUR, T, Projected, next_command, schedule_commands

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

cli_settings, make_server, server = test_client_cli.cli_settings, test_client_cli.make_server, test_client_cli.server


async def test_schedule_commands(server, cli_settings, cql):
    url, key = server
    code, out, err = await spotreel(url, key, "schedule", "create", "0 9 * * MON-FRI", "standup recap",
                                    "--timezone", "Europe/Paris", "--overlap", "cancel_previous",
                                    "--catch-up", "run_once", "--fps", "8", "--idempotency-key", "recap", "--json")
    assert code == 0, err
    answer = json.loads(out)
    sid = answer["schedule_id"]
    assert sid == ids.schedule_id_for("alpha", "recap") and answer["status"] == "accepted"
    [create] = schedule_commands(cli_settings, sid)
    assert (create.cron, create.timezone, create.overlap_policy, create.missed_policy, create.spec.fps) == (
        "0 9 * * MON-FRI", "Europe/Paris", "cancel_previous", "run_once", 8)

    p = Projected(cql)
    p.apply(create, T)  # Saturday 2026-03-07: the next weekday 09:00 Paris is Monday 08:00 UTC
    code, out, err = await spotreel(url, key, "schedule", "get", sid)
    assert code == 0, err
    assert out.startswith(f"{sid}  active") and "Europe/Paris" in out and "2026-03-09T08:00:00.000Z" in out
    code, out, _ = await spotreel(url, key, "schedule", "list", "--json")
    assert [s["id"] for s in json.loads(out)["schedules"]] == [sid]

    p.apply(c.FireOccurrence("f1", sid), T + 56 * HOUR)
    code, out, _ = await spotreel(url, key, "schedule", "occurrences", sid)
    job = ids.job_id_for_occurrence("alpha", sid, T + 56 * HOUR)
    assert code == 0 and out.strip() == f"2026-03-09T08:00:00.000Z  fired         {job}"

    for action, cls in (("pause", c.PauseSchedule), ("resume", c.ResumeSchedule)):
        code, out, err = await spotreel(url, key, "schedule", action, sid, "--json")
        assert code == 0, err
        assert json.loads(out)["requested"] == action
        sent = schedule_commands(cli_settings, sid)[-1]
        assert isinstance(sent, cls)
        p.apply(sent, T + 60 * HOUR)
    # delete waits for the read model to show it deleted: the test applies the command while the CLI waits.
    deleting = asyncio.create_task(spotreel(url, key, "schedule", "delete", sid, "--json"))
    p.apply(await asyncio.to_thread(next_command, cli_settings, sid, c.DeleteSchedule), T + 60 * HOUR)
    code, out, err = await deleting
    assert code == 0 and json.loads(out)["status"] == "deleted", err
    code, out, _ = await spotreel(url, key, "schedule", "list", "--json")
    assert [(s["id"], s["status"]) for s in json.loads(out)["schedules"]] == [(sid, "deleted")]

    # Refusals: exit 1 with the API's error (422 naming the field; 404 for a deleted schedule or an unknown id).
    code, out, err = await spotreel(url, key, "schedule", "create", "0 9 * * *", "x", "--timezone", "Mars/Base",
                                    "--json")
    assert code == 1 and json.loads(out)["error"]["field"] == "timezone" and "422" in err
    for action in ("get", "pause"):
        code, out, err = await spotreel(url, key, "schedule", action, sid, "--json")
        assert code == 1 and "404" in err and json.loads(out)["error"]["code"] == "schedule_deleted"
    code, _, err = await spotreel(url, key, "schedule", "get", "s" + "0" * 32)
    assert code == 1 and "404" in err


async def test_schedule_create_with_render_options(server, cli_settings, cql):
    url, key = server
    code, out, err = await spotreel(url, key, "schedule", "create", "@daily", "dawn", "--guidance-scale", "4.5",
                                    "--negative-prompt", "blurry, text", "--sampler", "dpmpp",
                                    "--idempotency-key", "dawn", "--json")
    assert code == 0, err
    sid = json.loads(out)["schedule_id"]
    [create] = schedule_commands(cli_settings, sid)
    create = plain(cli_settings, cql, create)  # sealed on the topic
    assert (create.spec.guidance_scale, create.spec.negative_prompt, create.spec.sampler) == (4.5, "blurry, text", "dpmpp")
    Projected(cql).apply(create, T)
    code, out, err = await spotreel(url, key, "schedule", "get", sid)
    assert code == 0, err
    assert "(guidance_scale 4.5, negative_prompt 'blurry, text', sampler 'dpmpp')" in out, out
    code, out, _ = await spotreel(url, key, "schedule", "create", "@daily", "dawn", "--sampler", "lms", "--json")
    assert code == 1 and json.loads(out)["error"]["field"] == "job.sampler"
