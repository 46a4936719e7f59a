"""POST /v1/videos's retry and time policy (timeout_seconds, max_attempts, backoff_*_seconds) against the
in-memory fakes: the SubmitJob produced, 422 naming the field and the limit, hashing, the job view, schedule
templates, and the OpenAPI document agreeing with the gateway's limits."""

from __future__ import annotations

import pytest

from spotreel.domain import commands as cmd
from spotreel.domain import limits
from spotreel.domain.decide import submission_problem
from spotreel.services.gateway.openapi import document
from spotreel.api.submission import POLICY_LIMITS
from tests.unit.gateway_fakes import with_status
from tests.unit.test_gateway_api import A, BODY, api, post  # noqa: F401  (api: the fixture)

pytestmark = pytest.mark.unit

POLICY = {"timeout_seconds": 600, "max_attempts": 3, "backoff_base_seconds": 10, "backoff_max_seconds": 60}


async def test_the_policy_reaches_the_submitjob_and_the_domain_accepts_it(api):  # noqa: F811
    client, deps = await api()
    r = await post(client, {**BODY, **POLICY})
    assert r.status == 202, await r.text()
    [sent] = deps.commands.sent
    assert isinstance(sent, cmd.SubmitJob)
    assert (sent.timeout_ms, sent.max_attempts, sent.backoff_base_ms, sent.backoff_max_ms) == (
        600_000, 3, 10_000, 60_000)
    assert submission_problem(sent) is None


async def test_without_the_fields_the_defaults_apply_and_the_hash_is_unchanged(api):  # noqa: F811
    client, deps = await api()
    await post(client, BODY, key="k1")
    spelled = {**BODY, "timeout_seconds": None, "max_attempts": 5, "backoff_base_seconds": 2,
               "backoff_max_seconds": 300}
    r = await post(client, spelled, key="k1")
    assert r.status == 202 and (await r.json())["replayed"] is True
    first, second = deps.commands.sent
    assert first.request_hash == second.request_hash
    assert (first.timeout_ms, first.max_attempts, first.backoff_base_ms, first.backoff_max_ms) == (
        None, 5, 2_000, 300_000)
    # Another policy is another request under the same key.
    assert (await post(client, {**BODY, "max_attempts": 2}, key="k1")).status == 409


@pytest.mark.parametrize(("change", "field", "limit"), [
    ({"timeout_seconds": 0}, "timeout_seconds", "between 1 and 604800"),
    ({"timeout_seconds": 604801}, "timeout_seconds", "between 1 and 604800"),
    ({"timeout_seconds": 1.5}, "timeout_seconds", "integer"),
    ({"max_attempts": 0}, "max_attempts", f"between 1 and {limits.MAX_ATTEMPTS}"),
    ({"max_attempts": 21}, "max_attempts", f"between 1 and {limits.MAX_ATTEMPTS}"),
    ({"max_attempts": True}, "max_attempts", "integer"),
    ({"backoff_base_seconds": -1}, "backoff_base_seconds", "between 0 and 86400"),
    ({"backoff_max_seconds": 86401}, "backoff_max_seconds", "between 0 and 86400"),
])
async def test_limits_are_422_naming_the_field_and_the_limit(api, change, field, limit):  # noqa: F811
    client, deps = await api()
    r = await post(client, {**BODY, **change})
    assert r.status == 422
    err = (await r.json())["error"]
    assert err["field"] == field and limit in err["message"], err
    assert deps.commands.sent == []


