"""The gateway against the real Kafka and Cassandra: 202 only once the SubmitJob is on the topic, no 404
after a 202 (and the projector's rows outrank the placeholder), idempotent resubmission, tenant isolation,
401 and 429. Per-test topic prefix and keyspace."""

from __future__ import annotations

from dataclasses import replace

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer

from spotreel.domain import commands as cmd
from spotreel.domain import ids
from spotreel.domain.decide import decide
from spotreel.domain.evolve import fold
from spotreel.services.gateway.app import create_app
from spotreel.services.gateway.cassandra_store import CassandraReads
from spotreel.api.config import GatewayConfig
from spotreel.tenancy import create_tenant
from spotreel.services.gateway.wiring import real_deps
from spotreel.services.projector.projection import project
from spotreel.services.projector.store import Store
from tests.integration.personalkit import plain
from tests.integration.gatewaykit import commands_keyed, own_topics_and_keyspace

BODY = {"prompt": "a red fox in snow", "duration": 2, "fps": 8, "seed": 7}


@pytest.fixture
def gw_settings(settings, unique, cql):
    with own_topics_and_keyspace(settings, unique, cql) as s:
        yield s


@pytest_asyncio.fixture(loop_scope="function")
async def gw(gw_settings, cql):
    keys = {"a": create_tenant(cql, "alpha", rate_per_minute=60), "b": create_tenant(cql, "beta")}
    with real_deps(gw_settings, session=cql) as deps:
        client = TestClient(TestServer(create_app(gw_settings, deps, GatewayConfig(default_burst=3))))
        await client.start_server()
        try:
            yield client, keys
        finally:
            await client.close()


def auth(key: str, idem: str | None = None) -> dict[str, str]:
    h = {"Authorization": f"Bearer {key}"}
    if idem:
        h["Idempotency-Key"] = idem
    return h


def commands_for(settings, job_id: str) -> list[cmd.SubmitJob]:
    return commands_keyed(settings, job_id)


def project_into(cql, commands: list, now_ms: int):
    """What the scheduler and projector would do: decide each command, project the accepted events."""
    state, store = None, Store(cql)
    for c in commands:
        for event in decide(state, c, now_ms):
            state, ops = project(state, event)
            store.write(ops)
    return state


async def test_submit_is_on_the_topic_when_202_and_get_never_404(gw, gw_settings, cql):
    client, keys = gw
    r = await client.post("/v1/videos", json=BODY, headers=auth(keys["a"], "idem-1"))
    assert r.status == 202, await r.text()
    body = await r.json()
    job_id = body["job_id"]
    assert job_id == ids.job_id_for("alpha", "idem-1")
    # The 202 means the broker has it: read it back at once, no waiting.
    [submit] = commands_for(gw_settings, job_id)
    assert isinstance(submit, cmd.SubmitJob) and submit.tenant == "alpha" and submit.spec.prompt != BODY["prompt"]
    assert plain(gw_settings, cql, submit).spec.prompt == BODY["prompt"]  # sealed on the topic

    got = await client.get(f"/v1/videos/{job_id}", headers=auth(keys["a"]))
    assert got.status == 200 and (await got.json())["status"] == "accepted"

    # The projector's rows (timestamp = event version) win over the placeholder (timestamp 0), even when
    # the placeholder is written again afterwards (a retried POST).
    state = project_into(cql, [submit], submit.run_at_ms or 1_700_000_000_000)
    await CassandraReads(cql).write_placeholder((await CassandraReads(cql).get_claim(job_id)))
    view = await (await client.get(f"/v1/videos/{job_id}", headers=auth(keys["a"]))).json()
    assert view["status"] == state.status == "queued" and view["version"] == state.version
    listed = await (await client.get("/v1/videos", headers=auth(keys["a"]))).json()
    assert [v["id"] for v in listed["videos"]] == [job_id]
    events = await (await client.get(f"/v1/videos/{job_id}/events", headers=auth(keys["a"]))).json()
    assert [e["type"] for e in events["events"]] == ["JobSubmitted", "JobQueued"]


async def test_idempotent_resubmission_and_conflict(gw, gw_settings, cql):
    client, keys = gw
    first = await (await client.post("/v1/videos", json=BODY, headers=auth(keys["a"], "same"))).json()
    again = await client.post("/v1/videos", json=BODY, headers=auth(keys["a"], "same"))
    assert again.status == 202 and (await again.json())["job_id"] == first["job_id"]
    assert first["replayed"] is False and (await again.json())["replayed"] is True  # told by the LWT's answer
    produced = commands_for(gw_settings, first["job_id"])
    assert len(produced) == 2 and produced[0].request_hash == produced[1].request_hash
    state = fold(decide(None, produced[0], 1_700_000_000_000))
    assert decide(state, produced[1], 1_700_000_000_001) == ()  # the domain ignores the duplicate

    other = await client.post("/v1/videos", json={**BODY, "seed": 8}, headers=auth(keys["a"], "same"))
    assert other.status == 409 and (await other.json())["error"]["code"] == "idempotency_key_reused"
    assert len(commands_for(gw_settings, first["job_id"])) == 2


async def test_the_claim_answers_with_the_given_claim_only_when_it_wrote_it(gw_settings, cql):
    from spotreel.services.gateway.deps import Claim

    reads = CassandraReads(cql)
    mine = Claim(job_id="j" + "c" * 32, tenant_id="t", idempotency_key="k", request_hash="h1", accepted_at_ms=1_000,
                 model="m", pool="p", priority=0, prompt="x", params={})
    assert await reads.claim(mine) is mine
    later = replace(mine, request_hash="h2", accepted_at_ms=2_000)
    held = await reads.claim(later)
    assert held is not later and held == mine  # the older claim, read back whole
    assert await reads.get_claim(mine.job_id) == mine


async def test_isolation_auth_and_rate_limit(gw, gw_settings):
    client, keys = gw
    job_id = (await (await client.post("/v1/videos", json=BODY, headers=auth(keys["a"], "iso"))).json())["job_id"]
    for method, path in [("GET", ""), ("POST", "/cancel"), ("GET", "/events"), ("POST", "/pause")]:
        r = await client.request(method, f"/v1/videos/{job_id}{path}", headers=auth(keys["b"]))
        assert r.status == 404, (method, path)
    assert (await client.get("/v1/videos", headers=auth(keys["b"]))).status == 200
    assert (await (await client.get("/v1/videos", headers=auth(keys["b"]))).json())["videos"] == []
    r = await client.get(f"/v1/videos/{job_id}", headers=auth("sr_not_a_key"))
    assert r.status == 401 and (await r.json())["error"]["code"] == "unauthorized"

    # alpha: 60/minute, burst 3; one token already spent above.
    statuses = [(await client.post("/v1/videos", json=BODY, headers=auth(keys["a"], f"burst-{i}"))).status
                for i in range(2)]
    assert statuses == [202, 202]
    r = await client.post("/v1/videos", json=BODY, headers=auth(keys["a"], "burst-x"))
    assert r.status == 429 and int(r.headers["Retry-After"]) >= 1
    # a replay is never rate limited: the refusal looks the key up and answers the job it holds
    replay = await client.post("/v1/videos", json=BODY, headers=auth(keys["a"], "iso"))
    body = await replay.json()
    assert replay.status == 202 and body["job_id"] == job_id and body["replayed"] is True
    assert (await r.json())["error"]["code"] == "rate_limited"
    assert commands_for(gw_settings, ids.job_id_for("alpha", "burst-x")) == []
