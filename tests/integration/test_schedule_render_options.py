"""A schedule's render options and time limit end to end: POST /v1/schedules on a gateway with a model registry
(real Kafka and Cassandra), the real scheduler process fires an occurrence, and that occurrence's job carries
the template's guidance_scale, negative_prompt, sampler and timeout in its JobSubmitted and in the lease a
worker gets; GET /v1/schedules/{id} shows them from the projected row. An option POST /v1/videos would refuse
is 422 naming `job.<field>`, and nothing reaches the commands topic.

One hourly occurrence half an hour back with catch-up run_once: exactly one occurrence fires at once (the
next is half an hour away)."""

from __future__ import annotations

import time
import uuid
from dataclasses import replace

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer

from spotreel.api.config import GatewayConfig
from spotreel.domain import commands as cmd
from spotreel.domain import events as ev
from spotreel.domain import ids
from spotreel.model_registry import parse
from spotreel.platform.migrate import migrate
from spotreel.services.gateway.app import create_app
from spotreel.services.gateway.wiring import real_deps
from spotreel.services.projector.projection import project
from spotreel.services.projector.store import Store
from spotreel.tenancy import create_tenant
from tests.integration.personalkit import plain
from tests.integration.schedkit import GPU, MODEL, scheduler_plane
from tests.integration.test_gateway_api import auth
from tests.integration.test_gateway_schedules import schedule_commands

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

REGISTRY = parse({"models": {MODEL: {"directory": "/m/tiny", "family": "unet3d",
                                     "sizes": {"multiple": 8, "min": 16, "max": 512}, "frames": {"max": 64},
                                     "steps": {"max": 50}}}})
OPTIONS = {"guidance_scale": 4.5, "negative_prompt": "blurry, text", "sampler": "dpmpp"}
MINUTE, HOUR = 60_000, 3_600_000


@pytest.fixture
def plane(settings, unique, cql, tmp_path):
    s = replace(settings, topic_prefix=f"test.{unique}", cassandra_keyspace=unique, partitions=2)
    migrate(cql, unique, say=lambda *_: None)
    with scheduler_plane(s, tmp_path) as (_, bus):
        yield s, bus


@pytest_asyncio.fixture(loop_scope="function")
async def gw(plane, cql):
    s, bus = plane
    key = create_tenant(cql, "alpha", rate_per_minute=60)
    with real_deps(s, session=cql) as deps:
        client = TestClient(TestServer(create_app(s, deps, GatewayConfig(models=REGISTRY))))
        await client.start_server()
        try:
            yield client, key, s, bus
        finally:
            await client.close()


async def test_an_occurrence_job_carries_the_schedules_render_options(gw, cql):
    client, key, s, bus = gw
    upcoming = (int(time.time() * 1000) // MINUTE + 30) * MINUTE
    body = {"cron": f"{(upcoming // MINUTE) % 60} * * * *", "catch_up": "run_once", "start_at": upcoming - HOUR - 1,
            "job": {"prompt": "dawn over the bay", "model": MODEL, "gpu_type": GPU, "resolution": "64x64",
                    "num_steps": 4, "timeout_seconds": 600, **OPTIONS}}

    # Refused as POST /v1/videos refuses them (the registry's family samplers included): 422, nothing sent.
    for change, field in (({"sampler": "flow_euler"}, "job.sampler"), ({"guidance_scale": 0.5}, "job.guidance_scale"),
                          ({"negative_prompt": 7}, "job.negative_prompt"), ({"timeout_seconds": 0}, "job.timeout_seconds")):
        bad = {**body, "job": {**body["job"], **change}}
        r = await client.post("/v1/schedules", json=bad, headers=auth(key, "bad-" + field))
        error = (await r.json())["error"]
        assert r.status == 422 and error["field"] == field, error
        assert schedule_commands(s, ids.schedule_id_for("alpha", "bad-" + field)) == []

    r = await client.post("/v1/schedules", json=body, headers=auth(key, "dawn"))
    assert r.status == 202, await r.text()
    sid = (await r.json())["schedule_id"]
    # (The scheduler's own FireOccurrence commands share the schedule's key.)
    [create] = [plain(s, cql, c) for c in schedule_commands(s, sid) if isinstance(c, cmd.CreateSchedule)]
    assert ({k: getattr(create.spec, k) for k in OPTIONS}, create.timeout_ms) == (OPTIONS, 600_000)

    fired = bus.wait_for(lambda: [e for e in bus.events if isinstance(e, ev.OccurrenceFired) and e.schedule_id == sid],
                         40, "the occurrence fired by the scheduler")
    assert [f.occurrence_ms for f in fired] == [upcoming - HOUR]
    # Sealed under the schedule's data key, which its occurrences' jobs share.
    submitted = plain(s, cql, bus.wait_event(fired[0].job_id, ev.JobSubmitted))
    assert (submitted.schedule_id, submitted.occurrence_ms) == (sid, upcoming - HOUR)
    assert ({k: getattr(submitted.spec, k) for k in OPTIONS}, submitted.timeout_ms) == (OPTIONS, 600_000)
    bus.wait_event(fired[0].job_id, ev.JobQueued)
    lease = bus.request_work("w-" + uuid.uuid4().hex[:6], model=MODEL)
    assert isinstance(lease, ev.WorkAssigned) and lease.job_id == fired[0].job_id, lease
    assert {k: getattr(plain(s, cql, lease).spec, k) for k in OPTIONS} == OPTIONS

    # The projector's rows of the schedule's events, read back through GET.
    created = next(e for e in bus.events if isinstance(e, ev.ScheduleCreated) and e.schedule_id == sid)
    Store(cql).write(project(None, created)[1])
    view = await (await client.get(f"/v1/schedules/{sid}", headers=auth(key))).json()
    assert view["status"] == "active", view
    assert {k: view["job"][k] for k in (*OPTIONS, "timeout_seconds")} == {**OPTIONS, "timeout_seconds": 600}