@pytest.mark.parametrize(("given", "base_ms", "max_ms"), [
    ({"backoff_base_seconds": 30, "backoff_max_seconds": 20}, 20_000, 20_000),  # the max caps: every delay 20 s
    ({"backoff_max_seconds": 1}, 1_000, 1_000),  # below the default base
    ({"backoff_base_seconds": 400}, 400_000, 400_000),  # a base alone above the default max raises the max
    ({"backoff_base_seconds": 0, "backoff_max_seconds": 0}, 0, 0),
    ({"backoff_base_seconds": 5}, 5_000, 300_000),
])
async def test_the_backoff_max_caps_the_base_and_a_max_left_out_never_cuts_a_given_base(
        api, given, base_ms, max_ms):  # noqa: F811
    client, deps = await api()
    r = await post(client, {**BODY, **given})
    assert r.status == 202, await r.text()
    [sent] = deps.commands.sent
    assert (sent.backoff_base_ms, sent.backoff_max_ms) == (base_ms, max_ms)
    assert submission_problem(sent) is None  # the domain's base <= max holds


async def test_the_job_view_shows_the_policy(api):  # noqa: F811
    client, deps = await api()
    job_id = (await (await post(client, {**BODY, **POLICY})).json())["job_id"]
    with_status(deps, job_id, "running", max_attempts=3,
                params={"timeout_ms": 600_000, "backoff_base_ms": 10_000, "backoff_max_ms": 60_000,
                        "stuck_steps": 10, "stuck_min_ms": 120_000})
    got = (await (await client.get(f"/v1/videos/{job_id}", headers=A)).json())["limits"]
    assert got == {"timeout_seconds": 600, "max_attempts": 3, "backoff_base_seconds": 10,
                   "backoff_max_seconds": 60, "stuck_steps": 10, "stuck_min_seconds": 120}


async def test_a_schedule_template_carries_the_retry_policy_and_the_timeout(api):  # noqa: F811
    client, deps = await api()
    body = {"cron": "0 * * * *", "job": {"prompt": "p", "max_attempts": 2, "backoff_base_seconds": 1}}
    r = await client.post("/v1/schedules", json=body, headers={**A, "Idempotency-Key": "s1"})
    assert r.status == 202, await r.text()
    sent = deps.commands.sent[-1]
    assert isinstance(sent, cmd.CreateSchedule) and (sent.max_attempts, sent.backoff_base_ms) == (2, 1_000)
    assert sent.timeout_ms is None
    body["job"]["timeout_seconds"] = 60
    r = await client.post("/v1/schedules", json=body, headers={**A, "Idempotency-Key": "s2"})
    assert r.status == 202, await r.text()
    assert deps.commands.sent[-1].timeout_ms == 60_000
    body["job"]["timeout_seconds"] = 0
    r = await client.post("/v1/schedules", json=body, headers={**A, "Idempotency-Key": "s3"})
    assert r.status == 422 and (await r.json())["error"]["field"] == "job.timeout_seconds"


def test_the_document_states_the_gateways_limits():
    doc = document()
    props = doc["components"]["schemas"]["SubmitVideo"]["properties"] if "SubmitVideo" in doc["components"].get(
        "schemas", {}) else doc["paths"]["/v1/videos"]["post"]["requestBody"]["content"]["application/json"][
        "schema"]["properties"]
    for name, (lo, hi) in POLICY_LIMITS.items():
        assert (props[name]["minimum"], props[name]["maximum"]) == (lo, hi), name
    assert props["timeout_seconds"]["type"] == ["integer", "null"]
    video = doc["components"]["schemas"]["Video"]["properties"]
    assert set(video["limits"]["properties"]) == {"timeout_seconds", "max_attempts", "backoff_base_seconds",
                                                  "backoff_max_seconds", "stuck_steps", "stuck_min_seconds"}


def test_the_projector_keeps_the_policy_in_params():
    import json

    from spotreel.services.projector.job_rows import params_json
    from tests.unit.jobkit import Driver

    d = Driver()
    d.submit(timeout_ms=600_000, stuck_steps=4, stuck_min_ms=30_000, backoff_base_ms=1_000)
    params = json.loads(params_json(d.s))
    assert (params["timeout_ms"], params["stuck_steps"], params["stuck_min_ms"], params["backoff_base_ms"]) == (
        600_000, 4, 30_000, 1_000)
