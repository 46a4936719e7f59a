"""The worker API's own rules, without servers: worker credentials, no read of the job on a lease holder's
command (the scheduler's verdict judges it), 503 without a dispatch connection."""

from __future__ import annotations

import pytest_asyncio
from aiohttp.test_utils import TestClient, TestServer

from spotreel.services.gateway.app import create_app
from spotreel.config.settings import Settings
from tests.unit.gateway_fakes import WORKER_KEY, fake_deps, job_view

JOB = "j" + "1" * 32
W = {"Authorization": f"Bearer {WORKER_KEY}"}


@pytest_asyncio.fixture(loop_scope="function")
async def client():
    deps = fake_deps()
    deps.reads.jobs[JOB] = job_view(JOB, "tenant-a", "running", lease_epoch=3, worker_id="w-new")
    c = TestClient(TestServer(create_app(Settings(), deps)))
    await c.start_server()
    try:
        yield c, deps
    finally:
        await c.close()


async def test_a_lease_holders_command_reads_nothing_and_goes_to_the_scheduler(client):
    # The read model says epoch 3; a command under epoch 2 is not refused here (that was one Cassandra read per
    # worker request): it goes on to be judged, so this gateway without a dispatch link answers 503.
    c, deps = client

    async def no_reads(job_id):
        raise AssertionError(f"read {job_id} on a worker's command")

    deps.reads.get_job = no_reads
    for action, extra in (("complete", {"artifact_key": "k", "artifact_checksum": "c", "artifact_size_bytes": 1}),
                          ("heartbeat", {}), ("progress", {"step": 1, "progress_pct": 5.0})):
        r = await c.post(f"/internal/leases/{JOB}/{action}", headers=W, json={"epoch": 2, "worker_id": "w-old",
                                                                            **extra})
        assert r.status == 503 and (await r.json())["error"]["code"] == "dispatch_unavailable", action


async def test_credentials_and_no_dispatch(client):
    c, deps = client
    assert (await c.post(f"/internal/leases/{JOB}/heartbeat", json={"epoch": 3, "worker_id": "w"},
                         headers={"Authorization": "Bearer key-a"})).status == 401  # a tenant key
    assert (await c.get("/v1/videos", headers=W)).status == 401
    r = await c.post(f"/internal/leases/{JOB}/heartbeat", json={"epoch": 3, "worker_id": "w-new"}, headers=W)
    assert r.status == 503 and (await r.json())["error"]["code"] == "dispatch_unavailable"
    reg = await c.post("/internal/workers/w-1/register", json={"gpu_type": "cpu", "models": ["tiny-t2v"]},
                       headers=W)
    assert reg.status == 200 and (await reg.json())["heartbeat_seconds"] > 0
    assert (await c.post("/internal/workers/bad id!/register", json={}, headers=W)).status in (404, 422)


async def test_numbers_outside_what_the_records_can_hold_are_422_not_500(client):
    # Found by the schemathesis run: an epoch beyond an Avro long reached the codec and answered 500.
    c, deps = client
    for body in ({"epoch": 2**64, "worker_id": "w"}, {"epoch": -1, "worker_id": "w"}):
        r = await c.post(f"/internal/leases/{JOB}/heartbeat", json=body, headers=W)
        assert r.status == 422 and (await r.json())["error"]["field"] == "epoch"
    r = await c.post(f"/internal/leases/{JOB}/progress", headers=W, data='{"epoch": 3, "worker_id": "w", '
                     '"step": 1, "progress_pct": NaN}', )
    assert r.status == 422 and (await r.json())["error"]["field"] == "progress_pct"
    r = await c.post(f"/internal/leases/{JOB}/progress", headers=W,
                     json={"epoch": 3, "worker_id": "w", "step": 1, "progress_pct": 10**400})
    assert r.status == 422 and (await r.json())["error"]["field"] == "progress_pct"
    r = await c.post("/v1/videos", json={"prompt": "x", "duration": 10**400}, headers={"Authorization": "Bearer key-a"})
    assert r.status == 422 and (await r.json())["error"]["field"] == "duration"
    assert deps.commands.sent == []


async def test_checkpoint_duration_ms_is_optional_and_bounded(client):
    c, deps = client
    base = {"epoch": 3, "worker_id": "w-new", "checkpoint_key": "ck/1", "step": 1, "progress_pct": 5.0,
            "checksum": "c", "size_bytes": 1}
    for bad in (-1, 24 * 3600 * 1000 + 1, 2**64, 2.5, False, "7", [7]):
        r = await c.post(f"/internal/leases/{JOB}/checkpoint", json={**base, "duration_ms": bad}, headers=W)
        assert r.status == 422, bad
        assert (await r.json())["error"]["field"] == "duration_ms"
    assert deps.commands.sent == []
    # Valid (0, a day, absent, null): past validation, so this gateway without a dispatch link says 503.
    for ok in ({"duration_ms": 0}, {"duration_ms": 24 * 3600 * 1000}, {}, {"duration_ms": None}):
        r = await c.post(f"/internal/leases/{JOB}/checkpoint", json={**base, **ok}, headers=W)
        assert r.status == 503, ok


async def test_whole_numbers_are_integers_and_command_id_is_a_string_or_absent(client):
    # Found by `schemathesis --checks all` on the worker API: `"epoch": 3.0` (an integer to JSON Schema and to
    # /openapi.json) was 422, and a command_id of {} or 0 passed as "absent".
    c, _ = client
    r = await c.post(f"/internal/leases/{JOB}/heartbeat", headers=W, data='{"epoch": 3.0, "worker_id": "w"}')
    assert r.status == 503  # past validation: judged by the scheduler, which this gateway cannot reach
    for bad in ({}, 0, False, []):
        r = await c.post(f"/internal/leases/{JOB}/heartbeat", headers=W,
                         json={"epoch": 3, "worker_id": "w", "command_id": bad})
        assert r.status == 422 and (await r.json())["error"]["field"] == "command_id", bad
    for absent in (None, ""):
        r = await c.post(f"/internal/leases/{JOB}/heartbeat", headers=W,
                         json={"epoch": 3, "worker_id": "w", "command_id": absent})
        assert r.status == 503, absent
    r = await c.post(f"/internal/leases/{JOB}/heartbeat", headers=W, data="[" * 5000)  # deeper than the parser recurses: was a 500
    assert r.status == 400


async def test_a_poll_without_a_profile_from_a_worker_that_never_registered_is_a_409(client):
    """The body is well formed (gpu_type and models may be left out once registered): what is missing is the
    worker's registration, a conflict with its state, answered before any dispatch."""
    c, _ = client
    for body, missing in (({}, ["gpu_type", "models"]), ({"models": ["tiny-t2v"]}, ["gpu_type"]),
                          ({"gpu_type": "cpu", "wait_seconds": 0}, ["models"])):
        r = await c.post("/internal/workers/w-never/lease", json=body, headers=W)
        err = (await r.json())["error"]
        assert (r.status, err["code"], err["missing"]) == (409, "worker_not_registered", missing), err
    r = await c.post("/internal/workers/w-never/lease", json={"models": "tiny-t2v"}, headers=W)
    assert r.status == 422 and (await r.json())["error"]["field"] == "models"  # malformed stays 422
