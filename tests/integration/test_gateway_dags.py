"""Parents must exist for the tenant (409 unknown_parent naming the missing one), and POST /v1/dags accepts a DAG in
topological order, idempotently, against the real Kafka and Cassandra."""

from __future__ import annotations

from spotreel.domain import ids
from tests.integration import test_gateway_api
from tests.integration.test_gateway_api import BODY, auth, commands_for

# Bound here, not imported by name, so that pytest finds the fixtures in this module and the tests' own
# parameters of the same names do not read as redefinitions of an import.
gw, gw_settings = test_gateway_api.gw, test_gateway_api.gw_settings


async def test_a_child_of_a_missing_or_foreign_parent_is_refused_naming_it(gw, gw_settings):
    client, keys = gw
    missing = ids.job_id_for("alpha", "never-submitted")
    r = await client.post("/v1/videos", json={**BODY, "parents": [missing]}, headers=auth(keys["a"], "child-1"))
    assert r.status == 409
    err = (await r.json())["error"]
    assert (err["code"], err["field"], err["parent"]) == ("unknown_parent", "parents", missing)
    assert missing in err["message"]
    assert commands_for(gw_settings, ids.job_id_for("alpha", "child-1")) == []

    theirs = (await (await client.post("/v1/videos", json=BODY, headers=auth(keys["b"], "p"))).json())["job_id"]
    r = await client.post("/v1/videos", json={**BODY, "parents": [theirs]}, headers=auth(keys["a"], "child-2"))
    assert r.status == 409 and (await r.json())["error"]["parent"] == theirs

    # Accepted a moment ago (claim only, not projected yet) is enough. (Beta: alpha's burst of 3 is spent.)
    r = await client.post("/v1/videos", json={**BODY, "parents": [theirs]}, headers=auth(keys["b"], "child-3"))
    assert r.status == 202, await r.text()
    [child] = commands_for(gw_settings, (await r.json())["job_id"])
    assert child.parents == (theirs,)


async def test_dag_submission_in_topological_order_and_idempotent(gw, gw_settings):
    client, keys = gw
    dag = {"dag_policy": "continue", "nodes": [
        {"key": "final", "prompt": "the cut", "parents": ["intro", "outro"]},
        {"key": "intro", "prompt": "a sunrise"},
        {"key": "outro", "prompt": "a sunset", "parents": ["intro"]},
    ]}
    r = await client.post("/v1/dags", json=dag, headers=auth(keys["b"], "film-1"))
    assert r.status == 202, await r.text()
    body = await r.json()
    assert body["order"] == ["intro", "outro", "final"]
    job = {v["key"]: v["job_id"] for v in body["videos"]}
    assert job == {k: ids.job_id_for("beta", f"film-1/{k}") for k in ("intro", "outro", "final")}
    [final] = commands_for(gw_settings, job["final"])
    assert set(final.parents) == {job["intro"], job["outro"]} and final.dag_policy == "continue"
    [outro] = commands_for(gw_settings, job["outro"])
    assert outro.parents == (job["intro"],)

    again = await (await client.post("/v1/dags", json=dag, headers=auth(keys["b"], "film-1"))).json()
    assert [v["job_id"] for v in again["videos"]] == [v["job_id"] for v in body["videos"]]
    assert all(v["replayed"] for v in again["videos"])

    cyclic = {"nodes": [{"key": "a", "prompt": "x", "parents": ["b"]}, {"key": "b", "prompt": "y", "parents": ["a"]}]}
    r = await client.post("/v1/dags", json=cyclic, headers=auth(keys["b"], "loop"))
    assert r.status == 422
    err = (await r.json())["error"]
    assert err["code"] == "invalid_dag" and set(err["cycle"]) == {"a", "b"}
    assert commands_for(gw_settings, ids.job_id_for("beta", "loop/a")) == []

    r = await client.post("/v1/dags", json={"nodes": [{"key": "z", "prompt": "x", "parents": ["nope"]}]},
                          headers=auth(keys["b"], "bad"))
    assert r.status == 422 and (await r.json())["error"]["field"] == "nodes[0].parents"
