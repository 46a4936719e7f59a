"""A tenant's plan at the gateway (domain/plans.py), against the in-memory fakes: a priority above the plan's
highest is refused with 403 on POST /v1/videos, POST /v1/dags and PATCH, and nothing is produced; a tenant
without a ceiling (made before plans) may use every tier."""

from __future__ import annotations

import pytest

from spotreel.domain import commands as cmd
from spotreel.domain import ids
from spotreel.services.gateway.deps import Tenant
from tests.unit.gateway_fakes import fake_deps, job_view
from tests.unit.test_gateway_api import A, BODY, api, post  # noqa: F401  (api: the fixture)

pytestmark = pytest.mark.unit


def free(deps) -> None:
    deps.auth.tenants["tenant-a"] = Tenant("tenant-a", max_priority=4, plan="free")


async def test_submit_above_the_plans_priority_is_403_and_nothing_is_produced(api):  # noqa: F811
    deps = fake_deps()
    free(deps)
    client, _ = await api(deps=deps)
    r = await post(client, {**BODY, "priority": 5})
    assert r.status == 403, await r.text()
    error = (await r.json())["error"]
    assert (error["code"], error["field"], error["max_priority"]) == ("priority_not_allowed", "priority", 4)
    assert "free" in error["message"]
    assert deps.commands.sent == []
    r = await post(client, {**BODY, "priority": 4}, key="k2")
    assert r.status == 202
    [sent] = deps.commands.sent
    assert isinstance(sent, cmd.SubmitJob) and sent.priority == 4


async def test_a_tenant_without_a_ceiling_may_use_every_tier(api):  # noqa: F811
    client, deps = await api()
    assert (await post(client, {**BODY, "priority": 9})).status == 202


async def test_dag_nodes_are_held_to_the_plan(api):  # noqa: F811
    deps = fake_deps()
    free(deps)
    client, _ = await api(deps=deps)
    dag = {"nodes": [{"key": "a", **BODY, "priority": 1}, {"key": "b", **BODY, "priority": 8, "parents": ["a"]}]}
    r = await client.post("/v1/dags", json=dag, headers={**A, "Idempotency-Key": "d1"})
    assert r.status == 403 and (await r.json())["error"]["code"] == "priority_not_allowed"
    assert deps.commands.sent == []


async def test_patch_above_the_plans_priority_is_403(api):  # noqa: F811
    deps = fake_deps()
    free(deps)
    client, _ = await api(deps=deps)
    job = ids.job_id_for("tenant-a", "x")
    deps.reads.jobs[job] = job_view(job, "tenant-a")
    r = await client.patch(f"/v1/videos/{job}", json={"priority": 9}, headers=A)
    assert r.status == 403 and (await r.json())["error"]["code"] == "priority_not_allowed"
    assert deps.commands.sent == []
    r = await client.patch(f"/v1/videos/{job}", json={"priority": 3}, headers=A)
    assert r.status == 202, await r.text()
    [sent] = deps.commands.sent
    assert isinstance(sent, cmd.Reprioritize) and sent.priority == 3
